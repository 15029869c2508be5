// featurize(): dispatch on the task, plus the helpers every featurizer shares
// (parallel encoding, record origins). Per-task logic lives in
// featurize_seq_cls.cpp, featurize_lm.cpp and featurize_qa.cpp.
#include <omp.h>

#include <exception>

#include "core/check.h"
#include "data/featurize_internal.h"

namespace loom {

namespace detail {

std::string record_origin(const Record& r, const FeaturizeOptions& opts) {
    std::string file;
    if (r.file_index >= 0 && size_t(r.file_index) < opts.files.size())
        file = opts.files[size_t(r.file_index)];
    else
        file = fmt::format("file #{}", r.file_index);
    if (r.line > 0) return fmt::format("{}:{}", file, r.line);
    return fmt::format("{} (record {})", file, r.index + 1);
}

std::vector<tokenizer::Encoding> encode_all_raw(const Tokenizer& tok, const std::vector<EncodeJob>& jobs,
                                                bool add_special_tokens,
                                                const std::optional<tokenizer::TruncationParams>& trunc,
                                                int n_threads, int64_t& failed, std::string& message) {
    std::vector<tokenizer::Encoding> out(jobs.size());
    failed = -1;
    const int threads = n_threads > 0 ? n_threads : omp_get_max_threads();
    const int64_t n = int64_t(jobs.size());
    // NOTE: exceptions must not cross the OpenMP region; the lowest failing
    // index is kept so the reported record does not depend on scheduling.
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) {
        try {
            const EncodeJob& j = jobs[size_t(i)];
            out[size_t(i)] = tok.encode_with(j.text, j.pair, add_special_tokens, trunc, std::nullopt);
        } catch (const std::exception& e) {
#pragma omp critical(loom_featurize_error)
            if (failed < 0 || i < failed) {
                failed = i;
                message = e.what();
            }
        }
    }
    return out;
}

void copy_ids(Feature& f, const tokenizer::Encoding& e) {
    f.ids.assign(e.ids.begin(), e.ids.end());
    f.type_ids.assign(e.type_ids.begin(), e.type_ids.end());
}

}  // namespace detail

FeatureSet featurize(const std::vector<Record>& records, const Tokenizer& tok,
                     const FeaturizeOptions& opts) {
    LOOM_CHECK(opts.max_seq_length > 0, "featurize: max_seq_length must be positive, got {}",
               opts.max_seq_length);
    FeatureSet set;
    switch (opts.task) {
        case Task::sequence_classification: set = detail::featurize_seq_cls(records, tok, opts); break;
        case Task::masked_lm:
        case Task::causal_lm: set = detail::featurize_lm(records, tok, opts); break;
        case Task::question_answering: set = detail::featurize_qa(records, tok, opts); break;
        case Task::base: LOOM_FAIL("featurize: a task is needed to build labels (got 'base')");
    }
    set.task = opts.task;
    set.stats.records = int64_t(records.size());
    for (const Feature& f : set.features) set.stats.tokens += int64_t(f.ids.size());
    return set;
}

}  // namespace loom

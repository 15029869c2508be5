// Sequence classification features (HF run_glue preprocess_function):
// tokenizer(text, text_pair, truncation=True, max_length=max_seq_length),
// i.e. LongestFirst truncation with special tokens, and label -> index.
//
// Label rules, in order:
//   - no label (Label::Kind::none): -100, an unlabelled row (not counted);
//   - label_names given: the label's name (text, or an integer's decimal
//     form) is looked up; an integer in [0, n) that is not a name is used as
//     the index; anything else is an error naming the record, the label and
//     the known labels;
//   - no label_names: integers are used as they are (>= 0); text labels get
//     the sorted set of names in the data (run_glue's label_list.sort()).
#include <algorithm>
#include <unordered_map>

#include "core/check.h"
#include "data/featurize_internal.h"

namespace loom::detail {

namespace {

std::string join_names(const std::vector<std::string>& names) {
    constexpr size_t k_shown = 20;  // keep the message readable for big label sets
    std::string s;
    for (size_t i = 0; i < names.size() && i < k_shown; ++i) s += (i ? ", '" : "'") + names[i] + "'";
    if (names.size() > k_shown) s += fmt::format(", ... ({} labels)", names.size());
    return s;
}

// Label names when none were given: the sorted text labels of the data, or
// nothing when every label is an integer.
std::vector<std::string> infer_label_names(const std::vector<Record>& records,
                                           const FeaturizeOptions& opts) {
    std::vector<std::string> names;
    const Record* first_int = nullptr;
    const Record* first_text = nullptr;
    for (const Record& r : records) {
        if (r.label.kind == Label::Kind::text) {
            names.push_back(r.label.name);
            if (!first_text) first_text = &r;
        } else if (r.label.kind == Label::Kind::integer && !first_int) {
            first_int = &r;
        }
    }
    LOOM_CHECK(!(first_int && first_text),
               "sequence-classification: labels mix integers ({}: {}) and names ({}: '{}'); give "
               "label_names (id2label) or a label_map so every label has a name",
               record_origin(*first_int, opts), first_int->label.id, record_origin(*first_text, opts),
               first_text->label.name);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

}  // namespace

FeatureSet featurize_seq_cls(const std::vector<Record>& records, const Tokenizer& tok,
                             const FeaturizeOptions& opts) {
    FeatureSet set;
    set.label_names = opts.label_names.empty() ? infer_label_names(records, opts) : opts.label_names;
    const bool named = !set.label_names.empty();
    std::unordered_map<std::string, int64_t> index;
    for (size_t i = 0; i < set.label_names.size(); ++i) {
        const bool fresh = index.emplace(set.label_names[i], int64_t(i)).second;
        LOOM_CHECK(fresh, "sequence-classification: label name '{}' appears twice in label_names",
                   set.label_names[i]);
    }
    const int64_t n_labels = int64_t(set.label_names.size());

    // Labels first: a bad label fails before any tokenizing work.
    std::vector<int64_t> labels(records.size(), -100);
    for (size_t i = 0; i < records.size(); ++i) {
        const Record& r = records[i];
        if (r.label.kind == Label::Kind::none) continue;
        if (named) {
            auto it = index.find(r.label.name);
            if (it != index.end()) {
                labels[i] = it->second;
            } else if (r.label.kind == Label::Kind::integer && r.label.id >= 0 && r.label.id < n_labels) {
                labels[i] = r.label.id;
            } else {
                LOOM_FAIL("{}: label '{}' is not one of the {} known labels ({})", record_origin(r, opts),
                          r.label.name, n_labels, join_names(set.label_names));
            }
        } else {
            LOOM_CHECK(r.label.id >= 0, "{}: label {} is negative; class labels are indices 0, 1, ...",
                       record_origin(r, opts), r.label.id);
            labels[i] = r.label.id;
        }
    }

    std::vector<EncodeJob> jobs(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
        jobs[i].text = records[i].text;
        if (records[i].has_pair) jobs[i].pair = std::string_view(records[i].text_pair);
    }
    tokenizer::TruncationParams trunc;
    trunc.max_length = size_t(opts.max_seq_length);
    trunc.strategy = tokenizer::TruncationStrategy::LongestFirst;
    auto encodings = encode_all(tok, jobs, true, trunc, opts.n_threads,
                                [&](int64_t i) { return record_origin(records[size_t(i)], opts); });

    set.features.resize(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
        Feature& f = set.features[i];
        copy_ids(f, encodings[i]);
        f.label = labels[i];
        // Truncation moved what did not fit into `overflowing`.
        if (!encodings[i].overflowing.empty()) ++set.stats.truncated;
        encodings[i] = {};  // free as we go: overflow pieces can be large
    }
    return set;
}

}  // namespace loom::detail

// Extractive QA features: HF run_qa's prepare_train_features, with the
// offsets prepare_validation_features keeps, so one FeatureSet serves both
// training (start/end positions) and evaluation (answer extraction).
//
// tokenizer(question.lstrip(), context, truncation="only_second",
// max_length=max_seq_length, stride=doc_stride, return_overflowing_tokens=True):
// the first window plus every overflowing window, in that order, each its own
// feature with example_index = the record. For each window the answer's first
// and last token, or (0, 0) (the CLS position) when the answer is not wholly
// inside the window or the question has no answer. Positions are found from
// byte offsets into the context (answer_start_byte, + the answer's bytes),
// which order tokens exactly as run_qa's character offsets do.
//
// NOTE one deliberate difference: run_qa walks `token_start_index` forward
// while offsets[i][0] <= start_char without stopping at the end of the context,
// so when the answer starts inside the window's last context token it runs on
// into [SEP] (offsets (0, 0)) and labels the start as [SEP] or a later token.
// Loom stops the walk at the last context token, which is the answer's token.
#include "core/check.h"
#include "data/featurize_internal.h"

namespace loom::detail {

namespace {

// Python's str.lstrip() for the whitespace a question realistically starts with.
std::string_view lstrip(std::string_view s) {
    for (;;) {
        if (s.empty()) return s;
        const unsigned char c = static_cast<unsigned char>(s[0]);
        if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) {
            s.remove_prefix(1);
        } else if (s.size() >= 2 && c == 0xC2 && (static_cast<unsigned char>(s[1]) == 0xA0 ||
                                                  static_cast<unsigned char>(s[1]) == 0x85)) {
            s.remove_prefix(2);
        } else if (s.size() >= 3 && c == 0xE3 && static_cast<unsigned char>(s[1]) == 0x80 &&
                   static_cast<unsigned char>(s[2]) == 0x80) {
            s.remove_prefix(3);  // U+3000 ideographic space
        } else {
            return s;
        }
    }
}

// Labels one window: start/end token of the answer [start_byte, end_byte) in
// the context, or (0, 0).
void label_window(Feature& f, const std::vector<int64_t>& seq, const Record& r) {
    f.start_position = 0;
    f.end_position = 0;
    if (r.answers.empty()) return;
    const QaAnswer& a = r.answers.front();
    const int64_t start_byte = a.answer_start_byte;
    const int64_t end_byte = start_byte + int64_t(a.text.size());
    const int64_t n = int64_t(seq.size());
    int64_t first = 0;
    while (first < n && seq[size_t(first)] != 1) ++first;
    int64_t last = n - 1;
    while (last >= 0 && seq[size_t(last)] != 1) --last;
    if (first >= n) return;  // no context token in the window
    if (!(f.offsets[size_t(first)].first <= start_byte && f.offsets[size_t(last)].second >= end_byte))
        return;  // the answer is not wholly inside this window
    int64_t s = first;
    while (s <= last && f.offsets[size_t(s)].first <= start_byte) ++s;
    int64_t e = last;
    while (e >= first && f.offsets[size_t(e)].second >= end_byte) --e;
    f.start_position = s - 1;
    f.end_position = e + 1;
}

}  // namespace

FeatureSet featurize_qa(const std::vector<Record>& records, const Tokenizer& tok,
                        const FeaturizeOptions& opts) {
    LOOM_CHECK(opts.doc_stride >= 0 && opts.doc_stride < opts.max_seq_length,
               "question-answering: doc_stride {} must be in [0, max_seq_length {})", opts.doc_stride,
               opts.max_seq_length);
    FeatureSet set;
    set.examples = records;

    std::vector<EncodeJob> jobs(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
        jobs[i].text = lstrip(records[i].question);
        jobs[i].pair = std::string_view(records[i].context);
    }
    tokenizer::TruncationParams trunc;
    trunc.max_length = size_t(opts.max_seq_length);
    trunc.strategy = tokenizer::TruncationStrategy::OnlySecond;
    trunc.stride = size_t(opts.doc_stride);
    auto encodings = encode_all(tok, jobs, true, trunc, opts.n_threads, [&](int64_t i) {
        return fmt::format("{} (question id '{}', max_seq_length {}, doc_stride {})",
                           record_origin(records[size_t(i)], opts), records[size_t(i)].id, opts.max_seq_length,
                           opts.doc_stride);
    });

    for (size_t i = 0; i < records.size(); ++i) {
        const Record& r = records[i];
        for (const QaAnswer& a : r.answers)
            LOOM_CHECK(a.answer_start_byte >= 0 &&
                           size_t(a.answer_start_byte) + a.text.size() <= r.context.size(),
                       "{} (question id '{}'): answer '{}' at byte {} runs past the context ({} bytes)",
                       record_origin(r, opts), r.id, a.text, a.answer_start_byte, r.context.size());
        tokenizer::Encoding& main = encodings[i];
        if (!main.overflowing.empty()) ++set.stats.truncated;
        const size_t n_windows = 1 + main.overflowing.size();
        for (size_t w = 0; w < n_windows; ++w) {
            const tokenizer::Encoding& e = w == 0 ? main : main.overflowing[w - 1];
            Feature f;
            copy_ids(f, e);
            f.example_index = int64_t(i);
            const std::vector<int64_t> seq = e.sequence_ids();
            f.offsets.resize(e.size());
            for (size_t t = 0; t < e.size(); ++t)
                f.offsets[t] = seq[t] == 1 ? std::pair<int32_t, int32_t>(int32_t(e.offsets_utf8[t].start),
                                                                         int32_t(e.offsets_utf8[t].end))
                                           : std::pair<int32_t, int32_t>(-1, -1);
            label_window(f, seq, r);
            set.features.push_back(std::move(f));
        }
        main = {};
    }
    return set;
}

}  // namespace loom::detail

// Language-modelling features: masked LM (HF run_mlm) and causal LM (run_clm).
//
// Without packing each text is one row: tokenizer(text, truncation=True,
// max_length=max_seq_length) with the tokenizer's special tokens (BERT:
// [CLS] ... [SEP]; GPT-2: none). Masked LM skips blank lines as run_mlm's
// line_by_line does; causal LM skips texts that give no token (a row needs at
// least one). With packing (group_texts) the texts are tokenized whole, with
// special tokens, concatenated in record order and cut into blocks of exactly
// max_seq_length tokens; the tail shorter than a block is dropped and counted
// in stats.dropped_tokens. Labels are not stored: causal-LM labels are the ids
// (the model shifts), masked-LM labels are drawn per epoch by the Loader.
#include "core/check.h"
#include "data/featurize_internal.h"

namespace loom::detail {

namespace {

// Python's str.isspace() over UTF-8: is every character whitespace?
bool is_blank(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) {
            ++i;
            continue;
        }
        // Multi-byte spaces: U+0085, U+00A0, U+1680, U+2000-200A, U+2028/2029,
        // U+202F, U+205F, U+3000.
        auto at = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
        if (c == 0xC2 && (at(i + 1) == 0x85 || at(i + 1) == 0xA0)) {
            i += 2;
            continue;
        }
        if (c == 0xE1 && at(i + 1) == 0x9A && at(i + 2) == 0x80) {
            i += 3;
            continue;
        }
        if (c == 0xE2 && at(i + 1) == 0x80 &&
            (at(i + 2) <= 0x8A || at(i + 2) == 0xA8 || at(i + 2) == 0xA9 || at(i + 2) == 0xAF) &&
            at(i + 2) >= 0x80) {
            i += 3;
            continue;
        }
        if (c == 0xE2 && at(i + 1) == 0x81 && at(i + 2) == 0x9F) {
            i += 3;
            continue;
        }
        if (c == 0xE3 && at(i + 1) == 0x80 && at(i + 2) == 0x80) {
            i += 3;
            continue;
        }
        return false;
    }
    return true;
}

}  // namespace

FeatureSet featurize_lm(const std::vector<Record>& records, const Tokenizer& tok,
                        const FeaturizeOptions& opts) {
    const bool mlm = opts.task == Task::masked_lm;
    const char* task = mlm ? "masked-lm" : "causal-lm";
    FeatureSet set;

    // run_mlm line_by_line drops empty and whitespace-only lines before tokenizing.
    std::vector<size_t> kept;
    kept.reserve(records.size());
    for (size_t i = 0; i < records.size(); ++i)
        if (!(mlm && !opts.packing && is_blank(records[i].text))) kept.push_back(i);
    std::vector<EncodeJob> jobs(kept.size());
    for (size_t k = 0; k < kept.size(); ++k) jobs[k].text = records[kept[k]].text;

    std::optional<tokenizer::TruncationParams> trunc;
    if (!opts.packing) {
        trunc.emplace();
        trunc->max_length = size_t(opts.max_seq_length);
        trunc->strategy = tokenizer::TruncationStrategy::LongestFirst;
    }
    auto encodings = encode_all(tok, jobs, true, trunc, opts.n_threads,
                                [&](int64_t k) { return record_origin(records[kept[size_t(k)]], opts); });

    if (!opts.packing) {
        set.features.reserve(encodings.size());
        for (auto& e : encodings) {
            if (!e.overflowing.empty()) ++set.stats.truncated;
            if (e.ids.empty()) continue;  // nothing to train on (causal LM, empty text)
            Feature f;
            copy_ids(f, e);
            set.features.push_back(std::move(f));
            e = {};
        }
        set.stats.skipped = int64_t(records.size() - set.features.size());
        LOOM_CHECK(!set.features.empty() || records.empty(),
                   "{}: none of the {} records has any text to train on", task, records.size());
        return set;
    }

    // group_texts: concatenate everything, then cut.
    const size_t block = size_t(opts.max_seq_length);
    size_t total = 0;
    for (const auto& e : encodings) total += e.ids.size();
    const size_t n_blocks = total / block;
    LOOM_CHECK(n_blocks > 0 || records.empty(),
               "{} packing: the {} records give {} tokens, fewer than one block of max_seq_length {}; "
               "lower max_seq_length or set packing: false",
               task, records.size(), total, block);
    set.features.resize(n_blocks);
    size_t pos = 0;  // tokens placed so far
    for (const auto& e : encodings) {
        for (size_t t = 0; t < e.ids.size() && pos < n_blocks * block; ++t, ++pos) {
            Feature& f = set.features[pos / block];
            if (f.ids.empty()) {
                f.ids.reserve(block);
                f.type_ids.reserve(block);
            }
            f.ids.push_back(int32_t(e.ids[t]));
            f.type_ids.push_back(int32_t(e.type_ids[t]));
        }
    }
    set.stats.dropped_tokens = int64_t(total - n_blocks * block);
    return set;
}

}  // namespace loom::detail

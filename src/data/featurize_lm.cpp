// Language-modelling features: masked LM (HF run_mlm) and causal LM (run_clm,
// and TRL SFT's prompt-completion instruction data).
//
// Without packing each text is one row: tokenizer(text, truncation=True,
// max_length=max_seq_length) with the tokenizer's special tokens (BERT:
// [CLS] ... [SEP]; GPT-2: none; Llama/Mistral: the <s> its TemplateProcessing
// puts first, no </s>, as HF's run_clm gets them). Masked LM skips blank lines
// as run_mlm's line_by_line does; causal LM skips texts that give no token (a
// row needs at least one). With packing (group_texts) the texts are tokenized
// whole, with special tokens, concatenated in record order and cut into
// blocks of exactly max_seq_length tokens; the tail shorter than a block is
// dropped and counted in stats.dropped_tokens. Labels of plain text are not
// stored: causal-LM labels are the ids (the model shifts), masked-LM labels
// are drawn per epoch by the Loader.
//
// Instruction records (prompt, completion), as TRL's SFTTrainer builds them:
// the text prompt + completion is tokenized once, with the tokenizer's
// special tokens (so a Llama-style tokenizer puts its <s> first), and eos_id
// is appended unless the post-processor already ended the row with it. The
// labels are -100 on the special tokens before the completion and on every
// token that starts inside the prompt (UTF-8 offsets), the ids elsewhere, so
// the loss counts the completion and the end token only. Tokenizing the joined
// text, rather than prompt and completion apart, keeps the ids exactly those
// of the whole text (a SentencePiece-style tokenizer would otherwise prepend
// a second "▁" to the completion); TRL takes the prompt's length from the
// prompt tokenized alone, which gives the same boundary unless a token
// crosses it. Such a token (e.g. a newline run that ends the prompt and
// starts the completion) counts as prompt here, and stats.boundary_tokens
// counts them. Without packing a row longer than max_seq_length is cut on the
// right (the end token may be cut, as in TRL); with packing rows are
// concatenated, labels with them, and cut into blocks.
//
// pack_documents (causal LM, with packing) keeps the documents apart inside a
// block: position ids restart at 0 for each document (and for the piece of a
// document a block boundary cut off), and a document's first token is no
// target (job key data.pack_boundaries; the models read the positions and
// keep attention within each document, ModelInputs::position_ids).
#include <algorithm>

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

// The labels of one instruction row (see the top of the file): -100 up to
// the first token that starts at or after byte `prompt_bytes` of the text.
std::vector<int32_t> completion_labels(const tokenizer::Encoding& e, size_t prompt_bytes,
                                       int64_t& boundary_tokens) {
    const size_t n = e.ids.size();
    size_t first = n;
    for (size_t t = 0; t < n; ++t) {
        if (e.special_tokens_mask[t]) continue;
        if (e.offsets_utf8[t].start >= prompt_bytes) {
            first = t;
            break;
        }
        if (e.offsets_utf8[t].end > prompt_bytes) ++boundary_tokens;
    }
    // Special tokens a template appends after an empty completion are targets too.
    if (first == n)
        for (size_t t = n; t > 0 && e.special_tokens_mask[t - 1]; --t) first = t - 1;
    std::vector<int32_t> labels(n, -100);
    for (size_t t = first; t < n; ++t) labels[t] = int32_t(e.ids[t]);
    return labels;
}

}  // namespace

FeatureSet featurize_lm(const std::vector<Record>& records, const Tokenizer& tok,
                        const FeaturizeOptions& opts) {
    const bool mlm = opts.task == Task::masked_lm;
    const char* task = mlm ? "masked-lm" : "causal-lm";
    const bool instruct = !mlm && !records.empty() && records.front().has_pair;
    LOOM_CHECK(!instruct || opts.eos_id >= 0,
               "causal-lm instruction data: no end-of-sequence id to put after each completion "
               "(config.json has no eos_token_id)");
    FeatureSet set;

    // run_mlm line_by_line drops empty and whitespace-only lines before tokenizing.
    std::vector<size_t> kept;
    kept.reserve(records.size());
    for (size_t i = 0; i < records.size(); ++i)
        if (!(mlm && !opts.packing && is_blank(records[i].text))) kept.push_back(i);
    std::vector<std::string> joined(instruct ? kept.size() : 0);
    std::vector<EncodeJob> jobs(kept.size());
    for (size_t k = 0; k < kept.size(); ++k) {
        const Record& r = records[kept[k]];
        if (instruct) {
            joined[k] = r.text + r.text_pair;
            jobs[k].text = joined[k];
        } else {
            jobs[k].text = r.text;
        }
    }

    std::optional<tokenizer::TruncationParams> trunc;
    if (!opts.packing && !instruct) {
        trunc.emplace();
        trunc->max_length = size_t(opts.max_seq_length);
        trunc->strategy = tokenizer::TruncationStrategy::LongestFirst;
    }
    auto encodings = encode_all(tok, jobs, true, trunc, opts.n_threads, [&](int64_t k) {
        return record_origin(records[kept[size_t(k)]], opts);
    });

    // One row per kept record: ids, type ids and (instruction data) labels.
    std::vector<Feature> rows(encodings.size());
    for (size_t k = 0; k < encodings.size(); ++k) {
        tokenizer::Encoding& e = encodings[k];
        Feature& f = rows[k];
        if (!e.overflowing.empty()) ++set.stats.truncated;
        copy_ids(f, e);
        if (instruct) {
            f.labels =
                completion_labels(e, records[kept[k]].text.size(), set.stats.boundary_tokens);
            if (f.ids.empty() || f.ids.back() != int32_t(opts.eos_id)) {
                f.ids.push_back(int32_t(opts.eos_id));
                f.type_ids.push_back(f.type_ids.empty() ? 0 : f.type_ids.back());
                f.labels.push_back(int32_t(opts.eos_id));
            }
            if (!opts.packing && f.ids.size() > size_t(opts.max_seq_length)) {
                ++set.stats.truncated;
                f.ids.resize(size_t(opts.max_seq_length));
                f.type_ids.resize(f.ids.size());
                f.labels.resize(f.ids.size());
            }
        }
        e = {};
    }

    if (!opts.packing) {
        set.features.reserve(rows.size());
        for (auto& f : rows) {
            if (f.ids.empty()) continue;  // nothing to train on (causal LM, empty text)
            // An instruction cut before its completion has no target: skip it.
            if (instruct && std::all_of(f.labels.begin() + 1, f.labels.end(),
                                        [](int32_t l) { return l == -100; }))
                continue;
            set.features.push_back(std::move(f));
        }
        set.stats.skipped = int64_t(records.size() - set.features.size());
        LOOM_CHECK(!set.features.empty() || records.empty(),
                   "{}: none of the {} records has any {} to train on", task, records.size(),
                   instruct ? "completion token within max_seq_length" : "text");
        return set;
    }

    // group_texts: concatenate everything, then cut.
    const size_t block = size_t(opts.max_seq_length);
    size_t total = 0;
    for (const auto& f : rows) total += f.ids.size();
    const size_t n_blocks = total / block;
    LOOM_CHECK(n_blocks > 0 || records.empty(),
               "{} packing: the {} records give {} tokens, fewer than one block of max_seq_length {}; "
               "lower max_seq_length or set packing: false",
               task, records.size(), total, block);
    set.features.resize(n_blocks);
    // Causal LM with document boundaries: every piece of a document inside a
    // block gets positions from 0 (the model cannot see the part cut off
    // before it) and label -100 on its first token (nothing in the row
    // precedes it), as HF's DataCollatorWithFlattening does.
    const bool docs = opts.pack_documents && !mlm;
    size_t pos = 0;  // tokens placed so far
    for (const auto& r : rows) {
        int32_t piece_pos = 0;  // position within the current piece of r
        for (size_t t = 0; t < r.ids.size() && pos < n_blocks * block; ++t, ++pos) {
            Feature& f = set.features[pos / block];
            if (f.ids.empty()) {
                f.ids.reserve(block);
                f.type_ids.reserve(block);
                if (instruct || docs) f.labels.reserve(block);
                if (docs) f.position_ids.reserve(block);
            }
            if (docs && pos % block == 0) piece_pos = 0;
            f.ids.push_back(r.ids[t]);
            f.type_ids.push_back(r.type_ids[t]);
            const int32_t label = instruct ? r.labels[t] : r.ids[t];
            if (instruct || docs) f.labels.push_back(docs && piece_pos == 0 ? -100 : label);
            if (docs) f.position_ids.push_back(piece_pos);
            ++piece_pos;
        }
    }
    set.stats.dropped_tokens = int64_t(total - n_blocks * block);
    return set;
}

}  // namespace loom::detail

// Shared helpers for the featurizer, collator and loader tests: the real
// tokenizers from tests/data/tokenizers (loaded once) and record builders.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/features.h"
#include "tokenizer/tokenizer.h"

namespace loom::test {

inline const Tokenizer& bert_tokenizer() {
    static const Tokenizer tok =
        Tokenizer::from_file(std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/bert-base-uncased/tokenizer.json");
    return tok;
}

inline const Tokenizer& gpt2_tokenizer() {
    static const Tokenizer tok =
        Tokenizer::from_file(std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/gpt2/tokenizer.json");
    return tok;
}

inline Record text_record(std::string text, int64_t line = 0) {
    Record r;
    r.text = std::move(text);
    r.line = line;
    return r;
}

inline Record cls_record(std::string text, std::string label, int64_t line = 0) {
    Record r = text_record(std::move(text), line);
    r.label.kind = Label::Kind::text;
    r.label.name = std::move(label);
    return r;
}

inline Record cls_record_int(std::string text, int64_t id, int64_t line = 0) {
    Record r = text_record(std::move(text), line);
    r.label.kind = Label::Kind::integer;
    r.label.id = id;
    r.label.name = std::to_string(id);
    return r;
}

inline std::vector<int32_t> as_i32(const std::vector<uint32_t>& v) {
    return std::vector<int32_t>(v.begin(), v.end());
}

// What the tokenizer gives for one input (pair: null for none) with
// explicit truncation.
inline tokenizer::Encoding encode_truncated(const Tokenizer& tok, const std::string& text,
                                            const std::string* pair, size_t max_length) {
    tokenizer::TruncationParams t;
    t.max_length = max_length;
    t.strategy = tokenizer::TruncationStrategy::LongestFirst;
    std::optional<std::string_view> p;
    if (pair) p = std::string_view(*pair);
    return tok.encode_with(text, p, true, t, std::nullopt);
}

}  // namespace loom::test

// Encoding -> JSON (see encoding_json.h).
#include "tokenizer/encoding_json.h"

namespace loom::tokenizer {

nlohmann::json encoding_to_json(const Encoding& e, bool with_overflowing) {
    using nlohmann::json;
    json j = json::object();
    j["ids"] = e.ids;
    j["tokens"] = e.tokens;
    j["type_ids"] = e.type_ids;
    j["attention_mask"] = e.attention_mask;
    j["special_tokens_mask"] = e.special_tokens_mask;
    json offsets = json::array(), offsets_utf8 = json::array();
    for (const Offsets& o : e.offsets) offsets.push_back({o.start, o.end});
    for (const Offsets& o : e.offsets_utf8) offsets_utf8.push_back({o.start, o.end});
    j["offsets"] = std::move(offsets);
    j["offsets_utf8"] = std::move(offsets_utf8);
    json words = json::array(), seqs = json::array();
    for (int64_t w : e.word_ids) words.push_back(w < 0 ? json(nullptr) : json(w));
    for (int64_t s : e.sequence_ids()) seqs.push_back(s < 0 ? json(nullptr) : json(s));
    j["word_ids"] = std::move(words);
    j["sequence_ids"] = std::move(seqs);
    if (with_overflowing) {
        json over = json::array();
        for (const Encoding& o : e.overflowing) over.push_back(encoding_to_json(o, false));
        j["overflowing"] = std::move(over);
    }
    return j;
}

}  // namespace loom::tokenizer

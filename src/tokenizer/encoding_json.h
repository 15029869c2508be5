// Encoding <-> JSON in the field layout of tests/data/tokenizers/*/cases.json
// ("encoding" objects): ids, tokens, type_ids, attention_mask,
// special_tokens_mask, offsets, offsets_utf8, word_ids, sequence_ids and,
// when asked, overflowing. Used by `loom tokenize` and the fixture tests.
#pragma once

#include <nlohmann/json.hpp>

#include "tokenizer/encoding.h"

namespace loom::tokenizer {

nlohmann::json encoding_to_json(const Encoding& e, bool with_overflowing);

}  // namespace loom::tokenizer

// tokenizer.json loading: the component factories (one per section of the
// file) and the truncation/padding parsers, which the CLI also uses for the
// per-case overrides of tests/data/tokenizers/*/cases.json.
#pragma once

#include <memory>
#include <optional>

#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"

namespace loom::tokenizer {

class Model;
class Normalizer;
class PreTokenizer;
class PostProcessor;
class Decoder;

std::unique_ptr<Model> model_from_json(const JsonAt& j);
std::unique_ptr<Normalizer> normalizer_from_json(const JsonAt& j);
// sentencepiece's precompiled charsmap (precompiled.cpp).
std::unique_ptr<Normalizer> precompiled_normalizer_from_json(const JsonAt& j);
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const JsonAt& j);
std::unique_ptr<PostProcessor> post_processor_from_json(const JsonAt& j);
std::unique_ptr<Decoder> decoder_from_json(const JsonAt& j);

// null -> nullopt; the object form of tokenizer.json's "truncation" / "padding".
std::optional<TruncationParams> truncation_from_json(const JsonAt& j);
std::optional<PaddingParams> padding_from_json(const JsonAt& j);

}  // namespace loom::tokenizer

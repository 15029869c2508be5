// The Precompiled normalizer (sentencepiece's compiled normalization rules).
// Not implemented yet: loading a tokenizer.json that uses it fails with a
// clear message rather than normalizing differently from the reference.
#include "tokenizer/components.h"
#include "tokenizer/tokenizer_json.h"

namespace loom::tokenizer {

std::unique_ptr<Normalizer> precompiled_normalizer_from_json(const JsonAt& j) {
    j.fail("the Precompiled normalizer (sentencepiece charsmap) is not supported yet");
}

}  // namespace loom::tokenizer

// libFuzzer target: tokenizer.json loading. Any input must either load or
// throw TokenizerError, never crash; a loaded tokenizer must then encode and
// decode a fixed sentence (with a pair) without crashing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string json(reinterpret_cast<const char*>(data), size);
    try {
        loom::tokenizer::Tokenizer tok = loom::tokenizer::Tokenizer::from_json(json, "fuzz.json");
        const auto enc = tok.encode("Hello, world! ab cd [MASK] caf\xC3\xA9 12", std::string_view("pair text"), true);
        (void)tok.decode(enc.ids, true);
        (void)tok.decode(enc.ids, false);
    } catch (const loom::tokenizer::TokenizerError&) {
    }
    return 0;
}

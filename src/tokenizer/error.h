// The tokenizer's own error type.
//
// loom_tokenizer is usable without the rest of Loom, so it does not depend on
// core/check.h; TokenizerError is a std::runtime_error, which the loom CLI
// catches and prints like any other error. Loader messages always name the
// file and the JSON path ("tokenizer.json: /model/merges/17: ...").
#pragma once

#include <stdexcept>
#include <string>

namespace loom::tokenizer {

class TokenizerError : public std::runtime_error {
public:
    explicit TokenizerError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace loom::tokenizer

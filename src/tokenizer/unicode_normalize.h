// Unicode normalization forms as change streams, for NormalizedString.
//
// Reproduces the iterator contract of the `unicode-normalization-alignments`
// crate that HF tokenizers uses: decomposition emits the first char of an
// expansion with change 0 and the rest with +1; canonical reordering
// stable-sorts each run of non-starters together with their changes; composition
// gives a composed char the change k + c - 1 (so it may go negative).
// Character data comes from utf8proc.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/normalized_string.h"

namespace loom::tokenizer {

enum class NormalForm { NFD, NFKD, NFC, NFKC };

std::vector<Change> normalize_stream(std::string_view s, NormalForm form);

}  // namespace loom::tokenizer

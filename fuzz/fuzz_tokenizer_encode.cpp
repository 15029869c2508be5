// libFuzzer target: encoding arbitrary bytes (invalid UTF-8 included) with the
// four fixture tokenizers (WordPiece x2, byte-level BPE, Unigram), with and
// without a pair, truncation (stride, both directions) and padding, then
// decoding the ids. Input layout: byte 0 picks the tokenizer and options, the
// rest is the text; a 0xFF byte, if any, separates text and pair.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tk = loom::tokenizer;

static std::vector<std::unique_ptr<tk::Tokenizer>>& tokenizers() {
    static std::vector<std::unique_ptr<tk::Tokenizer>> all = [] {
        std::vector<std::unique_ptr<tk::Tokenizer>> v;
        const std::string dir = LOOM_TEST_DATA_DIR "/tokenizers/";
        for (const char* name : {"bert-base-uncased", "wordpiece-multilingual-cased", "gpt2", "unigram-albert-style"})
            v.push_back(std::make_unique<tk::Tokenizer>(tk::Tokenizer::from_file(dir + name + "/tokenizer.json")));
        return v;
    }();
    return all;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t sel = data[0];
    const tk::Tokenizer& tok = *tokenizers()[sel % 4];
    const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
    std::string text = rest;
    std::optional<std::string> pair;
    const size_t cut = rest.find('\xFF');
    if ((sel & 4) && cut != std::string::npos) {
        text = rest.substr(0, cut);
        pair = rest.substr(cut + 1);
    }
    std::optional<tk::TruncationParams> trunc;
    if (sel & 8) {
        tk::TruncationParams t;
        t.max_length = 8 + (sel >> 6);
        t.stride = (sel & 16) ? 2 : 0;
        t.direction = (sel & 32) ? tk::TruncationDirection::Left : tk::TruncationDirection::Right;
        t.strategy = pair ? tk::TruncationStrategy::LongestFirst : tk::TruncationStrategy::OnlyFirst;
        trunc = t;
    }
    std::optional<tk::PaddingParams> pad;
    if (sel & 16) {
        tk::PaddingParams p;
        p.batch_longest = false;
        p.fixed_length = 24;
        p.pad_to_multiple_of = 8;
        pad = p;
    }
    try {
        const tk::Encoding e = tok.encode_with(text, pair ? std::optional<std::string_view>(*pair) : std::nullopt,
                                               (sel & 128) == 0, trunc, pad);
        (void)e.sequence_ids();
        (void)tok.decode(e.ids, true);
        (void)tok.decode(e.ids, false);
    } catch (const tk::TokenizerError&) {
        // e.g. a truncation budget smaller than the special tokens: a clean error
    }
    return 0;
}

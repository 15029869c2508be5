// The Precompiled normalizer (sentencepiece charsmap) against Hugging Face
// tokenizers 0.22.2: tests/data/tokenizers/precompiled holds a real nmt_nfkc
// charsmap (from spm_train) in an ALBERT/T5-style tokenizer.json, and the
// library's normalized strings, ids, tokens, offsets and decodes for inputs
// that hit compatibility forms, graphemes, control chars and whitespace.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/components.h"
#include "tokenizer/encoding_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace loom::tokenizer {
namespace {

using nlohmann::json;

const std::string k_dir = std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/precompiled";

json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
}

std::string load_error(const std::string& normalizer) {
    const std::string text = R"({"normalizer": )" + normalizer +
                             R"(, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}})";
    try {
        Tokenizer::from_json(text, "tokenizer.json");
    } catch (const TokenizerError& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(TokenizerPrecompiled, NormalizedStringsMatchHuggingFace) {
    const json file = read_json(k_dir + "/tokenizer.json");
    const std::string where = "tokenizer.json";
    const auto seq = normalizer_from_json(JsonAt{file.at("normalizer"), "/normalizer", where});
    // The Precompiled step on its own is checked through the Sequence (the
    // only other step collapses runs of spaces).
    ASSERT_EQ(file.at("normalizer").at("normalizers").at(0).at("type"), "Precompiled");
    const json cases = read_json(k_dir + "/cases.json");
    ASSERT_GE(cases.at("cases").size(), 30u);
    int changed = 0;
    for (const json& c : cases.at("cases")) {
        SCOPED_TRACE("case " + c.at("id").get<std::string>());
        const std::string text = c.at("text").get<std::string>();
        NormalizedString s(text);
        seq->normalize(s);
        EXPECT_EQ(s.get(), c.at("normalized").get<std::string>());
        EXPECT_EQ(s.alignments().size(), s.get().size());
        changed += s.get() != text;
    }
    EXPECT_GE(changed, 25);  // the inputs really exercise the charsmap
}

TEST(TokenizerPrecompiled, EncodingsMatchHuggingFace) {
    const Tokenizer tok = Tokenizer::from_file(k_dir + "/tokenizer.json");
    const json cases = read_json(k_dir + "/cases.json");
    int checked = 0;
    for (const json& c : cases.at("cases")) {
        SCOPED_TRACE("case " + c.at("id").get<std::string>());
        const Encoding enc = tok.encode(c.at("text").get<std::string>(), true);
        const json got = encoding_to_json(enc, true);
        const json& want = c.at("encoding");
        for (const char* f : {"ids", "tokens", "offsets", "offsets_utf8", "word_ids"})
            EXPECT_EQ(got.at(f), want.at(f)) << f;
        EXPECT_EQ(tok.decode(enc.ids, true), c.at("decoded").get<std::string>());
        ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(cases.at("cases").size()));
}

TEST(TokenizerPrecompiled, ShortestPrefixEntryReplacesWholeGrapheme) {
    const json file = read_json(k_dir + "/tokenizer.json");
    const auto n = normalizer_from_json(
        JsonAt{file.at("normalizer").at("normalizers").at(0), "/normalizer/normalizers/0", "tokenizer.json"});
    const auto* p = dynamic_cast<const PrecompiledNormalizer*>(n.get());
    ASSERT_NE(p, nullptr);
    // Full-width A has an entry; ASCII letters have none.
    ASSERT_TRUE(p->transform("\xEF\xBC\xA1").has_value());
    EXPECT_EQ(*p->transform("\xEF\xBC\xA1"), "A");
    EXPECT_FALSE(p->transform("A").has_value());
    // "\r\n" is one grapheme; the entry for "\r" (a space) replaces all of it.
    // The space keeps the alignment of "\r" only (the "\n" counts as removed),
    // as the library's offsets for the crlf_only case show.
    NormalizedString s("x\r\ny");
    p->normalize(s);
    EXPECT_EQ(s.get(), "x y");
    EXPECT_EQ(s.normalized_to_original(1, 2)->start, 1u);
    EXPECT_EQ(s.normalized_to_original(1, 2)->end, 2u);
    EXPECT_EQ(s.normalized_to_original(2, 3)->start, 3u);
}

TEST(TokenizerPrecompiled, MalformedCharsmapsFailWithThePath) {
    EXPECT_EQ(load_error(R"({"type": "Precompiled", "precompiled_charsmap": "not base64!"})"),
              "tokenizer.json: /normalizer/precompiled_charsmap: precompiled_charsmap is not valid base64");
    // "AQI=" = 01 02: shorter than the header.
    EXPECT_EQ(load_error(R"({"type": "Precompiled", "precompiled_charsmap": "AQI="})"),
              "tokenizer.json: /normalizer/precompiled_charsmap: precompiled_charsmap is shorter than its "
              "4-byte header");
    // "EAAAAAAA" = trie_size 16, then 2 bytes only.
    EXPECT_EQ(load_error(R"({"type": "Precompiled", "precompiled_charsmap": "EAAAAAAA"})"),
              "tokenizer.json: /normalizer/precompiled_charsmap: precompiled_charsmap declares a 16-byte trie but "
              "holds only 2 bytes after the header");
    EXPECT_NE(load_error(R"({"type": "Precompiled"})").find("precompiled_charsmap"), std::string::npos);
}

}  // namespace
}  // namespace loom::tokenizer

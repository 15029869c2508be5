// Every case of tests/data/tokenizers (6 tokenizers x 37 cases, expected
// values produced by Hugging Face tokenizers 0.22.2) must match exactly: every
// field of the encoding, the overflowing pieces, and both decodes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/encoding_json.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace loom::tokenizer {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
}

const char* k_fields[] = {"ids",          "tokens",   "type_ids", "attention_mask", "special_tokens_mask",
                          "offsets",      "offsets_utf8", "word_ids", "sequence_ids"};

// Compares one encoding; returns a description of the first differing field, or "".
std::string diff_encoding(const json& got, const json& want) {
    for (const char* f : k_fields) {
        if (!want.contains(f)) continue;
        if (got.at(f) != want.at(f))
            return std::string(f) + ": got " + got.at(f).dump() + "\n  want " + want.at(f).dump();
    }
    return "";
}

class TokenizerCases : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerCases, MatchHuggingFace) {
    const std::string dir = std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/" + GetParam();
    Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
    const json cases = read_json(dir + "/cases.json");
    ASSERT_EQ(cases.at("cases").size(), 37u);
    int checked = 0;
    for (const json& c : cases.at("cases")) {
        SCOPED_TRACE("case " + c.at("id").get<std::string>());
        const std::string where = "cases.json";
        tok.set_truncation(truncation_from_json(JsonAt{c.at("truncation"), "/truncation", where}));
        tok.set_padding(padding_from_json(JsonAt{c.at("padding"), "/padding", where}));
        const std::string text = c.at("text").get<std::string>();
        std::optional<std::string> pair;
        if (!c.at("pair").is_null()) pair = c.at("pair").get<std::string>();
        const bool add_special = c.at("add_special_tokens").get<bool>();
        const Encoding enc = pair ? tok.encode(text, std::string_view(*pair), add_special)
                                  : tok.encode(text, std::nullopt, add_special);
        const json want = c.at("encoding");
        const json got = encoding_to_json(enc, true);
        EXPECT_EQ(diff_encoding(got, want), "");
        if (want.contains("overflowing")) {
            const json& wo = want.at("overflowing");
            ASSERT_EQ(got.at("overflowing").size(), wo.size());
            for (size_t i = 0; i < wo.size(); ++i)
                EXPECT_EQ(diff_encoding(got.at("overflowing").at(i), wo.at(i)), "") << "overflowing[" << i << "]";
        } else {
            EXPECT_TRUE(enc.overflowing.empty());
        }
        EXPECT_EQ(tok.decode(enc.ids, true), c.at("decoded").get<std::string>());
        EXPECT_EQ(tok.decode(enc.ids, false), c.at("decoded_with_special_tokens").get<std::string>());
        ++checked;
    }
    EXPECT_EQ(checked, 37);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerCases,
                         ::testing::Values("bert-base-uncased", "wordpiece-multilingual-cased",
                                           "gpt2", "mistral-7b", "llama3-style",
                                           "unigram-albert-style"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                             std::string name = param_info.param;
                             for (char& ch : name)
                                 if (ch == '-') ch = '_';
                             return name;
                         });

}  // namespace
}  // namespace loom::tokenizer

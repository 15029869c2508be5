// Every normalizer, pre-tokenizer, post-processor and decoder option that the
// bundled real tokenizers do not exercise, each swapped into one of them
// (tests/data/tokenizers/components/cases.json, expected values from Hugging
// Face tokenizers 0.22.2: tests/tokenizer/make_components_fixture.js), must
// give the same encoding, field by field, and the same decodes. (Offsets are
// compared in code points, which is what the binding reports; the real
// tokenizers' fixtures check UTF-8 byte offsets.)
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/encoding_json.h"
#include "tokenizer/tokenizer.h"

namespace loom::tokenizer {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

const json& fixture() {
    static const json j = json::parse(
        read_text(std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/components/cases.json"));
    return j;
}

std::vector<std::string> variant_names() {
    std::vector<std::string> names;
    for (const json& v : fixture().at("variants")) names.push_back(v.at("name").get<std::string>());
    return names;
}

const json& variant(const std::string& name) {
    for (const json& v : fixture().at("variants"))
        if (v.at("name") == name) return v;
    throw std::runtime_error("no variant " + name);
}

class ComponentMatrix : public ::testing::TestWithParam<std::string> {};

TEST_P(ComponentMatrix, MatchesHuggingFace) {
    const json& v = variant(GetParam());
    const std::string base = std::string(LOOM_TEST_DATA_DIR) + "/tokenizers/" +
                             v.at("base").get<std::string>() + "/tokenizer.json";
    json spec = json::parse(read_text(base));
    for (const auto& [key, value] : v.at("override").items()) spec[key] = value;
    spec["truncation"] = nullptr;
    spec["padding"] = nullptr;
    const Tokenizer tok = Tokenizer::from_json(spec.dump(), GetParam());
    static const char* fields[] = {
        "ids",     "tokens",   "type_ids",    "attention_mask", "special_tokens_mask",
        "offsets", "word_ids", "sequence_ids"};
    int checked = 0;
    for (const json& c : v.at("cases")) {
        SCOPED_TRACE("case " + c.at("id").get<std::string>());
        const std::string text = c.at("text").get<std::string>();
        const Encoding enc =
            c.at("pair").is_null()
                ? tok.encode(text, std::nullopt, true)
                : tok.encode(text, std::string_view(c.at("pair").get_ref<const std::string&>()),
                             true);
        const json got = encoding_to_json(enc, false);
        const json& want = c.at("encoding");
        for (const char* f : fields) EXPECT_EQ(got.at(f), want.at(f)) << "field " << f;
        EXPECT_EQ(tok.decode(enc.ids, true), c.at("decoded").get<std::string>());
        EXPECT_EQ(tok.decode(enc.ids, false),
                  c.at("decoded_with_special_tokens").get<std::string>());
        ++checked;
    }
    EXPECT_EQ(checked, 12);
}

INSTANTIATE_TEST_SUITE_P(Components, ComponentMatrix, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace loom::tokenizer

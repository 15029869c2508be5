// The JSONL fast path must accept exactly what nlohmann::json accepts and
// decode the same values: checked on hand-picked lines and on many random
// mutations of valid ones.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "data/read_internal.h"

namespace loom {
namespace {

using data_detail::JsonColumn;
using data_detail::JsonLineScanner;
using nlohmann::json;

bool nlohmann_accepts(const std::string& s) { return json::accept(s.begin(), s.end()); }

// Scanner and nlohmann agree on validity; on valid objects the decoded
// "text" and "label" columns match nlohmann's values.
void expect_agrees(const std::string& line) {
    JsonLineScanner scan({"text", "label"});
    bool ours = scan.scan(line);
    bool ref = nlohmann_accepts(line);
    ASSERT_EQ(ours, ref) << "line: " << ::testing::PrintToString(line) << "\nscanner error: "
                         << scan.error();
    if (!ours) return;
    json v = json::parse(line);
    if (!v.is_object()) {
        EXPECT_NE(scan.top_type(), JsonColumn::Type::object);
        return;
    }
    EXPECT_EQ(scan.top_type(), JsonColumn::Type::object);
    for (size_t i = 0; i < 2; ++i) {
        const char* key = i == 0 ? "text" : "label";
        const JsonColumn& c = scan.column(i);
        if (!v.contains(key)) {
            EXPECT_EQ(c.type, JsonColumn::Type::missing) << line;
            continue;
        }
        const json& ref_v = v[key];
        if (ref_v.is_string()) {
            ASSERT_EQ(c.type, JsonColumn::Type::string) << line;
            EXPECT_EQ(c.str, ref_v.get<std::string>()) << line;
        } else if (ref_v.is_number_integer() && c.type == JsonColumn::Type::integer) {
            EXPECT_EQ(c.integer, ref_v.get<int64_t>()) << line;
        } else {
            EXPECT_STREQ(c.type_name(), ref_v.type_name()) << line;
        }
    }
}

TEST(JsonLineScanner, ValidLines) {
    for (std::string s : {
             R"({"text": "a", "label": 1})",
             R"({})",
             R"(  {"text":"x"}  )",
             R"({"text": "esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00", "label": -12})",
             R"({"label": 0, "text": "", "nested": {"text": "not me", "a": [1, 2.5e-3, -0, 0.0, 1E+2]}})",
             R"({"text": "caf\u00e9", "label": "pos", "x": [true, false, null, [], [[]], {}]})",
             "{\"text\": \"raw UTF-8: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
             R"([1, 2, 3])",
             R"("just a string")",
             R"(42)",
             R"({"text": "dup", "text": "last wins"})",
             R"({"label": 9223372036854775807, "text": "max"})",
             R"({"label": 12345678901234567890, "text": "unsigned"})",
         })
        expect_agrees(s);
    JsonLineScanner scan({"text"});
    ASSERT_TRUE(scan.scan(R"({"text": "first", "text": "second"})"));
    EXPECT_EQ(scan.column(0).str, "second");
}

TEST(JsonLineScanner, InvalidLines) {
    for (std::string s : {
             R"({"text": "a",})",      R"({"text" "a"})",       R"({text: "a"})",
             R"({"text": 'a'})",       R"({"text": "a"} x)",    R"({"text": "a")",
             R"({"a": 01})",           R"({"a": 1.})",          R"({"a": .5})",
             R"({"a": -})",            R"({"a": 1e})",          R"({"a": +1})",
             R"({"a": tru})",          R"({"a": nul})",         R"({"a": NaN})",
             R"({"a": "\x"})",         R"({"a": "\u12"})",      R"({"a": "\ud83d"})",
             R"({"a": "\ude00"})",     R"({"a": "\ud83d\u0041"})", R"([1, 2,])",
             R"([1 2])",               R"({"a": [})",           R"(})",
             "{\"a\": \"tab\tinside\"}", "{\"a\": \"bad \xff byte\"}",
             "{\"a\": \"overlong \xc0\xaf\"}", "{\"a\": \"surrogate \xed\xa0\x80\"}",
             "{\"a\": \"cut \xe2\x82\"}", "{\"a\": \"too big \xf4\x90\x80\x80\"}",
             "",                       "   ",
         })
        expect_agrees(s);
}

TEST(JsonLineScanner, AgreesWithNlohmannOnRandomMutations) {
    const std::vector<std::string> seeds = {
        R"({"text": "a \"quoted\" caf\u00e9 \ud83d\ude00", "label": 3, "x": [1.5e3, null, {"y": false}]})",
        "{\"label\": \"neg\", \"text\": \"caf\xc3\xa9 \xe2\x82\xac\", \"id\": -0.25}",
        R"([{"text": "in array"}, 7, "s"])",
    };
    // Bytes that matter to a JSON grammar, plus UTF-8 lead/continuation bytes.
    const std::string alphabet = "{}[]\":,\\/ -+.0123456789eEtrufalsnbu\t\n\x01\x7f\x80\xbf\xc3\xe2\xed\xf0\xf4\xff";
    std::mt19937 rng(1234);
    int accepted = 0;
    const int iterations = 30000;
    for (int it = 0; it < iterations; ++it) {
        std::string s = seeds[rng() % seeds.size()];
        int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits && !s.empty(); ++e) {
            size_t pos = rng() % s.size();
            char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 3) {
                case 0: s[pos] = c; break;
                case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(pos), c); break;
                default: s.erase(pos, 1); break;
            }
        }
        expect_agrees(s);
        if (::testing::Test::HasFailure()) return;
        accepted += nlohmann_accepts(s);
    }
    // The mix must exercise both sides of the decision.
    EXPECT_GT(accepted, iterations / 50);
    EXPECT_LT(accepted, iterations - iterations / 50);
}

}  // namespace
}  // namespace loom

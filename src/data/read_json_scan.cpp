// A validating one-pass JSON scanner for JSONL lines (see JsonLineScanner in
// read_internal.h).
//
// It accepts exactly RFC 8259 JSON, as nlohmann::json::accept does (the
// loader tests compare the two on valid, invalid and randomly mutated lines):
// strings must be valid UTF-8 without raw control characters, escapes must be
// well formed with paired surrogates, numbers follow the JSON grammar.
// Only the values of wanted top-level keys are decoded; everything else is
// checked and skipped. Nesting deeper than k_max_depth is refused rather than
// recursed into.
#include <charconv>
#include <cstring>

#include "core/check.h"
#include "data/read_internal.h"

namespace loom::data_detail {

namespace {
constexpr int k_max_depth = 256;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

}  // namespace

const char* JsonColumn::type_name() const {
    switch (type) {
        case Type::missing: return "nothing";
        case Type::string: return "string";
        case Type::integer:
        case Type::number: return "number";
        case Type::boolean: return "boolean";
        case Type::null: return "null";
        case Type::object: return "object";
        case Type::array: return "array";
    }
    return "?";
}

JsonLineScanner::JsonLineScanner(std::vector<std::string> wanted)
    : wanted_(std::move(wanted)), columns_(wanted_.size()) {}

bool JsonLineScanner::fail(const char* what) {
    if (error_.empty()) error_ = fmt::format("column {}: {}", pos_ + 1, what);
    return false;
}

bool JsonLineScanner::scan(std::string_view line) {
    s_ = line;
    pos_ = 0;
    error_.clear();
    top_type_ = JsonColumn::Type::missing;
    for (auto& c : columns_) c.type = JsonColumn::Type::missing;
    skip_ws();
    if (pos_ >= s_.size()) return fail("empty line");
    if (!value(0, nullptr, &top_type_)) return false;
    skip_ws();
    if (pos_ != s_.size()) return fail("unexpected characters after the JSON value");
    return true;
}

void JsonLineScanner::skip_ws() {
    while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
}

bool JsonLineScanner::value(int depth, JsonColumn* out, JsonColumn::Type* type) {
    if (pos_ >= s_.size()) return fail("unexpected end of line, expected a value");
    const char c = s_[pos_];
    auto set_type = [&](JsonColumn::Type t) {
        if (type) *type = t;
        if (out) out->type = t;
    };
    switch (c) {
        case '{':
            set_type(JsonColumn::Type::object);
            return object(depth + 1);
        case '[':
            set_type(JsonColumn::Type::array);
            return array(depth + 1);
        case '"':
            set_type(JsonColumn::Type::string);
            return string(out ? &out->str : nullptr);
        case 't':
            set_type(JsonColumn::Type::boolean);
            return literal("true", out);
        case 'f':
            set_type(JsonColumn::Type::boolean);
            return literal("false", out);
        case 'n':
            set_type(JsonColumn::Type::null);
            return literal("null", out);
        default:
            if (c == '-' || is_digit(c)) return number(out, type);
            return fail("expected a value");
    }
}

bool JsonLineScanner::literal(std::string_view word, JsonColumn* out) {
    if (s_.substr(pos_, word.size()) != word) return fail("invalid literal");
    if (out) out->str.assign(word);
    pos_ += word.size();
    return true;
}

bool JsonLineScanner::number(JsonColumn* out, JsonColumn::Type* type) {
    const size_t start = pos_;
    bool integral = true;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) return fail("invalid number: expected a digit");
    if (s_[pos_] == '0') {
        ++pos_;
    } else {
        while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
        integral = false;
        ++pos_;
        if (pos_ >= s_.size() || !is_digit(s_[pos_]))
            return fail("invalid number: expected a digit after '.'");
        while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
        integral = false;
        ++pos_;
        if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
        if (pos_ >= s_.size() || !is_digit(s_[pos_]))
            return fail("invalid number: expected a digit in the exponent");
        while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    JsonColumn::Type t = JsonColumn::Type::number;
    int64_t v = 0;
    if (integral) {
        auto [p, ec] = std::from_chars(s_.data() + start, s_.data() + pos_, v);
        if (ec == std::errc() && p == s_.data() + pos_) t = JsonColumn::Type::integer;
    }
    if (type) *type = t;
    if (out) {
        out->type = t;
        out->integer = v;
        out->str.assign(s_.substr(start, pos_ - start));
    }
    return true;
}

bool JsonLineScanner::string(std::string* out) {
    ++pos_;  // the opening quote
    if (out) out->clear();
    while (true) {
        // Copy the plain run up to the next byte that needs a decision.
        size_t run = pos_;
        while (run < s_.size()) {
            unsigned char b = static_cast<unsigned char>(s_[run]);
            if (b == '"' || b == '\\' || b < 0x20 || b >= 0x80) break;
            ++run;
        }
        if (out) out->append(s_.data() + pos_, run - pos_);
        pos_ = run;
        if (pos_ >= s_.size()) return fail("unterminated string");
        unsigned char b = static_cast<unsigned char>(s_[pos_]);
        if (b == '"') {
            ++pos_;
            return true;
        }
        if (b < 0x20) return fail("control character in a string (escape it)");
        if (b == '\\') {
            if (!escape(out)) return false;
            continue;
        }
        if (!utf8(out)) return false;
    }
}

bool JsonLineScanner::escape(std::string* out) {
    ++pos_;
    if (pos_ >= s_.size()) return fail("unterminated escape");
    char e = s_[pos_++];
    char plain = 0;
    switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
            auto hex4 = [&](uint32_t& cp) {
                if (pos_ + 4 > s_.size()) return false;
                cp = 0;
                for (int i = 0; i < 4; ++i) {
                    int h = hex_value(s_[pos_ + i]);
                    if (h < 0) return false;
                    cp = cp * 16 + static_cast<uint32_t>(h);
                }
                pos_ += 4;
                return true;
            };
            uint32_t cp = 0;
            if (!hex4(cp)) return fail("\\u must be followed by four hex digits");
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail("lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo = 0;
                if (s_.substr(pos_, 2) != "\\u") return fail("high surrogate without its pair");
                pos_ += 2;
                if (!hex4(lo)) return fail("\\u must be followed by four hex digits");
                if (lo < 0xDC00 || lo > 0xDFFF) return fail("high surrogate without its pair");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (out) append_utf8(*out, cp);
            return true;
        }
        default:
            return fail("invalid escape in a string");
    }
    if (out) out->push_back(plain);
    return true;
}

bool JsonLineScanner::utf8(std::string* out) {
    // RFC 3629 well-formed sequences: no overlongs, no surrogates, <= U+10FFFF.
    const size_t start = pos_;
    auto b = [&](size_t i) { return static_cast<unsigned char>(s_[i]); };
    const unsigned char lead = b(pos_);
    int extra = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
    if (lead >= 0xC2 && lead <= 0xDF) {
        extra = 1;
    } else if (lead == 0xE0) {
        extra = 2;
        lo = 0xA0;
    } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
        extra = 2;
    } else if (lead == 0xED) {
        extra = 2;
        hi = 0x9F;
    } else if (lead == 0xF0) {
        extra = 3;
        lo = 0x90;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
        extra = 3;
    } else if (lead == 0xF4) {
        extra = 3;
        hi = 0x8F;
    } else {
        return fail("invalid UTF-8 in a string");
    }
    if (pos_ + static_cast<size_t>(extra) >= s_.size()) return fail("invalid UTF-8 in a string");
    if (b(pos_ + 1) < lo || b(pos_ + 1) > hi) return fail("invalid UTF-8 in a string");
    for (int i = 2; i <= extra; ++i)
        if ((b(pos_ + static_cast<size_t>(i)) & 0xC0) != 0x80) return fail("invalid UTF-8 in a string");
    pos_ += static_cast<size_t>(extra) + 1;
    if (out) out->append(s_.data() + start, pos_ - start);
    return true;
}

bool JsonLineScanner::object(int depth) {
    if (depth > k_max_depth) return fail("nested too deeply");
    ++pos_;  // '{'
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return true;
    }
    while (true) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
        JsonColumn* target = nullptr;
        if (depth == 1) {
            if (!string(&key_)) return false;
            for (size_t i = 0; i < wanted_.size(); ++i)
                if (wanted_[i] == key_) target = &columns_[i];
        } else if (!string(nullptr)) {
            return false;
        }
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':' after an object key");
        ++pos_;
        skip_ws();
        if (!value(depth, target, nullptr)) return false;
        skip_ws();
        if (pos_ >= s_.size()) return fail("unterminated object");
        if (s_[pos_] == ',') {
            ++pos_;
            continue;
        }
        if (s_[pos_] == '}') {
            ++pos_;
            return true;
        }
        return fail("expected ',' or '}' in an object");
    }
}

bool JsonLineScanner::array(int depth) {
    if (depth > k_max_depth) return fail("nested too deeply");
    ++pos_;  // '['
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return true;
    }
    while (true) {
        skip_ws();
        if (!value(depth, nullptr, nullptr)) return false;
        skip_ws();
        if (pos_ >= s_.size()) return fail("unterminated array");
        if (s_[pos_] == ',') {
            ++pos_;
            continue;
        }
        if (s_[pos_] == ']') {
            ++pos_;
            return true;
        }
        return fail("expected ',' or ']' in an array");
    }
}

}  // namespace loom::data_detail

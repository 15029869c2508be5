// JsonAt: path-aware accessors for tokenizer.json values.
#include "tokenizer/json_util.h"

#include <cmath>

namespace loom::tokenizer {

static std::string escape_pointer(const std::string& key) {
    std::string out;
    for (char c : key) {
        if (c == '~') {
            out += "~0";
        } else if (c == '/') {
            out += "~1";
        } else {
            out += c;
        }
    }
    return out;
}

const Json* JsonAt::find(const std::string& key) const {
    if (!j.is_object()) return nullptr;
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
}

JsonAt JsonAt::at(const std::string& key) const {
    require_object();
    const auto it = j.find(key);
    if (it == j.end()) fail("missing required field '" + key + "'");
    return {*it, path + "/" + escape_pointer(key), file};
}

std::string JsonAt::type_name() const { return j.type_name(); }

void JsonAt::require_object() const {
    if (!j.is_object()) fail(std::string("expected an object, found ") + j.type_name());
}
void JsonAt::require_array() const {
    if (!j.is_array()) fail(std::string("expected an array, found ") + j.type_name());
}

std::string JsonAt::as_string() const {
    if (!j.is_string()) fail(std::string("expected a string, found ") + j.type_name());
    return j.get<std::string>();
}

bool JsonAt::as_bool() const {
    if (!j.is_boolean()) fail(std::string("expected true or false, found ") + j.type_name());
    return j.get<bool>();
}

uint64_t JsonAt::as_uint(uint64_t max) const {
    if (j.is_number_unsigned()) {
        const auto v = j.get<uint64_t>();
        if (v > max) fail("value " + std::to_string(v) + " is out of range (at most " + std::to_string(max) + ")");
        return v;
    }
    if (j.is_number_integer()) fail("expected a non-negative integer, found " + std::to_string(j.get<int64_t>()));
    fail(std::string("expected a non-negative integer, found ") + j.type_name());
}

double JsonAt::as_double() const {
    if (!j.is_number()) fail(std::string("expected a number, found ") + j.type_name());
    const double v = j.get<double>();
    if (!std::isfinite(v)) fail("expected a finite number");
    return v;
}

std::string JsonAt::get_string(const std::string& key, const std::string& fallback) const {
    return find(key) ? at(key).as_string() : fallback;
}
bool JsonAt::get_bool(const std::string& key, bool fallback) const {
    return find(key) ? at(key).as_bool() : fallback;
}
uint64_t JsonAt::get_uint(const std::string& key, uint64_t fallback) const {
    return find(key) ? at(key).as_uint(UINT64_MAX) : fallback;
}

}  // namespace loom::tokenizer

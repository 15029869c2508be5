// Helpers for reading tokenizer.json with errors that name the file and the
// JSON pointer of the offending value ("tokenizer.json: /model/vocab: ...").
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "tokenizer/error.h"

namespace loom::tokenizer {

using Json = nlohmann::json;

// A JSON value together with its location, for error messages.
struct JsonAt {
    const Json& j;
    std::string path;  // JSON pointer, "" for the root
    const std::string& file;

    [[noreturn]] void fail(const std::string& msg) const {
        throw TokenizerError(file + ": " + (path.empty() ? "/" : path) + ": " + msg);
    }
    JsonAt at(const std::string& key) const;  // required member
    JsonAt at(size_t index) const { return {j.at(index), path + "/" + std::to_string(index), file}; }
    bool has(const std::string& key) const { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }
    const Json* find(const std::string& key) const;
    void require_object() const;
    void require_array() const;
    std::string type_name() const;

    std::string as_string() const;
    bool as_bool() const;
    uint64_t as_uint(uint64_t max = UINT32_MAX) const;
    double as_double() const;

    std::string get_string(const std::string& key, const std::string& fallback) const;
    bool get_bool(const std::string& key, bool fallback) const;
    uint64_t get_uint(const std::string& key, uint64_t fallback) const;
};

}  // namespace loom::tokenizer

// Typed, located reading of YAML nodes for the job parser.
//
// Every value is read through a YamlCtx and its dotted key path
// ("hyperparameters.learning_rate"), so an error can always say where the
// value came from: "job.yaml:12" for the file, or "--set key=value" for a
// command-line override (yaml-cpp marks of an override point into the
// override's own text, so the path, not the node, decides which one applies).
//
// A section is read with read_fields(): each key must be one of the section's
// fields (unknown keys fail with a hint: the section the key belongs to, a
// known synonym, or a valid key within a few edits; config/key_hints.h), and
// a key may appear only once.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/job.h"
#include "core/check.h"

namespace loom::config {

class YamlCtx {
public:
    std::string file;      // job file as the user named it
    std::string base_dir;  // folder of the job file: relative paths start here
    std::string override_base_dir;
    std::map<std::string, std::string> overrides;  // dotted path -> "--set path=value"
    std::map<std::string, std::string> key_homes;  // key -> section it belongs to
    // Every key read so far (dotted path -> its value), so checks that span
    // several keys can point at the line of the one they blame.
    mutable std::map<std::string, YAML::Node> seen;
    mutable std::map<std::string, YAML::Node> seen_keys;  // the key nodes: their line
    // Lines for the log: accepted keys that change nothing here, and why
    // (they end up in Job::notes).
    mutable std::vector<std::string> notes;

    bool has(const std::string& path) const { return seen.count(path) > 0; }
    // Written with a non-null value.
    bool given(const std::string& path) const {
        auto it = seen.find(path);
        return it != seen.end() && !it->second.IsNull();
    }
    // Where a key that was read was written: "job.yaml:12" or "--set a.b=1".
    std::string where_key(const std::string& path) const;
    // Fails at the key's location when it was written, else at the file.
    [[noreturn]] void fail_key(const std::string& path, const std::string& message) const;

    // "job.yaml:12" or "--set a.b=1".
    std::string where(const std::string& path, const YAML::Node& node) const;
    // The override covering `path` (it or a parent was set), if any.
    const std::string* override_for(const std::string& path) const;
    [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                           const std::string& message) const;
    // Makes a path absolute: against the job file's folder, or the override
    // base for values given with --set.
    std::string resolve_path(const std::string& path, const std::string& value) const;
};

// Optimal-string-alignment distance (a transposition costs 1), case-insensitive.
int edit_distance(std::string_view a, std::string_view b);
// The candidate nearest to `key`; empty when there are none.
std::string nearest_key(std::string_view key, const std::vector<std::string_view>& candidates);

// "a map", "a list", "'abc'" for messages.
std::string describe(const YAML::Node& node);

int64_t read_int(const YamlCtx& ctx, const YAML::Node& node, const std::string& path);
double read_number(const YamlCtx& ctx, const YAML::Node& node, const std::string& path);
bool read_bool(const YamlCtx& ctx, const YAML::Node& node, const std::string& path);
std::string read_string(const YamlCtx& ctx, const YAML::Node& node, const std::string& path);
// null (or ~, or empty) -> std::nullopt.
std::optional<std::string> read_optional_string(const YamlCtx& ctx, const YAML::Node& node,
                                                const std::string& path);

template <class E>
E read_enum(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    std::string s = read_string(ctx, node, path);
    if (auto e = enum_from_name<E>(s)) return *e;
    std::vector<std::string_view> names(EnumTable<E>::names.begin(), EnumTable<E>::names.end());
    std::string list;
    for (auto n : names) list += (list.empty() ? "" : ", ") + std::string(n);
    // The list is complete, so a guess is only worth printing when it is close.
    std::string guess = nearest_key(s, names);
    std::string hint = edit_distance(s, guess) <= std::max<int>(2, static_cast<int>(s.size()) / 3)
                           ? fmt::format("; did you mean '{}'?", guess)
                           : "";
    ctx.fail(path, node,
             fmt::format("{}: '{}' is not a valid value (expected one of: {}){}", path, s, list,
                         hint));
}

using FieldSetter =
    std::function<void(const YamlCtx&, const YAML::Node& value, const std::string& path)>;
struct Field {
    std::string_view name;
    FieldSetter set;
};

// Requires a map (null counts as empty) and applies each key's setter.
void read_fields(const YamlCtx& ctx, const YAML::Node& node, const std::string& path,
                 const std::vector<Field>& fields);

// Field factories binding a key to a struct member.
Field field_int(std::string_view name, int64_t* out);
Field field_number(std::string_view name, double* out);
Field field_bool(std::string_view name, bool* out);
Field field_string(std::string_view name, std::string* out);
// null -> empty string.
Field field_optional_string(std::string_view name, std::string* out);
Field field_path(std::string_view name, std::string* out);

template <class E>
Field field_enum(std::string_view name, E* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = read_enum<E>(c, n, p);
            }};
}

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_path(const std::string& parent, std::string_view key);

}  // namespace loom::config

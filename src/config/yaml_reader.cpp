// Typed, located YAML reading for the job parser (see yaml_reader.h).
//
// Scalars are read leniently in one direction only: a quoted "5e-5" is still
// a number (as HF's argparse would read it), but a number never silently
// becomes a bool and a fractional value never truncates into an integer.
#include "config/yaml_reader.h"

#include "config/key_hints.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace loom::config {

namespace fs = std::filesystem;

std::string join_path(const std::string& parent, std::string_view key) {
    return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

const std::string* YamlCtx::override_for(const std::string& path) const {
    // The override itself, or the nearest parent that was overridden whole.
    std::string p = path;
    while (true) {
        auto it = overrides.find(p);
        if (it != overrides.end()) return &it->second;
        auto dot = p.rfind('.');
        if (dot == std::string::npos) return nullptr;
        p.resize(dot);
    }
}

std::string YamlCtx::where(const std::string& path, const YAML::Node& node) const {
    if (const std::string* o = override_for(path)) return *o;
    YAML::Mark m = node.Mark();
    if (m.is_null() || m.line < 0) return file;
    return fmt::format("{}:{}", file, m.line + 1);
}

void YamlCtx::fail(const std::string& path, const YAML::Node& node,
                   const std::string& message) const {
    LOOM_FAIL("{}: {}", where(path, node), message);
}

std::string YamlCtx::where_key(const std::string& path) const {
    auto it = seen_keys.find(path);
    return it != seen_keys.end() ? where(path, it->second) : file;
}

void YamlCtx::fail_key(const std::string& path, const std::string& message) const {
    auto it = seen_keys.find(path);
    if (it != seen_keys.end()) fail(path, it->second, message);
    LOOM_FAIL("{}: {}", file, message);
}

std::string YamlCtx::resolve_path(const std::string& path, const std::string& value) const {
    // s3://, http(s):// and other URIs are locations, not paths.
    if (value.empty() || value.find("://") != std::string::npos) return value;
    fs::path p(value);
    if (value == "~" || value.starts_with("~/")) {
        const char* home = std::getenv("HOME");
        if (home) p = fs::path(home) / value.substr(std::min<size_t>(2, value.size()));
    }
    if (p.is_relative()) {
        fs::path base;
        if (override_for(path))
            base = override_base_dir.empty() ? fs::current_path() : fs::path(override_base_dir);
        else
            base = base_dir.empty() ? fs::current_path() : fs::path(base_dir);
        p = base / p;
    }
    std::string out = p.lexically_normal().string();
    // A trailing separator (from "dir/") carries no meaning here.
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    return out;
}

int edit_distance(std::string_view a, std::string_view b) {
    const size_t n = a.size(), m = b.size();
    // (n+1, m+1) table, row-major.
    std::vector<int> d((n + 1) * (m + 1));
    auto at = [&](size_t i, size_t j) -> int& { return d[i * (m + 1) + j]; };
    auto lower = [](char c) {
        return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    };
    for (size_t i = 0; i <= n; ++i) at(i, 0) = static_cast<int>(i);
    for (size_t j = 0; j <= m; ++j) at(0, j) = static_cast<int>(j);
    for (size_t i = 1; i <= n; ++i) {
        for (size_t j = 1; j <= m; ++j) {
            int cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
            int best = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
            if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
                lower(a[i - 2]) == lower(b[j - 1]))
                best = std::min(best, at(i - 2, j - 2) + 1);
            at(i, j) = best;
        }
    }
    return at(n, m);
}

std::string nearest_key(std::string_view key, const std::vector<std::string_view>& candidates) {
    std::string best;
    int best_d = 1 << 30;
    for (auto c : candidates) {
        int dist = edit_distance(key, c);
        if (dist < best_d) {
            best_d = dist;
            best = std::string(c);
        }
    }
    return best;
}

std::string describe(const YAML::Node& node) {
    if (!node.IsDefined() || node.IsNull()) return "null";
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    return fmt::format("'{}'", node.Scalar());
}

namespace {

[[noreturn]] void type_error(const YamlCtx& ctx, const YAML::Node& node, const std::string& path,
                             std::string_view expected) {
    ctx.fail(path, node, fmt::format("{}: expected {}, got {}", path, expected, describe(node)));
}

std::optional<double> parse_double(const std::string& s) {
    if (s.empty()) return std::nullopt;
    const char* b = s.data();
    const char* e = s.data() + s.size();
    if (*b == '+') ++b;
    double v = 0;
    auto [ptr, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || ptr != e) return std::nullopt;
    return v;
}

}  // namespace

int64_t read_int(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    if (!node.IsScalar()) type_error(ctx, node, path, "an integer");
    const std::string& s = node.Scalar();
    const char* b = s.data();
    const char* e = s.data() + s.size();
    if (b != e && *b == '+') ++b;
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(b, e, v);
    if (ec == std::errc() && ptr == e && b != e) return v;
    // 1e3 or 100.0 are integers written as floats; 2.5 is not.
    auto d = parse_double(s);
    if (d && std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9.0e18)
        return static_cast<int64_t>(*d);
    type_error(ctx, node, path, "an integer");
}

double read_number(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    if (!node.IsScalar()) type_error(ctx, node, path, "a number");
    auto d = parse_double(node.Scalar());
    if (!d) type_error(ctx, node, path, "a number");
    if (!std::isfinite(*d)) type_error(ctx, node, path, "a finite number");
    return *d;
}

bool read_bool(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    if (!node.IsScalar()) type_error(ctx, node, path, "true or false");
    std::string s = node.Scalar();
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    // YAML's spellings plus HF's string_to_bool ones.
    static const std::set<std::string> yes = {"true", "yes", "on", "y", "t", "1"};
    static const std::set<std::string> no = {"false", "no", "off", "n", "f", "0"};
    if (yes.count(s)) return true;
    if (no.count(s)) return false;
    type_error(ctx, node, path, "true or false");
}

std::string read_string(const YamlCtx& ctx, const YAML::Node& node, const std::string& path) {
    if (!node.IsScalar()) type_error(ctx, node, path, "a string");
    return node.Scalar();
}

std::optional<std::string> read_optional_string(const YamlCtx& ctx, const YAML::Node& node,
                                                const std::string& path) {
    if (!node.IsDefined() || node.IsNull()) return std::nullopt;
    return read_string(ctx, node, path);
}

void read_fields(const YamlCtx& ctx, const YAML::Node& node, const std::string& path,
                 const std::vector<Field>& fields) {
    if (!node.IsDefined() || node.IsNull()) return;
    if (!node.IsMap())
        ctx.fail(path, node,
                 fmt::format("{}: expected a map of keys, got {}", path, describe(node)));
    std::set<std::string> seen;
    for (const auto& kv : node) {
        const YAML::Node key_node = kv.first;
        const YAML::Node value = kv.second;
        if (!key_node.IsScalar())
            ctx.fail(path, key_node,
                     fmt::format("{}: keys must be plain names, got {}",
                                 path.empty() ? "job" : path, describe(key_node)));
        const std::string key = key_node.Scalar();
        const std::string key_path = join_path(path, key);
        if (!seen.insert(key).second)
            ctx.fail(key_path, key_node, fmt::format("duplicate key '{}'", key_path));
        auto f = std::find_if(fields.begin(), fields.end(),
                              [&](const Field& fd) { return fd.name == key; });
        if (f == fields.end()) {
            std::vector<std::string_view> names;
            for (const auto& fd : fields) names.push_back(fd.name);
            ctx.fail(key_path, key_node,
                     fmt::format("unknown key '{}' in {}{}", key,
                                 path.empty() ? "the top level of the job" : path,
                                 unknown_key_hint(key, path, names, ctx.key_homes)));
        }
        ctx.seen[key_path] = value;
        ctx.seen_keys[key_path] = key_node;
        f->set(ctx, value, key_path);
    }
}

Field field_int(std::string_view name, int64_t* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = read_int(c, n, p);
            }};
}
Field field_number(std::string_view name, double* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = read_number(c, n, p);
            }};
}
Field field_bool(std::string_view name, bool* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = read_bool(c, n, p);
            }};
}
Field field_string(std::string_view name, std::string* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = read_string(c, n, p);
            }};
}
Field field_optional_string(std::string_view name, std::string* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = read_optional_string(c, n, p).value_or("");
            }};
}
Field field_path(std::string_view name, std::string* out) {
    return {name, [out](const YamlCtx& c, const YAML::Node& n, const std::string& p) {
                *out = c.resolve_path(p, read_optional_string(c, n, p).value_or(""));
            }};
}

}  // namespace loom::config

// URI splitting for uri.h.
#include "io/uri.h"

#include "core/check.h"

namespace loom {

bool is_remote_uri(std::string_view t) {
    return t.starts_with("s3://") || t.starts_with("http://") || t.starts_with("https://");
}

Uri parse_uri(std::string_view text) {
    Uri u;
    u.text = std::string(text);
    if (text.starts_with("s3://")) {
        u.scheme = UriScheme::s3;
        std::string_view rest = text.substr(5);
        const size_t slash = rest.find('/');
        u.bucket = std::string(rest.substr(0, slash));
        if (slash != std::string_view::npos) u.key = std::string(rest.substr(slash + 1));
        LOOM_CHECK(!u.bucket.empty(), "'{}': an s3:// URI needs a bucket (s3://bucket/key)", text);
        return u;
    }
    if (text.starts_with("http://") || text.starts_with("https://")) {
        u.scheme = text.starts_with("https://") ? UriScheme::https : UriScheme::http;
        u.url = std::string(text);
        LOOM_CHECK(text.size() > (u.scheme == UriScheme::https ? 8u : 7u),
                   "'{}': the URL has no host", text);
        return u;
    }
    if (text.starts_with("file://")) {
        u.path = std::string(text.substr(7));
        return u;
    }
    const size_t colon = text.find("://");
    LOOM_CHECK(colon == std::string_view::npos,
               "'{}': unsupported scheme '{}' (expected a local path, http://, https:// or s3://)",
               text, text.substr(0, colon));
    u.path = std::string(text);
    return u;
}

std::string uri_join(std::string_view base, std::string_view name) {
    std::string out(base);
    while (!out.empty() && out.back() == '/' && !out.ends_with("://")) out.pop_back();
    if (out.empty()) return std::string(name);
    if (!out.ends_with("://")) out += '/';
    while (name.starts_with('/')) name.remove_prefix(1);
    out += name;
    return out;
}

std::string uri_basename(std::string_view text) {
    while (text.size() > 1 && text.back() == '/') text.remove_suffix(1);
    const size_t slash = text.find_last_of('/');
    return std::string(slash == std::string_view::npos ? text : text.substr(slash + 1));
}

}  // namespace loom

// Hub settings from the environment (HF_ENDPOINT, HF_HOME, HF_HUB_CACHE,
// HF_HUB_OFFLINE, HF_TOKEN, HF_TOKEN_PATH), repo id and path checks, and the
// error messages shared by downloads and uploads. See hf_hub.h.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "io/hf_hub.h"
#include "io/hf_hub_internal.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// huggingface_hub's truthy spellings.
bool env_true(const char* name) {
    std::string v = env(name);
    std::transform(v.begin(), v.end(), v.begin(), ::tolower);
    return v == "1" || v == "on" || v == "yes" || v == "true";
}

std::string trim(std::string s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    const size_t e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool id_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

bool id_part_ok(const std::string& p) {
    if (p.empty() || p.size() > 96) return false;
    if (!std::all_of(p.begin(), p.end(), id_char)) return false;
    if (p.find("--") != std::string::npos || p.find("..") != std::string::npos) return false;
    return p.front() != '-' && p.front() != '.' && p.back() != '-' && p.back() != '.';
}

}  // namespace

HubSettings HubSettings::from_environment(const std::string& token, const std::string& token_source) {
    HubSettings s;
    if (std::string e = env("HF_ENDPOINT"); !e.empty()) s.endpoint = e;
    while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
    std::string home = env("HF_HOME");
    if (home.empty()) {
        const std::string xdg = env("XDG_CACHE_HOME");
        home = xdg.empty() ? env("HOME") + "/.cache/huggingface" : xdg + "/huggingface";
    }
    s.cache_dir = env("HF_HUB_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = env("HUGGINGFACE_HUB_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = home + "/hub";
    s.offline = env_true("HF_HUB_OFFLINE");
    s.progress = !env_true("HF_HUB_DISABLE_PROGRESS_BARS");
    if (!token.empty()) {
        s.token = token;
        s.token_source = token_source;
    } else if (std::string t = trim(env("HF_TOKEN")); !t.empty()) {
        s.token = t;
        s.token_source = "HF_TOKEN";
    } else {
        std::string path = env("HF_TOKEN_PATH");
        if (path.empty()) path = home + "/token";
        std::ifstream in(path);
        std::string line;
        if (in && std::getline(in, line) && !trim(line).empty()) {
            s.token = trim(line);
            s.token_source = "the token file " + path;
        }
    }
    return s;
}

bool hub_is_repo_id(const std::string& s) {
    const size_t slash = s.find('/');
    if (slash == std::string::npos) return id_part_ok(s);
    if (s.find('/', slash + 1) != std::string::npos) return false;
    return id_part_ok(s.substr(0, slash)) && id_part_ok(s.substr(slash + 1));
}

void hub_check_relative_path(const std::string& path_in, const std::string& what) {
    LOOM_CHECK(!path_in.empty() && path_in.size() < 4096, "{}: empty or overlong file name", what);
    // Messages show control bytes as '?': a name from a server is not trusted
    // to be printable.
    std::string path = path_in;
    bool control = false;
    for (char& c : path)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            c = '?';
            control = true;
        }
    LOOM_CHECK(!control && path.find('\\') == std::string::npos && path.front() != '/',
               "{}: file name '{}' is not a relative path inside the repo", what, path);
    size_t b = 0;
    while (b <= path.size()) {
        size_t e = path.find('/', b);
        if (e == std::string::npos) e = path.size();
        const std::string part = path.substr(b, e - b);
        LOOM_CHECK(!part.empty() && part != "." && part != "..",
                   "{}: file name '{}' would leave the repo folder (empty, '.' or '..' part)", what,
                   path);
        b = e + 1;
    }
}

std::string hub_repo_cache_dir(const HubSettings& s, const std::string& repo_id) {
    std::string name = "models--" + repo_id;
    for (size_t p; (p = name.find('/')) != std::string::npos;) name.replace(p, 1, "--");
    return (fs::path(s.cache_dir) / name).string();
}

namespace hub_detail {

std::vector<std::string> auth_headers(const HubSettings& s) {
    if (s.token.empty()) return {};
    return {"Authorization: Bearer " + s.token};
}

void fail_response(const HttpResponse& r, const std::string& what, const HubSettings& s) {
    std::string detail = r.header("x-error-message");
    if (detail.empty()) detail = r.body.substr(0, 300);
    // The token must never reach a log, even if a server echoes it.
    if (!s.token.empty())
        for (size_t p; (p = detail.find(s.token)) != std::string::npos;)
            detail.replace(p, s.token.size(), "<token>");
    std::string hint;
    if (r.status == 401 || r.status == 403) {
        hint = s.token.empty()
                   ? "; no token was given (set HF_TOKEN, write one to $HF_HOME/token with "
                     "`huggingface-cli login`, or hub_token in the job)"
                   : fmt::format("; the token from {} was refused or lacks access", s.token_source);
    } else if (r.status == 404) {
        hint = s.token.empty() ? "; the repo, revision or file does not exist, or it is private "
                                 "and no token was given"
                               : "; the repo, revision or file does not exist";
    }
    LOOM_FAIL("{}: HTTP {}{}{}{}", what, r.status, detail.empty() ? "" : ": ", detail, hint);
}

std::string expect_ok(const HttpResponse& r, const std::string& what, const HubSettings& s) {
    if (r.status < 200 || r.status >= 300) fail_response(r, what, s);
    return r.body;
}

}  // namespace hub_detail

}  // namespace loom

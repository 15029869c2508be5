// Credential, region and endpoint resolution for aws_credentials.h: the two
// shared files are INI text ("[section]" then "key = value"; '#' and ';'
// start comments).
#include "io/aws_credentials.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "core/check.h"

namespace loom {

namespace {

using Ini = std::map<std::string, std::map<std::string, std::string>>;

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    const size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// Missing file = empty; a line that is neither a section, a key nor a comment
// is an error (a typo there would otherwise silently drop the credentials).
Ini read_ini(const std::string& path) {
    Ini ini;
    std::ifstream in(path);
    if (!in) return ini;
    std::string line, section;
    int lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        const std::string t = trim(line);
        if (t.empty() || t[0] == '#' || t[0] == ';') continue;
        if (t.front() == '[') {
            LOOM_CHECK(t.back() == ']', "{}:{}: section header '{}' lacks its closing ']'", path,
                       lineno, t);
            section = trim(t.substr(1, t.size() - 2));
            ini[section];
            continue;
        }
        const size_t eq = t.find('=');
        if (eq == std::string::npos) {
            // Nested settings ("s3 =" followed by indented lines) continue here.
            LOOM_CHECK(line[0] == ' ' || line[0] == '\t',
                       "{}:{}: expected 'key = value' or '[section]', got '{}'", path, lineno, t);
            continue;
        }
        if (line[0] == ' ' || line[0] == '\t') continue;  // a nested setting: not ours
        ini[section][trim(t.substr(0, eq))] = trim(t.substr(eq + 1));
    }
    return ini;
}

std::string home_file(const char* env_name, const char* rel) {
    std::string p = env(env_name);
    if (!p.empty()) return p;
    const std::string home = env("HOME");
    return home.empty() ? std::string() : home + "/" + rel;
}

const std::map<std::string, std::string>* find_section(const Ini& ini, const std::string& name) {
    auto it = ini.find(name);
    return it == ini.end() ? nullptr : &it->second;
}

std::string value_of(const std::map<std::string, std::string>* s, const std::string& key) {
    if (!s) return "";
    auto it = s->find(key);
    return it == s->end() ? "" : it->second;
}

}  // namespace

std::string AwsSettings::describe() const {
    if (!has_credentials()) return "no credentials (unsigned request)";
    return fmt::format("access key id {} from {}", access_key_id, source);
}

AwsSettings resolve_aws_settings() {
    AwsSettings s;
    std::string profile = env("AWS_PROFILE");
    if (profile.empty()) profile = "default";
    const std::string cred_path = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    const std::string conf_path = home_file("AWS_CONFIG_FILE", ".aws/config");
    const Ini creds = cred_path.empty() ? Ini{} : read_ini(cred_path);
    const Ini conf = conf_path.empty() ? Ini{} : read_ini(conf_path);
    const auto* cred_sec = find_section(creds, profile);
    const auto* conf_sec =
        find_section(conf, profile == "default" ? std::string("default") : "profile " + profile);

    if (!env("AWS_ACCESS_KEY_ID").empty()) {
        s.access_key_id = env("AWS_ACCESS_KEY_ID");
        s.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
        s.session_token = env("AWS_SESSION_TOKEN");
        s.source = "the environment (AWS_ACCESS_KEY_ID)";
        LOOM_CHECK(!s.secret_access_key.empty(),
                   "AWS_ACCESS_KEY_ID is set ({}) but AWS_SECRET_ACCESS_KEY is not", s.access_key_id);
    } else {
        for (const auto& [sec, path] : {std::pair{cred_sec, cred_path}, std::pair{conf_sec, conf_path}}) {
            const std::string id = value_of(sec, "aws_access_key_id");
            if (id.empty()) continue;
            s.access_key_id = id;
            s.secret_access_key = value_of(sec, "aws_secret_access_key");
            s.session_token = value_of(sec, "aws_session_token");
            s.source = fmt::format("profile '{}' in {}", profile, path);
            LOOM_CHECK(!s.secret_access_key.empty(),
                       "{}: profile '{}' has aws_access_key_id but no aws_secret_access_key", path,
                       profile);
            break;
        }
        LOOM_CHECK(!(profile != "default" && !env("AWS_PROFILE").empty() && !cred_sec && !conf_sec),
                   "AWS_PROFILE is '{}' but neither {} nor {} has that profile", profile, cred_path,
                   conf_path);
    }

    for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"})
        if (!env(name).empty()) {
            s.region = env(name);
            break;
        }
    if (env("AWS_REGION").empty() && env("AWS_DEFAULT_REGION").empty() &&
        !value_of(conf_sec, "region").empty())
        s.region = value_of(conf_sec, "region");

    s.endpoint = env("AWS_ENDPOINT_URL_S3");
    if (s.endpoint.empty()) s.endpoint = env("AWS_ENDPOINT_URL");
    if (s.endpoint.empty()) s.endpoint = value_of(conf_sec, "endpoint_url");
    while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
    LOOM_CHECK(s.endpoint.empty() || s.endpoint.starts_with("http://") ||
                   s.endpoint.starts_with("https://"),
               "AWS endpoint '{}' must start with http:// or https://", s.endpoint);
    return s;
}

}  // namespace loom

// Local and S3 object stores, the data cache and folder upload (object_store.h).
#include "io/object_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fault_points.h"
#include "io/fetch_once.h"
#include "io/file_utils.h"
#include "io/http_client.h"
#include "io/s3_client.h"
#include "io/uri.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

class LocalStore final : public ObjectStore {
  public:
    explicit LocalStore(std::string root) : root_(std::move(root)) {}
    const std::string& uri() const override { return root_; }
    std::vector<StoredObject> list(const std::string& prefix) override {
        std::vector<StoredObject> out;
        if (!fs::is_directory(root_)) return out;
        for (const auto& e : fs::recursive_directory_iterator(root_)) {
            if (!e.is_regular_file()) continue;
            const std::string rel = fs::relative(e.path(), root_).generic_string();
            if (rel.starts_with(prefix)) out.push_back({rel, uint64_t(e.file_size())});
        }
        std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.name < b.name; });
        return out;
    }
    void put_file(const std::string& name, const std::string& local_path) override {
        put_text(name, read_file(local_path));
    }
    void put_text(const std::string& name, std::string_view bytes) override {
        const std::string p = path(name);
        ensure_dir(parent_dir(p));
        write_file_atomic(p, bytes);
    }
    uint64_t get_file(const std::string& name, const std::string& local_path) override {
        const std::string bytes = read_file(path(name));
        write_file_atomic(local_path, bytes);
        return bytes.size();
    }
    std::string get_text(const std::string& name) override { return read_file(path(name)); }
    void remove(const std::string& name) override {
        std::error_code ec;
        fs::remove(path(name), ec);
    }

  private:
    std::string path(const std::string& name) const { return (fs::path(root_) / name).string(); }
    std::string root_;
};

class S3Store final : public ObjectStore {
  public:
    explicit S3Store(const Uri& u) : uri_(u.text), bucket_(u.bucket), prefix_(u.key) {
        while (!uri_.empty() && uri_.back() == '/') uri_.pop_back();
        while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
        if (!prefix_.empty()) prefix_ += '/';
    }
    const std::string& uri() const override { return uri_; }
    std::vector<StoredObject> list(const std::string& prefix) override {
        std::vector<StoredObject> out;
        for (const auto& o : client_.list(bucket_, prefix_ + prefix))
            out.push_back({o.key.substr(prefix_.size()), o.size});
        return out;
    }
    void put_file(const std::string& name, const std::string& local_path) override {
        client_.put_file(bucket_, prefix_ + name, local_path);
    }
    void put_text(const std::string& name, std::string_view bytes) override {
        client_.put(bucket_, prefix_ + name, bytes);
    }
    uint64_t get_file(const std::string& name, const std::string& local_path) override {
        return client_.get_to_file(bucket_, prefix_ + name, local_path);
    }
    std::string get_text(const std::string& name) override {
        return client_.get(bucket_, prefix_ + name);
    }
    void remove(const std::string& name) override { client_.remove(bucket_, prefix_ + name); }

  private:
    std::string uri_, bucket_, prefix_;
    S3Client client_;
};

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

std::string getenv_str(const char* n) {
    const char* v = std::getenv(n);
    return v ? v : "";
}

// Downloads an http(s) URL to `path` (temporary + rename); returns the ETag
// or Last-Modified the server sent, for the cache check.
void http_get_to_file(const std::string& url, const std::string& path) {
    HttpClient http{AwsSettings{}};
    const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
    std::string bytes;
    HttpRequest r;
    r.url = url;
    r.sink = [&](const char* d, size_t n) { bytes.append(d, n); };
    r.reset = [&] { bytes.clear(); };
    HttpResponse resp = http.perform(r);
    LOOM_CHECK(resp.status == 200, "GET {}: HTTP {}{}", url, resp.status,
               resp.attempts > 1 ? fmt::format(" (after {} attempts)", resp.attempts) : "");
    const std::string len = resp.header("content-length");
    LOOM_CHECK(len.empty() || std::stoull(len) == bytes.size(),
               "GET {}: truncated: Content-Length {} but {} bytes arrived", url, len, bytes.size());
    write_file_atomic(path, bytes);
}

}  // namespace

std::string ObjectStore::uri_of(const std::string& name) const {
    return uri_join(uri(), name);
}

std::unique_ptr<ObjectStore> open_object_store(const std::string& text) {
    const Uri u = parse_uri(text);
    switch (u.scheme) {
        case UriScheme::local:
            return std::make_unique<LocalStore>(u.path);
        case UriScheme::s3:
            return std::make_unique<S3Store>(u);
        default:
            LOOM_FAIL(
                "'{}': checkpoints and outputs go to a local folder or s3://bucket/prefix; "
                "http(s) URLs can only be read",
                text);
    }
}

std::string remote_cache_dir() {
    std::string root = getenv_str("LOOM_CACHE_DIR");
    if (root.empty() && !getenv_str("XDG_CACHE_HOME").empty())
        root = getenv_str("XDG_CACHE_HOME") + "/loom";
    if (root.empty() && !getenv_str("HOME").empty()) root = getenv_str("HOME") + "/.cache/loom";
    if (root.empty()) root = (fs::temp_directory_path() / "loom-cache").string();
    ensure_dir(root);
    return root;
}

std::string fetch_to_cache(const std::string& text) {
    const Uri u = parse_uri(text);
    if (!u.is_remote()) return u.path;
    const std::string dir =
        (fs::path(remote_cache_dir()) / "remote" / fmt::format("{:016x}", fnv1a(text))).string();
    const std::string name = uri_basename(text).empty() ? "data" : uri_basename(text);
    if (u.scheme != UriScheme::s3) {
        // Plain http(s): no cheap validator everywhere, so fetch every time
        // (each process renames its own complete copy into place).
        const std::string target = (fs::path(dir) / name).string();
        ensure_dir(dir);
        http_get_to_file(u.url, target);
        return target;
    }
    S3Client client;
    // One object, or a prefix read as a folder.
    std::vector<S3ObjectInfo> objects;
    bool folder = false;
    if (!u.key.empty() && !u.key.ends_with('/')) {
        if (auto info = client.head(u.bucket, u.key)) objects.push_back(*info);
    }
    std::string prefix = u.key;
    if (objects.empty()) {
        if (!prefix.empty() && !prefix.ends_with('/')) prefix += '/';
        objects = client.list(u.bucket, prefix);
        LOOM_CHECK(!objects.empty(), "{}: no such object, and no objects under {}/ (HTTP 404)",
                   text, text);
        folder = true;
        for (auto& o : objects) {
            o.key = o.key.substr(prefix.size());
            if (o.key.empty() || o.key.ends_with('/')) continue;  // "folder" markers
            const fs::path rel = fs::path(o.key).lexically_normal();
            LOOM_CHECK(rel.is_relative() && *rel.begin() != "..",
                       "{}: object key '{}{}' would land outside the cache folder", text, prefix,
                       o.key);
        }
    }
    // The listing (names, sizes, ETags) names the version: a changed object
    // gets a new folder, so a copy another job is reading is never replaced.
    nlohmann::json listing = nlohmann::json::array();
    for (const auto& o : objects) listing.push_back({o.key, o.size, o.etag});
    const std::string target =
        (fs::path(dir) / fmt::format("{:016x}", fnv1a(listing.dump())) / name).string();
    auto get = [&](const std::string& key, const std::string& path, uint64_t size) {
        const uint64_t got = client.get_to_file(u.bucket, key, path);
        LOOM_CHECK(got == size,
                   "{}: {} bytes arrived, the listing said {} (was the object replaced while it "
                   "was fetched?)",
                   s3_uri(u.bucket, key), got, size);
    };
    // Ranks of one job, and jobs sharing the cache, download it once per machine.
    fetch_once(target, [&](const std::string& tmp) {
        if (!folder) return get(u.key, tmp, objects.front().size);
        ensure_dir(tmp);
        for (const auto& o : objects) {
            if (o.key.empty() || o.key.ends_with('/')) continue;  // "folder" markers
            const std::string p = (fs::path(tmp) / o.key).string();
            ensure_dir(parent_dir(p));
            get(prefix + o.key, p, o.size);
        }
    });
    return target;
}

size_t upload_folder(const std::string& local_dir, ObjectStore& store, const std::string& prefix,
                     const std::vector<std::string>& last,
                     const std::vector<std::string>& skip_prefixes) {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(local_dir)) {
        if (!e.is_regular_file()) continue;
        const std::string rel = fs::relative(e.path(), local_dir).generic_string();
        bool skip = false;
        for (const auto& s : skip_prefixes) skip = skip || rel.starts_with(s);
        if (!skip) names.push_back(rel);
    }
    std::sort(names.begin(), names.end());
    std::vector<std::string> order;
    for (const auto& n : names)
        if (std::find(last.begin(), last.end(), n) == last.end()) order.push_back(n);
    for (const auto& n : last)
        if (std::find(names.begin(), names.end(), n) != names.end()) order.push_back(n);
    for (const auto& n : order) {
        fault_point("upload");
        store.put_file(prefix + n, (fs::path(local_dir) / n).string());
    }
    return order.size();
}

}  // namespace loom

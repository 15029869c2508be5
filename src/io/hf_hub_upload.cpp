// Uploads to the Hub: create a repo, then one commit of many files.
//
// Protocol (as huggingface_hub's create_commit and @huggingface/hub's commit):
//   POST {endpoint}/api/repos/create                   {"name", "organization", "private", "type"}
//   POST {endpoint}/api/models/{repo}/preupload/{rev}  {"files": [{"path", "size", "sample"}]}
//        -> {"files": [{"path", "uploadMode": "lfs" | "regular"}]}
//   POST {endpoint}/{repo}.git/info/lfs/objects/batch  (Git LFS batch API, sha_256 oids)
//        -> per object: no action (already stored), actions.upload.href (basic PUT),
//           or actions.upload.header {chunk_size, "1": url, ...} (multipart: PUT each
//           part, keep its ETag, POST {"oid", "parts"} to href); actions.verify when asked
//   POST {endpoint}/api/models/{repo}/commit/{rev}      NDJSON: a "header" line, then
//        "file" (base64 content) or "lfsFile" (sha256 oid + size) lines
//        -> {"commitOid", "commitUrl"}
//
// Files are memory-mapped, not read into memory; each HTTP request retries
// on its own (http_client.h). Not here: when to push (train/hub_push*).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/hf_hub.h"
#include "io/hf_hub_internal.h"
#include "io/http_client.h"
#include "io/sha256.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string base64(std::string_view in) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 |
                           uint8_t(in[i + 2]);
        for (int s = 18; s >= 0; s -= 6) out += t[(v >> s) & 63];
    }
    if (i < in.size()) {
        uint32_t v = uint32_t(uint8_t(in[i])) << 16;
        if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
        out += t[(v >> 18) & 63];
        out += t[(v >> 12) & 63];
        out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

// A read-only mapping of a whole file (empty files map to an empty view).
class Mapped {
public:
    explicit Mapped(const std::string& path) : path_(path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        LOOM_CHECK(fd >= 0, "{}: cannot open for upload: {}", path, std::strerror(errno));
        struct stat st {};
        ::fstat(fd, &st);
        size_ = size_t(st.st_size);
        if (size_ > 0) {
            data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (data_ == MAP_FAILED) data_ = nullptr;
        }
        ::close(fd);
        LOOM_CHECK(size_ == 0 || data_, "{}: cannot map for upload", path);
    }
    ~Mapped() {
        if (data_) ::munmap(data_, size_);
    }
    Mapped(const Mapped&) = delete;
    Mapped& operator=(const Mapped&) = delete;
    std::string_view view() const { return {static_cast<const char*>(data_), size_}; }

private:
    std::string path_;
    void* data_ = nullptr;
    size_t size_ = 0;
};

json parse_json(const std::string& body, const std::string& what) {
    try {
        return json::parse(body);
    } catch (const std::exception& e) {
        LOOM_FAIL("{}: the Hub's answer is not JSON: {}", what, e.what());
    }
}

HttpResponse post_json(HttpClient& http, const std::string& url, const std::string& what,
                       const std::string& body, const HubSettings& s,
                       const std::string& content_type = "application/json") {
    HttpRequest req;
    req.method = "POST";
    req.url = url;
    req.what = what;
    req.headers = hub_detail::auth_headers(s);
    req.headers.push_back("Content-Type: " + content_type);
    if (content_type.find("git-lfs") != std::string::npos) req.headers.push_back("Accept: " + content_type);
    req.body = body;
    return http.perform(req);
}

struct Item {
    HubUploadFile file;
    std::unique_ptr<Mapped> map;
    bool lfs = false;
    std::string oid;  // sha256, LFS only
};

void upload_lfs(HttpClient& http, const Item& it, const json& obj, const HubSettings& s) {
    const std::string what = "LFS upload of " + it.file.path_in_repo;
    if (obj.contains("error"))
        LOOM_FAIL("{}: the Hub refused it: {}", what, obj["error"].dump());
    if (!obj.contains("actions") || !obj["actions"].contains("upload")) return;  // already stored
    const json& up = obj["actions"]["upload"];
    const std::string href = up.value("href", "");
    const std::string_view data = it.map->view();
    if (up.contains("header") && up["header"].contains("chunk_size")) {
        const json& hdr = up["header"];
        const uint64_t chunk = std::stoull(hdr["chunk_size"].get<std::string>());
        LOOM_CHECK(chunk > 0, "{}: chunk_size 0", what);
        std::vector<int> parts;
        for (const auto& [k, v] : hdr.items())
            if (!k.empty() && std::all_of(k.begin(), k.end(), ::isdigit)) parts.push_back(std::stoi(k));
        std::sort(parts.begin(), parts.end());
        LOOM_CHECK(parts.size() == (data.size() + chunk - 1) / chunk,
                   "{}: the server asked for {} parts of {} bytes for {} bytes", what, parts.size(),
                   chunk, data.size());
        json done = {{"oid", it.oid}, {"parts", json::array()}};
        for (int p : parts) {
            HttpRequest put;
            put.method = "PUT";
            put.url = hdr[std::to_string(p)].get<std::string>();
            put.what = fmt::format("{} part {}", what, p);
            const uint64_t b = uint64_t(p - 1) * chunk;
            put.body = data.substr(b, std::min<uint64_t>(chunk, data.size() - b));
            const HttpResponse r = http.perform(put);
            hub_detail::expect_ok(r, put.what, s);
            LOOM_CHECK(!r.header("etag").empty(), "{}: the server gave no ETag", put.what);
            done["parts"].push_back({{"partNumber", p}, {"etag", r.header("etag")}});
        }
        hub_detail::expect_ok(
            post_json(http, href, what + " (completing)", done.dump(), s, "application/vnd.git-lfs+json"),
            what + " (completing)", s);
    } else {
        HttpRequest put;
        put.method = "PUT";
        put.url = href;
        put.what = what;
        put.body = data;
        hub_detail::expect_ok(http.perform(put), what, s);
    }
    if (obj["actions"].contains("verify")) {
        const json& v = obj["actions"]["verify"];
        json body = {{"oid", it.oid}, {"size", data.size()}};
        hub_detail::expect_ok(post_json(http, v.value("href", ""), what + " (verify)", body.dump(), s,
                                        "application/vnd.git-lfs+json"),
                              what + " (verify)", s);
    }
}

}  // namespace

void hub_create_repo(const std::string& repo_id, bool is_private, const HubSettings& s) {
    LOOM_CHECK(hub_is_repo_id(repo_id), "'{}' is not a Hub repo id (org/name)", repo_id);
    LOOM_CHECK(!s.offline, "cannot push {}: HF_HUB_OFFLINE is set", repo_id);
    HttpClient http;
    const size_t slash = repo_id.find('/');
    json body = {{"name", slash == std::string::npos ? repo_id : repo_id.substr(slash + 1)},
                 {"private", is_private},
                 {"type", "model"}};
    if (slash != std::string::npos) body["organization"] = repo_id.substr(0, slash);
    const std::string what = "creating the Hub repo " + repo_id;
    const HttpResponse r = post_json(http, s.endpoint + "/api/repos/create", what, body.dump(), s);
    if (r.status == 409) return;  // it exists
    hub_detail::expect_ok(r, what, s);
}

HubCommitResult hub_commit_files(const std::string& repo_id, const std::vector<HubUploadFile>& files,
                                 const std::string& title, const HubSettings& s,
                                 const std::string& branch) {
    LOOM_CHECK(hub_is_repo_id(repo_id), "'{}' is not a Hub repo id (org/name)", repo_id);
    LOOM_CHECK(!s.offline, "cannot push {}: HF_HUB_OFFLINE is set", repo_id);
    HttpClient http;
    const std::string api = fmt::format("{}/api/models/{}", s.endpoint, repo_id);
    const std::string rev = uri_encode(branch, false);

    std::vector<Item> items;
    json pre = {{"files", json::array()}};
    for (const auto& f : files) {
        hub_check_relative_path(f.path_in_repo, "upload to " + repo_id);
        Item it{f, std::make_unique<Mapped>(f.local_path), false, ""};
        const std::string_view v = it.map->view();
        pre["files"].push_back(
            {{"path", f.path_in_repo}, {"size", v.size()}, {"sample", base64(v.substr(0, 512))}});
        items.push_back(std::move(it));
    }
    const std::string pre_what = "preupload to " + repo_id;
    const json pre_ans = parse_json(
        hub_detail::expect_ok(post_json(http, fmt::format("{}/preupload/{}", api, rev), pre_what,
                                        pre.dump(), s),
                              pre_what, s),
        pre_what);
    if (pre_ans.contains("files"))
        for (const auto& f : pre_ans["files"])
            for (auto& it : items)
                if (it.file.path_in_repo == f.value("path", "") && f.value("uploadMode", "") == "lfs")
                    it.lfs = true;

    json batch = {{"operation", "upload"},
                  {"transfers", {"basic", "multipart"}},
                  {"hash_algo", "sha_256"},
                  {"ref", {{"name", branch}}},
                  {"objects", json::array()}};
    for (auto& it : items) {
        if (!it.lfs) continue;
        Sha256 h;
        h.update(it.map->view());
        it.oid = h.hex();
        batch["objects"].push_back({{"oid", it.oid}, {"size", it.map->view().size()}});
    }
    if (!batch["objects"].empty()) {
        const std::string what = "LFS batch for " + repo_id;
        const json ans = parse_json(
            hub_detail::expect_ok(post_json(http,
                                            fmt::format("{}/{}.git/info/lfs/objects/batch",
                                                        s.endpoint, repo_id),
                                            what, batch.dump(), s, "application/vnd.git-lfs+json"),
                                  what, s),
            what);
        LOOM_CHECK(ans.contains("objects") && ans["objects"].is_array(), "{}: no objects", what);
        for (const auto& obj : ans["objects"]) {
            const std::string oid = obj.value("oid", "");
            const auto it = std::find_if(items.begin(), items.end(),
                                         [&](const Item& i) { return i.lfs && i.oid == oid; });
            LOOM_CHECK(it != items.end(), "{}: the server answered for an oid not asked for", what);
            upload_lfs(http, *it, obj, s);
        }
    }

    std::string nd = json{{"key", "header"}, {"value", {{"summary", title}, {"description", ""}}}}.dump();
    for (const auto& it : items) {
        nd += '\n';
        if (it.lfs)
            nd += json{{"key", "lfsFile"},
                       {"value",
                        {{"path", it.file.path_in_repo},
                         {"algo", "sha256"},
                         {"oid", it.oid},
                         {"size", it.map->view().size()}}}}
                      .dump();
        else
            nd += json{{"key", "file"},
                       {"value",
                        {{"path", it.file.path_in_repo},
                         {"content", base64(it.map->view())},
                         {"encoding", "base64"}}}}
                      .dump();
    }
    const std::string what = fmt::format("commit to {} ({} files)", repo_id, items.size());
    const json ans = parse_json(
        hub_detail::expect_ok(post_json(http, fmt::format("{}/commit/{}", api, rev), what, nd, s,
                                        "application/x-ndjson"),
                              what, s),
        what);
    return {ans.value("commitOid", ""), ans.value("commitUrl", "")};
}

std::vector<HubUploadFile> hub_folder_files(const std::string& folder,
                                            const std::function<bool(const std::string&)>& skip) {
    std::vector<HubUploadFile> out;
    LOOM_CHECK(fs::is_directory(folder), "{}: not a folder", folder);
    for (auto it = fs::recursive_directory_iterator(folder); it != fs::recursive_directory_iterator();
         ++it) {
        const std::string rel = fs::relative(it->path(), folder).generic_string();
        if (skip && skip(rel)) {
            if (it->is_directory()) it.disable_recursion_pending();
            continue;
        }
        if (it->is_regular_file()) out.push_back({rel, it->path().string()});
    }
    std::sort(out.begin(), out.end(),
              [](const HubUploadFile& a, const HubUploadFile& b) { return a.path_in_repo < b.path_in_repo; });
    return out;
}

}  // namespace loom

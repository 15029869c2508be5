// hub_resolve_model(): a model id to a snapshot folder in the shared Hugging
// Face cache, downloading the files Loom needs that are not there yet.
//
// Protocol (as huggingface_hub's snapshot_download / hf_hub_download):
//   GET  {endpoint}/api/models/{repo}/revision/{rev}  -> {"sha", "siblings": [{"rfilename"}]}
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}     (redirects not followed)
//        -> ETag or X-Linked-Etag (the SHA-256 for LFS files), size in
//           X-Linked-Size or Content-Length
//   GET  the same URL (redirects followed), with Range to resume
//
// A blob is written to blobs/<etag>.incomplete (kept across runs, so a cut
// download resumes), checked, and published through fetch_once (one download
// per machine); the snapshot link is made after, by rename, so a snapshot file
// that exists is always complete.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "io/fetch_once.h"
#include "io/hf_hub.h"
#include "io/hf_hub_internal.h"
#include "io/http_client.h"
#include "io/sha256.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_hex(const std::string& s, size_t n) {
    return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
               return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
           });
}

std::string read_small(const fs::path& p) {
    std::ifstream in(p);
    std::string s;
    std::getline(in, s);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    return s;
}

// Writes `text` to `p` through a temporary renamed into place.
void write_atomic(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    const fs::path tmp = p.string() + fmt::format(".tmp.{}", ::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        LOOM_CHECK(out.good(), "{}: cannot write", tmp.string());
    }
    fs::rename(tmp, p);
}

// The files of a snapshot Loom needs, given the repo's file list (or, offline,
// what is in the folder). Weight shards come from the index, once it is there.
struct Needs {
    std::vector<std::string> files;  // in download order; the index before its shards
};

std::vector<std::string> index_shards(const fs::path& index_path, const std::string& what) {
    std::ifstream in(index_path);
    LOOM_CHECK(in.good(), "{}: cannot open", index_path.string());
    json j;
    try {
        j = json::parse(in);
    } catch (const std::exception& e) {
        LOOM_FAIL("{}: not valid JSON: {}", what, e.what());
    }
    LOOM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
               "{}: expected {{\"weight_map\": {{tensor name: shard file}}}}", what);
    std::set<std::string> shards;
    for (const auto& [name, v] : j["weight_map"].items()) {
        LOOM_CHECK(v.is_string(), "{}: weight_map[\"{}\"] is not a file name", what, name);
        const std::string f = v.get<std::string>();
        hub_check_relative_path(f, what + " weight_map[\"" + name + "\"]");
        shards.insert(f);
    }
    LOOM_CHECK(!shards.empty(), "{}: weight_map is empty", what);
    return {shards.begin(), shards.end()};
}

// Throws unless `p` (following links) is inside `root`.
void check_inside(const fs::path& p, const fs::path& root, const std::string& what) {
    const fs::path real = fs::weakly_canonical(p);
    const fs::path base = fs::weakly_canonical(root);
    auto rel = real.lexically_relative(base);
    LOOM_CHECK(!rel.empty() && *rel.begin() != "..",
               "{}: {} resolves to {}, outside the cache {}", what, p.string(), real.string(),
               base.string());
}

// What is missing from a snapshot folder for Loom to use it; empty = usable.
std::vector<std::string> snapshot_missing(const fs::path& snap) {
    std::vector<std::string> missing;
    for (const char* f : {"config.json", "tokenizer.json"})
        if (!fs::exists(snap / f)) missing.push_back(f);
    if (fs::exists(snap / "model.safetensors")) return missing;
    const fs::path index = snap / "model.safetensors.index.json";
    if (!fs::exists(index)) {
        missing.push_back("model.safetensors");
        return missing;
    }
    for (const auto& shard : index_shards(index, index.string()))
        if (!fs::exists(snap / shard)) missing.push_back(shard);
    return missing;
}

void check_snapshot_links(const fs::path& snap, const fs::path& cache, const std::string& what) {
    std::vector<std::string> files = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                      "special_tokens_map.json", "model.safetensors",
                                      "model.safetensors.index.json"};
    if (fs::exists(snap / "model.safetensors.index.json"))
        for (auto& s : index_shards(snap / "model.safetensors.index.json", what)) files.push_back(s);
    for (const auto& f : files)
        if (fs::exists(fs::symlink_status(snap / f))) check_inside(snap / f, cache, what);
}

struct Downloader {
    const std::string& repo;
    const HubSettings& s;
    fs::path repo_dir;
    std::string commit;
    HttpClient http;

    std::string resolve_url(const std::string& file) const {
        return fmt::format("{}/{}/resolve/{}/{}", s.endpoint, repo, commit,
                           uri_encode(file, /*keep_slash=*/true));
    }

    // The file at snapshots/<commit>/<file>, downloaded if missing.
    void ensure(const std::string& file) {
        hub_check_relative_path(file, repo + " (file name from the server)");
        const fs::path link = repo_dir / "snapshots" / commit / file;
        if (fs::exists(link)) return;
        const std::string what = fmt::format("{}@{} {}", repo, commit.substr(0, 12), file);
        HttpRequest head;
        head.method = "HEAD";
        head.url = resolve_url(file);
        head.what = what;
        head.headers = hub_detail::auth_headers(s);
        head.follow_redirects = false;
        const HttpResponse h = http.perform(head);
        if (h.status >= 400 || h.status < 200) hub_detail::fail_response(h, "HEAD " + what, s);
        std::string etag = h.header("x-linked-etag");
        if (etag.empty()) etag = h.header("etag");
        if (etag.starts_with("W/")) etag = etag.substr(2);
        if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
            etag = etag.substr(1, etag.size() - 2);
        LOOM_CHECK(!etag.empty() && etag.size() <= 128 &&
                       std::all_of(etag.begin(), etag.end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }),
                   "{}: the server's ETag '{}' is not a plain hash", what, etag.substr(0, 80));
        std::string size_text = h.header("x-linked-size");
        if (size_text.empty()) size_text = h.header("content-length");
        char* end = nullptr;
        const long long size = std::strtoll(size_text.c_str(), &end, 10);
        LOOM_CHECK(!size_text.empty() && end && *end == '\0' && size >= 0,
                   "{}: the server gave no file size (X-Linked-Size / Content-Length)", what);

        const fs::path blob = repo_dir / "blobs" / etag;
        fs::create_directories(blob.parent_path());
        FetchOnceOptions fo;
        fo.is_complete = [&](const std::string& t) {
            return fs::is_regular_file(t) && fs::file_size(t) == uint64_t(size);
        };
        fetch_once(blob.string(), [&](const std::string& tmp) { download(file, what, etag, uint64_t(size), blob, tmp); },
                   fo);
        // The link, relative as huggingface_hub makes it: up from the file's
        // folder to the repo folder, then into blobs/.
        fs::create_directories(link.parent_path());
        std::string target;
        const size_t depth = size_t(std::count(file.begin(), file.end(), '/')) + 2;
        for (size_t i = 0; i < depth; ++i) target += "../";
        target += "blobs/" + etag;
        const fs::path tmp_link = link.string() + fmt::format(".tmp.{}", ::getpid());
        fs::remove(tmp_link);
        fs::create_symlink(target, tmp_link);
        fs::rename(tmp_link, link);
    }

    void download(const std::string& file, const std::string& what, const std::string& etag,
                  uint64_t size, const fs::path& blob, const std::string& tmp) {
        const fs::path part = blob.string() + ".incomplete";
        uint64_t have = fs::exists(part) ? fs::file_size(part) : 0;
        if (have > size) {
            fs::remove(part);
            have = 0;
        }
        if (s.progress)
            fmt::print(stderr, "hub: downloading {}/{} ({:.1f} MB{})\n", repo, file, double(size) / 1e6,
                       have ? fmt::format(", resuming at {:.1f} MB", double(have) / 1e6) : "");
        for (int pass = 0; pass < 2 && have < size; ++pass) {
            std::FILE* f = std::fopen(part.c_str(), have ? "ab" : "wb");
            LOOM_CHECK(f, "{}: cannot write", part.string());
            const uint64_t start = have;
            uint64_t got = start, next_note = start + size / 10 + 1;
            HttpRequest get;
            get.url = resolve_url(file);
            get.what = what;
            get.headers = hub_detail::auth_headers(s);
            if (start > 0) {
                get.range_offset = int64_t(start);
                get.range_length = size - start;
            }
            get.sink = [&](const char* d, size_t n) {
                LOOM_CHECK(got + n <= size, "{}: the server sent more than the {} bytes announced",
                           what, size);
                LOOM_CHECK(std::fwrite(d, 1, n, f) == n, "{}: write failed", part.string());
                got += n;
                if (s.progress && got >= next_note && size > (1u << 20)) {
                    fmt::print(stderr, "hub:   {}: {:.0f}%\n", file, 100.0 * double(got) / double(size));
                    next_note = got + size / 10 + 1;
                }
            };
            get.reset = [&] {
                std::fflush(f);
                LOOM_CHECK(::ftruncate(fileno(f), off_t(start)) == 0, "{}: truncate failed",
                           part.string());
                std::fseek(f, 0, SEEK_END);
                got = start;
            };
            HttpResponse r;
            try {
                r = http.perform(get);
            } catch (...) {
                std::fclose(f);  // what arrived stays in .incomplete for the next run
                throw;
            }
            std::fclose(f);
            if (r.status == 200 && start > 0) {
                // The server ignored the range and sent the whole file after
                // what we had: start over.
                fs::remove(part);
                have = 0;
                continue;
            }
            if (r.status != 200 && r.status != 206) hub_detail::fail_response(r, "GET " + what, s);
            have = fs::file_size(part);
        }
        LOOM_CHECK(have == size, "{}: received {} bytes, the server announced {}", what, have, size);
        if (is_hex(etag, 64)) {
            const std::string sum = sha256_file(part.string());
            if (sum != etag) {
                fs::remove(part);
                LOOM_FAIL("{}: SHA-256 {} does not match the Hub's {} (the download is removed)",
                          what, sum, etag);
            }
        }
        fs::rename(part, tmp);
    }
};

// The repo's commit and file list, or nullopt-like empty sha on a network failure.
json revision_info(HttpClient& http, const std::string& repo, const std::string& rev,
                   const HubSettings& s) {
    HttpRequest req;
    req.url = fmt::format("{}/api/models/{}/revision/{}", s.endpoint, repo, uri_encode(rev, false));
    req.what = fmt::format("{} at revision {}", repo, rev);
    req.headers = hub_detail::auth_headers(s);
    const std::string body = hub_detail::expect_ok(http.perform(req), req.what, s);
    json j;
    try {
        j = json::parse(body);
    } catch (const std::exception& e) {
        LOOM_FAIL("{}: the Hub's answer is not JSON: {}", req.url, e.what());
    }
    LOOM_CHECK(j.is_object() && j.contains("sha") && j["sha"].is_string() &&
                   is_hex(j["sha"].get<std::string>(), 40),
               "{}: the Hub's answer has no 40-hex \"sha\"", req.url);
    return j;
}

}  // namespace

std::string hub_resolve_model(const std::string& repo, const std::string& revision_in,
                              const HubSettings& s) {
    LOOM_CHECK(hub_is_repo_id(repo),
               "'{}' is neither a model folder nor a Hub model id (org/name)", repo);
    const std::string rev = revision_in.empty() ? "main" : revision_in;
    hub_check_relative_path(rev, "revision");
    const fs::path repo_dir = hub_repo_cache_dir(s, repo);
    const fs::path ref_file = repo_dir / "refs" / rev;
    const std::string label = fmt::format("{}@{}", repo, rev);

    auto cached = [&]() -> std::string {
        if (is_hex(rev, 40)) return rev;
        return fs::exists(ref_file) ? read_small(ref_file) : "";
    };
    auto use_cache = [&](const std::string& commit, const std::string& why) {
        LOOM_CHECK(is_hex(commit, 40), "{}: {} and it is not in the cache {} (no {})", label, why,
                   repo_dir.string(), ref_file.string());
        const fs::path snap = repo_dir / "snapshots" / commit;
        const auto missing = snapshot_missing(snap);
        LOOM_CHECK(missing.empty(), "{}: {} and the cached snapshot {} lacks {}", label, why,
                   snap.string(), fmt::join(missing, ", "));
        check_snapshot_links(snap, s.cache_dir, label);
        return snap.string();
    };
    if (s.offline) return use_cache(cached(), "HF_HUB_OFFLINE is set");

    Downloader d{repo, s, repo_dir, "", HttpClient({}, RetryPolicy::from_environment())};
    json info;
    try {
        info = revision_info(d.http, repo, rev, s);
    } catch (const Error& e) {
        // Unreachable Hub: a snapshot already cached for this revision is
        // used as transformers does; HTTP errors (401, 404) are not hidden.
        const std::string msg = e.what();
        if (msg.find(": HTTP ") != std::string::npos) throw;
        const std::string commit = cached();
        if (commit.empty()) throw;
        fmt::print(stderr, "hub: {} unreachable ({}); using the cached snapshot {}\n", s.endpoint,
                   msg, commit);
        return use_cache(commit, "the Hub is unreachable");
    }
    d.commit = info["sha"].get<std::string>();
    std::set<std::string> siblings;
    if (info.contains("siblings") && info["siblings"].is_array())
        for (const auto& f : info["siblings"])
            if (f.is_object() && f.contains("rfilename") && f["rfilename"].is_string())
                siblings.insert(f["rfilename"].get<std::string>());
    auto has = [&](const std::string& f) { return siblings.count(f) > 0; };

    const fs::path snap = repo_dir / "snapshots" / d.commit;
    LOOM_CHECK(has("config.json"), "{}: the repo has no config.json", label);
    d.ensure("config.json");
    LOOM_CHECK(has("tokenizer.json"),
               "{}: the repo has no tokenizer.json (Loom reads tokenizers only from tokenizer.json; "
               "save one with the tokenizer's save_pretrained and push it)",
               label);
    d.ensure("tokenizer.json");
    for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"})
        if (has(f)) d.ensure(f);
    if (has("model.safetensors")) {
        d.ensure("model.safetensors");
    } else if (has("model.safetensors.index.json")) {
        d.ensure("model.safetensors.index.json");
        for (const auto& shard : index_shards(snap / "model.safetensors.index.json",
                                              label + " model.safetensors.index.json")) {
            LOOM_CHECK(has(shard), "{}: model.safetensors.index.json names {}, which the repo lacks",
                       label, shard);
            d.ensure(shard);
        }
    } else if (has("pytorch_model.bin") || has("pytorch_model.bin.index.json") ||
               has("tf_model.h5") || has("flax_model.msgpack")) {
        LOOM_FAIL(
            "{}: the repo has weights only as pytorch_model.bin / TF / Flax files; Loom reads "
            "model.safetensors (convert with transformers: from_pretrained(...) then "
            "save_pretrained(dir, safe_serialization=True), and use that folder or push it)",
            label);
    } else {
        LOOM_FAIL("{}: the repo has no model.safetensors or model.safetensors.index.json", label);
    }
    if (rev != d.commit) write_atomic(ref_file, d.commit);
    check_snapshot_links(snap, s.cache_dir, label);
    return snap.string();
}

}  // namespace loom

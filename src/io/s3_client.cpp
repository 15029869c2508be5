// S3 REST calls for s3_client.h. Responses are small XML documents; the few
// fields read here are pulled out with xml_values rather than a full parser.
#include "io/s3_client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/check.h"

namespace loom {

namespace {

std::string xml_unescape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '&') {
            out += s[i];
            continue;
        }
        const size_t semi = s.find(';', i);
        if (semi == std::string_view::npos) {
            out += s[i];
            continue;
        }
        const std::string_view ent = s.substr(i + 1, semi - i - 1);
        if (ent == "amp")
            out += '&';
        else if (ent == "lt")
            out += '<';
        else if (ent == "gt")
            out += '>';
        else if (ent == "quot")
            out += '"';
        else if (ent == "apos")
            out += '\'';
        else if (ent.starts_with("#x"))
            out += char(std::stoi(std::string(ent.substr(2)), nullptr, 16));
        else if (ent.starts_with('#'))
            out += char(std::stoi(std::string(ent.substr(1))));
        else
            out += std::string(s.substr(i, semi - i + 1));
        i = semi;
    }
    return out;
}

std::string os_reason(int err) {
    return std::generic_category().message(err);
}

// Strips the quotes S3 puts around ETags.
std::string unquote(std::string s) {
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
    return s;
}

}  // namespace

std::string s3_uri(const std::string& bucket, const std::string& key) {
    return "s3://" + bucket + "/" + key;
}

std::vector<std::string> xml_values(std::string_view xml, std::string_view tag) {
    std::vector<std::string> out;
    const std::string open = fmt::format("<{}>", tag), close = fmt::format("</{}>", tag);
    size_t pos = 0;
    for (;;) {
        const size_t b = xml.find(open, pos);
        if (b == std::string_view::npos) break;
        const size_t e = xml.find(close, b + open.size());
        if (e == std::string_view::npos) break;
        out.push_back(xml_unescape(xml.substr(b + open.size(), e - b - open.size())));
        pos = e + close.size();
    }
    return out;
}

S3Client::S3Client(AwsSettings settings, RetryPolicy policy, S3Options options)
    : http_(std::move(settings), policy), options_(options) {}

std::string S3Client::object_url(const std::string& bucket, const std::string& key,
                                 const std::string& query) const {
    const AwsSettings& s = http_.settings();
    std::string url;
    if (!s.endpoint.empty())
        url = s.endpoint + "/" + bucket + (key.empty() ? "" : "/" + uri_encode(key, true));
    else if (bucket.find('.') != std::string::npos)  // dots break the TLS wildcard
        url = "https://s3." + s.region + ".amazonaws.com/" + bucket + "/" + uri_encode(key, true);
    else
        url = "https://" + bucket + ".s3." + s.region + ".amazonaws.com/" + uri_encode(key, true);
    if (!query.empty()) url += "?" + query;
    return url;
}

void S3Client::fail_status(const char* op, const std::string& bucket, const std::string& key,
                           const HttpResponse& resp) const {
    const auto codes = xml_values(resp.body, "Code");
    const auto msgs = xml_values(resp.body, "Message");
    std::string detail;
    if (!codes.empty()) detail = " " + codes[0] + (msgs.empty() ? "" : ": " + msgs[0]);
    std::string tail;
    if (resp.status == 403 || resp.status == 401) {
        tail = fmt::format("\nthe request was signed with {} (region {})",
                           http_.settings().describe(), http_.settings().region);
        tail += http_.settings().has_credentials()
                    ? "\nHINT: check that this key may access the bucket and that its secret is "
                      "right (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                    : "\nHINT: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE";
    } else if (resp.attempts > 1) {
        tail = fmt::format(" (after {} attempts)", resp.attempts);
    }
    LOOM_FAIL("{} {}: HTTP {}{}{}", op, s3_uri(bucket, key), resp.status, detail, tail);
}

std::optional<S3ObjectInfo> S3Client::head(const std::string& bucket, const std::string& key) {
    HttpRequest r;
    r.method = "HEAD";
    r.url = object_url(bucket, key);
    r.what = s3_uri(bucket, key);
    HttpResponse resp = http_.perform(r);
    if (resp.status == 404) return std::nullopt;
    if (resp.status != 200) fail_status("HEAD", bucket, key, resp);
    S3ObjectInfo info;
    info.key = key;
    const std::string len = resp.header("content-length");
    LOOM_CHECK(!len.empty(), "HEAD {}: the response has no Content-Length", r.what);
    info.size = std::stoull(len);
    info.etag = unquote(resp.header("etag"));
    return info;
}

void S3Client::get_range(const std::string& bucket, const std::string& key, uint64_t offset,
                         size_t n, void* dst) {
    if (n == 0) return;
    HttpRequest r;
    r.url = object_url(bucket, key);
    r.what = s3_uri(bucket, key);
    r.range_offset = int64_t(offset);
    r.range_length = n;
    size_t got = 0;
    char* out = static_cast<char*>(dst);
    r.sink = [&](const char* data, size_t len) {
        LOOM_CHECK(got + len <= n,
                   "GET {}: the server sent more than the {} bytes asked for at "
                   "offset {} (it ignored the Range header)",
                   r.what, n, offset);
        std::memcpy(out + got, data, len);
        got += len;
    };
    r.reset = [&] { got = 0; };
    HttpResponse resp = http_.perform(r);
    if (resp.status == 416)
        LOOM_FAIL(
            "GET {}: truncated object: bytes {}..{} asked for, but the object ends before "
            "offset {} (HTTP 416)",
            r.what, offset, offset + n, offset);
    if (resp.status == 404) fail_status("GET", bucket, key, resp);
    if (resp.status != 206 && resp.status != 200) fail_status("GET", bucket, key, resp);
    LOOM_CHECK(got == n,
               "GET {}: truncated object: expected {} bytes at offset {}, got {} (the "
               "object ends at offset {})",
               r.what, n, offset, got, offset + got);
}

std::string S3Client::get(const std::string& bucket, const std::string& key) {
    HttpRequest r;
    r.url = object_url(bucket, key);
    r.what = s3_uri(bucket, key);
    HttpResponse resp = http_.perform(r);
    if (resp.status != 200) fail_status("GET", bucket, key, resp);
    return std::move(resp.body);
}

uint64_t S3Client::get_to_file(const std::string& bucket, const std::string& key,
                               const std::string& path) {
    const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    LOOM_CHECK(fd >= 0, "cannot create '{}' to download {}: {}", tmp, s3_uri(bucket, key),
               os_reason(errno));
    uint64_t got = 0;
    HttpRequest r;
    r.url = object_url(bucket, key);
    r.what = s3_uri(bucket, key);
    r.sink = [&](const char* data, size_t len) {
        size_t done = 0;
        while (done < len) {
            const ssize_t w = ::write(fd, data + done, len - done);
            if (w < 0 && errno == EINTR) continue;
            LOOM_CHECK(w > 0, "cannot write '{}' (downloading {}): {}", tmp, r.what,
                       os_reason(errno));
            done += size_t(w);
        }
        got += len;
    };
    r.reset = [&] {
        got = 0;
        LOOM_CHECK(::ftruncate(fd, 0) == 0 && ::lseek(fd, 0, SEEK_SET) == 0,
                   "cannot truncate '{}' for a retry: {}", tmp, os_reason(errno));
    };
    HttpResponse resp;
    try {
        resp = http_.perform(r);
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    const int close_rc = ::close(fd);
    if (resp.status != 200 || close_rc != 0) {
        ::unlink(tmp.c_str());
        if (resp.status != 200) fail_status("GET", bucket, key, resp);
        LOOM_FAIL("cannot close '{}' (downloading {}): {}", tmp, r.what, os_reason(errno));
    }
    const std::string len = resp.header("content-length");
    if (!len.empty() && std::stoull(len) != got) {
        ::unlink(tmp.c_str());
        LOOM_FAIL("GET {}: truncated object: Content-Length {} but {} bytes arrived", r.what, len,
                  got);
    }
    LOOM_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '{}' to '{}': {}", tmp,
               path, os_reason(errno));
    return got;
}

void S3Client::put(const std::string& bucket, const std::string& key, std::string_view bytes) {
    HttpRequest r;
    r.method = "PUT";
    r.url = object_url(bucket, key);
    r.what = s3_uri(bucket, key);
    r.body = bytes;
    HttpResponse resp = http_.perform(r);
    if (resp.status != 200) fail_status("PUT", bucket, key, resp);
}

void S3Client::put_file(const std::string& bucket, const std::string& key,
                        const std::string& path) {
    struct stat st {};
    LOOM_CHECK(::stat(path.c_str(), &st) == 0, "cannot upload '{}' to {}: {}", path,
               s3_uri(bucket, key), os_reason(errno));
    const uint64_t size = uint64_t(st.st_size);
    if (size > options_.multipart_threshold_bytes) {
        put_multipart(bucket, key, path, size);
        return;
    }
    std::string bytes(size, '\0');
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LOOM_CHECK(fd >= 0, "cannot open '{}' to upload it: {}", path, os_reason(errno));
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, bytes.data() + done, size - done, off_t(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            LOOM_FAIL("cannot read '{}' to upload it: {}", path,
                      n == 0 ? "file shrank" : os_reason(err));
        }
        done += size_t(n);
    }
    ::close(fd);
    put(bucket, key, bytes);
}

void S3Client::put_multipart(const std::string& bucket, const std::string& key,
                             const std::string& path, uint64_t size) {
    const std::string what = s3_uri(bucket, key);
    HttpRequest start;
    start.method = "POST";
    start.url = object_url(bucket, key, "uploads=");
    start.what = what;
    HttpResponse resp = http_.perform(start);
    if (resp.status != 200) fail_status("CreateMultipartUpload", bucket, key, resp);
    const auto ids = xml_values(resp.body, "UploadId");
    LOOM_CHECK(!ids.empty(), "CreateMultipartUpload {}: no UploadId in the response", what);
    const std::string upload_q = "uploadId=" + uri_encode(ids[0], false);
    auto abort = [&] {
        HttpRequest a;
        a.method = "DELETE";
        a.url = object_url(bucket, key, upload_q);
        a.what = what;
        try {
            http_.perform(a);
        } catch (const Error&) {
            // Best effort: a bucket lifecycle rule removes abandoned parts.
        }
    };
    try {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        LOOM_CHECK(fd >= 0, "cannot open '{}' to upload it: {}", path, os_reason(errno));
        std::string part(std::min<uint64_t>(options_.part_bytes, size), '\0');
        std::string complete = "<CompleteMultipartUpload>";
        int number = 0;
        for (uint64_t off = 0; off < size; off += options_.part_bytes) {
            const size_t len = size_t(std::min<uint64_t>(options_.part_bytes, size - off));
            size_t done = 0;
            while (done < len) {
                const ssize_t n = ::pread(fd, part.data() + done, len - done, off_t(off + done));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    ::close(fd);
                    LOOM_FAIL("cannot read '{}' at offset {} to upload it", path, off + done);
                }
                done += size_t(n);
            }
            ++number;
            HttpRequest p;
            p.method = "PUT";
            p.url = object_url(bucket, key, fmt::format("partNumber={}&{}", number, upload_q));
            p.what = what;
            p.body = std::string_view(part.data(), len);
            HttpResponse pr = http_.perform(p);
            if (pr.status != 200) {
                ::close(fd);
                fail_status("UploadPart", bucket, key, pr);
            }
            complete += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
                                    number, pr.header("etag"));
        }
        ::close(fd);
        complete += "</CompleteMultipartUpload>";
        HttpRequest c;
        c.method = "POST";
        c.url = object_url(bucket, key, upload_q);
        c.what = what;
        c.body = complete;
        c.headers.push_back("Content-Type: application/xml");
        HttpResponse cr = http_.perform(c);
        // S3 may answer 200 with an <Error> body when completion fails late.
        if (cr.status != 200 || cr.body.find("<Error>") != std::string::npos)
            fail_status("CompleteMultipartUpload", bucket, key, cr);
    } catch (...) {
        abort();
        throw;
    }
}

std::vector<S3ObjectInfo> S3Client::list(const std::string& bucket, const std::string& prefix) {
    std::vector<S3ObjectInfo> out;
    std::string token;
    for (;;) {
        // Parameters in byte order, as SigV4's canonical query string requires.
        std::string q;
        if (!token.empty()) q += "continuation-token=" + uri_encode(token, false) + "&";
        q += fmt::format("list-type=2&max-keys={}&prefix={}", options_.list_page_keys,
                         uri_encode(prefix, false));
        HttpRequest r;
        r.url = object_url(bucket, "", q);
        r.what = s3_uri(bucket, prefix);
        HttpResponse resp = http_.perform(r);
        if (resp.status != 200) fail_status("ListObjectsV2", bucket, prefix, resp);
        for (const auto& c : xml_values(resp.body, "Contents")) {
            S3ObjectInfo info;
            const auto keys = xml_values(c, "Key");
            const auto sizes = xml_values(c, "Size");
            LOOM_CHECK(!keys.empty() && !sizes.empty(),
                       "ListObjectsV2 {}: a <Contents> entry without Key or Size", r.what);
            info.key = keys[0];
            info.size = std::stoull(sizes[0]);
            const auto etags = xml_values(c, "ETag");
            if (!etags.empty()) info.etag = unquote(etags[0]);
            out.push_back(std::move(info));
        }
        const auto trunc = xml_values(resp.body, "IsTruncated");
        if (trunc.empty() || trunc[0] != "true") break;
        const auto next = xml_values(resp.body, "NextContinuationToken");
        LOOM_CHECK(!next.empty() && next[0] != token,
                   "ListObjectsV2 {}: IsTruncated without a new NextContinuationToken", r.what);
        token = next[0];
    }
    return out;
}

void S3Client::remove(const std::string& bucket, const std::string& key) {
    HttpRequest r;
    r.method = "DELETE";
    r.url = object_url(bucket, key);
    r.what = s3_uri(bucket, key);
    HttpResponse resp = http_.perform(r);
    if (resp.status != 204 && resp.status != 200 && resp.status != 404)
        fail_status("DELETE", bucket, key, resp);
}

}  // namespace loom

// libcurl implementation of http_client.h. One easy handle per client, reset
// before every request so its connection cache (keep-alive) is reused.
#include "io/http_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.h"

namespace loom {

namespace {

void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

double env_double(const char* name, double fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const double d = std::strtod(v, &end);
    LOOM_CHECK(end && *end == '\0' && d >= 0, "environment variable {}='{}' is not a number >= 0",
               name, v);
    return d;
}

struct Transfer {
    CURL* curl;
    const HttpRequest* req;
    HttpResponse* resp;
    size_t body_sent = 0;
    std::exception_ptr sink_error;  // rethrown after curl returns
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (t->req->sink && status >= 200 && status < 300) {
        try {
            t->req->sink(data, bytes);
        } catch (...) {
            t->sink_error = std::current_exception();
            return 0;  // curl aborts the transfer with CURLE_WRITE_ERROR
        }
    } else {
        t->resp->body.append(data, bytes);
    }
    return bytes;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    std::string line(data, bytes);
    // A new status line (after "100 Continue" or a redirect) starts a new header set.
    if (line.starts_with("HTTP/")) t->resp->headers.clear();
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        std::string value = line.substr(colon + 1);
        const size_t b = value.find_first_not_of(" \t");
        const size_t e = value.find_last_not_of(" \t\r\n");
        value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
        t->resp->headers[name] = value;
    }
    return bytes;
}

size_t on_upload(char* buf, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::string_view body = t->req->body;
    const size_t take = std::min(size * n, body.size() - t->body_sent);
    std::copy_n(body.data() + t->body_sent, take, buf);
    t->body_sent += take;
    return take;
}

bool curl_code_retryable(CURLcode c) {
    switch (c) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_PARTIAL_FILE:
        case CURLE_GOT_NOTHING:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return true;
        default:
            return false;
    }
}

}  // namespace

RetryPolicy RetryPolicy::from_environment() {
    RetryPolicy p;
    p.max_attempts = std::max(1, int(env_double("LOOM_REMOTE_MAX_ATTEMPTS", p.max_attempts)));
    p.base_delay_s = env_double("LOOM_REMOTE_RETRY_BASE_MS", p.base_delay_s * 1000) / 1000;
    p.stall_timeout_s = env_double("LOOM_REMOTE_STALL_S", p.stall_timeout_s);
    return p;
}

bool http_status_retryable(long status) {
    return status >= 500 || status == 429 || status == 408;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
    std::string out;
    out.reserve(s.size());
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
            out += char(c);
        else
            out += fmt::format("%{:02X}", c);
    }
    return out;
}

std::string HttpResponse::header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
}

HttpClient::HttpClient(AwsSettings settings, RetryPolicy policy)
    : settings_(std::move(settings)), policy_(policy) {
    global_init();
    curl_ = curl_easy_init();
    LOOM_CHECK(curl_ != nullptr, "libcurl: curl_easy_init failed");
}

HttpClient::~HttpClient() {
    if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpResponse HttpClient::attempt(const HttpRequest& req, std::string* transport_error,
                                 bool* retryable) {
    CURL* c = static_cast<CURL*>(curl_);
    curl_easy_reset(c);
    HttpResponse resp;
    Transfer t{c, &req, &resp, 0, nullptr};
    curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION,
                     req.follow_redirects && (req.method == "GET" || req.method == "HEAD") ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, long(policy_.connect_timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, long(policy_.stall_timeout_s)));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "loom/0.1");

    curl_slist* hdrs = nullptr;
    for (const auto& h : req.headers) hdrs = curl_slist_append(hdrs, h.c_str());
    // Expect: 100-continue costs a round trip per PUT; the body is small enough to resend.
    hdrs = curl_slist_append(hdrs, "Expect:");
    std::string range;
    if (req.range_offset >= 0) {
        range = fmt::format("{}-{}", req.range_offset,
                            uint64_t(req.range_offset) + req.range_length - 1);
        curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    }
    if (settings_.has_credentials()) {
        const std::string sigv4 = "aws:amz:" + settings_.region + ":s3";
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
        curl_easy_setopt(c, CURLOPT_USERNAME, settings_.access_key_id.c_str());
        curl_easy_setopt(c, CURLOPT_PASSWORD, settings_.secret_access_key.c_str());
        // Unsigned payload: the body is not hashed into the signature (allowed by S3).
        hdrs = curl_slist_append(hdrs, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (!settings_.session_token.empty())
            hdrs = curl_slist_append(hdrs, ("x-amz-security-token: " + settings_.session_token).c_str());
    }
    if (req.method == "HEAD") {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (req.method == "PUT") {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(c, CURLOPT_READDATA, &t);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, curl_off_t(req.body.size()));
    } else if (req.method == "POST") {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req.body.data());
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(req.body.size()));
    } else if (req.method != "GET") {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    const CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    if (t.sink_error) std::rethrow_exception(t.sink_error);
    *retryable = false;
    transport_error->clear();
    if (rc != CURLE_OK) {
        *transport_error = curl_easy_strerror(rc);
        *retryable = curl_code_retryable(rc);
        return resp;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
    *retryable = http_status_retryable(resp.status);
    return resp;
}

HttpResponse HttpClient::perform(const HttpRequest& req) {
    const std::string& what = req.what.empty() ? req.url : req.what;
    std::mt19937 jitter(std::random_device{}());
    const auto t0 = std::chrono::steady_clock::now();
    double delay = policy_.base_delay_s;
    for (int i = 1;; ++i) {
        std::string err;
        bool retryable = false;
        HttpResponse resp = attempt(req, &err, &retryable);
        resp.attempts = i;
        if (!retryable || i >= policy_.max_attempts) {
            if (!err.empty()) {
                const double secs =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                LOOM_FAIL("{} {}: {} (gave up after {} attempt{} over {:.1f} s)", req.method, what,
                          err, i, i == 1 ? "" : "s", secs);
            }
            return resp;
        }
        const double d = std::min(delay, policy_.max_delay_s) *
                         (1.0 + 0.25 * std::uniform_real_distribution<double>(0, 1)(jitter));
        std::this_thread::sleep_for(std::chrono::duration<double>(d));
        delay *= 2;
        if (req.reset) req.reset();
    }
}

}  // namespace loom

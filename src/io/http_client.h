// HttpClient: one libcurl connection with retries, optional AWS SigV4
// signing (curl's CURLOPT_AWS_SIGV4), and bodies into memory or a sink.
//
// Retry rule: connection errors, timeouts, stalled transfers, HTTP 5xx, 429
// and 408 are retried up to RetryPolicy::max_attempts with exponential
// backoff (base, 2*base, 4*base ... capped at max_delay_s, plus up to 25%
// jitter); any other status is returned to the caller at once. When the
// attempts run out on a connection error, perform() throws naming the method,
// the URI and curl's reason; on an HTTP status it returns the last response
// (HttpResponse::attempts says how many were made) so the caller can name
// the service's error code.
//
// Thread safety: an HttpClient is one connection; use one per thread.
//
// Not here: what the URLs mean (s3_client.h) or XML parsing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/aws_credentials.h"

namespace loom {

struct RetryPolicy {
    int max_attempts = 6;       // LOOM_REMOTE_MAX_ATTEMPTS
    double base_delay_s = 0.25; // LOOM_REMOTE_RETRY_BASE_MS / 1000
    double max_delay_s = 8.0;
    double connect_timeout_s = 10;
    double stall_timeout_s = 30;  // LOOM_REMOTE_STALL_S: < 1 KiB/s for this long aborts an attempt
    // Defaults overridden by the LOOM_REMOTE_* variables above.
    static RetryPolicy from_environment();
};

struct HttpRequest {
    std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
    std::string url;
    std::string what;  // what error messages call it (an s3:// URI); default = url
    std::vector<std::string> headers;  // "Name: value"
    std::string_view body;             // PUT/POST payload; must outlive perform()
    int64_t range_offset = -1;         // >= 0: "Range: bytes=offset-(offset+range_length-1)"
    uint64_t range_length = 0;
    // Receives a 2xx body as it arrives (error bodies always go to
    // HttpResponse::body). `reset` runs before a retry so the sink can start over.
    std::function<void(const char*, size_t)> sink;
    std::function<void()> reset;
    // GET/HEAD follow redirects unless false (the Hub's metadata is on the
    // redirect itself: X-Linked-Etag, X-Linked-Size).
    bool follow_redirects = true;
};

struct HttpResponse {
    long status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;                            // unless a sink took it
    int attempts = 0;
    std::string header(const std::string& lower_name) const;
};

class HttpClient {
public:
    // `sign`: SigV4-sign every request for service s3 with these settings
    // (when they hold credentials).
    explicit HttpClient(AwsSettings settings = {}, RetryPolicy policy = RetryPolicy::from_environment());
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    HttpResponse perform(const HttpRequest& req);

    const AwsSettings& settings() const { return settings_; }
    const RetryPolicy& policy() const { return policy_; }

private:
    HttpResponse attempt(const HttpRequest& req, std::string* transport_error, bool* retryable);

    void* curl_ = nullptr;  // CURL*
    AwsSettings settings_;
    RetryPolicy policy_;
};

// True for the statuses perform() retries.
bool http_status_retryable(long status);

// "%XX"-escapes everything but unreserved characters (and '/' when keep_slash),
// as SigV4's canonical URI and query strings require.
std::string uri_encode(std::string_view s, bool keep_slash);

}  // namespace loom

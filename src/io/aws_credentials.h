// AWS credentials, region and endpoint, resolved the way the AWS CLI does for
// the keys Loom supports.
//
// Credentials, first match wins:
//   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   2. the profile (AWS_PROFILE, else "default") in the shared credentials
//      file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials);
//   3. the same profile in the config file (AWS_CONFIG_FILE, else
//      ~/.aws/config), where it is "[profile NAME]" except for "default".
//   None found: requests go unsigned (public buckets, plain http(s) URLs).
// Region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else us-east-1.
// Endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
// `endpoint_url`; empty = AWS (virtual-hosted https://BUCKET.s3.REGION.amazonaws.com).
// With an endpoint Loom uses path-style addressing (ENDPOINT/BUCKET/KEY),
// which S3-compatible stores (MinIO, Ceph, s3rver) expect.
//
// Invariant: `source` says where the key id came from, and describe() prints
// the key id and that source, never the secret; error messages use it.
//
// Not here: instance-metadata or SSO credentials, assume-role chains.
#pragma once

#include <string>

namespace loom {

struct AwsSettings {
    std::string access_key_id;      // empty = unsigned requests
    std::string secret_access_key;  // never printed
    std::string session_token;
    std::string source;    // "environment (AWS_ACCESS_KEY_ID)", "profile 'x' in /path", ...
    std::string region = "us-east-1";
    std::string endpoint;  // "" = AWS; else e.g. "http://127.0.0.1:4568" (no trailing '/')
    bool has_credentials() const { return !access_key_id.empty(); }
    // "access key id AKIA... from environment (AWS_ACCESS_KEY_ID)" or
    // "no credentials (unsigned request)".
    std::string describe() const;
};

// Reads the environment and the shared files now (cheap; call once per client).
// A file that exists but cannot be parsed is an error naming the file and line.
AwsSettings resolve_aws_settings();

}  // namespace loom

// Where bytes live: a local path, an http(s):// URL or an s3://bucket/key URI.
//
// Invariant: parse_uri never touches the network or the file system; it only
// splits the text. A local path is anything without a "scheme://" prefix
// ("file://" is accepted and stripped). S3 keys keep their slashes; a URI
// naming a "folder" (s3://bucket/prefix) is a key prefix, with or without a
// trailing '/'.
//
// Not here: percent-encoding for requests (s3_client.cpp) or credentials.
#pragma once

#include <string>
#include <string_view>

namespace loom {

enum class UriScheme { local, http, https, s3 };

struct Uri {
    UriScheme scheme = UriScheme::local;
    std::string text;    // as given (what error messages quote)
    std::string path;    // local: the file system path
    std::string url;     // http(s): the whole URL
    std::string bucket;  // s3
    std::string key;     // s3: the object key or prefix, no leading '/'
    bool is_remote() const { return scheme != UriScheme::local; }
};

// Splits `text`; an unknown scheme ("gs://x") or an s3:// URI without a
// bucket is an error naming the text.
Uri parse_uri(std::string_view text);

// True for http://, https:// and s3:// (cheap; for config code that must leave
// such values alone).
bool is_remote_uri(std::string_view text);

// `base` joined with a relative name by one '/', for any scheme
// ("s3://b/ckpt" + "checkpoint-4/model.safetensors").
std::string uri_join(std::string_view base, std::string_view name);

// The last path component ("s3://b/x/data.jsonl" -> "data.jsonl").
std::string uri_basename(std::string_view text);

}  // namespace loom

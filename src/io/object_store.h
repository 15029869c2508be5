// ObjectStore: a folder of named objects that is either a local directory or
// an S3 prefix, so checkpoint mirroring and output upload are written once.
// Names are relative and use '/' ("checkpoint-8/model.safetensors").
//
// Invariant: put_* makes an object appear whole or not at all (local: written
// to a temporary name and renamed; S3: PUT / CompleteMultipartUpload).
//
// Also here: fetch_to_cache(), which turns an s3:// or http(s):// data URI
// into a local file or folder under the cache (LOOM_CACHE_DIR, else
// $XDG_CACHE_HOME/loom, else ~/.cache/loom), reusing a cached copy whose
// sizes and ETags still match, downloaded once per machine.
//
// Not here: http(s) as a store (no listing or upload over plain HTTP).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct StoredObject {
    std::string name;  // relative to the store
    uint64_t size = 0;
};

class ObjectStore {
  public:
    virtual ~ObjectStore() = default;
    // The store's own URI (a path or s3://bucket/prefix), for messages.
    virtual const std::string& uri() const = 0;
    // Every object whose name starts with `prefix`, sorted by name.
    virtual std::vector<StoredObject> list(const std::string& prefix = "") = 0;
    virtual void put_file(const std::string& name, const std::string& local_path) = 0;
    virtual void put_text(const std::string& name, std::string_view bytes) = 0;
    // Downloads to local_path (replacing it whole); returns the size.
    virtual uint64_t get_file(const std::string& name, const std::string& local_path) = 0;
    virtual std::string get_text(const std::string& name) = 0;
    // Missing objects are not an error.
    virtual void remove(const std::string& name) = 0;
    // `name` as a full URI (for messages).
    std::string uri_of(const std::string& name) const;
};

// A local path or s3://bucket/prefix; http(s) URIs are refused with a reason.
std::unique_ptr<ObjectStore> open_object_store(const std::string& uri);

// The cache root (created if missing).
std::string remote_cache_dir();

// Local paths are returned unchanged. An s3:// object is downloaded to
// <cache>/remote/<16 hex of the URI>/<16 hex of its listing>/<basename>; an
// s3:// prefix that is not an object is downloaded as a folder of every object
// under "<prefix>/". The listing (keys, sizes, ETags) is asked for on every
// call; an unchanged one reuses the cached copy, a changed one gets a folder
// of its own (older ones stay until the cache is cleared). However many
// processes of however many jobs ask at once, one per machine downloads and
// the rest wait for it (fetch_once.h). An http(s):// URL has no cheap
// validator, so it is fetched again by every call, to
// <cache>/remote/<16 hex>/<basename> (each copy renamed into place whole).
// Errors name the URI.
std::string fetch_to_cache(const std::string& uri);

// Uploads every file under local_dir (recursively) to store/<prefix><relative
// path>; files named in `last` go after all others, in that order, so their
// presence means the rest arrived. Names starting with `skip_prefixes` entries
// (relative paths) are left out. Returns the number of files uploaded.
size_t upload_folder(const std::string& local_dir, ObjectStore& store, const std::string& prefix,
                     const std::vector<std::string>& last = {},
                     const std::vector<std::string>& skip_prefixes = {});

}  // namespace loom

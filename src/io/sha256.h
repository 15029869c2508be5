// SHA-256 (FIPS 180-4), for the Hugging Face Hub: LFS objects are named by
// the SHA-256 of their content, so a download is checked against its ETag and
// an upload announces its oid with it.
//
// Invariant: hex() of a fresh Sha256 fed the bytes in any split equals
// `sha256sum` of those bytes. Not a general crypto library: no HMAC, no
// constant-time guarantees (nothing secret is hashed here).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t n);
    void update(std::string_view s) { update(s.data(), s.size()); }
    // Lower-case hex of the digest; the object is finished after this.
    std::string hex();

private:
    void block(const uint8_t* p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buf_{};
    size_t buf_len_ = 0;
    uint64_t total_ = 0;
};

// The SHA-256 of a whole file, read in chunks; throws naming the path.
std::string sha256_file(const std::string& path);

}  // namespace loom

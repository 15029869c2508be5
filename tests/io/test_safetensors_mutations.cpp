// Random corruption of a valid image, run through the reader in memory: every
// mutant must either open (and then every tensor's bytes lie inside the
// buffer) or throw loom::Error; never crash or read out of bounds. The buffer
// is allocated to the exact size so AddressSanitizer (the LOOM_SANITIZE build)
// catches any read past its end. A deterministic cousin of the libFuzzer
// target in fuzz/.
#include <cstring>
#include <random>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace loom {
namespace {

class SafetensorsMutations : public test::TempDirTest {};

std::shared_ptr<Storage> exact_copy(const std::string& bytes) {
    char* p = new char[bytes.size() ? bytes.size() : 1];
    if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    return Storage::wrap(p, bytes.size(), [p] { delete[] p; });
}

// Opens the image; on success touches every byte of every tensor.
// Returns true when it opened.
bool open_and_touch(const std::string& bytes) {
    try {
        SafetensorsFile f = SafetensorsFile::from_bytes(exact_copy(bytes), "mutant.safetensors");
        unsigned sum = 0;  // volatile sink below keeps the reads
        for (const std::string& name : f.names()) {
            Tensor t = f.get(name);
            const auto* p = static_cast<const unsigned char*>(t.raw());
            for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
        }
        volatile unsigned sink = sum;
        (void)sink;
        return true;
    } catch (const Error& e) {
        EXPECT_TRUE(test::contains(e.what(), "mutant.safetensors"));
        return false;
    }
}

TEST_F(SafetensorsMutations, CorruptImagesThrowOrOpenSafely) {
    std::map<std::string, Tensor> tensors;
    tensors["a.weight"] = Tensor::empty(DType::f32, {3, 4});
    tensors["b.bias"] = Tensor::empty(DType::bf16, {5});
    tensors["c.ids"] = Tensor::empty(DType::i64, {2, 1, 2});
    tensors["d.scalar"] = Tensor::empty(DType::f64, {});
    tensors["e.empty"] = Tensor::empty(DType::u8, {0, 3});
    const std::string p = path("seed.safetensors");
    safetensors_write(p, tensors, {{"format", "pt"}});
    const std::string seed = test::read_all(p);
    ASSERT_TRUE(open_and_touch(seed));
    uint64_t header_len = 0;
    std::memcpy(&header_len, seed.data(), 8);

    std::mt19937_64 rng(20240611);
    const std::string alphabet = "0123456789[]{},:\"-. eEFIU_a\\";
    int opened = 0, rejected = 0;
    for (int iter = 0; iter < 4000; ++iter) {
        std::string m = seed;
        switch (rng() % 5) {
            case 0:  // truncate anywhere
                m.resize(rng() % m.size());
                break;
            case 1:  // flip bits anywhere
                for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k)
                    m[rng() % m.size()] ^= char(1 << (rng() % 8));
                break;
            case 2:  // replace header characters with JSON-ish ones
                for (int k = 0, n = 1 + int(rng() % 3); k < n; ++k)
                    m[8 + rng() % header_len] = alphabet[rng() % alphabet.size()];
                break;
            case 3: {  // rewrite the declared header length
                uint64_t n = rng() % 3 == 0 ? rng() : header_len + (rng() % 64) - 32;
                std::memcpy(m.data(), &n, 8);
                break;
            }
            case 4: {  // change one digit run inside the header to a random number
                size_t at = 8 + rng() % header_len;
                while (at < 8 + header_len && !std::isdigit(static_cast<unsigned char>(m[at])))
                    ++at;
                size_t end = at;
                while (end < 8 + header_len && std::isdigit(static_cast<unsigned char>(m[end])))
                    ++end;
                if (at < end) m.replace(at, end - at, std::to_string(rng() % 1000));
                break;
            }
        }
        (open_and_touch(m) ? opened : rejected)++;
        if (HasFailure()) break;
    }
    RecordProperty("opened", opened);
    RecordProperty("rejected", rejected);
    // Both outcomes must occur, or the mutations test nothing.
    EXPECT_GT(rejected, 1000);
    EXPECT_GT(opened, 10);
}

}  // namespace
}  // namespace loom

// libFuzzer entry for the safetensors reader: any byte string must either open
// (and then every tensor's bytes can be read) or throw loom::Error.
//
// Build and run (needs clang; see fuzz/CMakeLists.txt):
//   CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DLOOM_FUZZ=ON \
//       -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF
//   cmake --build build/fuzz --target fuzz_safetensors
//   mkdir -p build/fuzz/corpus
//   for d in tests/data/hf/*/; do cp $d/batch.safetensors build/fuzz/corpus/$(basename $d); done
//   build/fuzz/fuzz/fuzz_safetensors build/fuzz/corpus -dict=fuzz/safetensors.dict \
//       -max_total_time=60
// The bytes go through SafetensorsFile::from_bytes, the same validation that
// open() runs over a file mapping, in a buffer of exactly the input's size so
// AddressSanitizer sees any read past its end.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char* copy = new char[size ? size : 1];
    if (size) std::memcpy(copy, data, size);
    auto bytes = loom::Storage::wrap(copy, size, [copy] { delete[] copy; });
    try {
        loom::SafetensorsFile f = loom::SafetensorsFile::from_bytes(bytes, "fuzz.safetensors");
        unsigned sum = 0;
        for (const std::string& name : f.names()) {
            loom::Tensor t = f.get(name);
            const auto* p = static_cast<const unsigned char*>(t.raw());
            for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
        }
        volatile unsigned sink = sum;
        (void)sink;
    } catch (const loom::Error&) {
        // Rejected with a message: the expected outcome for most inputs.
    }
    return 0;
}

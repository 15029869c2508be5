// Philox4x32-10: a counter-based random number generator (Salmon et al., 2011).
//
// A draw is a pure function of (key, counter): no state to carry, split or
// checkpoint. Loom keys every random choice by what it is about, never by who
// draws it: key = (seed, purpose), counter = (step, micro-batch/layer, global
// element index). A dropout mask is then the same whether a tensor lives on one
// rank or is sharded over eight, which is what lets every layout train the same
// model. Matches the reference Random123 constants.
#pragma once

#include <array>
#include <cstdint>

// The same functions run in CUDA kernels (dropout draws the CPU's exact mask);
// nvcc needs them marked, and builds them with --expt-relaxed-constexpr for std::array.
#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif

namespace loom {

struct PhiloxKey {
    uint32_t k0, k1;
};
using PhiloxCounter = std::array<uint32_t, 4>;

LOOM_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(PhiloxCounter c, PhiloxKey k) {
    constexpr uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
    constexpr uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        uint64_t p0 = uint64_t(m0) * c[0];
        uint64_t p1 = uint64_t(m1) * c[2];
        c = {uint32_t(p1 >> 32) ^ c[1] ^ k.k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k.k1,
             uint32_t(p0)};
        k.k0 += w0;
        k.k1 += w1;
    }
    return c;
}

// Uniform float in [0, 1) from 24 random bits.
LOOM_HOST_DEVICE inline float philox_u01(uint32_t bits) {
    return float(bits >> 8) * (1.0f / 16777216.0f);
}

// The random stream for one purpose at one step: element i's draw is
// uniform(i), independent of how elements are split across threads or ranks.
struct PhiloxStream {
    PhiloxKey key;
    uint32_t c2, c3;  // e.g. (step, layer << 8 | site)

    LOOM_HOST_DEVICE PhiloxStream(uint64_t seed, uint64_t step, uint32_t layer_site)
        : key{uint32_t(seed), uint32_t(seed >> 32)}, c2(uint32_t(step)),
          c3(uint32_t(step >> 32) ^ (layer_site * 0x9E3779B9u)) {}

    // Four uniform draws for elements 4j..4j+3; use with global element index.
    LOOM_HOST_DEVICE std::array<uint32_t, 4> block(uint64_t j) const {
        return philox4x32({uint32_t(j), uint32_t(j >> 32), c2, c3}, key);
    }
    LOOM_HOST_DEVICE float uniform(uint64_t i) const { return philox_u01(block(i >> 2)[i & 3]); }
};

}  // namespace loom

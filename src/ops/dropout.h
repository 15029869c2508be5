// Dropout keyed by global element, never by thread or rank.
//
// Element e of sample b keeps its value with probability 1 - p and is scaled by
// 1 / (1 - p); the draw is stream.uniform((sample_offset + b) * per_sample + e),
// so the mask is a pure function of (seed, step, site, global sample, element)
// and is recomputed in backward instead of stored.
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace loom {

struct DropoutSpec {
    float p = 0.0f;
    PhiloxStream stream{0, 0, 0};
    int64_t sample_offset = 0;  // global index of this batch's sample 0
    bool active() const { return p > 0.0f; }
    bool keep(uint64_t global_elem) const { return stream.uniform(global_elem) >= p; }
};

// out may alias inp.
template <typename T>
void dropout_forward(T* out, const T* inp, int64_t B, int64_t per_sample, const DropoutSpec& d);

// dinp may alias dout.
template <typename T>
void dropout_backward(T* dinp, const T* dout, int64_t B, int64_t per_sample, const DropoutSpec& d);

// Dropout on some rows of a (B, T, width) batch, gathered: in and out are
// (M, width), row r being position rows[r] = b * T + t. Row r gets the mask of
// elements (sample_offset + b) * T * width + t * width + [0, width), the ones
// dropout_forward(.., B, T * width, d) gives that position. Backward is the
// same call (the mask is its own derivative). out may alias in.
template <typename T>
void dropout_rows(T* out, const T* in, const int64_t* rows, int64_t M, int64_t seq_len,
                  int64_t width, const DropoutSpec& d);

// The multipliers of a run of global elements: f[i] = keep(first + i) ? 1/(1-p) : 0
// (all 1 when inactive). Exactly DropoutSpec::keep, computed 64 draws at a time.
// For kernels that fuse dropout (attention probabilities).
template <typename T>
void dropout_multipliers(T* f, const DropoutSpec& d, uint64_t first, int64_t n);

// The scale kept elements get: 1 / (1 - p) with 1 - p rounded to T first, as
// torch's `noise.div_(1 - p)` does.
template <typename T>
T dropout_scale(const DropoutSpec& d) {
    return T(1) / T(1.0 - double(d.p));
}

}  // namespace loom

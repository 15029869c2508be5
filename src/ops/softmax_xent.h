// Softmax cross-entropy over rows of logits, torch semantics with ignore_index -100.
//
// The caller decides the normalisation (mean over labelled rows locally, or over
// the global count of labelled tokens across micro-batches and ranks), so
// forward returns the *sum* and backward takes the scale.
#pragma once

#include <cstdint>

namespace loom {

constexpr int64_t k_ignore_index = -100;

struct XentSum {
    double loss_sum = 0;  // sum of per-row losses over labelled rows
    int64_t count = 0;    // labelled rows
};

// Targets outside [0, V) other than -100 are an error.
template <typename T>
XentSum softmax_xent_forward(T* losses,         // (N) per-row loss, 0 on ignored rows; or null
                             const T* logits,   // (N, V)
                             const int64_t* targets,  // (N)
                             int64_t N, int64_t V);

// dlogits = scale * (softmax(logits) - onehot(target)); 0 on ignored rows. Overwrites.
template <typename T>
void softmax_xent_backward(T* dlogits, const T* logits, const int64_t* targets, int64_t N,
                           int64_t V, double scale);

}  // namespace loom

// Rotary position embeddings in the rotate-half (GPT-NeoX / HF Llama) layout:
// within each head of size d, dimension i pairs with i + d/2 (not 2i with
// 2i+1 as in the interleaved GPT-J form), and position p turns the pair by
//   angle(p, i) = (p / scale) * inv_freq[i],  inv_freq[i] = 1 / theta^(2i/d)
//   x'[i]       = x[i] cos - x[i + d/2] sin
//   x'[i + d/2] = x[i + d/2] cos + x[i] sin
// Positions are 0 .. T-1 in every row, whatever the padding (transformers
// 4.40 without position_ids), or per token when `positions` (B, T) is given
// (packed documents: each restarts at 0; dynamic scaling below still takes
// the batch's T). inv_freq, the angles and their cos/sin are
// rounded to float32 where HF rounds them. `scale` is rope_scaling's linear
// factor (1: none).
//
// Dynamic NTK scaling (4.40's LlamaDynamicNTKScalingRotaryEmbedding): once a
// batch's length T passes max_position_embeddings, the base becomes
//   theta * (factor * T / max_pos - (factor - 1)) ^ (d / (d - 2))
// in float32, as HF computes it from a tensor; positions are not divided. HF
// 4.40 keeps the last scaled frequencies for a later, shorter batch (a state
// later versions reset); here every batch is scaled from its own length,
// which agrees whenever the batches have one length.
//
// Applied in place to `heads` heads of every row of x, rows of stride ld
// (the packed q|k|v projection). The inverse turns by -angle: it is the
// backward of the forward (a rotation's transpose is its inverse).
#pragma once

#include <cstdint>

namespace loom {

struct RopeSpec {
    double theta = 0;           // rope_theta; 0: no rotary embedding
    double scale = 1;           // linear rope_scaling factor
    double dynamic_factor = 1;  // dynamic rope_scaling factor; 1: none
    int64_t max_positions = 0;  // max_position_embeddings, where dynamic scaling starts
    bool active() const { return theta > 0; }
    // The base a batch of `seq_len` positions turns heads of size d by
    // (theta unless dynamic scaling applies), as HF's float32 arithmetic gives it.
    float base(int64_t seq_len, int64_t d) const;
};

// x: (B, T, ld) with head h of row (b, t) at x[(b T + t) ld + h d ... + d).
// positions: (B, T) in [0, T), or null for 0 .. T-1.
void rope_apply(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d,
                const RopeSpec& spec, bool inverse, const int64_t* positions = nullptr);

// inv_freq (d/2) in float32 as HF forms it for a batch of seq_len positions
// (the CUDA kernel takes it too).
void rope_inv_freq(float* out, int64_t d, const RopeSpec& spec, int64_t seq_len);
// The float32 position p of token t: t, or t / scale.
inline float rope_position(int64_t t, const RopeSpec& spec) {
    return spec.scale == 1.0 ? float(t) : float(t) / float(spec.scale);
}
// cos and sin (T, d/2) float32 tables as HF forms them: of the float32 angle
// rope_position(t) * inv_freq[i], rounded to float32.
void rope_tables(float* cos_out, float* sin_out, int64_t T, int64_t d, const RopeSpec& spec);

}  // namespace loom

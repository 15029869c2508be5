// A reference for NnOps' fused attention entries on the CPU, for the staged
// test backend: the CPU has no fused kernel, so without this the model's
// fused path (lse kept instead of the probabilities, a re-plan when a batch
// has a row with no visible key) would run only on a GPU.
//
// Forward writes y with the CPU's unfused kernel and lse from its own loop;
// backward recomputes both from q and k and throws if the lse or y it was
// handed differ from what forward wrote (a buffer the model reused, or the
// wrong one passed), then runs the CPU's unfused backward. So a staged model
// on this table computes exactly what the CPU one does, through the fused
// entries. Not a kernel: it allocates (B, NH, T, T) per call.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "ops/attention.h"
#include "ops/device_ops.h"
#include "ops/nn_ops.h"

namespace loom::test {

struct FusedAttentionCalls {
    int64_t forward = 0, backward = 0;
};
inline FusedAttentionCalls& fused_attention_calls() {
    static FusedAttentionCalls calls;
    return calls;
}

// lse (B, NH, T) of the scaled scores over the keys each row sees, in double.
inline std::vector<float> reference_lse(const float* q, const float* k, int64_t ld,
                                        const AttnShape& s, const AttnMask& m) {
    std::vector<float> lse(size_t(s.B * s.NH * s.T));
    const double scale = 1.0 / std::sqrt(double(s.HS));
    std::vector<double> row(size_t(s.T));
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.NH; ++h)
            for (int64_t i = 0; i < s.T; ++i) {
                const float* qi = q + (b * s.T + i) * ld + h * s.HS;
                double mx = -std::numeric_limits<double>::infinity();
                int64_t n = 0;
                for (int64_t j = 0; j < s.T; ++j) {
                    if ((m.causal && j > i) || (m.window >= 0 && i - j > m.window) ||
                        (m.key_start && j < m.key_start[b * s.T + i]) ||
                        (m.key_padding && m.key_padding[b * s.T + j] == 0))
                        continue;
                    const float* kj = k + (b * s.T + j) * ld + h * s.HS;
                    double dot = 0;
                    for (int64_t e = 0; e < s.HS; ++e) dot += double(qi[e]) * double(kj[e]);
                    row[size_t(n++)] = dot * scale;
                    mx = std::max(mx, dot * scale);
                }
                if (n == 0)
                    throw std::logic_error("fused attention called for a row with no visible key");
                double sum = 0;
                for (int64_t j = 0; j < n; ++j) sum += std::exp(row[size_t(j)] - mx);
                lse[size_t((b * s.NH + h) * s.T + i)] = float(mx + std::log(sum));
            }
    return lse;
}

inline void reference_fused_forward(const OpCtx& c, DType operands, void* y, float* lse,
                                    const void* q, const void* k, const void* v, int64_t ld,
                                    const AttnShape& s, const AttnMask& m, const DropoutSpec& d) {
    ++fused_attention_calls().forward;
    std::vector<float> att(size_t(s.B * s.NH * s.T * s.T));
    cpu_backend().ops().nn->attention_forward(c, operands, y, att.data(), q, k, v, ld, s, m, d);
    const std::vector<float> l = reference_lse(static_cast<const float*>(q),
                                               static_cast<const float*>(k), ld, s, m);
    std::memcpy(lse, l.data(), l.size() * sizeof(float));
}

inline void reference_fused_backward(const OpCtx& c, DType operands, void* dq, void* dk, void* dv,
                                     const void* dy, const void* y, const float* lse,
                                     const void* q, const void* k, const void* v, int64_t ld,
                                     const AttnShape& s, const AttnMask& m, const DropoutSpec& d) {
    ++fused_attention_calls().backward;
    const std::vector<float> l = reference_lse(static_cast<const float*>(q),
                                               static_cast<const float*>(k), ld, s, m);
    if (std::memcmp(l.data(), lse, l.size() * sizeof(float)) != 0)
        throw std::logic_error("fused attention backward: lse is not what forward wrote");
    const size_t n_y = size_t(s.B * s.T * s.NH * s.HS);
    std::vector<float> y2(n_y), att(size_t(s.B * s.NH * s.T * s.T)), scratch(att.size());
    const NnOps& cpu = *cpu_backend().ops().nn;
    cpu.attention_forward(c, operands, y2.data(), att.data(), q, k, v, ld, s, m, d);
    if (std::memcmp(y2.data(), y, n_y * sizeof(float)) != 0)
        throw std::logic_error("fused attention backward: y is not what forward wrote");
    cpu.attention_backward(c, operands, dq, dk, dv, scratch.data(), dy, att.data(), q, k, v, ld, s,
                           m, d);
}

// The CPU's table with the reference fused entries.
inline const DeviceOps& cpu_ops_with_fused_attention() {
    static const NnOps nn = [] {
        NnOps t = *cpu_backend().ops().nn;
        t.fused_attention_supported = [](const AttnShape&) { return true; };
        t.fused_attention_forward = reference_fused_forward;
        t.fused_attention_backward = reference_fused_backward;
        return t;
    }();
    static const DeviceOps ops = [] {
        DeviceOps o = cpu_backend().ops();
        o.nn = &nn;
        return o;
    }();
    return ops;
}

}  // namespace loom::test

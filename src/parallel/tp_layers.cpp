// Column/row-parallel linears over a rank's slices (parallel/tp_layers.h).
#include "parallel/tp_layers.h"

#include "comm/tp_regions.h"
#include "core/check.h"

namespace loom {
namespace {

int64_t split_size(int64_t n, const Communicator& tp, const char* what, const char* op) {
    LOOM_CHECK(n % tp.size() == 0, "{}: {} = {} is not a multiple of the tp group size {} ({})", op,
               what, n, tp.size(), tp.describe());
    return n / tp.size();
}

}  // namespace

template <typename T>
void column_parallel_linear_forward(T* out_local, const T* inp, const T* weight_local,
                                    const T* bias_local, int64_t N, int64_t C, int64_t OC,
                                    WeightLayout layout, Communicator& tp) {
    const int64_t OCl = split_size(OC, tp, "OC", "column_parallel_linear_forward");
    // Megatron "f" forward is the identity: the replicated input is read in place.
    matmul_forward(out_local, inp, weight_local, bias_local, N, C, OCl, layout);
}

template <typename T>
void column_parallel_linear_backward(T* dinp, T* dweight_local, T* dbias_local, const T* dout_local,
                                     const T* inp, const T* weight_local, int64_t N, int64_t C,
                                     int64_t OC, WeightLayout layout, Communicator& tp) {
    const int64_t OCl = split_size(OC, tp, "OC", "column_parallel_linear_backward");
    matmul_backward(dinp, dweight_local, dbias_local, dout_local, inp, weight_local, N, C, OCl,
                    layout);
    // Megatron "f" backward: each rank's dinp covers only its output features;
    // the full input gradient is their sum (all_reduce on tp).
    if (dinp != nullptr) copy_to_tp_backward(dinp, dinp, N * C, tp);
}

template <typename T>
void row_parallel_linear_forward(T* out, const T* inp_local, const T* weight_local, const T* bias,
                                 int64_t N, int64_t C, int64_t OC, WeightLayout layout,
                                 Communicator& tp) {
    const int64_t Cl = split_size(C, tp, "C", "row_parallel_linear_forward");
    matmul_forward(out, inp_local, weight_local, static_cast<const T*>(nullptr), N, Cl, OC, layout);
    // Megatron "g" forward: sum the partial products over tp (all_reduce on tp).
    reduce_from_tp_forward(out, out, N * OC, tp);
    // NOTE: the bias goes in after the reduction, so it is counted once.
    if (bias != nullptr) {
        for (int64_t n = 0; n < N; ++n) {
            T* row = out + n * OC;
#pragma omp simd
            for (int64_t o = 0; o < OC; ++o) row[o] += bias[o];
        }
    }
}

template <typename T>
void row_parallel_linear_backward(T* dinp_local, T* dweight_local, T* dbias, const T* dout,
                                  const T* inp_local, const T* weight_local, int64_t N, int64_t C,
                                  int64_t OC, WeightLayout layout, Communicator& tp) {
    const int64_t Cl = split_size(C, tp, "C", "row_parallel_linear_backward");
    // Megatron "g" backward is the identity: dout is already replicated, and
    // the dbias of the replicated bias is the same sum on every rank.
    matmul_backward(dinp_local, dweight_local, dbias, dout, inp_local, weight_local, N, Cl, OC,
                    layout);
}

#define LOOM_TP_LAYERS_INSTANTIATE(T)                                                              \
    template void column_parallel_linear_forward<T>(                                               \
        T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, WeightLayout, Communicator&); \
    template void column_parallel_linear_backward<T>(T*, T*, T*, const T*, const T*, const T*,     \
                                                     int64_t, int64_t, int64_t, WeightLayout,      \
                                                     Communicator&);                               \
    template void row_parallel_linear_forward<T>(T*, const T*, const T*, const T*, int64_t,        \
                                                 int64_t, int64_t, WeightLayout, Communicator&);   \
    template void row_parallel_linear_backward<T>(T*, T*, T*, const T*, const T*, const T*,        \
                                                  int64_t, int64_t, int64_t, WeightLayout,         \
                                                  Communicator&)

LOOM_TP_LAYERS_INSTANTIATE(float);
LOOM_TP_LAYERS_INSTANTIATE(double);

#undef LOOM_TP_LAYERS_INSTANTIATE

}  // namespace loom

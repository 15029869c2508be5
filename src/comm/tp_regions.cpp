// Tensor-parallel regions (Megatron f, g, gather, scatter) over a tp Communicator.
//
// The all-gathers land rank-major, (tp, N, D/tp), in a staging buffer and are
// then interleaved into (N, D): Communicator::all_gather concatenates whole
// buffers, and the last-dim concatenation needs every row of every rank.
#include "comm/tp_regions.h"

#include <algorithm>
#include <vector>

#include "core/check.h"

namespace loom {
namespace {

int64_t local_width(int64_t D, const Communicator& tp, const char* op) {
    LOOM_CHECK(D >= 0 && D % tp.size() == 0,
               "{}: last dim {} is not a multiple of the tp group size {} ({})", op, D, tp.size(),
               tp.describe());
    return D / tp.size();
}

template <typename T>
void copy_if_distinct(T* out, const T* in, int64_t n) {
    if (out != in) std::copy(in, in + n, out);
}

// out (N, D) <- all ranks' in (N, D/tp), concatenated along the last dim.
template <typename T>
void all_gather_last_dim(T* out, const T* in, int64_t N, int64_t D, Communicator& tp,
                         const char* op) {
    const int64_t Dl = local_width(D, tp, op);
    const int size = tp.size();
    if (size == 1) {
        std::copy(in, in + N * D, out);
        return;
    }
    std::vector<T> staged(size_t(N * D));  // (tp, N, D/tp)
    tp.all_gather(in, staged.data(), N * Dl, dtype_of<T>())->wait();
    for (int r = 0; r < size; ++r) {
        const T* src = staged.data() + int64_t(r) * N * Dl;
        for (int64_t n = 0; n < N; ++n)
            std::copy(src + n * Dl, src + (n + 1) * Dl, out + n * D + int64_t(r) * Dl);
    }
}

// out (N, D/tp) <- this rank's columns of in (N, D).
template <typename T>
void take_last_dim(T* out, const T* in, int64_t N, int64_t D, const Communicator& tp,
                   const char* op) {
    const int64_t Dl = local_width(D, tp, op);
    const int64_t c0 = int64_t(tp.rank()) * Dl;
    for (int64_t n = 0; n < N; ++n) std::copy(in + n * D + c0, in + n * D + c0 + Dl, out + n * Dl);
}

}  // namespace

template <typename T>
void copy_to_tp_forward(T* out, const T* in, int64_t n, Communicator& /*tp*/) {
    copy_if_distinct(out, in, n);
}

template <typename T>
void copy_to_tp_backward(T* dinp, const T* dout, int64_t n, Communicator& tp) {
    copy_if_distinct(dinp, dout, n);
    if (tp.size() > 1) tp.all_reduce(dinp, n, dtype_of<T>(), ReduceOp::sum)->wait();
}

template <typename T>
void reduce_from_tp_forward(T* out, const T* in, int64_t n, Communicator& tp) {
    copy_if_distinct(out, in, n);
    if (tp.size() > 1) tp.all_reduce(out, n, dtype_of<T>(), ReduceOp::sum)->wait();
}

void tp_sum_inplace(void* buf, int64_t n, DType dtype, Communicator& tp) {
    if (tp.size() > 1 && n > 0) tp.all_reduce(buf, n, dtype, ReduceOp::sum)->wait();
}

template <typename T>
void reduce_from_tp_backward(T* dinp, const T* dout, int64_t n, Communicator& /*tp*/) {
    copy_if_distinct(dinp, dout, n);
}

template <typename T>
void gather_from_tp_forward(T* out, const T* in, int64_t N, int64_t D, Communicator& tp) {
    all_gather_last_dim(out, in, N, D, tp, "gather_from_tp_forward");
}

template <typename T>
void gather_from_tp_backward(T* dinp, const T* dout, int64_t N, int64_t D, Communicator& tp) {
    take_last_dim(dinp, dout, N, D, tp, "gather_from_tp_backward");
}

template <typename T>
void scatter_to_tp_forward(T* out, const T* in, int64_t N, int64_t D, Communicator& tp) {
    take_last_dim(out, in, N, D, tp, "scatter_to_tp_forward");
}

template <typename T>
void scatter_to_tp_backward(T* dinp, const T* dout, int64_t N, int64_t D, Communicator& tp) {
    all_gather_last_dim(dinp, dout, N, D, tp, "scatter_to_tp_backward");
}

#define LOOM_TP_REGIONS_INSTANTIATE(T)                                                       \
    template void copy_to_tp_forward<T>(T*, const T*, int64_t, Communicator&);               \
    template void copy_to_tp_backward<T>(T*, const T*, int64_t, Communicator&);              \
    template void reduce_from_tp_forward<T>(T*, const T*, int64_t, Communicator&);           \
    template void reduce_from_tp_backward<T>(T*, const T*, int64_t, Communicator&);          \
    template void gather_from_tp_forward<T>(T*, const T*, int64_t, int64_t, Communicator&);  \
    template void gather_from_tp_backward<T>(T*, const T*, int64_t, int64_t, Communicator&); \
    template void scatter_to_tp_forward<T>(T*, const T*, int64_t, int64_t, Communicator&);   \
    template void scatter_to_tp_backward<T>(T*, const T*, int64_t, int64_t, Communicator&)

LOOM_TP_REGIONS_INSTANTIATE(float);
LOOM_TP_REGIONS_INSTANTIATE(double);

#undef LOOM_TP_REGIONS_INSTANTIATE

}  // namespace loom

// The entries of the CUDA kernel table (ops/nn_ops.h, ops/device_ops.h),
// each defined in namespace `cuda` in the .cu of its kernels and bound in
// device_ops_cuda.cpp, and the dispatch they share: an entry takes void
// pointers and runs its kernel for the C++ type of the activations (float,
// __nv_bfloat16, __half), as ggml's backends dispatch inside their kernels'
// files. tests/cuda/ checks every entry against the CPU table's.
//
// No fmt here (nvcc's front end cannot compile it): what reports through
// fmt is defined in device_ops_cuda.cpp, compiled by the host compiler.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"
#include "ops/device_ops.h"

namespace loom {

// A `what` given values of type t, which has no CUDA kernels.
[[noreturn]] void cuda_bad_type(DType t, const char* what);

// Calls f with a value of the C++ type of the floating-point storage type t.
template <typename F>
auto with_float_type(DType t, const char* what, F&& f) {
    switch (t) {
        case DType::f32:
            return f(float{});
        case DType::bf16:
            return f(__nv_bfloat16{});
        case DType::f16:
            return f(__half{});
        default:
            break;
    }
    cuda_bad_type(t, what);
    return f(float{});
}

namespace cuda {

// The backend's context; a non-CUDA backend is a caller's bug.
CudaContext& context(Backend& be);
inline CudaContext& context(const OpCtx& c) {
    return context(*c.be);
}

// Operands (a GEMM's, attention's, an activation's output) in another type
// than the activations: CUDA keeps all of them in the compute type.
void check_act_type(const OpCtx& c, DType operands, const char* op);
// That, and a sliding window, which no CUDA attention kernel takes yet (the
// table says so: NnOps::attention_window is false).
void check_attention(const OpCtx& c, DType operands, const AttnMask& m, const char* op);

// An update's gradient and compute-copy types; a pair without kernels is a
// caller's bug.
void check_update_types(const UpdateBuffers& b);

// Calls f(G{}, T{}) with G the gradient type and T the compute copy's type
// (float when there is no copy and the gradients are fp32). A compute-type
// gradient implies a copy of that type.
template <typename F>
void with_update_types(const UpdateBuffers& b, F&& f) {
    check_update_types(b);
    with_float_type(b.copy ? b.copy_dtype : b.grad_dtype, "an update", [&](auto t) {
        using T = decltype(t);
        if (b.grad_dtype == DType::f32)
            f(float{}, T{});
        else
            f(T{}, T{});
    });
}

// Calls f(T{}) with T the activation type.
template <typename F>
auto with_act(const OpCtx& c, const char* op, F&& f) {
    return with_float_type(c.act, op, std::forward<F>(f));
}

// An entry's pointer as the kernel's type.
template <typename T>
T* P(void* p) {
    return static_cast<T*>(p);
}
template <typename T>
const T* P(const void* p) {
    return static_cast<const T*>(p);
}

// The function type of a table slot, to declare its CUDA entry.
template <typename Slot>
using Entry = std::remove_pointer_t<Slot>;

// matmul_cuda.cu
Entry<decltype(NnOps::matmul_forward)> matmul_forward;
Entry<decltype(NnOps::matmul_backward)> matmul_backward;
// layer_norm_cuda.cu
Entry<decltype(NnOps::layer_norm_forward)> layer_norm_forward;
Entry<decltype(NnOps::layer_norm_backward)> layer_norm_backward;
// adamw_cuda.cu, sgd_cuda.cu, lamb_cuda.cu
Entry<decltype(DeviceOps::adamw)> adamw;
Entry<decltype(DeviceOps::sgd)> sgd;
Entry<decltype(DeviceOps::lamb_moments)> lamb_moments;
Entry<decltype(DeviceOps::lamb_apply)> lamb_apply;
// elementwise_cuda.cu
Entry<decltype(NnOps::residual_forward)> residual_forward;
Entry<decltype(NnOps::add_inplace)> add_inplace;
Entry<decltype(NnOps::add_bias)> add_bias;
Entry<decltype(DeviceOps::convert)> convert;
Entry<decltype(DeviceOps::sum_squares)> sum_squares;
Entry<decltype(DeviceOps::scale)> scale;
// activation_cuda.cu
Entry<decltype(NnOps::activation_forward)> activation_forward;
Entry<decltype(NnOps::activation_backward)> activation_backward;
// dropout_cuda.cu
Entry<decltype(NnOps::dropout_forward)> dropout_forward;
Entry<decltype(NnOps::dropout_backward)> dropout_backward;
// embedding_cuda.cu
Entry<decltype(NnOps::embedding_forward)> embedding_forward;
Entry<decltype(NnOps::embedding_backward)> embedding_backward;
Entry<decltype(NnOps::vocab_embedding_forward)> vocab_embedding_forward;
Entry<decltype(NnOps::vocab_embedding_backward)> vocab_embedding_backward;
// attention_cuda.cu
Entry<decltype(NnOps::attention_forward)> attention_forward;
Entry<decltype(NnOps::attention_backward)> attention_backward;
// flash_attention_cuda.cu
Entry<decltype(NnOps::fused_attention_supported)> fused_attention_supported;
Entry<decltype(NnOps::fused_attention_forward)> fused_attention_forward;
Entry<decltype(NnOps::fused_attention_backward)> fused_attention_backward;
// softmax_xent_cuda.cu
Entry<decltype(NnOps::softmax_xent_forward)> softmax_xent_forward;
Entry<decltype(NnOps::softmax_xent_backward)> softmax_xent_backward;
Entry<decltype(NnOps::vocab_xent_max)> vocab_xent_max;
Entry<decltype(NnOps::vocab_xent_stats)> vocab_xent_stats;
Entry<decltype(NnOps::vocab_xent_loss)> vocab_xent_loss;
Entry<decltype(NnOps::vocab_xent_backward)> vocab_xent_backward;
// llama_cuda.cu
Entry<decltype(NnOps::rms_norm_forward)> rms_norm_forward;
Entry<decltype(NnOps::rms_norm_backward)> rms_norm_backward;
Entry<decltype(NnOps::rope)> rope;
Entry<decltype(NnOps::repeat_kv_forward)> repeat_kv_forward;
Entry<decltype(NnOps::repeat_kv_backward)> repeat_kv_backward;
Entry<decltype(NnOps::swiglu_forward)> swiglu_forward;
Entry<decltype(NnOps::swiglu_backward)> swiglu_backward;

}  // namespace cuda
}  // namespace loom

// with_float_type: calls a generic lambda with a value of the C++ type of a
// floating-point storage DType (float, __nv_bfloat16, __half), so the CUDA
// tables dispatch a runtime type to their templated kernels in one place.
// Any other type is a caller's bug, reported with `what`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"
#include "core/dtype.h"

namespace loom {

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
    LOOM_ASSERT(false, "{}: {} values on CUDA", what, dtype_name(t));
    return f(float{});
}

}  // namespace loom

// The CUDA backend (backend/backend.h) over one CudaContext: device memory,
// copies and ordering on the context's stream, and the table of CUDA kernels
// (ops/device_ops.h), each entry dispatching on the gradient and compute-copy
// dtypes to the templated kernel.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"

namespace loom {

// `ctx` must outlive the backend.
std::unique_ptr<Backend> make_cuda_backend(CudaContext& ctx);

}  // namespace loom

// ActPtr: a pointer to activations in the run's activation type (OpCtx::act,
// ops/nn_ops.h): f32 on the CPU, the compute type (bf16, f16 or f32) on
// CUDA. The nn modules are written once against it, so their offsets
// (`qkv + C`) count elements of whichever type the device keeps, and the
// kernels' table receives the memory as void*.
//
// A float* converts implicitly (as f32), so callers that own f32 buffers
// pass them unchanged. Reading the values through `as<T>()` checks the type;
// memory of a device backend is never read on the host (backend/backend.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/check.h"
#include "core/dtype.h"

namespace loom {

template <typename V>  // void or const void
class BasicActPtr {
    using Byte = std::conditional_t<std::is_const_v<V>, const std::byte, std::byte>;

  public:
    BasicActPtr() = default;
    BasicActPtr(std::nullptr_t) {}
    BasicActPtr(V* p, DType t) : p_(static_cast<Byte*>(p)), t_(t) {}
    // f32 buffers (the CPU's activations, fp32 runs).
    BasicActPtr(std::conditional_t<std::is_const_v<V>, const float, float>* p)
        : p_(reinterpret_cast<Byte*>(p)) {}
    // A writable pointer reads as a read-only one.
    template <typename W, typename = std::enable_if_t<std::is_const_v<V> && !std::is_const_v<W>>>
    BasicActPtr(const BasicActPtr<W>& o) : p_(static_cast<Byte*>(o.get())), t_(o.dtype()) {}

    V* get() const { return p_; }
    DType dtype() const { return t_; }
    explicit operator bool() const { return p_ != nullptr; }
    operator V*() const { return p_; }

    BasicActPtr operator+(int64_t n) const {
        BasicActPtr r = *this;
        r.p_ += n * int64_t(dtype_size(t_));
        return r;
    }
    template <typename T>
    auto* as() const {
        LOOM_ASSERT(t_ == dtype_of<std::remove_const_t<T>>(), "{} activations read as {}",
                    dtype_name(t_), dtype_name(dtype_of<std::remove_const_t<T>>()));
        if constexpr (std::is_const_v<V>)
            return reinterpret_cast<const std::remove_const_t<T>*>(p_);
        else
            return reinterpret_cast<T*>(p_);
    }

  private:
    Byte* p_ = nullptr;
    DType t_ = DType::f32;
};

using ActPtr = BasicActPtr<void>;
using CActPtr = BasicActPtr<const void>;

}  // namespace loom

// Tensor: a cheap view (dtype, shape, byte offset) over shared Storage.
//
// Always contiguous row-major: kernels assert it and a transpose is an explicit
// op. Copying a Tensor copies the view, never the bytes. `name` exists for
// error messages ("encoder.layer.0.attention.self.query.weight").
#pragma once

#include <memory>
#include <string>

#include "core/check.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/storage.h"

namespace loom {

struct Tensor {
    DType dtype = DType::f32;
    Shape shape;
    std::shared_ptr<Storage> storage;
    size_t offset_bytes = 0;
    std::string name;

    // A new zero-filled CPU tensor.
    static Tensor empty(DType dtype, Shape shape, std::string name = {});
    // A view of `nbytes` starting `offset_bytes` into storage.
    static Tensor view_of(std::shared_ptr<Storage> storage, size_t offset_bytes, DType dtype,
                          Shape shape, std::string name = {});

    bool defined() const { return storage != nullptr; }
    int64_t numel() const { return shape.numel(); }
    size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
    void* raw() const { return static_cast<char*>(storage->data()) + offset_bytes; }

    template <typename T>
    T* data() const {
        LOOM_ASSERT(dtype == dtype_of<T>(), "tensor '{}' is {}, accessed as {}", name,
                    dtype_name(dtype), dtype_name(dtype_of<T>()));
        return static_cast<T*>(raw());
    }

    // Same bytes, another shape with the same element count.
    Tensor reshape(Shape s) const;
    // Rows [begin, end) of dimension 0.
    Tensor slice0(int64_t begin, int64_t end) const;
    // A deep copy in fresh storage.
    Tensor clone() const;
    // Converted copy (f32 <-> bf16/f16/f64, i32 <-> i64).
    Tensor to(DType t) const;
};

}  // namespace loom

// ActArena growth and views.
#include "nn/module.h"

#include "core/check.h"

namespace loom {

void ActArena::grow(int64_t n) {
    if (storage_ && n <= capacity_) return;
    storage_ = Storage::alloc(size_t(std::max<int64_t>(n, 16)) * sizeof(float));
    capacity_ = n;
}

Tensor ActArena::view(const float* p, Shape shape, std::string name) const {
    LOOM_ASSERT(storage_ && p >= base() && p + shape.numel() <= base() + capacity_,
                "view '{}' is outside the activation arena", name);
    return Tensor::view_of(storage_, size_t(p - base()) * sizeof(float), DType::f32, shape,
                           std::move(name));
}

}  // namespace loom

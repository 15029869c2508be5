// ActArena growth and views.
#include "nn/module.h"

#include "core/check.h"

namespace loom {

void ActArena::grow(int64_t n) {
    if (storage_ && n <= capacity_) return;
    storage_ = be_->alloc(size_t(std::max<int64_t>(n, 16)) * sizeof(float));
    capacity_ = n;
}

Tensor ActArena::view(CActPtr p, Shape shape, std::string name) const {
    const auto* begin = reinterpret_cast<const std::byte*>(base());
    const auto* at = static_cast<const std::byte*>(p.get());
    const size_t nbytes = size_t(shape.numel()) * dtype_size(p.dtype());
    LOOM_ASSERT(storage_ && at >= begin && at + nbytes <= begin + capacity_ * sizeof(float),
                "view '{}' is outside the activation arena", name);
    if (be_->host_addressable())
        return Tensor::view_of(storage_, size_t(at - begin), p.dtype(), shape, std::move(name));
    Tensor t = Tensor::empty(p.dtype(), shape, std::move(name));
    be_->to_host(t.raw(), at, nbytes);
    return t;
}

}  // namespace loom

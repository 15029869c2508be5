#include "core/tensor.h"

#include <cstring>

namespace loom {

Tensor Tensor::empty(DType dtype, Shape shape, std::string name) {
    Tensor t;
    t.dtype = dtype;
    t.shape = shape;
    t.name = std::move(name);
    t.storage = Storage::alloc(size_t(shape.numel()) * dtype_size(dtype));
    return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, size_t offset_bytes, DType dtype,
                       Shape shape, std::string name) {
    Tensor t;
    t.dtype = dtype;
    t.shape = shape;
    t.name = std::move(name);
    t.offset_bytes = offset_bytes;
    LOOM_ASSERT(storage && offset_bytes + t.nbytes() <= storage->nbytes(),
                "view '{}' of {} bytes at {} exceeds storage", t.name, t.nbytes(), offset_bytes);
    t.storage = std::move(storage);
    return t;
}

Tensor Tensor::reshape(Shape s) const {
    LOOM_ASSERT(s.numel() == numel(), "reshape of '{}' from {} to {}", name, shape.to_string(),
                s.to_string());
    Tensor t = *this;
    t.shape = s;
    return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
    LOOM_ASSERT(shape.ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0],
                "slice0 [{}, {}) of '{}' {}", begin, end, name, shape.to_string());
    Tensor t = *this;
    int64_t row = shape[0] ? numel() / shape[0] : 0;
    t.shape[0] = end - begin;
    t.offset_bytes += size_t(begin * row) * dtype_size(dtype);
    return t;
}

Tensor Tensor::clone() const {
    Tensor t = empty(dtype, shape, name);
    if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
    return t;
}

namespace {
template <typename D, typename S>
void convert(D* d, const S* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) d[i] = D(s[i]);
}
double load_as_double(const Tensor& t, int64_t i) {
    switch (t.dtype) {
        case DType::f32: return double(static_cast<const float*>(t.raw())[i]);
        case DType::f64: return static_cast<const double*>(t.raw())[i];
        case DType::bf16: return double(bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]));
        case DType::f16: return double(f16_to_f32(static_cast<const uint16_t*>(t.raw())[i]));
        case DType::i32: return double(static_cast<const int32_t*>(t.raw())[i]);
        case DType::i64: return double(static_cast<const int64_t*>(t.raw())[i]);
        case DType::u8: return double(static_cast<const uint8_t*>(t.raw())[i]);
    }
    return 0;
}
}  // namespace

Tensor Tensor::to(DType target) const {
    if (target == dtype) return clone();
    Tensor t = empty(target, shape, name);
    const int64_t n = numel();
    if (dtype == DType::i64 && target == DType::i32) {
        convert(t.data<int32_t>(), data<int64_t>(), n);
        return t;
    }
    if (dtype == DType::i32 && target == DType::i64) {
        convert(t.data<int64_t>(), data<int32_t>(), n);
        return t;
    }
    for (int64_t i = 0; i < n; ++i) {
        double v = load_as_double(*this, i);
        switch (target) {
            case DType::f32: t.data<float>()[i] = float(v); break;
            case DType::f64: t.data<double>()[i] = v; break;
            case DType::bf16: static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(float(v)); break;
            case DType::f16: static_cast<uint16_t*>(t.raw())[i] = f32_to_f16(float(v)); break;
            case DType::i32: t.data<int32_t>()[i] = int32_t(v); break;
            case DType::i64: t.data<int64_t>()[i] = int64_t(v); break;
            case DType::u8: t.data<uint8_t>()[i] = uint8_t(v); break;
        }
    }
    return t;
}

}  // namespace loom

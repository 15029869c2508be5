#include "core/shape.h"

#include "core/check.h"

namespace loom {

Shape::Shape(std::initializer_list<int64_t> d) {
    for (int64_t v : d) push(v);
}

void Shape::push(int64_t d) {
    LOOM_CHECK(ndim < k_max_dims, "a tensor has at most {} dimensions", k_max_dims);
    LOOM_CHECK(d >= 0, "negative dimension {}", d);
    dims[size_t(ndim++)] = d;
}

bool Shape::operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
        if (dims[size_t(i)] != o.dims[size_t(i)]) return false;
    return true;
}

std::string Shape::to_string() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) {
        if (i) s += ", ";
        s += std::to_string(dims[size_t(i)]);
    }
    return s + "]";
}

}  // namespace loom

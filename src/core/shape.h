// Tensor shapes and the project-wide shape letters.
//
// Letters used in every shape comment:
//   B  batch (micro-batch) size          T   sequence length
//   C  hidden size (channels)            NH  attention heads, HS = C / NH head size
//   L  number of layers                  V   vocabulary size, Vp padded vocabulary
//   I  intermediate (FFN) width          E   embedding size (ALBERT, E != C)
// A `d` prefix means gradient (dout, dweight); `l_` a per-layer slice.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace loom {

struct Shape {
    static constexpr int k_max_dims = 5;
    std::array<int64_t, k_max_dims> dims{};
    int ndim = 0;

    Shape() = default;
    Shape(std::initializer_list<int64_t> d);
    template <typename It>
    static Shape from(It begin, It end) {
        Shape s;
        for (It it = begin; it != end; ++it) s.push(int64_t(*it));
        return s;
    }
    void push(int64_t d);

    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= dims[size_t(i)];
        return n;
    }
    int64_t operator[](int i) const { return dims[size_t(i < 0 ? ndim + i : i)]; }
    int64_t& operator[](int i) { return dims[size_t(i < 0 ? ndim + i : i)]; }
    bool operator==(const Shape& o) const;
    bool operator!=(const Shape& o) const { return !(*this == o); }
    std::string to_string() const;  // "[3, 16, 64]"
};

}  // namespace loom

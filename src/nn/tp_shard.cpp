// TpSplit shard maps (nn/tp_shard.h).
//
// A TpSplit reduces to a list of segments along the split dim: (global start,
// local start, length), one per block. Shard, unshard and assemble all walk
// that list, so a packed qkv and a plain weight share one code path.
#include "nn/tp_shard.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "comm/tp_vocab.h"
#include "core/check.h"
#include "ops/vocab_parallel.h"

namespace loom {
namespace {

struct Segment {
    int64_t global_begin, local_begin, len;
};

// Rank tp_rank's segments along split.dim.
std::vector<Segment> segments(const TpSplit& split, int tp_size, int tp_rank) {
    split.check(tp_size);
    const int64_t len = split.dim == 0 ? split.rows : split.cols;
    const std::vector<int64_t> blocks =
        split.blocks.empty() ? std::vector<int64_t>{len} : split.blocks;
    std::vector<Segment> out;
    int64_t g = 0, l = 0;
    for (int64_t b : blocks) {
        const int64_t part = b / tp_size;
        out.push_back({g + int64_t(tp_rank) * part, l, part});
        g += b;
        l += part;
    }
    return out;
}

// Calls fn(global offset, local offset, length) for every contiguous run of
// rank tp_rank's part: one per block when rows are split, one per block and
// row when columns are.
template <typename Fn>
void for_each_run(const TpSplit& split, int tp_size, int tp_rank, Fn&& fn) {
    const int64_t lcols = split.local_cols(tp_size);
    for (const Segment& s : segments(split, tp_size, tp_rank)) {
        if (split.dim == 0) {
            fn(s.global_begin * split.cols, s.local_begin * lcols, s.len * split.cols);
        } else {
            for (int64_t r = 0; r < split.rows; ++r)
                fn(r * split.cols + s.global_begin, r * lcols + s.local_begin, s.len);
        }
    }
}

}  // namespace

void TpSplit::check(int tp_size) const {
    LOOM_CHECK(dim == 0 || dim == 1, "TpSplit: dim {} is not 0 or 1", dim);
    LOOM_CHECK(tp_size >= 1, "TpSplit: tp size {} < 1", tp_size);
    const int64_t len = dim == 0 ? rows : cols;
    if (blocks.empty()) {
        LOOM_CHECK(len % tp_size == 0,
                   "TpSplit: dim {} of ({}, {}) is not a multiple of the tp size {}", dim, rows,
                   cols, tp_size);
        return;
    }
    const int64_t sum = std::accumulate(blocks.begin(), blocks.end(), int64_t(0));
    LOOM_CHECK(sum == len, "TpSplit: blocks sum to {} but dim {} of ({}, {}) is {}", sum, dim, rows,
               cols, len);
    for (int64_t b : blocks)
        LOOM_CHECK(b >= 0 && b % tp_size == 0,
                   "TpSplit: block of {} along dim {} is not a multiple of the tp size {}", b, dim,
                   tp_size);
}

int64_t TpSplit::local_rows(int tp_size) const {
    return dim == 0 ? rows / tp_size : rows;
}
int64_t TpSplit::local_cols(int tp_size) const {
    return dim == 1 ? cols / tp_size : cols;
}

int tp_weight_split_dim(TpRole role, WeightLayout layout) {
    LOOM_CHECK(role == TpRole::column || role == TpRole::row,
               "tp_weight_split_dim: a replicated linear has no split dim");
    const bool out_dim = role == TpRole::column;  // column splits outputs, row splits inputs
    // out_in (OC, C): outputs are dim 0. in_out (C, OC): outputs are dim 1.
    const int outputs = layout == WeightLayout::out_in ? 0 : 1;
    return out_dim ? outputs : 1 - outputs;
}

TpSplit tp_linear_weight_split(TpRole role, WeightLayout layout, int64_t C, int64_t OC,
                               std::vector<int64_t> out_blocks) {
    LOOM_CHECK(out_blocks.empty() || role == TpRole::column,
               "tp_linear_weight_split: packed output blocks need a column-parallel linear");
    TpSplit s;
    s.rows = layout == WeightLayout::out_in ? OC : C;
    s.cols = layout == WeightLayout::out_in ? C : OC;
    s.dim = tp_weight_split_dim(role, layout);
    s.blocks = std::move(out_blocks);
    return s;
}

TpSplit tp_row_split(const ShardSpec& shard) {
    const Shape& g = shard.global;
    LOOM_CHECK(g.ndim == 1 || g.ndim == 2,
               "tensor parallelism splits 1-D and 2-D parameters only, got shape {}",
               g.to_string());
    TpSplit s;
    s.rows = g[0];
    s.cols = g.ndim == 2 ? g[1] : 1;
    s.dim = g.ndim == 2 ? shard.axis : 0;
    s.blocks = shard.blocks;
    return s;
}

Tensor tp_shard_row_tensor(const ShardSpec& shard, const Tensor& global) {
    if (shard.kind != ShardSpec::Kind::vocab)
        return tp_shard_tensor(global, tp_row_split(shard), shard.tp_size, shard.tp_rank);
    LOOM_CHECK(global.dtype == DType::f32 && global.shape == shard.global,
               "tp_shard_row_tensor: '{}' is {}, expected f32 {}", global.name,
               global.shape.to_string(), shard.global.to_string());
    const int64_t V = shard.global[0], C = shard.global.numel() / std::max<int64_t>(V, 1);
    Shape s = shard.global;
    s.dims[0] = tp_vocab_range(V, shard.tp_size, shard.tp_rank).count;
    Tensor out = Tensor::empty(DType::f32, s, global.name);
    tp_vocab_shard_for_rank(out.data<float>(), global.data<float>(), V, C, shard.tp_size,
                            shard.tp_rank);
    return out;
}

void tp_row_runs(const ShardSpec& shard, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
    if (shard.kind != ShardSpec::Kind::vocab) {
        for_each_run(tp_row_split(shard), shard.tp_size, shard.tp_rank, fn);
        return;
    }
    const int64_t V = shard.global[0], C = shard.global.numel() / std::max<int64_t>(V, 1);
    const TpVocabRange r = tp_vocab_range(V, shard.tp_size, shard.tp_rank);
    const int64_t valid = vocab_slice_valid(V, r.first, r.count);
    if (valid > 0) fn(r.first * C, 0, valid * C);
}

Tensor tp_assemble_row_tensor(const ShardSpec& shard, const Tensor& local, Communicator& tp) {
    if (shard.kind != ShardSpec::Kind::vocab)
        return tp_assemble_tensor(local, tp_row_split(shard), tp);
    const int64_t V = shard.global[0], C = shard.global.numel() / std::max<int64_t>(V, 1);
    LOOM_CHECK(local.dtype == DType::f32 &&
                   local.numel() == tp_vocab_range(V, tp.size(), tp.rank()).count * C,
               "tp_assemble_row_tensor: '{}' is not this rank's vocabulary slice of {}",
               local.name, shard.global.to_string());
    Tensor out = Tensor::empty(DType::f32, shard.global, local.name);
    tp_vocab_assemble(out.data<float>(), local.data<float>(), V, C, tp);
    return out;
}

Tensor tp_gather_row_tensor(const ShardSpec& shard, const Tensor& local, Communicator& tp,
                            int root) {
    int64_t slice_numel = 0;
    if (shard.kind == ShardSpec::Kind::vocab) {
        const int64_t V = shard.global[0], C = shard.global.numel() / std::max<int64_t>(V, 1);
        slice_numel = tp_vocab_range(V, tp.size(), tp.rank()).count * C;
    } else if (shard.sharded()) {
        const TpSplit split = tp_row_split(shard);
        slice_numel = split.local_rows(tp.size()) * split.local_cols(tp.size());
    }
    // Root receives every rank's slice at its own size: a mismatch would
    // fail (or hang) in the transfer instead of here.
    LOOM_CHECK(local.dtype == DType::f32 && shard.sharded() && local.numel() == slice_numel,
               "tp_gather_row_tensor: '{}' ({} elements) is not this rank's f32 slice of {}",
               local.name, local.numel(), shard.global.to_string());
    if (tp.rank() != root) {
        tp.send(local.raw(), local.numel(), DType::f32, root)->wait();
        return {};
    }
    // Every rank's slice has this rank's size (vocabulary slices are padded alike).
    Tensor out = Tensor::empty(DType::f32, shard.global, local.name);
    float* global = out.data<float>();
    std::vector<float> theirs(size_t(local.numel()));
    ShardSpec s = shard;
    for (int r = 0; r < tp.size(); ++r) {
        const float* slice = local.data<float>();
        if (r != root) {
            tp.recv(theirs.data(), local.numel(), DType::f32, r)->wait();
            slice = theirs.data();
        }
        s.tp_rank = r;
        tp_row_runs(s, [&](int64_t g, int64_t l, int64_t n) {
            std::copy(slice + l, slice + l + n, global + g);
        });
    }
    return out;
}

TpSplit tp_linear_bias_split(int64_t OC, std::vector<int64_t> out_blocks) {
    return TpSplit{OC, 1, 0, std::move(out_blocks)};
}

template <typename T>
void tp_shard_for_rank(T* local, const T* global, const TpSplit& split, int tp_size, int tp_rank) {
    for_each_run(split, tp_size, tp_rank, [&](int64_t g, int64_t l, int64_t n) {
        std::copy(global + g, global + g + n, local + l);
    });
}

template <typename T>
void tp_unshard_from_rank(T* global, const T* local, const TpSplit& split, int tp_size,
                          int tp_rank) {
    for_each_run(split, tp_size, tp_rank, [&](int64_t g, int64_t l, int64_t n) {
        std::copy(local + l, local + l + n, global + g);
    });
}

template <typename T>
void tp_assemble(T* global, const T* local, const TpSplit& split, Communicator& tp) {
    const int size = tp.size();
    const int64_t n = split.local_numel(size);
    split.check(size);
    std::vector<T> staged(size_t(n * size));  // (tp, local_numel), rank-major
    if (size == 1)
        std::copy(local, local + n, staged.data());
    else
        tp.all_gather(local, staged.data(), n, dtype_of<T>())->wait();
    for (int r = 0; r < size; ++r)
        tp_unshard_from_rank(global, staged.data() + int64_t(r) * n, split, size, r);
}

namespace {

// Checks that `t` has the global (t_is_local = false) or local shape of
// `split` and returns the shape to give the other side.
Shape checked_other_shape(const Tensor& t, const TpSplit& split, int tp_size, bool t_is_local,
                          const char* op) {
    LOOM_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64, "{}: tensor '{}' is {}, not f32/f64",
               op, t.name, dtype_name(t.dtype));
    split.check(tp_size);
    const int64_t lr = split.local_rows(tp_size), lc = split.local_cols(tp_size);
    const int64_t r = t_is_local ? lr : split.rows, c = t_is_local ? lc : split.cols;
    const int64_t orows = t_is_local ? split.rows : lr, ocols = t_is_local ? split.cols : lc;
    if (t.shape.ndim == 1) {
        LOOM_CHECK(t.shape[0] == r * c && (r == 1 || c == 1),
                   "{}: tensor '{}' of shape {} does not match the split ({}, {})", op, t.name,
                   t.shape.to_string(), r, c);
        return Shape{orows * ocols};
    }
    LOOM_CHECK(t.shape.ndim == 2 && t.shape[0] == r && t.shape[1] == c,
               "{}: tensor '{}' of shape {} does not match the split ({}, {})", op, t.name,
               t.shape.to_string(), r, c);
    return Shape{orows, ocols};
}

}  // namespace

Tensor tp_shard_tensor(const Tensor& global, const TpSplit& split, int tp_size, int tp_rank) {
    const Shape s = checked_other_shape(global, split, tp_size, false, "tp_shard_tensor");
    Tensor out = Tensor::empty(global.dtype, s, global.name);
    if (global.dtype == DType::f32)
        tp_shard_for_rank(out.data<float>(), global.data<float>(), split, tp_size, tp_rank);
    else
        tp_shard_for_rank(out.data<double>(), global.data<double>(), split, tp_size, tp_rank);
    return out;
}

Tensor tp_assemble_tensor(const Tensor& local, const TpSplit& split, Communicator& tp) {
    const Shape s = checked_other_shape(local, split, tp.size(), true, "tp_assemble_tensor");
    Tensor out = Tensor::empty(local.dtype, s, local.name);
    if (local.dtype == DType::f32)
        tp_assemble(out.data<float>(), local.data<float>(), split, tp);
    else
        tp_assemble(out.data<double>(), local.data<double>(), split, tp);
    return out;
}

#define LOOM_TP_SHARD_INSTANTIATE(T)                                                \
    template void tp_shard_for_rank<T>(T*, const T*, const TpSplit&, int, int);     \
    template void tp_unshard_from_rank<T>(T*, const T*, const TpSplit&, int, int);  \
    template void tp_assemble<T>(T*, const T*, const TpSplit&, Communicator&)

LOOM_TP_SHARD_INSTANTIATE(float);
LOOM_TP_SHARD_INSTANTIATE(double);

#undef LOOM_TP_SHARD_INSTANTIATE

}  // namespace loom

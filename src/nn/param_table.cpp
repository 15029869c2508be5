// ParamTable: layout, init, and HF-named load/save of the flat parameter buffer.
#include "nn/param_table.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "comm/tp_vocab.h"
#include "core/check.h"
#include "core/philox.h"
#include "core/tensor_source.h"
#include "nn/tp_shard.h"
#include "ops/gemm.h"

namespace loom {

namespace {

constexpr int64_t k_align_elems = 16;  // 64 bytes of float

// Where a row that is not packed starts. On the CPU, k_gemm_operand_skew_bytes
// past a 64-byte boundary: a weight is the B operand of the backward's
// dX = dY W, which oneDNN's AVX2 sgemm runs at about half speed from a 32-byte
// boundary (ops/gemm.cpp; 256 token rows: 45 against 80 GFLOP/s at one
// thread). GPU buffers keep 64-byte starts (their bf16 copies would lose
// cuBLAS's 16-byte alignment). Skewed starts are the first at or after `end`
// with that offset, so rows whose sizes are multiples of 16 stay back to back.
int64_t row_start(int64_t end, bool skew) {
    const int64_t skew_elems = skew ? k_gemm_operand_skew_bytes / int64_t(sizeof(float)) : 0;
    return (end - skew_elems + k_align_elems - 1) / k_align_elems * k_align_elems + skew_elems;
}
// Rows the CPU's GEMMs read; a table not yet allocated lays out for the CPU,
// the default device.
bool skew_rows(const ParamDevice& d) {
    return !d.be || d.be->device() == Device::cpu;
}

// FNV-1a of the name: the init stream of a row depends on its name only.
uint32_t name_hash(const std::string& s) {
    uint32_t h = 2166136261u;
    for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
    return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Non-parameter buffers some HF checkpoints carry (GPT-2's causal-mask
// buffers, BERT's position_ids): neither loaded nor reported.
bool is_known_buffer(const std::string& name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, "position_ids");
}

}  // namespace

int ParamTable::add(ParamRow row, bool align) {
    LOOM_ASSERT(!allocated(), "parameter '{}' added after allocation", row.name);
    LOOM_ASSERT(by_name_.count(row.name) == 0, "parameter '{}' added twice", row.name);
    int64_t off = flat_numel_;
    if (align) off = row_start(off, skew_rows(dev_));
    row.offset = off;
    row.packed = !align;
    flat_numel_ = off + row.numel();
    const int idx = int(rows_.size());
    by_name_[row.name] = idx;
    for (const auto& alias : row.tied) by_name_[alias] = idx;
    rows_.push_back(std::move(row));
    return idx;
}

void ParamTable::tie(const std::string& alias, const std::string& target) {
    const int idx = index(target);
    LOOM_ASSERT(by_name_.count(alias) == 0, "tied name '{}' already used", alias);
    rows_[size_t(idx)].tied.push_back(alias);
    by_name_[alias] = idx;
}

void ParamTable::set_trainable(int i, bool on) {
    LOOM_ASSERT(!allocated(), "parameter '{}' frozen after allocation", rows_[size_t(i)].name);
    rows_[size_t(i)].trainable = on;
}

void ParamTable::set_absent(int i) {
    LOOM_ASSERT(!allocated(), "parameter '{}' made absent after allocation", rows_[size_t(i)].name);
    rows_[size_t(i)].local = false;
    rows_[size_t(i)].trainable = false;
}

void ParamTable::shard_row(int i, int tp_size, int tp_rank, int n_blocks) {
    ParamRow& r = rows_[size_t(i)];
    LOOM_ASSERT(!allocated(), "parameter '{}' sharded after allocation", r.name);
    LOOM_ASSERT(r.shard.kind == ShardSpec::Kind::split && !r.shard.sharded(),
                "parameter '{}' is not a tensor-parallel split row (or is sharded twice)", r.name);
    LOOM_ASSERT(r.shape.ndim >= 1 && r.shard.axis < r.shape.ndim && n_blocks >= 1,
                "parameter '{}': bad split axis", r.name);
    const int64_t len = r.shape[r.shard.axis];
    LOOM_CHECK(len % (int64_t(n_blocks) * tp_size) == 0,
               "tensor parallelism: '{}' has {} features along dim {} in {} block(s), which "
               "tensor_parallel_degree {} does not divide",
               r.name, len, r.shard.axis, n_blocks, tp_size);
    r.shard.global = r.shape;
    r.shard.blocks = n_blocks > 1 ? std::vector<int64_t>(size_t(n_blocks), len / n_blocks)
                                  : std::vector<int64_t>{};
    r.shard.tp_size = tp_size;
    r.shard.tp_rank = tp_rank;
    r.shape.dims[size_t(r.shard.axis)] = len / tp_size;
}

void ParamTable::shard_vocab_row(int i, int tp_size, int tp_rank) {
    ParamRow& r = rows_[size_t(i)];
    LOOM_ASSERT(!allocated(), "parameter '{}' sharded after allocation", r.name);
    if (r.shard.kind == ShardSpec::Kind::vocab && r.shard.sharded()) return;
    LOOM_ASSERT(r.shard.kind == ShardSpec::Kind::replicated && r.shape.ndim >= 1,
                "parameter '{}' cannot be split by vocabulary", r.name);
    r.shard.kind = ShardSpec::Kind::vocab;
    r.shard.axis = 0;
    r.shard.global = r.shape;
    r.shard.tp_size = tp_size;
    r.shard.tp_rank = tp_rank;
    r.shape.dims[0] = tp_vocab_range(r.shape[0], tp_size, tp_rank).count;
}

void ParamTable::allocate(ParamDevice device) {
    LOOM_ASSERT(!allocated(), "parameter table allocated twice");
    if (!device.be) device.be = &cpu_backend();
    LOOM_ASSERT(device.act == DType::f32 || device.act == DType::bf16 || device.act == DType::f16,
                "parameters with {} activations", dtype_name(device.act));
    dev_ = device;
    lay_out();
    const size_t n = size_t(std::max<int64_t>(flat_numel_, 1));
    Backend& be = *dev_.be;
    params_ = be.alloc(n * sizeof(float));
    copy_ = dev_.act == DType::f32 ? params_ : be.alloc(n * dtype_size(dev_.act));
    grads_ = be.alloc(n * dtype_size(dev_.act));
    if (be.host_addressable()) {
        // The CPU keeps f32 activations (its GEMMs round operands), and the
        // host reads these buffers as f32.
        LOOM_ASSERT(dev_.act == DType::f32, "host-addressable parameters with {} activations",
                    dtype_name(dev_.act));
        host_params_ = params_;
        host_grads_ = grads_;
    } else {
        host_params_ = Storage::alloc(n * sizeof(float));
        host_grads_ = Storage::alloc(n * sizeof(float));
    }
}

UpdateBuffers ParamTable::update_buffers() const {
    UpdateBuffers b;
    b.master = device_master();
    b.grad = grads_->data();
    b.grad_dtype = dev_.act;
    if (copy_ != params_) {
        b.copy = copy_->data();
        b.copy_dtype = dev_.act;
    }
    return b;
}

void ParamTable::upload_params() {
    LOOM_ASSERT(allocated(), "upload before allocate");
    Backend& be = *dev_.be;
    if (staged())
        be.to_device(params_->data(), host_params_->data(), size_t(flat_numel_) * sizeof(float));
    refresh_copy();
    // The staging copy must stay put until the copy is done.
    if (staged()) be.synchronize();
}

void ParamTable::refresh_copy() {
    Backend& be = *dev_.be;
    if (copy_ != params_)
        be.ops().convert(be, copy_->data(), dev_.act, params_->data(), DType::f32, flat_numel_);
}

void ParamTable::download_params() const {
    if (staged())
        dev_.be->to_host(host_params_->data(), params_->data(),
                         size_t(flat_numel_) * sizeof(float));
}

void ParamTable::download_grads() const {
    if (!staged()) return;
    Backend& be = *dev_.be;
    const size_t bytes = size_t(flat_numel_) * sizeof(float);
    if (dev_.act == DType::f32) {
        be.to_host(host_grads_->data(), grads_->data(), bytes);
        return;
    }
    // Widened on the device, then copied: rare (checks, exports), so the
    // fp32 buffer is not kept.
    const std::shared_ptr<Storage> wide = be.alloc(bytes);
    be.ops().convert(be, wide->data(), DType::f32, grads_->data(), dev_.act, flat_numel_);
    be.to_host(host_grads_->data(), wide->data(), bytes);
}

void ParamTable::lay_out() {
    // Lay the local rows out again in the same order and alignment rules, for
    // the device chosen since add(); grouped: the frozen rows, then the
    // trainable ones.
    int64_t end = 0;
    for (int pass = 0; pass < (group_trainable_ ? 2 : 1); ++pass) {
        for (size_t i = 0; i < rows_.size(); ++i) {
            ParamRow& r = rows_[i];
            if (group_trainable_ && r.trainable != (pass == 1)) continue;
            if (!r.local) {
                r.offset = 0;
                continue;
            }
            LOOM_ASSERT(!group_trainable_ || !r.packed || rows_[i - 1].trainable == r.trainable,
                        "packed row '{}' is {} but the row before it is not", r.name,
                        r.trainable ? "trainable" : "frozen");
            int64_t off = end;
            if (!r.packed) off = row_start(off, skew_rows(dev_));
            r.offset = off;
            end = off + r.numel();
        }
    }
    flat_numel_ = end;
}

int64_t ParamTable::trainable_begin() const {
    int64_t lo = flat_numel_;
    for (const auto& r : rows_)
        if (r.local && r.trainable && r.numel() > 0) lo = std::min(lo, r.offset);
    return lo;
}

void ParamTable::share_buffers(const ParamTable& owner) {
    dev_ = owner.dev_;  // the owner's device decides the layout
    if (!allocated()) lay_out();
    LOOM_ASSERT(
        owner.allocated() && owner.flat_numel_ == flat_numel_ && owner.rows_.size() == rows_.size(),
        "share_buffers: the tables differ ({} vs {} elements)", owner.flat_numel_, flat_numel_);
    params_ = owner.params_;
    copy_ = owner.copy_;
    grads_ = owner.grads_;
    host_params_ = owner.host_params_;
    host_grads_ = owner.host_grads_;
}

int ParamTable::find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? -1 : it->second;
}

int ParamTable::index(const std::string& name) const {
    const int i = find(name);
    LOOM_CHECK(i >= 0, "model has no parameter named '{}'", name);
    return i;
}

int64_t ParamTable::num_parameters() const {
    int64_t n = 0;
    for (const auto& r : rows_) n += r.numel();
    return n;
}

int64_t ParamTable::num_local_parameters() const {
    int64_t n = 0;
    for (const auto& r : rows_)
        if (r.local) n += r.numel();
    return n;
}

Tensor ParamTable::param_tensor(int i) const {
    const ParamRow& r = rows_[size_t(i)];
    return Tensor::view_of(host_params_, size_t(r.offset) * sizeof(float), DType::f32, r.shape,
                           r.name);
}

Tensor ParamTable::grad_tensor(int i) const {
    const ParamRow& r = rows_[size_t(i)];
    return Tensor::view_of(host_grads_, size_t(r.offset) * sizeof(float), DType::f32, r.shape,
                           "grad." + r.name);
}

void ParamTable::zero_grad() {
    if (!dev_.be->host_addressable()) {
        dev_.be->zero(grads_->data(), size_t(flat_numel_) * dtype_size(dev_.act));
        return;
    }
    float* g = static_cast<float*>(grads_->data());
    const int64_t n = flat_numel_;
    // On every core: one thread's memset of BERT-base's 440 MB took ~8 ms a step.
#pragma omp parallel if (n > (1 << 20) && !omp_in_parallel())
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        std::memset(g + lo, 0, size_t(hi - lo) * sizeof(float));
    }
}

void ParamTable::init_all(uint64_t seed) {
    for (int i = 0; i < size(); ++i)
        if (rows_[size_t(i)].local) init_row(i, seed);
    upload_params();
}

void ParamTable::init_row(int i, uint64_t seed) {
    const ParamRow& r = rows_[size_t(i)];
    if (r.shard.sharded()) {
        // Only this rank's slice is drawn, each element by its global index,
        // so every layout starts from the 1-rank model's values (draws are
        // keyed by global element, never by rank) without any rank holding
        // the whole tensor: drawing BERT-large's word table whole on each of
        // 8 tp ranks touched 125 MB per rank that the allocator kept.
        float* p = param(i);
        std::fill(p, p + r.numel(), 0.0f);  // a vocabulary slice's padded rows
        tp_row_runs(r.shard, [&](int64_t g, int64_t l, int64_t n) {
            init_values(r, r.shard.global, p + l, seed, g, n);
        });
        return;
    }
    init_values(r, r.shape, param(i), seed, 0, r.shape.numel());
}

void ParamTable::init_values(const ParamRow& r, const Shape& shape, float* p, uint64_t seed,
                             int64_t first, int64_t n) {
    LOOM_ASSERT(first >= 0 && n >= 0 && first + n <= shape.numel(),
                "init of '{}': elements [{}, {}) outside its {} elements", r.name, first, first + n,
                shape.numel());
    switch (r.init) {
        case InitRule::zeros:
            std::fill(p, p + n, 0.0f);
            break;
        case InitRule::ones:
            std::fill(p, p + n, 1.0f);
            break;
        case InitRule::normal: {
            // Box-Muller over Philox uniforms: element e uses draws 2e and 2e+1.
            const PhiloxStream rng(seed, 0, name_hash(r.name));
            for (int64_t k = 0; k < n; ++k) {
                const int64_t e = first + k;
                const auto b = rng.block(uint64_t(e) >> 1);
                const size_t j = size_t(e & 1) * 2;
                const double u1 = (double(b[j] >> 8) + 1.0) / 16777217.0;  // (0, 1]
                const double u2 = double(b[j + 1] >> 8) / 16777216.0;
                p[k] =
                    float(r.init_std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
            }
            break;
        }
        case InitRule::kaiming_uniform: {
            LOOM_ASSERT(shape.ndim == 2, "kaiming-uniform init of '{}' needs a 2-D weight", r.name);
            const double bound = 1.0 / std::sqrt(double(shape[1]));
            const PhiloxStream rng(seed, 0, name_hash(r.name));
            for (int64_t k = 0; k < n; ++k) {
                const int64_t e = first + k;
                const auto b = rng.block(uint64_t(e) >> 2);
                const double u = double(b[size_t(e & 3)] >> 8) / 16777216.0;  // [0, 1)
                p[k] = float(bound * (2.0 * u - 1.0));
            }
            break;
        }
        case InitRule::sinusoidal: {
            // HF create_sinusoidal_embeddings: even columns sin, odd columns cos of
            // pos / 10000^(2*(j/2)/dim).
            LOOM_ASSERT(shape.ndim == 2, "sinusoidal init of '{}' needs a 2-D table", r.name);
            const int64_t dim = shape[1];
            for (int64_t k = 0; k < n; ++k) {
                const int64_t pos = (first + k) / dim, j = (first + k) % dim;
                const double angle =
                    double(pos) / std::pow(10000.0, 2.0 * double(j / 2) / double(dim));
                p[k] = float(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
            }
            break;
        }
    }
    if (r.zero_row >= 0 && shape.ndim == 2) {
        // The part of [first, first + n) in the zeroed row.
        const int64_t cols = shape[1];
        const int64_t lo = std::max(first, r.zero_row * cols);
        const int64_t hi = std::min(first + n, (r.zero_row + 1) * cols);
        if (lo < hi) std::fill(p + (lo - first), p + (hi - first), 0.0f);
    }
}

LoadReport ParamTable::load(const TensorSource& file, const std::string& expected_from,
                            uint64_t init_seed) {
    LOOM_ASSERT(allocated(), "load before allocate");
    LoadReport report;
    std::set<std::string> used;
    const std::string prefix = base_prefix_.empty() ? "" : base_prefix_ + ".";
    for (int i = 0; i < size(); ++i) {
        const ParamRow& r = rows_[size_t(i)];
        if (!r.local) {
            // Another stage loads it; the file's tensor is not "unused".
            for (const auto& c : std::vector<std::string>{r.name, prefix + r.name})
                if (file.contains(c)) used.insert(c);
            for (const auto& c : r.tied)
                if (file.contains(c)) used.insert(c);
            if (!prefix.empty() && r.name.rfind(prefix, 0) == 0 &&
                file.contains(r.name.substr(prefix.size())))
                used.insert(r.name.substr(prefix.size()));
            continue;
        }
        // Candidate names: stored name, aliases, then the base-prefix variants
        // (a checkpoint saved from BertModel has no "bert." prefix).
        std::vector<std::string> candidates{r.name};
        candidates.insert(candidates.end(), r.tied.begin(), r.tied.end());
        if (!prefix.empty()) {
            if (r.name.rfind(prefix, 0) == 0)
                candidates.push_back(r.name.substr(prefix.size()));
            else
                candidates.push_back(prefix + r.name);
        }
        const std::string* found = nullptr;
        for (const auto& c : candidates)
            if (file.contains(c)) {
                found = &c;
                break;
            }
        if (!found && r.adapter) {
            init_row(i, init_seed);
            continue;
        }
        if (!found) {
            LOOM_CHECK(r.head, "{}: missing tensor '{}' (expected shape {} from {})", file.path(),
                       r.name, r.shape.to_string(), expected_from);
            init_row(i, init_seed);
            report.newly_initialised.push_back(r.name);
            continue;
        }
        Tensor t = file.get(*found);
        const Shape& want = r.shard.sharded() ? r.shard.global : r.shape;
        LOOM_CHECK(t.shape == want, "{}: tensor '{}' has shape {}, expected {} from {}",
                   file.path(), *found, t.shape.to_string(), want.to_string(), expected_from);
        LOOM_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16 ||
                       t.dtype == DType::f64,
                   "{}: tensor '{}' has dtype {}, expected a floating-point type", file.path(),
                   *found, dtype_safetensors_name(t.dtype));
        if (t.dtype != DType::f32) t = t.to(DType::f32);
        // Files hold global tensors (layout-free checkpoints): keep our slice.
        if (r.shard.sharded()) t = tp_shard_row_tensor(r.shard, t);
        std::memcpy(param(i), t.raw(), size_t(r.numel()) * sizeof(float));
        // Tied copies some checkpoints store anyway are the same tensor, not unused.
        for (const auto& c : candidates)
            if (file.contains(c)) used.insert(c);
    }
    for (const auto& n : file.names())
        if (!used.count(n) && !is_known_buffer(n)) report.unused.push_back(n);
    upload_params();
    return report;
}

std::map<std::string, Tensor> ParamTable::param_tensors() const {
    std::map<std::string, Tensor> m;
    for (int i = 0; i < size(); ++i)
        if (rows_[size_t(i)].local) m[rows_[size_t(i)].name] = param_tensor(i);
    return m;
}

std::map<std::string, Tensor> ParamTable::grad_tensors() const {
    std::map<std::string, Tensor> m;
    for (int i = 0; i < size(); ++i)
        if (rows_[size_t(i)].local && rows_[size_t(i)].trainable)
            m[rows_[size_t(i)].name] = grad_tensor(i);
    return m;
}

}  // namespace loom

// What every nn module shares: parameter references into the flat buffers,
// the activation arena, and the dropout keying.
//
// Modules are plain structs (nn/linear.h ...). They register their rows in a
// ParamTable when built, resolve ParamRefs after the table is allocated, and
// get their saved activations (`Acts`) as views into one ActArena sized from
// (B, T): the arena is allocated once and reused across steps, because first
// touch of fresh memory is very slow on the target machines. Nothing here
// allocates during forward or backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/act_ptr.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "nn/param_table.h"
#include "ops/dropout.h"

namespace loom {

// A parameter's values (the compute copy) and gradient in the table's
// backend buffers, in its activation type; grad is null for a frozen row (no
// gradient is accumulated).
struct ParamRef {
    int row = -1;
    CActPtr data;
    ActPtr grad;

    bool defined() const { return row >= 0; }
    void bind(const ParamTable& t) {
        if (row < 0) return;
        data = t.device_param(row);
        grad = t.row(row).trainable ? t.device_grad(row) : nullptr;
    }
};

// Bump allocator over one Storage for saved activations and scratch.
// build(layout) runs `layout(arena)` twice: once to count (take() returns
// null), then, after growing the storage if needed, to hand out pointers.
// Offsets are 16-float aligned. The storage only ever grows: a smaller batch
// reuses it, so steady-state steps allocate nothing. The memory is the
// backend's (the CPU unless set_backend says otherwise).
class ActArena {
  public:
    // Before the first build; the arena's memory is then re-allocated there.
    void set_backend(Backend& be) {
        if (be_ == &be) return;
        be_ = &be;
        storage_.reset();
        capacity_ = 0;
    }
    Backend& backend() const { return *be_; }

    template <typename Layout>
    void build(Layout&& layout) {
        planning_ = true;
        used_ = 0;
        layout(*this);
        grow(used_);
        planning_ = false;
        used_ = 0;
        layout(*this);
    }

    float* take(int64_t n) {
        float* p = planning_ ? nullptr : base() + used_;
        used_ += (n + 15) / 16 * 16;
        return p;
    }
    // n bf16 values (raw bits), in float-sized slots.
    uint16_t* take16(int64_t n) { return reinterpret_cast<uint16_t*>(take((n + 1) / 2)); }
    // n token ids (or other int64 inputs a kernel reads), in float-sized slots.
    int64_t* take_i64(int64_t n) { return reinterpret_cast<int64_t*>(take(2 * n)); }
    // n activations of type t (OpCtx::act), in float-sized slots.
    ActPtr take_act(int64_t n, DType t) {
        const int64_t bytes = n * int64_t(dtype_size(t));
        return ActPtr(take((bytes + 3) / 4), t);
    }
    int64_t capacity_elems() const { return capacity_; }
    // What the last build() laid out (<= capacity after a smaller plan).
    int64_t planned_elems() const { return used_; }
    // A named tensor of memory inside the arena (outputs for callers), in the
    // activations' type: a view on a host-addressable backend, a host copy
    // otherwise.
    Tensor view(CActPtr p, Shape shape, std::string name) const;

  private:
    // Zero-filled on growth, so pages are touched here, once.
    void grow(int64_t n);
    float* base() const { return static_cast<float*>(storage_->data()); }
    Backend* be_ = &cpu_backend();
    std::shared_ptr<Storage> storage_;
    int64_t used_ = 0, capacity_ = 0;
    bool planning_ = true;
};

// Dropout keys for one forward/backward: (seed, step) pick the stream, each
// site of each layer application gets its own counter word, and draws are
// indexed by global sample, so splitting a batch (sample_offset) or sharding a
// layer never changes a mask.
struct DropoutPlan {
    bool training = false;
    uint64_t seed = 0;
    uint64_t step = 0;
    int64_t sample_offset = 0;  // global index of this micro-batch's sample 0

    // Sites inside one layer application (and model-level ones with layer 0).
    enum Site : uint32_t {
        embeddings = 1,
        attn_probs = 2,
        attn_out = 3,
        ffn_out = 4,
        head_a = 5,  // classifier / QA head, first dropout
        head_b = 6,  // classifier, second dropout
        lora = 16,   // LoRA adapters' inputs: lora + 4 * linear slot + adapter (nn/lora.h)
    };

    // `layer` is the 1-based layer application (0 for embeddings and heads).
    DropoutSpec spec(double p, uint32_t layer, Site site) const {
        DropoutSpec d;
        d.p = training ? float(p) : 0.0f;
        d.stream = PhiloxStream(seed, step, (layer << 8) | uint32_t(site));
        d.sample_offset = sample_offset;
        return d;
    }
};

}  // namespace loom

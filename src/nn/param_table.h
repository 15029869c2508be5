// ParamTable: every parameter of a model, one row each, over ONE flat buffer.
//
// A row names the parameter as Hugging Face does ("bert.encoder.layer.3.
// attention.self.query.weight"), with its shape, offset in the flat parameter
// buffer (the gradient buffer has the same layout), init rule, weight-decay
// flag, tie group and a ShardSpec for tensor parallelism. ZeRO, clipping, the
// optimizer, HF import/export and the tests all iterate this table instead of
// index-coupled arrays.
//
// Invariants:
// - Tied weights are stored once: the row's `tied` names are aliases of the
//   same memory (GPT-2 lm_head.weight -> transformer.wte.weight), so every use
//   accumulates its gradient into the single copy. Shared layers (ALBERT's
//   group) are simply rows used by several layers.
// - Offsets are 16-float aligned (64 bytes) on a GPU and 4 floats past that
//   on the CPU (param_table.cpp says why) unless a row is added with
//   `align = false`, which places it right after the previous row. Models use
//   that to make q/k/v weights one contiguous (3C, C) matrix for a fused GEMM.
//   Alignment gaps hold zeros in both buffers, so whole-buffer kernels
//   (AdamW, norms) may run over them.
// - The buffers live on a Backend (ParamDevice): the fp32 master weights,
//   the compute copy the modules read (the master itself when the
//   activation type is f32) and the gradients in the activation type. The
//   host reads and writes them through params_data()/grads_data() and the
//   row views: the buffers themselves on the CPU, a host staging copy on a
//   device that the host cannot address, moved across by upload_params()
//   (after load, init or any other host write) and download_params()/
//   download_grads() (before a checkpoint, an export or a host reduction).
// - Rows are listed in allocation order, which need not be HF's order; files
//   are read and written by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/act_ptr.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "ops/device_ops.h"

namespace loom {

class TensorSource;

enum class InitRule {
    normal,      // N(0, init_std), as HF's _init_weights for Linear and Embedding
    zeros,       // biases
    ones,        // LayerNorm weights
    sinusoidal,  // DistilBERT's fixed sinusoidal position table
    // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = shape[1]: torch's
    // kaiming_uniform_(a=sqrt(5)), PEFT's default for lora_A
    kaiming_uniform,
};

// How a parameter is split across tensor-parallel ranks. `kind` and `axis`
// come from the model's plan (a Linear's TpRole) whatever the layout; the rest
// is filled in by ParamTable::shard_row when the model is built for tp > 1.
// A split row then holds part tp_rank of every block along `axis` (tp_layers.h
// TpSplit), and its ParamRow::shape is that local slice of `global`.
// A vocab row (shard_vocab_row: the word table, a tied or untied LM decoder
// and its bias) holds rows [r*Vl, (r+1)*Vl) of the vocabulary padded to a
// multiple of tp (tp_vocab.h), zeros past V.
struct ShardSpec {
    enum class Kind { replicated, split, vocab } kind = Kind::replicated;
    int axis = 0;                 // tensor dim split when kind == split
    std::vector<int64_t> blocks;  // packed sizes along axis (GPT-2 c_attn's q, k, v); empty: one
    Shape global;                 // the whole tensor's shape, when sharded()
    int tp_size = 1, tp_rank = 0;
    // True when this process holds a slice, not the whole tensor.
    bool sharded() const { return kind != Kind::replicated && tp_size > 1; }
};

// Where a table's buffers live, and the type its modules keep activations,
// the compute copy and gradients in (OpCtx::act): f32 on the CPU, the
// compute type on CUDA. A null backend is the CPU.
struct ParamDevice {
    Backend* be = nullptr;
    DType act = DType::f32;
};

struct ParamRow {
    std::string name;               // HF name as stored in model.safetensors
    std::vector<std::string> tied;  // HF names aliasing this row (not stored in files)
    Shape shape;                    // shape held here: global, or this rank's tp slice (shard)
    int64_t offset = 0;             // elements into the flat buffers
    InitRule init = InitRule::normal;
    double init_std = 0.02;
    int64_t zero_row = -1;   // row zeroed by init (an embedding's padding_idx); -1 none
    bool decay = true;       // weight decay applies (the trainer's policy: not bias/LayerNorm)
    bool trainable = true;   // false: no gradient, no optimizer update
    bool head = false;       // belongs to a task head: may be absent from a checkpoint
    // A LoRA adapter (nn/lora.h): initialised, not reported, when a file of
    // base weights lacks it.
    bool adapter = false;
    // Pipeline parallelism: false when another stage holds this row. Such a
    // row keeps its name and global shape but has no memory here (offset 0,
    // not trainable); load/save/init skip it and optimizers never see it.
    bool local = true;
    bool packed = false;  // added with align = false (right after the previous row)
    ShardSpec shard;

    int64_t numel() const { return shape.numel(); }
};

// What loading a checkpoint did besides copying tensors.
struct LoadReport {
    std::vector<std::string> newly_initialised;  // head rows absent from the file
    std::vector<std::string> unused;             // file tensors no row asked for
};

class ParamTable {
public:
    // Adds a row; returns its index. Names must be unique (aliases included).
    int add(ParamRow row, bool align = true);
    // Declares `alias` (an HF name not stored in files) as the same tensor as `target`.
    void tie(const std::string& alias, const std::string& target);
    // HF base-model prefix ("bert", "transformer", ...): lets files saved from a
    // base model (no prefix) load into a model with a head, and the reverse.
    void set_base_prefix(std::string prefix) { base_prefix_ = std::move(prefix); }
    const std::string& base_prefix() const { return base_prefix_; }

    // Freezes (false) or unfreezes row i (before allocate).
    void set_trainable(int i, bool on);
    // Pipeline stages: marks row i as held by another stage (before allocate).
    void set_absent(int i);
    // Tensor parallelism: row i (kind split) keeps only part tp_rank of
    // tp_size of each of its n_blocks equal blocks along its axis (before
    // allocate). Throws naming the row when a block does not divide.
    void shard_row(int i, int tp_size, int tp_rank, int n_blocks = 1);
    // Vocab-parallel: row i (V, ...) keeps its padded vocabulary slice along
    // dim 0 (before allocate). Idempotent, so a tied decoder may ask again.
    void shard_vocab_row(int i, int tp_size, int tp_rank);
    // Lays the frozen rows out first and the trainable ones after them (each
    // group in row order), so the trainable rows form one span at the top
    // of the buffers (trainable_begin()): what LoRA asks, so the optimizer
    // state and the gradient reduction cover the adapters only. Before
    // allocate; packed rows must share their predecessor's flag.
    void group_trainable() { group_trainable_ = true; }
    bool grouped_trainable() const { return group_trainable_; }
    // First element of the trainable rows' span (0 unless grouped, or when
    // the first row is trainable); flat_numel() when none is trainable.
    int64_t trainable_begin() const;
    // Allocates the flat buffers (zero-filled) on `device` after the last
    // add; absent rows take no space (the local rows are laid out again, in
    // order).
    void allocate(ParamDevice device = {});
    // Pipeline micro-batches in flight: this table uses `owner`'s buffers
    // (same rows, same presence), so several model instances accumulate into
    // one gradient buffer. Modules must bind again afterwards.
    void share_buffers(const ParamTable& owner);
    // Lays the local rows out (what allocate() does before allocating).
    void lay_out();
    bool allocated() const { return params_ != nullptr; }
    // Where the buffers live and the modules bound to them run their ops
    // (ops/nn_ops.h).
    OpCtx op_ctx() const { return OpCtx{dev_.be, dev_.act}; }
    Backend& backend() const { return *dev_.be; }
    // True when the host works on a staging copy (the backend's memory is
    // not host-addressable): the transfers below then move data.
    bool staged() const { return host_params_ != params_; }

    const std::vector<ParamRow>& rows() const { return rows_; }
    int size() const { return int(rows_.size()); }
    const ParamRow& row(int i) const { return rows_[size_t(i)]; }
    // Row index by stored name or alias; -1 when absent.
    int find(const std::string& name) const;
    // Like find, but throws naming the parameter.
    int index(const std::string& name) const;

    int64_t flat_numel() const { return flat_numel_; }  // buffer length incl. alignment gaps
    int64_t num_parameters() const;                       // sum of row sizes (tied counted once)
    int64_t num_local_parameters() const;                 // the rows this stage holds

    // The host's fp32 view of the parameters and gradients (see the invariant).
    float* params_data() const { return static_cast<float*>(host_params_->data()); }
    float* grads_data() const { return static_cast<float*>(host_grads_->data()); }
    float* param(int i) const {
        return rows_[size_t(i)].local ? params_data() + rows_[size_t(i)].offset : nullptr;
    }
    float* grad(int i) const {
        return rows_[size_t(i)].local ? grads_data() + rows_[size_t(i)].offset : nullptr;
    }
    // Views into the host's flat buffers, named after the row.
    Tensor param_tensor(int i) const;
    Tensor grad_tensor(int i) const;

    // The backend's buffers: what the modules and the optimizer work on.
    float* device_master() const { return static_cast<float*>(params_->data()); }
    ActPtr device_copy() const { return ActPtr(copy_->data(), dev_.act); }
    ActPtr device_grads() const { return ActPtr(grads_->data(), dev_.act); }
    // Row i in the compute copy and in the gradients; null when absent.
    ActPtr device_param(int i) const {
        return rows_[size_t(i)].local ? device_copy() + rows_[size_t(i)].offset : nullptr;
    }
    ActPtr device_grad(int i) const {
        return rows_[size_t(i)].local ? device_grads() + rows_[size_t(i)].offset : nullptr;
    }
    // What an optimizer update reads and writes (ops/device_ops.h): the
    // master weights, the gradients and the compute copy when there is one.
    UpdateBuffers update_buffers() const;

    // Host -> backend: the master weights, then the compute copy from them.
    // Every host write of the parameters ends with this call.
    void upload_params();
    // The compute copy from the master weights, after the backend's master
    // changed other than through an update (a broadcast, ZeRO's all-gather).
    void refresh_copy();
    // Backend -> host copies (no-ops on the CPU). Const: they refresh the
    // host's view, not the parameters.
    void download_params() const;
    void download_grads() const;

    void zero_grad();
    // Initialises every row by its rule; draws are keyed by (seed, name), so a
    // row's values do not depend on the table's order. init_all (and load)
    // end with upload_params(); init_row writes the host copy only.
    void init_all(uint64_t seed);
    void init_row(int i, uint64_t seed);

    // Loads every row by HF name (or a tied alias, or with/without the base
    // prefix); a tp-sharded row takes its slice of the global tensor. Shapes
    // (global ones for sharded rows) must match (error names the file, tensor, expected and
    // found shape, and `expected_from`, e.g. the config.json path). A missing
    // non-head row is an error; a missing head row is initialised and reported.
    LoadReport load(const TensorSource& file, const std::string& expected_from,
                    uint64_t init_seed = 0);
    // Stored name -> view of the local rows, e.g. for safetensors_write.
    std::map<std::string, Tensor> param_tensors() const;
    std::map<std::string, Tensor> grad_tensors() const;

private:
    // Fills p[0, n) with elements [first, first + n) of a tensor of `shape`
    // initialised by r's init rule: the row, or (sharded) runs of the global tensor.
    static void init_values(const ParamRow& r, const Shape& shape, float* p, uint64_t seed,
                            int64_t first, int64_t n);

    std::vector<ParamRow> rows_;
    std::map<std::string, int> by_name_;  // stored names and aliases
    std::string base_prefix_;
    int64_t flat_numel_ = 0;
    bool group_trainable_ = false;
    ParamDevice dev_;
    // On the backend: fp32 master, compute copy (== params_ when act is
    // f32), gradients in act. On the host: params_/grads_ themselves, or
    // fp32 staging copies (staged()).
    std::shared_ptr<Storage> params_, copy_, grads_;
    std::shared_ptr<Storage> host_params_, host_grads_;
};

}  // namespace loom

// LoRA adapters: rows, and their forward/backward over the table's ops.
#include "nn/lora.h"

#include <algorithm>

#include "comm/tp_regions.h"
#include "core/check.h"
#include "nn/linear.h"
#include "ops/device_ops.h"
#include "ops/gemm.h"

namespace loom {

namespace {

const char k_weight_suffix[] = ".weight";

int64_t max_adapter_out(const Linear& l) {
    int64_t m = 0;
    for (const LoraAdapter& a : l.lora) m = std::max(m, a.out);
    return m;
}

// dst (N, width) <- the columns [offset, offset + width) of src (N, ld); or
// the reverse. Whole rows are one copy.
void copy_cols(const OpCtx& c, void* dst, size_t dst_ld, const void* src, size_t src_ld,
               int64_t width, int64_t N) {
    const size_t es = dtype_size(c.act);
    if (int64_t(dst_ld) == width && int64_t(src_ld) == width) {
        c.be->copy(dst, src, size_t(N * width) * es);
        return;
    }
    c.be->copy_2d(dst, dst_ld * es, src, src_ld * es, size_t(width) * es, size_t(N));
}

// The width of the linear's whole input: a row-parallel slice holds in / tp of it.
int64_t input_width(const Linear& l) {
    return l.tp != nullptr && l.tp_role == TpRole::row ? l.in * l.tp->size() : l.in;
}

ShardSpec split_along(int axis) {
    ShardSpec s;
    s.kind = ShardSpec::Kind::split;
    s.axis = axis;
    return s;
}

}  // namespace

bool lora_name_matches(const std::string& module, const std::string& target) {
    if (module == target) return true;
    return module.size() > target.size() &&
           module.compare(module.size() - target.size(), target.size(), target) == 0 &&
           module[module.size() - target.size() - 1] == '.';
}

std::vector<std::string> lora_module_names(const ParamTable& t, const Linear& l) {
    std::vector<std::string> out;
    for (int k = 0; k < l.n_fused; ++k) {
        const std::string& w = t.row(l.weight.row + k).name;
        const size_t n = sizeof(k_weight_suffix) - 1;
        LOOM_ASSERT(w.size() > n && w.compare(w.size() - n, n, k_weight_suffix) == 0,
                    "linear weight row '{}' does not end in .weight", w);
        out.push_back(w.substr(0, w.size() - n));
    }
    return out;
}

std::vector<std::string> lora_attach(ParamTable& t, Linear& l, const LoraSpec& spec,
                                     uint32_t slot) {
    std::vector<std::string> matched;
    if (!spec.active() || !l.weight.defined()) return matched;
    const std::vector<std::string> modules = lora_module_names(t, l);
    int64_t offset = 0;
    for (int k = 0; k < l.n_fused; ++k) {
        const ParamRow& w = t.row(l.weight.row + k);
        const int64_t out = l.layout == WeightLayout::out_in ? w.shape[0] : w.shape[1];
        const std::string& m = modules[size_t(k)];
        const bool hit =
            std::any_of(spec.target_modules.begin(), spec.target_modules.end(),
                        [&](const std::string& tg) { return lora_name_matches(m, tg); });
        if (hit) {
            LoraAdapter a;
            a.module = m;
            a.out_offset = offset;
            a.out = out;
            ParamRow ra;
            ra.name = m + ".lora_A.weight";
            ra.shape = Shape{spec.r, l.in};
            ra.init = InitRule::kaiming_uniform;
            ra.adapter = true;
            // Row parallel: A takes the base weight's input-feature split.
            if (l.tp_role == TpRole::row) ra.shard = split_along(1);
            a.A.row = t.add(ra);
            ParamRow rb;
            rb.name = m + ".lora_B.weight";
            rb.shape = Shape{out, spec.r};
            rb.init = InitRule::zeros;  // PEFT: the adapter starts as the identity
            rb.adapter = true;
            // Column parallel: B's rows are the base's output features, split alike.
            if (l.tp_role == TpRole::column) rb.shard = split_along(0);
            a.B.row = t.add(rb);
            l.lora.push_back(a);
            matched.push_back(m);
        }
        offset += out;
    }
    if (!l.lora.empty()) {
        l.lora_r = spec.r;
        l.lora_scaling = float(spec.scaling());
        l.lora_p = float(spec.lora_dropout);
        l.lora_site = uint32_t(DropoutPlan::lora) + 4 * slot;
    }
    return matched;
}

int64_t lora_work_elems(const Linear& l, int64_t N) {
    if (l.lora.empty()) return 0;
    const int64_t base = N * (2 * l.lora_r + 2 * max_adapter_out(l));
    if (l.lora_p <= 0) return base;
    // The dropped input and (backward) its gradient; a split input's whole
    // width to draw the mask over.
    const int64_t whole = input_width(l);
    return base + N * (2 * l.in + (whole != l.in ? whole : 0));
}

void lora_shard(ParamTable& t, Linear& l, int tp_size, int tp_rank) {
    for (LoraAdapter& a : l.lora) {
        if (l.tp_role == TpRole::column) {
            // Each fused row is split on its own, so the local offsets are the global ones / tp.
            t.shard_row(a.B.row, tp_size, tp_rank, l.tp_blocks);
            a.out /= tp_size;
            a.out_offset /= tp_size;
        } else if (l.tp_role == TpRole::row) {
            t.shard_row(a.A.row, tp_size, tp_rank);
        }
    }
}

namespace {

// Row parallel: each rank's A x is a partial sum over its input slice; the
// sum over tp is A x (N, r), the same on every rank, before B (replicated) reads it.
bool sums_ax(const Linear& l) {
    return l.tp != nullptr && l.tp_role == TpRole::row;
}
// Column parallel: B^T du is a partial sum over this rank's output slice.
bool sums_dt(const Linear& l) {
    return l.tp != nullptr && l.tp_role == TpRole::column;
}

// t (N, r) <- A x, summed over tp when the input is split.
void adapter_in(const Linear& l, const LoraAdapter& a, ActPtr t, CActPtr x, const GemmRounded& rx,
                int64_t N) {
    const OpCtx& c = l.ctx;
    c.nn().matmul_forward(c, l.compute, t, x, a.A.data, nullptr, N, l.in, l.lora_r,
                          WeightLayout::out_in, rx);
    if (sums_ax(l)) tp_sum_inplace(t, N * l.lora_r, t.dtype(), *l.tp);
}

// Adapter k's dropout for this call (inactive outside training or at p 0).
DropoutSpec adapter_dropout(const Linear& l, size_t k) {
    const LoraDropout& d = l.lora_drop;
    return d.plan.spec(l.lora_p, d.layer, DropoutPlan::Site(l.lora_site + uint32_t(k)));
}

// y (N, in) <- x's elements kept by d, scaled (y may alias x). The mask of
// column j of row i is the whole input's at its global column: a row-parallel
// slice is placed at its columns of a whole-width row (`whole`, N * width)
// for the draw.
void apply_mask(const Linear& l, ActPtr y, CActPtr x, ActPtr whole, int64_t N,
                const DropoutSpec& d) {
    const OpCtx& c = l.ctx;
    const LoraDropout& at = l.lora_drop;
    const int64_t width = input_width(l);
    LOOM_ASSERT(at.rows != nullptr || N == at.B * at.T,
                "LoRA dropout over {} rows of a ({}, {}) batch", N, at.B, at.T);
    auto mask = [&](ActPtr out, CActPtr in) {
        if (at.rows)
            c.nn().dropout_rows(c, out, in, at.rows, N, at.T, width, d);
        else
            c.nn().dropout_forward(c, out, in, at.B, at.T * width, d);
    };
    if (width == l.in) {
        mask(y, x);
        return;
    }
    const int64_t offset = int64_t(l.tp->rank()) * l.in;
    copy_cols(c, whole + offset, size_t(width), x, size_t(l.in), l.in, N);
    mask(whole, whole);
    copy_cols(c, y, size_t(l.in), whole + offset, size_t(width), l.in, N);
}

// The input adapter k reads: x itself, or drop(x) in xd (N, in). A CPU bf16
// linear given its input only rounded (forward_rounded) drops the rounding.
struct AdapterInput {
    CActPtr x;
    GemmRounded rx;
    bool dropped = false;
};
AdapterInput adapter_input(const Linear& l, size_t k, CActPtr x, const uint16_t* x16, ActPtr xd,
                           ActPtr whole, int64_t N) {
    const DropoutSpec d = adapter_dropout(l, k);
    AdapterInput in;
    if (!d.active()) {
        in.x = x;
        in.rx.x16 = x16;
        return in;
    }
    if (x == nullptr) {
        LOOM_ASSERT(x16 != nullptr && xd.dtype() == DType::f32,
                    "a LoRA linear given neither its input nor its rounding");
        convert_bf16_to_f32(xd.as<float>(), x16, N * l.in);
        x = xd;
    }
    apply_mask(l, xd, x, whole, N, d);
    in.x = xd;
    in.dropped = true;
    return in;
}

}  // namespace

void lora_forward(const Linear& l, ActPtr y, CActPtr x, const uint16_t* x16, int64_t N) {
    const OpCtx& c = l.ctx;
    LOOM_ASSERT(l.lora_work, "a LoRA linear without the model's workspace");
    const int64_t r = l.lora_r, M = max_adapter_out(l);
    const ActPtr t = l.lora_work;        // (N, r)     A x
    const ActPtr u = t + N * r;          // (N, out)   B (A x) * scaling
    const ActPtr v = u + N * M;          // (N, out)   y's slice, when the linear is fused
    const ActPtr xd = v + N * M;         // (N, in)    drop(x), under lora_dropout
    const ActPtr whole = xd + N * l.in;  // (N, whole input width), a split input's draw
    for (size_t k = 0; k < l.lora.size(); ++k) {
        const LoraAdapter& a = l.lora[k];
        const AdapterInput in = adapter_input(l, k, x, x16, xd, whole, N);
        adapter_in(l, a, t, in.x, in.rx, N);
        c.nn().matmul_forward(c, l.compute, u, t, a.B.data, nullptr, N, r, a.out,
                              WeightLayout::out_in, GemmRounded{});
        c.ops().scale(*c.be, u, c.act, N * a.out, l.lora_scaling);
        if (a.out == l.out) {
            c.nn().add_inplace(c, y, u, N * a.out);
            continue;
        }
        copy_cols(c, v, size_t(a.out), y + a.out_offset, size_t(l.out), a.out, N);
        c.nn().add_inplace(c, v, u, N * a.out);
        copy_cols(c, y + a.out_offset, size_t(l.out), v, size_t(a.out), a.out, N);
    }
}

void lora_backward(const Linear& l, ActPtr dx, CActPtr dy, CActPtr x, const uint16_t* x16,
                   int64_t N) {
    const OpCtx& c = l.ctx;
    LOOM_ASSERT(l.lora_work, "a LoRA linear without the model's workspace");
    const int64_t r = l.lora_r, M = max_adapter_out(l);
    const ActPtr du = l.lora_work;        // (N, out)  dy's slice * scaling
    const ActPtr t = du + N * M;          // (N, r)    A x, recomputed
    const ActPtr dt = t + N * r;          // (N, r)
    const ActPtr xd = dt + N * r;         // (N, in)   drop(x), recomputed
    const ActPtr dxd = xd + N * l.in;     // (N, in)   d drop(x)
    const ActPtr whole = dxd + N * l.in;  // (N, whole input width)
    for (size_t k = 0; k < l.lora.size(); ++k) {
        const LoraAdapter& a = l.lora[k];
        copy_cols(c, du, size_t(a.out), dy + a.out_offset, size_t(l.out), a.out, N);
        c.ops().scale(*c.be, du, c.act, N * a.out, l.lora_scaling);
        const AdapterInput in = adapter_input(l, k, x, x16, xd, whole, N);
        adapter_in(l, a, t, in.x, in.rx, N);
        c.nn().matmul_backward(c, l.compute, dt, a.B.grad, nullptr, du, t, a.B.data, N, r, a.out,
                               WeightLayout::out_in, false, GemmRounded{});
        // Column parallel: the whole B^T du on every rank, so A's gradient
        // (replicated) agrees across tp and dx gets the adapter's full part,
        // added after the base linear's own sum over tp.
        if (sums_dt(l)) tp_sum_inplace(dt, N * r, dt.dtype(), *l.tp);
        if (!in.dropped) {
            c.nn().matmul_backward(c, l.compute, dx, a.A.grad, nullptr, dt, in.x, a.A.data, N, l.in,
                                   r, WeightLayout::out_in, /*accumulate_dx=*/true, in.rx);
            continue;
        }
        // Through the dropout: its mask (and scale) again on the input gradient.
        c.nn().matmul_backward(c, l.compute, dx ? dxd : nullptr, a.A.grad, nullptr, dt, in.x,
                               a.A.data, N, l.in, r, WeightLayout::out_in, false, in.rx);
        if (!dx) continue;
        apply_mask(l, dxd, dxd, whole, N, adapter_dropout(l, k));
        c.nn().add_inplace(c, dx, dxd, N * l.in);
    }
}

}  // namespace loom

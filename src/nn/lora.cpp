// LoRA adapters: rows, and their forward/backward over the table's ops.
#include "nn/lora.h"

#include <algorithm>

#include "core/check.h"
#include "nn/linear.h"
#include "ops/device_ops.h"

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

std::vector<std::string> lora_attach(ParamTable& t, Linear& l, const LoraSpec& spec) {
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
            a.A.row = t.add(ra);
            ParamRow rb;
            rb.name = m + ".lora_B.weight";
            rb.shape = Shape{out, spec.r};
            rb.init = InitRule::zeros;  // PEFT: the adapter starts as the identity
            rb.adapter = true;
            a.B.row = t.add(rb);
            l.lora.push_back(a);
            matched.push_back(m);
        }
        offset += out;
    }
    if (!l.lora.empty()) {
        l.lora_r = spec.r;
        l.lora_scaling = float(spec.scaling());
    }
    return matched;
}

int64_t lora_work_elems(const Linear& l, int64_t N) {
    if (l.lora.empty()) return 0;
    return N * (2 * l.lora_r + 2 * max_adapter_out(l));
}

void lora_forward(const Linear& l, ActPtr y, CActPtr x, const uint16_t* x16, int64_t N) {
    const OpCtx& c = l.ctx;
    LOOM_ASSERT(l.lora_work, "a LoRA linear without the model's workspace");
    const int64_t r = l.lora_r, M = max_adapter_out(l);
    const ActPtr t = l.lora_work;  // (N, r)     A x
    const ActPtr u = t + N * r;    // (N, out)   B (A x) * scaling
    const ActPtr v = u + N * M;    // (N, out)   y's slice, when the linear is fused
    GemmRounded rx;
    rx.x16 = x16;
    for (const LoraAdapter& a : l.lora) {
        c.nn().matmul_forward(c, l.compute, t, x, a.A.data, nullptr, N, l.in, r,
                              WeightLayout::out_in, rx);
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
    const ActPtr du = l.lora_work;  // (N, out)  dy's slice * scaling
    const ActPtr t = du + N * M;    // (N, r)    A x, recomputed
    const ActPtr dt = t + N * r;    // (N, r)
    GemmRounded rx;
    rx.x16 = x16;
    for (const LoraAdapter& a : l.lora) {
        copy_cols(c, du, size_t(a.out), dy + a.out_offset, size_t(l.out), a.out, N);
        c.ops().scale(*c.be, du, c.act, N * a.out, l.lora_scaling);
        c.nn().matmul_forward(c, l.compute, t, x, a.A.data, nullptr, N, l.in, r,
                              WeightLayout::out_in, rx);
        c.nn().matmul_backward(c, l.compute, dt, a.B.grad, nullptr, du, t, a.B.data, N, r, a.out,
                               WeightLayout::out_in, false, GemmRounded{});
        c.nn().matmul_backward(c, l.compute, dx, a.A.grad, nullptr, dt, x, a.A.data, N, l.in, r,
                               WeightLayout::out_in, /*accumulate_dx=*/true, rx);
    }
}

}  // namespace loom

// The CUDA NnOps table (ops/nn_ops.h) against the CPU one, entry by entry,
// as the nn modules call them: the same inputs (rounded to the activation
// type), each entry through `OpCtx::nn()` on both backends, the CUDA result
// within the type's tolerance of the CPU's f32 one. What the one model stack
// needs of a device is exactly this table, so a pass here is what lets the
// CPU-proven modules run on the GPU (the fused attention entries, which the
// CPU lacks, against its unfused ones; the vocab-parallel entries with the
// ranks' collectives done on the host), and the Llama family's entries.
// Also: the row-subset entries are absent on CUDA, and operands other than
// the activation type are refused.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <memory>
#include <vector>

#include "core/check.h"
#include "cuda_test_util.h"
#include "ops/cuda/device_ops_cuda.h"
#include "ops/device_ops.h"

namespace loom::test {
namespace {

template <typename T>
DType act_type() {
    if constexpr (std::is_same_v<T, float>) return DType::f32;
    if constexpr (std::is_same_v<T, __half>) return DType::f16;
    return DType::bf16;
}

template <typename T>
class CudaNnOps : public CudaTypedOpTest<T> {
  protected:
    void SetUp() override {
        CudaTypedOpTest<T>::SetUp();
        if (this->IsSkipped()) return;
        backend_ = make_cuda_backend(this->ctx());
        gpu_ = OpCtx{backend_.get(), act_type<T>()};
    }
    // Inputs as the device sees them: rounded through T.
    std::vector<float> in(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
        return round_all<T>(random_vec(n, seed, lo, hi));
    }
    DeviceBuffer<T>* up(const std::vector<float>& v) {
        bufs_.push_back(upload<T>(v));
        return bufs_.back().get();
    }
    const NnOps& cpu_ops() const { return cpu_.nn(); }
    const NnOps& gpu_ops() const { return gpu_.nn(); }
    Tol tol(double f32_abs = 2e-5, double f32_rel = 1e-4) const {
        return tol_for<T>(f32_abs, f32_rel);
    }

    // The CPU's unfused attention over packed qkv (ld 3C): the reference
    // for both GPU attention paths.
    struct CpuAttention {
        std::vector<float> y, att, dqkv;
    };
    CpuAttention cpu_attention(const std::vector<float>& qkv, const std::vector<float>& dy,
                               const AttnShape& s, const AttnMask& mask, const DropoutSpec& d) {
        const int64_t C = s.NH * s.HS, ld = 3 * C;
        const size_t n_att = size_t(s.B * s.NH * s.T * s.T);
        CpuAttention r{std::vector<float>(size_t(s.B * s.T * C), 0.0f),
                       std::vector<float>(n_att, 0.0f), std::vector<float>(qkv.size())};
        std::vector<float> scratch(n_att, 0.0f);
        const float* q = qkv.data();
        float* dq = r.dqkv.data();
        cpu_ops().attention_forward(cpu_, DType::f32, r.y.data(), r.att.data(), q, q + C, q + 2 * C,
                                    ld, s, mask, d);
        cpu_ops().attention_backward(cpu_, DType::f32, dq, dq + C, dq + 2 * C, scratch.data(),
                                     dy.data(), r.att.data(), q, q + C, q + 2 * C, ld, s, mask, d);
        return r;
    }

    OpCtx cpu_{&cpu_backend(), DType::f32};
    OpCtx gpu_;

  private:
    std::unique_ptr<Backend> backend_;
    std::vector<std::unique_ptr<DeviceBuffer<T>>> bufs_;
};
TYPED_TEST_SUITE(CudaNnOps, DeviceTypes, TypeNames);

// The Llama family's entries (RMSNorm, RoPE in place on packed rows,
// repeat_kv and its group sums, SwiGLU) against the CPU's.
TYPED_TEST(CudaNnOps, LlamaEntriesMatchTheCpuEntries) {
    ASSERT_TRUE(this->gpu_ops().decoder_supported());
    const int64_t B = 2, T = 7, NH = 4, NKV = 2, d = 8, C = NH * d, N = B * T;
    const size_t NC = size_t(N * C);
    auto x = this->in(NC, 40, -2.0f, 2.0f), w = this->in(size_t(C), 41, 0.5f, 1.5f),
         dy = this->in(NC, 42), dx0 = this->in(NC, 43);
    std::vector<float> y(NC), rstd(static_cast<size_t>(N)), dx = dx0, dw(size_t(C), 0.0f);
    this->cpu_ops().rms_norm_forward(this->cpu_, y.data(), rstd.data(), x.data(), w.data(), N, C,
                                     1e-5);
    this->cpu_ops().rms_norm_backward(this->cpu_, dx.data(), dw.data(), dy.data(), x.data(),
                                      w.data(), rstd.data(), N, C, true);
    auto *gx = this->up(x), *gw = this->up(w), *gdy = this->up(dy), *gdx = this->up(dx0);
    DeviceBuffer<TypeParam> gy{NC}, gdw{size_t(C)};
    DeviceBuffer<float> grstd{size_t(N)};
    this->gpu_ops().rms_norm_forward(this->gpu_, gy.get(), grstd.get(), gx->get(), gw->get(), N, C,
                                     1e-5);
    this->gpu_ops().rms_norm_backward(this->gpu_, gdx->get(), gdw.get(), gdy->get(), gx->get(),
                                      gw->get(), grstd.get(), N, C, true);
    EXPECT_TRUE(all_close("rms y", download(gy), y, this->tol()));
    EXPECT_TRUE(all_close("rms rstd", download(grstd), rstd, Tol{1e-4, 1e-4}));
    EXPECT_TRUE(all_close("rms dx (+=)", download(*gdx), dx, this->tol(5e-5, 1e-4)));
    EXPECT_TRUE(all_close("rms dw", download(gdw), dw, this->tol(1e-4, 1e-4)));

    // RoPE on q and k of packed (N, C + 2 KV) rows, forward then inverse.
    const int64_t KV = NKV * d, lp = C + 2 * KV;
    for (const RopeSpec spec : {RopeSpec{500000.0, 1.0}, RopeSpec{10000.0, 2.0}})
        for (bool inverse : {false, true}) {
            auto p = this->in(size_t(N * lp), 44);
            std::vector<float> r = p;
            this->cpu_ops().rope(this->cpu_, r.data(), lp, B, T, NH, d, spec, inverse, nullptr);
            this->cpu_ops().rope(this->cpu_, r.data() + C, lp, B, T, NKV, d, spec, inverse,
                                 nullptr);
            auto* gp = this->up(p);
            this->gpu_ops().rope(this->gpu_, gp->get(), lp, B, T, NH, d, spec, inverse, nullptr);
            this->gpu_ops().rope(this->gpu_, gp->get() + C, lp, B, T, NKV, d, spec, inverse,
                                 nullptr);
            EXPECT_TRUE(all_close("rope", download(*gp), r, this->tol()));
        }

    auto packed = this->in(size_t(N * lp), 45), de = this->in(size_t(N * 3 * C), 46);
    std::vector<float> e(size_t(N * 3 * C)), dp(size_t(N * lp));
    this->cpu_ops().repeat_kv_forward(this->cpu_, e.data(), packed.data(), N, NH, NKV, d);
    this->cpu_ops().repeat_kv_backward(this->cpu_, dp.data(), de.data(), N, NH, NKV, d);
    auto *gpk = this->up(packed), *gde = this->up(de);
    DeviceBuffer<TypeParam> ge{size_t(N * 3 * C)}, gdp{size_t(N * lp)};
    this->gpu_ops().repeat_kv_forward(this->gpu_, ge.get(), gpk->get(), N, NH, NKV, d);
    this->gpu_ops().repeat_kv_backward(this->gpu_, gdp.get(), gde->get(), N, NH, NKV, d);
    EXPECT_TRUE(all_close("repeat_kv", download(ge), e, Tol{0.0, 0.0}));
    EXPECT_TRUE(all_close("repeat_kv backward", download(gdp), dp, this->tol()));

    const int64_t I = 24;
    auto gu = this->in(size_t(N * 2 * I), 47, -3.0f, 3.0f), ds = this->in(size_t(N * I), 48);
    std::vector<float> sy(size_t(N * I)), dgu(size_t(N * 2 * I));
    this->cpu_ops().swiglu_forward(this->cpu_, sy.data(), DType::f32, gu.data(), N, I);
    this->cpu_ops().swiglu_backward(this->cpu_, dgu.data(), gu.data(), ds.data(), N, I);
    auto *ggu = this->up(gu), *gds = this->up(ds);
    DeviceBuffer<TypeParam> gsy{size_t(N * I)}, gdgu{size_t(N * 2 * I)};
    this->gpu_ops().swiglu_forward(this->gpu_, gsy.get(), this->gpu_.act, ggu->get(), N, I);
    this->gpu_ops().swiglu_backward(this->gpu_, gdgu.get(), ggu->get(), gds->get(), N, I);
    EXPECT_TRUE(all_close("swiglu", download(gsy), sy, this->tol()));
    EXPECT_TRUE(all_close("swiglu backward", download(gdgu), dgu, this->tol()));
}

TYPED_TEST(CudaNnOps, MatmulMatchesTheCpuEntry) {
    const int64_t N = 33, C = 48, OC = 40;
    const DType t = this->gpu_.act;
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        auto x = this->in(size_t(N * C), 1), w = this->in(size_t(OC * C), 2),
             b = this->in(size_t(OC), 3), dy = this->in(size_t(N * OC), 4);
        auto dx0 = this->in(size_t(N * C), 5), dw0 = this->in(size_t(OC * C), 6);
        std::vector<float> y(size_t(N * OC), 0.0f), dx = dx0, dw = dw0, db(size_t(OC), 0.0f);
        this->cpu_ops().matmul_forward(this->cpu_, DType::f32, y.data(), x.data(), w.data(),
                                       b.data(), N, C, OC, layout, {});
        this->cpu_ops().matmul_backward(this->cpu_, DType::f32, dx.data(), dw.data(), db.data(),
                                        dy.data(), x.data(), w.data(), N, C, OC, layout, true, {});
        auto *gx = this->up(x), *gw = this->up(w), *gb = this->up(b), *gdy = this->up(dy);
        auto *gdx = this->up(dx0), *gdw = this->up(dw0), *gdb = this->up(std::vector<float>(OC));
        DeviceBuffer<TypeParam> gy{size_t(N * OC)};
        this->gpu_ops().matmul_forward(this->gpu_, t, gy.get(), gx->get(), gw->get(), gb->get(), N,
                                       C, OC, layout, {});
        this->gpu_ops().matmul_backward(this->gpu_, t, gdx->get(), gdw->get(), gdb->get(),
                                        gdy->get(), gx->get(), gw->get(), N, C, OC, layout, true,
                                        {});
        EXPECT_TRUE(all_close("y", download(gy), y, this->tol(1e-4, 1e-4)));
        EXPECT_TRUE(all_close("dx (+=)", download(*gdx), dx, this->tol(1e-4, 1e-4)));
        EXPECT_TRUE(all_close("dw (+=)", download(*gdw), dw, this->tol(1e-4, 1e-4)));
        EXPECT_TRUE(all_close("db", download(*gdb), db, this->tol(1e-4, 1e-4)));
    }
}

TYPED_TEST(CudaNnOps, LayerNormActivationAndElementwiseMatchTheCpuEntries) {
    const int64_t N = 19, C = 64;
    const size_t NC = size_t(N * C);
    auto x = this->in(NC, 7, -2.0f, 2.0f), w = this->in(size_t(C), 8, 0.5f, 1.5f),
         b = this->in(size_t(C), 9), dy = this->in(NC, 10);
    std::vector<float> y(NC, 0.0f), mean(size_t(N), 0.0f), rstd(size_t(N), 0.0f), dx(NC, 0.0f),
        dw(size_t(C), 0.0f), db(size_t(C), 0.0f);
    this->cpu_ops().layer_norm_forward(this->cpu_, y.data(), mean.data(), rstd.data(), x.data(),
                                       w.data(), b.data(), N, C, 1e-5);
    this->cpu_ops().layer_norm_backward(this->cpu_, dx.data(), dw.data(), db.data(), dy.data(),
                                        x.data(), w.data(), mean.data(), rstd.data(), N, C, false);
    auto *gx = this->up(x), *gw = this->up(w), *gb = this->up(b), *gdy = this->up(dy);
    DeviceBuffer<TypeParam> gy{NC}, gdx{NC}, gdw{size_t(C)}, gdb{size_t(C)};
    DeviceBuffer<float> gmean{size_t(N)}, grstd{size_t(N)};
    this->gpu_ops().layer_norm_forward(this->gpu_, gy.get(), gmean.get(), grstd.get(), gx->get(),
                                       gw->get(), gb->get(), N, C, 1e-5);
    this->gpu_ops().layer_norm_backward(this->gpu_, gdx.get(), gdw.get(), gdb.get(), gdy->get(),
                                        gx->get(), gw->get(), gmean.get(), grstd.get(), N, C,
                                        false);
    EXPECT_TRUE(all_close("ln y", download(gy), y, this->tol()));
    EXPECT_TRUE(all_close("ln rstd", download(grstd), rstd, Tol{1e-4, 1e-4}));
    EXPECT_TRUE(all_close("ln dx", download(gdx), dx, this->tol(5e-5, 1e-4)));
    EXPECT_TRUE(all_close("ln dw", download(gdw), dw, this->tol(1e-4, 1e-4)));

    for (Activation a : {Activation::gelu_erf, Activation::gelu_tanh, Activation::tanh}) {
        std::vector<float> ya(NC, 0.0f), da(NC, 0.0f);
        this->cpu_ops().activation_forward(this->cpu_, ya.data(), DType::f32, x.data(), int64_t(NC),
                                           a);
        this->cpu_ops().activation_backward(this->cpu_, da.data(), x.data(), dy.data(), int64_t(NC),
                                            a);
        DeviceBuffer<TypeParam> gya{NC}, gda{NC};
        this->gpu_ops().activation_forward(this->gpu_, gya.get(), this->gpu_.act, gx->get(),
                                           int64_t(NC), a);
        this->gpu_ops().activation_backward(this->gpu_, gda.get(), gx->get(), gdy->get(),
                                            int64_t(NC), a);
        const std::string name(activation_name(a));
        EXPECT_TRUE(all_close(name, download(gya), ya, this->tol()));
        EXPECT_TRUE(all_close(name + " backward", download(gda), da, this->tol()));
    }

    std::vector<float> r(NC, 0.0f);
    this->cpu_ops().residual_forward(this->cpu_, r.data(), x.data(), dy.data(), int64_t(NC));
    this->cpu_ops().add_inplace(this->cpu_, r.data(), x.data(), int64_t(NC));
    this->cpu_ops().add_bias(this->cpu_, r.data(), b.data(), N, C);
    DeviceBuffer<TypeParam> gr{NC};
    this->gpu_ops().residual_forward(this->gpu_, gr.get(), gx->get(), gdy->get(), int64_t(NC));
    this->gpu_ops().add_inplace(this->gpu_, gr.get(), gx->get(), int64_t(NC));
    this->gpu_ops().add_bias(this->gpu_, gr.get(), gb->get(), N, C);
    EXPECT_TRUE(all_close("residual + add_inplace + add_bias", download(gr), r, this->tol()));
}

TYPED_TEST(CudaNnOps, DropoutEmbeddingAndCrossEntropyMatchTheCpuEntries) {
    const int64_t B = 3, T = 7, C = 16, V = 50;
    const size_t n = size_t(B * T * C);
    DropoutSpec d;
    d.p = 0.25f;
    d.stream = PhiloxStream(11, 3, 4);
    d.sample_offset = 5;
    auto x = this->in(n, 12);
    std::vector<float> y(n, 0.0f), dx(n, 0.0f);
    this->cpu_ops().dropout_forward(this->cpu_, y.data(), x.data(), B, T * C, d);
    this->cpu_ops().dropout_backward(this->cpu_, dx.data(), x.data(), B, T * C, d);
    auto* gx = this->up(x);
    DeviceBuffer<TypeParam> gy{n}, gdx{n};
    this->gpu_ops().dropout_forward(this->gpu_, gy.get(), gx->get(), B, T * C, d);
    this->gpu_ops().dropout_backward(this->gpu_, gdx.get(), gx->get(), B, T * C, d);
    // The same Philox keys drop the same elements; kept ones scale alike.
    EXPECT_TRUE(all_close("dropout", download(gy), y, this->tol()));
    EXPECT_TRUE(all_close("dropout backward", download(gdx), dx, this->tol()));

    const std::vector<int64_t> ids = random_ids(size_t(B * T), V, 13);
    auto table = this->in(size_t(V * C), 14);
    std::vector<float> e(n, 0.0f), dt(size_t(V * C), 0.0f);
    this->cpu_ops().embedding_forward(this->cpu_, e.data(), ids.data(), table.data(), B * T, V, C,
                                      false);
    this->cpu_ops().embedding_backward(this->cpu_, dt.data(), ids.data(), x.data(), B * T, V, C,
                                       ids[0]);
    auto gids = upload_raw(ids);
    auto* gt = this->up(table);
    DeviceBuffer<TypeParam> ge{n}, gdt{size_t(V * C)};
    this->gpu_ops().embedding_forward(this->gpu_, ge.get(), gids->get(), gt->get(), B * T, V, C,
                                      false);
    this->gpu_ops().embedding_backward(this->gpu_, gdt.get(), gids->get(), gx->get(), B * T, V, C,
                                       ids[0]);
    EXPECT_TRUE(all_close("embedding", download(ge), e, this->tol()));
    EXPECT_TRUE(all_close("embedding backward (padding row skipped)", download(gdt), dt,
                          this->tol(1e-5, 1e-4)));

    std::vector<int64_t> targets = random_ids(size_t(B * T), V, 15);
    targets[2] = k_ignore_index;
    auto logits = this->in(size_t(B * T * V), 16, -3.0f, 3.0f);
    std::vector<float> dl(logits.size());
    const XentSum s = this->cpu_ops().softmax_xent_forward(this->cpu_, nullptr, logits.data(),
                                                           targets.data(), B * T, V);
    this->cpu_ops().softmax_xent_backward(this->cpu_, dl.data(), logits.data(), targets.data(),
                                          B * T, V, 0.5);
    auto gtargets = upload_raw(targets);
    auto* gl = this->up(logits);
    DeviceBuffer<TypeParam> gdl(logits.size());
    const XentSum gs = this->gpu_ops().softmax_xent_forward(this->gpu_, nullptr, gl->get(),
                                                            gtargets->get(), B * T, V);
    this->gpu_ops().softmax_xent_backward(this->gpu_, gdl.get(), gl->get(), gtargets->get(), B * T,
                                          V, 0.5);
    EXPECT_EQ(gs.count, s.count);
    EXPECT_NEAR(gs.loss_sum, s.loss_sum, 1e-4 * double(s.count));
    EXPECT_TRUE(all_close("dlogits", download(gdl), dl, this->tol()));
}

TYPED_TEST(CudaNnOps, AttentionMatchesTheCpuEntry) {
    const AttnShape s{2, 9, 4, 8};
    const int64_t C = s.NH * s.HS, ld = 3 * C, N = s.B * s.T;
    const DType t = this->gpu_.act;
    const std::vector<int64_t> pad = {1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    DropoutSpec d;
    d.p = 0.1f;
    d.stream = PhiloxStream(5, 1, 2);
    for (bool causal : {false, true}) {
        const AttnMask cpu_mask{pad.data(), causal};
        auto qkv = this->in(size_t(N * ld), 17), dy = this->in(size_t(N * C), 18);
        const size_t n_att = size_t(s.B * s.NH * s.T * s.T);
        const auto ref = this->cpu_attention(qkv, dy, s, cpu_mask, d);
        auto gpad = upload_raw(pad);
        const AttnMask gpu_mask{gpad->get(), causal};
        auto *gqkv = this->up(qkv), *gdy = this->up(dy);
        DeviceBuffer<TypeParam> gy{size_t(N * C)}, gatt{n_att}, gdqkv(qkv.size()), gs{n_att};
        const TypeParam* gq = gqkv->get();
        this->gpu_ops().attention_forward(this->gpu_, t, gy.get(), gatt.get(), gq, gq + C,
                                          gq + 2 * C, ld, s, gpu_mask, d);
        this->gpu_ops().attention_backward(this->gpu_, t, gdqkv.get(), gdqkv.get() + C,
                                           gdqkv.get() + 2 * C, gs.get(), gdy->get(), gatt.get(),
                                           gq, gq + C, gq + 2 * C, ld, s, gpu_mask, d);
        const std::string tag = causal ? "causal " : "padded ";
        EXPECT_TRUE(all_close(tag + "y", download(gy), ref.y, this->tol(5e-5, 1e-4)));
        EXPECT_TRUE(all_close(tag + "probabilities", download(gatt), ref.att, this->tol()));
        EXPECT_TRUE(all_close(tag + "dqkv", download(gdqkv), ref.dqkv, this->tol(1e-4, 1e-3)));
    }
}

// The fused entries keep lse instead of the probabilities; their y and
// gradients are the CPU's unfused ones. Every row here sees a key.
TYPED_TEST(CudaNnOps, FusedAttentionMatchesTheCpuEntry) {
    const AttnShape s{2, 19, 2, 16};
    ASSERT_TRUE(this->gpu_ops().fused_attention(s));
    EXPECT_FALSE(this->cpu_ops().fused_attention(s));
    const int64_t C = s.NH * s.HS, ld = 3 * C, N = s.B * s.T;
    const DType t = this->gpu_.act;
    std::vector<int64_t> pad(size_t(N), 1);
    for (int64_t j = 12; j < s.T; ++j) pad[size_t(j)] = 0;  // sample 0's tail
    DropoutSpec d;
    d.p = 0.1f;
    d.stream = PhiloxStream(5, 1, 2);
    for (bool causal : {false, true}) {
        const AttnMask cpu_mask{pad.data(), causal};
        ASSERT_TRUE(attention_every_row_has_a_key(pad.data(), s.B, s.T, causal));
        auto qkv = this->in(size_t(N * ld), 27), dy = this->in(size_t(N * C), 28);
        const auto ref = this->cpu_attention(qkv, dy, s, cpu_mask, d);
        auto gpad = upload_raw(pad);
        const AttnMask gpu_mask{gpad->get(), causal};
        auto *gqkv = this->up(qkv), *gdy = this->up(dy);
        DeviceBuffer<TypeParam> gy{size_t(N * C)}, gdqkv(qkv.size());
        DeviceBuffer<float> glse{size_t(s.B * s.NH * s.T)};
        const TypeParam* gq = gqkv->get();
        this->gpu_ops().fused_attention_forward(this->gpu_, t, gy.get(), glse.get(), gq, gq + C,
                                                gq + 2 * C, ld, s, gpu_mask, d);
        this->gpu_ops().fused_attention_backward(
            this->gpu_, t, gdqkv.get(), gdqkv.get() + C, gdqkv.get() + 2 * C, gdy->get(), gy.get(),
            glse.get(), gq, gq + C, gq + 2 * C, ld, s, gpu_mask, d);
        const std::string tag = causal ? "fused causal " : "fused padded ";
        EXPECT_TRUE(all_close(tag + "y", download(gy), ref.y, this->tol(5e-5, 1e-4)));
        EXPECT_TRUE(all_close(tag + "dqkv", download(gdqkv), ref.dqkv, this->tol(1e-4, 1e-3)));
    }
}

TYPED_TEST(CudaNnOps, Copy2dMatchesTheCpuBackend) {
    const size_t e = sizeof(TypeParam);
    auto src = this->in(40, 19);
    std::vector<float> dst(20, 0.0f);
    cpu_backend().copy_2d(dst.data(), 2 * sizeof(float), src.data() + 3, 4 * sizeof(float),
                          sizeof(float), 10);
    auto* gsrc = this->up(src);
    DeviceBuffer<TypeParam> gdst{20};
    this->gpu_.be->copy_2d(gdst.get(), 2 * e, gsrc->get() + 3, 4 * e, e, 10);
    EXPECT_TRUE(all_close("copy_2d", download(gdst), dst, Tol{0, 0}));
}

// The vocab-parallel entries of two tp ranks' slices of a vocabulary that
// does not divide (37 -> 2 x 19, the last column padding); the collectives
// between the steps are the host's (max and sum over the ranks' CPU results).
TYPED_TEST(CudaNnOps, VocabParallelEntriesMatchTheCpuEntries) {
    const int64_t V = 37, C = 8, N = 12, Vl = 19, tp = 2;
    const std::vector<int64_t> ids = random_ids(size_t(N), V, 21);
    std::vector<int64_t> targets = random_ids(size_t(N), V, 22);
    targets[3] = k_ignore_index;
    auto gids = upload_raw(ids), gtargets = upload_raw(targets);
    DeviceBuffer<int64_t> ids_work{size_t(N)};
    std::vector<std::vector<float>> logits(tp), row_max(tp), stats(tp);
    for (int64_t r = 0; r < tp; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const int64_t first = r * Vl, valid = std::min(Vl, V - first);
        auto table = this->in(size_t(Vl * C), uint32_t(23 + r)), dy = this->in(size_t(N * C), 25);
        std::vector<float> e(size_t(N * C)), dt(size_t(Vl * C), 0.0f);
        this->cpu_ops().vocab_embedding_forward(this->cpu_, e.data(), ids.data(), table.data(), N,
                                                V, C, first, Vl);
        this->cpu_ops().vocab_embedding_backward(this->cpu_, dt.data(), ids.data(), dy.data(), N, V,
                                                 C, first, Vl, ids[0], nullptr);
        auto *gt = this->up(table), *gdy = this->up(dy);
        DeviceBuffer<TypeParam> ge{size_t(N * C)};
        auto* gdt = this->up(std::vector<float>(size_t(Vl * C), 0.0f));
        this->gpu_ops().vocab_embedding_forward(this->gpu_, ge.get(), gids->get(), gt->get(), N, V,
                                                C, first, Vl);
        this->gpu_ops().vocab_embedding_backward(this->gpu_, gdt->get(), gids->get(), gdy->get(), N,
                                                 V, C, first, Vl, ids[0], ids_work.get());
        EXPECT_TRUE(all_close("vocab lookup", download(ge), e, this->tol()));
        EXPECT_TRUE(all_close("vocab embedding backward", download(*gdt), dt, this->tol()));

        logits[size_t(r)] = this->in(size_t(N * Vl), uint32_t(26 + r), -3.0f, 3.0f);
        row_max[size_t(r)].resize(size_t(N));
        this->cpu_ops().vocab_xent_max(this->cpu_, row_max[size_t(r)].data(),
                                       logits[size_t(r)].data(), N, Vl, valid);
        auto* gl = this->up(logits[size_t(r)]);
        DeviceBuffer<float> gmax{size_t(N)};
        this->gpu_ops().vocab_xent_max(this->gpu_, gmax.get(), gl->get(), N, Vl, valid);
        EXPECT_TRUE(all_close("row maxima", download(gmax), row_max[size_t(r)], Tol{0, 0}));
    }
    std::vector<float> m(static_cast<size_t>(N)), sums(static_cast<size_t>(2 * N), 0.0f);
    for (int64_t n = 0; n < N; ++n)
        m[size_t(n)] = std::max(row_max[0][size_t(n)], row_max[1][size_t(n)]);
    auto gm = upload_raw(m);
    for (int64_t r = 0; r < tp; ++r) {
        const int64_t first = r * Vl, valid = std::min(Vl, V - first);
        stats[size_t(r)].resize(size_t(2 * N));
        this->cpu_ops().vocab_xent_stats(this->cpu_, stats[size_t(r)].data(),
                                         logits[size_t(r)].data(), targets.data(), m.data(), N, Vl,
                                         valid, first, V);
        auto* gl = this->up(logits[size_t(r)]);
        DeviceBuffer<float> gstats{size_t(2 * N)};
        this->gpu_ops().vocab_xent_stats(this->gpu_, gstats.get(), gl->get(), gtargets->get(),
                                         gm->get(), N, Vl, valid, first, V);
        EXPECT_TRUE(all_close("stats", download(gstats), stats[size_t(r)], tol_for<float>()));
        for (size_t i = 0; i < sums.size(); ++i) sums[i] += stats[size_t(r)][i];
    }
    auto gsums = upload_raw(sums);
    const XentSum s =
        this->cpu_ops().vocab_xent_loss(this->cpu_, m.data(), sums.data(), targets.data(), N, V);
    const XentSum gs =
        this->gpu_ops().vocab_xent_loss(this->gpu_, gm->get(), gsums->get(), gtargets->get(), N, V);
    EXPECT_EQ(gs.count, s.count);
    EXPECT_EQ(s.count, N - 1);
    EXPECT_NEAR(gs.loss_sum, s.loss_sum, 1e-5 * double(s.count));
    for (int64_t r = 0; r < tp; ++r) {
        const int64_t first = r * Vl, valid = std::min(Vl, V - first);
        std::vector<float> dl(size_t(N * Vl));
        this->cpu_ops().vocab_xent_backward(this->cpu_, dl.data(), logits[size_t(r)].data(),
                                            targets.data(), m.data(), sums.data(), N, Vl, valid,
                                            first, V, 0.5);
        auto* gl = this->up(logits[size_t(r)]);
        DeviceBuffer<TypeParam> gdl{size_t(N * Vl)};
        this->gpu_ops().vocab_xent_backward(this->gpu_, gdl.get(), gl->get(), gtargets->get(),
                                            gm->get(), gsums->get(), N, Vl, valid, first, V, 0.5);
        EXPECT_TRUE(all_close("vocab dlogits", download(gdl), dl, this->tol()));
    }
}

TYPED_TEST(CudaNnOps, LacksTheRowEntriesAndRefusesOtherOperandTypes) {
    EXPECT_FALSE(this->gpu_ops().rows_supported());
    EXPECT_TRUE(this->cpu_ops().rows_supported());
    const DType other = this->gpu_.act == DType::f32 ? DType::bf16 : DType::f32;
    DeviceBuffer<TypeParam> y(16), x(16), w(16);
    EXPECT_THROW(this->gpu_ops().matmul_forward(this->gpu_, other, y.get(), x.get(), w.get(),
                                                nullptr, 4, 4, 4, WeightLayout::out_in, {}),
                 Error);
}

}  // namespace
}  // namespace loom::test

// The CUDA backend's kernel table (ops/device_ops.h) against the CPU one,
// through the one optimizer both run (optim/flat_optimizer.h): AdamW, LAMB
// and SGD over a table with decaying, non-decaying, zero and frozen rows,
// with varying learning rates and gradient scales, fp32 gradients and the
// bf16 compute copy, the whole buffer and a shard whose state offsets differ
// from the flat ones, and the checkpoint form in both directions.
//
// AdamW and SGD round every operation as the CPU does: bit for bit. LAMB's
// moments too; its parameters take the trust ratio from fp64 norms summed in
// another order (tiles of threads vs sequential tiles), so they agree to the
// last few bits. The table's convert, sum_squares and scale entries (the
// parameter table's compute copy, the gradient norm and clipping) are held to
// the CPU's too.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "optimizer_test_table.h"
#include "nn/param_table.h"
#include "ops/cuda/device_ops_cuda.h"
#include "ops/device_ops.h"
#include "optim/adamw.h"
#include "optim/flat_optimizer.h"

namespace loom {
namespace {

using test::all_close;
using test::bit_equal;
using test::download;
using test::random_vec;
using test::upload;

class CudaDeviceOps : public test::CudaOpTest {};

std::unique_ptr<ParamTable> make_table() { return test::make_optimizer_table(); }

OptimizerConfig config_for(OptimizerKind k) {
    OptimizerConfig c;
    c.kind = k;
    c.hp.weight_decay = 0.05;
    return c;
}

const char* kind_name(OptimizerKind k) {
    return k == OptimizerKind::lamb ? "lamb" : k == OptimizerKind::sgd ? "sgd" : "adamw";
}

// Zero outside the table's trainable rows, as the trainer's gradients are.
std::vector<float> grads_for(const ParamTable& t, uint32_t seed) {
    std::vector<float> g = random_vec(size_t(t.flat_numel()), seed);
    for (const ParamRow& r : t.rows())
        if (!r.trainable) std::fill_n(g.begin() + r.offset, r.numel(), 0.0f);
    return g;
}

std::vector<float> flat_of(const std::map<std::string, Tensor>& s, const ParamTable& t,
                           const char* kind) {
    std::vector<float> out(size_t(t.flat_numel()), 0.0f);
    for (const ParamRow& r : t.rows()) {
        auto it = s.find(kind + r.name);
        if (it != s.end())
            std::memcpy(out.data() + r.offset, it->second.raw(), size_t(r.numel()) * 4);
    }
    return out;
}

const double k_lrs[] = {1e-2, 5e-3, 2e-2, 1e-3};
const float k_scales[] = {1.0f, 0.5f, 1.0f, 0.25f};

void expect_same(OptimizerKind k, const std::string& tag, const std::vector<float>& gpu,
                 const std::vector<float>& cpu) {
    if (k == OptimizerKind::lamb)
        EXPECT_TRUE(all_close(tag, gpu, cpu, {1e-7, 1e-6}));
    else
        EXPECT_TRUE(bit_equal(tag, gpu, cpu));
}

TEST_F(CudaDeviceOps, EveryOptimizerMatchesTheCpuOverSteps) {
    for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::lamb, OptimizerKind::sgd}) {
        auto t = make_table();
        const int64_t F = t->flat_numel();
        auto master = upload<float>({t->params_data(), t->params_data() + F});
        auto grads = std::make_unique<test::DeviceBuffer<float>>(size_t(F));
        FlatOptimizer cpu(*t, config_for(k));
        auto be = make_cuda_backend(ctx());
        UpdateBuffers target;
        target.master = master->get();
        target.grad = grads->get();
        FlatOptimizer gpu(*be, *t, config_for(k), target);
        for (int step = 0; step < 4; ++step) {
            const std::vector<float> g = grads_for(*t, uint32_t(100 + step));
            std::memcpy(t->grads_data(), g.data(), g.size() * sizeof(float));
            be->to_device(grads->get(), g.data(), g.size() * sizeof(float));
            cpu.step(k_lrs[step], k_scales[step]);
            gpu.step(k_lrs[step], k_scales[step]);
        }
        const std::string tag = kind_name(k);
        expect_same(k, tag + " params", download(*master),
                    {t->params_data(), t->params_data() + F});
        EXPECT_EQ(gpu.step_count(), 4);
        const auto cs = cpu.state_tensors(), gs = gpu.state_tensors();
        EXPECT_EQ(cs.size(), gs.size()) << tag;
        if (k != OptimizerKind::sgd) {
            EXPECT_TRUE(
                bit_equal(tag + " m", flat_of(gs, *t, "exp_avg."), flat_of(cs, *t, "exp_avg.")));
            EXPECT_TRUE(bit_equal(tag + " v", flat_of(gs, *t, "exp_avg_sq."),
                                  flat_of(cs, *t, "exp_avg_sq.")));
        }
        const std::vector<float> p = download(*master);
        const int64_t fr = t->row(t->index("frozen.weight")).offset;
        for (int64_t i = fr; i < fr + 40; ++i)
            ASSERT_EQ(p[size_t(i)], t->params_data()[i]) << tag << ": the frozen row moved";
    }
}

// The state crosses devices: the CPU's state loaded on the GPU and the
// GPU's back on the CPU continue as one run would.
TEST_F(CudaDeviceOps, StateMovesBetweenDevices) {
    for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::lamb}) {
        auto t = make_table();
        const int64_t F = t->flat_numel();
        FlatOptimizer cpu(*t, config_for(k));
        std::vector<float> g = grads_for(*t, 5);
        std::memcpy(t->grads_data(), g.data(), g.size() * sizeof(float));
        cpu.step(1e-2);
        auto master = upload<float>({t->params_data(), t->params_data() + F});
        auto grads = upload<float>(g);
        auto be = make_cuda_backend(ctx());
        UpdateBuffers target;
        target.master = master->get();
        target.grad = grads->get();
        FlatOptimizer gpu(*be, *t, config_for(k), target);
        gpu.load_state(cpu.state_tensors(), cpu.step_count());
        cpu.step(2e-2);
        gpu.step(2e-2);
        expect_same(k, std::string(kind_name(k)) + " after the move", download(*master),
                    {t->params_data(), t->params_data() + F});
        auto back = make_table();
        std::memcpy(back->params_data(), t->params_data(), size_t(F) * sizeof(float));
        FlatOptimizer again(*back, config_for(k));
        again.load_state(gpu.state_tensors(), gpu.step_count());
        EXPECT_EQ(again.step_count(), 2);
        EXPECT_TRUE(bit_equal("m back on the CPU", flat_of(again.state_tensors(), *t, "exp_avg."),
                              flat_of(cpu.state_tensors(), *t, "exp_avg.")));
    }
}

// bf16 gradients and a bf16 compute copy, as a bf16 run on a GPU: the
// master weights follow the CPU fed the same (rounded) gradients, and the
// copy is the master rounded to bf16.
TEST_F(CudaDeviceOps, Bf16GradientsRefreshTheCopy) {
    for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::lamb, OptimizerKind::sgd}) {
        auto t = make_table();
        const int64_t F = t->flat_numel();
        std::vector<float> p0(t->params_data(), t->params_data() + F);
        auto master = upload<float>(p0);
        auto copy = upload<__nv_bfloat16>(p0);
        FlatOptimizer cpu(*t, config_for(k));
        auto be = make_cuda_backend(ctx());
        UpdateBuffers target;
        target.master = master->get();
        target.copy = copy->get();
        target.copy_dtype = DType::bf16;
        target.grad_dtype = DType::bf16;
        for (int step = 0; step < 3; ++step) {
            const std::vector<float> g =
                test::round_all<__nv_bfloat16>(grads_for(*t, uint32_t(9 + step)));
            auto dg = upload<__nv_bfloat16>(g);
            target.grad = dg->get();
            FlatOptimizer gpu(*be, *t, config_for(k), target);
            if (step > 0) gpu.load_state(cpu.state_tensors(), cpu.step_count());
            std::memcpy(t->grads_data(), g.data(), g.size() * sizeof(float));
            cpu.step(k_lrs[step], k_scales[step]);
            gpu.step(k_lrs[step], k_scales[step]);
            const std::string tag =
                std::string(kind_name(k)) + " bf16 step " + std::to_string(step);
            const std::vector<float> m = download(*master);
            expect_same(k, tag + " master", m, {t->params_data(), t->params_data() + F});
            // The frozen row's copy keeps its initial rounding; every other
            // element is its master's rounding.
            EXPECT_TRUE(
                bit_equal(tag + " copy", download(*copy), test::round_all<__nv_bfloat16>(m)));
            // Later steps start from the CPU's weights, so LAMB's last-bit
            // differences do not accumulate.
            be->to_device(master->get(), t->params_data(), size_t(F) * sizeof(float));
            be->synchronize();
        }
    }
}

// A one-rank "shard" holding every trainable element, packed without the
// flat buffer's gaps: state offsets differ from flat ones, the gradients
// come from the shard buffer, and gather_flat unpacks the state.
TEST_F(CudaDeviceOps, ShardOffsetsGiveTheWholeUpdate) {
    for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::lamb, OptimizerKind::sgd}) {
        auto t = make_table();
        const int64_t F = t->flat_numel();
        FlatOptimizer cpu(*t, config_for(k));
        auto master = upload<float>({t->params_data(), t->params_data() + F});
        auto be = make_cuda_backend(ctx());
        UpdateBuffers target;
        target.master = master->get();
        FlatOptimizer gpu(*be, *t, config_for(k), target);
        OptimizerShard sh;
        int64_t at = 0;
        for (int i = 0; i < t->size(); ++i) {
            const ParamRow& r = t->row(i);
            if (!r.trainable) continue;
            sh.segments.push_back({r.offset, at, r.numel(), r.decay, i});
            at += r.numel();
        }
        sh.numel = at;
        auto shard_grads = std::make_unique<test::DeviceBuffer<float>>(size_t(at));
        sh.grads = shard_grads->get();
        sh.all_reduce_sum = [](double*, int64_t) {};  // one rank
        const std::vector<ShardSegment> segs = sh.segments;
        Backend* b = be.get();
        sh.gather_flat = [segs, b](const float* shard, float* flat) {
            for (const ShardSegment& s : segs)
                b->copy(flat + s.flat, shard + s.shard, size_t(s.n) * sizeof(float));
        };
        gpu.set_shard(std::move(sh));
        EXPECT_TRUE(gpu.sharded());
        for (int step = 0; step < 3; ++step) {
            const std::vector<float> g = grads_for(*t, uint32_t(40 + step));
            std::vector<float> packed;
            for (const ShardSegment& s : segs)
                packed.insert(packed.end(), g.begin() + s.flat, g.begin() + s.flat + s.n);
            be->to_device(shard_grads->get(), packed.data(), packed.size() * sizeof(float));
            std::memcpy(t->grads_data(), g.data(), g.size() * sizeof(float));
            cpu.step(k_lrs[step], k_scales[step]);
            gpu.step(k_lrs[step], k_scales[step]);
            be->synchronize();
        }
        const std::string tag = std::string(kind_name(k)) + " shard";
        expect_same(k, tag + " params", download(*master),
                    {t->params_data(), t->params_data() + F});
        if (k != OptimizerKind::sgd) {
            EXPECT_TRUE(bit_equal(tag + " v", flat_of(gpu.state_tensors(), *t, "exp_avg_sq."),
                                  flat_of(cpu.state_tensors(), *t, "exp_avg_sq.")));
        }
    }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// The table's convert, sum_squares and scale entries against the CPU's:
// conversions round to nearest even as the CPU does (bit for bit), the
// per-range sums of squares agree to fp64 summation order, and scaling is
// one multiply per element (bit for bit).
TEST_F(CudaDeviceOps, ConvertSumSquaresAndScaleMatchTheCpu) {
    const std::unique_ptr<Backend> gpu = make_cuda_backend(ctx());
    Backend& cpu = cpu_backend();
    const int64_t n = 70001;  // more than one 64K chunk, odd
    const size_t un = static_cast<size_t>(n);
    const std::vector<float> x = test::random_vec(un, 17, -3.0f, 3.0f);
    auto dx = test::upload<float>(x);

    // f32 -> bf16 and f16 on the device, compared with the CPU's rounding
    // (x rounded to `t` by the CPU's table, widened back).
    const auto cpu_rounded = [&](DType t) {
        std::vector<uint16_t> narrow(un);
        cpu.ops().convert(cpu, narrow.data(), t, x.data(), DType::f32, n);
        std::vector<float> back(un);
        cpu.ops().convert(cpu, back.data(), DType::f32, narrow.data(), t, n);
        return back;
    };
    const std::vector<float> want_b = cpu_rounded(DType::bf16), want_h = cpu_rounded(DType::f16);
    auto d16 = test::upload<__nv_bfloat16>(std::vector<float>(un, 0.0f));
    gpu->ops().convert(*gpu, d16->get(), DType::bf16, dx->get(), DType::f32, n);
    EXPECT_TRUE(test::bit_equal("convert f32->bf16", test::download(*d16), want_b));
    auto dh = test::upload<__half>(std::vector<float>(un, 0.0f));
    gpu->ops().convert(*gpu, dh->get(), DType::f16, dx->get(), DType::f32, n);
    EXPECT_TRUE(test::bit_equal("convert f32->f16", test::download(*dh), want_h));
    // And back to f32 on the device.
    auto wide = test::upload<float>(std::vector<float>(un, 0.0f));
    gpu->ops().convert(*gpu, wide->get(), DType::f32, d16->get(), DType::bf16, n);
    EXPECT_TRUE(test::bit_equal("convert bf16->f32", test::download(*wide), want_b));

    // Sums of squares over ranges (a row, a piece past a chunk, an empty one).
    const std::vector<std::pair<int64_t, int64_t>> ranges{
        {0, 100}, {5, 69000}, {300, 300}, {69000, n}};
    std::vector<double> got(ranges.size()), want(ranges.size());
    gpu->ops().sum_squares(*gpu, dx->get(), DType::f32, ranges, got.data());
    cpu.ops().sum_squares(cpu, x.data(), DType::f32, ranges, want.data());
    for (size_t k = 0; k < ranges.size(); ++k)
        EXPECT_NEAR(got[k], want[k], 1e-12 * std::max(1.0, want[k])) << "range " << k;
    EXPECT_EQ(got[2], 0.0);
    // bf16 values: the same sums of the rounded values.
    gpu->ops().sum_squares(*gpu, d16->get(), DType::bf16, ranges, got.data());
    cpu.ops().sum_squares(cpu, want_b.data(), DType::f32, ranges, want.data());
    for (size_t k = 0; k < ranges.size(); ++k)
        EXPECT_NEAR(got[k], want[k], 1e-12 * std::max(1.0, want[k])) << "bf16 range " << k;

    // Scale in place.
    gpu->ops().scale(*gpu, dx->get(), DType::f32, n, 0.37f);
    std::vector<float> scaled = x;
    cpu.ops().scale(cpu, scaled.data(), DType::f32, n, 0.37f);
    EXPECT_TRUE(test::bit_equal("scale", test::download(*dx), scaled));
}

}  // namespace
}  // namespace loom

// The CUDA table's LAMB and SGD entries (ops/cuda/lamb_cuda.cu, sgd_cuda.cu)
// against the CPU optimizers (optim/lamb.h, optim/sgd.h) over a ParamTable with
// decaying and excluded rows, a row starting at zero (trust ratio 1), rows cut
// into several tiles, gradient scaling and a changing learning rate. The
// moments follow the CPU's rounding sequence, so they match bit for bit;
// parameters may differ by the last bit of float(lr * trust_ratio), whose fp64
// norms are summed in another order. A two-"rank" sharded LAMB (row sums added
// on the host, as ZeRO's all-reduce does) must give the unsharded result.
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "nn/param_table.h"
#include "ops/lamb_tiles.h"
#include "optim/lamb.h"
#include "optim/sgd.h"
#include "optimizer_test_table.h"

namespace loom::test {
namespace {

class CudaLamb : public CudaOpTest {};
class CudaSgd : public CudaOpTest {};

std::unique_ptr<ParamTable> make_table() { return make_optimizer_table(); }

std::vector<float> flat_params(const ParamTable& t) {
    return {t.params_data(), t.params_data() + t.flat_numel()};
}

std::vector<float> flat_state(const std::map<std::string, Tensor>& s, const ParamTable& t,
                              const char* kind) {
    std::vector<float> out(size_t(t.flat_numel()), 0.0f);
    for (const ParamRow& r : t.rows()) {
        auto it = s.find(kind + r.name);
        if (it == s.end()) continue;
        std::memcpy(out.data() + r.offset, it->second.raw(), size_t(r.numel()) * sizeof(float));
    }
    return out;
}

// Trainable rows as pieces, each cut at `cut` elements into two when longer:
// pieces of one row listed apart, as a ZeRO shard's chunks give them.
std::vector<LambPiece> pieces_of(const ParamTable& t, int64_t cut) {
    std::vector<LambPiece> first, second;
    for (int i = 0; i < t.size(); ++i) {
        const ParamRow& r = t.row(i);
        if (!r.trainable) continue;
        const int64_t a = std::min(cut, r.numel());
        first.push_back({r.offset, r.offset, a, int32_t(i), r.decay});
        if (a < r.numel())
            second.push_back({r.offset + a, r.offset + a, r.numel() - a, int32_t(i), r.decay});
    }
    first.insert(first.end(), second.begin(), second.end());
    return first;
}

struct DeviceTiles {
    std::unique_ptr<DeviceBuffer<LambTile>> tiles;
    std::unique_ptr<DeviceBuffer<int64_t>> row_begin;
    std::unique_ptr<DeviceBuffer<double>> tile_sums, row_sums;
    int64_t n_tiles = 0;
    int32_t rows = 0;
    LambPlanView view() const {
        return {tiles->get(), n_tiles, row_begin->get(), rows, tile_sums->get(), row_sums->get()};
    }
};
DeviceTiles upload_tiles(const LambTiles& p, int32_t rows) {
    DeviceTiles d;
    d.tiles = upload_raw(p.tiles);
    d.row_begin = upload_raw(p.row_begin);
    d.tile_sums = std::make_unique<DeviceBuffer<double>>(std::max<size_t>(2 * p.tiles.size(), 1));
    d.row_sums = std::make_unique<DeviceBuffer<double>>(size_t(2 * rows));
    d.n_tiles = int64_t(p.tiles.size());
    d.rows = rows;
    return d;
}

const double k_lrs[] = {1e-2, 5e-3, 2e-2, 1e-3};
const float k_scales[] = {1.0f, 0.5f, 1.0f, 0.25f};

TEST_F(CudaLamb, Fp32MatchesCpuOverSteps) {
    for (bool bias_correction : {true, false}) {
        for (int64_t tile : {int64_t(1000), k_lamb_tile_elems}) {
            auto cpu_t = make_table();
            LambParams hp;
            hp.weight_decay = 0.05;
            hp.bias_correction = bias_correction;
            Lamb cpu(*cpu_t, hp);
            const int64_t F = cpu_t->flat_numel();
            auto master = upload<float>(flat_params(*cpu_t));
            auto m = std::make_unique<DeviceBuffer<float>>(size_t(F));
            auto v = std::make_unique<DeviceBuffer<float>>(size_t(F));
            const LambTiles plan = lamb_tiles_plan(pieces_of(*cpu_t, 777), cpu_t->size(), tile);
            DeviceTiles d = upload_tiles(plan, cpu_t->size());
            for (int step = 1; step <= 4; ++step) {
                auto g = random_vec(size_t(F), uint32_t(100 + step));
                auto dg = upload<float>(g);
                // The CPU: scale the gradients first, as the trainer's clipping does.
                for (size_t i = 0; i < g.size(); ++i) g[i] *= k_scales[step - 1];
                std::memcpy(cpu_t->grads_data(), g.data(), g.size() * sizeof(float));
                cpu.step(k_lrs[step - 1]);
                const LambStep s = lamb_step_constants(hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                                                       bias_correction, step);
                const UpdateBuffers b{master->get(), dg->get(), DType::f32, m->get(), v->get()};
                backend().ops().lamb_moments(backend(), b, d.view(), s, k_scales[step - 1]);
                backend().ops().lamb_apply(backend(), b, d.view(), s, k_lrs[step - 1]);
                // The zero row has no norm before its first update, so no
                // trust ratio (r = 1); the update moves it off zero.
                if (step == 1) {
                    EXPECT_EQ(cpu.last_stats()[2].trust_ratio, 1.0) << "the zero row adapted";
                }
            }
            const std::string tag = std::string(bias_correction ? "bias-corrected" : "plain") +
                                    " tile " + std::to_string(tile);
            const auto state = cpu.state_tensors();
            EXPECT_TRUE(bit_equal(tag + " m", download(*m), flat_state(state, *cpu_t, "exp_avg.")));
            EXPECT_TRUE(
                bit_equal(tag + " v", download(*v), flat_state(state, *cpu_t, "exp_avg_sq.")));
            EXPECT_TRUE(
                all_close(tag + " params", download(*master), flat_params(*cpu_t), {1e-7, 1e-6}));
            // The per-row sums of the last step give the CPU's norms.
            ctx().synchronize();
            std::vector<double> sums(size_t(2 * cpu_t->size()));
            LOOM_CUDA_CHECK(cudaMemcpy(sums.data(), d.row_sums->get(), sums.size() * sizeof(double),
                                       cudaMemcpyDeviceToHost));
            for (int i = 0; i < cpu_t->size(); ++i) {
                if (!cpu_t->row(i).trainable) continue;
                const LambRowStats& st = cpu.last_stats()[size_t(i)];
                EXPECT_NEAR(std::sqrt(sums[size_t(2 * i)]), st.param_norm,
                            1e-12 * (1 + st.param_norm))
                    << tag << " row " << i;
                EXPECT_NEAR(std::sqrt(sums[size_t(2 * i + 1)]), st.update_norm,
                            1e-12 * (1 + st.update_norm))
                    << tag << " row " << i;
            }
            EXPECT_NE(cpu.last_stats()[2].trust_ratio, 1.0) << "the zero row adapts once nonzero";
        }
    }
}

// ZeRO's form: two shards of the pieces, each rank's row sums partial; their
// sum (the dp all-reduce) makes both apply the whole tensors' trust ratios.
TEST_F(CudaLamb, ShardedRowSumsGiveTheUnshardedUpdate) {
    auto cpu_t = make_table();
    LambParams hp;
    Lamb cpu(*cpu_t, hp);
    const int64_t F = cpu_t->flat_numel();
    auto master = upload<float>(flat_params(*cpu_t));
    auto m = std::make_unique<DeviceBuffer<float>>(size_t(F));
    auto v = std::make_unique<DeviceBuffer<float>>(size_t(F));
    // Pieces alternate between the two "ranks".
    const auto all = pieces_of(*cpu_t, 100);
    std::vector<LambPiece> half[2];
    for (size_t i = 0; i < all.size(); ++i) half[i % 2].push_back(all[i]);
    DeviceTiles d[2] = {upload_tiles(lamb_tiles_plan(half[0], cpu_t->size(), 512), cpu_t->size()),
                        upload_tiles(lamb_tiles_plan(half[1], cpu_t->size(), 512), cpu_t->size())};
    for (int step = 1; step <= 3; ++step) {
        auto g = random_vec(size_t(F), uint32_t(200 + step));
        auto dg = upload<float>(g);
        std::memcpy(cpu_t->grads_data(), g.data(), g.size() * sizeof(float));
        cpu.step(k_lrs[step - 1]);
        const LambStep s =
            lamb_step_constants(hp.beta1, hp.beta2, hp.eps, hp.weight_decay, true, step);
        std::vector<double> total(size_t(2 * cpu_t->size()), 0.0);
        const UpdateBuffers b{master->get(), dg->get(), DType::f32, m->get(), v->get()};
        for (auto& h : d) {
            backend().ops().lamb_moments(backend(), b, h.view(), s, 1.0f);
            ctx().synchronize();
            std::vector<double> part(total.size());
            LOOM_CUDA_CHECK(cudaMemcpy(part.data(), h.row_sums->get(), part.size() * sizeof(double),
                                       cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
        }
        for (auto& h : d) {
            LOOM_CUDA_CHECK(cudaMemcpy(h.row_sums->get(), total.data(),
                                       total.size() * sizeof(double), cudaMemcpyHostToDevice));
            backend().ops().lamb_apply(backend(), b, h.view(), s, k_lrs[step - 1]);
        }
    }
    const auto state = cpu.state_tensors();
    EXPECT_TRUE(bit_equal("m", download(*m), flat_state(state, *cpu_t, "exp_avg.")));
    EXPECT_TRUE(bit_equal("v", download(*v), flat_state(state, *cpu_t, "exp_avg_sq.")));
    EXPECT_TRUE(all_close("params", download(*master), flat_params(*cpu_t), {1e-7, 1e-6}));
}

// bf16 gradients and the bf16 parameter copy: the master follows the CPU fed
// the same (bf16-rounded) gradients; the copy is the rounded master.
TEST_F(CudaLamb, Bf16GradientsRefreshTheCopy) {
    auto cpu_t = make_table();
    LambParams hp;
    Lamb cpu(*cpu_t, hp);
    const int64_t F = cpu_t->flat_numel();
    auto master = upload<float>(flat_params(*cpu_t));
    auto copy = std::make_unique<DeviceBuffer<__nv_bfloat16>>(size_t(F));
    auto m = std::make_unique<DeviceBuffer<float>>(size_t(F));
    auto v = std::make_unique<DeviceBuffer<float>>(size_t(F));
    DeviceTiles d =
        upload_tiles(lamb_tiles_plan(pieces_of(*cpu_t, 1 << 20), cpu_t->size()), cpu_t->size());
    for (int step = 1; step <= 2; ++step) {
        auto g = round_all<__nv_bfloat16>(random_vec(size_t(F), uint32_t(300 + step)));
        auto dg = upload<__nv_bfloat16>(g);
        std::memcpy(cpu_t->grads_data(), g.data(), g.size() * sizeof(float));
        cpu.step(1e-2);
        const LambStep s =
            lamb_step_constants(hp.beta1, hp.beta2, hp.eps, hp.weight_decay, true, step);
        const UpdateBuffers b{master->get(), dg->get(),   DType::bf16, m->get(),
                              v->get(),      copy->get(), DType::bf16};
        backend().ops().lamb_moments(backend(), b, d.view(), s, 1.0f);
        backend().ops().lamb_apply(backend(), b, d.view(), s, 1e-2);
    }
    const auto got = download(*master);
    EXPECT_TRUE(all_close("master", got, flat_params(*cpu_t), {1e-7, 1e-6}));
    // The frozen row is outside every tile: its copy stays as uploaded (zero).
    std::vector<float> want_copy = round_all<__nv_bfloat16>(got);
    const ParamRow& fr = cpu_t->row(cpu_t->index("frozen.weight"));
    for (int64_t i = 0; i < fr.numel(); ++i) want_copy[size_t(fr.offset + i)] = 0.0f;
    for (int64_t i = 0; i < F; ++i) {
        bool in_row = false;
        for (const ParamRow& r : cpu_t->rows())
            in_row = in_row || (i >= r.offset && i < r.offset + r.numel());
        if (!in_row) want_copy[size_t(i)] = 0.0f;  // alignment gaps
    }
    EXPECT_TRUE(bit_equal("copy", download(*copy), want_copy));
}

TEST_F(CudaSgd, MatchesCpuPerRowDecay) {
    auto cpu_t = make_table();
    const double wd = 0.1;
    Sgd cpu(*cpu_t, wd);
    const int64_t F = cpu_t->flat_numel();
    auto master = upload<float>(flat_params(*cpu_t));
    for (int step = 1; step <= 3; ++step) {
        auto g = random_vec(size_t(F), uint32_t(400 + step));
        auto dg = upload<float>(g);
        for (float& x : g) x *= k_scales[step];
        std::memcpy(cpu_t->grads_data(), g.data(), g.size() * sizeof(float));
        cpu.step(k_lrs[step]);
        std::vector<UpdateRun> runs;
        for (const ParamRow& r : cpu_t->rows())
            if (r.trainable) runs.push_back({r.offset, r.offset, r.numel(), r.decay});
        const UpdateBuffers b{master->get(), dg->get()};
        backend().ops().sgd(backend(), b, runs, k_lrs[step], wd, k_scales[step]);
    }
    EXPECT_TRUE(bit_equal("params", download(*master), flat_params(*cpu_t)));
}

TEST_F(CudaSgd, HalfGradientsRefreshTheCopy) {
    const int64_t n = 5003;
    auto p = random_vec(size_t(n), 11);
    auto g = round_all<__half>(random_vec(size_t(n), 12));
    auto dp = upload<float>(p);
    auto dg = upload<__half>(g);
    auto copy = std::make_unique<DeviceBuffer<__half>>(size_t(n));
    const UpdateBuffers b{dp->get(), dg->get(),   DType::f16, nullptr,
                          nullptr,   copy->get(), DType::f16};
    const UpdateRun run{0, 0, n, true};
    backend().ops().sgd(backend(), b, std::span(&run, 1), 0.1, 0.01, 0.5f);
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[size_t(i)] * 0.5f;
        p[size_t(i)] -= 0.1f * (gi + 0.01f * p[size_t(i)]);
    }
    const auto got = download(*dp);
    EXPECT_TRUE(bit_equal("master", got, p));
    EXPECT_TRUE(bit_equal("copy", download(*copy), round_all<__half>(got)));
}

}  // namespace
}  // namespace loom::test

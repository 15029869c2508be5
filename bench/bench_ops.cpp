// CPU op throughput at BERT-base training shapes (batch 8 x seq 128 = 1024 tokens,
// C = 768, I = 3072, 12 heads of 64). Not a test: run by hand, e.g.
//   unset OPENBLAS_CORETYPE; OMP_NUM_THREADS=2 build/<dir>/bench/bench_ops
//     --benchmark_filter=gemm --benchmark_repetitions=3
// NOTE: on a shared machine with other jobs running, wall times measure the
// scheduler, not the kernels; use OMP_WAIT_POLICY=passive (spinning OpenMP
// threads steal the time their team-mates need) and read the CPU column.
// GEMM names read <route>/<M>/<N>/<K>/<trans_a><trans_b>: a linear layer's
// forward is NT (x @ W^T), its dinp NN (dout @ W), its dweight TN (dout^T @ x).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/runtime.h"
#include "ops/activation.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/gemm.h"
#include "ops/layer_norm.h"
#include "ops/softmax_xent.h"

using namespace loom;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// range(0): 0 = dnnl_sgemm, 1 = dnnl_matmul, 2 = gemm_bf16 (oneDNN's bf16 matmul,
// or the fp32-widened route on a CPU without bf16 kernels), 3 = the widened
// route everywhere; then M, N, K, transposes.
void bm_gemm(benchmark::State& state) {
    const int route = int(state.range(0));
    const int64_t M = state.range(1), N = state.range(2), K = state.range(3);
    const bool ta = state.range(4) != 0, tb = state.range(5) != 0;
    const std::vector<float> A = random_floats(size_t(M * K), 1), B = random_floats(size_t(K * N), 2);
    std::vector<uint16_t> Ab(A.size()), Bb(B.size());
    convert_f32_to_bf16(Ab.data(), A.data(), int64_t(A.size()));
    convert_f32_to_bf16(Bb.data(), B.data(), int64_t(B.size()));
    std::vector<float> C(size_t(M * N), 0.0f);
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    // dweight-shaped calls (TN) accumulate, as matmul_backward does.
    const float beta = ta && !tb ? 1.0f : 0.0f;
    for (auto _ : state) {
        if (route >= 2)
            gemm_bf16_with(route == 2 ? gemm_bf16_route() : Bf16Impl::widen_f32, ta, tb, M, N, K,
                           1.0f, Ab.data(), lda, Bb.data(), ldb, beta, C.data(), N);
        else
            gemm_f32_with(route == 0 ? GemmImpl::dnnl_sgemm : GemmImpl::dnnl_matmul, ta, tb, M, N,
                          K, 1.0f, A.data(), lda, B.data(), ldb, beta, C.data(), N);
        benchmark::DoNotOptimize(C.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(M) * double(N) * double(K),
                                                   benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
    const bool widened = route == 3 || (route == 2 && gemm_bf16_route() == Bf16Impl::widen_f32);
    state.SetLabel(route == 0   ? "f32 sgemm"
                   : route == 1 ? "f32 matmul"
                   : widened    ? "bf16 widened to f32"
                                : "bf16 matmul");
}

// The 9 GEMMs of a BERT-base layer's linears at 1024 tokens (fwd NT, dinp NN,
// dweight TN) for the 768x768, 768->3072 and 3072->768 weights.
void gemm_args(benchmark::internal::Benchmark* b) {
    const int64_t tokens = 1024;
    const int64_t shapes[][2] = {{768, 768}, {768, 3072}, {3072, 768}};  // (C, OC)
    for (int route = 0; route < 4; ++route)
        for (const auto& s : shapes) {
            const int64_t C = s[0], OC = s[1];
            b->Args({route, tokens, OC, C, 0, 1});  // forward   (N, OC) = x (N, C) @ W^T
            b->Args({route, tokens, C, OC, 0, 0});  // dinp      (N, C) = dout (N, OC) @ W
            b->Args({route, OC, C, tokens, 1, 0});  // dweight   (OC, C) += dout^T @ x
        }
}
BENCHMARK(bm_gemm)->Apply(gemm_args)->Unit(benchmark::kMillisecond)->UseRealTime();

struct AttnBuffers {
    AttnShape s{8, 128, 12, 64};
    int64_t C = 768, ld = 3 * 768;
    std::vector<float> qkv, out, att, dout, dqkv, scratch;
    std::vector<int64_t> pad;
    DropoutSpec drop;
    AttnBuffers() {
        qkv = random_floats(size_t(s.B * s.T * ld), 3);
        out.resize(size_t(s.B * s.T * C));
        att.resize(size_t(s.B * s.NH * s.T * s.T));
        dout = random_floats(out.size(), 4);
        dqkv.resize(qkv.size());
        scratch.resize(att.size());
        pad.assign(size_t(s.B * s.T), 1);
        for (int64_t t = 100; t < s.T; ++t) pad[size_t(s.T + t)] = 0;  // one padded sample
        drop.p = 0.1f;
        drop.stream = PhiloxStream(1, 2, 3);
    }
    double flops() const { return 4.0 * double(s.B * s.NH * s.T * s.T * s.HS); }
};

// range(0): 0 = fp32 GEMMs, 1 = bf16 GEMMs (attention_*_bf16, as with bf16 compute).
void bm_attention_forward(benchmark::State& state) {
    AttnBuffers a;
    const AttnMask mask{a.pad.data(), false};
    const auto kernel = state.range(0) == 1 ? attention_forward_bf16 : attention_forward<float>;
    for (auto _ : state) {
        kernel(a.out.data(), a.att.data(), a.qkv.data(), a.qkv.data() + a.C, a.qkv.data() + 2 * a.C,
               a.ld, a.s, mask, a.drop);
        benchmark::DoNotOptimize(a.out.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(a.flops(), benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
    state.SetLabel(state.range(0) == 1 ? "bf16" : "f32");
}
BENCHMARK(bm_attention_forward)
    ->ArgName("bf16")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void bm_attention_backward(benchmark::State& state) {
    AttnBuffers a;
    const AttnMask mask{a.pad.data(), false};
    const bool bf16 = state.range(0) == 1;
    const auto forward = bf16 ? attention_forward_bf16 : attention_forward<float>;
    const auto backward = bf16 ? attention_backward_bf16 : attention_backward<float>;
    forward(a.out.data(), a.att.data(), a.qkv.data(), a.qkv.data() + a.C, a.qkv.data() + 2 * a.C,
            a.ld, a.s, mask, a.drop);
    for (auto _ : state) {
        backward(a.dqkv.data(), a.dqkv.data() + a.C, a.dqkv.data() + 2 * a.C, a.scratch.data(),
                 a.dout.data(), a.att.data(), a.qkv.data(), a.qkv.data() + a.C,
                 a.qkv.data() + 2 * a.C, a.ld, a.s, mask, a.drop);
        benchmark::DoNotOptimize(a.dqkv.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * a.flops(), benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
    state.SetLabel(bf16 ? "bf16" : "f32");
}
BENCHMARK(bm_attention_backward)
    ->ArgName("bf16")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Memory-bound ops report bytes moved (each input read once, each output written once).
void set_bytes(benchmark::State& state, double bytes) {
    state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}

void bm_layer_norm_forward(benchmark::State& state) {
    const int64_t N = 1024, C = 768;
    const std::vector<float> x = random_floats(size_t(N * C), 5), w = random_floats(size_t(C), 6),
                             b = random_floats(size_t(C), 7);
    std::vector<float> out(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    for (auto _ : state) {
        layer_norm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                  b.data(), N, C, 1e-12);
        benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, 2.0 * 4.0 * double(N * C));
}
BENCHMARK(bm_layer_norm_forward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void bm_layer_norm_backward(benchmark::State& state) {
    const int64_t N = 1024, C = 768;
    const std::vector<float> x = random_floats(size_t(N * C), 5), w = random_floats(size_t(C), 6),
                             b = random_floats(size_t(C), 7), dout = random_floats(size_t(N * C), 8);
    std::vector<float> out(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dx(x.size()),
        dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
    layer_norm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                              N, C, 1e-12);
    for (auto _ : state) {
        layer_norm_backward<float>(dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                   w.data(), mean.data(), rstd.data(), N, C, true);
        benchmark::DoNotOptimize(dx.data());
    }
    set_bytes(state, 4.0 * 4.0 * double(N * C));  // read x, dout, dx; write dx
}
BENCHMARK(bm_layer_norm_backward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// range(0): Activation as int; range(1): 0 forward, 1 backward. (1024 tokens, I = 3072)
void bm_activation(benchmark::State& state) {
    const Activation act = Activation(state.range(0));
    const bool backward = state.range(1) != 0;
    const int64_t n = 1024 * 3072;
    const std::vector<float> x = random_floats(size_t(n), 9, 2.0f), dout = random_floats(size_t(n), 10);
    std::vector<float> out(static_cast<size_t>(n));
    for (auto _ : state) {
        if (backward)
            activation_backward<float>(out.data(), x.data(), dout.data(), n, act);
        else
            activation_forward<float>(out.data(), x.data(), n, act);
        benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, (backward ? 3.0 : 2.0) * 4.0 * double(n));
    state.SetLabel(std::string(activation_name(act)) + (backward ? " backward" : " forward"));
}
BENCHMARK(bm_activation)
    ->ArgsProduct({{int(Activation::gelu_erf), int(Activation::gelu_tanh)}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void bm_dropout_forward(benchmark::State& state) {
    const int64_t B = 8, per_sample = 128 * 768;
    std::vector<float> x = random_floats(size_t(B * per_sample), 11), out(x.size());
    DropoutSpec d;
    d.p = 0.1f;
    d.stream = PhiloxStream(4, 5, 6);
    for (auto _ : state) {
        dropout_forward<float>(out.data(), x.data(), B, per_sample, d);
        benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, 2.0 * 4.0 * double(B * per_sample));
}
BENCHMARK(bm_dropout_forward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// MLM head: 1024 rows over BERT's 30522-word vocabulary, forward then backward.
void bm_softmax_xent(benchmark::State& state) {
    const int64_t N = 1024, V = 30522;
    const std::vector<float> logits = random_floats(size_t(N * V), 12, 3.0f);
    std::vector<int64_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = n % 7 == 0 ? (n * 31) % V : k_ignore_index;
    std::vector<float> dlogits(logits.size());
    for (auto _ : state) {
        const XentSum s = softmax_xent_forward<float>(nullptr, logits.data(), targets.data(), N, V);
        softmax_xent_backward<float>(dlogits.data(), logits.data(), targets.data(), N, V,
                                     1.0 / double(s.count));
        benchmark::DoNotOptimize(dlogits.data());
    }
    set_bytes(state, 3.0 * 4.0 * double(N * V));
}
BENCHMARK(bm_softmax_xent)->Unit(benchmark::kMillisecond)->UseRealTime();

// AdamW over 16M parameters (BERT-base has 110M; time scales linearly).
void bm_adamw(benchmark::State& state) {
    const int64_t n = 16 << 20;
    std::vector<float> p = random_floats(size_t(n), 13), g = random_floats(size_t(n), 14),
                       m(size_t(n), 0.0f), v(size_t(n), 0.0f);
    int64_t step = 0;
    for (auto _ : state) {
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, AdamWParams{}, ++step);
        benchmark::DoNotOptimize(p.data());
    }
    set_bytes(state, 7.0 * 4.0 * double(n));  // read p, g, m, v; write p, m, v
}
BENCHMARK(bm_adamw)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    runtime_init();
    runtime_pin_threads();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

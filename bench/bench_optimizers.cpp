// The optimizers' step on the host (optim/adamw.h, lamb.h, sgd.h) over a
// ParamTable shaped like two BERT-base blocks and a 2.6k-row embedding table
// (16.5M parameters, 50 rows alternating weight decay): what one step of
// each costs, and LAMB's two passes against AdamW's one.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "nn/param_table.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/sgd.h"

namespace loom {
namespace {

std::unique_ptr<ParamTable> bert_like_table() {
    auto t = std::make_unique<ParamTable>();
    auto add = [&](const std::string& name, Shape s, bool decay) {
        ParamRow r;
        r.name = name;
        r.shape = s;
        r.decay = decay;
        t->add(r);
    };
    add("embeddings.word_embeddings.weight", Shape{2600, 768}, true);
    for (int b = 0; b < 2; ++b) {
        const std::string p = "encoder.layer." + std::to_string(b) + ".";
        for (const char* n : {"query", "key", "value", "output"}) {
            add(p + n + ".weight", Shape{768, 768}, true);
            add(p + n + ".bias", Shape{768}, false);
        }
        add(p + "intermediate.weight", Shape{3072, 768}, true);
        add(p + "intermediate.bias", Shape{3072}, false);
        add(p + "ffn_output.weight", Shape{768, 3072}, true);
        add(p + "ffn_output.bias", Shape{768}, false);
        for (const char* n : {"attention_norm", "output_norm"}) {
            add(p + n + ".weight", Shape{768}, false);
            add(p + n + ".bias", Shape{768}, false);
        }
    }
    t->allocate();
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    for (int64_t i = 0; i < t->flat_numel(); ++i) {
        t->params_data()[i] = d(gen);
        t->grads_data()[i] = d(gen) * 0.01f;
    }
    return t;
}

template <typename Make>
void run(benchmark::State& state, Make make) {
    auto t = bert_like_table();
    auto opt = make(*t);
    for (auto _ : state) {
        opt->step(1e-4);
        benchmark::DoNotOptimize(t->params_data());
    }
    state.counters["params_M"] = double(t->num_parameters()) / 1e6;
}

void bm_adamw(benchmark::State& s) {
    run(s, [](ParamTable& t) { return std::make_unique<AdamW>(t, AdamWParams{}); });
}
void bm_lamb(benchmark::State& s) {
    run(s, [](ParamTable& t) { return std::make_unique<Lamb>(t, LambParams{}); });
}
void bm_sgd(benchmark::State& s) {
    run(s, [](ParamTable& t) { return std::make_unique<Sgd>(t, 0.01); });
}
BENCHMARK(bm_adamw)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_lamb)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_sgd)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
    loom::runtime_init();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    return 0;
}

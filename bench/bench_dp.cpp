// Data-parallel training step of a BERT-base-shaped masked LM under mpirun,
// one rank per core: how much of the gradient all-reduce hides behind
// backward, and what the bucketed reduction costs against one plain
// MPI_Allreduce of the same bytes. bench/dp_scaling.sh runs it at dp 1 and 2
// and computes the scaling efficiency.
//
//   mpirun -np 2 bench_dp [--batch 4] [--seq 128] [--layers 12] [--steps 4]
//                         [--warmup 1] [--zero 0|1|2] [--bucket-mb 25]
//                         [--overlap 0|1] [--sparse 0|1] [--repeats 3]
//
// Weak scaling: each rank runs --batch samples per step, so dp 2 does twice
// the work of dp 1 in (ideally) the same time. Per phase, rank 0 prints the
// maximum over ranks of the per-step median. Then, with backward idle, it
// times the same gradient buffer reduced (a) by GradSync's buckets
// back-to-back and (b) by one MPI_Allreduce(MPI_IN_PLACE) over the whole
// buffer. hidden_share = 1 - finalize_wait / bucketed_allreduce: the part of
// the reduction that ran while backward was still computing. One JSON line.
//
// --sparse 0 reduces the word table densely (DpOptions::sparse_embedding_grad
// off): its 94 MB are then final only when backward returns.
//
// NOTE: Open MPI advances nonblocking collectives only inside MPI calls;
// GradSync tests its buckets at each grad-ready report (once per block), so
// overlap is limited by how much each call can progress.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#ifdef LOOM_HAVE_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include "comm/comm_mpi.h"
#include "core/runtime.h"
#include "models/model.h"
#include "models/model_config.h"
#include "parallel/dp_step.h"

using namespace loom;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Maximum over the ranks of `x` (the slowest rank sets the step time).
double max_over(Communicator& c, double x) {
    c.all_reduce(&x, 1, DType::f64, ReduceOp::max)->wait();
    return x;
}

}  // namespace

int main(int argc, char** argv) {
#ifndef LOOM_HAVE_MPI
    std::fprintf(stderr, "bench_dp needs a build with LOOM_MPI=ON\n");
    return 2;
#else
    runtime_init();
    MpiSession mpi;
    int64_t B = 4, T = 128, L = 12, steps = 4, warmup = 1, zero = 0, overlap = 1, sparse = 1,
            repeats = 3;
    double bucket_mb = 25;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--batch")
            B = std::stoll(v);
        else if (k == "--seq")
            T = std::stoll(v);
        else if (k == "--layers")
            L = std::stoll(v);
        else if (k == "--steps")
            steps = std::stoll(v);
        else if (k == "--warmup")
            warmup = std::stoll(v);
        else if (k == "--zero")
            zero = std::stoll(v);
        else if (k == "--bucket-mb")
            bucket_mb = std::stod(v);
        else if (k == "--overlap")
            overlap = std::stoll(v);
        else if (k == "--sparse")
            sparse = std::stoll(v);
        else if (k == "--repeats")
            repeats = std::stoll(v);
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    auto world = comm_mpi_world();
    const int rank = world->rank(), dp = world->size();

    const std::string json = fmt::format(
        R"({{"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 30522,
            "hidden_size": 768, "num_hidden_layers": {}, "num_attention_heads": 12,
            "intermediate_size": 3072, "max_position_embeddings": 512,
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}})",
        L);
    auto model = build_model(parse_hf_config(json, "bench"));
    model->init(0);
    model->set_logits_scope(LogitsScope::labelled_positions);
    AdamWParams hp;
    hp.lr = 1e-4;
    DpOptions o;
    o.zero = ZeroStage(zero);
    o.bucket_size_mb = bucket_mb;
    o.overlap = overlap != 0;
    o.sparse_embedding_grad = sparse != 0;
    DataParallel ddp(*model, *world, hp, DecayPolicy::table, o);
    if (rank == 0) std::fprintf(stderr, "bench_dp: %s\n", ddp.memory_plan().describe().c_str());

    // Random tokens, 15% labelled; a different batch per rank.
    std::vector<int64_t> ids(size_t(B * T)), types(size_t(B * T), 0), mask(size_t(B * T), 1),
        labels(size_t(B * T), -100);
    uint64_t s = 12345 + uint64_t(rank);
    int64_t local = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = int64_t((s >> 33) % 30000) + 100;
        if ((s >> 20) % 100 < 15) {
            labels[i] = ids[i];
            ++local;
        }
    }
    ModelInputs in;
    in.B = B;
    in.T = T;
    in.input_ids = ids.data();
    in.token_type_ids = types.data();
    in.attention_mask = mask.data();
    in.labels = labels.data();

    std::vector<double> t_step, t_fwd, t_bwd, t_wait, t_opt;
    int64_t by_hook = 0;
    for (int64_t step = 0; step < warmup + steps; ++step) {
        world->barrier()->wait();
        const auto t0 = Clock::now();
        ddp.begin_step();
        const double total = ddp.sum(double(local));
        auto t = Clock::now();
        const LossSum l = model->forward(in, DropoutPlan{});
        const double fwd = ms_since(t);
        t = Clock::now();
        ddp.begin_micro_batch(true);
        model->backward(1.0 / total);
        ddp.end_micro_batch();
        const double bwd = ms_since(t);
        t = Clock::now();
        ddp.finalize_grads();
        const double wait = ms_since(t);
        ddp.sum(l.sum);
        t = Clock::now();
        ddp.clip_grad_norm(1.0);
        ddp.step(hp.lr);
        const double opt = ms_since(t);
        const double all = ms_since(t0);
        if (step < warmup) continue;
        t_step.push_back(all);
        t_fwd.push_back(fwd);
        t_bwd.push_back(bwd);
        t_wait.push_back(wait);
        t_opt.push_back(opt);
        by_hook = ddp.stats().launched_by_hook;
    }

    // The same bytes reduced with backward idle: GradSync's buckets (DDP mode,
    // a separate buffer so the model is untouched), then one MPI_Allreduce.
    const int64_t n = model->params().flat_numel();
    std::vector<float> buf(size_t(n), 1.0f);
    GradSyncOptions go;
    go.bucket_elems = bucket_elems_from_mb(bucket_mb);
    GradSync sync(buf.data(), n, *world, go);
    std::vector<double> t_buckets, t_plain;
    for (int64_t r = 0; r < repeats; ++r) {
        world->barrier()->wait();
        auto t = Clock::now();
        sync.begin_step();
        sync.finalize();  // launches every bucket, then waits
        t_buckets.push_back(ms_since(t));
        world->barrier()->wait();
        t = Clock::now();
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t_plain.push_back(ms_since(t));
    }

    const double step_ms = max_over(*world, median(t_step));
    const double fwd_ms = max_over(*world, median(t_fwd));
    const double bwd_ms = max_over(*world, median(t_bwd));
    const double wait_ms = max_over(*world, median(t_wait));
    const double opt_ms = max_over(*world, median(t_opt));
    const double bucket_ms = max_over(*world, median(t_buckets));
    const double plain_ms = max_over(*world, median(t_plain));
    const double gbytes = double(n) * 4.0 / 1e9;
    const double hidden =
        dp > 1 && bucket_ms > 0 ? std::clamp(1.0 - wait_ms / bucket_ms, 0.0, 1.0) : 0.0;
    if (rank == 0)
        std::printf(
            "{\"dp\": %d, \"zero\": %lld, \"overlap\": %lld, \"sparse_rows\": %d, "
            "\"batch_per_rank\": %lld, \"seq\": %lld, "
            "\"layers\": %lld, \"grad_mb\": %.1f, \"buckets\": %zu, \"launched_by_hook\": %lld, "
            "\"step_ms\": %.1f, \"forward_ms\": %.1f, \"backward_ms\": %.1f, "
            "\"finalize_wait_ms\": %.1f, \"optimizer_ms\": %.1f, \"samples_per_s\": %.2f, "
            "\"bucketed_allreduce_ms\": %.1f, \"plain_allreduce_ms\": %.1f, "
            "\"bucketed_algbw_GBps\": %.2f, \"plain_algbw_GBps\": %.2f, \"hidden_share\": %.2f}\n",
            dp, static_cast<long long>(zero), static_cast<long long>(overlap),
            int(ddp.sparse_embedding_grad()), static_cast<long long>(B), static_cast<long long>(T),
            static_cast<long long>(L), gbytes * 1e3 / 1.048576, sync.buckets().size(),
            static_cast<long long>(by_hook), step_ms, fwd_ms, bwd_ms, wait_ms, opt_ms,
            double(B * dp) / (step_ms / 1e3), bucket_ms, plain_ms, gbytes / (bucket_ms / 1e3),
            gbytes / (plain_ms / 1e3), hidden);
    return 0;
#endif
}

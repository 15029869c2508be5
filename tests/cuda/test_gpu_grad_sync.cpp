// The NCCL gradient reduction (parallel/cuda/gpu_grad_sync.h) on a stand-in
// executor: its "backward" writes each layer's gradient slice with a copy
// enqueued on its compute stream, then reports the slice to the hook, as the
// CUDA executor does. One thread per visible GPU (CommLocal bootstraps NCCL),
// so one GPU runs a group of one and two or more check real sums. Values are
// small multiples of 1/4, so the sums are exact in bf16 as in f32. What is
// checked: the sum lands in every bucket (the NCCL stream waited for the
// copies enqueued before each hook call), the compute stream sees it after
// finalize() without a host wait, accumulation reduces only on the last
// micro-batch, and the launch counts with and without overlap. Skips without
// a GPU; the bucket order logic is tested on the CPU
// (tests/parallel/test_grad_bucket_queue.cpp).
// ZeRO-1/2 (zero_stage): the stand-in receives its shard (set_shard); each
// rank's fp32 shard must hold the summed gradients of exactly its chunks of
// the CPU's bucket plan (grad_sync.h), ZeRO-2 summing both micro-batches
// and ZeRO-1 only the last; the shard's collectives sum partial norms and
// all-gather every rank's chunks (the padded bottom bucket included).
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "cuda_test_util.h"
#include "models/cuda/cuda_model.h"

#if defined(LOOM_HAVE_NCCL)
#include "comm/comm_local.h"
#include "parallel/cuda/gpu_grad_sync.h"
#include "parallel/grad_bucket_queue.h"
#include "parallel/grad_sync.h"
#endif

namespace loom::test {
namespace {

#if defined(LOOM_HAVE_NCCL)

// Only what the synchroniser touches is real; the rest is never called.
template <typename T>
class StandInModel final : public CudaModel {
  public:
    StandInModel(int device, int64_t n, int64_t layer) : n_(n), layer_(layer) {
        LOOM_CUDA_CHECK(cudaSetDevice(device));  // before any allocation
        grads_ = std::make_unique<DeviceBuffer<T>>(size_t(n));
        LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        LOOM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staged_), size_t(n) * sizeof(T)));
    }
    ~StandInModel() override {
        (void)cudaStreamSynchronize(stream_);
        (void)cudaFreeHost(staged_);
        (void)cudaStreamDestroy(stream_);
    }

    // Next backward's gradient, all of it (the stand-in overwrites instead of
    // accumulating: the tests look at which values got reduced).
    void set_next_grads(const std::vector<float>& g) {
        LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // staged_ is read by earlier copies
        for (size_t i = 0; i < g.size(); ++i) staged_[i] = Host<T>::to(g[i]);
    }
    // Backward: the layers top down, each copied then reported; the bottom
    // (the embeddings) reported last.
    void backward(double) override {
        int64_t end = n_;
        for (; end - layer_ > 0; end -= layer_) write_and_report(end - layer_, end);
        write_and_report(0, end);
    }
    std::vector<float> grads_via_compute_stream() {
        std::vector<T> h(static_cast<size_t>(n_));
        LOOM_CUDA_CHECK(cudaMemcpyAsync(h.data(), grads_->get(), h.size() * sizeof(T),
                                        cudaMemcpyDeviceToHost, stream_));
        LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
        std::vector<float> out(h.size());
        for (size_t i = 0; i < h.size(); ++i) out[i] = Host<T>::from(h[i]);
        return out;
    }

    // ZeRO: what the sync handed over (an empty shard detaches).
    void set_shard(CudaShard shard) override { shard_ = std::move(shard); }
    CudaShard& shard() { return shard_; }
    template <typename U>
    std::vector<U> download_via_compute_stream(const U* d, int64_t n) {
        std::vector<U> h(static_cast<size_t>(n));
        LOOM_CUDA_CHECK(
            cudaMemcpyAsync(h.data(), d, h.size() * sizeof(U), cudaMemcpyDeviceToHost, stream_));
        LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return h;
    }
    template <typename U>
    void upload_via_compute_stream(U* d, const std::vector<U>& h) {
        LOOM_CUDA_CHECK(
            cudaMemcpyAsync(d, h.data(), h.size() * sizeof(U), cudaMemcpyHostToDevice, stream_));
        LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    void set_logits_scope(LogitsScope) override {}
    void set_grad_ready_hook(GradReadyHook hook) override { hook_ = std::move(hook); }
    void* grads_device() override { return grads_->get(); }
    DType grad_dtype() const override {
        return std::is_same_v<T, float> ? DType::f32 : DType::bf16;
    }
    int64_t flat_numel() const override { return n_; }
    void* compute_stream() override { return stream_; }
    void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

    LossSum forward(const ModelInputs&, const DropoutPlan&) override { unused(); }
    double grad_norm_sq() override { unused(); }
    void step(double, double) override { unused(); }
    void zero_grad() override { unused(); }
    int64_t step_count() const override { unused(); }
    void upload_params() override { unused(); }
    void download_params() override { unused(); }
    void download_grads() override { unused(); }
    std::map<std::string, Tensor> optimizer_state() override { unused(); }
    void load_optimizer_state(const std::map<std::string, Tensor>&, int64_t) override { unused(); }
    std::map<std::string, Tensor> outputs() override { unused(); }
    int64_t allocated_bytes() const override { unused(); }
    int64_t peak_device_bytes() override { unused(); }
    std::string device_name() const override { return "stand-in"; }

  private:
    [[noreturn]] static void unused() { LOOM_FAIL("the stand-in model does not do that"); }
    void write_and_report(int64_t begin, int64_t end) {
        if (begin >= end) return;
        LOOM_CUDA_CHECK(cudaMemcpyAsync(grads_->get() + begin, staged_ + begin,
                                        size_t(end - begin) * sizeof(T), cudaMemcpyHostToDevice,
                                        stream_));
        if (hook_) hook_(begin, end);
    }

    int64_t n_, layer_;
    std::unique_ptr<DeviceBuffer<T>> grads_;
    T* staged_ = nullptr;  // pinned: the copies stay asynchronous
    cudaStream_t stream_ = nullptr;
    GradReadyHook hook_;
    CudaShard shard_;
};

CommOptions quick_options() {
    CommOptions o;
    o.timeout_s = 60.0;
    o.on_timeout = TimeoutAction::throw_error;
    o.spin_s = 0.01;
    return o;
}

// Rank r's gradient for micro-batch `mb`: exact in bf16, different per rank.
std::vector<float> grads_of(int r, int mb, int64_t n) {
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = 0.25f * float((r + 1) * (i % 7 + 1 + mb));
    return g;
}

std::vector<float> summed(int ranks, int mb, int64_t n) {
    std::vector<float> s(static_cast<size_t>(n), 0.0f);
    for (int q = 0; q < ranks; ++q) {
        const auto g = grads_of(q, mb, n);
        for (size_t i = 0; i < s.size(); ++i) s[i] += g[i];
    }
    return s;
}

template <typename T>
void run_steps(bool overlap) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
    const int n_ranks = cuda_device_count();
    // 10,000 elements in layers of 1,500; buckets of 1,024 (f32) or 2,048
    // (bf16) elements: buckets end inside layers and layers inside buckets.
    const int64_t n = 10000, layer = 1500;
    comm_local_run(
        n_ranks,
        [&](Communicator& cpu) {
            const int r = cpu.rank();
            StandInModel<T> model(r, n, layer);
            GpuGradSyncOptions o;
            o.bucket_size_mb = 4096.0 / double(1 << 20);
            o.overlap = overlap;
            auto sync = make_nccl_grad_sync(cpu, model, r, o);
            EXPECT_EQ(sync->dp_rank(), r);
            EXPECT_EQ(sync->dp_size(), n_ranks);
            const int64_t per_bucket = 4096 / int64_t(sizeof(T));
            const int64_t buckets = (n + per_bucket - 1) / per_bucket;
            for (int step = 0; step < 2; ++step) {
                // Accumulation 2: micro-batch 0 must not be reduced.
                model.set_next_grads(grads_of(r, 0, n));
                sync->begin_micro_batch(false);
                model.backward(1.0);
                sync->end_micro_batch();
                if (step == 0) {
                    EXPECT_EQ(sync->stats().launched_by_hook + sync->stats().launched_at_end, 0);
                }
                model.set_next_grads(grads_of(r, 1, n));
                sync->begin_micro_batch(true);
                model.backward(1.0);
                sync->end_micro_batch();
                sync->finalize();
                // The compute stream sees the sums with no host wait in between.
                EXPECT_TRUE(bit_equal("summed gradients", model.grads_via_compute_stream(),
                                      summed(n_ranks, 1, n)));
                sync->wait();
                const GpuGradSyncStats& s = sync->stats();
                EXPECT_EQ(s.launched_by_hook + s.launched_at_end, buckets);
                // The embeddings' report comes from inside backward too, so
                // with overlap every bucket starts there.
                EXPECT_EQ(overlap ? s.launched_by_hook : s.launched_at_end, buckets);
            }
            EXPECT_NE(sync->describe().find("NCCL"), std::string::npos);
        },
        quick_options());
}

TEST(GpuGradSync, SumsF32BucketsLaunchedFromTheHook) {
    run_steps<float>(true);
}
TEST(GpuGradSync, SumsBf16BucketsLaunchedFromTheHook) {
    run_steps<__nv_bfloat16>(true);
}
TEST(GpuGradSync, SumsAfterBackwardWithoutOverlap) {
    run_steps<float>(false);
}

template <typename T>
void run_zero(int stage, bool overlap) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
    const int n_ranks = cuda_device_count();
    // 10,007 elements: with 2+ ranks the bottom bucket does not split evenly.
    const int64_t n = 10007, layer = 1500;
    const double mb = 4096.0 / double(1 << 20);
    comm_local_run(
        n_ranks,
        [&](Communicator& cpu) {
            const int r = cpu.rank();
            StandInModel<T> model(r, n, layer);
            GpuGradSyncOptions o;
            o.bucket_size_mb = mb;
            o.overlap = overlap;
            o.zero_stage = stage;
            auto sync = make_nccl_grad_sync(cpu, model, r, o);
            // The CPU's plan for these buckets: the shard the sync must fill.
            const auto buckets =
                grad_buckets_plan(n, bucket_elems_for_bytes(mb, int64_t(sizeof(T))), n_ranks);
            const auto pieces = shard_pieces(buckets, r);
            CudaShard& sh = model.shard();
            ASSERT_EQ(sh.numel, shard_numel(buckets));
            ASSERT_EQ(sh.chunks.size(), pieces.size());
            for (size_t b = 0; b < pieces.size(); ++b) {
                EXPECT_EQ(sh.chunks[b].flat_begin, pieces[b].flat_begin);
                EXPECT_EQ(sh.chunks[b].flat_end, pieces[b].flat_end);
                EXPECT_EQ(sh.chunks[b].shard_begin, pieces[b].shard_begin);
            }
            EXPECT_NE(sync->describe().find("ZeRO-" + std::to_string(stage)), std::string::npos);
            for (int step = 0; step < 2; ++step) {
                model.set_next_grads(grads_of(r, 0, n));
                sync->begin_micro_batch(false);
                model.backward(1.0);
                sync->end_micro_batch();
                model.set_next_grads(grads_of(r, 1, n));
                sync->begin_micro_batch(true);
                model.backward(1.0);
                sync->end_micro_batch();
                sync->finalize();
                std::vector<float> want = summed(n_ranks, 1, n);
                if (stage == 2) {
                    const auto first = summed(n_ranks, 0, n);
                    for (size_t i = 0; i < want.size(); ++i) want[i] += first[i];
                }
                const auto got = model.download_via_compute_stream(sh.grads, sh.numel);
                sync->wait();
                for (const ShardPiece& p : pieces)
                    for (int64_t i = 0; i < p.chunk; ++i) {
                        const float w = p.flat_begin + i < p.flat_end
                                            ? want[size_t(p.flat_begin + i)]
                                            : 0.0f;  // padding
                        ASSERT_EQ(got[size_t(p.shard_begin + i)], w)
                            << "step " << step << " rank " << r << " shard element "
                            << p.shard_begin + i;
                    }
            }
            // Partial sums of every rank, summed on the device.
            double* d = nullptr;
            LOOM_CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(double)));
            model.upload_via_compute_stream(d, std::vector<double>{double(r + 1), 0.5});
            sh.all_reduce_sum(d, 2);
            const auto sums = model.download_via_compute_stream(d, 2);
            EXPECT_EQ(sums[0], double(n_ranks * (n_ranks + 1) / 2));
            EXPECT_EQ(sums[1], 0.5 * n_ranks);
            LOOM_CUDA_CHECK(cudaFree(d));
            // The parameters: rank q's chunks hold q's values, the rest junk
            // that the gather must overwrite.
            auto value = [](int q, int64_t i) { return float(q * 100000 + i); };
            std::vector<float> host(static_cast<size_t>(n), -1.0f);
            for (const ShardPiece& p : pieces)
                for (int64_t i = p.flat_begin; i < p.flat_end; ++i) host[size_t(i)] = value(r, i);
            float* master = nullptr;
            LOOM_CUDA_CHECK(cudaMalloc(&master, size_t(n) * sizeof(float)));
            model.upload_via_compute_stream(master, host);
            sh.gather_params(master);
            const auto gathered = model.download_via_compute_stream(master, n);
            sync->wait();
            for (const GradBucket& b : buckets)
                for (int q = 0; q < n_ranks; ++q)
                    for (int64_t i = b.chunk_begin(q); i < b.chunk_end(q); ++i)
                        ASSERT_EQ(gathered[size_t(i)], value(q, i)) << "element " << i;
            LOOM_CUDA_CHECK(cudaFree(master));
        },
        quick_options());
}

TEST(GpuGradSync, Zero1ReduceScattersTheLastMicroBatchIntoShards) {
    run_zero<float>(1, true);
}
TEST(GpuGradSync, Zero2AccumulatesEveryMicroBatchInShards) {
    run_zero<float>(2, true);
}
TEST(GpuGradSync, Zero2Bf16WithoutOverlap) {
    run_zero<__nv_bfloat16>(2, false);
}

TEST(GpuGradSync, RefusesReportsOutsideAMicroBatch) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
    comm_local_run(
        1,
        [&](Communicator& cpu) {
            StandInModel<float> model(0, 1000, 300);
            auto sync = make_nccl_grad_sync(cpu, model, 0, {});
            model.set_next_grads(grads_of(0, 0, 1000));
            EXPECT_THROW(model.backward(1.0), Error) << "backward outside the bracket";
            EXPECT_THROW(sync->end_micro_batch(), Error);
            sync->begin_micro_batch(true);
            EXPECT_THROW(sync->begin_micro_batch(true), Error);
            EXPECT_THROW(sync->finalize(), Error) << "inside a micro-batch";
            sync->end_micro_batch();
            sync->finalize();
            sync->wait();
            sync.reset();
            EXPECT_NO_THROW(model.backward(1.0)) << "the destructor removed the hook";
        },
        quick_options());
}

#else

TEST(GpuGradSync, NeedsNccl) {
    GTEST_SKIP() << "this build has no NCCL";
}

#endif  // LOOM_HAVE_NCCL

}  // namespace
}  // namespace loom::test

// CommNccl on device buffers. Single-GPU tests use a communicator of one rank
// (unique id made locally), where every collective is the identity; with two
// or more GPUs, one thread per GPU bootstraps through CommLocal (the
// from_mpi path) and checks each collective against host arithmetic. Every
// test that needs a GPU skips, with the reason, when there is none; the
// local-rank -> device mapping is pure and runs everywhere.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "cuda_test_util.h"
#include "backend/cuda/local_device.h"

#if defined(LOOM_HAVE_NCCL)
#include "backend/cuda/nccl_bootstrap.h"
#include "comm/comm_local.h"
#include "comm/cuda/comm_nccl.h"
#endif

namespace loom::test {
namespace {

// ---- local rank -> device (no GPU needed) ---------------------------------------

// Sets the launcher variables for one scope and restores them after.
class ScopedLauncherEnv {
  public:
    static constexpr const char* names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                            "SLURM_LOCALID", "LOCAL_RANK"};
    ScopedLauncherEnv() {
        for (const char* n : names) {
            const char* v = std::getenv(n);
            saved_.push_back(v ? std::optional<std::string>(v) : std::nullopt);
            unsetenv(n);
        }
    }
    ~ScopedLauncherEnv() {
        for (size_t i = 0; i < saved_.size(); ++i) {
            if (saved_[i])
                setenv(names[i], saved_[i]->c_str(), 1);
            else
                unsetenv(names[i]);
        }
    }

  private:
    std::vector<std::optional<std::string>> saved_;
};

TEST(LocalDevice, LocalRankWrapsOverTheVisibleDevices) {
    EXPECT_EQ(local_device_for_rank(0, 4), 0);
    EXPECT_EQ(local_device_for_rank(5, 4), 1);
    EXPECT_EQ(local_device_for_rank(3, 1), 0);
    EXPECT_EQ(local_device_for_rank(-1, 8), 0) << "an unknown local rank takes the first device";
    EXPECT_THROW(local_device_for_rank(0, 0), Error);
}

TEST(LocalDevice, LauncherVariablesInPriorityOrder) {
    ScopedLauncherEnv env;
    EXPECT_EQ(launcher_local_rank(), -1);
    setenv("LOCAL_RANK", "3", 1);
    EXPECT_EQ(launcher_local_rank(), 3);
    setenv("SLURM_LOCALID", "2", 1);
    EXPECT_EQ(launcher_local_rank(), 2);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    EXPECT_EQ(launcher_local_rank(), 1) << "mpirun's variable wins";
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x1", 1);
    EXPECT_THROW(launcher_local_rank(), Error);
}

#if defined(LOOM_HAVE_NCCL)

// ---- helpers --------------------------------------------------------------------

template <typename T>
std::vector<T> download_raw(const T* d, size_t n) {
    std::vector<T> h(n);
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    if (n) LOOM_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// Values exact in every dtype used here (small integers and halves).
std::vector<float> ramp(size_t n, float base) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = base + float(i % 64) * 0.5f;
    return v;
}

class CudaStreamOwner {
  public:
    explicit CudaStreamOwner(int device) {
        LOOM_CUDA_CHECK(cudaSetDevice(device));
        LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    }
    ~CudaStreamOwner() { (void)cudaStreamDestroy(s_); }
    CudaStreamOwner(const CudaStreamOwner&) = delete;
    CudaStreamOwner& operator=(const CudaStreamOwner&) = delete;
    cudaStream_t get() const { return s_; }

  private:
    cudaStream_t s_ = nullptr;
};

CommOptions quick_options(double timeout_s = 60.0) {
    CommOptions o;
    o.timeout_s = timeout_s;
    o.on_timeout = TimeoutAction::throw_error;
    o.spin_s = 0.01;
    return o;
}

// ---- one GPU, one rank ----------------------------------------------------------

class CommNcclSingle : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string why = cuda_unavailable_reason();
        if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
        stream_ = std::make_unique<CudaStreamOwner>(0);
        comm_ = std::make_unique<CommNccl>(nccl_make_unique_id(), 0, std::vector<int>{0}, "solo", 0,
                                           stream_->get(), quick_options());
    }
    void TearDown() override {
        comm_.reset();
        stream_.reset();
    }
    CommNccl& comm() { return *comm_; }
    cudaStream_t stream() const { return stream_->get(); }

  private:
    std::unique_ptr<CudaStreamOwner> stream_;
    std::unique_ptr<CommNccl> comm_;
};

TEST_F(CommNcclSingle, DescribesItselfAndItsStreams) {
    EXPECT_EQ(comm().size(), 1);
    EXPECT_EQ(comm().rank(), 0);
    EXPECT_EQ(comm().name(), "solo");
    EXPECT_EQ(comm().device(), 0);
    EXPECT_EQ(comm().compute_stream(), stream());
    EXPECT_NE(comm().comm_stream(), nullptr);
    EXPECT_NE(comm().comm_stream(), stream());
    EXPECT_FALSE(comm().aborted());
    EXPECT_NE(comm().nccl_comm(), nullptr);
}

TEST_F(CommNcclSingle, AllReduceOfOneRankKeepsTheValues) {
    const auto v = ramp(1000, -7.0f);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        auto x = upload<float>(v);
        comm().all_reduce(x->get(), int64_t(v.size()), DType::f32, op)->wait();
        EXPECT_TRUE(bit_equal(std::string(reduce_op_name(op)), download(*x), v));
    }
    auto i = upload_raw<int64_t>({-3, 0, 1LL << 40});
    comm().all_reduce(i->get(), 3, DType::i64, ReduceOp::sum)->wait();
    EXPECT_EQ(download_raw(i->get(), 3), (std::vector<int64_t>{-3, 0, 1LL << 40}));
    EXPECT_TRUE(comm().all_reduce(nullptr, 0, DType::f32, ReduceOp::sum)->test())
        << "an empty buffer is complete at once";
}

TEST_F(CommNcclSingle, AllGatherAndReduceScatterCopyAndWorkInPlace) {
    const auto v = ramp(257, 1.0f);
    auto src = upload<float>(v);
    DeviceBuffer<float> dst(v.size());
    comm().all_gather(src->get(), dst.get(), int64_t(v.size()), DType::f32)->wait();
    EXPECT_TRUE(bit_equal("all_gather", download(dst), v));
    DeviceBuffer<float> out(v.size());
    comm()
        .reduce_scatter(src->get(), out.get(), int64_t(v.size()), DType::f32, ReduceOp::sum)
        ->wait();
    EXPECT_TRUE(bit_equal("reduce_scatter", download(out), v));
    // NCCL's in-place forms (one rank: send and receive are the same buffer).
    comm().all_gather(src->get(), src->get(), int64_t(v.size()), DType::f32)->wait();
    comm()
        .reduce_scatter(src->get(), src->get(), int64_t(v.size()), DType::f32, ReduceOp::max)
        ->wait();
    EXPECT_TRUE(bit_equal("in place", download(*src), v));
}

TEST_F(CommNcclSingle, ReduceScatterStagesAPartlyOverlappingSend) {
    // recv starts one element into send: neither NCCL's in-place form nor
    // disjoint, so the send side must be copied before NCCL writes recv.
    const auto v = ramp(65, 2.0f);
    auto buf = upload<float>(v);
    comm().reduce_scatter(buf->get(), buf->get() + 1, 64, DType::f32, ReduceOp::sum)->wait();
    std::vector<float> want = v;
    for (size_t i = 0; i < 64; ++i) want[i + 1] = v[i];
    EXPECT_TRUE(bit_equal("staged reduce_scatter", download(*buf), want));
}

TEST_F(CommNcclSingle, BroadcastFromTheOnlyRank) {
    const auto v = ramp(33, 4.0f);
    auto x = upload<float>(v);
    comm().broadcast(x->get(), int64_t(v.size()), DType::f32, 0)->wait();
    EXPECT_TRUE(bit_equal("broadcast", download(*x), v));
    EXPECT_THROW(comm().broadcast(x->get(), int64_t(v.size()), DType::f32, 1), Error);
}

TEST_F(CommNcclSingle, HalfPrecisionTypesAreAccepted) {
    const auto v = ramp(100, -3.0f);
    auto b = upload<__nv_bfloat16>(v);
    comm().all_reduce(b->get(), int64_t(v.size()), DType::bf16, ReduceOp::sum)->wait();
    EXPECT_TRUE(bit_equal("bf16 all_reduce", download(*b), v));
    auto h = upload<__half>(v);
    comm().all_reduce(h->get(), int64_t(v.size()), DType::f16, ReduceOp::max)->wait();
    EXPECT_TRUE(bit_equal("f16 all_reduce", download(*h), v));
}

TEST_F(CommNcclSingle, UnsupportedTypeAndHostBuffersThrow) {
    DeviceBuffer<uint8_t> bytes(16);
    EXPECT_THROW(comm().all_reduce(bytes.get(), 16, DType::u8, ReduceOp::sum), Error);
    std::vector<float> host(8, 1.0f);
    try {
        comm().all_reduce(host.data(), 8, DType::f32, ReduceOp::sum);
        FAIL() << "a host buffer was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(comm().aborted()) << "argument errors must not end the communicator";
}

TEST_F(CommNcclSingle, SendToSelfNeedsAGroup) {
    const auto v = ramp(40, 9.0f);
    auto a = upload<float>(v);
    DeviceBuffer<float> b(v.size());
    EXPECT_THROW(comm().send(a->get(), 40, DType::f32, 0, 7), Error);
    comm().group_start();
    auto ws = comm().send(a->get(), 40, DType::f32, 0, 7);
    auto wr = comm().recv(b.get(), 40, DType::f32, 0, 7);
    comm().group_end()->wait();
    EXPECT_TRUE(ws->test());
    EXPECT_TRUE(wr->test());
    EXPECT_TRUE(bit_equal("send/recv to self", download(b), v));
}

TEST_F(CommNcclSingle, GroupedOperationsStartAtGroupEnd) {
    const auto v = ramp(10, 0.0f);
    auto x = upload<float>(v);
    comm().group_start();
    auto w = comm().all_reduce(x->get(), 10, DType::f32, ReduceOp::sum);
    EXPECT_FALSE(w->test()) << "nothing is on the stream before group_end";
    EXPECT_THROW(w->wait(), Error);
    EXPECT_THROW(comm().make_compute_wait(), Error);
    comm().group_end()->wait();
    EXPECT_TRUE(w->test());
    w->wait();
}

TEST_F(CommNcclSingle, ComputeStreamWaitsOnTheDeviceNotTheHost) {
    // compute -> comm -> compute, ordered only by events: the copy on the
    // compute stream must see the reduction's result.
    const auto v = ramp(1 << 16, 1.0f);
    auto x = upload<float>(v);
    DeviceBuffer<float> y(v.size());
    auto w = comm().all_reduce(x->get(), int64_t(v.size()), DType::f32, ReduceOp::sum);
    comm().make_stream_wait(*w, stream());
    LOOM_CUDA_CHECK(cudaMemcpyAsync(y.get(), x->get(), v.size() * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream()));
    auto w2 = comm().all_reduce(y.get(), int64_t(v.size()), DType::f32, ReduceOp::max);
    comm().make_compute_wait();
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    EXPECT_TRUE(w->test());
    EXPECT_TRUE(w2->test());
    EXPECT_TRUE(bit_equal("ordered copy", download(y), v));
}

TEST_F(CommNcclSingle, BarrierAndSplit) {
    comm().barrier()->wait();
    auto same = comm().split({0}, "self");
    ASSERT_NE(same, nullptr);
    EXPECT_EQ(same->size(), 1);
    EXPECT_EQ(same->name(), "self");
    EXPECT_EQ(same->world_ranks(), std::vector<int>{0});
    auto x = upload<float>({1.0f, 2.0f});
    same->all_reduce(x->get(), 2, DType::f32, ReduceOp::sum)->wait();
    EXPECT_TRUE(bit_equal("split all_reduce", download(*x), {1.0f, 2.0f}));
    EXPECT_EQ(comm().split({}, "nobody"), nullptr) << "a rank outside its list gets no group";
}

TEST_F(CommNcclSingle, AbortEndsTheCommunicator) {
    comm().abort();
    EXPECT_TRUE(comm().aborted());
    EXPECT_EQ(comm().nccl_comm(), nullptr);
    auto x = upload<float>({1.0f});
    EXPECT_THROW(comm().all_reduce(x->get(), 1, DType::f32, ReduceOp::sum), Error);
}

TEST(CommNcclOptions, FixedOrderReductionIsRefused) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << "no usable CUDA device: " << why;
    CommOptions o = quick_options();
    o.fixed_order_reduction = true;
    EXPECT_THROW(CommNccl(nccl_make_unique_id(), 0, {0}, "solo", 0, nullptr, o), Error);
}

// ---- one thread per GPU ---------------------------------------------------------

// Why a test of one rank per GPU cannot run here ("" when it can).
std::string multi_gpu_skip_reason() {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) return "no usable CUDA device: " + why;
    const int n = cuda_device_count();
    if (n < 2) return "needs 2 or more GPUs, " + std::to_string(n) + " visible";
    return {};
}

TEST(CommNcclMultiGpu, CollectivesMatchHostArithmetic) {
    if (const std::string why = multi_gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    const int n = cuda_device_count();
    const size_t len = 1000;  // per rank; not a multiple of anything NCCL likes
    comm_local_run(
        n,
        [&](Communicator& cpu) {
            const int r = cpu.rank();
            CudaStreamOwner stream(r);
            auto nccl = CommNccl::from_mpi(cpu, r, stream.get(), quick_options());
            ASSERT_EQ(nccl->size(), n);
            ASSERT_EQ(nccl->rank(), r);
            auto mine = [&](int q) { return ramp(len, float(q) * 100.0f); };

            // all_reduce: sum, avg, max
            std::vector<float> sum(len, 0.0f), mx(len, -1e30f);
            for (int q = 0; q < n; ++q) {
                const auto v = mine(q);
                for (size_t i = 0; i < len; ++i) {
                    sum[i] += v[i];
                    mx[i] = std::max(mx[i], v[i]);
                }
            }
            std::vector<float> avg(len);
            for (size_t i = 0; i < len; ++i) avg[i] = sum[i] / float(n);
            auto x = upload<float>(mine(r));
            nccl->all_reduce(x->get(), int64_t(len), DType::f32, ReduceOp::sum)->wait();
            EXPECT_TRUE(all_close("sum", download(*x), sum, {1e-4, 1e-6}));
            x = upload<float>(mine(r));
            nccl->all_reduce(x->get(), int64_t(len), DType::f32, ReduceOp::avg)->wait();
            EXPECT_TRUE(all_close("avg", download(*x), avg, {1e-4, 1e-5}));
            x = upload<float>(mine(r));
            nccl->all_reduce(x->get(), int64_t(len), DType::f32, ReduceOp::max)->wait();
            EXPECT_TRUE(bit_equal("max", download(*x), mx));

            // reduce_scatter: rank r keeps chunk r of the sum of everyone's (n *
            // len).
            std::vector<float> big_sum(size_t(n) * len, 0.0f);
            for (int q = 0; q < n; ++q) {
                const auto v = ramp(size_t(n) * len, float(q));
                for (size_t i = 0; i < v.size(); ++i) big_sum[i] += v[i];
            }
            auto big = upload<float>(ramp(size_t(n) * len, float(r)));
            DeviceBuffer<float> chunk(len);
            nccl->reduce_scatter(big->get(), chunk.get(), int64_t(len), DType::f32, ReduceOp::sum)
                ->wait();
            const std::vector<float> want_chunk(big_sum.begin() + r * int64_t(len),
                                                big_sum.begin() + (r + 1) * int64_t(len));
            EXPECT_TRUE(all_close("reduce_scatter", download(chunk), want_chunk, {1e-4, 1e-6}));

            // all_gather: everyone's `mine` in rank order.
            std::vector<float> gathered;
            for (int q = 0; q < n; ++q) {
                const auto v = mine(q);
                gathered.insert(gathered.end(), v.begin(), v.end());
            }
            auto part = upload<float>(mine(r));
            DeviceBuffer<float> all(size_t(n) * len);
            nccl->all_gather(part->get(), all.get(), int64_t(len), DType::f32)->wait();
            EXPECT_TRUE(bit_equal("all_gather", download(all), gathered));

            // broadcast from the last rank.
            auto b = upload<float>(mine(r));
            nccl->broadcast(b->get(), int64_t(len), DType::f32, n - 1)->wait();
            EXPECT_TRUE(bit_equal("broadcast", download(*b), mine(n - 1)));

            // send/recv around the ring, paired in one group.
            auto out = upload<float>(mine(r));
            DeviceBuffer<float> in(len);
            nccl->group_start();
            nccl->send(out->get(), int64_t(len), DType::f32, (r + 1) % n, 3);
            nccl->recv(in.get(), int64_t(len), DType::f32, (r + n - 1) % n, 3);
            nccl->group_end()->wait();
            EXPECT_TRUE(bit_equal("ring recv", download(in), mine((r + n - 1) % n)));

            // bf16 sum of small integers is exact.
            std::vector<float> ones(64, float(r + 1)), want_b(64, float(n * (n + 1) / 2));
            auto hb = upload<__nv_bfloat16>(ones);
            nccl->all_reduce(hb->get(), 64, DType::bf16, ReduceOp::sum)->wait();
            EXPECT_TRUE(bit_equal("bf16 sum", download(*hb), want_b));

            // split into even and odd ranks; each half sums its own members.
            std::vector<int> half;
            for (int q = r % 2; q < n; q += 2) half.push_back(q);
            auto sub = nccl->split(half, r % 2 ? "odd" : "even");
            ASSERT_NE(sub, nullptr);
            EXPECT_EQ(sub->size(), int(half.size()));
            float want_half = 0;
            for (int q : half) want_half += float(q + 1);
            auto s = upload<float>(std::vector<float>(8, float(r + 1)));
            sub->all_reduce(s->get(), 8, DType::f32, ReduceOp::sum)->wait();
            EXPECT_TRUE(bit_equal("split sum", download(*s), std::vector<float>(8, want_half)));
            nccl->barrier()->wait();
        },
        quick_options());
}

TEST(CommNcclMultiGpu, MissingPeerTimesOutAndAborts) {
    if (const std::string why = multi_gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    const int n = cuda_device_count();
    comm_local_run(
        n,
        [&](Communicator& cpu) {
            const int r = cpu.rank();
            CudaStreamOwner stream(r);
            auto nccl = CommNccl::from_mpi(cpu, r, stream.get(), quick_options(2.0));
            if (r == 0) {
                // Rank 0 enters an all_reduce that no other rank joins.
                auto x = upload<float>({1.0f, 2.0f});
                try {
                    nccl->all_reduce(x->get(), 2, DType::f32, ReduceOp::sum)->wait();
                    ADD_FAILURE() << "the all_reduce completed without its peers";
                } catch (const Error& e) {
                    const std::string msg = e.what();
                    EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
                    EXPECT_NE(msg.find("all_reduce"), std::string::npos) << msg;
                }
                EXPECT_TRUE(nccl->aborted());
            }
            cpu.barrier()->wait();
            // The others give up on rank 0 too, so no one blocks in teardown.
            if (r != 0) nccl->abort();
        },
        quick_options());
}

#else  // !LOOM_HAVE_NCCL

TEST(CommNccl, NeedsNccl) {
    GTEST_SKIP() << "this Loom was built without NCCL (LOOM_NCCL=OFF)";
}

#endif  // LOOM_HAVE_NCCL

}  // namespace
}  // namespace loom::test

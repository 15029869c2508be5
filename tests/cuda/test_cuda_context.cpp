// The CUDA plumbing: device discovery, error macros, scratch carving, the
// device error record and host <-> device copies. The first tests need no GPU
// and run everywhere; the rest skip without one.
#include <string>

#include "backend/cuda/cublas_handle.h"
#include "backend/cuda/nccl_bootstrap.h"
#include "core/check.h"
#include "cuda_test_util.h"
#include "ops/cuda/device_ops_cuda.h"

namespace loom::test {
namespace {

TEST(CudaPlumbing, UnavailableReasonAgreesWithDeviceCount) {
    const int n = cuda_device_count();
    const std::string why = cuda_unavailable_reason();
    EXPECT_GE(n, 0);
    if (n == 0) {
        EXPECT_FALSE(why.empty()) << "no device but no reason given";
    } else {
        EXPECT_TRUE(why.empty()) << why;
    }
}

TEST(CudaPlumbing, CudaCheckThrowsWithCallSiteAndReason) {
    try {
        LOOM_CUDA_CHECK(cudaErrorInvalidValue);
        FAIL() << "LOOM_CUDA_CHECK did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("test_cuda_context.cpp"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
    }
}

TEST(CudaPlumbing, CublasCheckThrowsWithStatus) {
    try {
        LOOM_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED);
        FAIL() << "LOOM_CUBLAS_CHECK did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cuBLAS error"), std::string::npos) << msg;
        EXPECT_NE(msg.find("test_cuda_context.cpp"), std::string::npos) << msg;
    }
}

#if defined(LOOM_HAVE_NCCL)
TEST(CudaPlumbing, NcclCheckThrowsWithReason) {
    EXPECT_THROW(LOOM_NCCL_CHECK(ncclInvalidArgument), Error);
    EXPECT_NO_THROW(LOOM_NCCL_CHECK(ncclSuccess));
}
#endif

TEST(CudaPlumbing, ScratchCarverAlignsEveryBuffer) {
    ScratchCarver plan(nullptr);
    plan.take<float>(3);
    plan.take<char>(1);
    plan.take<double>(5);
    EXPECT_EQ(plan.used(), 3u * 256u);
    alignas(256) static char arena[1024];
    ScratchCarver carve(arena);
    float* a = carve.take<float>(3);
    char* b = carve.take<char>(1);
    double* c = carve.take<double>(5);
    EXPECT_EQ(reinterpret_cast<char*>(a), arena);
    EXPECT_EQ(b, arena + 256);
    EXPECT_EQ(reinterpret_cast<char*>(c), arena + 512);
}

class CudaContextTest : public CudaOpTest {};

TEST_F(CudaContextTest, ScratchGrowsAndKeepsAlignment) {
    void* small = ctx().scratch(100);
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 256, 0u);
    EXPECT_EQ(ctx().scratch(50), small) << "a smaller request must reuse the region";
    void* big = ctx().scratch(size_t(64) << 20);
    ASSERT_NE(big, nullptr);
    LOOM_CUDA_CHECK(cudaMemsetAsync(big, 0, size_t(64) << 20, ctx().stream()));
    ctx().synchronize();
}

TEST_F(CudaContextTest, KernelSideErrorSurfacesAtCheck) {
    // An embedding id outside [0, V) cannot throw inside the kernel; the context
    // must report it, naming the row and the id, at the next check.
    const int64_t V = 4, C = 3;
    auto table = upload<float>(random_vec(size_t(V * C), 1));
    auto ids = upload_raw<int64_t>({0, 7, 2});
    DeviceBuffer<float> out(3 * C);
    const OpCtx g = gpu<float>();
    g.nn().embedding_forward(g, out.get(), ids->get(), table->get(), 3, V, C, false);
    try {
        ctx().check_device_errors();
        FAIL() << "bad id was not reported";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("id 7"), std::string::npos) << msg;
        EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
    }
    EXPECT_NO_THROW(ctx().check_device_errors()) << "the record must be cleared after a report";
}

// The Backend of a GPU: zeroed memory, round trips, and the copy queue
// (activation offloading's): a copy-out is in host memory once compute waited
// on its marker, a copy-back on the device after synchronize.
TEST_F(CudaContextTest, BackendCopiesAndItsCopyQueue) {
    auto be = make_cuda_backend(ctx());
    EXPECT_NE(be->name().find("cuda:0"), std::string::npos);
    const auto v = random_vec(35, 3);
    const size_t bytes = v.size() * sizeof(float);
    auto dev = be->alloc(bytes);
    std::vector<float> zeros(v.size(), 1.0f);
    be->to_host(zeros.data(), dev->data(), bytes);
    EXPECT_TRUE(bit_equal("fresh memory", zeros, std::vector<float>(v.size(), 0.0f)));
    be->to_device(dev->data(), v.data(), bytes);
    auto host = be->alloc_host(bytes);
    auto out = be->new_marker(), read = be->new_marker();
    be->mark(*read, Backend::Queue::compute);
    be->wait_for(Backend::Queue::copy, *read);
    be->copy_out(host->data(), dev->data(), bytes);
    be->mark(*out, Backend::Queue::copy);
    be->wait_for(Backend::Queue::compute, *out);
    be->zero(dev->data(), bytes);  // after the copy-out, on compute
    be->synchronize();
    const float* h = static_cast<const float*>(host->data());
    EXPECT_TRUE(bit_equal("copied out", std::vector<float>(h, h + v.size()), v));
    be->copy_back(dev->data(), host->data(), bytes);
    be->synchronize();
    std::vector<float> back(v.size());
    be->to_host(back.data(), dev->data(), bytes);
    EXPECT_TRUE(bit_equal("copied back", back, v));
}

#if defined(LOOM_HAVE_NCCL)
TEST_F(CudaContextTest, NcclSingleRankAllReduceAndWait) {
    NcclComm comm(nccl_make_unique_id(), 1, 0, 0);
    auto x = upload<float>({1.0f, 2.0f, 3.0f});
    LOOM_NCCL_CHECK(
        ncclAllReduce(x->get(), x->get(), 3, ncclFloat, ncclSum, comm.get(), ctx().stream()));
    nccl_wait(comm, ctx().stream(), "all_reduce(test)", 60000.0);
    EXPECT_TRUE(bit_equal("all_reduce over one rank", download(*x), {1.0f, 2.0f, 3.0f}));
    EXPECT_THROW(NcclComm(nccl_make_unique_id(), 2, 2, 0), Error);
}
#endif

}  // namespace
}  // namespace loom::test

// The CUDA table's embedding forward and deterministic backward entries
// against the CPU.
#include "cuda_test_util.h"
#include "ops/embedding.h"

namespace loom::test {
namespace {

template <typename T>
class CudaEmbedding : public CudaTypedOpTest<T> {};
TYPED_TEST_SUITE(CudaEmbedding, DeviceTypes, TypeNames);

struct EmbCase {
    int64_t N, V, C, padding_idx;
};
// Few ids over many rows: long runs of repeated ids (the padding token case).
constexpr EmbCase k_cases[] = {
    {1, 1, 1, -1}, {7, 3, 5, 0}, {512, 30522, 64, 0}, {2048, 4, 33, 1}, {300, 1000, 768, -1}};

TYPED_TEST(CudaEmbedding, ForwardBackwardMatchCpu) {
    using T = TypeParam;
    for (const EmbCase& c : k_cases) {
        const std::string tag =
            "N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " C=" + std::to_string(c.C);
        auto table = round_all<T>(random_vec(size_t(c.V * c.C), 1));
        auto ids = random_ids(size_t(c.N), c.V, 2);
        auto base = round_all<T>(random_vec(size_t(c.N * c.C), 3));  // accumulate target
        auto dout = round_all<T>(random_vec(size_t(c.N * c.C), 4));
        auto dtable0 = round_all<T>(random_vec(size_t(c.V * c.C), 5));

        std::vector<float> out = base;
        embedding_forward<float>(out.data(), ids.data(), table.data(), c.N, c.V, c.C, true);
        std::vector<float> dtable = dtable0;
        embedding_backward<float>(dtable.data(), ids.data(), dout.data(), c.N, c.V, c.C,
                                  c.padding_idx);

        auto dt = upload<T>(table), dout_d = upload<T>(dout), dout_base = upload<T>(base);
        auto did = upload_raw<int64_t>(ids);
        const OpCtx g = this->template gpu<T>();
        g.nn().embedding_forward(g, dout_base->get(), did->get(), dt->get(), c.N, c.V, c.C, true);
        EXPECT_TRUE(all_close(tag + " fwd (+=)", download(*dout_base), out, tol_for<T>(0, 0)));
        auto gtable = upload<T>(dtable0);
        g.nn().embedding_backward(g, gtable->get(), did->get(), dout_d->get(), c.N, c.V, c.C,
                                  c.padding_idx);
        // Same summation order as the CPU's sequential loop, so fp32 is exact.
        EXPECT_TRUE(all_close(tag + " dtable", download(*gtable), dtable, tol_for<T>(0, 0)));
    }
}

class CudaEmbeddingDeterminism : public CudaOpTest {};

TEST_F(CudaEmbeddingDeterminism, RepeatedIdsGiveSameBits) {
    const int64_t N = 8192, V = 17, C = 128;
    auto ids = upload_raw<int64_t>(random_ids(size_t(N), V, 9));
    auto dout = upload<float>(random_vec(size_t(N * C), 10));
    std::vector<float> first;
    for (int run = 0; run < 3; ++run) {
        DeviceBuffer<float> dtable(size_t(V * C));
        const OpCtx g = gpu<float>();
        g.nn().embedding_backward(g, dtable.get(), ids->get(), dout->get(), N, V, C, -1);
        auto got = download(dtable);
        if (run == 0)
            first = got;
        else
            EXPECT_TRUE(bit_equal("run " + std::to_string(run), got, first));
    }
}

}  // namespace
}  // namespace loom::test

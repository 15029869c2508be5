// Bad input reaching the ops: out-of-range ids and targets throw loom::Error
// naming the offending value and row.
#include "core/check.h"
#include "ops/embedding.h"
#include "ops/softmax_xent.h"
#include "ops_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Runs f, expects loom::Error, and returns its message.
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no loom::Error thrown";
    return {};
}

}  // namespace

TEST(BadInput, EmbeddingIdOutOfRange) {
    const int64_t V = 10, C = 4;
    std::vector<float> table(size_t(V * C), 1.0f), out(size_t(3 * C));
    const std::vector<int64_t> ids = {1, 10, 2};
    std::string msg = error_of([&] { embedding_forward(out.data(), ids.data(), table.data(), 3, V, C); });
    EXPECT_NE(msg.find("id 10"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;

    const std::vector<int64_t> neg = {0, 0, -3};
    msg = error_of([&] { embedding_backward(table.data(), neg.data(), out.data(), 3, V, C); });
    EXPECT_NE(msg.find("id -3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
}

TEST(BadInput, XentTargetOutOfRange) {
    const int64_t N = 4, V = 5;
    std::vector<float> logits(size_t(N * V), 0.0f), d(size_t(N * V));
    const std::vector<int64_t> targets = {0, k_ignore_index, 4, 5};
    std::string msg =
        error_of([&] { softmax_xent_forward<float>(nullptr, logits.data(), targets.data(), N, V); });
    EXPECT_NE(msg.find("target 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;

    const std::vector<int64_t> minus_one = {-1, 0, 0, 0};
    msg = error_of([&] {
        softmax_xent_backward<float>(d.data(), logits.data(), minus_one.data(), N, V, 1.0);
    });
    EXPECT_NE(msg.find("target -1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 0"), std::string::npos) << msg;
}

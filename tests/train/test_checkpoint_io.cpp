// Checkpoint folders on their own: atomic commit (a crashed writer leaves no
// checkpoint), verification, `latest`, and HF's rotation rule.
#include <gtest/gtest.h>

#include <fstream>

#include "io/checkpoint.h"
#include "io/file_utils.h"
#include "trainer_e2e_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class CheckpointIo : public TrainDir {
  protected:
    std::string make(int64_t step) {
        CheckpointWriter w(dir_.string(), step);
        Tensor t = Tensor::empty(DType::f32, Shape{4}, "w");
        for (int i = 0; i < 4; ++i) t.data<float>()[i] = float(step * 10 + i);
        w.add_tensors("model.safetensors", {{"w", t}});
        w.add_text("trainer_state.json", "{\"step\": " + std::to_string(step) + "}\n");
        return w.commit();
    }
    std::vector<int64_t> steps() const {
        std::vector<int64_t> s;
        for (const auto& c : list_checkpoints(dir_.string())) s.push_back(c.step);
        return s;
    }
};

TEST_F(CheckpointIo, CommitIsAllOrNothing) {
    {
        CheckpointWriter w(dir_.string(), 5);
        w.add_text("a.txt", "hello");
        EXPECT_TRUE(fs::exists(w.tmp_path()));
        // Destroyed without commit, as when an exception unwinds mid-save.
    }
    EXPECT_FALSE(fs::exists(dir_ / "checkpoint-5"));
    EXPECT_FALSE(fs::exists(dir_ / ".tmp-checkpoint-5"));
    // A folder without a manifest (copied by hand, half deleted) is not listed.
    fs::create_directories(dir_ / "checkpoint-7");
    EXPECT_TRUE(steps().empty());
    const std::string p = make(3);
    EXPECT_EQ(p, (dir_ / "checkpoint-3").string());
    EXPECT_EQ(verify_checkpoint(p), 3);
    EXPECT_EQ(steps(), std::vector<int64_t>({3}));
}

TEST_F(CheckpointIo, LatestIsTheHighestStepNotTheNewestName) {
    make(9);
    make(10);
    make(2);
    EXPECT_EQ(resolve_checkpoint("latest", dir_.string()), (dir_ / "checkpoint-10").string());
}

TEST_F(CheckpointIo, VerifyCatchesEveryKindOfDamage) {
    const std::string p = make(1);
    write("checkpoint-1/trainer_state.json", "{\"step\": 2}\n");  // same size, other bytes
    expect_train_error([&] { verify_checkpoint(p); }, {"trainer_state.json", "corrupt"});
    write("checkpoint-1/trainer_state.json", "{}\n");
    expect_train_error([&] { verify_checkpoint(p); }, {"trainer_state.json", "bytes"});
    fs::remove(p + "/trainer_state.json");
    expect_train_error([&] { verify_checkpoint(p); }, {"trainer_state.json", "missing"});
    write("checkpoint-1/loom_checkpoint.json", "{\"format\": \"other\"}");
    expect_train_error([&] { verify_checkpoint(p); }, {"loom-checkpoint"});
    write("checkpoint-1/loom_checkpoint.json", "{not json");
    expect_train_error([&] { verify_checkpoint(p); }, {"not valid JSON"});
}

TEST_F(CheckpointIo, RotationKeepsTheNewestAndTheBest) {
    for (int64_t s : {1, 2, 3, 4, 5}) make(s);
    // No best: the newest `limit` stay.
    rotate_checkpoints(dir_.string(), 3, "");
    EXPECT_EQ(steps(), std::vector<int64_t>({3, 4, 5}));
    // The best is never deleted, even when it is the oldest.
    rotate_checkpoints(dir_.string(), 2, (dir_ / "checkpoint-3").string());
    EXPECT_EQ(steps(), std::vector<int64_t>({3, 5}));
    // HF: with limit 1 and a best that is not the newest, both stay.
    make(6);
    rotate_checkpoints(dir_.string(), 1, (dir_ / "checkpoint-3").string());
    EXPECT_EQ(steps(), std::vector<int64_t>({3, 6}));
    // When the best is the newest, limit 1 keeps only it.
    rotate_checkpoints(dir_.string(), 1, (dir_ / "checkpoint-6").string());
    EXPECT_EQ(steps(), std::vector<int64_t>({6}));
    // 0 = keep all.
    make(7);
    rotate_checkpoints(dir_.string(), 0, "");
    EXPECT_EQ(steps(), std::vector<int64_t>({6, 7}));
}

TEST_F(CheckpointIo, HashDependsOnEveryByte) {
    const std::string a = write("a.bin", std::string(1000, 'x'));
    std::string s(1000, 'x');
    s[999] = 'y';
    const std::string b = write("b.bin", s);
    const std::string c = write("c.bin", std::string(1001, 'x'));
    EXPECT_NE(file_hash_hex(a), file_hash_hex(b));
    EXPECT_NE(file_hash_hex(a), file_hash_hex(c));
    EXPECT_EQ(file_hash_hex(a), file_hash_hex(write("d.bin", std::string(1000, 'x'))));
}

}  // namespace
}  // namespace loom::test

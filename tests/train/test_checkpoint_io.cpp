// Checkpoint folders on their own: atomic commit (a crashed writer leaves no
// checkpoint), verification, `latest` (passing over unfinished folders),
// removal for a fresh start, and HF's rotation rule.
#include <gtest/gtest.h>

#include <algorithm>
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
    EXPECT_FALSE(newest_complete_checkpoint(dir_.string(), nullptr).has_value());
    make(9);
    make(10);
    make(2);
    const auto c = newest_complete_checkpoint(dir_.string(), nullptr);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->path, (dir_ / "checkpoint-10").string());
    EXPECT_EQ(c->step, 10);
}

// What a copy, a sync or a store without atomic renames leaves behind when it
// stops half way is passed over, and each one says why.
TEST_F(CheckpointIo, NewestCompleteSkipsUnfinishedFolders) {
    make(4);
    make(6);
    make(8);
    fs::resize_file(dir_ / "checkpoint-8" / "model.safetensors", 10);  // a short copy
    fs::remove(dir_ / "checkpoint-6" / "trainer_state.json");          // a file never arrived
    fs::create_directories(dir_ / "checkpoint-12");                    // no manifest yet
    write("checkpoint-12/model.safetensors", "partial");
    make(10);
    write("checkpoint-10/loom_checkpoint.json", "{\"files\": {");  // manifest cut short
    std::vector<std::string> skipped;
    const auto c = newest_complete_checkpoint(dir_.string(), &skipped);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->step, 4);
    ASSERT_EQ(skipped.size(), 4u);
    EXPECT_NE(skipped[0].find("checkpoint-12: no loom_checkpoint.json"), std::string::npos)
        << skipped[0];
    EXPECT_NE(skipped[1].find("checkpoint-10: loom_checkpoint.json is not valid JSON"),
              std::string::npos)
        << skipped[1];
    EXPECT_NE(skipped[2].find("checkpoint-8: model.safetensors has 10 bytes"), std::string::npos)
        << skipped[2];
    EXPECT_NE(skipped[3].find("checkpoint-6: trainer_state.json is missing"), std::string::npos)
        << skipped[3];
    EXPECT_EQ(checkpoint_incomplete_reason((dir_ / "checkpoint-4").string()), "");
    // Damage that keeps the size is verify_checkpoint's to report, not a reason to fall back.
    write("checkpoint-4/trainer_state.json", "{\"step\": 5}\n");
    EXPECT_EQ(checkpoint_incomplete_reason((dir_ / "checkpoint-4").string()), "");
}

TEST_F(CheckpointIo, RemoveCheckpointsTakesEveryKindOfCheckpointFolder) {
    make(1);
    make(2);
    fs::create_directories(dir_ / "checkpoint-3");       // unfinished
    fs::create_directories(dir_ / ".tmp-checkpoint-4");  // a writer that crashed
    fs::create_directories(dir_ / "checkpoint-2.old");   // a replacement that crashed
    fs::create_directories(dir_ / ".tmp-download-checkpoint-5-123");
    fs::create_directories(dir_ / "checkpoint-notes");  // not a checkpoint name
    fs::create_directories(dir_ / "runs");
    write("checkpoint-9", "a file, not a folder");
    EXPECT_EQ(remove_checkpoints(dir_.string()), 6);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    EXPECT_EQ(left, std::vector<std::string>({"checkpoint-9", "checkpoint-notes", "runs"}));
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

// download_checkpoint(): ranks sharing an output_dir that restore the same
// checkpoint at once download it once, and none of them ever sees it removed
// or half written; a damaged remote copy is an error naming it.
#include "io/remote_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "io/checkpoint.h"
#include "io_test_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

class RemoteCheckpointDownload : public TempDirTest {
  protected:
    // A checkpoint-4 in a local store folder (the ObjectStore a local
    // checkpoint_uri opens), big enough that a download takes a moment.
    void make_remote() {
        CheckpointWriter w(path("store"), 4);
        w.add_text("model.safetensors", std::string(4u << 20, 'm'));
        w.add_text("optimizer.safetensors", std::string(4u << 20, 'o'));
        w.add_text("trainer_state.json", "{\"global_step\": 4}");
        w.commit();
    }
};

TEST_F(RemoteCheckpointDownload, RanksRestoringAtOnceAllFindItWhole) {
    make_remote();
    const auto failures = test::in_processes(4, [&](int) {
        auto store = open_object_store(path("store"));
        const std::string dir = download_checkpoint(*store, {"checkpoint-4", 4}, path("out"));
        // What resume() does next: read it, while the other ranks finish.
        int rc = 0;
        for (int k = 0; k < 3; ++k)
            if (verify_checkpoint(dir) != 4) rc = 1;
        return rc;
    });
    for (size_t i = 0; i < failures.size(); ++i) EXPECT_EQ(failures[i], "") << "rank " << i;
    const auto local = list_checkpoints(path("out"));
    ASSERT_EQ(local.size(), 1u);
    EXPECT_EQ(local[0].step, 4);
    // Only the checkpoint: no partial folder or lock file left beside it.
    size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path("out"))) ++entries;
    EXPECT_EQ(entries, 1u);
}

TEST_F(RemoteCheckpointDownload, DamagedRemoteCopyNamesItAndLeavesNothing) {
    make_remote();
    std::ofstream(path("store/checkpoint-4/model.safetensors"), std::ios::app) << "x";
    auto store = open_object_store(path("store"));
    const std::string msg = error_of([&] {
        download_checkpoint(*store, {"checkpoint-4", 4}, path("out"));
    });
    EXPECT_TRUE(contains(msg, "checkpoint-4 could not be restored")) << msg;
    EXPECT_TRUE(contains(msg, "model.safetensors")) << msg;
    EXPECT_FALSE(fs::exists(path("out/checkpoint-4")));
    EXPECT_FALSE(fs::exists(path("out/checkpoint-4.part")));
}

}  // namespace
}  // namespace loom::test

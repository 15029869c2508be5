// The Hub pieces that need no server: SHA-256 against the FIPS 180-4 test
// vectors, repo ids, untrusted file names, settings and tokens from the
// environment (precedence, where each came from), the cache folder name.
// Downloads and uploads are tested against a server in tests/cli/hub_*.sh.
#include <cstdlib>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "io/hf_hub.h"
#include "io/sha256.h"
#include "io_test_util.h"

namespace loom {
namespace {

using test::contains;
using test::error_of;

class HfHub : public test::TempDirTest {
protected:
    void SetUp() override {
        test::TempDirTest::SetUp();
        for (const char* v : {"HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
                              "HF_HUB_OFFLINE", "HF_TOKEN", "HF_TOKEN_PATH", "XDG_CACHE_HOME", "HOME"}) {
            const char* old = std::getenv(v);
            saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
            ::unsetenv(v);
        }
    }
    void TearDown() override {
        for (const auto& [k, v] : saved_)
            if (v) ::setenv(k.c_str(), v->c_str(), 1);
            else ::unsetenv(k.c_str());
        test::TempDirTest::TearDown();
    }
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Sha256, FipsVectors) {
    auto hex = [](const std::string& s) {
        Sha256 h;
        h.update(s);
        return h.hex();
    };
    EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hex(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, AnySplitGivesTheSameDigest) {
    std::string data;
    for (int i = 0; i < 1000; ++i) data += char(i * 7 + 3);
    Sha256 whole;
    whole.update(data);
    const std::string want = whole.hex();
    for (size_t cut : {size_t(1), size_t(55), size_t(56), size_t(63), size_t(64), size_t(65), size_t(999)}) {
        Sha256 h;
        h.update(data.substr(0, cut));
        h.update(data.substr(cut));
        EXPECT_EQ(h.hex(), want) << "cut at " << cut;
    }
}

TEST_F(HfHub, Sha256FileMatchesInMemory) {
    const std::string data(300000, 'q');
    std::ofstream(path("f"), std::ios::binary) << data;
    Sha256 h;
    h.update(data);
    EXPECT_EQ(sha256_file(path("f")), h.hex());
    EXPECT_TRUE(contains(error_of([&] { sha256_file(path("missing")); }), path("missing")));
}

TEST(HubIds, AcceptsHubNamesOnly) {
    for (const char* ok : {"bert-base-uncased", "distilbert-base-multilingual-cased", "albert-base-v2",
                           "org/name", "my_org/model.v2", "a/b"})
        EXPECT_TRUE(hub_is_repo_id(ok)) << ok;
    for (const char* bad : {"", "/abs", "a/b/c", "../x", "org/..", "a--b/c", "org/-x", "org/x.",
                            "org/na me", "org/", "/", "org\\x", ".hidden/x"})
        EXPECT_FALSE(hub_is_repo_id(bad)) << bad;
    EXPECT_FALSE(hub_is_repo_id(std::string(97, 'a')));
}

TEST(HubPaths, UntrustedNamesStayInsideTheRepo) {
    for (const char* ok : {"model.safetensors", "runs/x/events", "model-00001-of-00002.safetensors"})
        EXPECT_NO_THROW(hub_check_relative_path(ok, "index")) << ok;
    for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./x", "a/.", "a\\..\\b",
                            "x/"})
        EXPECT_TRUE(contains(error_of([&] { hub_check_relative_path(bad, "shard list"); }),
                             "shard list"))
            << bad;
    EXPECT_TRUE(contains(error_of([&] { hub_check_relative_path(std::string("a\0b", 3), "w"); }),
                         "not a relative path"));
}

TEST_F(HfHub, SettingsFollowHuggingFaceHubVariables) {
    ::setenv("HOME", dir_.c_str(), 1);
    HubSettings s = HubSettings::from_environment();
    EXPECT_EQ(s.endpoint, "https://huggingface.co");
    EXPECT_EQ(s.cache_dir, dir_ + "/.cache/huggingface/hub");
    EXPECT_FALSE(s.offline);
    EXPECT_TRUE(s.token.empty());
    ::setenv("HF_HOME", path("hf").c_str(), 1);
    ::setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
    ::setenv("HF_HUB_OFFLINE", "TRUE", 1);
    s = HubSettings::from_environment();
    EXPECT_EQ(s.endpoint, "http://127.0.0.1:9");
    EXPECT_EQ(s.cache_dir, path("hf") + "/hub");
    EXPECT_TRUE(s.offline);
    EXPECT_EQ(hub_repo_cache_dir(s, "org/name"), path("hf") + "/hub/models--org--name");
    EXPECT_EQ(hub_repo_cache_dir(s, "gpt2"), path("hf") + "/hub/models--gpt2");
    ::setenv("HF_HUB_CACHE", path("cache").c_str(), 1);
    ::setenv("HF_HUB_OFFLINE", "0", 1);
    s = HubSettings::from_environment();
    EXPECT_EQ(s.cache_dir, path("cache"));
    EXPECT_FALSE(s.offline);
}

TEST_F(HfHub, TokenPrecedenceAndSource) {
    ::setenv("HF_HOME", dir_.c_str(), 1);
    std::ofstream(path("token")) << "hf_fromfile\n";
    HubSettings s = HubSettings::from_environment();
    EXPECT_EQ(s.token, "hf_fromfile");
    EXPECT_EQ(s.token_source, "the token file " + path("token"));
    ::setenv("HF_TOKEN", " hf_fromenv ", 1);
    s = HubSettings::from_environment();
    EXPECT_EQ(s.token, "hf_fromenv");
    EXPECT_EQ(s.token_source, "HF_TOKEN");
    s = HubSettings::from_environment("hf_fromjob", "hyperparameters.hub_token");
    EXPECT_EQ(s.token, "hf_fromjob");
    EXPECT_EQ(s.token_source, "hyperparameters.hub_token");
    ::unsetenv("HF_TOKEN");
    std::ofstream(path("other")) << "hf_other";
    ::setenv("HF_TOKEN_PATH", path("other").c_str(), 1);
    EXPECT_EQ(HubSettings::from_environment().token, "hf_other");
}

TEST_F(HfHub, OfflineWithoutCacheNamesTheCacheAndSendsNothing) {
    // An endpoint nothing listens on: any request would fail differently.
    ::setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
    ::setenv("HF_HUB_CACHE", path("c").c_str(), 1);
    ::setenv("HF_HUB_OFFLINE", "1", 1);
    const std::string msg =
        error_of([&] { hub_resolve_model("org/m", "", HubSettings::from_environment()); });
    EXPECT_TRUE(contains(msg, "HF_HUB_OFFLINE is set")) << msg;
    EXPECT_TRUE(contains(msg, path("c") + "/models--org--m")) << msg;
    EXPECT_TRUE(contains(error_of([&] { hub_resolve_model("../etc", "", HubSettings::from_environment()); }),
                         "nor a Hub model id"));
}

}  // namespace
}  // namespace loom

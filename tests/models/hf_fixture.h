// Test helpers for the Hugging Face fixtures in tests/data/hf/<name>/:
// loading a fixture (model, batch, expected outputs, after-AdamW parameters,
// manifest tolerances) and an elementwise comparison that reports the largest
// difference and the first failing element (llm.c's check_tensor).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/batch.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/model_config.h"

namespace loom::test {

inline std::string hf_dir() {
    return std::string(LOOM_TEST_DATA_DIR) + "/hf";
}

// Every full-model fixture folder (a folder with a config.json), sorted. A
// LoRA fixture (adapter_config.json: its gradients and AdamW step are the
// adapter's) has its own tests (test_lora_parity.cpp).
inline std::vector<std::string> hf_fixture_names() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(hf_dir()))
        if (e.is_directory() && std::filesystem::exists(e.path() / "config.json") &&
            !std::filesystem::exists(e.path() / "adapter_config.json"))
            names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

inline std::map<std::string, Tensor> read_tensors(const std::string& path) {
    SafetensorsFile f = SafetensorsFile::open(path);
    std::map<std::string, Tensor> m;
    for (const auto& n : f.names()) m[n] = f.get(n);
    return m;
}

struct Tol {
    double atol = 0, rtol = 0;
};

struct Fixture {
    std::string name, dir;
    ModelConfig config;
    Batch batch;
    std::map<std::string, Tensor> expected, after;
    nlohmann::json manifest;

    explicit Fixture(const std::string& n) : name(n), dir(hf_dir() + "/" + n) {
        config = load_hf_config(dir);
        batch = load_batch(dir + "/batch.safetensors");
        expected = read_tensors(dir + "/expected.safetensors");
        after = read_tensors(dir + "/after_adamw.safetensors");
        std::ifstream in(dir + "/manifest.json");
        manifest = nlohmann::json::parse(in);
    }
    // On `device` (the CPU by default; tests/test_backends.h).
    std::unique_ptr<Model> load_model(ParamDevice device = {}) const {
        ModelPlacement p;
        p.device = device;
        auto m = build_model(config, p);
        const LoadReport r = m->load(SafetensorsFile::open(dir + "/model.safetensors"));
        EXPECT_TRUE(r.newly_initialised.empty()) << name << ": " << r.newly_initialised.front();
        EXPECT_TRUE(r.unused.empty()) << name << ": " << r.unused.front();
        return m;
    }
    ModelInputs inputs() const { return inputs_from_batch(batch, config.task, true); }
    Tol tol(const std::string& key) const {
        const auto& t = manifest.at("suggested_tolerances").at(key);
        return {t.at("atol").get<double>(), t.at("rtol").get<double>()};
    }
    std::set<std::string> noise_level_grads() const {
        std::set<std::string> s;
        const auto& f = manifest.at("float32_vs_float64");
        if (f.contains("noise_level_grads"))
            for (const auto& n : f.at("noise_level_grads")) s.insert(n.get<std::string>());
        return s;
    }
    std::set<std::string> tied_targets() const {
        std::set<std::string> s;
        if (manifest.contains("tied_not_saved"))
            for (const auto& [alias, target] : manifest.at("tied_not_saved").items())
                s.insert(target.get<std::string>());
        return s;
    }
};

// Elementwise |x - ref| <= atol + rtol |ref|; on failure, the message names the
// tensor, the count, the first failing index and values, and the max diff.
// `atol_of` (optional) overrides atol per element.
inline ::testing::AssertionResult close(const std::string& what, const float* x, const float* ref,
                                        int64_t n, Tol tol,
                                        const std::vector<double>* atol_of = nullptr) {
    int64_t bad = 0, first = -1;
    double max_abs = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = std::fabs(double(x[i]) - double(ref[i]));
        max_abs = std::max(max_abs, std::isnan(d) ? INFINITY : d);
        const double atol = atol_of ? (*atol_of)[size_t(i)] : tol.atol;
        if (!(d <= atol + tol.rtol * std::fabs(double(ref[i])))) {
            if (first < 0) first = i;
            ++bad;
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << what << ": " << bad << " of " << n << " elements outside atol " << tol.atol
           << " rtol " << tol.rtol << "; first at " << first << " (" << x[first] << " vs "
           << ref[first] << "), max |diff| " << max_abs;
}

inline ::testing::AssertionResult close(const std::string& what, const Tensor& x, const Tensor& ref,
                                        Tol tol) {
    if (x.shape != ref.shape)
        return ::testing::AssertionFailure() << what << ": shape " << x.shape.to_string()
                                             << " vs reference " << ref.shape.to_string();
    return close(what, x.data<float>(), ref.data<float>(), x.numel(), tol);
}

// Test names for fixture-parameterised suites: "bert-cls" -> "bert_cls".
inline std::string fixture_test_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s)
        if (c == '-') c = '_';
    return s;
}

}  // namespace loom::test

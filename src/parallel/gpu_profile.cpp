// Built-in GPU node profiles and the YAML reader for user-defined ones. The
// figures are the vendors' datasheet numbers; docs/plan-machines.md gives
// the source of each and says which factors are assumptions.
#include "parallel/gpu_profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <map>

#include "core/check.h"

namespace loom {

namespace {

// Per-GPU figures of the three GPU generations (datasheets).
GpuProfile a100(double hbm_gib, double hbm_gbps) {
    GpuProfile p;
    p.bf16_tflops = 312;
    p.fp16_tflops = 312;
    p.tf32_tflops = 156;
    p.fp32_tflops = 19.5;
    p.hbm_gib = hbm_gib;
    p.hbm_gbps = hbm_gbps;
    p.nvlink_gbps = 300;  // NVLink 3: 600 GB/s both directions
    p.intra_latency_us = 5;
    return p;
}
GpuProfile h100(double hbm_gib, double hbm_gbps) {
    GpuProfile p;
    p.bf16_tflops = 989;
    p.fp16_tflops = 989;
    p.tf32_tflops = 494;
    p.fp32_tflops = 67;
    p.hbm_gib = hbm_gib;
    p.hbm_gbps = hbm_gbps;
    p.nvlink_gbps = 450;  // NVLink 4: 900 GB/s both directions
    p.intra_latency_us = 5;
    return p;
}

// The node's network: InfiniBand with one HCA per GPU (DGX), or EFA shared
// by the node's 8 GPUs (AWS).
GpuProfile with_network(GpuProfile p, std::string name, std::string description,
                        double node_gbit, double efficiency) {
    p.name = std::move(name);
    p.description = std::move(description);
    p.network_gbps = node_gbit / 8.0 / p.gpus_per_node;
    p.network_efficiency = efficiency;
    p.inter_latency_us = 10;
    return p;
}

std::vector<GpuProfile> make_builtins() {
    constexpr double ib = 0.92, efa = 0.8;
    return {
        with_network(a100(40, 1555), "a100-40gb-sxm",
                     "8x A100 40GB SXM4, NVSwitch, 8x HDR InfiniBand 200 Gb/s (DGX A100)", 1600, ib),
        with_network(a100(80, 2039), "a100-80gb-sxm",
                     "8x A100 80GB SXM4, NVSwitch, 8x HDR InfiniBand 200 Gb/s (DGX A100, Selene)",
                     1600, ib),
        with_network(h100(80, 3350), "h100-sxm",
                     "8x H100 80GB SXM5, NVSwitch, 8x NDR InfiniBand 400 Gb/s (DGX H100)", 3200, ib),
        with_network(h100(141, 4800), "h200-sxm",
                     "8x H200 141GB SXM5, NVSwitch, 8x NDR InfiniBand 400 Gb/s (DGX H200)", 3200,
                     ib),
        with_network(a100(40, 1555), "p4d.24xlarge",
                     "AWS p4d.24xlarge: 8x A100 40GB, NVSwitch, 400 Gb/s EFA per node", 400, efa),
        with_network(a100(80, 2039), "p4de.24xlarge",
                     "AWS p4de.24xlarge: 8x A100 80GB, NVSwitch, 400 Gb/s EFA per node", 400, efa),
        with_network(h100(80, 3350), "p5.48xlarge",
                     "AWS p5.48xlarge: 8x H100 80GB, NVSwitch, 3200 Gb/s EFA per node", 3200, efa),
        with_network(h100(141, 4800), "p5e.48xlarge",
                     "AWS p5e.48xlarge: 8x H200 141GB, NVSwitch, 3200 Gb/s EFA per node", 3200,
                     efa),
    };
}

std::string known_names() {
    std::string s;
    for (const GpuProfile& p : builtin_gpu_profiles()) s += (s.empty() ? "" : ", ") + p.name;
    return s;
}

}  // namespace

const std::vector<GpuProfile>& builtin_gpu_profiles() {
    static const std::vector<GpuProfile> profiles = make_builtins();
    return profiles;
}

const GpuProfile& gpu_profile_by_name(const std::string& name) {
    for (const GpuProfile& p : builtin_gpu_profiles())
        if (p.name == name) return p;
    LOOM_FAIL("unknown machine '{}' (built-in: {}; or give a YAML file)", name, known_names());
}

GpuProfile gpu_profile_from_yaml(const std::string& path) {
    YAML::Node root;
    try {
        root = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
        LOOM_FAIL("machine file '{}' not found or unreadable", path);
    } catch (const YAML::Exception& e) {
        LOOM_FAIL("{}:{}: {}", path, e.mark.line + 1, e.msg);
    }
    LOOM_CHECK(root.IsMap(), "{}: expected a mapping of profile keys", path);
    GpuProfile p;
    if (const YAML::Node base = root["base"]) p = gpu_profile_by_name(base.as<std::string>());
    p.name = std::filesystem::path(path).stem().string();
    std::map<std::string, std::function<void(const YAML::Node&)>> setters;
    auto number = [&](const char* key, double& out) {
        setters[key] = [&out, key, &path](const YAML::Node& n) {
            double v = 0;
            try {
                v = n.as<double>();
            } catch (const YAML::Exception&) {
                LOOM_FAIL("{}:{}: {}: expected a number", path, n.Mark().line + 1, key);
            }
            LOOM_CHECK(v >= 0, "{}:{}: {}: expected a number >= 0, got {}", path,
                       n.Mark().line + 1, key, v);
            out = v;
        };
    };
    number("bf16_tflops", p.bf16_tflops);
    number("fp16_tflops", p.fp16_tflops);
    number("tf32_tflops", p.tf32_tflops);
    number("fp32_tflops", p.fp32_tflops);
    number("hbm_gib", p.hbm_gib);
    number("hbm_gbps", p.hbm_gbps);
    number("nvlink_gbps", p.nvlink_gbps);
    number("intra_latency_us", p.intra_latency_us);
    number("network_gbps", p.network_gbps);
    number("inter_latency_us", p.inter_latency_us);
    number("gemm_efficiency", p.gemm_efficiency);
    number("gemm_half_dim", p.gemm_half_dim);
    number("hbm_efficiency", p.hbm_efficiency);
    number("nvlink_efficiency", p.nvlink_efficiency);
    number("network_efficiency", p.network_efficiency);
    number("reserved_gib", p.reserved_gib);
    number("allocator_margin", p.allocator_margin);
    double gpus = p.gpus_per_node;
    number("gpus_per_node", gpus);
    setters["name"] = [&p](const YAML::Node& n) { p.name = n.as<std::string>(); };
    setters["description"] = [&p](const YAML::Node& n) { p.description = n.as<std::string>(); };
    setters["base"] = [](const YAML::Node&) {};
    for (const auto& kv : root) {
        const std::string key = kv.first.as<std::string>();
        auto it = setters.find(key);
        if (it == setters.end()) {
            std::string names;
            for (const auto& [k, f] : setters) names += (names.empty() ? "" : ", ") + k;
            LOOM_FAIL("{}:{}: unknown key '{}' (expected one of: {})", path,
                      kv.first.Mark().line + 1, key, names);
        }
        it->second(kv.second);
    }
    LOOM_CHECK(gpus >= 1 && gpus == double(int(gpus)), "{}: gpus_per_node: expected an integer >= 1",
               path);
    p.gpus_per_node = int(gpus);
    LOOM_CHECK(p.bf16_tflops > 0 || p.fp16_tflops > 0 || p.fp32_tflops > 0,
               "{}: no peak given (bf16_tflops, fp16_tflops or fp32_tflops, or base: NAME)", path);
    LOOM_CHECK(p.hbm_gib > 0 && p.hbm_gbps > 0, "{}: hbm_gib and hbm_gbps must be > 0", path);
    LOOM_CHECK(p.nvlink_gbps > 0 && p.network_gbps > 0,
               "{}: nvlink_gbps and network_gbps must be > 0", path);
    LOOM_CHECK(p.gemm_efficiency > 0 && p.gemm_efficiency <= 1 && p.hbm_efficiency > 0 &&
                   p.hbm_efficiency <= 1 && p.nvlink_efficiency > 0 &&
                   p.nvlink_efficiency <= 1 && p.network_efficiency > 0 &&
                   p.network_efficiency <= 1 && p.allocator_margin < 1,
               "{}: efficiencies must be in (0, 1] and allocator_margin below 1", path);
    if (p.description.empty()) p.description = "defined in " + path;
    return p;
}

GpuProfile gpu_profile_resolve(const std::string& s) {
    const bool yaml = s.ends_with(".yaml") || s.ends_with(".yml");
    return yaml ? gpu_profile_from_yaml(s) : gpu_profile_by_name(s);
}

double gpu_peak_tflops(const GpuProfile& p, const std::string& precision) {
    if (precision == "bf16") return p.bf16_tflops;
    if (precision == "fp16") return p.fp16_tflops;
    if (precision == "tf32") return p.tf32_tflops;
    if (precision == "fp32") return p.fp32_tflops;
    LOOM_FAIL("precision '{}': expected bf16, fp16, tf32 or fp32", precision);
}

}  // namespace loom

// GPU node profiles for the cluster planner: the figures of one node type
// (per-GPU peaks, HBM, NVLink inside the node, the network between nodes)
// and the few efficiency factors the cost model applies to them. The built-in
// profiles and the source of every figure are listed in docs/plan-machines.md;
// a YAML file can define another (gpu_profile_from_yaml).
//
// Invariant: every figure is per GPU, in base units the names say (TFLOP/s,
// GiB, GB/s, microseconds). Nothing here measures anything.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct GpuProfile {
    std::string name;         // what --machine selects
    std::string description;  // one line: GPU, node, network
    // Dense (no sparsity) tensor-core peaks per GPU, TFLOP/s.
    double bf16_tflops = 0, fp16_tflops = 0, tf32_tflops = 0, fp32_tflops = 0;
    double hbm_gib = 0;   // memory per GPU
    double hbm_gbps = 0;  // HBM bandwidth per GPU, GB/s
    int gpus_per_node = 8;
    double nvlink_gbps = 0;     // per GPU per direction inside the node (NVSwitch), GB/s
    double intra_latency_us = 0;
    double network_gbps = 0;    // per GPU per direction between nodes, GB/s
    double inter_latency_us = 0;
    // How much of the nominal figures a tuned kernel or collective reaches.
    double gemm_efficiency = 0.8;   // large, square-ish GEMM vs peak
    double gemm_half_dim = 96;      // a GEMM dimension d costs a factor d / (d + this)
    double hbm_efficiency = 0.8;    // streaming kernels vs nominal HBM bandwidth
    double nvlink_efficiency = 0.77;  // NCCL bus bandwidth vs nominal NVLink
    double network_efficiency = 1.0;  // NCCL bus bandwidth vs nominal network
    double reserved_gib = 1.0;        // CUDA context, cuBLAS workspace, NCCL buffers
    double allocator_margin = 0.05;   // share of the rest lost to fragmentation
};

const std::vector<GpuProfile>& builtin_gpu_profiles();

// A built-in profile by name; throws listing the known names.
const GpuProfile& gpu_profile_by_name(const std::string& name);

// A profile from a YAML file: `base: NAME` (optional) then any of the field
// names above as keys. Unknown keys and bad values throw naming the file, the
// line and the key.
GpuProfile gpu_profile_from_yaml(const std::string& path);

// A name of a built-in profile, or a path to a YAML file (ends in .yaml/.yml).
GpuProfile gpu_profile_resolve(const std::string& name_or_path);

// Peak TFLOP/s of the precision "bf16", "fp16", "tf32" or "fp32".
double gpu_peak_tflops(const GpuProfile& p, const std::string& precision);

}  // namespace loom

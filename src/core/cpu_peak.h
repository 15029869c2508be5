// The dense arithmetic peak of this CPU, measured rather than looked up.
//
// Every OpenMP thread runs independent chains of the widest multiply-add this
// build targets: AVX512_BF16 dot products (vdpbf16ps, 64 flops a zmm) for bf16,
// AVX-512 or AVX2 FMA for fp32. Their summed rate is what MFU on a CPU is
// counted against: clock boost, a virtual machine's share of its cores and how
// many multiply-add pipes the core has are all in it, which a figure from the
// model name would get wrong (the 2-core build machine runs one zmm
// multiply-add a cycle per core).
#pragma once

#include <cstdint>
#include <string_view>

namespace loom {

struct CpuPeak {
    double gflops = 0;             // 0: the build has no such instruction
    std::string_view instruction;  // "vdpbf16ps zmm", "vfmadd231ps zmm", ...
    double flops_per_instruction = 0;
    int threads = 0;
};

// The best of a few runs of about `seconds` each, on every OpenMP thread.
CpuPeak measure_cpu_peak(bool bf16, double seconds = 0.03);

// One thread's chains for `iters` rounds from accumulators start + chain
// index, every lane of every product 1 x 1: each accumulator lane ends at
// start + chain + iters * flops_per_instruction / (2 * lanes). Returns the sum
// of all lanes of all chains (tests check the flop count with it).
double cpu_peak_chains(bool bf16, int64_t iters, float start);

}  // namespace loom

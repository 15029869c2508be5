#!/usr/bin/env bash
# Configure and build one preset (default cpu-release). Used by demo and test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:-cpu-release}
shift || true
cd "$root"
bash scripts/install_deps.sh
# Debian's environment pins OpenBLAS to Haswell kernels; auto-detect instead.
unset OPENBLAS_CORETYPE
# ccache: the presets compile the CPU libraries with the same flags (the CUDA
# one adds its own sources), so a second preset reuses the first's objects.
launcher=()
if command -v ccache >/dev/null 2>&1 && [[ "$*" != *COMPILER_LAUNCHER* ]]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake --preset "$preset" "${launcher[@]}" "$@" >/dev/null
# LOOM_BUILD_TARGETS (space-separated) limits the build to those targets.
targets=()
for t in ${LOOM_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}"

#!/usr/bin/env bash
# Installs the Debian packages Loom builds and tests with. As root it runs
# apt-get; otherwise it prints the apt-get line to run and stops.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache  # scripts/build.sh: the CUDA build reuses the CPU build's objects
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  libutf8proc-dev libpcre2-dev
  zlib1g-dev libzstd-dev zstd
  libcurl4-openssl-dev s3cmd
  libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client munge
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes fortunes-min
  clang libclang-rt-14-dev
  jq python3-yaml  # tests/cli/plan_gpu.sh, plan_calibrate.sh
)
# slurmctld, slurmd, slurm-client and munge: tests/cli/slurm.sh starts a
# one-node cluster on loopback with its own configuration and daemons.
# The s3:// and Hub tests run small servers and clients from npm on node.
# A node already there (Debian's or NodeSource's, which bundles npm) is kept.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
# The peer benchmarks (bench/*.py) compare against Debian's PyTorch.
if [[ "${LOOM_WITH_TORCH:-0}" == 1 ]]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 && $(id -u) -ne 0 ]]; then
  echo "Loom needs these Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "Installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The s3:// tests start s3rver (npm, pinned in tests/s3rver) on loopback;
# where node or the npm registry is missing they skip and say why.
if command -v npm >/dev/null 2>&1; then
  bash "$(dirname "$0")/install_npm_tool.sh" s3rver node_modules/s3rver/bin/s3rver.js >/dev/null ||
    echo "note: s3rver could not be installed now; the s3:// tests try again" >&2
  # The Hub tests check Loom against the official @huggingface/hub client.
  bash "$(dirname "$0")/install_npm_tool.sh" hub node_modules/@huggingface/hub/package.json >/dev/null ||
    echo "note: @huggingface/hub could not be installed now; the Hub tests try again" >&2
fi

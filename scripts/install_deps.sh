#!/usr/bin/env bash
# Installs the Debian packages Loom builds and tests with. As root it runs
# apt-get; otherwise it prints the apt-get line to run and stops.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev libopenblas-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  libutf8proc-dev libpcre2-dev
  libcurl4-openssl-dev s3cmd
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes fortunes-min
  clang libclang-rt-14-dev
)
# The peer benchmarks (bench/*.py) compare against Debian's PyTorch.
if [[ "${LOOM_WITH_TORCH:-0}" == 1 ]]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "Loom needs these Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "Installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# scripts/gpu-check's test filter against this build's tests: it must select
# every run on the CUDA backend that the build registers (the model, layout
# and trainer suites' ones end in "cuda" followed, in the gtest name, by
# "  # GetParam() = ...", which an end-anchored filter once missed), the CUDA
# suites and the GPU command-line tests, and leave the CPU and staged runs
# out. Needs no GPU: ctest only lists.
#   $1 = source folder, $2 = build folder
set -euo pipefail
filter=$("$1/scripts/gpu-check" --print-filter)
all=$(ctest --test-dir "$2" -N | grep -E 'Test +#' | sed 's/^ *Test *#[0-9]*: //')
picked=$(ctest --test-dir "$2" -N -R "$filter" | grep -E 'Test +#' | sed 's/^ *Test *#[0-9]*: //')
device=$(grep -E '[_/](on_)?cuda( |$)' <<<"$all" | grep -v '^cuda\.' || true)
missing=$(comm -23 <(sort <<<"$device") <(sort <<<"$picked") | sed '/^$/d')
if [[ -n $missing ]]; then
  echo "FAIL: the filter '$filter' misses these runs on the CUDA backend:"; echo "$missing"; exit 1
fi
for want in 'cuda.CudaDeviceOps.' 'cli.train_gpu'; do
  grep -qF "$want" <<<"$picked" || { echo "FAIL: the filter '$filter' misses $want"; exit 1; }
done
if grep -E '_cpu  #|_staged  #|/staged|/on_cpu' <<<"$picked"; then
  echo "FAIL: the filter '$filter' selects the runs above, which need no GPU"; exit 1
fi
echo "gpu-check's filter selects $(wc -l <<<"$picked") tests, $(wc -l <<<"$device") of them device runs of other suites"

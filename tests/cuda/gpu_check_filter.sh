#!/usr/bin/env bash
# scripts/gpu-check's test filter against this build's tests: it must select
# the CUDA runs of the model, layout and trainer suites (gtest names carry
# "  # GetParam() = ..." after the parameter, which an end-anchored filter
# once missed), the CUDA suites and the GPU command-line tests, and leave
# the CPU and staged runs out. Needs no GPU: ctest only lists.
#   $1 = source folder, $2 = build folder
set -euo pipefail
filter=$("$1/scripts/gpu-check" --print-filter)
list=$(ctest --test-dir "$2" -N -R "$filter")
for want in 'cuda.CudaDeviceOps.' 'cli.train_gpu' \
            'HfParity.BackwardEveryGradientByName/bert_mlm_cuda' \
            'TrainerOnDevice.TrainsAsOnTheCpu/cuda' \
            'ActivationOffloading.GradientsAreBitwiseTheKeptActivationsOnes/on_cuda'; do
  grep -qF "$want" <<<"$list" || { echo "FAIL: the filter '$filter' misses $want"; exit 1; }
done
if grep -E '_cpu  #|_staged  #|/staged|/on_cpu' <<<"$list"; then
  echo "FAIL: the filter '$filter' selects the runs above, which need no GPU"; exit 1
fi
echo "gpu-check's filter selects $(grep -c 'Test *#' <<<"$list") tests"

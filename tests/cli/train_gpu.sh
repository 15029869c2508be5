#!/usr/bin/env bash
# `loom train` on a GPU (the CUDA executor) against the same job on the CPU:
#   - fp32: per-step losses and clipped grad norms within relative 1e-4 and
#     final parameters within 1e-3 after 10 AdamW steps at lr 1e-2, for BERT
#     masked LM and GPT-2 causal LM (dropout on: masks are keyed alike);
#   - bf16 and fp16 (fp32 master weights; fp16 with a dynamic loss scale):
#     the CPU's loss curve within 3%;
#   - a checkpoint written on the GPU resumes on the CPU (and the reverse)
#     with the uninterrupted run's losses: checkpoints do not know the device;
#   - LAMB (per-tensor trust ratios) and SGD on the GPU follow the same
#     optimizer on the CPU within the fp32 tolerances, and a LAMB checkpoint
#     written on the GPU resumes on the CPU;
#   - use_cpu: true keeps a CUDA build on the CPU.
# Skips (exit 0, "SKIP: ...") when this loom has no CUDA or sees no GPU.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
if why=$("$loom" bench --model tiny-bert --device cuda --steps 1 --warmup 0 2>&1 >/dev/null); then
  :
else
  echo "SKIP: no GPU training here: $(tail -1 <<<"$why")"; exit 0
fi

layout_configs
layout_job masked-lm bert.json wordpiece-multilingual-cased > gpu_mlm.yaml
layout_job causal-lm gpt2.json unigram-albert-style > gpu_clm.yaml
cpu="--set hyperparameters.use_cpu=true"
gcompare() { python3 "$here/compare_runs.py" "$1" "$2" "${3:-1e-4}" "${4:-1e-3}" "${5:-1e-4}"; }

for t in mlm clm; do
  echo "== $t: CPU, GPU fp32, GPU bf16"
  "$loom" train gpu_$t.yaml --quiet $cpu --set hyperparameters.output_dir=${t}_cpu
  out=$("$loom" train gpu_$t.yaml --set hyperparameters.output_dir=${t}_gpu 2>&1)
  grep -q "training on cuda" <<<"$out" || { echo "FAIL: no 'training on cuda' line:"; echo "$out"; exit 1; }
  gcompare ${t}_cpu ${t}_gpu
  "$loom" train gpu_$t.yaml --quiet --set hyperparameters.bf16=true \
      --set hyperparameters.output_dir=${t}_bf16
  "$loom" train gpu_$t.yaml --quiet $cpu --set hyperparameters.bf16=true \
      --set hyperparameters.output_dir=${t}_cpu_bf16
  # bf16 on the GPU rounds activations too (the CPU only its GEMM operands).
  gcompare ${t}_cpu ${t}_bf16 3e-2 5e-2 1e-1
  # fp16 with GradScaler's dynamic loss scale: the fp32 curve within 3%.
  "$loom" train gpu_$t.yaml --quiet --set hyperparameters.fp16=true \
      --set hyperparameters.output_dir=${t}_fp16
  gcompare ${t}_cpu ${t}_fp16 3e-2 5e-2 1e-1
done

echo "== checkpoints move between devices"
mkdir g2c c2g
cp -r mlm_gpu/checkpoint-4 g2c/
cp -r mlm_cpu/checkpoint-4 c2g/
"$loom" train gpu_mlm.yaml --quiet $cpu --set hyperparameters.output_dir=g2c \
    --set hyperparameters.resume_from_checkpoint=latest
"$loom" train gpu_mlm.yaml --quiet --set hyperparameters.output_dir=c2g \
    --set hyperparameters.resume_from_checkpoint=latest
gcompare mlm_cpu g2c
gcompare mlm_cpu c2g

for o in lamb sgd; do
  echo "== $o: CPU against GPU fp32 (mlm and clm)"
  for t in mlm clm; do
    "$loom" train gpu_$t.yaml --quiet $cpu --set hyperparameters.optim=$o \
        --set hyperparameters.output_dir=${t}_${o}_cpu
    out=$("$loom" train gpu_$t.yaml --set hyperparameters.optim=$o \
        --set hyperparameters.output_dir=${t}_${o}_gpu 2>&1)
    grep -q "training on cuda" <<<"$out" ||
      { echo "$out"; echo "FAIL: optim $o did not train on the GPU"; exit 1; }
    gcompare ${t}_${o}_cpu ${t}_${o}_gpu
  done
done
mkdir lamb_g2c
cp -r mlm_lamb_gpu/checkpoint-4 lamb_g2c/
"$loom" train gpu_mlm.yaml --quiet $cpu --set hyperparameters.optim=lamb \
    --set hyperparameters.output_dir=lamb_g2c --set hyperparameters.resume_from_checkpoint=latest
gcompare mlm_lamb_cpu lamb_g2c

out=$("$loom" train gpu_mlm.yaml $cpu --set hyperparameters.output_dir=mlm_cpu2 2>&1)
if grep -q "training on cuda" <<<"$out"; then echo "FAIL: use_cpu: true trained on the GPU"; exit 1; fi
echo "train_gpu: all checks passed"

#!/usr/bin/env bash
# Data parallelism on GPUs: `mpirun -np 2 loom train` with one GPU per rank and
# the gradients all-reduced over NCCL while backward runs, against the same
# global batch on one GPU:
#   - fp32: per-step losses and clipped grad norms within relative 1e-4 and
#     final parameters within 1e-3 after 10 AdamW steps at lr 1e-2, for BERT
#     masked LM and GPT-2 causal LM; bf16 within the bf16 tolerances of
#     train_gpu.sh;
#   - accumulation 2 x dp 2 x batch 2 = one GPU with batch 8; many small
#     buckets (bucket_size_mb 0.01) and overlap_comm: false give the same run;
#   - a dp 2 GPU checkpoint resumes on one GPU, and a one-GPU checkpoint at
#     dp 2, with the uninterrupted run's losses;
#   - ZeRO-1 and ZeRO-2 on 2 GPUs (gradients reduce-scattered into shards,
#     sharded update, parameters all-gathered; ZeRO-2 with accumulation 2)
#     follow the one-GPU run as tightly as ZeRO-0, print what the sharding
#     saves, and a ZeRO-2 dp 2 checkpoint (its optimizer state gathered into
#     global tensors) resumes on one GPU and on the CPU with the
#     uninterrupted run's losses; LAMB under ZeRO-2 follows LAMB on one GPU.
# Skips (exit 0, "SKIP: ...") without mpirun, when this loom has no CUDA or
# sees no GPU, and when fewer than 2 GPUs are usable.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
if ! why=$("$loom" bench --model tiny-bert --device cuda --steps 1 --warmup 0 2>&1 >/dev/null); then
  echo "SKIP: no GPU training here: $(tail -1 <<<"$why")"; exit 0
fi
if ! why=$("$loom" bench --model tiny-bert --device cuda --gpu 1 --steps 1 --warmup 0 2>&1 >/dev/null); then
  echo "SKIP: data parallel on GPUs needs 2 GPUs, GPU 1 is not usable: $(tail -1 <<<"$why")"; exit 0
fi

layout_configs
layout_job masked-lm bert.json wordpiece-multilingual-cased > gpu_mlm.yaml
layout_job causal-lm gpt2.json unigram-albert-style > gpu_clm.yaml
# LOSS_RTOL PARAM_ATOL GRAD_NORM_RTOL, as train_gpu.sh.
gcompare() { python3 "$here/compare_runs.py" "$1" "$2" "${3:-1e-4}" "${4:-1e-3}" "${5:-1e-4}"; }
bf16="--set hyperparameters.bf16=true"
half="--set hyperparameters.per_device_train_batch_size=4"

for t in mlm clm; do
  echo "== $t: one GPU vs dp 2 on 2 GPUs, fp32 and bf16"
  "$loom" train gpu_$t.yaml --quiet --set hyperparameters.output_dir=${t}_g1
  out=$(mpi 2 "$loom" train gpu_$t.yaml $half --set hyperparameters.output_dir=${t}_g2 2>&1)
  grep -q "data parallel on GPUs" <<<"$out" ||
    { echo "$out"; echo "FAIL: dp 2 did not train on the GPUs"; exit 1; }
  gcompare ${t}_g1 ${t}_g2
  "$loom" train gpu_$t.yaml --quiet $bf16 --set hyperparameters.output_dir=${t}_g1_bf16
  train_on gpu_$t.yaml ${t}_g2_bf16 2 $half $bf16
  # bf16 gradients: two half-batch sums added in bf16 round differently
  # from one whole-batch sum.
  gcompare ${t}_g1_bf16 ${t}_g2_bf16 3e-2 5e-2 1e-1
done

echo "== accumulation 2 x dp 2 x batch 2; small buckets; no overlap"
train_on gpu_mlm.yaml mlm_ga 2 --set hyperparameters.per_device_train_batch_size=2 \
    --set hyperparameters.gradient_accumulation_steps=2
gcompare mlm_g1 mlm_ga
out=$(mpi 2 "$loom" train gpu_mlm.yaml $half --set hyperparameters.output_dir=mlm_small \
    --set distribution.bucket_size_mb=0.01 2>&1)
# 10 KiB buckets: the layers' buckets start from the grad-ready hook.
grep -Eq "gradient buckets: [1-9][0-9]* started while backward ran" <<<"$out" ||
  { echo "$out"; echo "FAIL: no bucket started while backward ran"; exit 1; }
gcompare mlm_g1 mlm_small
train_on gpu_mlm.yaml mlm_serial 2 $half --set distribution.overlap_comm=false
gcompare mlm_g1 mlm_serial

echo "== checkpoints move between one GPU and dp 2"
mkdir d2to1 1tod2
cp -r mlm_g2/checkpoint-4 d2to1/
cp -r mlm_g1/checkpoint-4 1tod2/
"$loom" train gpu_mlm.yaml --quiet --set hyperparameters.output_dir=d2to1 \
    --set hyperparameters.resume_from_checkpoint=latest
train_on gpu_mlm.yaml 1tod2 2 $half --set hyperparameters.resume_from_checkpoint=latest
gcompare mlm_g1 d2to1
gcompare mlm_g1 1tod2

echo "== ZeRO-1 and ZeRO-2 on 2 GPUs against one GPU"
for z in 1 2; do
  out=$(mpi 2 "$loom" train gpu_mlm.yaml $half --set hyperparameters.output_dir=mlm_z$z \
      --set distribution.zero_stage=$z 2>&1)
  # The executor prints "per rank vs ZeRO-0", the model stack "per rank (saves .. vs DDP)".
  grep -Eq "data parallel on GPUs.*ZeRO-$z.*per rank.*vs (ZeRO-0|DDP)" <<<"$out" ||
    { echo "$out"; echo "FAIL: ZeRO-$z did not train on the GPUs or did not print its memory"; exit 1; }
  if grep -q "training on the CPU" <<<"$out"; then echo "FAIL: ZeRO-$z fell back to the CPU"; exit 1; fi
  gcompare mlm_g1 mlm_z$z
done
train_on gpu_mlm.yaml mlm_z2_ga 2 --set hyperparameters.per_device_train_batch_size=2 \
    --set hyperparameters.gradient_accumulation_steps=2 --set distribution.zero_stage=2
gcompare mlm_g1 mlm_z2_ga
train_on gpu_clm.yaml clm_z2 2 $half --set distribution.zero_stage=2
gcompare clm_g1 clm_z2

echo "== a ZeRO-2 dp 2 checkpoint resumes on one GPU and on the CPU"
mkdir z2to1 z2tocpu
cp -r mlm_z2/checkpoint-4 z2to1/
cp -r mlm_z2/checkpoint-4 z2tocpu/
"$loom" train gpu_mlm.yaml --quiet --set hyperparameters.output_dir=z2to1 \
    --set hyperparameters.resume_from_checkpoint=latest
gcompare mlm_g1 z2to1
"$loom" train gpu_mlm.yaml --quiet --set hyperparameters.output_dir=z2tocpu \
    --set hyperparameters.use_cpu=true --set hyperparameters.resume_from_checkpoint=latest
gcompare mlm_g1 z2tocpu

echo "== LAMB under ZeRO-2 on 2 GPUs against LAMB on one GPU"
lamb="--set hyperparameters.optim=lamb"
"$loom" train gpu_mlm.yaml --quiet $lamb --set hyperparameters.output_dir=mlm_lamb_g1
train_on gpu_mlm.yaml mlm_lamb_z2 2 $half $lamb --set distribution.zero_stage=2
gcompare mlm_lamb_g1 mlm_lamb_z2
echo "train_gpu_dp: all checks passed"

#!/usr/bin/env bash
# Tensor parallelism on GPUs: `mpirun -np 2 loom train` with
# tensor_parallel_degree 2, one GPU per rank, the Megatron collectives of the
# sharded linears, the vocab-parallel embedding and cross-entropy posted on an
# NCCL twin of the tp group by the one model stack (pp 1) or the CUDA executor
# (pp 2), against the same job on one GPU:
#   - fp32: per-step losses and clipped global grad norms (tp-replicated rows
#     counted once) within relative 1e-4, final parameters within 1e-3 after
#     10 AdamW steps at lr 1e-2, for BERT masked LM and GPT-2 causal LM
#     (tiny-bert's 5859 tokens do not divide by 2: the padded slice runs);
#     bf16 within train_gpu_dp.sh's bf16 limits;
#   - dp 2 x tp 2 (4 GPUs; skipped with a note on fewer) against one GPU
#     under ZeRO-0, ZeRO-1 and ZeRO-2 (the sharded norm leaves the
#     tp-replicated rows out of each dp rank's shard), each checked to have
#     trained on the GPUs with the stage it asked for;
#   - a tp 2 checkpoint holds global tensors: resumed on one GPU it
#     reproduces the uninterrupted run's losses;
#   - pp 2 x tp 2 (4 GPUs; skipped with a note on fewer): the pipeline's
#     stages (tests/cli/train_gpu_pp.sh) each a tp slice, against one GPU.
# Skips (exit 0, "SKIP: ...") without mpirun, when this loom has no CUDA or
# sees no GPU, and when fewer than 2 GPUs are usable.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
gpu_usable() { "$loom" bench --model tiny-bert --device cuda --gpu "$1" --steps 1 --warmup 0 2>&1 >/dev/null; }
if ! why=$(gpu_usable 0); then
  echo "SKIP: no GPU training here: $(tail -1 <<<"$why")"; exit 0
fi
if ! why=$(gpu_usable 1); then
  echo "SKIP: tensor parallel on GPUs needs 2 GPUs, GPU 1 is not usable: $(tail -1 <<<"$why")"
  exit 0
fi

layout_configs
layout_job masked-lm bert.json wordpiece-multilingual-cased > gtp_mlm.yaml
layout_job causal-lm gpt2.json unigram-albert-style > gtp_clm.yaml
# LOSS_RTOL PARAM_ATOL GRAD_NORM_RTOL as train_gpu_dp.sh; attention key biases
# have an exactly zero gradient, so only rounding noise moves them (train_tp.sh).
noise='attention\.self\.key\.bias|attention\.key\.bias|k_lin\.bias'
gcompare() {
  python3 "$here/compare_runs.py" "$1" "$2" "${3:-1e-4}" "${4:-1e-3}" "${5:-1e-4}" "$noise"
}
T2="--set distribution.tensor_parallel_degree=2"
bf16="--set hyperparameters.bf16=true"
# Rank 0's notes must say the slice trained on a GPU, not on the CPU.
on_gpu() {
  grep -q "training on cuda:" <<<"$1" && grep -q "tensor parallel rank 0 of 2" <<<"$1" &&
    ! grep -q "training on the CPU" <<<"$1"
}

for t in mlm clm; do
  echo "== $t: one GPU vs tp 2 on 2 GPUs, fp32 and bf16"
  "$loom" train gtp_$t.yaml --quiet --set hyperparameters.output_dir=${t}_g1
  out=$(mpi 2 "$loom" train gtp_$t.yaml $T2 --set hyperparameters.output_dir=${t}_tp2 2>&1)
  on_gpu "$out" || { echo "$out"; echo "FAIL: tp 2 did not train on the GPUs"; exit 1; }
  gcompare ${t}_g1 ${t}_tp2
  "$loom" train gtp_$t.yaml --quiet $bf16 --set hyperparameters.output_dir=${t}_g1_bf16
  train_on gtp_$t.yaml ${t}_tp2_bf16 2 $T2 $bf16
  # bf16: the row-parallel sums add two bf16 partial products.
  gcompare ${t}_g1_bf16 ${t}_tp2_bf16 3e-2 5e-2 1e-1
done

echo "== a tp 2 checkpoint resumes on one GPU"
mkdir tp2to1
cp -r mlm_tp2/checkpoint-4 tp2to1/
"$loom" train gtp_mlm.yaml --quiet --set hyperparameters.output_dir=tp2to1 \
    --set hyperparameters.resume_from_checkpoint=latest
gcompare mlm_g1 tp2to1

if why=$(gpu_usable 3); then
  echo "== dp 2 x tp 2 on 4 GPUs, ZeRO-0, 1 and 2"
  for t in mlm clm; do
    for z in 0 1 2; do
      out=$(mpi 4 "$loom" train gtp_$t.yaml $T2 --set distribution.zero_stage=$z \
          --set hyperparameters.per_device_train_batch_size=4 \
          --set hyperparameters.output_dir=${t}_dp2tp2z$z 2>&1) || { echo "$out"; exit 1; }
      on_gpu "$out" && grep -q "data parallel on GPUs" <<<"$out" ||
        { echo "$out"; echo "FAIL: dp 2 x tp 2 (ZeRO-$z) did not train on the GPUs"; exit 1; }
      [[ $z == 0 ]] || grep -q "ZeRO-$z: gradients" <<<"$out" ||
        { echo "$out"; echo "FAIL: dp 2 x tp 2 did not shard with ZeRO-$z"; exit 1; }
      gcompare ${t}_g1 ${t}_dp2tp2z$z
    done
  done
  echo "== a dp 2 x tp 2 ZeRO-2 checkpoint resumes on one GPU"
  mkdir dp2tp2z2to1
  cp -r mlm_dp2tp2z2/checkpoint-4 dp2tp2z2to1/
  "$loom" train gtp_mlm.yaml --quiet --set hyperparameters.output_dir=dp2tp2z2to1 \
      --set hyperparameters.resume_from_checkpoint=latest
  gcompare mlm_g1 dp2tp2z2to1
else
  echo "NOTE: dp 2 x tp 2 not run, it needs 4 GPUs: $(tail -1 <<<"$why")"
fi

if why=$(gpu_usable 3); then
  echo "== pp 2 x tp 2 on 4 GPUs"
  for t in mlm clm; do
    out=$(mpi 4 "$loom" train gtp_$t.yaml $T2 --set distribution.pipeline_parallel_degree=2 \
        --set distribution.microbatches=2 --set hyperparameters.output_dir=${t}_pp2tp2 2>&1) ||
      { echo "$out"; exit 1; }
    on_gpu "$out" && grep -q "pipeline on GPUs" <<<"$out" ||
      { echo "$out"; echo "FAIL: pp 2 x tp 2 did not train on the GPUs"; exit 1; }
    gcompare ${t}_g1 ${t}_pp2tp2
  done
else
  echo "NOTE: pp 2 x tp 2 not run, it needs 4 GPUs: $(tail -1 <<<"$why")"
fi
echo "train_gpu_tp: all checks passed"

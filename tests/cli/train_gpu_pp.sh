#!/usr/bin/env bash
# Pipeline parallelism on GPUs: `mpirun -np 2 loom train` with
# pipeline_parallel_degree 2, one GPU per stage, the CPU's schedules
# (pipeline_schedule.h) run by PipelineParallel on the model stack's stage
# instances on each GPU, hidden states and their gradients sent between
# stages over NCCL, against the same
# job on one GPU:
#   - fp32: per-step losses and clipped global grad norms (GPT-2's tied word
#     embeddings on both stages, summed over pp and counted once) within
#     relative 1e-4, final parameters within 1e-3 after 10 AdamW steps at lr
#     1e-2, for BERT masked LM and GPT-2 causal LM (4 layers): 1F1B with 2
#     micro-batches, 1F1B and GPipe ("simple") with 4; bf16 within
#     train_gpu_dp.sh's bf16 limits;
#   - interleaved over 2 virtual stages, activation checkpointing with
#     offloading on a stage, and ALBERT (its one shared layer on both stages);
#   - dp 2 x pp 2 (4 GPUs; skipped with a note on fewer) under ZeRO-0,
#     ZeRO-1 and ZeRO-2 (the sharded norm counts GPT-2's tied rows once over
#     stages from each dp rank's shard), each checked to have trained on the
#     GPUs with the stage it asked for; a ZeRO-1 checkpoint of it (optimizer
#     shards gathered into global tensors) resumed on one GPU;
#   - a pp 2 checkpoint holds global tensors: resumed on one GPU and on the
#     CPU it reproduces the uninterrupted run's losses;
#   - pp 2 with zero_stage 1 on 2 GPUs (dp 1: nothing to shard) trains on the
#     GPUs, no longer on the CPU.
# Skips (exit 0, "SKIP: ...") without mpirun, when this loom has no CUDA or
# sees no GPU, and when fewer than 2 GPUs are usable.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
gpu_usable() { "$loom" bench --model tiny-bert --device cuda --gpu "$1" --steps 1 --warmup 0 2>&1 >/dev/null; }
if ! why=$(gpu_usable 0); then
  echo "SKIP: no GPU training here: $(tail -1 <<<"$why")"; exit 0
fi
if ! why=$(gpu_usable 1); then
  echo "SKIP: pipeline parallel on GPUs needs 2 GPUs, GPU 1 is not usable: $(tail -1 <<<"$why")"
  exit 0
fi

layout_configs
layout_job masked-lm bert.json wordpiece-multilingual-cased > gpp_mlm.yaml
layout_job causal-lm gpt2.json unigram-albert-style > gpp_clm.yaml
layout_job masked-lm albert.json wordpiece-multilingual-cased > gpp_albert.yaml
# LOSS_RTOL PARAM_ATOL GRAD_NORM_RTOL as train_gpu_dp.sh; attention key biases
# have an exactly zero gradient, so only rounding noise moves them (train_tp.sh).
noise='attention\.self\.key\.bias|attention\.key\.bias|k_lin\.bias'
gcompare() {
  python3 "$here/compare_runs.py" "$1" "$2" "${3:-1e-4}" "${4:-1e-3}" "${5:-1e-4}" "$noise"
}
P2="--set distribution.pipeline_parallel_degree=2"
bf16="--set hyperparameters.bf16=true"
# Rank 0's notes must say the stage trained on a GPU, not on the CPU.
on_gpu() {
  grep -q "training on cuda:" <<<"$1" && grep -q "pipeline on GPUs" <<<"$1" &&
    grep -q "pipeline stage 0 of 2" <<<"$1" && ! grep -q "training on the CPU" <<<"$1"
}
# pp 2 into $2 on the GPUs, checked to have run there: JOB OUT [--set ...]
pp_gpu() {
  local j=$1 o=$2 out
  shift 2
  out=$(mpi 2 "$loom" train "$j" $P2 --set hyperparameters.output_dir="$o" "$@" 2>&1) ||
    { echo "$out"; echo "FAIL: pp 2 ($o) failed"; exit 1; }
  on_gpu "$out" || { echo "$out"; echo "FAIL: pp 2 ($o) did not train on the GPUs"; exit 1; }
}

for t in mlm clm; do
  echo "== $t: one GPU vs pp 2 on 2 GPUs (1F1B x 2 and x 4, GPipe x 4), fp32 and bf16"
  "$loom" train gpp_$t.yaml --quiet --set hyperparameters.output_dir=${t}_g1
  pp_gpu gpp_$t.yaml ${t}_p2 --set distribution.microbatches=2
  pp_gpu gpp_$t.yaml ${t}_p2m4 --set distribution.microbatches=4
  pp_gpu gpp_$t.yaml ${t}_p2s --set distribution.microbatches=4 --set distribution.pipeline=simple
  for o in p2 p2m4 p2s; do gcompare ${t}_g1 ${t}_$o; done
  "$loom" train gpp_$t.yaml --quiet $bf16 --set hyperparameters.output_dir=${t}_g1_bf16
  pp_gpu gpp_$t.yaml ${t}_p2_bf16 --set distribution.microbatches=2 $bf16
  # bf16 gradients: two half-batch sums added in bf16 round differently
  # from one whole-batch sum (train_gpu_dp.sh).
  gcompare ${t}_g1_bf16 ${t}_p2_bf16 3e-2 5e-2 1e-1
done

echo "== interleaved (2 virtual stages), checkpointing + offloading, ALBERT"
pp_gpu gpp_mlm.yaml mlm_p2v2 --set distribution.microbatches=4 \
    --set distribution.pipeline=interleaved --set distribution.virtual_stages=2
gcompare mlm_g1 mlm_p2v2
pp_gpu gpp_mlm.yaml mlm_p2ck --set distribution.microbatches=2 \
    --set distribution.activation_checkpointing=true --set distribution.offload_activations=true
gcompare mlm_g1 mlm_p2ck
"$loom" train gpp_albert.yaml --quiet --set hyperparameters.output_dir=albert_g1
pp_gpu gpp_albert.yaml albert_p2 --set distribution.microbatches=2
gcompare albert_g1 albert_p2

echo "== a pp 2 checkpoint resumes on one GPU and on the CPU"
mkdir p2to1 p2tocpu
cp -r clm_p2/checkpoint-4 p2to1/
cp -r clm_p2/checkpoint-4 p2tocpu/
"$loom" train gpp_clm.yaml --quiet --set hyperparameters.output_dir=p2to1 \
    --set hyperparameters.resume_from_checkpoint=latest
gcompare clm_g1 p2to1
"$loom" train gpp_clm.yaml --quiet --set hyperparameters.output_dir=p2tocpu \
    --set hyperparameters.use_cpu=true --set hyperparameters.resume_from_checkpoint=latest
gcompare clm_g1 p2tocpu

if why=$(gpu_usable 3); then
  echo "== dp 2 x pp 2 on 4 GPUs, ZeRO-0, 1 and 2"
  for t in mlm clm; do
    for z in 0 1 2; do
      out=$(mpi 4 "$loom" train gpp_$t.yaml $P2 --set distribution.microbatches=2 \
          --set distribution.zero_stage=$z --set hyperparameters.per_device_train_batch_size=4 \
          --set hyperparameters.output_dir=${t}_d2p2z$z 2>&1) || { echo "$out"; exit 1; }
      grep -q "data parallel on GPUs" <<<"$out" && on_gpu "$out" ||
        { echo "$out"; echo "FAIL: dp 2 x pp 2 (ZeRO-$z) did not train on the GPUs"; exit 1; }
      # The executor prints "ZeRO-N: gradients ...", the model stack "ZeRO-N dp 2: ...".
      [[ $z == 0 ]] || grep -Eq "ZeRO-$z(: gradients| dp 2:)" <<<"$out" ||
        { echo "$out"; echo "FAIL: dp 2 x pp 2 did not shard with ZeRO-$z"; exit 1; }
      gcompare ${t}_g1 ${t}_d2p2z$z
    done
  done
  echo "== a dp 2 x pp 2 ZeRO-1 checkpoint resumes on one GPU"
  mkdir d2p2z1to1
  cp -r clm_d2p2z1/checkpoint-4 d2p2z1to1/
  "$loom" train gpp_clm.yaml --quiet --set hyperparameters.output_dir=d2p2z1to1 \
      --set hyperparameters.resume_from_checkpoint=latest
  gcompare clm_g1 d2p2z1to1
else
  echo "NOTE: dp 2 x pp 2 not run, it needs 4 GPUs: $(tail -1 <<<"$why")"
fi

echo "== pp 2 with ZeRO-1 on 2 GPUs (dp 1) trains on the GPUs"
pp_gpu gpp_mlm.yaml mlm_p2z1 --set distribution.microbatches=2 --set distribution.zero_stage=1
gcompare mlm_g1 mlm_p2z1
echo "train_gpu_pp: all checks passed"

#!/usr/bin/env bash
# Tensor parallelism (Megatron column/row-parallel linears) through the real
# `loom train` under mpirun (oversubscribed, one thread per rank, tiny
# models). Every layout must train the 1-rank model: per-step losses and
# clipped global grad norms within relative 1e-5 and final parameters within
# 3e-4 after 10 steps (compare_runs.py), for
#   - BERT masked LM and GPT-2 causal LM (4 layers; GPT-2's packed c_attn is
#     split by heads in each of its q, k, v blocks): tp 2, dp 2 x tp 2 (ZeRO 0
#     and 1), tp 2 x pp 2 (1F1B and interleaved), dp 2 x tp 2 x pp 2 (8
#     ranks), tp 2 with activation checkpointing and offloading (the
#     recomputed forward repeats the row-parallel all-reduces);
#   - ALBERT (one shared layer), DistilBERT and RoBERTa at tp 2;
#   - checkpoints stay global tensors: a tp 2 x pp 2 checkpoint resumed at
#     1 rank and at dp 4, and a 1-rank checkpoint resumed at tp 2 x pp 2,
#     reproduce the uninterrupted run's losses.
# The word embeddings and the LM heads are vocab-parallel: tiny-bert's 5859
# tokens do not divide by 2, so the padded last slice is exercised too.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
# Same limits as train_pp.sh: the row-parallel all-reduce sums partial GEMMs
# in another order than one GEMM, and AdamW's m / sqrt(v) amplifies that
# rounding where v is tiny (the losses agree to ~1e-7).
# The jobs clip at max_grad_norm 1 (the norms are ~2), so the logged global
# norm, which must count tp-replicated rows once, is compared as well.
# Attention key biases have an exactly zero gradient (softmax ignores a
# per-query constant), so only rounding noise moves them: a looser limit.
compare() {
  python3 "$here/compare_runs.py" "$1" "$2" 1e-5 3e-4 1e-5 \
      'attention\.self\.key\.bias|attention\.key\.bias|k_lin\.bias'
}

layout_configs
job() { layout_job "$@"; }
# (Job names unlike train_dp.sh's: its kill test looks processes up by name.)
job masked-lm bert.json wordpiece-multilingual-cased > tp_mlm.yaml
job causal-lm gpt2.json unigram-albert-style > tp_clm.yaml
for f in albert distilbert roberta; do job masked-lm $f.json wordpiece-multilingual-cased > tp_$f.yaml; done

T2="--set distribution.tensor_parallel_degree=2"
P2="--set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2"
B4="--set hyperparameters.per_device_train_batch_size=4"

for t in mlm clm; do
  echo "== $t: 1 rank, then tensor-parallel layouts"
  "$loom" train tp_$t.yaml --quiet --threads 1 --set hyperparameters.output_dir=${t}1
  train_on tp_$t.yaml ${t}_t2 2 $T2
  train_on tp_$t.yaml ${t}_d2t2 4 $T2 $B4
  train_on tp_$t.yaml ${t}_d2t2z1 4 $T2 $B4 --set distribution.zero_stage=1 \
      --set distribution.placement_strategy=spread
  train_on tp_$t.yaml ${t}_t2p2 4 $T2 $P2
  train_on tp_$t.yaml ${t}_d2t2p2 8 $T2 $P2 $B4
  train_on tp_$t.yaml ${t}_t2ck 2 $T2 --set distribution.activation_checkpointing=true \
      --set distribution.offload_activations=true
  train_on tp_$t.yaml ${t}_t2p2v2 4 $T2 --set distribution.pipeline_parallel_degree=2 \
      --set distribution.microbatches=4 --set distribution.pipeline=interleaved \
      --set distribution.virtual_stages=2
  for o in t2 d2t2 d2t2z1 t2p2 d2t2p2 t2ck t2p2v2; do compare ${t}1 ${t}_$o; done
done

for f in albert distilbert roberta; do
  echo "== $f: 1 rank and tp 2"
  "$loom" train tp_$f.yaml --quiet --threads 1 --set hyperparameters.output_dir=${f}1
  train_on tp_$f.yaml ${f}_t2 2 $T2
  compare ${f}1 ${f}_t2
done

echo "== saved at tp 2 x pp 2, resumed at 1 rank and at dp 4; saved at 1 rank, resumed at tp 2 x pp 2"
for t in mlm clm; do
  mkdir ${t}_r1 ${t}_r4 ${t}_r22
  cp -r ${t}_t2p2/checkpoint-4 ${t}_r1/
  cp -r ${t}_t2p2/checkpoint-4 ${t}_r4/
  cp -r ${t}1/checkpoint-4 ${t}_r22/
  "$loom" train tp_$t.yaml --quiet --threads 1 --set hyperparameters.output_dir=${t}_r1 \
      --set hyperparameters.resume_from_checkpoint=latest
  train_on tp_$t.yaml ${t}_r4 4 --set hyperparameters.per_device_train_batch_size=2 \
      --set hyperparameters.resume_from_checkpoint=latest
  train_on tp_$t.yaml ${t}_r22 4 $T2 $P2 --set hyperparameters.resume_from_checkpoint=latest
  for o in r1 r4 r22; do compare ${t}1 ${t}_$o; done
done

echo "== the rank map names the tp coordinate; a degree that does not divide is refused"
mpi 4 "$loom" train tp_clm.yaml --set hyperparameters.output_dir=map --set hyperparameters.max_steps=1 \
    $T2 > map.log 2>&1
grep -q "DP2-PP1-TP2 rank 1 = (dp 0, pp 0, tp 1)" map.log || { cat map.log; echo "FAIL: no rank map" >&2; exit 1; }
grep -q "tensor parallel rank 0 of 2" map.log || { cat map.log; echo "FAIL: no tp line" >&2; exit 1; }
set +e
mpi 3 "$loom" train tp_clm.yaml --set hyperparameters.output_dir=bad $T2 > bad.log 2>&1
rc=$?
set -e
[[ $rc != 0 ]] && grep -q "does not divide the 3 ranks" bad.log || { cat bad.log; echo "FAIL: tp 2 on 3 ranks accepted" >&2; exit 1; }
echo "train_tp: ok"

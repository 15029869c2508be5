#!/usr/bin/env bash
# Pipeline parallelism through the real `loom train` under mpirun
# (oversubscribed, one thread per rank, tiny models). Every layout must train
# the 1-rank model: per-step losses within relative 1e-5 and final parameters
# within 3e-4 after 10 steps (compare_runs.py), for
#   - BERT masked LM and GPT-2 causal LM (4 layers; GPT-2's tied wte sits on
#     the first and the last stage): pp 2 under 1F1B and GPipe ("simple"),
#     pp 4 with 8 micro-batches under both, dp 2 x pp 2 with ZeRO 1 and 2,
#     dp 2 x pp 4 (8 ranks) with ZeRO 1, pp 2 interleaved over 2 virtual
#     stages (and pp 4 over 2 virtual stages on 8-layer models), pp 2 with
#     activation checkpointing and offloading (which on the CPU moves
#     nothing: activations already live in host memory; the GPU executor's
#     offloading has its own tests in tests/cuda);
#   - ALBERT (one shared layer on every stage), DistilBERT and RoBERTa at pp 2;
#   - LAMB and SGD at dp 2 x pp 2 with ZeRO 1 (GPT-2);
#   - a checkpoint saved at pp 2 resumed at 1 rank and at dp 2, and a 1-rank
#     checkpoint resumed at dp 2 x pp 2: the uninterrupted run's losses.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
layout_configs
job() { layout_job "$@"; }
# (Job names unlike train_dp.sh's: its kill test looks processes up by name.)
job masked-lm bert.json wordpiece-multilingual-cased > pp_mlm.yaml
job causal-lm gpt2.json unigram-albert-style > pp_clm.yaml
job masked-lm bert8.json wordpiece-multilingual-cased > pp_mlm8.yaml
job causal-lm gpt8.json unigram-albert-style > pp_clm8.yaml
for f in albert distilbert roberta; do job masked-lm $f.json wordpiece-multilingual-cased > pp_$f.yaml; done


for t in mlm clm; do
  echo "== $t: 1 rank, then pipeline layouts"
  "$loom" train pp_$t.yaml --quiet --threads 1 --set hyperparameters.output_dir=${t}1
  train_on pp_$t.yaml ${t}_p2 2 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2
  train_on pp_$t.yaml ${t}_p2s 2 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=4 \
      --set distribution.pipeline=simple
  train_on pp_$t.yaml ${t}_p4 4 --set distribution.pipeline_parallel_degree=4 --set distribution.microbatches=8
  train_on pp_$t.yaml ${t}_p4s 4 --set distribution.pipeline_parallel_degree=4 --set distribution.microbatches=8 \
      --set distribution.pipeline=simple
  train_on pp_$t.yaml ${t}_d2p2z1 4 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2 \
      --set hyperparameters.per_device_train_batch_size=4 --set distribution.zero_stage=1
  train_on pp_$t.yaml ${t}_d2p2z2 4 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2 \
      --set hyperparameters.per_device_train_batch_size=4 --set distribution.zero_stage=2 \
      --set distribution.placement_strategy=spread
  train_on pp_$t.yaml ${t}_d2p4 8 --set distribution.pipeline_parallel_degree=4 --set distribution.microbatches=4 \
      --set hyperparameters.per_device_train_batch_size=4 --set distribution.zero_stage=1
  train_on pp_$t.yaml ${t}_p2v2 2 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=4 \
      --set distribution.pipeline=interleaved --set distribution.virtual_stages=2
  train_on pp_$t.yaml ${t}_p2ck 2 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2 \
      --set distribution.activation_checkpointing=true --set distribution.offload_activations=true
  for o in p2 p2s p4 p4s d2p2z1 d2p2z2 d2p4 p2v2 p2ck; do compare ${t}1 ${t}_$o; done
done

for t in mlm8 clm8; do
  echo "== $t (8 layers): pp 4 interleaved over 2 virtual stages, 8 micro-batches"
  "$loom" train pp_$t.yaml --quiet --threads 1 --set hyperparameters.output_dir=${t}1
  train_on pp_$t.yaml ${t}_p4v2 4 --set distribution.pipeline_parallel_degree=4 --set distribution.microbatches=8 \
      --set distribution.pipeline=interleaved --set distribution.virtual_stages=2
  compare ${t}1 ${t}_p4v2
done

for f in albert distilbert roberta; do
  echo "== $f: 1 rank and pp 2"
  "$loom" train pp_$f.yaml --quiet --threads 1 --set hyperparameters.output_dir=${f}1
  train_on pp_$f.yaml ${f}_p2 2 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2
  compare ${f}1 ${f}_p2
done

echo "== LAMB and SGD: 1 rank, then dp 2 x pp 2 with ZeRO 1 (GPT-2's tied wte on two stages)"
# (SGD at learning rate 1: without moments a step of 1e-2 would barely move
# the weights, and a stage that skipped its update would go unnoticed.)
for o in lamb sgd; do
  lr=1.0e-2; [[ $o == sgd ]] && lr=1.0
  "$loom" train pp_clm.yaml --quiet --threads 1 --set hyperparameters.optim=$o \
      --set hyperparameters.learning_rate=$lr --set hyperparameters.output_dir=clm_$o
  train_on pp_clm.yaml clm_${o}_d2p2z1 4 --set distribution.pipeline_parallel_degree=2 \
      --set distribution.microbatches=2 --set hyperparameters.per_device_train_batch_size=4 \
      --set distribution.zero_stage=1 --set hyperparameters.optim=$o \
      --set hyperparameters.learning_rate=$lr
  compare clm_$o clm_${o}_d2p2z1
done

echo "== saved at pp 2, resumed at 1 rank and at dp 2; saved at 1 rank, resumed at dp 2 x pp 2"
mkdir r1 r2 r22
cp -r clm_p2/checkpoint-4 r1/
cp -r clm_p2/checkpoint-4 r2/
cp -r clm1/checkpoint-4 r22/
"$loom" train pp_clm.yaml --quiet --threads 1 --set hyperparameters.output_dir=r1 \
    --set hyperparameters.resume_from_checkpoint=latest
train_on pp_clm.yaml r2 2 --set hyperparameters.per_device_train_batch_size=4 \
    --set hyperparameters.resume_from_checkpoint=latest
train_on pp_clm.yaml r22 4 --set distribution.pipeline_parallel_degree=2 --set distribution.microbatches=2 \
    --set hyperparameters.per_device_train_batch_size=4 --set hyperparameters.resume_from_checkpoint=latest
for o in r1 r2 r22; do compare clm1 $o; done

echo "== the rank map is printed; a bad schedule is refused naming the rule"
mpi 2 "$loom" train pp_clm.yaml --set hyperparameters.output_dir=map --set hyperparameters.max_steps=1 \
    --set distribution.pipeline_parallel_degree=2 > map.log 2>&1
grep -q "DP1-PP2-TP1 rank 1 = (dp 0, pp 1, tp 0)" map.log || { cat map.log; echo "FAIL: no rank map" >&2; exit 1; }
grep -q "pipeline stage 0 of 2" map.log || { cat map.log; echo "FAIL: no stage line" >&2; exit 1; }
set +e
mpi 2 "$loom" train pp_clm.yaml --set hyperparameters.output_dir=il --set distribution.pipeline_parallel_degree=2 \
    --set distribution.pipeline=interleaved --set distribution.virtual_stages=2 \
    --set distribution.microbatches=3 > il.log 2>&1
rc=$?
set -e
[[ $rc != 0 ]] && grep -q "multiple of" il.log || { cat il.log; echo "FAIL: bad interleaved layout accepted" >&2; exit 1; }
echo "train_pp: ok"

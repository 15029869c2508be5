#!/usr/bin/env bash
# `distribution: auto`: the planner picks the layout at launch, the log names
# the choice and the runner-up, and the chosen layout trains the 1-rank model
# at the same global batch (per-step losses and final parameters through
# compare_runs.py). Once with this host's CPU planner, once planned for an
# H100 node with pipelines bounded to 1; and the keys auto sets are refused.
#   $1 = loom binary, $2 = tests/data directory
source "$(dirname "$0")/lib/layouts.sh" "$@"
layout_configs
fail() { echo "FAIL: $*" >&2; exit 1; }
layout_job causal-lm gpt2.json unigram-albert-style > ref.yaml
"$loom" train ref.yaml --quiet --threads 1 --set hyperparameters.output_dir=ref

# 4 ranks x 2 rows = the reference's global batch of 8.
layout_job causal-lm gpt2.json unigram-albert-style > auto.yaml
sed -i 's/per_device_train_batch_size: 8/per_device_train_batch_size: 2/' auto.yaml
echo "distribution: auto" >> auto.yaml
mpi 4 "$loom" train auto.yaml --set hyperparameters.output_dir=cpu > cpu.log 2>&1 ||
  { cat cpu.log; fail "auto run"; }
grep -A3 "^distribution: auto" cpu.log
grep -q "^distribution: auto on 4 rank(s), global batch 8 .*this host's CPU" cpu.log || fail "auto line"
grep -q "^  chosen: dp[0-9] tp[0-9] pp[0-9]" cpu.log || fail "chosen line"
grep -q "^  runner-up: " cpu.log || fail "runner-up line"
compare ref cpu

sed 's/^distribution: auto$/distribution: {auto: true, machine: h100-sxm, max_pipeline_parallel_degree: 1}/' \
  auto.yaml > gpu.yaml
mpi 4 "$loom" train gpu.yaml --set hyperparameters.output_dir=gpu > gpu.log 2>&1 ||
  { cat gpu.log; fail "auto run for h100-sxm"; }
grep -A3 "^distribution: auto" gpu.log
grep -q "planned for h100-sxm" gpu.log || fail "machine line"
grep -q "^  chosen: dp[0-9] tp[0-9] pp1 " gpu.log || fail "pp bound not honoured"
grep -q "^  winner " gpu.log || fail "explanation"
compare ref gpu

# A node of 4 GPUs with 1.6 MiB each (nothing reserved). This job is fp32
# (16 bytes of model state per parameter, 4-byte activations): dp4 needs
# 2.7-3.6 MiB, dp2 x pp2 2.1, pp4 1.8; what fits mixes tensor and pipeline
# parallelism, fastest tp2 x pp2 interleaved over 2 chunks (1.54 MiB).
mkdir sub
printf 'base: h100-sxm\ngpus_per_node: 4\nreserved_gib: 0\nhbm_gib: 0.0016\n' > sub/tiny.yaml
# The file is named relative to the job file, and the run starts elsewhere.
sed 's/^distribution: auto$/distribution: {auto: true, machine: sub\/tiny.yaml}/' auto.yaml > pipe.yaml
(cd sub && mpi 4 "$loom" train ../pipe.yaml --set hyperparameters.output_dir="$work/pipe") \
  > pipe.log 2>&1 || { cat pipe.log; fail "auto run for tiny.yaml"; }
grep -A3 "^distribution: auto" pipe.log
grep -q "^  chosen: dp1 tp2 pp2 mb2 interleavedx2:" pipe.log || fail "memory-bound choice"
grep -q "faster but infeasible dp4 .*over the 0.0016 GiB of tiny" pipe.log || fail "infeasible reason"
compare ref pipe

# One process (no mpirun): the only layout is dp1, where zero_stage has
# nothing to shard; the log says it is dropped.
sed 's/^distribution: auto$/distribution: {auto: true, zero_stage: 1}/' auto.yaml > one.yaml
"$loom" train one.yaml --threads 1 --set hyperparameters.output_dir=one \
  --set hyperparameters.max_steps=2 > one.log 2>&1 || { cat one.log; fail "1-process auto run"; }
grep -q "^  chosen: dp1 tp1 pp1" one.log || fail "1-process choice"
grep -q "^  zero_stage 1 dropped: the chosen layout has one data-parallel replica" one.log ||
  { cat one.log; fail "zero_stage note"; }

sed 's/^distribution: auto$/distribution: {auto: true, tensor_parallel_degree: 2}/' auto.yaml > bad.yaml
err=$("$loom" train bad.yaml 2>&1 || true)
grep -q "distribution.tensor_parallel_degree: is chosen by distribution.auto" <<<"$err" ||
  fail "auto with a degree: $err"
echo "train_auto: ok"

#!/usr/bin/env bash
# `loom plan --calibrate`: measures this machine (GEMM rate by rows and by
# threads, all-reduce and point-to-point bandwidth) into a YAML file the CPU
# planner reads with --calibration. Checks the file's shape and values, that
# the planner applies the GEMM shape curve exactly (hand-written files, so the
# check does not depend on how busy the machine is), the MPI path, and the
# error for a broken file. The measured figures themselves are not asserted:
# on a shared 2-core machine they vary with the load.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$loom" plan --calibrate --quick --calibrate-out cal.yaml
python3 - <<'PY' || fail "calibration file"
import os, yaml
c = yaml.safe_load(open("cal.yaml"))
assert c["cores"] == os.cpu_count(), c["cores"]
rows = [g["rows"] for g in c["gemm_one_thread"]]
assert rows == [8, 32, 128, 512, 2048], rows
assert all(g["gflops"] > 0 for g in c["gemm_one_thread"])
assert [t["threads"] for t in c["gemm_threads"]] == list(range(1, c["cores"] + 1))
for k in ("gflops_per_core", "allreduce_gbps", "p2p_gbps"):
    assert c[k] > 0, k
assert c["shared_sync_s"] >= 0 and c["shared_sync_ranks"] == 2, c
assert c["adamw_params_per_s"] > 0, c
# 2 ranks: one group size, the whole world's
assert [g["group"] for g in c["shared_sync_by_group"]] == [2], c
assert c["shared_sync_by_group"][0]["s"] == c["shared_sync_s"], c
assert [g["group"] for g in c["allreduce_gbps_by_group"]] == [2], c
assert c["allreduce_gbps_by_group"][0]["gbps"] == c["allreduce_gbps"], c
assert [g["group"] for g in c["zero_gbps_by_group"]] == [2], c
assert c["zero_gbps_by_group"][0]["gbps"] > 0, c
# A tp all-reduce's whole cost at 256 KiB, 1 MiB and 4 MiB, in each group size.
assert [(g["group"], g["bytes"]) for g in c["tp_collective_by_group"]] == \
    [(2, 1 << 18), (2, 1 << 20), (2, 1 << 22)], c
assert all(g["s"] >= 0 for g in c["tp_collective_by_group"]), c
assert c["gemm_half_rows"] >= 0 and c["gemm_half_narrow"] >= 0
assert [g["narrow"] for g in c["gemm_narrow"]] == [1024, 512, 256, 128]
# A whole training step cannot beat its GEMMs by much, nor fall to nothing.
assert 0.05 < c["step_efficiency"] < 1.5, c["step_efficiency"]
PY

cat > config.json <<'JSON'
{"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 1024,
 "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
 "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu", "pad_token_id": 0}
JSON
echo '{"text": "hello world"}' > train.jsonl
cat > job.yaml <<YAML
model: {config: $work/config.json, tokenizer: $data/tokenizers/bert-base-uncased/tokenizer.json}
task: masked-lm
data: {train: $work/train.jsonl, max_seq_length: 128}
hyperparameters: {output_dir: $work/out, per_device_train_batch_size: 8}
distribution: {microbatches: 8}
YAML
out=$("$loom" plan job.yaml --world 8 --calibration cal.yaml)
grep -q "(calibrated: cal.yaml)" <<<"$out" || fail "calibration not used: $out"

# dp1 x pp8 runs micro-batches of 1 row x 128 tokens: with half_rows 256 its
# GEMMs run at 128 / 384 of the flat rate, so compute takes 3x as long.
printf 'cores: 2\ngflops_per_core: 100\ngemm_half_rows: 0\nallreduce_gbps: 2\np2p_gbps: 4\n' > flat.yaml
printf 'cores: 2\ngflops_per_core: 100\ngemm_half_rows: 256\nallreduce_gbps: 2\np2p_gbps: 4\n' > shaped.yaml
# Column $3 from the end of layout $2's row under calibration $1; a layout the
# plan does not list stops the test (a comparison of two empty strings would pass).
# $1 may name several files, space-separated (each passed as --calibration).
column() {
  local v f args=()
  for f in $1; do args+=(--calibration "$f"); done
  v=$("$loom" plan job.yaml --world 8 "${args[@]}" | awk -v l="$2" -v k="$3" '$0 ~ "^"l" +[0-9]" {print $(NF-k)}')
  [[ -n $v ]] || { echo "FAIL: no row '$2' in the plan with $1" >&2; kill -TERM $$; }
  echo "$v"
}
compute() { column "$1" "$2" 2; }  # the compute column
a=$(compute flat.yaml "dp1 tp1 pp8 1f1b"); b=$(compute shaped.yaml "dp1 tp1 pp8 1f1b")
python3 -c "import sys; r = $b / $a; sys.exit(0 if abs(r - 3) < 0.01 else 1)" ||
  fail "shape factor: flat $a s, shaped $b s"
# A step that achieves half the GEMM rate takes twice as long to compute; a
# file without the key (written before it was measured) plans GEMMs only.
printf 'step_efficiency: 0.5\n' | cat flat.yaml - > half.yaml
c=$(compute half.yaml "dp1 tp1 pp8 1f1b")
python3 -c "import sys; r = $c / $a; sys.exit(0 if abs(r - 2) < 0.01 else 1)" ||
  fail "step efficiency: flat $a s, at half efficiency $c s"

# With more ranks than cores each tensor-parallel collective waits shared_sync_s
# more, scaled by ranks per core less one: tp 8 runs 8 micro-batches x 24
# blocks x 4 all-reduces, so 0.01 s each at 8 ranks on 2 cores adds 7.68 s,
# and the same figure measured with 4 ranks on 2 cores 3x that.
comm() { column "$1" "$2" 1; }  # the comm column
printf 'shared_sync_s: 0.01\nshared_sync_ranks: 8\n' | cat flat.yaml - > sync8.yaml
printf 'shared_sync_s: 0.01\nshared_sync_ranks: 4\n' | cat flat.yaml - > sync4.yaml
base=$(comm flat.yaml "dp1 tp8 pp1"); s8=$(comm sync8.yaml "dp1 tp8 pp1"); s4=$(comm sync4.yaml "dp1 tp8 pp1")
python3 -c "import sys; sys.exit(0 if abs($s8 - $base - 7.68) < 0.002 and abs($s4 - $base - 23.04) < 0.002 else 1)" ||
  fail "shared sync: tp 8 comm $base s, $s8 s with 8 ranks measured, $s4 s with 4"
# A tp all-reduce's measured whole cost replaces the transfer and the wait
# where the node runs the ranks it was measured with: tp 8's all-reduces are
# 1 x 128 tokens x 1024 x 4 bytes (512 KiB), a third of the way from 256 KiB
# at 1 ms to 1 MiB at 4 ms: 2 ms each, 768 of them.
printf 'tp_collective_by_group:\n  - {group: 8, bytes: 262144, s: 0.001}\n  - {group: 8, bytes: 1048576, s: 0.004}\n' > tpcost.yaml
cat sync8.yaml tpcost.yaml > tp8.yaml
cat sync4.yaml tpcost.yaml > tp4.yaml
t8=$(comm tp8.yaml "dp1 tp8 pp1")
python3 -c "import sys; sys.exit(0 if abs($t8 - 1.536) < 0.002 else 1)" ||
  fail "tp collective by size: tp 8 comm $t8 s, expected 768 x 2 ms"
[[ $(comm tp4.yaml "dp1 tp8 pp1") == "$s4" ]] || fail "tp collective measured at 4 ranks used for 8"
"$loom" plan job.yaml --world 8 --calibration tp8.yaml |
  grep -q "a tp all-reduce between compute segments 1.00 / 4.00 ms at 256 / 1024 KiB in groups of 8" ||
  fail "tp collective costs not shown: $("$loom" plan job.yaml --world 8 --calibration tp8.yaml | sed -n 2p)"
printf 'tp_collective_by_group:\n  - {group: 8, bytes: 1048576, s: 0.004}\n  - {group: 8, bytes: 262144, s: 0.001}\n' |
  cat sync8.yaml - > tpbad.yaml
err=$("$loom" plan job.yaml --world 8 --calibration tpbad.yaml 2>&1 || true)
grep -q "tpbad.yaml:10: tp_collective_by_group: expected {group: N, bytes: B, s: x}" <<<"$err" ||
  fail "descending sizes: $err"
# Layouts without tensor parallelism wait for no tp collective.
[[ $(comm sync8.yaml "dp1 tp1 pp8 1f1b") == $(comm flat.yaml "dp1 tp1 pp8 1f1b") ]] ||
  fail "shared sync charged to a layout without tp"

# AdamW's update at 1e8 parameters/s per core: dp 1 x pp 8 without ZeRO on
# 2 cores updates the whole model once per step, and the last stage's copy of
# the tied word table (30522 x 1024), 2 cores sharing it.
step() { column "$1" "$2" 3; }  # the step column
printf 'adamw_params_per_s: 1e8\n' | cat flat.yaml - > adamw.yaml
"$loom" plan job.yaml --world 8 --calibration adamw.yaml | grep -q "AdamW 100M parameters/s per core" ||
  fail "AdamW rate not shown"
a=$(step flat.yaml "dp1 tp1 pp8 1f1b"); b=$(step adamw.yaml "dp1 tp1 pp8 1f1b")
python3 -c "import sys; e = (335174458 + 30522 * 1024) / 2 / 1e8; sys.exit(0 if abs($b - $a - e) < 0.002 else 1)" ||
  fail "AdamW pricing: step $a s, $b s with the update priced"

# A narrow-side curve slows tp 8's narrow shards; tp 1 keeps 1024-wide sides.
printf 'gemm_half_narrow: 256\n' | cat flat.yaml - > narrow.yaml
[[ $(compute narrow.yaml "dp1 tp1 pp8 1f1b") == $(compute flat.yaml "dp1 tp1 pp8 1f1b") ]] ||
  fail "narrow sides charged to a layout without tp"
python3 -c "import sys; sys.exit(0 if $(compute narrow.yaml "dp1 tp8 pp1") > 1.02 * $(compute flat.yaml "dp1 tp8 pp1") else 1)" ||
  fail "narrow sides: tp 8 not slower"

printf 'shared_sync_s: 0.01\nshared_sync_ranks: 8\nshared_sync_by_group:\n  - {group: 8, s: 0.01}\n  - {group: 2, s: 0.001}\n' |
  cat flat.yaml - > descending.yaml
err=$("$loom" plan job.yaml --world 8 --calibration descending.yaml 2>&1 || true)
grep -q "descending.yaml:10: shared_sync_by_group: expected {group: N, s: x}" <<<"$err" ||
  fail "descending groups: $err"
# Measured by group size: tp 8 pays the groups-of-8 figure, as with one figure.
printf 'shared_sync_by_group:\n  - {group: 2, s: 0.001}\n  - {group: 8, s: 0.01}\n' | cat sync8.yaml - > groups.yaml
[[ $(comm groups.yaml "dp1 tp8 pp1") == $(comm sync8.yaml "dp1 tp8 pp1") ]] || fail "groups of 8"
"$loom" plan job.yaml --world 8 --calibration groups.yaml | grep -q "a tp collective 1.0 in groups of 2, 10.0 of 8 ms more" ||
  fail "groups not shown: $("$loom" plan job.yaml --world 8 --calibration groups.yaml | head -2)"

printf 'cores: 2\ngflops_per_core: -1\n' > bad.yaml
err=$("$loom" plan job.yaml --world 8 --calibration bad.yaml 2>&1 || true)
grep -q "bad.yaml:2: gflops_per_core: expected a number > 0" <<<"$err" || fail "bad file: $err"

# Several files of one machine: the plan takes each figure's median over them.
# Compute goes as 1 / gflops_per_core: files at 50, 100 and 200 plan as 100;
# two files, at 50 and 100, as their mean, 75 (compute 4/3 of flat's).
sed 's/^gflops_per_core: 100/gflops_per_core: 50/' flat.yaml > slow.yaml
sed 's/^gflops_per_core: 100/gflops_per_core: 200/' flat.yaml > fast.yaml
a=$(compute flat.yaml "dp1 tp1 pp8 1f1b")
[[ $(compute "slow.yaml fast.yaml flat.yaml" "dp1 tp1 pp8 1f1b") == "$a" ]] || fail "median of 3 files"
b=$(compute "slow.yaml flat.yaml" "dp1 tp1 pp8 1f1b")
python3 -c "import sys; sys.exit(0 if abs($b / $a - 4 / 3) < 0.01 else 1)" ||
  fail "median of 2 files: compute $b s against $a s at 100 GFLOP/s"
"$loom" plan job.yaml --world 8 --calibration slow.yaml --calibration flat.yaml | sed -n 2p |
  grep -q "2 cores at 75 GFLOP/s each.*(calibrated: slow.yaml, flat.yaml, each figure their median)" ||
  fail "median machine not shown: $("$loom" plan job.yaml --world 8 --calibration slow.yaml --calibration flat.yaml | sed -n 2p)"
# Tables too: tp 8's all-reduce at (1, 4) ms in one file and (3, 8) in the
# other costs (2, 6) ms at 256 KiB and 1 MiB; 512 KiB, a third of the way,
# 3.33 ms, 768 of them.
printf 'tp_collective_by_group:\n  - {group: 8, bytes: 262144, s: 0.003}\n  - {group: 8, bytes: 1048576, s: 0.008}\n' |
  cat sync8.yaml - > tp8b.yaml
t=$(comm "tp8.yaml tp8b.yaml" "dp1 tp8 pp1")
python3 -c "import sys; sys.exit(0 if abs($t - 768 * (0.002 + 0.004 / 3)) < 0.002 else 1)" ||
  fail "median of tp cost tables: tp 8 comm $t s"
# Files of another machine, or with other figures, are refused by name.
sed 's/^cores: 2/cores: 4/' flat.yaml > four.yaml
err=$("$loom" plan job.yaml --world 8 --calibration flat.yaml --calibration four.yaml 2>&1 || true)
grep -q -- "--calibration four.yaml: measured 4 cores with 0 ranks" <<<"$err" || fail "other machine: $err"
err=$("$loom" plan job.yaml --world 8 --calibration flat.yaml --calibration half.yaml 2>&1 || true)
grep -q -- "--calibration half.yaml: .*other figures" <<<"$err" || fail "other figures: $err"

# Several rounds: the file holds each figure's median over the rounds the
# output printed (printed to 0.1 GFLOP/s and 0.01 GB/s).
"$loom" plan --calibrate --quick --calibrate-rounds 3 --calibrate-out rounds.yaml > rounds.txt
python3 - <<'PY' || fail "calibration rounds: $(cat rounds.txt)"
import re, statistics, yaml
c = yaml.safe_load(open("rounds.yaml"))
out = open("rounds.txt").read()
assert c["rounds"] == 3 and "median of 3 round(s)" in open("rounds.yaml").readline(), c
assert [f"round {i} of 3" in out for i in (1, 2, 3)] == [True] * 3
for g in c["gemm_one_thread"]:
    seen = [float(x) for x in re.findall(rf"gemm {g['rows']} x 256 x 256, 1 thread: ([\d.]+)", out)]
    assert len(seen) == 3 and abs(g["gflops"] - statistics.median(seen)) <= 0.051, (g, seen)
seen = [float(x) for x in re.findall(r"all-reduce bus bandwidth ([\d.]+) GB/s, point-to-point [\d.]+ GB/s;", out)]
assert len(seen) == 3 and abs(c["allreduce_gbps"] - statistics.median(seen)) <= 0.0051, (c, seen)
PY
err=$("$loom" plan --calibrate --calibrate-rounds 0 2>&1 || true)
grep -q "calibrate-rounds: expected at least 1, got 0" <<<"$err" || fail "rounds 0: $err"

if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  # Two rounds: the waiting rank must join each round's collectives (a hang otherwise).
  timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$loom" plan --calibrate --quick --calibrate-rounds 2 --calibrate-out mpi.yaml
  head -1 mpi.yaml | grep -q "between 2 ranks of MPI" || fail "MPI calibration"
  grep -q "^rounds: 2" mpi.yaml || fail "MPI calibration rounds"
  grep -q "^  - {group: 2, s: " mpi.yaml || fail "MPI calibration groups: $(cat mpi.yaml)"
  grep -q "^  - {group: 2, gbps: " mpi.yaml || fail "MPI calibration bandwidth groups: $(cat mpi.yaml)"
  grep -q "^  - {group: 2, bytes: 1048576, s: " mpi.yaml || fail "MPI calibration tp costs: $(cat mpi.yaml)"
fi
echo "plan_calibrate: ok"

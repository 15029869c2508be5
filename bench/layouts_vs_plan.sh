#!/usr/bin/env bash
# Step time and peak memory of a BERT-large-shaped masked-LM step (24 layers,
# hidden 1024, 16 heads, bert-base-uncased vocabulary, seq 128) through the
# real `loom train` on 8 ranks in several layouts, next to what `loom plan`
# predicts for each. The global batch is the same in every layout
# (per_device_train_batch_size = global / dp, split into `microbatches`).
#
#   step time  = the median of steps 2..STEPS of one run, each step timed by
#                when its line reaches metrics.jsonl (written and flushed at
#                the step's end), so start-up, first touch of memory and the
#                first step's planning stay out
#   peak       = the largest resident set of any rank after the first step,
#                as `loom train` reports it, which includes the runtime
#                (binary, Open MPI, libraries) that the plan leaves out
#
#   bench/layouts_vs_plan.sh [loom binary] [layouts...]
#   PLAN_CALIBRATION=file.yaml (from `loom plan --calibrate`) plans with this
#   machine's measured figures instead of the defaults; calibrate at the
#   bench's world size (OMP_NUM_THREADS=1 mpirun --oversubscribe -np 8 loom
#   plan --calibrate --calibrate-out file.yaml): 8 ranks on 2 cores pay per
#   collective what 2 ranks do not. Several files, space-separated (say one
#   taken before the runs and one after), plan from each figure's median
#   ROUNDS=n (default 1) runs every layout n times, the layouts' order rotating
#   from round to round, and reports each layout's median; with 3 or more
#   rounds it also checks the plan's order: a pair of layouts is "separated"
#   when every run of one is faster than every run of the other (their ranges
#   do not overlap), and the plan must agree on it; the other pairs are within
#   this host's noise. Two layouts of the same speed are separated by chance
#   with probability 2 / C(2n, n): 10% at 3 rounds, 0.8% at 5, so use 5 on a
#   host whose runs move by more than the layouts differ
#   STEPS=n (default 4) steps per run
#   WORK_DIR=dir keeps the runs' logs and timings there (default: a temporary
#   directory, removed at the end)
#   REUSE=1 (with WORK_DIR) keeps the runs a WORK_DIR already holds, finished,
#   and runs the rest: an interrupted bench goes on, and a new calibration
#   is set against the same runs
#   PLAN_ONLY=1 prints the plans and trains nothing (seconds, not half an hour)
#   layouts: DPxTPxPP[:schedule] (default: 1x1x8:simple 2x1x4 4x1x2 2x2x2 1x8x1);
#   each layout splits its replica's batch into 8 / dp micro-batches of 2 rows
#
# NOTE: 8 ranks share this machine's cores (one thread each); the plan's
# machine model says the same (docs/cost-model.md). Run on a quiet machine:
# the load average is printed first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
loom=${1:-$root/build/cpu-release/loom}
shift || true
layouts=("$@")
[[ ${#layouts[@]} -gt 0 ]] || layouts=(1x1x8:simple 2x1x4 4x1x2 2x2x2 1x8x1)
[[ -x $loom ]] || { echo "layouts_vs_plan.sh: no loom at $loom" >&2; exit 2; }
unset OPENBLAS_CORETYPE
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
world=8 global=16
if [[ -n ${WORK_DIR:-} ]]; then
  work=$WORK_DIR; mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc --all)"

python3 - "$work" <<'PY'
import glob, json, sys
w = sys.argv[1]
json.dump({"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 30522,
           "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
           "intermediate_size": 4096, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512,
           "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
           "pad_token_id": 0}, open(f"{w}/config.json", "w"))
# Real English text: Debian's fortunes, one fortune per line (long ones fill seq 128).
with open(f"{w}/train.jsonl", "w") as out:
    n = 0
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in path.rsplit("/", 1)[1]:
            continue
        try:
            text = open(path, encoding="utf-8", errors="replace").read()
        except (IsADirectoryError, PermissionError):
            continue
        for f in text.split("\n%\n"):
            f = " ".join(f.split())
            if len(f) > 200:
                out.write(json.dumps({"text": f}) + "\n")
                n += 1
    assert n > 200, "fortunes corpus missing (Debian package fortunes)"
PY
cat > "$work/job.yaml" <<YAML
model: {config: $work/config.json, tokenizer: $root/tests/data/tokenizers/bert-base-uncased/tokenizer.json}
task: masked-lm
data: {train: $work/train.jsonl, max_seq_length: 128}
hyperparameters: {output_dir: $work/out, per_device_train_batch_size: 8, save_strategy: "no",
                  logging_steps: 1, max_grad_norm: 1.0, seed: 1}
YAML

rounds=${ROUNDS:-1} steps=${STEPS:-4}
# DPxTPxPP[:schedule] -> lay sched dp tp pp micro (8 / dp micro-batches of 2 rows)
parse_spec() {
  lay=${1%%:*}
  sched=1f1b
  [[ $1 == *:* ]] && sched=${1#*:}
  IFS=x read -r dp tp pp <<<"$lay"
  micro=$((8 / dp))
}
((steps >= 3)) || { echo "layouts_vs_plan.sh: STEPS must be 3 or more" >&2; exit 2; }
n=${#layouts[@]}
results=()
calibration_args=()
for f in ${PLAN_CALIBRATION:-}; do calibration_args+=(--calibration "$f"); done
# Plans first: they take seconds and say at once what the runs will be set against.
for spec in "${layouts[@]}"; do
  parse_spec "$spec"
  plan=$work/plan_${lay}_${sched}.txt
  # The plan prices the ZeRO stage the run uses (1 where dp > 1, below).
  zero=0; ((dp > 1)) && zero=1
  "$loom" plan "$work/job.yaml" --world $world --all --set distribution.microbatches=$micro \
      --set hyperparameters.per_device_train_batch_size=$global --set distribution.zero_stage=$zero \
      "${calibration_args[@]}" > "$plan"
  [[ $spec == "${layouts[0]}" ]] && head -2 "$plan"
  if ((pp > 1)); then key="dp$dp tp$tp pp$pp $sched"; else key="dp$dp tp$tp pp$pp"; fi
  grep -E "^$key " "$plan" | grep -v ckpt || true
done
[[ -n ${PLAN_ONLY:-} ]] && exit 0

for ((r = 0; r < rounds; ++r)); do
  for ((i = 0; i < n; ++i)); do
    spec=${layouts[$(((i + r) % n))]}
    parse_spec "$spec"
    set_args=(--set "hyperparameters.per_device_train_batch_size=$((global / dp))"
              --set "distribution.pipeline_parallel_degree=$pp" --set "distribution.pipeline=$sched"
              --set "distribution.tensor_parallel_degree=$tp"
              --set "distribution.microbatches=$micro")
    [[ $sched == interleaved ]] && set_args+=(--set distribution.virtual_stages=2)
    ((dp > 1)) && set_args+=(--set distribution.zero_stage=1)
    out=$work/run_${lay}_${sched}_r$r
    if [[ -n ${REUSE:-} ]] && grep -qs train_runtime "$out.times"; then
      results+=("$dp $tp $pp $sched $r $out $work/plan_${lay}_${sched}.txt")
      continue
    fi
    mkdir -p "$out"
    : > "$out/metrics.jsonl"
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np $world \
        "$loom" train "$work/job.yaml" \
        --set "hyperparameters.output_dir=$out" --set "hyperparameters.max_steps=$steps" \
        "${set_args[@]}" > "$out.log" 2>&1 &
    mp=$!
    # Each line's arrival time; tail ends when mpirun does.
    tail -n +1 -F --pid=$mp -s 0.05 "$out/metrics.jsonl" 2>/dev/null |
      while IFS= read -r line; do echo "$EPOCHREALTIME $line"; done > "$out.times"
    if ! wait $mp; then
      # A layout that does not fit (the kernel's OOM killer) is a result too.
      echo "$lay $sched round $((r + 1)): failed; last lines:"; grep -v "^--\|^$" "$out.log" | tail -3
      continue
    fi
    results+=("$dp $tp $pp $sched $r $out $work/plan_${lay}_${sched}.txt")
    # Only the times and the log are read; 15 runs' models would fill a disk.
    rm -f "$out/model.safetensors"
    echo "round $((r + 1)): $lay $sched done, load $(cut -d' ' -f1 /proc/loadavg)"
  done
done

[[ ${#results[@]} -gt 0 ]] || { echo "no layout ran"; exit 1; }
python3 - "${results[@]}" <<'PY'
import json, math, re, statistics, sys
def plan_of(path):
    plan = {}
    for line in open(path):
        m = re.match(r"(dp\d+ tp\d+ pp\d+(?: \w+)?)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", line)
        if m and "ckpt" not in line:
            plan[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)))
    return plan
def step_s(out):
    # "<arrival time> <metrics line>": a training line per step (logging_steps 1).
    at = {}
    for line in open(out + ".times"):
        t, _, rest = line.partition(" ")
        row = json.loads(rest)
        if "loss" in row and "step" in row:
            at[int(row["step"])] = float(t)
    steps = sorted(at)
    gaps = [at[s] - at[s - 1] for s in steps if s - 1 in at and s >= 2]
    assert gaps, f"{out}: no timed steps"
    return statistics.median(gaps)
def peak_gib(out):
    # "after the first step: ... process peak resident X MiB (...), the largest of all ranks"
    m = re.search(r"process peak resident ([\d.]+) MiB", open(out + ".log").read())
    return float(m.group(1)) / 1024
runs, plans = {}, {}
for r in sys.argv[1:]:
    dp, tp, pp, sched, rnd, out, plan_path = r.split()
    key = f"dp{dp} tp{tp} pp{pp}" + (f" {sched}" if int(pp) > 1 else "")
    plans[key] = plan_of(plan_path).get(key, (float("nan"), float("nan")))
    runs.setdefault(key, {})[int(rnd)] = (step_s(out), peak_gib(out))
rounds = sorted({rnd for by in runs.values() for rnd in by})
print(f"{'layout':20} {'step s':>7} {'plan s':>7} {'error':>6}  {'peak GiB':>8} {'plan GiB':>8} {'error':>6}"
      + ("   rounds, s" if len(rounds) > 1 else ""))
med = {}
for key, by in runs.items():
    step = statistics.median(v[0] for v in by.values())
    peak = max(v[1] for v in by.values())
    med[key] = step
    pm, ps = plans[key]
    line = (f"{key:20} {step:7.2f} {ps:7.2f} {100 * (ps - step) / step:+5.0f}%  "
            f"{peak:8.3f} {pm:8.3f} {100 * (pm - peak) / peak:+5.0f}%")
    if len(rounds) > 1:
        line += "   " + " ".join(f"{by[r][0]:.2f}" if r in by else "-" for r in rounds)
    print(line)
by_plan = sorted(runs, key=lambda k: plans[k][1])
print("order, planned:  " + " < ".join(by_plan))
print("order, measured: " + " < ".join(sorted(runs, key=med.get)) + " (medians)")
if len(rounds) >= 3:
    keys = list(runs)
    separated = agree = same_order = 0
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            sa, sb = [v[0] for v in runs[a].values()], [v[0] for v in runs[b].values()]
            if min(len(sa), len(sb)) < 3:
                continue
            common = [r for r in rounds if r in runs[a] and r in runs[b]]
            signs = {runs[a][r][0] < runs[b][r][0] for r in common}
            if max(sa) < min(sb) or max(sb) < min(sa):
                separated += 1
                faster, slower = (a, b) if max(sa) < min(sb) else (b, a)
                ok = plans[faster][1] < plans[slower][1]
                agree += ok
                gap = 100 * (med[slower] - med[faster]) / med[faster]
                print(f"  {faster} faster than {slower} in every run ({gap:.0f}% at the medians); "
                      f"the plan {'agrees' if ok else 'DISAGREES'}")
            elif len(signs) == 1:
                same_order += 1
    pairs = len(keys) * (len(keys) - 1) // 2
    n_runs = min(len(by) for by in runs.values())
    chance = 2 / math.comb(2 * n_runs, n_runs)
    print(f"order: the plan agrees on {agree} of the {separated} separated pairs (ranges that do not "
          f"overlap; by chance {100 * chance:.1f}% for two layouts of one speed at {n_runs} runs each); "
          f"of the other {pairs - separated} pairs, {same_order} keep one order in every round "
          f"but overlap")
PY

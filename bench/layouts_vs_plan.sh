#!/usr/bin/env bash
# Step time and peak memory of a BERT-large-shaped masked-LM step (24 layers,
# hidden 1024, 16 heads, bert-base-uncased vocabulary, seq 128) through the
# real `loom train` on 8 ranks in several layouts, next to what `loom plan`
# predicts for each. The global batch is the same in every layout
# (per_device_train_batch_size = global / dp, split into `microbatches`).
#
#   step time  = (train_runtime of a 4-step run - that of a 2-step run) / 2,
#                so start-up, first touch of memory and the first step's
#                planning cancel out
#   peak       = the largest resident set of any rank after the first step,
#                as `loom train` reports it, which includes the runtime
#                (binary, Open MPI, libraries) that the plan leaves out
#
#   bench/layouts_vs_plan.sh [loom binary] [layouts...]
#   PLAN_CALIBRATION=file.yaml (from `loom plan --calibrate`) plans with this
#   machine's measured figures instead of the defaults; calibrate at the
#   bench's world size (OMP_NUM_THREADS=1 mpirun --oversubscribe -np 8 loom
#   plan --calibrate --calibrate-out file.yaml): 8 ranks on 2 cores pay per
#   collective what 2 ranks do not
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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

results=()
for spec in "${layouts[@]}"; do
  lay=${spec%%:*}
  sched=1f1b
  [[ $spec == *:* ]] && sched=${spec#*:}
  IFS=x read -r dp tp pp <<<"$lay"
  micro=$((8 / dp))
  set_args=(--set "hyperparameters.per_device_train_batch_size=$((global / dp))"
            --set "distribution.pipeline_parallel_degree=$pp" --set "distribution.pipeline=$sched"
            --set "distribution.tensor_parallel_degree=$tp"
            --set "distribution.microbatches=$micro")
  plan=$work/plan_${lay}_${sched}.txt
  # The plan prices the ZeRO stage the run uses (1 where dp > 1, below).
  zero=0; ((dp > 1)) && zero=1
  "$loom" plan "$work/job.yaml" --world $world --all --set distribution.microbatches=$micro \
      --set hyperparameters.per_device_train_batch_size=$global --set distribution.zero_stage=$zero \
      ${PLAN_CALIBRATION:+--calibration "$PLAN_CALIBRATION"} > "$plan"
  [[ ${#results[@]} -gt 0 ]] || head -2 "$plan"
  if ((pp > 1)); then key="dp$dp tp$tp pp$pp $sched"; else key="dp$dp tp$tp pp$pp"; fi
  grep -E "^$key " "$plan" | grep -v ckpt || true
  [[ -n ${PLAN_ONLY:-} ]] && continue
  [[ $sched == interleaved ]] && set_args+=(--set distribution.virtual_stages=2)
  ((dp > 1)) && set_args+=(--set distribution.zero_stage=1)
  ok=1
  for steps in 2 4; do
    out=$work/run_${lay}_${sched}_$steps
    if ! mpirun --allow-run-as-root --oversubscribe --bind-to none -np $world \
        "$loom" train "$work/job.yaml" \
        --set "hyperparameters.output_dir=$out" --set "hyperparameters.max_steps=$steps" \
        "${set_args[@]}" > "$out.log" 2>&1; then
      # A layout that does not fit (the kernel's OOM killer) is a result too.
      echo "$lay $sched: failed; last lines:"; grep -v "^--\|^$" "$out.log" | tail -3
      ok=0
      break
    fi
  done
  ((ok)) && results+=("$dp $tp $pp $sched $work/run_${lay}_${sched}_2 $work/run_${lay}_${sched}_4 $plan")
done

[[ -n ${PLAN_ONLY:-} ]] && exit 0
[[ ${#results[@]} -gt 0 ]] || { echo "no layout ran"; exit 1; }
python3 - "${results[@]}" <<'PY'
import json, re, sys
def plan_of(path):
    plan = {}
    for line in open(path):
        m = re.match(r"(dp\d+ tp\d+ pp\d+(?: \w+)?)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", line)
        if m and "ckpt" not in line:
            plan[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)))
    return plan
def runtime(d):
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    return [r for r in rows if "train_runtime" in r][-1]["train_runtime"]
def peak_gib(d):
    # "after the first step: ... process peak resident X MiB (...), the largest of all ranks"
    m = re.search(r"process peak resident ([\d.]+) MiB", open(d + ".log").read())
    return float(m.group(1)) / 1024
print(f"{'layout':28} {'step s':>8} {'plan s':>8} {'error':>7}   {'peak GiB':>8} {'plan GiB':>8} {'error':>7}")
for r in sys.argv[1:]:
    dp, tp, pp, sched, d2, d4, plan_path = r.split()
    plan = plan_of(plan_path)
    key = f"dp{dp} tp{tp} pp{pp}" + (f" {sched}" if int(pp) > 1 else "")
    step = (runtime(d4) - runtime(d2)) / 2
    peak = max(peak_gib(d2), peak_gib(d4))
    pm, ps = plan.get(key, (float("nan"), float("nan")))
    print(f"{key:28} {step:8.2f} {ps:8.2f} {100 * (ps - step) / step:+6.0f}%   "
          f"{peak:8.3f} {pm:8.3f} {100 * (pm - peak) / peak:+6.0f}%")
PY

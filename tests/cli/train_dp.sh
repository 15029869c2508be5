#!/usr/bin/env bash
# Data parallelism through the real `loom train` under mpirun (oversubscribed,
# one thread per rank, tiny models):
#   - dp 1, 2 and 4 with the same global batch give the same per-step losses
#     (relative 1e-6) and final parameters, masked LM with ZeRO 0/1/2 and
#     causal LM;
#   - a checkpoint saved at dp 4 (ZeRO 2) resumes at dp 2 and at dp 1 with
#     the uninterrupted run's losses;
#   - SIGKILL of one rank ends the whole job quickly with a message naming the
#     rank, and the newest checkpoint is intact and resumes.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (Debian openmpi-bin)"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
mpi() { local n=$1; shift; mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" "$@"; }

job() {  # job TASK CONFIG TOKENIZER DATA
  cat <<YAML
model: {config: $data/train/$2, tokenizer: $data/tokenizers/$3/tokenizer.json}
task: $1
data: {train: $data/train/$4, max_seq_length: 32}
hyperparameters:
  output_dir: out
  overwrite_output_dir: true
  max_steps: 8
  per_device_train_batch_size: 8
  learning_rate: 1.0e-2
  logging_steps: 1
  save_strategy: steps
  save_steps: 4
  seed: 7
YAML
}
job masked-lm tiny-bert.json wordpiece-multilingual-cased lm_train.jsonl > mlm.yaml
job causal-lm tiny-gpt2.json unigram-albert-style lm_train.jsonl > clm.yaml

compare() {  # compare REF OTHER [FIRST_STEP]: losses (rel 1e-6) and, from step 1, final parameters
  python3 - "$@" <<'PY'
import json, struct, sys
from array import array
ref, other = sys.argv[1], sys.argv[2]
def losses(d):
    return {r["step"]: r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r}
a, b = losses(ref), losses(other)
steps = sorted(b)
assert steps, f"{other}: no losses"
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
print(f"{other}: steps {steps[0]}..{steps[-1]}, worst relative loss difference {worst:.2e}")
assert worst < 1e-6, f"{other} differs from {ref}"
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__": continue
        a0, a1 = v["data_offsets"]
        out[k] = array("f", raw[8 + n + a0:8 + n + a1])
    return out
ta, tb = tensors(ref + "/model.safetensors"), tensors(other + "/model.safetensors")
assert ta.keys() == tb.keys()
diff = max(abs(x - y) for k in ta for x, y in zip(ta[k], tb[k]))
print(f"{other}: final parameters, max difference {diff:.2e}")
# Sums of gradients over ranks round differently from one process's sums;
# AdamW's m / sqrt(v) amplifies that where v is tiny. 1e-4 is 0.1% of what
# 8 steps at learning rate 1e-2 move a parameter.
assert diff < 1e-4, f"{other}: final parameters differ"
PY
}

echo "== masked LM: dp 1, dp 2 (ZeRO 1), dp 4 (ZeRO 2), dp 2 (ZeRO 0, accumulation 2)"
"$loom" train mlm.yaml --quiet --threads 1 --set hyperparameters.output_dir=m1
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=m2 \
    --set hyperparameters.per_device_train_batch_size=4 --set distribution.zero_stage=1
mpi 4 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=m4 \
    --set hyperparameters.per_device_train_batch_size=2 --set distribution.zero_stage=2
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=m2a \
    --set hyperparameters.per_device_train_batch_size=2 --set hyperparameters.gradient_accumulation_steps=2
compare m1 m2
compare m1 m4
compare m1 m2a

echo "== causal LM: dp 1, dp 2 (ZeRO 0), dp 4 (ZeRO 1)"
"$loom" train clm.yaml --quiet --threads 1 --set hyperparameters.output_dir=c1
mpi 2 "$loom" train clm.yaml --quiet --set hyperparameters.output_dir=c2 \
    --set hyperparameters.per_device_train_batch_size=4
mpi 4 "$loom" train clm.yaml --quiet --set hyperparameters.output_dir=c4 \
    --set hyperparameters.per_device_train_batch_size=2 --set distribution.zero_stage=1
compare c1 c2
compare c1 c4

echo "== saved at dp 4 (ZeRO 2), resumed at dp 2 and dp 1"
mkdir r2 r1
cp -r m4/checkpoint-4 r2/
cp -r m4/checkpoint-4 r1/
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=r2 \
    --set hyperparameters.per_device_train_batch_size=4 --set hyperparameters.resume_from_checkpoint=latest
"$loom" train mlm.yaml --quiet --threads 1 --set hyperparameters.output_dir=r1 \
    --set hyperparameters.resume_from_checkpoint=latest
compare m1 r2
compare m1 r1

echo "== SIGKILL of rank 1 mid-run"
set +e
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=k \
    --set hyperparameters.per_device_train_batch_size=4 --set hyperparameters.max_steps=1000000 \
    --set hyperparameters.save_steps=10 --set distribution.collective_timeout_s=30 > k.log 2>&1 &
launcher=$!
set -e
for _ in $(seq 1 120); do
  [[ -d k/checkpoint-20 ]] && break
  sleep 0.5
done
[[ -d k/checkpoint-20 ]] || { cat k.log; echo "FAIL: no checkpoint before the kill" >&2; exit 1; }
victim=""
for p in $(pgrep -f "loom train mlm.yaml"); do
  if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; fi
done
[[ -n $victim ]] || { echo "FAIL: rank 1 not found" >&2; exit 1; }
start=$SECONDS
kill -9 "$victim"
set +e
wait "$launcher"
rc=$?
set -e
elapsed=$((SECONDS - start))
echo "job ended with status $rc after ${elapsed} s"
[[ $rc != 0 ]] || { echo "FAIL: the job reported success" >&2; exit 1; }
(( elapsed < 60 )) || { echo "FAIL: the job took ${elapsed} s to stop" >&2; exit 1; }
grep -q "rank 1" k.log || { cat k.log; echo "FAIL: no message naming rank 1" >&2; exit 1; }
latest=$(ls -d k/checkpoint-* | sed 's/.*checkpoint-//' | sort -n | tail -1)
echo "newest checkpoint: step $latest"
"$loom" train mlm.yaml --quiet --threads 1 --set hyperparameters.output_dir=k \
    --set hyperparameters.resume_from_checkpoint=latest --set "hyperparameters.max_steps=$((latest + 2))"
python3 - k "$latest" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = [r["step"] for r in rows if "loss" in r]
assert steps[-1] == int(sys.argv[2]) + 2, steps[-3:]
print("resumed after the kill up to step", steps[-1])
PY
echo "train_dp: ok"

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
source "$(dirname "$0")/lib/layouts.sh" "$@"
job() { layout_job "$1" "$data/train/$2" "$3" "$4"; }  # TASK CONFIG TOKENIZER DATA
job masked-lm tiny-bert.json wordpiece-multilingual-cased lm_train.jsonl > mlm.yaml
job causal-lm tiny-gpt2.json unigram-albert-style lm_train.jsonl > clm.yaml
# Losses within 1e-6 relative; parameters within 1e-4: sums of gradients over
# ranks round differently from one process's sums, and AdamW's m / sqrt(v)
# amplifies that where v is tiny (1e-4 is 0.1% of what 8 steps at learning
# rate 1e-2 move a parameter).
dp_compare() { compare "$1" "$2" 1e-6 1e-4; }

echo "== masked LM: dp 1, dp 2 (ZeRO 1), dp 4 (ZeRO 2), dp 2 (ZeRO 0, accumulation 2)"
"$loom" train mlm.yaml --quiet --threads 1 --set hyperparameters.output_dir=m1
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=m2 \
    --set hyperparameters.per_device_train_batch_size=4 --set distribution.zero_stage=1
mpi 4 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=m4 \
    --set hyperparameters.per_device_train_batch_size=2 --set distribution.zero_stage=2
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=m2a \
    --set hyperparameters.per_device_train_batch_size=2 --set hyperparameters.gradient_accumulation_steps=2
dp_compare m1 m2
dp_compare m1 m4
dp_compare m1 m2a

echo "== causal LM: dp 1, dp 2 (ZeRO 0), dp 4 (ZeRO 1)"
"$loom" train clm.yaml --quiet --threads 1 --set hyperparameters.output_dir=c1
mpi 2 "$loom" train clm.yaml --set hyperparameters.output_dir=c2 \
    --set hyperparameters.per_device_train_batch_size=4 > c2.log 2>&1 || { cat c2.log; exit 1; }
grep -q "exchanged as rows" c2.log || { cat c2.log; echo "no sparse embedding rows at dp 2"; exit 1; }
mpi 4 "$loom" train clm.yaml --quiet --set hyperparameters.output_dir=c4 \
    --set hyperparameters.per_device_train_batch_size=2 --set distribution.zero_stage=1
dp_compare c1 c2
dp_compare c1 c4

echo "== causal LM: dp 2 with the word table reduced densely"
mpi 2 "$loom" train clm.yaml --set hyperparameters.output_dir=c2d \
    --set hyperparameters.per_device_train_batch_size=4 \
    --set distribution.sparse_embedding_grads=false > c2d.log 2>&1 || { cat c2d.log; exit 1; }
grep -q "exchanged as rows" c2d.log && { echo "sparse rows still on"; exit 1; }
dp_compare c1 c2d

echo "== saved at dp 4 (ZeRO 2), resumed at dp 2 and dp 1"
mkdir r2 r1
cp -r m4/checkpoint-4 r2/
cp -r m4/checkpoint-4 r1/
mpi 2 "$loom" train mlm.yaml --quiet --set hyperparameters.output_dir=r2 \
    --set hyperparameters.per_device_train_batch_size=4 --set hyperparameters.resume_from_checkpoint=latest
"$loom" train mlm.yaml --quiet --threads 1 --set hyperparameters.output_dir=r1 \
    --set hyperparameters.resume_from_checkpoint=latest
dp_compare m1 r2
dp_compare m1 r1

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

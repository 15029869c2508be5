#!/usr/bin/env bash
# Remote inputs on several ranks of one machine: launches at 4 ranks, each
# with a cold cache of its own, read s3:// prefixes holding JSONL, CSV or
# SQuAD JSON files (rotating through the three) from s3rver on loopback. Every
# launch must train; each cache must end with one complete copy of its input
# and no partial folder or lock file. Launches alternate between mpirun and
# `loom launch`. RACE_LAUNCHES overrides the count (8). Then two launches at
# once share one cold cache, and a third finds it warm.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/s3rver.sh"
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (Debian openmpi-bin)"; exit 0
fi
work=$(mktemp -d)
trap 's3_stop; rm -rf "$work"' EXIT
cd "$work"
s3_start inputs || { echo "SKIP: $s3_why"; exit 0; }

# Two files per format, so each input is a folder of several objects.
python3 - "$data" <<'PY'
import csv, json, os, sys
d = sys.argv[1]
cls = [json.loads(l) for l in open(f"{d}/train/cls_train.jsonl")]
qa = [json.loads(l) for l in open(f"{d}/train/qa_train.jsonl")]
for name in ("jsonl", "csv", "squad"):
    os.makedirs(name)
for part, rows in enumerate((cls[::2], cls[1::2])):
    with open(f"jsonl/part-{part}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(f"csv/part-{part}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows([r["text"], r["label"]] for r in rows)
for part, rows in enumerate((qa[::2], qa[1::2])):
    paragraphs = [{"context": r["context"],
                   "qas": [{"id": r["id"], "question": r["question"],
                            "answers": [{"text": t, "answer_start": s} for t, s in
                                        zip(r["answers"]["text"], r["answers"]["answer_start"])]}]}
                  for r in rows]
    json.dump({"version": "1.1", "data": [{"title": f"part {part}", "paragraphs": paragraphs}]},
              open(f"squad/part-{part}.json", "w"))
PY
for f in jsonl csv squad; do s3 put --recursive "$f/" "s3://inputs/$f/"; done

job() {  # FORMAT TASK
  cat <<YAML
model: {config: $data/train/tiny-bert.json, tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json}
task: $2
data: {train: "s3://inputs/$1/", max_seq_length: 64, doc_stride: 16}
hyperparameters:
  output_dir: out
  overwrite_output_dir: true
  max_steps: 1
  per_device_train_batch_size: 2
  logging_steps: 1
  save_strategy: 'no'
YAML
}
job jsonl sequence-classification > jsonl.yaml
job csv sequence-classification > csv.yaml
job squad question-answering > squad.yaml

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
formats=(jsonl csv squad)
launches=${RACE_LAUNCHES:-8}
failed=0
for ((i = 0; i < launches; i++)); do
  f=${formats[i % 3]}
  export LOOM_CACHE_DIR=$work/cache$i
  if ((i % 2 == 0)); then
    run=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4
         "$loom" train "$f.yaml" --quiet --set hyperparameters.output_dir="out$i")
  else
    run=("$loom" launch --nproc 4 "$f.yaml" -- --quiet --set hyperparameters.output_dir="out$i")
  fi
  problem=
  if ! timeout 300 "${run[@]}" >"run$i.log" 2>&1; then
    problem="exited non-zero"
  elif [[ ! -s out$i/model.safetensors ]]; then
    problem="wrote no model"
  elif [[ -n $(find "$LOOM_CACHE_DIR/remote" \( -name '*.part' -o -name '*.lock' \) 2>/dev/null) ]]; then
    problem="left a partial download or lock file"
  elif [[ $(find "$LOOM_CACHE_DIR/remote" -mindepth 2 -maxdepth 2 -type d | wc -l) != 1 ]]; then
    problem="cached more than one copy"
  fi
  if [[ -n $problem ]]; then
    failed=$((failed + 1))
    echo "launch $i ($f, ${run[0]##*/}): FAILED, $problem"
    { grep -iE 'error|not found|no data files' "run$i.log" | sort -u | head -8 || true; } |
      sed 's/^/    /'
    { find "$LOOM_CACHE_DIR" 2>/dev/null || true; } | head -12 | sed 's/^/    /'
  else
    echo "launch $i ($f, ${run[0]##*/}): ok"
  fi
done
echo "$failed of $launches launches failed"

# Independent jobs sharing one cache: two launches at once on a cold cache
# (eight processes after the same prefix), then a warm one.
export LOOM_CACHE_DIR=$work/shared
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 "$loom" train jsonl.yaml --quiet \
  --set hyperparameters.output_dir=shared-a >shared-a.log 2>&1 &
a=$!
"$loom" launch --nproc 4 jsonl.yaml -- --quiet --set hyperparameters.output_dir=shared-b \
  >shared-b.log 2>&1 || { failed=$((failed + 1)); echo "shared cache: launch b FAILED"; cat shared-b.log; }
wait $a || { failed=$((failed + 1)); echo "shared cache: launch a FAILED"; cat shared-a.log; }
"$loom" train jsonl.yaml --quiet --set hyperparameters.output_dir=shared-c >shared-c.log 2>&1 ||
  { failed=$((failed + 1)); echo "shared cache: warm launch FAILED"; cat shared-c.log; }
copies=$(find "$LOOM_CACHE_DIR/remote" -mindepth 2 -maxdepth 2 -type d | wc -l)
[[ $copies == 1 ]] || { failed=$((failed + 1)); echo "shared cache: $copies copies"; }
echo "shared cache: two cold launches at once and a warm one done"
[[ $failed == 0 ]]

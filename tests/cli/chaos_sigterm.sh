#!/usr/bin/env bash
# Stops as they really come, at 2 and 4 ranks: SIGTERM at random moments
# (external signals at random times, to the launcher, to every rank or to one
# rank, and signals raised inside a chosen phase: data loading, forward,
# backward, the gradient all-reduce, checkpoint writing, the upload to
# checkpoint_uri on s3rver), under `loom launch` and plain mpirun. For every
# run:
#   - no crash: exit 75 (stopped after a checkpoint) or 0 (it had finished),
#     and no abort, heap corruption or segfault in the log;
#   - the newest checkpoint is complete, locally and at checkpoint_uri;
#   - running the same job file again (in the same output_dir, or in an empty
#     one, as a replacement machine would: the checkpoint then comes from
#     checkpoint_uri) finishes with exactly the uninterrupted run's per-step
#     losses.
# Then kill -9 of rank 0 while it writes a checkpoint: the previous checkpoint
# stays intact and the rerun resumes from it.
#   $1 = loom binary, $2 = tests/data directory
#   CHAOS_TRIALS (default 20) runs per rank count; CHAOS_SEED picks the moments.
source "$(dirname "$0")/lib/layouts.sh" "$@"
trials=${CHAOS_TRIALS:-20}
seed=${CHAOS_SEED:-$RANDOM}
RANDOM=$seed
echo "chaos seed $seed (rerun with CHAOS_SEED=$seed)"

source "$here/lib/s3rver.sh"
trap 's3_stop; rm -rf "$work"' EXIT
s3_start chaos || { echo "SKIP: $s3_why"; exit 0; }
export LOOM_CACHE_DIR=$work/cache

layout_configs
steps=12
# The job file of trial $1 at $2 ranks, in the current folder: nothing in it
# says "resume" or "overwrite"; the rerun is the same file.
write_job() {
  cat > job.yaml <<YAML
model: {config: $work/bert.json, tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json}
task: masked-lm
data: {train: $data/train/lm_train.jsonl, max_seq_length: 32}
hyperparameters:
  output_dir: out
  max_steps: $steps
  per_device_train_batch_size: $((16 / $2))
  learning_rate: 1.0e-2
  logging_steps: 1
  save_strategy: steps
  save_steps: 3
  save_total_limit: 2
  seed: 7
checkpoint_uri: s3://chaos/np$2/$1
distribution: {zero_stage: 1}
YAML
}

start_job() {  # LAUNCHER NP: starts the job in the background, pid in $job_pid
  if [[ $1 == launch ]]; then
    "$loom" launch --nproc "$2" job.yaml > run.log 2>&1 &
  else
    mpi "$2" "$loom" train job.yaml > run.log 2>&1 &
  fi
  job_pid=$!
}

ranks_of() {  # the rank processes of this trial's job (not mpirun, whose line matches too)
  local p
  for p in $(pgrep -f "$loom train job.yaml"); do
    [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$PWD" ]] || continue
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=" && echo "$p"
  done
  return 0
}

# Waits (up to 10 s) until the job's N ranks run loom, past the moment it blocks
# the stop signals: a signal before that, while a process is still being
# exec'd, ends it the default way, with nothing yet to lose.
ranks_ready() {  # N
  local i p n ok
  for i in $(seq 1 200); do
    n=0 ok=1
    for p in $(ranks_of); do
      n=$((n + 1))
      local blk
      blk=$(awk '/^SigBlk:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
      (( (16#${blk:-0} >> 14) & 1 )) || ok=0
    done
    ((n == $1 && ok)) && return 0
    sleep 0.05
  done
  return 0
}

no_crash() {  # LOG
  if grep -Eq "corrupted|double free|Aborted|Segmentation|signal 6|signal 11|core dumped" "$1"; then
    cat "$1"; echo "FAIL: a rank crashed ($PWD)" >&2; exit 1
  fi
}

newest_complete() {  # DIR: the step of the newest checkpoint with a manifest, or 0
  local best=0 d s
  for d in "$1"/checkpoint-*; do
    [[ -f $d/loom_checkpoint.json ]] || continue
    s=${d##*-}
    ((s > best)) && best=$s
  done
  echo "$best"
}

same_losses() {  # REF_METRICS METRICS FIRST_STEP: steps FIRST..$steps equal exactly
  python3 - "$@" "$steps" <<'PY'
import json, sys
ref_path, got_path, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def losses(p):
    return {int(r["step"]): r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
ref, got = losses(ref_path), losses(got_path)
want = list(range(first, last + 1))
missing = [s for s in want if s not in got]
assert not missing, f"{got_path}: steps {missing} missing"
bad = [(s, ref[s], got[s]) for s in want if got[s] != ref[s]]
assert not bad, f"{got_path}: losses differ from the uninterrupted run at {bad[:3]}"
PY
}

phases=(data forward backward allreduce checkpoint_write upload)
for np in 2 4; do
  echo "== $np ranks: the uninterrupted run"
  mkdir -p "$work/np$np/ref" && cd "$work/np$np/ref"
  write_job ref "$np"
  t0=$(date +%s.%N)
  mpi "$np" "$loom" train job.yaml --quiet > run.log 2>&1 || { cat run.log; exit 1; }
  run_s=$(python3 -c "import time; print(max(0.5, time.time() - $t0))")
  ref=$PWD/out/metrics.jsonl
  for trial in $(seq 1 "$trials"); do
    mkdir -p "$work/np$np/t$trial" && cd "$work/np$np/t$trial"
    write_job "t$trial" "$np"
    launcher=$([[ $((trial % 2)) == 0 ]] && echo launch || echo mpirun)
    unset LOOM_FAULT LOOM_FAULT_RANK
    if ((trial <= ${#phases[@]})); then
      # Inside a phase: its n-th occurrence, on one rank or every rank.
      phase=${phases[trial - 1]}
      hit=$((1 + RANDOM % 4))
      export LOOM_FAULT=$phase:$hit:term
      if [[ $phase == checkpoint_write || $phase == upload ]]; then
        export LOOM_FAULT_RANK=0  # rank 0 alone writes and uploads
      elif ((RANDOM % 2)); then
        export LOOM_FAULT_RANK=$((RANDOM % np))
      fi
      what="SIGTERM inside $phase (occurrence $hit, rank ${LOOM_FAULT_RANK:-every})"
      start_job "$launcher" "$np"
    else
      delay=$(python3 -c "import random; random.seed($RANDOM); print(round(random.uniform(0.2, 0.8 * $run_s), 2))")
      start_job "$launcher" "$np"
      sleep "$delay"
      target=$((RANDOM % 3))
      # loom launch itself waits for its ranks; signals sent to ranks wait here.
      [[ $launcher == launch && $target == 0 ]] || ranks_ready "$np"
      if [[ $launcher == launch && $target == 0 ]]; then
        what="SIGTERM to loom launch after ${delay}s"
        kill -TERM "$job_pid" 2>/dev/null || true
      elif [[ $target == 1 ]]; then
        victims=$(ranks_of)
        victims=${victims%%$'\n'*}  # the first (no `head`: SIGPIPE under pipefail)
        what="SIGTERM to one rank after ${delay}s"
        [[ -n $victims ]] && kill -TERM $victims 2>/dev/null || true
      else
        what="SIGTERM to every rank after ${delay}s"
        victims=$(ranks_of)
        [[ -n $victims ]] && kill -TERM $victims 2>/dev/null || true
      fi
    fi
    set +e
    wait "$job_pid"
    rc=$?
    set -e
    unset LOOM_FAULT LOOM_FAULT_RANK
    no_crash run.log
    if [[ $rc != 0 && $rc != 75 ]]; then
      cat run.log; echo "FAIL: np $np trial $trial ($what, $launcher): exit status $rc" >&2; exit 1
    fi
    stopped=$(newest_complete out)
    if [[ $rc == 75 ]] && ! grep -q "before the first step" run.log; then
      [[ $stopped -gt 0 ]] || { cat run.log; echo "FAIL: stopped without a checkpoint" >&2; exit 1; }
      grep -q "checkpoint .*checkpoint-$stopped" run.log \
        || { cat run.log; echo "FAIL: the newest complete checkpoint is not the one the stop wrote" >&2; exit 1; }
    fi
    # Every other rerun happens on a "new machine": an empty output_dir, the
    # checkpoint from checkpoint_uri.
    where=here
    if ((trial % 3 == 0)); then
      mv out lost
      where="on an empty output_dir"
    fi
    mpi "$np" "$loom" train job.yaml --quiet > rerun.log 2>&1 || { cat run.log rerun.log; exit 1; }
    no_crash rerun.log
    first=1
    [[ $where == here ]] || first=$((stopped + 1))
    same_losses "$ref" out/metrics.jsonl "$first" \
      || { cat run.log rerun.log; echo "FAIL: np $np trial $trial ($what)" >&2; exit 1; }
    echo "np $np trial $trial: $what via $launcher: exit $rc, newest checkpoint $stopped;" \
      "rerun $where matched the uninterrupted losses"
  done
done

echo "== kill -9 of rank 0 while it writes a checkpoint"
mkdir -p "$work/kill9" && cd "$work/kill9"
write_job kill9 2
# Rank 0 stalls inside its third checkpoint (checkpoint-9's first file is
# the 5th write: two files a checkpoint), and is killed there.
LOOM_FAULT=checkpoint_write:5:stall30 LOOM_FAULT_RANK=0 start_job mpirun 2
for _ in $(seq 1 300); do
  grep -q "fault injection: stall" run.log 2>/dev/null && break
  sleep 0.1
done
grep -q "fault injection: stall" run.log || { cat run.log; echo "FAIL: never reached the stall" >&2; exit 1; }
victim=""
for p in $(ranks_of); do
  tr '\0' '\n' < "/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=0" && victim=$p
done
kill -9 "$victim"
set +e
wait "$job_pid"
rc=$?
set -e
[[ $rc != 0 ]] || { cat run.log; echo "FAIL: the job survived the kill" >&2; exit 1; }
ls -a out
[[ $(newest_complete out) == 6 ]] || { echo "FAIL: checkpoint-6 should be the newest complete one" >&2; exit 1; }
mpi 2 "$loom" train job.yaml --quiet > rerun.log 2>&1 || { cat run.log rerun.log; exit 1; }
same_losses "$work/np2/ref/out/metrics.jsonl" out/metrics.jsonl 1
echo "kill -9 mid-checkpoint: checkpoint-6 intact; the rerun matched the uninterrupted losses"

#!/usr/bin/env bash
# Loom against PyTorch + Hugging Face transformers on one GPU: the same
# training step (forward, backward, AdamW; one fixed batch of random token ids,
# no dropout) through `loom bench` and bench/gpu/hf_peer.py, case by case, run
# one after the other so neither shares the GPU with the other.
#
#   bench/gpu/loom_vs_hf.sh [--steps N] [--warmup N] [--dtype bf16|fp32]
#                           [--cases ID,ID,...] [--out FILE]
#
#   cases: gpt2-124m       causal LM, seq 1024, batch 16 (llm.c's GPT-2 124M shape)
#          bert-base-128   masked LM, seq 128, batch 64
#          bert-base-512   masked LM, seq 512, batch 16
#          bert-large-128  masked LM, seq 128, batch 64
#          bert-large-512  masked LM, seq 512, batch 16
#   The HF side runs with SDPA attention, and for gpt2-124m once more under
#   torch.compile.
#
# Environment: LOOM (default build/cuda-release/loom), PYTHON (the python with
# torch and transformers, default python3), OUT (where the JSON lines go,
# default bench/gpu/results.jsonl; a directory gets loom_vs_hf.jsonl in it).
# Prints a markdown table with the targets next to the figures, and exits 1
# naming every side that failed, after the table of the ones that did not.
# docs/gpu-benchmark.md says what is measured.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
loom=${LOOM:-$root/build/cuda-release/loom}
python=${PYTHON:-python3}
out=${OUT:-$here/results.jsonl}
steps=20 warmup=5 dtype=bf16 want=all

# id:model:task:seq:batch
all_cases=(
  gpt2-124m:gpt2-124m:causal-lm:1024:16
  bert-base-128:bert-base:masked-lm:128:64
  bert-base-512:bert-base:masked-lm:512:16
  bert-large-128:bert-large:masked-lm:128:64
  bert-large-512:bert-large:masked-lm:512:16
)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "loom_vs_hf.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --steps|--warmup|--dtype|--cases|--out)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      case $1 in
        --steps) steps=$2 ;; --warmup) warmup=$2 ;; --dtype) dtype=$2 ;;
        --cases) want=$2 ;; --out) out=$2 ;;
      esac
      shift 2 ;;
    --steps=*) steps=${1#*=}; shift ;;
    --warmup=*) warmup=${1#*=}; shift ;;
    --dtype=*) dtype=${1#*=}; shift ;;
    --cases=*) want=${1#*=}; shift ;;
    --out=*) out=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option $1" ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer"
[[ $warmup =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
[[ $dtype == bf16 || $dtype == fp32 ]] || die "--dtype is bf16 or fp32"

cases=()
if [[ $want == all ]]; then
  cases=("${all_cases[@]}")
else
  IFS=, read -r -a ids <<<"$want"
  for id in "${ids[@]}"; do
    found=
    for c in "${all_cases[@]}"; do
      [[ ${c%%:*} == "$id" ]] && { cases+=("$c"); found=1; }
    done
    [[ -n $found ]] || die "no case $id (cases: ${all_cases[*]%%:*})"
  done
fi

# The device tool hands runs an output folder in $OUT.
[[ -d $out ]] && out=$out/loom_vs_hf.jsonl
mkdir -p "$(dirname "$out")" || die "cannot create the folder for $out"
: >"$out" || die "cannot write $out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs=$work/runs.tsv
: >"$runs"
failed=()

echo "loom: $loom"
[[ -x $loom ]] || echo "  (not there: set LOOM or build the cuda-release preset; every loom run will fail)"
echo "hf:   $("$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
if command -v nvidia-smi >/dev/null; then
  echo "gpu:  $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
fi
echo "steps $steps after $warmup warm-up, $dtype; JSON lines to $out"
echo

# run_side SIDE CASE VARIANT COMMAND...: one run; its JSON line goes to $out
# and, with the case, to $runs for the table.
run_side() {
  local side=$1 case=$2 variant=$3
  shift 3
  local log=$work/$case.$side.$variant.log stdout line rc=0
  printf '%-15s %-4s %-13s ' "$case" "$side" "$variant"
  stdout=$("$@" 2>"$log") || rc=$?
  # A library may print to stdout too; the result is the last JSON line.
  line=$(printf '%s\n' "$stdout" | grep '^{' | tail -n 1)
  if [[ $rc -eq 0 && -n $line ]] && "$python" -c 'import json, sys; json.loads(sys.argv[1])' "$line" 2>/dev/null; then
    printf '%s\n' "$line" >>"$out"
    printf '%s\t%s\t%s\tok\t%s\n' "$case" "$side" "$variant" "$line" >>"$runs"
    echo ok
  else
    local why="exit $rc"
    [[ $rc -eq 0 ]] && why="no JSON line on stdout"
    printf '%s\t%s\t%s\t%s\t\n' "$case" "$side" "$variant" "$why" >>"$runs"
    failed+=("$side on $case ($variant): $why")
    echo "FAILED ($why); the end of its output:"
    { [[ -n $stdout ]] && printf '%s\n' "$stdout" | tail -n 5; tail -n 20 "$log"; } | sed 's/^/    /'
  fi
}

for c in "${cases[@]}"; do
  IFS=: read -r id model task seq batch <<<"$c"
  common=(--model "$model" --task "$task" --seq "$seq" --batch "$batch"
          --steps "$steps" --warmup "$warmup" --dtype "$dtype" --device cuda)
  run_side loom "$id" native "$loom" bench "${common[@]}"
  run_side hf "$id" sdpa "$python" "$here/hf_peer.py" "${common[@]}" --attn sdpa
  if [[ $model == gpt2-124m ]]; then
    run_side hf "$id" sdpa+compile "$python" "$here/hf_peer.py" "${common[@]}" --attn sdpa --compile
  fi
done
echo

"$python" - "$runs" "${cases[@]}" <<'PY' || failed+=("the table (its python3 failed)")
import json, sys

runs = sys.argv[1]
shapes = {}  # id -> "batch x seq", from the case list
for c in sys.argv[2:]:
    cid, _model, _task, seq, batch = c.split(":")
    shapes[cid] = f"{batch}x{seq}"
order = list(shapes)
cases = {c: {"loom": None, "hf": []} for c in order}
for row in open(runs, encoding="utf-8"):
    case, side, variant, status, line = row.rstrip("\n").split("\t", 4)
    rec = json.loads(line) if status == "ok" else None
    entry = (variant, status, rec)
    if side == "loom":
        cases[case]["loom"] = entry
    else:
        cases[case]["hf"].append(entry)

def ktok(r):
    return f"{r['tokens_per_s'] / 1e3:,.1f}K" if r else "-"

def pct(r):
    return f"{100 * r['mfu']:.1f}%" if r and r.get("mfu") is not None else "-"

def gib(r):
    return f"{r['peak_mem_gib']:.2f}" if r and r.get("peak_mem_gib") is not None else "-"

def verdict(ok):
    return "?" if ok is None else ("yes" if ok else "NO")

head = ["case", "hf variant", "loom tok/s", "hf tok/s", "loom/hf", "loom MFU", "hf MFU",
        "loom GiB", "hf GiB", "targets (loom)"]
rows, notes = [], []
for case in order:
    _, lstatus, l = cases[case]["loom"] or ("native", "not run", None)
    for variant, hstatus, h in cases[case]["hf"] or [("sdpa", "not run", None)]:
        ratio = l["tokens_per_s"] / h["tokens_per_s"] if l and h else None
        name = f"{case} {shapes[case]}"
        targets = [f">=1.3x HF: {verdict(None if ratio is None else ratio >= 1.3)}"]
        if case == "gpt2-124m":
            targets.append(f">=500K tok/s: {verdict(l['tokens_per_s'] >= 500e3 if l else None)}")
        if case == "bert-large-128":
            mfu = l.get("mfu") if l else None
            targets.append(f">=50% MFU: {verdict(None if mfu is None else mfu >= 0.5)}")
        if l and h and l.get("peak_tflops") != h.get("peak_tflops"):
            notes.append(f"{case} ({variant}): loom's MFU is against {l.get('peak_tflops')} "
                         f"TFLOP/s, hf's against {h.get('peak_tflops')}")
        if l and h and l.get("params") != h.get("params"):
            notes.append(f"{case}: loom counts {l.get('params')} parameters, hf {h.get('params')}")
        rows.append([name, variant,
                     ktok(l) if l else lstatus, ktok(h) if h else hstatus,
                     f"{ratio:.2f}x" if ratio else "-", pct(l), pct(h), gib(l), gib(h),
                     "; ".join(targets)])

widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
line = lambda r: "| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |"
print(line(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in rows:
    print(line(r))
gpus = {rec["gpu"] for c in cases.values()
        for _, _, rec in ([c["loom"]] if c["loom"] else []) + c["hf"] if rec and rec.get("gpu")}
if gpus:
    print("gpu: " + ", ".join(sorted(gpus)))
for n in dict.fromkeys(notes):
    print("note: " + n)
PY

if [[ ${#failed[@]} -gt 0 ]]; then
  for f in "${failed[@]}"; do echo "loom_vs_hf.sh: failed: $f" >&2; done
  exit 1
fi

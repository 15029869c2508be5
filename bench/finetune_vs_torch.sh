#!/usr/bin/env bash
# Fine-tuning throughput of a BERT-base-shaped classifier (12 layers, hidden
# 768, vocab 30522, sequence 128, batch 8) through the real `loom train` -
# tokenizing on background threads, loader, optimizer, logging - next to the
# same step in PyTorch (bench/torch_bert_step.py --task cls), side by side in
# one run and one environment, but for the OpenMP wait policy: each peer gets
# its faster one (bench/torch_peer.sh).
#
# The same step on both sides: no dropout and no gradient clipping (the
# PyTorch peer has neither). Loom's steady-state rate is taken between two runs of different length (so
# start-up and the first step's page faults cancel out); the share of step
# time spent waiting for data comes from the longer run's summary.
# This machine's speed drifts by 10-20% from minute to minute, so the whole
# side-by-side measurement repeats ROUNDS times (default 3), interleaved, and
# the medians are reported next to every round's figures.
#   [ROUNDS=3] bench/finetune_vs_torch.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
loom=$build/loom
[[ -x $loom ]] || { echo "finetune_vs_torch.sh: build loom first (cmake --build $build --target loom)" >&2; exit 2; }
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || { echo "finetune_vs_torch.sh: needs Debian's python3-torch" >&2; exit 2; }
# OpenMP wait policy: Loom runs under the default, PyTorch under whichever of
# default and passive is faster for it (bench/torch_peer.sh).
unset OPENBLAS_CORETYPE OMP_WAIT_POLICY
source "$root/bench/torch_peer.sh"
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/config.json" <<'JSON'
{"architectures": ["BertForSequenceClassification"], "model_type": "bert", "vocab_size": 30522,
 "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
 "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout": 0.0,
 "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
 "id2label": {"0": "a", "1": "b", "2": "c"}, "label2id": {"a": 0, "b": 1, "c": 2}}
JSON
# Real English text, long enough that every row fills the 128 tokens.
python3 - "$work/train.jsonl" <<'PY'
import json, sys, glob
words = []
for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if "." in f.rsplit("/", 1)[-1]:
        continue
    words += open(f, encoding="utf-8", errors="replace").read().replace("%", " ").split()
with open(sys.argv[1], "w") as out:
    for i in range(400):
        chunk = words[(i * 150) % max(1, len(words) - 150):][:150]
        out.write(json.dumps({"text": " ".join(chunk), "label": "abc"[i % 3]}) + "\n")
PY
cat > "$work/job.yaml" <<YAML
model: {config: $work/config.json, tokenizer: $root/tests/data/tokenizers/bert-base-uncased/tokenizer.json}
task: sequence-classification
data: {train: $work/train.jsonl, max_seq_length: 128}
hyperparameters:
  output_dir: $work/out
  overwrite_output_dir: true
  per_device_train_batch_size: 8
  learning_rate: 2.0e-5
  max_grad_norm: 0
  logging_steps: 1
  save_strategy: 'no'
YAML
run() {  # run STEPS DTYPE_FLAGS... -> "runtime tokens wait_share"
  local steps=$1; shift
  "$loom" train "$work/job.yaml" --quiet --set "hyperparameters.max_steps=$steps" "$@" >/dev/null
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = [r for r in rows if "train_runtime" in r][-1]
print(s["train_runtime"], s["train_tokens_per_second"] * s["train_runtime"], s["data_wait_share"])' "$work/out/metrics.jsonl"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"
rate() {  # rate DTYPE_FLAGS... -> "tokens_per_s wait_share" from a 3-step and a 13-step run
  local t_short n_short t_long n_long wait
  read -r t_short n_short _ < <(run 3 "$@")
  read -r t_long n_long wait < <(run 13 "$@")
  echo "$(python3 -c "print(($n_long - $n_short) / ($t_long - $t_short))") $wait"
}
rounds=${ROUNDS:-3}
results=()
for ((r = 1; r <= rounds; r++)); do
  read -r loom_fp32 wait_fp32 < <(rate)
  read -r loom_bf16 wait_bf16 < <(rate --set hyperparameters.bf16=true)
  torch_fp32=$(torch_best --task cls --dtype fp32 --steps 5)
  torch_bf16=$(torch_best --task cls --dtype bf16 --steps 5)
  results+=("$loom_fp32 $wait_fp32 $loom_bf16 $wait_bf16 $torch_fp32 $torch_bf16")
  echo "round $r: loom fp32 $loom_fp32, bf16 $loom_bf16 tokens/s; $torch_fp32; $torch_bf16"
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
rows = []
for line in sys.stdin:
    f = line.split(" ", 4)
    rest = f[4]
    i = rest.index("} ") + 1
    t32, t16 = json.loads(rest[:i]), json.loads(rest[i:])
    rows.append((float(f[0]), float(f[1]), float(f[2]), float(f[3]),
                 t32["tokens_per_s"], t16["tokens_per_s"]))
med = lambda k: statistics.median(r[k] for r in rows)
ratio = lambda a, b: statistics.median(r[a] / r[b] for r in rows)
for dt, k, w, t in (("fp32", 0, 1, 4), ("bf16", 2, 3, 5)):
    print(json.dumps({"peer": "loom train", "task": "cls", "dtype": dt, "rounds": len(rows),
                      "tokens_per_s": round(med(k), 1), "pytorch_tokens_per_s": round(med(t), 1),
                      "ratio": round(ratio(k, t), 3), "data_wait_share": round(max(r[w] for r in rows), 4)}))
print(f"fine-tuning, BERT-base classifier, batch 8 x 128 (tokens/s, median of {len(rows)} rounds):")
for dt, peer, k, t in (("fp32", "pytorch", 0, 4), ("bf16", "pytorch autocast", 2, 5)):
    per = ", ".join(f"{r[k] / r[t]:.2f}" for r in rows)
    print(f"  {dt}: loom {med(k):.0f}, {peer} {med(t):.0f} -> {ratio(k, t):.2f}x (rounds: {per})")
print(f"  loom waited for data at most {100 * max(r[1] for r in rows):.2f}% (fp32) and "
      f"{100 * max(r[3] for r in rows):.2f}% (bf16) of the time")
'

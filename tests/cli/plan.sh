#!/usr/bin/env bash
# `loom plan` on a BERT-large-shaped config: lists the layouts of 8 ranks,
# hides the ones that break a rule unless --all, and honours --memory-gib.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
loom=$1
data=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/config.json" <<'JSON'
{"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 1024,
 "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
 "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu", "pad_token_id": 0}
JSON
echo '{"text": "hello world"}' > "$work/train.jsonl"
cat > "$work/job.yaml" <<YAML
model: {config: $work/config.json, tokenizer: $data/tokenizers/bert-base-uncased/tokenizer.json}
task: masked-lm
data: {train: $work/train.jsonl, max_seq_length: 128}
hyperparameters: {output_dir: $work/out, per_device_train_batch_size: 8}
distribution: {microbatches: 8, zero_stage: 1}
YAML
out=$("$loom" plan "$work/job.yaml" --world 8)
echo "$out"
grep -q "335.[0-9]M parameters" <<<"$out" || { echo "FAIL: parameter count" >&2; exit 1; }
for layout in "dp1 tp1 pp8 1f1b" "dp1 tp2 pp4 interleaved" "dp1 tp8 pp1"; do
  grep -q "^$layout " <<<"$out" || { echo "FAIL: missing layout $layout" >&2; exit 1; }
done
# dp 8 cannot split a global batch of 8 into 8 micro-batches per replica.
if grep -q "^dp8 " <<<"$out"; then echo "FAIL: infeasible dp8 listed" >&2; exit 1; fi
all=$("$loom" plan "$work/job.yaml" --world 8 --all)
grep -q "^dp8 tp1 pp1 .*not feasible: global batch" <<<"$all" || { echo "FAIL: --all reason" >&2; exit 1; }
# A memory limit below every layout's peak leaves none.
tight=$("$loom" plan "$work/job.yaml" --world 8 --memory-gib 0.1)
grep -q "no feasible layout" <<<"$tight" || { echo "FAIL: --memory-gib" >&2; exit 1; }
echo "plan: ok"

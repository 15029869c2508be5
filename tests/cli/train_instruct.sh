#!/usr/bin/env bash
# Instruction data (prompt, completion) through the real `loom train`, on the
# llama-lm fixture (HF's LlamaForCausalLM weights, 256 ids) with a small
# Llama-style tokenizer written here (the Mistral 7B pipeline: Prepend "▁",
# spaces -> "▁", BPE, TemplateProcessing "<s> $A"; one character per token,
# so the expected ids are computed by hand below):
#   - the first step's loss equals `loom forward` on a batch built here by
#     hand: <s> prompt completion </s>, labels -100 on <s>, the prompt and the
#     padding, padding with eos (2) since the config has no pad_token_id;
#   - the same batch with every token labelled gives another loss, so the
#     comparison shows the prompt is left out;
#   - a job naming a `messages` column is refused, naming the chat template.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
source "$(dirname "$0")/lib/layouts.sh" "$@"

char_tokenizer
python3 - "$data" <<'PY'
import json, struct, sys
d = sys.argv[1]
vocab = json.load(open("tokenizer.json"))["model"]["vocab"]

records = [
    ("question: what colour is the sky? answer:", " blue."),
    ("question: how many legs has a cat? answer:", " four, like a dog."),
    ("say hi:", " hi"),
    ("name a fruit:", " an apple, or a pear, or a plum."),
]
with open("sft.jsonl", "w") as f:
    for p, c in records:
        f.write(json.dumps({"prompt": p, "completion": c}) + "\n")

def ids(s):  # Prepend "▁", spaces -> "▁", one token per character
    return [vocab[c] for c in "▁" + s.replace(" ", "▁")]

rows, labels = [], []
for p, c in records:
    prompt = [1] + ids(p)
    completion = [vocab[ch] for ch in c.replace(" ", "▁")] + [2]
    rows.append(prompt + completion)
    labels.append([-100] * len(prompt) + completion)
T = max(map(len, rows))
pad = lambda r, v: r + [v] * (T - len(r))
def write(path, tensors):
    header, blob = {}, b""
    for name, rows_ in tensors.items():
        flat = [v for r in rows_ for v in r]
        raw = struct.pack(f"<{len(flat)}q", *flat)
        header[name] = {"dtype": "I64", "shape": [len(rows_), T],
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)
ids_ = [pad(r, 2) for r in rows]
mask = [pad([1] * len(r), 0) for r in rows]
write("batch.safetensors", {"input_ids": ids_, "attention_mask": mask,
                            "labels": [pad(l, -100) for l in labels]})
write("batch_all.safetensors", {"input_ids": ids_, "attention_mask": mask,
                                "labels": [pad(r, -100) for r in rows]})
print("completion targets:", sum(sum(v != -100 for v in l[1:]) for l in labels),
      "of", sum(len(r) - 1 for r in rows), "tokens after the first")
PY

cat > job.yaml <<YAML
model: {path: $data/hf/llama-lm, tokenizer: $work/tokenizer.json}
task: causal-lm
data: {train: $work/sft.jsonl, prompt_column: prompt, completion_column: completion, packing: false,
       max_seq_length: 64}
hyperparameters:
  output_dir: out
  max_steps: 1
  per_device_train_batch_size: 4
  learning_rate: 1.0e-3
  logging_steps: 1
  save_strategy: "no"
  seed: 7
YAML

"$loom" train job.yaml --threads 1 > train.log 2>&1 || { cat train.log; exit 1; }
grep -q "instruction data: tokens = prompt + completion" train.log || { cat train.log; exit 1; }
grep -q "padding uses eos_token_id 2" train.log || { cat train.log; exit 1; }
"$loom" forward --model "$data/hf/llama-lm" --batch batch.safetensors > fwd.log
"$loom" forward --model "$data/hf/llama-lm" --batch batch_all.safetensors > fwd_all.log
python3 - <<'PY'
import json, re
step = [r for r in map(json.loads, open("out/metrics.jsonl")) if "loss" in r and r.get("step") == 1]
assert len(step) == 1, step
got = step[0]["loss"]
parse = lambda f: re.search(r"^loss: (\S+) \(sum \S+ over (\d+) labelled", open(f).read(), re.M)
m, m_all = parse("fwd.log"), parse("fwd_all.log")
want, n = float(m.group(1)), int(m.group(2))
every, n_all = float(m_all.group(1)), int(m_all.group(2))
assert abs(got - want) <= 1e-5 * abs(want), f"train loss {got}, by-hand completion-only loss {want}"
assert n < n_all and abs(every - want) > 0.01, (want, every, n, n_all)
print(f"step 1 loss {got:.7f} = completion-only forward {want:.7f} over {n} tokens "
      f"(every token: {every:.7f} over {n_all})")
PY

echo "== chat messages are refused"
sed 's/prompt_column: prompt/prompt_column: messages/' job.yaml > chat.yaml
if "$loom" train chat.yaml > chat.log 2>&1; then echo "chat job ran"; exit 1; fi
grep -q "data.prompt_column: chat 'messages' records are not supported.*chat template" chat.log \
    || { cat chat.log; exit 1; }
echo "PASS"

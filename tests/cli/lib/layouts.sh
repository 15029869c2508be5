# Shared set-up of the layout-equivalence tests (train_dp.sh, train_pp.sh,
# train_tp.sh): every parallel layout of `loom train` must train the 1-rank
# model. Sourced, not run (tests/cli/*.sh are the tests; this folder is not).
#
#   source "$(dirname "$0")/lib/layouts.sh" "$@"   # $1 = loom, $2 = tests/data
#
# Leaves the caller in a fresh work folder (removed on exit) with:
#   loom, data, here   absolute paths (here = tests/cli)
#   mpi N CMD...       mpirun, oversubscribed, one OpenMP thread per rank
#   train_on JOB OUT RANKS [--set ...]   `loom train JOB` on RANKS ranks into OUT
#   compare REF OTHER [LOSS_RTOL PARAM_ATOL [GRAD_NORM_RTOL [NOISE_REGEX]]]
#                      compare_runs.py (defaults: 1e-5 and 3e-4)
#   layout_configs     writes bert.json, gpt2.json (4 layers), bert8.json,
#                      gpt8.json (8 layers) and albert.json, distilbert.json,
#                      roberta.json (4 layers, the word-piece vocabulary, MLM)
#   llama_config       writes llama.json: the llama-lm fixture's config (GQA 4/2
#                      heads) with 4 layers and tiny-gpt2's vocabulary
#   layout_job TASK CONFIG TOKENIZER [DATA]   a job file on stdout
set -euo pipefail
loom=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (Debian openmpi-bin)"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
mpi() { local n=$1; shift; mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" "$@"; }
train_on() {
  local j=$1 out=$2 n=$3; shift 3
  mpi "$n" "$loom" train "$j" --quiet --set hyperparameters.output_dir="$out" "$@"
}

# Parameters: 3e-4 is 0.3% of what 10 AdamW steps at learning rate 1e-2 move a
# weight; another split of the work reorders gradient sums, and m / sqrt(v)
# amplifies that rounding where v is tiny (the losses agree to ~1e-7).
compare() {
  local ref=$1 other=$2
  shift 2
  [[ $# -gt 0 ]] || set -- 1e-5 3e-4
  python3 "$here/compare_runs.py" "$ref" "$other" "$@"
}

layout_configs() {
  python3 - "$data" <<'PY'
import json, sys
d = sys.argv[1]
vocab = json.load(open(f"{d}/train/tiny-bert.json"))["vocab_size"]
def put(src, dst, **kw):
    c = json.load(open(src))
    c.update(kw)
    json.dump(c, open(dst, "w"), indent=1)
put(f"{d}/train/tiny-bert.json", "bert.json", num_hidden_layers=4)
put(f"{d}/train/tiny-gpt2.json", "gpt2.json", n_layer=4)
put(f"{d}/train/tiny-bert.json", "bert8.json", num_hidden_layers=8)
put(f"{d}/train/tiny-gpt2.json", "gpt8.json", n_layer=8)
put(f"{d}/hf/albert-mlm/config.json", "albert.json", vocab_size=vocab, num_hidden_layers=4)
put(f"{d}/hf/distilbert-mlm/config.json", "distilbert.json", vocab_size=vocab, n_layers=4)
put(f"{d}/hf/roberta-cls/config.json", "roberta.json", vocab_size=vocab,
    architectures=["RobertaForMaskedLM"], num_hidden_layers=4)
PY
}

llama_config() {
  python3 - "$data" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/hf/llama-lm/config.json"))
c.update(vocab_size=json.load(open(f"{d}/train/tiny-gpt2.json"))["vocab_size"],
         num_hidden_layers=4)
json.dump(c, open("llama.json", "w"), indent=1)
PY
}

# tokenizer.json: the Mistral 7B tokenizer's pipeline (Metaspace, byte
# fallback) with a character vocabulary, so token ids can be written by hand.
char_tokenizer() {
  python3 - "$data" <<'PY'
import json, sys
tok = json.load(open(f"{sys.argv[1]}/tokenizers/mistral-7b/tokenizer.json"))
chars = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("?:.,")
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for c in chars:
    vocab[c] = len(vocab)
tok["model"]["vocab"] = vocab
tok["model"]["merges"] = []
json.dump(tok, open("tokenizer.json", "w"), ensure_ascii=False)
PY
}

layout_job() {  # TASK CONFIG TOKENIZER [DATA]: CONFIG relative to the work folder or absolute
  local config=$2
  [[ $config == /* ]] || config=$PWD/$config
  cat <<YAML
model: {config: $config, tokenizer: $data/tokenizers/$3/tokenizer.json}
task: $1
data: {train: $data/train/${4:-lm_train.jsonl}, max_seq_length: 32}
hyperparameters:
  output_dir: out
  overwrite_output_dir: true
  max_steps: 10
  per_device_train_batch_size: 8
  learning_rate: 1.0e-2
  max_grad_norm: 1.0
  logging_steps: 1
  save_strategy: steps
  save_steps: 4
  seed: 7
YAML
}

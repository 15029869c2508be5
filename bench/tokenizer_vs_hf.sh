#!/usr/bin/env bash
# Loom's tokenizer next to Hugging Face tokenizers (Rust, via the Node binding)
# on the same ~10 MB of fortune-cookie text, bert-base-uncased and GPT-2, one
# thread, then all cores; prints the single-thread speed ratio loom / HF.
#   bench/tokenizer_vs_hf.sh [BUILD_DIR]     (default build/cpu-release)
# Needs node + npm (the peer is installed into bench/peer on first use).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
bench="$build/bench/bench_tokenizer"
[[ -x "$bench" ]] || { echo "build bench_tokenizer first: cmake --build $build --target bench_tokenizer" >&2; exit 1; }
if [[ ! -d "$root/bench/peer/node_modules/@anush008/tokenizers" ]]; then
  (cd "$root/bench/peer" && npm install --no-audit --no-fund >/dev/null)
fi
unset OPENBLAS_CORETYPE
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bench" --write-corpus "$work/corpus.txt" --mb 10 >/dev/null
for name in bert-base-uncased gpt2; do
  tok="$root/tests/data/tokenizers/$name/tokenizer.json"
  loom1=$("$bench" --corpus "$work/corpus.txt" --tokenizer "$tok" --threads 1 | grep '^loom')
  hf1=$(TOKENIZERS_PARALLELISM=false node "$root/bench/tokenizers_peer.js" "$tok" "$work/corpus.txt" "$name")
  loomn=$("$bench" --corpus "$work/corpus.txt" --tokenizer "$tok" | grep '^loom' | tail -1)
  hfn=$(TOKENIZERS_PARALLELISM=true node "$root/bench/tokenizers_peer.js" "$tok" "$work/corpus.txt" "$name")
  printf '%s\n%s\n%s\n%s\n' "$loom1" "$hf1" "$loomn" "$hfn"
  l=$(awk '{for (i=1;i<=NF;i++) if ($i=="MB/s") print $(i-1)}' <<<"$loom1")
  h=$(awk '{for (i=1;i<=NF;i++) if ($i=="MB/s") print $(i-1)}' <<<"$hf1")
  awk -v l="$l" -v h="$h" -v n="$name" 'BEGIN { printf "%s: single-thread loom/HF = %.2fx\n\n", n, l / h }'
done

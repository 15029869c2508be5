#!/usr/bin/env bash
# `loom preprocess` throughput: MB/s of raw text into masked-LM token shards
# with the bert-base-uncased tokenizer, on all cores and on one, from ~20 MB
# of Debian's fortunes (repeated).
#   bench/preprocess_throughput.sh [build dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
loom=$build/loom
[[ -x $loom ]] || { echo "preprocess_throughput.sh: build loom first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/examples/fortunes/prepare_fortunes.py" "$work" >/dev/null
for _ in $(seq 10); do cat "$work/pretrain.txt"; done > "$work/corpus.txt"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc), text: $(du -h "$work/corpus.txt" | cut -f1)"
tok=$root/tests/data/tokenizers/bert-base-uncased/tokenizer.json
for threads in $(nproc) 1; do
  rm -rf "$work/shards"
  "$loom" preprocess --tokenizer "$tok" --input "$work/corpus.txt" --output "$work/shards" \
    --task masked-lm --max-seq-length 128 --sample-by line --threads "$threads" 2>/dev/null |
    sed "s/^/threads $threads: /"
done

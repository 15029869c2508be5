#!/usr/bin/env bash
# Regenerates tests/data/tokenizers/precompiled: trains a small sentencepiece
# unigram model (nmt_nfkc rules, so a real precompiled_charsmap) on Debian
# fortune-cookie text, then has HF tokenizers (Node binding in bench/peer)
# write tokenizer.json and the expected outputs.
# Needs: apt-get install sentencepiece fortunes; npm ci in bench/peer.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for f in cookie people science; do cat "/usr/share/games/fortunes/$f"; done | grep -v '^%$' > "$work/corpus.txt"
spm_train --input="$work/corpus.txt" --model_prefix="$work/spm" --vocab_size=1000 --model_type=unigram \
    --normalization_rule_name=nmt_nfkc --character_coverage=1.0 > "$work/train.log" 2>&1
mkdir -p "$root/tests/data/tokenizers/precompiled"
node "$root/tests/tokenizer/make_precompiled_fixture.js" "$work/spm.model" "$root/tests/data/tokenizers/precompiled"

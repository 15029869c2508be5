#!/usr/bin/env bash
# Runs each tokenizer fuzz target for a short while (default 30 s each),
# seeded from the fixtures; fails if any target finds a crash.
#   fuzz/run_short.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
bash "$root/fuzz/build.sh"
out="$root/build/fuzz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Seeds: the fixture tokenizer.json files (loader) and the case texts (encoder).
mkdir -p "$work/load" "$work/encode"
cp "$root"/tests/data/tokenizers/unigram-albert-style/tokenizer.json "$work/load/unigram.json"
cp "$root"/tests/data/tokenizers/wordpiece-multilingual-cased/tokenizer.json "$work/load/wordpiece.json"
i=0
for f in "$root"/tests/data/tokenizers/*/cases.json; do
  # `|| true`: head stops reading after 40 lines, and grep's SIGPIPE must not
  # fail the script under pipefail.
  { grep -o '"text": "[^"]*"' "$f" || true; } | head -40 | while read -r line; do
    i=$((i + 1)); printf "\\x$(printf %02x $((i % 256)))%s" "${line#\"text\": }" > "$work/encode/seed_$(basename "$(dirname "$f")")_$i"
  done
done
status=0
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for target in fuzz_tokenizer_load fuzz_tokenizer_encode; do
  corpus="$work/${target#fuzz_tokenizer_}"
  echo "== $target (${secs}s)"
  rc=0
  (cd "$work" && "$out/$target" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 \
      -print_final_stats=1 "$corpus" > "$work/$target.log" 2>&1) || rc=$?
  tail -8 "$work/$target.log"
  [[ $rc -eq 0 ]] || { echo "$target exited with $rc"; status=1; }
  if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* >/dev/null 2>&1; then
    echo "$target found a failure:"; ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null
    mkdir -p "$out/findings" && cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$out/findings/" 2>/dev/null || true
    status=1
  fi
done
exit $status

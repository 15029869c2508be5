#!/usr/bin/env bash
# Builds the tokenizer libFuzzer targets with clang (ASan + UBSan + coverage)
# into build/fuzz/. Needs clang and libclang-rt-14-dev (scripts/install_deps.sh).
#   fuzz/build.sh            -> build/fuzz/fuzz_tokenizer_load, build/fuzz/fuzz_tokenizer_encode
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/build/fuzz"
mkdir -p "$out/obj"
cxx=${CXX_FUZZ:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz/build.sh: $cxx not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -I"$root/src" -DLOOM_TEST_DATA_DIR="\"$root/tests/data\"")
objs=()
for src in "$root"/src/tokenizer/*.cpp; do
  obj="$out/obj/$(basename "${src%.cpp}").o"
  if [[ ! -f "$obj" || "$src" -nt "$obj" || -n "$(find "$root/src/tokenizer" -name '*.h' -newer "$obj")" ]]; then
    "$cxx" "${flags[@]}" -c "$src" -o "$obj" &
  fi
  objs+=("$obj")
  # at most 2 compilers at once (the build machines have 2 cores)
  while (( $(jobs -r | wc -l) >= 2 )); do wait -n; done
done
wait
libs=(-lutf8proc -lpcre2-8)
for target in fuzz_tokenizer_load fuzz_tokenizer_encode; do
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "$root/fuzz/$target.cpp" "${objs[@]}" "${libs[@]}" -o "$out/$target"
  echo "built $out/$target"
done

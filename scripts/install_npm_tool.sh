#!/usr/bin/env bash
# Installs a test-side npm package set into tests/FOLDER/node_modules, pinned
# by tests/FOLDER/package.json, and prints tests/FOLDER/FILE (which must exist
# once installed). Used for s3rver (the s3:// tests' server) and
# @huggingface/hub (the Hub tests' independent client). Exits 3 (and says why)
# when node or npm is missing, so tests can skip with that reason.
#   scripts/install_npm_tool.sh s3rver node_modules/s3rver/bin/s3rver.js
#   scripts/install_npm_tool.sh hub node_modules/@huggingface/hub/package.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -eq 2 ]] || { echo "usage: $0 FOLDER FILE (under tests/)" >&2; exit 2; }
dir="$root/tests/$1"
want="$dir/$2"
if ! command -v node >/dev/null 2>&1; then
  echo "node is not installed (Debian: apt-get install nodejs npm)" >&2
  exit 3
fi
if [[ ! -f "$want" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is not installed (Debian: apt-get install npm)" >&2
    exit 3
  fi
  # Several test processes may get here at once: one installs, the rest wait.
  exec 9>"$dir/.install.lock"
  flock 9
  if [[ ! -f "$want" ]]; then
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error >&2)
  fi
fi
echo "$want"

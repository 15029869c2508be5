#!/usr/bin/env bash
# Installs @huggingface/hub (the official JavaScript Hub client, the
# independent side of the Hub tests) into tests/hub/node_modules with npm,
# pinned by tests/hub/package.json. Prints the folder. Exits 3 (and says
# why) when node or npm is missing, so tests can skip with that reason.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/tests/hub"
mark="$dir/node_modules/@huggingface/hub/package.json"
if ! command -v node >/dev/null 2>&1; then
  echo "node is not installed (Debian: apt-get install nodejs npm)" >&2
  exit 3
fi
if [[ ! -f "$mark" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is not installed (Debian: apt-get install npm)" >&2
    exit 3
  fi
  # Several test processes may get here at once: one installs, the rest wait.
  exec 9>"$dir/.install.lock"
  flock 9
  if [[ ! -f "$mark" ]]; then
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error >&2)
  fi
fi
echo "$dir"

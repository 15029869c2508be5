#!/usr/bin/env bash
# Installs s3rver (an S3-compatible server the s3:// tests start on loopback)
# into tests/s3rver/node_modules with npm, pinned by tests/s3rver/package.json.
# Prints the server's path. Exits 3 (and says why) when node or npm is missing,
# so tests can skip with that reason.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/tests/s3rver"
bin="$dir/node_modules/s3rver/bin/s3rver.js"
if ! command -v node >/dev/null 2>&1; then
  echo "node is not installed (Debian: apt-get install nodejs npm)" >&2
  exit 3
fi
if [[ ! -f "$bin" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is not installed (Debian: apt-get install npm)" >&2
    exit 3
  fi
  # Several test processes may get here at once: one installs, the rest wait.
  exec 9>"$dir/.install.lock"
  flock 9
  if [[ ! -f "$bin" ]]; then
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error >&2)
  fi
fi
echo "$bin"

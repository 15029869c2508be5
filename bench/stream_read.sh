#!/usr/bin/env bash
# Streaming read throughput of one token-shard-sized object (256 MiB) through
# ByteSource: from a loopback S3 server (s3rver, tests/s3rver) against the
# same file on local disk (page cache dropped is not possible here, so the
# local figure is a warm read: the ceiling the network path is measured
# against).
#   bench/stream_read.sh [build dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu-release}
bin=$build/bench/bench_byte_source
[[ -x $bin ]] || { echo "stream_read.sh: build bench_byte_source first" >&2; exit 2; }
server=$(bash "$root/scripts/install_npm_tool.sh" s3rver node_modules/s3rver/bin/s3rver.js)
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/s3"
node --openssl-legacy-provider "$server" -d "$work/s3" -a 127.0.0.1 -p "$port" --silent \
  --configure-bucket bench >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
head -c $((256 << 20)) /dev/urandom > "$work/shard.bin"
cat > "$work/s3cfg" <<CFG
[default]
access_key = S3RVER
secret_key = S3RVER
host_base = 127.0.0.1:$port
host_bucket = 127.0.0.1:$port
use_https = False
CFG
s3cmd -q -c "$work/s3cfg" put "$work/shard.bin" s3://bench/shard.bin
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 \
  AWS_ENDPOINT_URL=http://127.0.0.1:$port
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"
"$bin" "$work/shard.bin" >/dev/null  # warm the page cache
local_json=$("$bin" "$work/shard.bin")
s3_json=$("$bin" s3://bench/shard.bin)
echo "$local_json"
echo "$s3_json"
python3 - "$local_json" "$s3_json" <<'PY'
import json, sys
l, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"256 MiB shard, sequential 256 KiB reads: local disk {l['mb_per_s']:.0f} MB/s, "
      f"s3 on loopback (s3rver, 8 MiB ranged GETs, 4 ahead) {s['mb_per_s']:.0f} MB/s")
PY

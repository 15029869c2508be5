# s3rver (an S3-compatible server, npm) on a free loopback port for the s3://
# command-line tests, with s3cmd as the independent client that puts and lists
# objects. Sourced, not run (tests/cli/*.sh are the tests; this folder is not).
#
#   source "$(dirname "$0")/lib/s3rver.sh"
#   trap 's3_stop; rm -rf "$work"' EXIT
#   s3_start BUCKET || { echo "SKIP: $s3_why"; exit 0; }
#
# After s3_start: AWS_* point Loom at the server (s3rver's fixed key S3RVER),
# `s3 ARGS...` runs s3cmd against it, and s3_stop (safe to call twice, or
# before a start) stops it and removes its data.
s3_pid=
s3_data=
s3_why=

s3_start() {
  local bucket=$1 root server
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
  if ! command -v s3cmd >/dev/null; then
    s3_why="s3cmd is not installed (Debian: apt-get install s3cmd)"; return 1
  fi
  if ! server=$(bash "$root/scripts/install_npm_tool.sh" s3rver node_modules/s3rver/bin/s3rver.js 2>&1 | tail -1) || [[ ! -f $server ]]; then
    s3_why="s3rver unavailable: $server"; return 1
  fi
  s3_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  s3_data=$(mktemp -d)
  # s3rver makes ListObjectsV2 continuation tokens with DES, which OpenSSL 3
  # keeps in its legacy provider.
  node --openssl-legacy-provider "$server" -d "$s3_data" -a 127.0.0.1 -p "$s3_port" --silent \
    --configure-bucket "$bucket" >"$s3_data.log" 2>&1 &
  s3_pid=$!
  local i
  for i in $(seq 300); do
    (echo >"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null && break
    kill -0 "$s3_pid" 2>/dev/null || { s3_why="s3rver exited: $(cat "$s3_data.log")"; return 1; }
    sleep 0.1
  done
  printf '[default]\naccess_key = S3RVER\nsecret_key = S3RVER\nhost_base = 127.0.0.1:%s\nhost_bucket = 127.0.0.1:%s\nuse_https = False\nsignature_v2 = False\n' \
    "$s3_port" "$s3_port" >"$s3_data.cfg"
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 \
    AWS_ENDPOINT_URL=http://127.0.0.1:$s3_port
  unset AWS_SESSION_TOKEN AWS_PROFILE
}

s3() { s3cmd -q -c "$s3_data.cfg" "$@"; }

s3_stop() {
  if [[ -n $s3_pid ]]; then
    kill "$s3_pid" 2>/dev/null || true
    wait "$s3_pid" 2>/dev/null || true
    s3_pid=
  fi
  if [[ -n $s3_data ]]; then
    rm -rf "$s3_data" "$s3_data.log" "$s3_data.cfg"
    s3_data=
  fi
}

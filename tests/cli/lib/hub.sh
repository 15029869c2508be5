# The test Hub server (tests/hub/server.js) on a loopback port, and the
# official @huggingface/hub client (npm, pinned in tests/hub) as the
# independent side. Sourced, not run.
#
#   source "$(dirname "$0")/lib/hub.sh"
#   trap 'hub_stop; rm -rf "$work"' EXIT
#   hub_start [server args...] || { echo "SKIP: $hub_why"; exit 0; }
#
# After hub_start: HF_ENDPOINT points Loom at the server, HF_HOME at a fresh
# cache under $hub_data, the valid tokens are hf_good and hf_other;
# `hub_client CMD REPO ...` runs tests/hub/client.mjs; hub_kill stops the
# server keeping its data, hub_restart [args...] starts it again on the same
# port; hub_stop (safe twice) stops it and removes the data.
# `hub_tiny_model DIR` trains the tests' base model into DIR (one step of a
# tiny multilingual-cased BERT classifier; $loom, $data and $w are the caller's).
hub_pid=
hub_data=
hub_why=
hub_port=
hub_dir=

hub_launch() {
  node "$hub_dir/server.js" --port "$hub_port" --data "$hub_data/server" --tokens hf_good,hf_other \
    --log "$hub_data/requests.log" "$@" >>"$hub_data/server.log" 2>&1 &
  hub_pid=$!
  local i
  for i in $(seq 300); do
    [[ -f $hub_data/server/port ]] && (echo >"/dev/tcp/127.0.0.1/$hub_port") 2>/dev/null && return 0
    kill -0 "$hub_pid" 2>/dev/null || { hub_why="hub server exited: $(cat "$hub_data/server.log")"; return 1; }
    sleep 0.1
  done
  hub_why="hub server did not start"; return 1
}

hub_start() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
  local mark
  hub_dir="$root/tests/hub"
  if ! mark=$(bash "$root/scripts/install_npm_tool.sh" hub node_modules/@huggingface/hub/package.json 2>&1 | tail -1) || [[ ! -f $mark ]]; then
    hub_why="@huggingface/hub unavailable: $mark"; return 1
  fi
  hub_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  hub_data=$(mktemp -d)
  mkdir -p "$hub_data/server"
  hub_launch "$@" || return 1
  export HF_ENDPOINT=http://127.0.0.1:$hub_port HF_HOME=$hub_data/hf
  unset HF_TOKEN HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE HF_TOKEN_PATH
}

hub_client() { local cmd=$1; shift; node "$hub_dir/client.mjs" "$cmd" "$HF_ENDPOINT" "$@"; }

hub_kill() {
  if [[ -n $hub_pid ]]; then
    kill "$hub_pid" 2>/dev/null || true
    wait "$hub_pid" 2>/dev/null || true
    hub_pid=
  fi
}

hub_restart() { rm -f "$hub_data/server/port"; hub_launch "$@"; }

hub_stop() {
  hub_kill
  if [[ -n $hub_data ]]; then
    rm -rf "$hub_data"
    hub_data=
  fi
}

hub_tiny_model() {
  cat >"$w/tiny.yaml" <<YAML
model:
  config: $data/train/tiny-bert.json
  tokenizer: $data/tokenizers/wordpiece-multilingual-cased/tokenizer.json
task: sequence-classification
data:
  train: $data/train/cls_train.jsonl
  max_seq_length: 32
hyperparameters:
  output_dir: $1
  max_steps: 1
  save_strategy: 'no'
YAML
  "$loom" train "$w/tiny.yaml" --quiet >"$w/tiny.log" 2>&1 || { cat "$w/tiny.log" >&2; return 1; }
}

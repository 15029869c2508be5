# Sourced by the side-by-side scripts: PyTorch's step in its faster OpenMP
# environment. Measured here, PyTorch 1.13's fp32 step ran about 2x slower
# under OpenMP's default wait policy than under OMP_WAIT_POLICY=passive (its
# OpenBLAS threads compete with spinning OpenMP threads), while its bf16 step
# ran 10-20% faster under the default; so the peer runs under both and the
# faster one counts. Loom itself runs under the default (what a user gets).
#   torch_best ARGS...  -> the faster run's JSON line, with "omp_wait_policy" added
# peer_script names the peer (default torch_bert_step.py).
torch_best() {
  local passive default script="$root/bench/${peer_script:-torch_bert_step.py}"
  passive=$(OMP_WAIT_POLICY=passive "$python" "$script" "$@" | tail -1)
  default=$(env -u OMP_WAIT_POLICY "$python" "$script" "$@" | tail -1)
  "$python" - "$passive" "$default" <<'PY'
import json, sys
runs = [dict(json.loads(sys.argv[1]), omp_wait_policy="passive"),
        dict(json.loads(sys.argv[2]), omp_wait_policy="default")]
print(json.dumps(max(runs, key=lambda r: r["tokens_per_s"])))
PY
}

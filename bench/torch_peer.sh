# Sourced by the side-by-side scripts: PyTorch's step in its faster OpenMP
# environment. Measured here, PyTorch 1.13's fp32 step ran about 2x slower
# under OpenMP's default wait policy than under OMP_WAIT_POLICY=passive (its
# OpenBLAS threads compete with spinning OpenMP threads), while its bf16 step
# ran 10-20% faster under the default; so the peer runs under both and the
# faster one counts. Loom itself runs under the default (what a user gets).
#   torch_best ARGS...  -> the faster run's JSON line, with "omp_wait_policy" added
# peer_script names the peer (default torch_bert_step.py). TORCH_WAIT_POLICY=
# passive|default runs the peer under that policy only: PyTorch 1.13's bf16
# step takes minutes where the CPU lacks AVX-512 BF16, and its two runs would
# double that.
torch_best() {
  local passive default script="$root/bench/${peer_script:-torch_bert_step.py}"
  case ${TORCH_WAIT_POLICY:-both} in
    passive) passive=$(OMP_WAIT_POLICY=passive "$python" "$script" "$@" | tail -1); default=null ;;
    default) default=$(env -u OMP_WAIT_POLICY "$python" "$script" "$@" | tail -1); passive=null ;;
    both)
      passive=$(OMP_WAIT_POLICY=passive "$python" "$script" "$@" | tail -1)
      default=$(env -u OMP_WAIT_POLICY "$python" "$script" "$@" | tail -1)
      ;;
    *) echo "TORCH_WAIT_POLICY: expected passive, default or both, got '$TORCH_WAIT_POLICY'" >&2; return 2 ;;
  esac
  "$python" - "$passive" "$default" <<'PY'
import json, sys
runs = [dict(json.loads(arg), omp_wait_policy=policy)
        for arg, policy in zip(sys.argv[1:], ("passive", "default")) if arg != "null"]
print(json.dumps(max(runs, key=lambda r: r["tokens_per_s"])))
PY
}

#!/usr/bin/env bash
# Data-parallel scaling of a BERT-base-shaped masked-LM step: bench_dp at dp 1
# and dp 2 under mpirun, one core (one OpenMP thread) per rank, the same batch
# per rank (weak scaling). Prints both JSON lines and a summary:
#   efficiency   = step time at dp 1 / step time at dp 2 (1.0 = perfect)
#   hidden share = part of the bucketed all-reduce that ran during backward
#   bandwidth    = bucketed reduction vs one plain MPI_Allreduce of the same bytes
#
#   bench/dp_scaling.sh [path/to/bench_dp] [extra bench_dp options...]
#
# NOTE: on a shared machine other jobs inflate every time here; compare runs
# taken back to back, and read the numbers with the load average printed.
set -euo pipefail
bin=${1:-build/cpu-release/bench/bench_dp}
shift || true
[[ -x $bin ]] || { echo "dp_scaling.sh: no bench_dp at $bin (build target bench_dp)" >&2; exit 2; }
unset OPENBLAS_CORETYPE
cores=$(nproc --all)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $cores"
one=$(mpirun --allow-run-as-root -np 1 --bind-to core "$bin" "$@" | tail -1)
two=$(mpirun --allow-run-as-root -np 2 --bind-to core "$bin" "$@" | tail -1)
echo "$one"
echo "$two"
python=/usr/bin/python3
[[ -x $python ]] || python=python3
"$python" - "$one" "$two" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
eff = a["step_ms"] / b["step_ms"]
print(f"dp1 step {a['step_ms']:.0f} ms, dp2 step {b['step_ms']:.0f} ms: "
      f"scaling efficiency {eff:.2f} ({b['samples_per_s']:.2f} vs {a['samples_per_s']:.2f} samples/s)")
print(f"dp2 backward {b['backward_ms']:.0f} ms (dp1 {a['backward_ms']:.0f} ms), "
      f"exposed wait {b['finalize_wait_ms']:.0f} ms, bucketed all-reduce alone "
      f"{b['bucketed_allreduce_ms']:.0f} ms: hidden share {b['hidden_share']:.2f}")
print(f"{b['grad_mb']:.0f} MiB of gradients in {b['buckets']} buckets: "
      f"{b['bucketed_algbw_GBps']:.2f} GB/s bucketed vs {b['plain_algbw_GBps']:.2f} GB/s "
      f"plain MPI_Allreduce")
PY

#!/usr/bin/env bash
# `loom plan --machine a100-80gb-sxm` against the measured Megatron-LM runs of
# tests/data/plan/published_runs.tsv (SC21 Table 1, Korthikanti et al. 2022):
# median |error| in TFLOP/s per GPU within 15% (SC21 Tables 1 and 2, Korthikanti Table 5 and section 6.3), Table 2's per-layer
# activation memory within 15%, every published run predicted to fit.
#   $1 = loom binary, $2 = tests/data directory
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/plan_published.py" "$1" "$2/plan/published_runs.tsv"
echo "plan_published: ok"

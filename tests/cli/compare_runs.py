"""Compares two `loom train` output folders: per-step losses from
metrics.jsonl (relative tolerance) and the final model.safetensors (absolute
tolerance), the layout-equivalence check of the parallelism tests.

usage: compare_runs.py REF OTHER [LOSS_RTOL [PARAM_ATOL [GRAD_NORM_RTOL [NOISE_REGEX]]]]
With GRAD_NORM_RTOL the logged per-step gradient norms must agree too (a
layout that counts a replicated or sharded parameter wrongly shows up there
first). Tensors whose names match NOISE_REGEX get 10 x PARAM_ATOL: parameters
whose exact gradient is zero (attention key biases: softmax ignores a
per-query constant) receive pure rounding noise, which AdamW's m / sqrt(v)
turns into learning-rate-sized steps of either sign.
"""
import json
import re
import struct
import sys
from array import array


def losses(d):
    return {r["step"]: r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in r}


def grad_norms(d):
    return {r["step"]: r["grad_norm"] for r in map(json.loads, open(d + "/metrics.jsonl"))
            if r.get("grad_norm", -1) >= 0}


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a0, a1 = v["data_offsets"]
        out[k] = array("f", raw[8 + n + a0:8 + n + a1])
    return out


def main():
    ref, other = sys.argv[1], sys.argv[2]
    rtol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6
    atol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4
    a, b = losses(ref), losses(other)
    steps = sorted(b)
    assert steps, f"{other}: no losses"
    assert all(s in a for s in steps), f"{other}: steps {steps} not all in {ref}"
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
    print(f"{other}: steps {steps[0]}..{steps[-1]}, worst relative loss difference {worst:.2e}")
    assert worst < rtol, f"{other} differs from {ref} (limit {rtol})"
    if len(sys.argv) > 5:
        gtol = float(sys.argv[5])
        ga, gb = grad_norms(ref), grad_norms(other)
        assert sorted(gb) == steps and all(s in ga for s in steps), f"{other}: grad_norm missing"
        gworst = max(abs(ga[s] - gb[s]) / abs(ga[s]) for s in steps)
        print(f"{other}: worst relative grad_norm difference {gworst:.2e}")
        assert gworst < gtol, f"{other}: grad_norm differs from {ref} (limit {gtol})"
    ta, tb = tensors(ref + "/model.safetensors"), tensors(other + "/model.safetensors")
    assert ta.keys() == tb.keys(), f"tensor names differ: {sorted(ta.keys() ^ tb.keys())[:5]}"
    noise = re.compile(sys.argv[6]) if len(sys.argv) > 6 else None
    def limit(k):
        return 10 * atol if noise and noise.search(k) else atol
    # Worst difference relative to each tensor's own limit.
    ratio, diff, where = max((max(abs(x - y) for x, y in zip(ta[k], tb[k])) / limit(k),
                              max(abs(x - y) for x, y in zip(ta[k], tb[k])), k) for k in ta)
    print(f"{other}: final parameters, max difference {diff:.2e} ({where}, limit {limit(where):.0e})")
    # Sums of gradients in another order round differently; AdamW's
    # m / sqrt(v) amplifies that where v is tiny.
    assert ratio < 1, f"{other}: final parameters differ ({where}, limit {limit(where)})"


main()

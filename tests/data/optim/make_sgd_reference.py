#!/usr/bin/env python3
"""SGD reference for tests/models/test_sgd.cpp: writes sgd_reference.json.

torch.optim.SGD as the HF Trainer builds it for optim="sgd": two parameter
groups (weight decay for weights, none for biases and LayerNorm), no
momentum, 3 steps with fixed gradients and a linear learning-rate decay.

Run with Debian's PyTorch:  /usr/bin/python3 make_sgd_reference.py
"""
import json
import os

import torch

torch.manual_seed(0)
shapes = {"dense.weight": (3, 4), "dense.bias": (3,), "LayerNorm.weight": (4,)}
params = {n: torch.randn(s, dtype=torch.float32) for n, s in shapes.items()}
init = {n: p.clone() for n, p in params.items()}
grads = [{n: torch.randn(s, dtype=torch.float32) for n, s in shapes.items()} for _ in range(3)]
lr, wd = 0.1, 0.05
named = [(n, torch.nn.Parameter(p)) for n, p in params.items()]
decay = [p for n, p in named if not ("bias" in n or "LayerNorm" in n)]
plain = [p for n, p in named if ("bias" in n or "LayerNorm" in n)]
opt = torch.optim.SGD([{"params": decay, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}], lr=lr)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 4.0)
lrs, after = [], []
for g in grads:
    for n, p in named:
        p.grad = g[n].clone()
    lrs.append(sched.get_last_lr()[0])
    opt.step()
    sched.step()
    after.append({n: p.detach().flatten().tolist() for n, p in named})
out = {
    "lr": lr, "weight_decay": wd, "lrs": lrs,
    "params": {n: {"shape": list(shapes[n]), "values": init[n].flatten().tolist()} for n in shapes},
    "grads": [{n: g[n].flatten().tolist() for n in shapes} for g in grads],
    "after": after,
}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sgd_reference.json"), "w") as f:
    json.dump(out, f)

#!/usr/bin/env python3
"""LAMB reference for tests/models/test_lamb.cpp: writes lamb_reference.json.

The optimizer below is the LAMB update of You et al. 2019 (Algorithm 2, with
Adam's bias correction as in tensorflow_addons.LAMB and NVIDIA apex FusedLAMB),
with ALBERT's exclusion lists: names containing "bias" or "LayerNorm" get no
weight decay and no layer adaptation (trust ratio 1). It runs in float64 on
float32 starting values and gradients, with a linear warmup/decay schedule
through torch.optim.lr_scheduler.LambdaLR (HF's get_linear_schedule_with_warmup).

Run with Debian's PyTorch:  /usr/bin/python3 make_lamb_reference.py
"""
import json
import os

import torch

EXCLUDE = ("bias", "LayerNorm")


class Lamb(torch.optim.Optimizer):
    def __init__(self, named_params, lr, betas, eps, weight_decay, bias_correction):
        self.names = [n for n, _ in named_params]
        super().__init__([p for _, p in named_params],
                         dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                              bias_correction=bias_correction))
        self.trust = {}

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for name, p in zip(self.names, group["params"]):
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = st["step"]
                m, v, g = st["exp_avg"], st["exp_avg_sq"], p.grad
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                if group["bias_correction"]:
                    mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
                else:
                    mh, vh = m, v
                update = mh / (vh.sqrt() + group["eps"])
                excluded = any(x in name for x in EXCLUDE)
                if not excluded:
                    update = update + group["weight_decay"] * p
                ratio = 1.0
                if not excluded:
                    w_norm, u_norm = p.norm().item(), update.norm().item()
                    if w_norm > 0 and u_norm > 0:
                        ratio = w_norm / u_norm
                self.trust[name] = ratio
                p.add_(update, alpha=-group["lr"] * ratio)


def linear_with_warmup(warmup, total):
    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return f


def main():
    torch.manual_seed(1234)
    shapes = [
        ("albert.embeddings.word_embeddings.weight", (40, 8)),
        ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight", (16, 16)),
        ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.bias", (16,)),
        ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.LayerNorm.weight", (16,)),
        ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.LayerNorm.bias", (16,)),
        ("predictions.dense.weight", (8, 16)),  # starts at zero: trust ratio 1
    ]
    cases = []
    for bias_correction in (True, False):
        params = []
        for name, shape in shapes:
            if name == "predictions.dense.weight":
                x = torch.zeros(shape, dtype=torch.float32)
            elif name.endswith("LayerNorm.weight"):
                x = 1.0 + 0.1 * torch.randn(shape, dtype=torch.float32)
            else:
                x = 0.05 * torch.randn(shape, dtype=torch.float32)
            params.append((name, x))
        steps = 5
        grads = [[(0.01 * (k + 1) * torch.randn(x.shape, dtype=torch.float32)) for _, x in params]
                 for k in range(steps)]
        work = [(n, x.double().clone().requires_grad_(True)) for n, x in params]
        hp = dict(lr=2e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
        opt = Lamb(work, hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"], bias_correction)
        warmup, total = 2, 5
        sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_with_warmup(warmup, total))
        case = dict(bias_correction=bias_correction, lr=hp["lr"], beta1=hp["betas"][0],
                    beta2=hp["betas"][1], eps=hp["eps"], weight_decay=hp["weight_decay"],
                    warmup_steps=warmup, total_steps=total,
                    params={n: dict(shape=list(x.shape), values=x.flatten().tolist())
                            for n, x in params},
                    steps=[])
        for k in range(steps):
            for (n, p), g in zip(work, grads[k]):
                p.grad = g.double()
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            case["steps"].append(dict(
                lr=lr,
                grads={n: g.flatten().tolist() for (n, _), g in zip(work, grads[k])},
                trust_ratio=dict(opt.trust),
                params={n: p.detach().flatten().tolist() for n, p in work}))
        cases.append(case)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lamb_reference.json")
    with open(out, "w") as f:
        json.dump(dict(generator="make_lamb_reference.py", torch=torch.__version__, cases=cases), f)
    print("wrote", out)


if __name__ == "__main__":
    main()

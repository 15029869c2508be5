#!/usr/bin/python3
"""Writes tests/data/ops/ops_reference.safetensors: PyTorch's own results for the
CPU ops (forward and backward), the reference tests/ops/test_ops_reference.cpp
checks Loom's kernels against.

Run with the Debian PyTorch (1.13, CPU):  /usr/bin/python3 tests/ops/make_ops_reference.py
Every tensor is float32 (I64 for ids/targets/masks). Attention follows
transformers' eager arithmetic: BERT adds (1 - mask) * finfo.min to the scaled
scores; GPT-2 replaces causally hidden scores by finfo.min, then adds the same
padding term. The file is written by hand (no safetensors package needed).
"""
import json
import math
import os
import struct

import torch

torch.manual_seed(20240611)
torch.set_num_threads(1)
OUT = {}


def put(name, t):
    OUT[name] = t.detach().contiguous()


def grads(loss_of, *inputs):
    for t in inputs:
        t.grad = None
    loss_of().backward()
    return [t.grad.detach().clone() for t in inputs]


# --- linear: nn.Linear with bias (N=33, C=70, OC=45) ---------------------------
x = torch.randn(33, 70, requires_grad=True)
w = (torch.randn(45, 70) * 0.1).requires_grad_()
b = torch.randn(45, requires_grad=True)
dout = torch.randn(33, 45)
y = torch.nn.functional.linear(x, w, b)
dx, dw, db = grads(lambda: (torch.nn.functional.linear(x, w, b) * dout).sum(), x, w, b)
for k, v in dict(x=x, w=w, b=b, dout=dout, out=y, dx=dx, dw=dw, db=db).items():
    put("linear." + k, v)

# --- layer norm over C = 768, rows with a large mean --------------------------
x = (torch.randn(24, 768) * 2 + 3).requires_grad_()
w = torch.randn(768, requires_grad=True)
b = torch.randn(768, requires_grad=True)
dout = torch.randn(24, 768)
ln = lambda: torch.nn.functional.layer_norm(x, (768,), w, b, eps=1e-12)
dx, dw, db = grads(lambda: (ln() * dout).sum(), x, w, b)
for k, v in dict(x=x, w=w, b=b, dout=dout, out=ln(), dx=dx, dw=dw, db=db).items():
    put("layer_norm." + k, v)


# --- activations (HF definitions) ------------------------------------------------
def gelu_new(t):  # transformers.activations.NewGELUActivation
    return 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * torch.pow(t, 3.0))))


acts = {"gelu": torch.nn.functional.gelu, "gelu_new": gelu_new, "relu": torch.relu, "tanh": torch.tanh}
x = (torch.rand(4099) * 16 - 8).requires_grad_()
dout = torch.randn(4099)
put("act.x", x)
put("act.dout", dout)
for name, f in acts.items():
    (dx,) = grads(lambda: (f(x) * dout).sum(), x)
    put(f"act.{name}.out", f(x))
    put(f"act.{name}.dx", dx)

# --- softmax cross-entropy, ignore_index -100 ----------------------------------
logits = (torch.randn(12, 1000) * 4).requires_grad_()
targets = torch.tensor([3, -100, 999, 0, 512, -100, 7, 7, 100, 250, -100, 1])
loss_sum = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
(dl,) = grads(lambda: torch.nn.functional.cross_entropy(logits, targets, reduction="mean"), logits)
put("xent.logits", logits)
put("xent.targets", targets)
put("xent.loss_sum", loss_sum.reshape(1))
put("xent.dlogits_mean", dl)

# --- embedding with padding_idx --------------------------------------------------
table = torch.randn(50, 24, requires_grad=True)
ids = torch.tensor([[1, 0, 49, 3, 3, 0, 7], [0, 0, 12, 1, 49, 5, 5]])
dout = torch.randn(2, 7, 24)
emb = lambda: torch.nn.functional.embedding(ids, table, padding_idx=0)
(dt,) = grads(lambda: (emb() * dout).sum(), table)
for k, v in dict(table=table, ids=ids, dout=dout, out=emb(), dtable=dt).items():
    put("embedding." + k, v)


# --- attention -------------------------------------------------------------------
def attention(q, k, v, mask, causal, NH):
    B, T, C = q.shape
    HS = C // NH
    split = lambda t: t.view(B, T, NH, HS).transpose(1, 2)
    q, k, v = split(q), split(k), split(v)
    w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HS)
    lowest = torch.finfo(w.dtype).min
    if causal:  # GPT-2: torch.where(causal_mask, w, finfo.min)
        keep = torch.tril(torch.ones(T, T, dtype=torch.bool))
        w = torch.where(keep, w, torch.full([], lowest))
    ext = (1.0 - mask[:, None, None, :].to(w.dtype)) * lowest  # get_extended_attention_mask
    p = torch.softmax(w + ext, dim=-1)
    return torch.matmul(p, v).transpose(1, 2).reshape(B, T, C), p


B, T, NH, HS = 3, 16, 4, 16
C = NH * HS
mask = torch.ones(B, T, dtype=torch.int64)
mask[1, 11:] = 0  # right padding, as the HF fixtures
for causal in (False, True):
    tag = "attn_causal." if causal else "attn."
    q = torch.randn(B, T, C, requires_grad=True)
    k = torch.randn(B, T, C, requires_grad=True)
    v = torch.randn(B, T, C, requires_grad=True)
    dout = torch.randn(B, T, C)
    out, p = attention(q, k, v, mask, causal, NH)
    dq, dk, dv = grads(lambda: (attention(q, k, v, mask, causal, NH)[0] * dout).sum(), q, k, v)
    for name, val in dict(q=q, k=k, v=v, mask=mask, dout=dout, out=out, att=p, dq=dq, dk=dk, dv=dv).items():
        put(tag + name, val)

# --- AdamW, 3 steps ----------------------------------------------------------------
p0 = torch.randn(5001) * 0.5
param = torch.nn.Parameter(p0.clone())
opt = torch.optim.AdamW([param], lr=3e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.05)
put("adamw.p0", p0)
for step, scale in enumerate((1.0, 0.01, 3.0), start=1):
    g = torch.randn(5001) * scale
    put(f"adamw.g{step}", g)
    param.grad = g.clone()
    opt.step()
    put(f"adamw.p{step}", param.detach().clone())
    put(f"adamw.m{step}", opt.state[param]["exp_avg"].clone())
    put(f"adamw.v{step}", opt.state[param]["exp_avg_sq"].clone())


# --- write safetensors -----------------------------------------------------------
def write(path, tensors, metadata):
    dtypes = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for blob in blobs:
            f.write(blob)
    os.replace(path + ".tmp", path)


here = os.path.dirname(os.path.abspath(__file__))
dest = os.path.join(here, "..", "data", "ops")
os.makedirs(dest, exist_ok=True)
write(os.path.join(dest, "ops_reference.safetensors"), OUT,
      {"generator": "tests/ops/make_ops_reference.py", "torch": torch.__version__})
print(f"wrote {len(OUT)} tensors")

#!/usr/bin/env python3
"""The PyTorch peer for Loom's Llama step benchmark.

Times one training step (forward, backward, AdamW) of a Llama-shaped causal LM
written in plain PyTorch with transformers 4.40's LlamaForCausalLM math in its
eager attention path: RMSNorm computed in float32, rotate-half rotary
embeddings, grouped-query attention (repeat_kv), the SwiGLU MLP, an untied
lm_head and the shifted cross-entropy. Only Debian's python3-torch is needed.
Prints one JSON line.

Run it through bench/llama_step_vs_torch.sh, which sets the environment both
sides share and runs Loom's side (bench_model_step --task clm) in the same
invocation.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, C, NH, NKV, I, eps):
        super().__init__()
        self.NH, self.NKV, self.d = NH, NKV, C // NH
        self.input_layernorm = RMSNorm(C, eps)
        self.q_proj = nn.Linear(C, NH * self.d, bias=False)
        self.k_proj = nn.Linear(C, NKV * self.d, bias=False)
        self.v_proj = nn.Linear(C, NKV * self.d, bias=False)
        self.o_proj = nn.Linear(NH * self.d, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x, cos, sin, mask_add):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.NH, self.d).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.NKV, self.d).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.NKV, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = self.NH // self.NKV
        k = k[:, :, None].expand(B, self.NKV, g, T, self.d).reshape(B, self.NH, T, self.d)
        v = v[:, :, None].expand(B, self.NKV, g, T, self.d).reshape(B, self.NH, T, self.d)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.d) + mask_add
        a = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, V, C, L, NH, NKV, I, theta=10000.0, eps=1e-6):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList([Block(C, NH, NKV, I, eps) for _ in range(L)])
        self.norm = RMSNorm(C, eps)
        self.lm_head = nn.Linear(C, V, bias=False)
        d = C // NH
        self.register_buffer("inv_freq", 1.0 / (theta ** (torch.arange(0, d, 2).float() / d)),
                             persistent=False)

    def forward(self, ids, labels):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        freqs = torch.arange(T).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        mask_add = torch.full((T, T), torch.finfo(torch.float32).min).triu(1)
        for b in self.layers:
            x = b(x, cos, sin, mask_add)
        logits = self.lm_head(self.norm(x)).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                               labels[:, 1:].reshape(-1), ignore_index=-100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["clm"], default="clm")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    # PyTorch 1.13's bf16 step on a CPU without AVX-512 BF16 takes minutes:
    # past this budget the peer stops warming up and timing, keeping at least
    # one timed step, and says how many it timed.
    ap.add_argument("--budget-s", type=float, default=300)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T = a.batch, a.seq
    model = Llama(a.vocab, a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(5, a.vocab, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(ids, ids)
        loss.backward()
        opt.step()
        return float(loss)

    start = time.perf_counter()
    for _ in range(a.warmup):
        t0 = time.perf_counter()
        step()
        if time.perf_counter() - t0 > a.budget_s / 4:
            break
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > a.budget_s:
            break
    ms = 1000 * sorted(times)[len(times) // 2]
    C, L, I, V = a.hidden, a.layers, a.intermediate, a.vocab
    KV = a.kv_heads * (C // a.heads)
    # Forward FLOPs per token: 2 x (2C^2 + 2C KV + 3CI) per layer, attention
    # 4TC per layer, the head 2CV; backward is twice forward.
    per_tok = L * (2 * (2 * C * C + 2 * C * KV + 3 * C * I) + 4 * T * C) + 2 * C * V
    flops = 3 * per_tok * B * T
    n_params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"peer": "pytorch " + torch.__version__, "task": "clm", "dtype": a.dtype,
                      "threads": torch.get_num_threads(), "params": n_params,
                      "ms_per_step": round(ms, 1), "steps_timed": len(times),
                      "tokens_per_s": round(B * T / (ms / 1000), 1),
                      "gflops": round(flops / (ms / 1000) / 1e9, 1)}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The PyTorch peer for Loom's step benchmarks.

Times one training step (forward, backward, AdamW) of a BERT-shaped model written
in plain PyTorch with the same math as transformers' BertForMaskedLM /
BertForSequenceClassification (post-LN blocks, erf GELU, tied MLM decoder), so the
comparison needs only Debian's python3-torch. Prints one JSON line.

Run it through bench/bert_step_vs_torch.sh, which sets the environment both sides
share (OPENBLAS_CORETYPE unset, glibc malloc thresholds raised) and runs Loom's
side in the same invocation.
"""
import argparse
import json
import os
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, I):
        super().__init__()
        self.NH = NH
        self.query = nn.Linear(C, C)
        self.key = nn.Linear(C, C)
        self.value = nn.Linear(C, C)
        self.attn_out = nn.Linear(C, C)
        self.ln1 = nn.LayerNorm(C, eps=1e-12)
        self.inter = nn.Linear(C, I)
        self.out = nn.Linear(I, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-12)

    def forward(self, x, mask_add):
        B, T, C = x.shape
        HS = C // self.NH
        q = self.query(x).view(B, T, self.NH, HS).transpose(1, 2)
        k = self.key(x).view(B, T, self.NH, HS).transpose(1, 2)
        v = self.value(x).view(B, T, self.NH, HS).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(HS) + mask_add
        a = torch.softmax(s, dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)
        x = self.ln1(x + self.attn_out(y))
        h = F.gelu(self.inter(x))
        return self.ln2(x + self.out(h))


class Bert(nn.Module):
    def __init__(self, V, C, L, NH, I, P, task, num_labels):
        super().__init__()
        self.word = nn.Embedding(V, C, padding_idx=0)
        self.pos = nn.Embedding(P, C)
        self.token_type = nn.Embedding(2, C)
        self.ln = nn.LayerNorm(C, eps=1e-12)
        self.blocks = nn.ModuleList([Block(C, NH, I) for _ in range(L)])
        self.task = task
        if task == "mlm":
            self.transform = nn.Linear(C, C)
            self.tln = nn.LayerNorm(C, eps=1e-12)
            self.decoder_bias = nn.Parameter(torch.zeros(V))
        else:
            self.pooler = nn.Linear(C, C)
            self.classifier = nn.Linear(C, num_labels)

    def forward(self, ids, types, mask, labels):
        B, T = ids.shape
        pos = torch.arange(T).unsqueeze(0)
        x = self.ln(self.word(ids) + self.pos(pos) + self.token_type(types))
        mask_add = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for b in self.blocks:
            x = b(x, mask_add)
        if self.task == "mlm":
            h = self.tln(F.gelu(self.transform(x)))
            logits = h @ self.word.weight.t() + self.decoder_bias
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), labels.view(-1),
                                   ignore_index=-100)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return F.cross_entropy(self.classifier(pooled).float(), labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["mlm", "cls"], default="mlm")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=30522)
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
    model = Bert(a.vocab, a.hidden, a.layers, a.heads, a.intermediate, 512, a.task, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(5, a.vocab, (B, T))
    types = torch.zeros(B, T, dtype=torch.long)
    mask = torch.ones(B, T, dtype=torch.long)
    if a.task == "mlm":
        labels = torch.full((B, T), -100, dtype=torch.long)
        pick = torch.rand(B, T) < 0.15
        labels[pick] = ids[pick]
    else:
        labels = torch.randint(0, 3, (B,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(ids, types, mask, labels)
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
    # Forward FLOPs per token: 2 x (4C^2 + 2CI) per layer + attention 4TC per
    # layer + the head; backward is twice forward.
    per_tok = L * (2 * (4 * C * C + 2 * C * I) + 4 * T * C)
    per_tok += 2 * (C * C + C * V) if a.task == "mlm" else 0
    flops = 3 * per_tok * B * T
    print(json.dumps({"peer": "pytorch " + torch.__version__, "task": a.task, "dtype": a.dtype,
                      "threads": torch.get_num_threads(), "ms_per_step": round(ms, 1),
                      "steps_timed": len(times),
                      "tokens_per_s": round(B * T / (ms / 1000), 1),
                      "gflops": round(flops / (ms / 1000) / 1e9, 1)}))


if __name__ == "__main__":
    main()

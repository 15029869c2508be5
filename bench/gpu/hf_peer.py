#!/usr/bin/env python3
"""The PyTorch + Hugging Face transformers peer for `loom bench` on a GPU.

Trains GPT2LMHeadModel (causal LM) or BertForMaskedLM built from a config with
random weights (nothing is downloaded) for --steps timed steps after --warmup
untimed ones, on one fixed batch of random token ids, and prints one JSON line
with the keys `loom bench` prints ("side": "hf", plus "attn" and "compile").

The step is what the HF Trainer runs with bf16=True: fp32 master weights,
forward under torch.autocast(bfloat16), backward, fused AdamW. --dtype fp32
runs fp32 with TF32 matmuls allowed.

  bench/gpu/hf_peer.py --model gpt2-124m --task causal-lm --seq 1024 --batch 16
  bench/gpu/hf_peer.py --model bert-base --task masked-lm --device cpu --tiny \\
      --seq 32 --batch 2 --steps 2 --warmup 1      # smoke run with CPU torch

bench/gpu/loom_vs_hf.sh runs it next to `loom bench` over the benchmark cases;
docs/gpu-benchmark.md explains the figures.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

# The benchmark machine has no internet: never let the hub client try.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

# Dense tensor-core peaks in TFLOP/s, (bf16, TF32), first substring match of
# torch.cuda.get_device_name() wins. --dtype fp32 runs its matmuls on TF32
# tensor cores, so its MFU is against the TF32 peak. The NVL part's clocks
# differ from both others and its peak is left to --peak-tflops rather than
# guessed. loom_vs_hf.sh flags a case where Loom's side used another peak.
PEAKS = [
    ("H100 NVL", None, None),
    ("H100 PCIe", 756.5, 378.0),
    ("H100", 989.4, 494.7),   # SXM, named "NVIDIA H100 80GB HBM3"
    ("H200", 989.4, 494.7),   # the same tensor cores and clocks as H100 SXM
    ("A100", 312.0, 156.0),
]

MODELS = {
    "gpt2-124m": dict(task="causal-lm", hidden=768, layers=12, heads=12, inter=3072,
                      vocab=50257, positions=1024),
    "bert-base": dict(task="masked-lm", hidden=768, layers=12, heads=12, inter=3072,
                      vocab=30522, positions=512),
    "bert-large": dict(task="masked-lm", hidden=1024, layers=24, heads=16, inter=4096,
                       vocab=30522, positions=512),
}
TINY = dict(hidden=64, layers=2, heads=4, inter=256, vocab=1000)


def note(msg):
    print(f"hf_peer.py: {msg}", file=sys.stderr, flush=True)


def peak_tflops(gpu_name, dtype):
    for key, bf16, tf32 in PEAKS:
        if key in gpu_name:
            return bf16 if dtype == "bf16" else tf32
    return None


def zero_dropout(config):
    # Every dropout probability the config carries, including ones a newer
    # transformers adds, so the step matches Loom's (which has no dropout).
    for key, value in config.to_dict().items():
        if ("dropout" in key or "pdrop" in key) and isinstance(value, float) and value != 0.0:
            setattr(config, key, 0.0)


def build_config(name, shape):
    from transformers import BertConfig, GPT2Config

    if name.startswith("gpt2"):
        config = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["positions"],
                            n_embd=shape["hidden"], n_layer=shape["layers"], n_head=shape["heads"],
                            n_inner=shape["inter"], resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0, summary_first_dropout=0.0,
                            # a training step has no use for a KV cache
                            use_cache=False)
    else:
        config = BertConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                            num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                            intermediate_size=shape["inter"],
                            max_position_embeddings=shape["positions"], type_vocab_size=2,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            classifier_dropout=0.0)
    zero_dropout(config)
    return config


def flash_attn_usable(a):
    if a.device != "cuda":
        return "flash_attention_2 needs CUDA"
    if a.dtype != "bf16":
        return "flash_attention_2 has no fp32 kernels"
    try:
        from transformers.utils import is_flash_attn_2_available
    except ImportError:
        return None  # let the model's own check decide
    return None if is_flash_attn_2_available() else "the flash_attn package is not installed"


def build_model(a, config):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if a.task == "causal-lm" else AutoModelForMaskedLM
    attn = a.attn
    if attn == "flash_attention_2":
        why = flash_attn_usable(a)
        if why:
            note(f"{why}: using sdpa instead of flash_attention_2")
            attn = "sdpa"
    try:
        model = auto.from_config(config, attn_implementation=attn)
    except (ImportError, ValueError) as e:
        if attn == "sdpa":
            raise
        note(f"{attn} refused ({e}): using sdpa instead")
        model = auto.from_config(config, attn_implementation="sdpa")
    # fp32 master weights whatever default dtype the config or library chose.
    model = model.to(device=a.device, dtype=torch.float32)
    model.train()
    used = getattr(model.config, "_attn_implementation", None) or attn
    return model, used


def batch(a, vocab):
    g = torch.Generator().manual_seed(1234)
    if a.task == "causal-lm":
        ids = torch.randint(0, vocab, (a.batch, a.seq), generator=g)
        labels = ids.clone()  # the model shifts them itself
    else:
        # from 5 up, as bench/torch_bert_step.py draws them: no input is [PAD] (0)
        ids = torch.randint(5, vocab, (a.batch, a.seq), generator=g)
        labels = torch.full_like(ids, -100)
        pick = torch.rand(a.batch, a.seq, generator=g) < 0.15
        labels[pick] = ids[pick]
    return ids.to(a.device), labels.to(a.device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--task", choices=["causal-lm", "masked-lm"],
                    help="must match the model (default: the model's)")
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--attn", choices=["sdpa", "eager", "flash_attention_2"], default="sdpa")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--tiny", action="store_true",
                    help="2 layers, hidden 64, vocab 1000: a smoke run, not a benchmark")
    ap.add_argument("--peak-tflops", type=float,
                    help="tensor-core peak for MFU when the device name is not in the table")
    a = ap.parse_args()

    shape = dict(MODELS[a.model])
    if a.task is None:
        a.task = shape["task"]
    if a.task != shape["task"]:
        ap.error(f"{a.model} trains {shape['task']}, not {a.task}")
    if a.tiny:
        shape.update(TINY)
    if a.seq > shape["positions"]:
        ap.error(f"--seq {a.seq} is longer than {a.model}'s {shape['positions']} positions")
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.seq < 2:
        ap.error("need --steps >= 1, --warmup >= 0, --batch >= 1, --seq >= 2")
    if a.device == "cuda" and not torch.cuda.is_available():
        note("--device cuda, but this torch sees no CUDA device")
        return 2

    torch.manual_seed(0)
    if a.dtype == "fp32":
        torch.set_float32_matmul_precision("high")  # TF32

    model, attn_used = build_model(a, build_config(a.model, shape))
    # parameters() yields a tied tensor once: the LM head shares the word
    # embeddings, as it does in Loom's count
    n_params = sum(p.numel() for p in model.parameters())
    # fused only on CUDA: older CPU builds of torch have no `fused` argument
    fused = {"fused": True} if a.device == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **fused)
    if a.compile:
        model = torch.compile(model)
    ids, labels = batch(a, shape["vocab"])

    if a.dtype == "bf16":
        autocast = lambda: torch.autocast(device_type=a.device, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext

    def step():
        with autocast():
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    cuda = a.device == "cuda"
    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if not math.isfinite(float(loss)):
        note(f"loss is {float(loss)} after the timed steps")
        return 1

    L, H, C, T = shape["layers"], shape["heads"], shape["hidden"], a.seq
    Q = C // H
    # llm.c's estimate_mfu (the PaLM appendix count): 6N for the weight
    # matmuls forward and backward, 12LHQT for attention's two T-long matmuls.
    flops_per_token = 6 * n_params + 12 * L * H * Q * T
    step_s = seconds / a.steps
    tokens_per_s = a.batch * a.seq / step_s
    gpu = torch.cuda.get_device_name() if cuda else None
    peak = a.peak_tflops if a.peak_tflops else (peak_tflops(gpu, a.dtype) if gpu else None)
    if cuda and peak is None:
        note(f"no tensor-core peak known for {gpu!r}: mfu is null (pass --peak-tflops)")
    mfu = flops_per_token * tokens_per_s / (peak * 1e12) if peak else None
    out = {
        "side": "hf", "model": a.model, "task": a.task, "device": a.device, "dtype": a.dtype,
        "batch": a.batch, "seq": a.seq, "steps": a.steps, "params": n_params,
        "step_ms": round(step_s * 1000, 3),
        "tokens_per_s": round(tokens_per_s, 1),
        "flops_per_token": flops_per_token,
        "mfu": round(mfu, 4) if mfu is not None else None,
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
        "peak_tflops": peak,
        "gpu": gpu,
        "attn": attn_used, "compile": a.compile,
    }
    if a.tiny:
        out["tiny"] = True
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

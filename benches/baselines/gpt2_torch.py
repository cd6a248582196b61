#!/usr/bin/env python3
"""PyTorch baseline for trainplan's GPT-2 training-step benchmark (BM_ExecutorCuda_Gpt2Step).

Same model and step as trainplan's GptModel + MixedPrecisionOptimizer:
  GPT-2 124M / 355M (pre-LayerNorm decoder, learned positions, tied LM head, GELU tanh
  approximation, biases, no dropout), vocabulary 50257, sequence 1024, batch 8;
  bf16 autocast (fp16 with a grad scaler where the GPU has no bf16), fp32 weights and AdamW
  (lr 6e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings), global-norm
  clipping at 1.0, synthetic uniform tokens.
Modes: "eager" and "compile" (torch.compile of the model).

Throughput: tokens/s = batch * seq / step time (median of the timed steps after warm-up).
MFU uses trainplan's FLOP convention (GptModel::training_flops_per_step):
  6 * tokens * (matmul weights incl. the LM head) + 12 * layers * tokens * seq * hidden
(the full T x T attention square), over the dense bf16/fp16 peak of the GPU from
hwprofiles/catalog/gpus.json, matched like trainplan does (compute capability, then the closest
memory size). Writes one JSON file:

  python3 benches/baselines/gpt2_torch.py --out results.json [--models 124m 355m] [--modes eager compile]
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "124m": dict(layers=12, hidden=768, heads=12),
    "355m": dict(layers=24, hidden=1024, heads=16),
}
VOCAB = 50257
SEQ = 1024


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden, eps=1e-5)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-5)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.fc_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, hidden)
        self.wpe = nn.Embedding(SEQ, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm_f = nn.LayerNorm(hidden, eps=1e-5)
        # Initialization as trainplan's GptModel: N(0, 0.02), output projections
        # N(0, 0.02 / sqrt(2 layers)), biases 0, norm weights 1.
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.norm_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def training_flops_per_step(layers, hidden, heads, batch):
    """trainplan's GptModel::training_flops_per_step for GPT-2 (tied head, 4h MLP)."""
    tokens = batch * SEQ
    block = hidden * 3 * hidden + hidden * hidden + hidden * 4 * hidden + 4 * hidden * hidden
    matmul_weights = layers * block + VOCAB * hidden
    attention = 12.0 * layers * tokens * SEQ * hidden  # heads * head_dim = hidden
    return 6.0 * tokens * matmul_weights + attention


def parse_quantity(text):
    m = re.fullmatch(r"([0-9.]+)\s*(TFLOPS|GiB|GBps)", text)
    scale = {"TFLOPS": 1e12, "GiB": 2**30, "GBps": 1e9}[m.group(2)]
    return float(m.group(1)) * scale


def catalog_gpu(catalog_path, props):
    """The catalog GPU with the device's compute capability and the closest memory size."""
    with open(catalog_path) as f:
        gpus = json.load(f)["gpus"]
    cc = f"{props.major}.{props.minor}"
    best = None
    for name, g in gpus.items():
        # Entries without a CUDA compute capability (accelerators that are not NVIDIA GPUs) never match.
        if g.get("compute_capability") != cc or "memory" not in g:
            continue
        gap = abs(parse_quantity(g["memory"]) - props.total_memory) / parse_quantity(g["memory"])
        if best is None or gap < best[0]:
            best = (gap, name, g)
    return (best[1], best[2]) if best else (None, None)


def run(model_name, mode, batch, dtype, steps, warmup):
    cfg = CONFIGS[model_name]
    torch.manual_seed(1)
    model = GPT(**cfg).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    fwd = torch.compile(model) if mode == "compile" else model
    gen = torch.Generator(device="cuda").manual_seed(3)
    data = torch.randint(0, VOCAB, (batch, SEQ + 1), device="cuda", generator=gen)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = fwd(idx, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    flops = training_flops_per_step(cfg["layers"], cfg["hidden"], cfg["heads"], batch)
    return {
        "model": f"gpt2-{model_name}",
        "mode": mode,
        "batch": batch,
        "seq": SEQ,
        "dtype": str(dtype).replace("torch.", ""),
        "steps_timed": steps,
        "step_time_s": step_s,
        "tokens_per_s": batch * SEQ / step_s,
        "model_flops_per_step": flops,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        "loss": float(loss),
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=["124m", "355m"], choices=sorted(CONFIGS))
    ap.add_argument("--modes", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--catalog", default=os.path.join(here, "..", "..", "hwprofiles", "catalog", "gpus.json"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 77
    props = torch.cuda.get_device_properties(0)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    gpu_name, gpu = catalog_gpu(args.catalog, props)
    precision = "bf16" if dtype == torch.bfloat16 else "fp16"
    peak = parse_quantity(gpu["peak"][precision]) if gpu and precision in gpu["peak"] else None
    torch.backends.cuda.matmul.allow_tf32 = True
    results = []
    for m in args.models:
        for mode in args.modes:
            try:
                r = run(m, mode, args.batch, dtype, args.steps, args.warmup)
                r["mfu"] = r["model_flops_per_step"] / (r["step_time_s"] * peak) if peak else None
            except Exception as e:  # an OOM or a compile failure is a result too
                r = {"model": f"gpt2-{m}", "mode": mode, "error": f"{type(e).__name__}: {e}"}
            print(json.dumps(r), flush=True)
            results.append(r)
            torch.cuda.empty_cache()
    doc = {
        "schema_version": 1,
        "device": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "catalog_gpu": gpu_name,
        "dense_peak_flops_per_s": peak,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "flop_convention": "6 * tokens * matmul weights (incl. LM head) + 12 * layers * tokens * seq * hidden",
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

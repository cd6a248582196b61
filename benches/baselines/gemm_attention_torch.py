#!/usr/bin/env python3
"""Measured bf16 GEMM and attention rates on the GPU at hand, through PyTorch (cuBLAS and
PyTorch's fused attention), for checking trainplan's compute model (simulator/README.md,
"Compute model") against shapes of published training runs: the transformer-layer GEMMs
(QKV, attention output, MLP up and down) of hidden sizes 2048 .. 12288, tensor-parallel
degrees 1 .. 8, at 8192 tokens per micro-batch, in the three layouts of a training step
(forward X W^T, data gradient dY W, weight gradient dY^T X), and causal attention forward and
backward over sequence lengths 1024 .. 16384 with head dimension 128.

  python3 benches/baselines/gemm_attention_torch.py --out gemm-attention.json [--repeats 20]
  python3 benches/baselines/gemm_attention_torch.py --out attention-backends.json --attention-backends
  python3 benches/baselines/gemm_attention_torch.py --out gemm-fp8.json --fp8

--fp8: the same 240 GEMM shapes in FP8 E4M3, each as the TN product Transformer Engine runs.

--attention-backends: attention only, each of PyTorch's fused kernels named (torch.nn.attention.
sdpa_kernel: FLASH_ATTENTION = FlashAttention-2, CUDNN_ATTENTION = cuDNN's fused attention,
EFFICIENT_ATTENTION = xFormers' memory-efficient kernel) and the default choice, at head
dimensions 64 and 128, causal, sequence 1024 .. 16384: the rate of each implementation, where
the default sweep does not say which kernel PyTorch picked.

Each point: the median of `repeats` CUDA-event timings after 5 warm-ups, with FLOPs counted
as 2mnk per GEMM and 4 * batch * heads * s^2 * d / 2 (causal half) per attention forward,
2.5x that for its backward (FlashAttention-2's convention).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def timed(fn, repeats):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def fp8_gemm(m, n, k):
    """One m x n x k FP8 E4M3 product as Transformer Engine runs every GEMM of a layer on Hopper:
    "TN" (both operands K-major; TE casts and transposes the operands it needs), fp32 per-tensor
    scales, bf16 output."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def gemm_points(repeats, tokens, fp8=False):
    out = []
    dev, dt = "cuda", torch.bfloat16
    for h in (2048, 4096, 5120, 8192, 12288):
        for tp in (1, 2, 4, 8):
            for name, n_out, n_in in (("qkv", 3 * h // tp, h), ("proj", h, h // tp),
                                      ("fc1", 4 * h // tp, h), ("fc2", h, 4 * h // tp)):
                x = torch.randn(tokens, n_in, device=dev, dtype=dt)
                w = torch.randn(n_out, n_in, device=dev, dtype=dt)
                dy = torch.randn(tokens, n_out, device=dev, dtype=dt)
                for layout, fn, (m, n, k) in (
                        ("fwd", lambda: x @ w.t(), (tokens, n_out, n_in)),
                        ("dgrad", lambda: dy @ w, (tokens, n_in, n_out)),
                        ("wgrad", lambda: dy.t() @ x, (n_out, n_in, tokens))):
                    s = timed(fp8_gemm(m, n, k) if fp8 else fn, repeats)
                    out.append(dict(op="gemm", layer=name, hidden=h, tp=tp, layout=layout, m=m, n=n, k=k,
                                    seconds=s, tflops=2.0 * m * n * k / s / 1e12))
                del x, w, dy
    return out


def attention_point(seq, heads, d, batch, repeats):
    """Causal attention forward and backward of one shape with the kernel the caller selected."""
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    fwd_flops = 4.0 * batch * heads * seq * seq * d / 2
    s_f = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn_like(o)
    s_fb = timed(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                             (q, k, v), g), repeats)
    s_b = max(s_fb - s_f, 1e-9)
    return dict(op="attention", seq=seq, heads=heads, head_dim=d, batch=batch, causal=True,
                forward_seconds=s_f, backward_seconds=s_b,
                forward_tflops=fwd_flops / s_f / 1e12, backward_tflops=2.5 * fwd_flops / s_b / 1e12)


def attention_by_backend(repeats, tokens):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    out = []
    for name, backend in backends:
        for d in (64, 128):
            heads = 4096 // d  # hidden 4096
            for seq in (1024, 2048, 4096, 8192, 16384):
                batch = max(1, tokens // seq)
                try:
                    if backend is None:
                        p = attention_point(seq, heads, d, batch, repeats)
                    else:
                        with sdpa_kernel([backend]):
                            p = attention_point(seq, heads, d, batch, repeats)
                except RuntimeError as e:  # the kernel does not take this shape or GPU
                    out.append(dict(op="attention", backend=name, seq=seq, heads=heads, head_dim=d,
                                    error=str(e).splitlines()[0][:200]))
                    continue
                p["backend"] = name
                out.append(p)
                torch.cuda.empty_cache()
    return out


def attention_points(repeats, tokens):
    out = []
    d = 128
    for seq in (1024, 2048, 4096, 8192, 16384):
        for heads in (8, 32):
            batch = max(1, tokens // seq)
            out.append(attention_point(seq, heads, d, batch, repeats))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--fp8", action="store_true",
                    help="the GEMMs only, in FP8 E4M3 (torch._scaled_mm, TN, bf16 output)")
    ap.add_argument("--attention-backends", action="store_true",
                    help="attention only, per fused kernel (see the module's doc)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    p = torch.cuda.get_device_properties(0)
    t0 = time.time()
    doc = dict(date=time.strftime("%Y-%m-%d"), gpu=p.name, multiprocessors=p.multi_processor_count,
               torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
               tokens_per_microbatch=a.tokens, repeats=a.repeats)
    if a.fp8:
        doc.update(dtype="fp8_e4m3", gemm=gemm_points(a.repeats, a.tokens, fp8=True), attention=[])
    elif a.attention_backends:
        doc.update(gemm=[], attention=attention_by_backend(a.repeats, a.tokens))
    else:
        doc.update(gemm=gemm_points(a.repeats, a.tokens), attention=attention_points(a.repeats, a.tokens))
    doc["wall_seconds"] = time.time() - t0
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {a.out}: {len(doc['gemm'])} GEMMs, {len(doc['attention'])} attention points "
          f"in {doc['wall_seconds']:.1f} s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Burst versus sustained GEMM rate (bf16, or FP8 E4M3 through torch._scaled_mm with bf16 output,
as Transformer Engine's FP8 GEMMs run) on the GPU at hand, with its clocks and power read by
NVML: why a transformer-shape GEMM sweep runs below the measured maximum achievable matmul
(MAMF, a short burst per shape).

  python3 benches/baselines/gemm_sustained_torch.py --out gemm-sustained.json [--seconds 40] [--dtype fp8]

1. cold: 8192^3 (and 8192 x 4096 x 4096), 10 timed products after 3 warm-ups, from an idle GPU;
2. sustained: 8192^3 products back to back for --seconds, one sample per second of the rate
   (CUDA events over that second's products), SM clock, power draw and temperature;
3. hot: the cold measurements again, right after;
4. rested: the same after 15 s idle.
"""
import argparse
import json
import time

import torch

try:
    import pynvml
except ImportError:  # the sweep still runs; clocks and power are left out
    pynvml = None


def nvml_sample(handle):
    if handle is None:
        return {}
    return dict(sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                temperature_c=pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                power_limit_w=pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3)


def product(m, n, k, dtype):
    """A callable that runs one m x n x k product on random normal operands of `dtype`."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if dtype == "bf16":
        return lambda: a @ b.t()
    # FP8: E4M3 operands (the second column-major, as cuBLASLt's FP8 kernels require), fp32
    # per-tensor scales, bf16 output.
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def rate(m, n, k, reps, warmup, handle, dtype):
    mm = product(m, n, k, dtype)
    for _ in range(warmup):
        mm()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        mm()
    e.record()
    e.synchronize()
    sec = s.elapsed_time(e) / 1e3 / reps
    return dict(m=m, n=n, k=k, seconds=sec, tflops=2.0 * m * n * k / sec / 1e12, **nvml_sample(handle))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
    a = ap.parse_args()
    handle = None
    if pynvml is not None:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    shapes = [(8192, 8192, 8192), (8192, 4096, 4096)]
    doc = dict(date=time.strftime("%Y-%m-%d"), gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
               dtype=a.dtype, idle=nvml_sample(handle))
    doc["cold"] = [rate(*sh, 10, 3, handle, a.dtype) for sh in shapes]
    mm = product(8192, 8192, 8192, a.dtype)
    samples = []
    t_end = time.time() + a.seconds
    while time.time() < t_end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.time()
        s.record()
        n = 0
        while time.time() - t0 < 1.0:
            for _ in range(50):
                mm()
            n += 50
            torch.cuda.synchronize()
        e.record()
        e.synchronize()
        sec = s.elapsed_time(e) / 1e3 / n
        samples.append(dict(t=round(a.seconds - (t_end - time.time()), 2), tflops=2.0 * 8192**3 / sec / 1e12,
                            **nvml_sample(handle)))
    doc["sustained_8192"] = samples
    doc["hot"] = [rate(*sh, 10, 3, handle, a.dtype) for sh in shapes]
    time.sleep(15)
    doc["rested"] = [rate(*sh, 10, 3, handle, a.dtype) for sh in shapes]
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    tf = [s["tflops"] for s in samples]
    print(f"cold {doc['cold'][0]['tflops']:.0f} TFLOP/s; sustained first {tf[0]:.0f}, last {tf[-1]:.0f}, "
          f"min {min(tf):.0f}; hot {doc['hot'][0]['tflops']:.0f}; rested {doc['rested'][0]['tflops']:.0f}")
    for s in samples[:: max(1, len(samples) // 8)]:
        print(s)


if __name__ == "__main__":
    main()

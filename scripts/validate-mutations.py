#!/usr/bin/env python3
"""Robustness of `trainplan validate` to how sources write their points.

Takes a sample of the development set's training points, rewrites each the way other sources
state the same run (another point kind, recomputation as yes/no, numbers as text, a field left
out that the others imply, another way to name the GPU, the system or the FLOP convention) and
runs `trainplan validate` on originals and variants together. Per rewrite it prints how many
variants of scored originals are scored, and the largest change of the measured and predicted
step time against the original (a metric rewritten from another, such as MFU from tokens/s,
carries the source's rounding; the rewrites that change the run, recomputation on, are only
counted).

    python3 scripts/validate-mutations.py build/trainplan ../shared/validation/published-results.json
"""
import copy
import json
import random
import subprocess
import sys
import tempfile

SAME_RUN = {"finetuning_throughput", "full_training_run", "mlperf", "gpu_vendor_prefix", "gpu_long_name",
            "precision_words", "numbers_as_text", "num_gpus_left_out", "dp_left_out", "gpus_per_node_left_out",
            "tp_pp_left_out", "nulls_removed", "seq_left_out", "heads_left_out", "samples_per_s_only",
            "hfu_only", "mfu_without_peak"}


def rewrites():
    def kind(k):
        return lambda p: p.update(kind=k)

    def rc(v):
        return lambda p: p["parallelism"].update(activation_recompute=v)

    def gpu_long(p):
        g = p["hardware"].get("gpu") or ""
        p["hardware"]["gpu"] = ("NVIDIA H100 80GB HBM3" if "H100" in g else "NVIDIA A100 80GB SXM" if "80" in g
                                else "NVIDIA A100-SXM4-40GB" if "A100" in g else g)

    def precision_words(p):
        low = str(p.get("precision")).lower()
        for k, v in (("fp8", "FP8 (Transformer Engine)"), ("bf16", "bfloat16 mixed precision"), ("fp16", "FP16 mixed")):
            if k in low:
                p["precision"] = v
                return
        return False

    def numbers_as_text(p):
        for sec in ("model", "parallelism"):
            for k, v in list(p[sec].items()):
                if isinstance(v, int) and not isinstance(v, bool):
                    p[sec][k] = str(v)

    def left_out(sec, key, need=None):
        def f(p):
            if need and not need(p):
                return False
            p[sec][key] = None
        return f

    def tp_pp(p):
        q = p["parallelism"]
        if (q.get("tp") or 1) != 1 or (q.get("pp") or 1) != 1:
            return False
        q["tp"] = q["pp"] = None

    def nulls_removed(p):
        for sec in ("model", "parallelism"):
            for k in [k for k, v in p[sec].items() if v is None]:
                del p[sec][k]

    def seq_left_out(p):
        m, q = p["model"], p["parallelism"]
        if not (m.get("seq_len") and q.get("global_batch")):
            return False
        q["global_batch_tokens"] = q["global_batch"] * m["seq_len"]
        m["seq_len"] = None

    def only(metric_fn):
        def f(p):
            m = p["metrics"]
            new = metric_fn(p)
            if not new:
                return False
            for k in ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "step_time_s", "tflops_per_gpu", "mfu", "hfu"):
                m[k] = None
            m.update(new)
        return f

    def samples(p):
        m, s = p["metrics"], p["model"].get("seq_len")
        return {"samples_per_s": m["tokens_per_s"] / s} if m.get("tokens_per_s") and s else None

    def hfu(p):
        return {"hfu": p["metrics"]["hfu"]} if p["metrics"].get("hfu") else None

    def mfu_without_peak(p):
        if not p["metrics"].get("mfu"):
            return False
        f = only(lambda q: {"mfu": q["metrics"]["mfu"]})
        f(p)
        p["hardware"]["peak_tflops_used_for_mfu"] = None

    return {
        "finetuning_throughput": kind("finetuning_throughput"), "full_training_run": kind("full_training_run"),
        "mlperf": kind("mlperf"), "recompute_true": rc(True), "recompute_enabled": rc("enabled"),
        "gpu_vendor_prefix": lambda p: p["hardware"].update(gpu="NVIDIA " + (p["hardware"].get("gpu") or "")),
        "gpu_long_name": gpu_long, "precision_words": precision_words, "numbers_as_text": numbers_as_text,
        "num_gpus_left_out": left_out("hardware", "num_gpus"),
        "dp_left_out": left_out("parallelism", "dp", lambda p: p["hardware"].get("num_gpus")),
        "gpus_per_node_left_out": left_out("hardware", "gpus_per_node"), "tp_pp_left_out": tp_pp,
        "nulls_removed": nulls_removed, "seq_left_out": seq_left_out,
        "heads_left_out": left_out("model", "heads", lambda p: p["model"].get("heads")),
        "samples_per_s_only": only(samples), "hfu_only": only(hfu), "mfu_without_peak": mfu_without_peak,
    }


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, path = sys.argv[1], sys.argv[2]
    doc = json.load(open(path))
    pts = [p for p in doc["data_points"] if p.get("kind") == "training_throughput"]
    random.seed(1)
    sample = random.sample(pts, min(40, len(pts)))
    variants = []
    for p in sample:
        for tag, f in rewrites().items():
            q = copy.deepcopy(p)
            if f(q) is False:
                continue
            q["id"] = tag + "|" + p["id"]
            variants.append(q)
    out = dict(doc, data_points=sample + variants)
    with tempfile.TemporaryDirectory() as d:
        src, rep = d + "/points.json", d + "/report.json"
        json.dump(out, open(src, "w"))
        subprocess.run([binary, "validate", src, "--json", rep], check=True, stdout=subprocess.DEVNULL)
        report = json.load(open(rep))
    base = {p["id"]: p for p in report["points"] if "|" not in p["id"]}
    rows = {}
    for p in report["points"]:
        if "|" not in p["id"]:
            continue
        tag, orig = p["id"].split("|", 1)
        b = base[orig]
        if not b["mapped"]:
            continue
        r = rows.setdefault(tag, {"n": 0, "scored": 0, "measured": 0.0, "predicted": 0.0})
        r["n"] += 1
        if p["mapped"]:
            r["scored"] += 1
            for k in ("measured", "predicted"):
                r[k] = max(r[k], abs(p[k] / b[k] - 1))
    print(f"{'rewrite':26} {'variants':>8} {'scored':>7}  {'max |change| of the measured / predicted step':>46}")
    n = scored = 0
    for tag, r in rows.items():
        change = f"{100 * r['measured']:.2f}% / {100 * r['predicted']:.2f}%" if tag in SAME_RUN else "(another run)"
        print(f"{tag:26} {r['n']:8d} {r['scored']:7d}  {change:>46}")
        n, scored = n + r["n"], scored + r["scored"]
    print(f"{'all':26} {n:8d} {scored:7d}")


if __name__ == "__main__":
    main()

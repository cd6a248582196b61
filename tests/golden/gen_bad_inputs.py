#!/usr/bin/env python3
"""Generates the golden bad-input cases tests/golden/cases/bad-*/ (issue 17, hardening).

Every input kind (catalog, price file, model JSON, Hugging Face config, plan, published
results, calibration table, spot trace) and every numeric, quantity and choice flag gets the
same classes of bad values: numbers beyond a double (1e309), integers that would wrap (2^32+16,
2^64), signs and zeros, fractions, values beyond trainplan's limits, wrong types, and nesting
100,000 levels deep. Output paths, generated code quoting and unmet objectives have cases too.

  gen_bad_inputs.py     writes the case folders (cmd, input files, expected_exit, must_contain)
  run_golden.py BIN tests/golden --update NAME...   then fills expected_stderr / expected_stdout

run_golden.py checks must_contain (the file, JSON pointer or flag each message must name) and
that every exit-1 case prints one `error: <where>: <what> — <hint>` line.

The cases are committed; rerun this script only to add classes or inputs.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")

DEEP = "[" * 100000 + "]" * 100000  # 100k levels: must be refused, never overflow the stack
NESTED = "[" * 300 + "]" * 300      # beyond the 128-level limit, inside a typed field
RAW_MARK = "\"@@RAW@@\""

# Bad values for integer fields: (label, value, raw text or None)
INT_BAD = [
    ("wrap32", 4294967312, None),            # 2^32 + 16: would wrap to 16 in an int
    ("u64", 18446744073709551616, None),      # 2^64: beyond uint64
    ("overflow", None, "1e309"),              # beyond double
    ("neg", -1, None),
    ("zero", 0, None),
    ("frac", 2.5, None),
    ("string", "8x", None),
    ("deep", None, NESTED),
]
# Bad values for real numbers and quantities.
NUM_BAD = [
    ("overflow", None, "1e309"),
    ("neg", -1, None),
    ("inf-unit", "1e308GB", None),
    ("nan", "nan", None),
    ("deep", None, NESTED),
]

PLAN = {"schema_version": 1, "model": "gpt3-13b", "cluster": {"instance_type": "p4d.24xlarge", "count": 16},
        "parallelism": {"dp": 16, "tp": 8, "pp": 1, "zero_stage": 1}, "batch": {"global_batch": 1024, "micro_batch": 2},
        "recompute": "selective", "training": {"tokens": "300B"}}
MODEL = {"name": "my-gpt", "family": "gpt", "layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "seq_len": 1024,
         "source": "golden test"}
HF = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}
HF_LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "num_key_value_heads": 8, "intermediate_size": 1376, "vocab_size": 32000, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5, "hidden_act": "silu"}
PRICES = {"region": "eu-west-1", "source": "our quote", "prices": {"p4d.24xlarge": {"ec2_on_demand": 25.0, "spot": 9.0}}}
CATALOG_G4DN = {"order": 1, "defaults": {"family": "g4dn", "gpu": "T4"}, "instances": [
    {"name": "g4dn.12xlarge", "description": "4x T4", "vcpus": 48, "host_memory": "192GiB", "gpu_count": 4,
     "topology": {"kind": "pcie", "pcie_generation": 3, "pcie_bandwidth": "12GBps", "pcie_latency": "1us", "sockets": 1},
     "network": {"bandwidth": "50Gbps", "nics": 1, "efa": True, "latency": "25us", "fabric": "EFA"},
     "storage": {"local_nvme": "900GB", "nvme_devices": 1},
     "prices": {"region": "us-east-1", "ec2_on_demand": 3.912},
     "sources": {"hardware": "ours", "topology": "ours", "pcie": "ours", "network": "ours", "efa": "ours",
                 "network_latency": "ours", "storage": "ours", "ec2_on_demand": "ours"}}]}
CATALOG_GPUS = {"gpus": {"T4": {"arch": "Turing", "compute_capability": "7.5", "memory": "16GiB", "memory_type": "GDDR6",
                                "memory_bandwidth": "320GBps", "peak": {"fp32": "8.1TFLOPS", "fp16": "65TFLOPS"}, "tdp_w": 70,
                                "sm_count": 40, "cublas_workspace": "4MiB",
                                "sources": {"memory": "ours", "peaks": "ours", "tdp": "ours", "compute_capability": "ours",
                                            "sm_count": "ours", "cublas_workspace": "ours"}}}}
CATALOG_SOURCES = {"sources": {"ours": {"description": "golden test data", "date": "2026-11-22", "verified": False}}}
CALIBRATION = {"schema_version": 1, "gpu": "A100-SXM4-40GB", "precision": "bf16", "source": "golden test",
               "entries": [{"op_kind": "linear", "m": 4096, "n": 4096, "k": 4096, "compute_efficiency": 0.7}]}
TRACE = {"metadata": {"gap_seconds": 300, "instances": 16}, "data": [16, 16, 15, 16, 16, 16, 14, 16]}
POINT = {"id": "bad-point", "kind": "training_throughput",
         "source": {"title": "Golden bad point", "locator": "none", "date": "2021-04"},
         "verification": "verified_from_source_text",
         "model": {"name": "GPT 1.7B", "layers": 24, "hidden": 2304, "heads": 24, "seq_len": 2048, "vocab": 51200},
         "parallelism": {"global_batch": 512, "tp": 1, "pp": 1, "dp": 32, "zero_stage": 0, "activation_recompute": "full"},
         "precision": "mixed fp16",
         "hardware": {"gpu": "A100-SXM4-80GB", "gpu_mem_gb": 80, "gpus_per_node": 8,
                      "inter_node": "8x 200 Gb/s HDR InfiniBand per node", "num_gpus": 32,
                      "system": "NVIDIA Selene (DGX A100 80GB)"},
         "metrics": {"step_time_s": 1.5}}


def set_path(doc, path, value):
    parts = [int(p) if p.isdigit() else p for p in path.strip("/").split("/")]
    cur = doc
    for p in parts[:-1]:
        cur = cur[p]
    cur[parts[-1]] = value


def delete_path(doc, path):
    parts = [int(p) if p.isdigit() else p for p in path.strip("/").split("/")]
    cur = doc
    for p in parts[:-1]:
        cur = cur[p]
    del cur[parts[-1]]


def mutate(base, path, value, raw):
    doc = json.loads(json.dumps(base))
    set_path(doc, path, "@@RAW@@" if raw is not None else value)
    text = json.dumps(doc)
    if raw is not None:
        text = text.replace(RAW_MARK, raw)
    return text + "\n"


cases = []  # (name, cmd, files, expected_exit, must_contain)


def add(name, cmd, files=None, exit_code=1, must=()):
    cases.append((name, cmd, files or {}, exit_code, list(must)))


def slug(path):
    return path.strip("/").replace("/", "-").replace("_", "-")


# ---- JSON inputs: every field class x every bad value ------------------------------------------

ZERO_ALLOWED = {"/parallelism/zero_stage", "/data/2"}


def json_cases(kind, file, base, int_fields, num_fields, cmd, extra_files=None):
    for path in int_fields:
        for label, value, raw in INT_BAD:
            if label == "zero" and path in ZERO_ALLOWED:
                continue
            files = dict(extra_files or {})
            files[file] = mutate(base, path, value, raw)
            add(f"bad-{kind}-{slug(path)}-{label}", cmd, files, must=[file, path])
    for path in num_fields:
        for label, value, raw in NUM_BAD:
            files = dict(extra_files or {})
            files[file] = mutate(base, path, value, raw)
            add(f"bad-{kind}-{slug(path)}-{label}", cmd, files, must=[file, path])


json_cases("plan", "plan.json", PLAN,
           ["/cluster/count", "/parallelism/dp", "/parallelism/tp", "/parallelism/pp", "/parallelism/vp", "/parallelism/cp",
            "/parallelism/zero_stage", "/batch/global_batch", "/batch/micro_batch", "/batch/num_micro_batches", "/batch/seq_len"],
           ["/training/tokens"], "check plan.json")
for label, value, raw in NUM_BAD:
    add(f"bad-plan-checkpoint-interval-{label}", "check plan.json",
        {"plan.json": mutate({**PLAN, "checkpoint": {"interval_s": 1}}, "/checkpoint/interval_s", value, raw)},
        must=["plan.json", "/checkpoint/interval_s"])
    add(f"bad-plan-bucket-size-{label}", "check plan.json",
        {"plan.json": mutate({**PLAN, "data_parallel": {"bucket_size_bytes": 1}}, "/data_parallel/bucket_size_bytes", value, raw)},
        must=["plan.json", "/data_parallel/bucket_size_bytes"])
# Products of degrees that overflow an int or exceed the GPU limit.
add("bad-plan-degree-product-overflow", "check plan.json",
    {"plan.json": json.dumps({**PLAN, "parallelism": {"dp": 65536, "tp": 65536, "pp": 65536}}) + "\n"},
    must=["plan.json", "/parallelism", "dp*tp"])
add("bad-plan-pp-vp-product", "check plan.json",
    {"plan.json": json.dumps({**PLAN, "parallelism": {"dp": 1, "tp": 1, "pp": 128, "vp": 10000}}) + "\n"},
    must=["plan.json", "/parallelism", "pp*vp"])
add("bad-plan-instances-beyond-gpu-limit", "check plan.json",
    {"plan.json": json.dumps({**PLAN, "cluster": {"instance_type": "p4d.24xlarge", "count": 131072}}) + "\n"},
    must=["plan.json", "/cluster", "GPUs"])
add("bad-plan-deep-root", "check plan.json", {"plan.json": DEEP + "\n"}, must=["plan.json", "nested deeper"])
add("bad-plan-deep-model", "check plan.json", {"plan.json": mutate(PLAN, "/model", None, DEEP)}, must=["plan.json", "nested deeper"])
add("bad-plan-stage-huge", "check plan.json",
    {"plan.json": json.dumps({**PLAN, "stages": [[0, 4294967312]]}) + "\n"}, must=["plan.json", "/stages/0/1"])
add("bad-plan-directory", "check .", {}, must=[".", "is a directory"])
add("bad-plan-dev-zero-not-json", "check /dev/null", {}, must=["/dev/null", "invalid JSON"])

json_cases("model", "model.json", MODEL,
           ["/layers", "/hidden", "/heads", "/vocab", "/seq_len"], ["/published_params"], "model model.json")
for label, value, raw in [("beyond-limit", 1000000, None)]:
    add(f"bad-model-layers-{label}", "model model.json", {"model.json": mutate(MODEL, "/layers", value, raw)},
        must=["model.json", "/layers", "10000"])
    add(f"bad-model-seq-len-{label}", "model model.json", {"model.json": mutate(MODEL, "/seq_len", 1 << 30, raw)},
        must=["model.json", "/seq_len"])
    add(f"bad-model-hidden-{label}", "model model.json", {"model.json": mutate(MODEL, "/hidden", 1 << 30, raw)},
        must=["model.json", "/hidden"])
add("bad-search-model-too-deep", "plan --model deep.json --tokens 1e9 --instances p4d.24xlarge --max-gpus 64",
    {"deep.json": mutate(MODEL, "/layers", 3000, None)}, must=["--model", "3000 layers"])
add("bad-model-deep-root", "model model.json", {"model.json": DEEP + "\n"}, must=["model.json", "nested deeper"])
add("bad-model-unit-out-of-range", "model model.json --ops --unit 999", {"model.json": json.dumps(MODEL) + "\n"},
    must=["--unit", "units 0.."])

json_cases("hf", "config.json", HF, ["/n_layer", "/n_embd", "/n_head", "/n_positions", "/vocab_size"], [], "model config.json")
json_cases("hf-llama", "config.json", HF_LLAMA, ["/num_hidden_layers", "/intermediate_size", "/num_key_value_heads"],
           ["/rms_norm_eps"], "model config.json")
add("bad-hf-deep-root", "model config.json", {"config.json": DEEP + "\n"}, must=["config.json", "nested deeper"])
add("bad-hf-layers-beyond-limit", "model config.json", {"config.json": mutate(HF, "/n_layer", 1000000, None)},
    must=["config.json", "/n_layer", "10000"])

catalog_files = {"catalog/gpus.json": json.dumps(CATALOG_GPUS) + "\n", "catalog/sources.json": json.dumps(CATALOG_SOURCES) + "\n"}
json_cases("catalog", "catalog/g4dn.json", CATALOG_G4DN,
           ["/instances/0/gpu_count", "/instances/0/vcpus", "/instances/0/topology/pcie_generation",
            "/instances/0/topology/sockets", "/instances/0/network/nics", "/instances/0/storage/nvme_devices"],
           ["/instances/0/prices/ec2_on_demand", "/instances/0/host_memory", "/instances/0/topology/pcie_bandwidth"],
           "--catalog-dir catalog catalog", catalog_files)
json_cases("catalog-gpu", "catalog/gpus.json", CATALOG_GPUS, [], ["/gpus/T4/tdp_w", "/gpus/T4/memory"],
           "--catalog-dir catalog catalog",
           {"catalog/g4dn.json": json.dumps(CATALOG_G4DN) + "\n", "catalog/sources.json": json.dumps(CATALOG_SOURCES) + "\n"})
# Software stacks (catalog/software.json, hw::SoftwareStack).
CATALOG_SOFTWARE = {"software": {"eager": {
    "description": "golden test stack", "launch": "10us", "kernel_gap": "2us", "layer_hook": "20us", "micro_batch": "50us",
    "step": "200us", "sync_before_optimizer": True, "kernels": {"dropout": 0},
    "sources": {f: "ours" for f in ["launch", "kernel_gap", "layer_hook", "micro_batch", "step", "sync_before_optimizer", "kernels"]}}}}
software_files = {**catalog_files, "catalog/g4dn.json": json.dumps(CATALOG_G4DN) + "\n"}
json_cases("catalog-software", "catalog/software.json", CATALOG_SOFTWARE, [],
           ["/software/eager/launch", "/software/eager/layer_hook", "/software/eager/kernels/dropout"],
           "--catalog-dir catalog catalog", software_files)
add("bad-catalog-software-launch-beyond-limit", "--catalog-dir catalog catalog",
    {**software_files, "catalog/software.json": mutate(CATALOG_SOFTWARE, "/software/eager/launch", "2s", None)},
    must=["catalog/software.json", "/software/eager/launch"])
add("bad-catalog-software-unknown-op-class", "--catalog-dir catalog catalog",
    {**software_files, "catalog/software.json": mutate(CATALOG_SOFTWARE, "/software/eager/kernels/softmax", 0, None)},
    must=["catalog/software.json", "/software/eager/kernels/softmax", "unknown op class"])
add("bad-catalog-software-sync-string", "--catalog-dir catalog catalog",
    {**software_files, "catalog/software.json": mutate(CATALOG_SOFTWARE, "/software/eager/sync_before_optimizer", "yes", None)},
    must=["catalog/software.json", "/software/eager/sync_before_optimizer"])
add("bad-catalog-software-unknown-source", "--catalog-dir catalog catalog",
    {**software_files, "catalog/software.json": mutate(CATALOG_SOFTWARE, "/software/eager/sources/launch", "nowhere", None)},
    must=["catalog/software.json", "/software/eager/sources/launch", "nowhere"])
add("bad-plan-unknown-software", "check plan.json",
    {"plan.json": json.dumps({**PLAN, "software": "pytorch-eagr"}) + "\n"}, must=["plan.json", "/software", "pytorch-eager"])
add("bad-plan-stack-flag", "plan --model gpt3-1.3b --instances p4d.24xlarge --counts 1 --stack tensorflow",
    {}, must=["--stack", "megatron-core"])
add("bad-catalog-gpu-count-beyond-limit", "--catalog-dir catalog catalog",
    {**catalog_files, "catalog/g4dn.json": mutate(CATALOG_G4DN, "/instances/0/gpu_count", 100000, None)},
    must=["catalog/g4dn.json", "/instances/0/gpu_count"])
add("bad-catalog-deep-root", "--catalog-dir catalog catalog", {**catalog_files, "catalog/g4dn.json": DEEP + "\n"},
    must=["catalog/g4dn.json", "nested deeper"])
add("bad-catalog-dir-is-file", "--catalog-dir cmd catalog", {}, must=["cmd"])

json_cases("prices", "prices.json", PRICES, [],
           ["/prices/p4d.24xlarge/ec2_on_demand", "/prices/p4d.24xlarge/spot"], "--prices prices.json catalog p4d.24xlarge")
add("bad-prices-beyond-limit", "--prices prices.json catalog p4d.24xlarge",
    {"prices.json": mutate(PRICES, "/prices/p4d.24xlarge/ec2_on_demand", 1e300, None)},
    must=["prices.json", "/prices/p4d.24xlarge/ec2_on_demand"])
add("bad-prices-deep-root", "--prices prices.json catalog p4d.24xlarge", {"prices.json": DEEP + "\n"},
    must=["prices.json", "nested deeper"])
add("bad-prices-directory", "--prices . catalog p4d.24xlarge", {}, must=[".", "is a directory"])

json_cases("calibration", "cal.json", CALIBRATION, ["/entries/0/m", "/entries/0/n", "/entries/0/k"],
           ["/entries/0/compute_efficiency"], "simulate plan.json --calibration cal.json",
           {"plan.json": json.dumps(PLAN) + "\n"})
add("bad-calibration-deep-root", "simulate plan.json --calibration cal.json",
    {"plan.json": json.dumps(PLAN) + "\n", "cal.json": DEEP + "\n"}, must=["cal.json", "nested deeper"])
add("bad-calibration-efficiency-beyond-limit", "simulate plan.json --calibration cal.json",
    {"plan.json": json.dumps(PLAN) + "\n", "cal.json": mutate(CALIBRATION, "/entries/0/compute_efficiency", 1e300, None)},
    must=["cal.json", "/entries/0/compute_efficiency"])

spot_plan = {"plan.json": json.dumps(PLAN) + "\n"}
json_cases("trace", "trace.json", TRACE, ["/metadata/instances", "/data/2"], ["/metadata/gap_seconds"],
           "job plan.json --purchase spot --step-time 10s --runs 10 --trace trace.json", spot_plan)
add("bad-trace-deep-root", "job plan.json --purchase spot --step-time 10s --runs 10 --trace trace.json",
    {**spot_plan, "trace.json": DEEP + "\n"}, must=["trace.json", "nested deeper"])

# Published results: malformed numbers skip the point with a reason; syntax and depth are errors.
def published(point_changes, deletes=()):
    p = json.loads(json.dumps(POINT))
    for path, value in point_changes:
        set_path(p, path, value)
    for path in deletes:
        delete_path(p, path)
    return json.dumps({"schema": "published-results v1", "data_points": [p]}, indent=1) + "\n"


for name, changes, deletes, reason in [
    ("tp-zero", [("/parallelism/tp", 0)], [], "\"tp\" must be a whole number between 1 and 131072, got 0"),
    ("pp-zero", [("/parallelism/pp", 0)], [], "\"pp\" must be a whole number between 1 and 131072, got 0"),
    ("cp-huge", [("/parallelism/cp", 4294967312)], [], "\"cp\" must be a whole number"),
    ("gpus-zero", [("/hardware/num_gpus", 0)], [], "\"num_gpus\" must be a whole number"),
    ("gpus-wrap", [("/hardware/num_gpus", 4294967328)], [], "\"num_gpus\" must be a whole number"),
    ("layers-huge", [("/model/layers", 1099511627776)], [], "\"layers\" must be a whole number"),
    ("batch-frac", [("/parallelism/global_batch", 2.5)], [], "\"global_batch\" must be a whole number"),
    ("step-time-zero", [("/metrics/step_time_s", 0)], [], "the measured \"step_time_s\" must be positive, got 0"),
    ("step-time-negative", [("/metrics/step_time_s", -1.5)], [], "the measured \"step_time_s\" must be positive"),
    ("tokens-per-s-zero", [("/metrics/tokens_per_s", 0), ("/metrics/step_time_s", None)], [],
     "the measured \"tokens_per_s\" must be positive, got 0"),
    ("no-source", [], ["/source"], None),
    ("precision-number", [("/precision", 16)], [], None),
    ("no-hardware", [], ["/hardware"], "the number of GPUs is not given"),
]:
    must = ["bad-point"] + ([reason] if reason else [])
    add(f"bad-published-{name}", "validate published.json --unmapped", {"published.json": published(changes, deletes)}, 0, must)
add("bad-published-overflow", "validate published.json",
    {"published.json": published([]).replace("\"step_time_s\": 1.5", "\"step_time_s\": 1e309")},
    must=["published.json", "1e309"])
add("bad-published-deep", "validate published.json",
    {"published.json": published([]).replace("\"step_time_s\": 1.5", "\"step_time_s\": " + DEEP)},
    must=["published.json", "nested deeper"])
add("bad-published-directory", "validate .", {}, must=[".", "is a directory"])

# ---- CLI flags: every numeric, quantity and choice flag --------------------------------------

PLAN_FILE = {"plan.json": json.dumps(PLAN) + "\n"}
SEARCH = "plan --model gpt2-124m --tokens 1e9 --instances p3.8xlarge --max-gpus 16"
INT_FLAG_BAD = [("neg", "-1"), ("huge", "1e30"), ("overflow", "1e309"), ("word", "abc"), ("frac", "2.5"),
                ("u64", "18446744073709551617")]
int_flags = [
    # (command prefix, flag, files, allows zero)
    ("plan --model gpt2-124m --tokens 1e9 --instances p3.8xlarge", "--max-gpus", {}, False), (SEARCH, "--max-instances", {}, True), (SEARCH, "--global-batch", {}, False),
    (SEARCH, "--seq-len", {}, False), (SEARCH, "--simulate-top", {}, True), (SEARCH, "--exact-top", {}, True),
    (SEARCH, "--spot-runs", {}, False), (SEARCH, "--seed", {}, True), (SEARCH, "--top", {}, False),
    (SEARCH, "--threads", {}, True), (SEARCH, "--pareto", {}, True),
    ("report --model gpt2-124m --tokens 1e9", "--spot-plans", {}, True),
    ("job plan.json", "--runs", PLAN_FILE, False), ("job plan.json", "--threads", PLAN_FILE, True),
    ("job plan.json", "--seed", PLAN_FILE, True), ("job plan.json", "--eval-every", PLAN_FILE, True),
    ("job plan.json", "--needed", PLAN_FILE, True),
    ("execute plan.json", "--steps", PLAN_FILE, False), ("execute plan.json", "--checkpoint-every", PLAN_FILE, True),
    ("execute plan.json", "--seed", PLAN_FILE, True),
    ("simulate plan.json", "--seed", PLAN_FILE, True),
    ("export plan.json --to torchrun", "--master-port", PLAN_FILE, False),
    ("model gpt2-124m --ops", "--unit", {}, True),
    ("validate published.json", "--threads", {"published.json": published([])}, True),
]
for prefix, flag, files, zero_ok in int_flags:
    bad = list(INT_FLAG_BAD) + ([] if zero_ok else [("zero", "0")])
    where = prefix.split()[0]
    for label, value in bad:
        add(f"bad-flag-{where}-{flag.strip('-')}-{label}", f"{prefix} {flag} {value}", dict(files), must=[flag])
    # The limit shows in --help.
real_flags = [("job plan.json", "--epochs", PLAN_FILE), ("simulate plan.json", "--straggler-stddev", PLAN_FILE),
              ("simulate plan.json", "--overlap-slowdown", PLAN_FILE), ("execute plan.json", "--lr", PLAN_FILE),
              ("execute plan.json", "--timeout", PLAN_FILE)]
for prefix, flag, files in real_flags:
    where = prefix.split()[0]
    for label, value in [("neg", "-1"), ("overflow", "1e309"), ("nan", "nan"), ("word", "fast"), ("huge", "1e30")]:
        add(f"bad-flag-{where}-{flag.strip('-')}-{label}", f"{prefix} {flag} {value}", dict(files), must=[flag])

QTY_BAD = [("neg", "-5"), ("word", "lots"), ("overflow", "1e309"), ("huge", "1e300"), ("unit", "5parsecs"), ("zero", "0")]
qty_flags = [
    ("plan --model gpt2-124m --instances p3.8xlarge --max-gpus 16", "--tokens", {}),
    (SEARCH + " --objective cost-under-deadline", "--deadline", {}),
    (SEARCH + " --objective time-under-budget", "--budget", {}),
    (SEARCH, "--bucket-sizes", {}),
    ("job plan.json", "--step-time", PLAN_FILE), ("job plan.json", "--tokens", PLAN_FILE),
    ("job plan.json --tokens 1e9", "--samples", PLAN_FILE), ("job plan.json", "--dataset-size", PLAN_FILE),
    ("job plan.json", "--sample-size", PLAN_FILE), ("job plan.json", "--fsx-size", PLAN_FILE),
    ("job plan.json", "--ebs-throughput", PLAN_FILE), ("job plan.json", "--checkpoint-interval", PLAN_FILE),
    ("job plan.json", "--deadline", PLAN_FILE),
    ("job plan.json --platform sagemaker --purchase spot", "--max-wait", PLAN_FILE),
    ("job plan.json --platform sagemaker --purchase spot", "--max-run", PLAN_FILE),
    ("export plan.json --to sagemaker", "--max-run", PLAN_FILE), ("export plan.json --to sagemaker", "--max-wait", PLAN_FILE),
    ("execute plan.json", "--memory-limit", PLAN_FILE),
    ("report --plan plan.json", "--tokens", PLAN_FILE),
]
for prefix, flag, files in qty_flags:
    where = prefix.split()[0]
    for label, value in QTY_BAD:
        if label == "zero" and flag in ("--eval-time",):
            continue
        add(f"bad-flag-{where}-{flag.strip('-')}-{label}", f"{prefix} {flag} {value}", dict(files), must=[flag])
# --eval-time may be zero; the rest must not be negative.
for label, value in [("neg", "-5"), ("word", "lots"), ("overflow", "1e309"), ("unit", "5parsecs")]:
    add(f"bad-flag-job-eval-time-{label}", f"job plan.json --eval-time {value}", dict(PLAN_FILE), must=["--eval-time"])

list_flags = [(SEARCH, "--counts", ["0", "-1", "1e9", "2,x"]), (SEARCH, "--micro-batches", ["0", "-4", "1e30", "2.5"]),
              (SEARCH, "--zero", ["4", "-1", "one"]), (SEARCH, "--vp", ["0", "1e6"]), (SEARCH, "--cp", ["0", "1e9"]),
              (SEARCH, "--global-batch-range", ["0:8", "8:1e30", "8", "a:b"])]
for prefix, flag, values in list_flags:
    for i, value in enumerate(values):
        add(f"bad-flag-plan-{flag.strip('-')}-{i}", f"{prefix} {flag} {value}", {}, must=[flag])

choice_flags = [(SEARCH, "--objective"), (SEARCH, "--platform"), (SEARCH, "--purchase"), (SEARCH, "--partition"),
                (SEARCH, "--for"), (SEARCH, "--recompute"), (SEARCH, "--schedules"), (SEARCH, "--dp-algorithms"),
                (SEARCH, "--off"), ("export plan.json", "--to"), ("job plan.json", "--data-input"),
                ("job plan.json", "--checkpoint-storage"), ("job plan.json", "--platform"), ("job plan.json", "--purchase"),
                ("simulate plan.json", "--fidelity"), ("simulate plan.json", "--granularity"),
                ("execute plan.json", "--dtype"), ("execute plan.json", "--backend"),
                ("report --model gpt2-124m --tokens 1e9", "--format")]
for prefix, flag in choice_flags:
    where = prefix.split()[0]
    files = dict(PLAN_FILE) if "plan.json" in prefix else {}
    add(f"bad-flag-{where}-{flag.strip('-')}-unknown", f"{prefix} {flag} bogus", files, must=[flag, "one of"])
add("bad-flag-job-purchase-blend-zero", "job plan.json --purchase blend:0", dict(PLAN_FILE), must=["--purchase"])
add("bad-flag-job-purchase-blend-huge", "job plan.json --purchase blend:1e30", dict(PLAN_FILE), must=["--purchase"])
add("bad-flag-job-step-time-too-long", "job plan.json --step-time 1e10s", dict(PLAN_FILE), must=["30 years"])
add("bad-flag-job-tokens-steps-overflow", "job plan.json --tokens 1e18 --step-time 1s", dict(PLAN_FILE), must=["30 years"])

# ---- sizes and kinds of paths ------------------------------------------------------------------
add("bad-path-execute-data-directory", "execute plan.json --data .", {"plan.json": json.dumps(
    {"schema_version": 1, "model": "tiny.json", "cluster": {"instance_type": "g5.xlarge", "count": 1},
     "parallelism": {"dp": 1, "tp": 1, "pp": 1}, "batch": {"global_batch": 2, "micro_batch": 2}}) + "\n",
    "tiny.json": json.dumps({"name": "tiny", "family": "gpt", "layers": 1, "hidden": 16, "heads": 2, "vocab": 256,
                             "seq_len": 8, "source": "golden test"}) + "\n"}, must=[".", "is a directory"])
add("bad-path-job-trace-directory", "job plan.json --purchase spot --step-time 10s --trace .", dict(PLAN_FILE),
    must=[".", "is a directory"])
add("bad-path-model-directory", "plan --model . --tokens 1e9", {}, must=["."])

# ---- output paths ------------------------------------------------------------------------------
add("bad-output-dev-full", "export plan.json --to torchrun -o /dev/full", dict(PLAN_FILE), must=["/dev/full", "No space left"])
add("bad-output-directory", "export plan.json --to torchrun -o .", dict(PLAN_FILE), must=[".", "is a directory"])
add("bad-output-missing-folder", "export plan.json --to torchrun -o no/such/folder/out.sh", dict(PLAN_FILE),
    must=["no/such/folder/out.sh", "does not exist"])
add("bad-output-job-write-plan-full", "job plan.json --write-plan /dev/full", dict(PLAN_FILE), must=["/dev/full"])
add("bad-output-simulate-json-full", "simulate plan.json --json /dev/full", dict(PLAN_FILE), must=["/dev/full"])
add("ok-output-dev-null", "export plan.json --to torchrun -o /dev/null", dict(PLAN_FILE), 0, [])
add("ok-output-stdout-dash", "export plan.json --to torchrun -o -", dict(PLAN_FILE), 0, [])

# ---- unmet objectives --------------------------------------------------------------------------
add("objective-deadline-missed", SEARCH + " --objective cost-under-deadline --deadline 1min -o out.plan.json", {}, 3,
    ["deadline", "exit code 3"])
add("objective-budget-missed", SEARCH + " --objective time-under-budget --budget 1 -o out.plan.json", {}, 3,
    ["budget", "exit code 3"])

# ---- generated code: user strings in exports -----------------------------------------------------
SAGEMAKER_PLAN = {"schema_version": 1, "model": "gpt2-355m", "cluster": {"instance_type": "p3dn.24xlarge", "count": 2},
                  "parallelism": {"dp": 16, "tp": 1, "pp": 1, "zero_stage": 0},
                  "batch": {"global_batch": 512, "micro_batch": 8},
                  "training": {"tokens": "10B", "platform": "sagemaker", "purchase": "spot"}}
add("export-quoting-sagemaker", "export plan.json --to sagemaker --max-run 36h --role 'arn:aws:iam::1:role/My \"Role\" $(id)' "
    "--entry-point 'my script\\n.py' --checkpoint-s3-uri \"s3://b/it's\"",
    {"plan.json": json.dumps(SAGEMAKER_PLAN) + "\n"}, 0, ["role=\"arn:aws:iam::1:role/My \\\"Role\\\" $(id)\""])
add("export-quoting-torchrun", "export plan.json --to torchrun --entry-point \"it's $(rm -rf x) a.py\"", dict(PLAN_FILE), 0,
    ["'it'\\''s $(rm -rf x) a.py'"])


def write_cases():
    for name in os.listdir(CASES):
        if name.startswith("bad-") or name.startswith("objective-") or name.startswith("export-quoting-") or \
                name in ("ok-output-dev-null", "ok-output-stdout-dash"):
            shutil.rmtree(os.path.join(CASES, name))
    names = set()
    for name, cmd, files, exit_code, must in cases:
        assert name not in names, name
        names.add(name)
        d = os.path.join(CASES, name)
        os.makedirs(d)
        with open(os.path.join(d, "cmd"), "w") as f:
            f.write(cmd + "\n")
        with open(os.path.join(d, "expected_exit"), "w") as f:
            f.write(f"{exit_code}\n")
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)) or d, exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        with open(os.path.join(d, "must_contain"), "w") as f:
            f.write("\n".join(must) + ("\n" if must else ""))
        # Fill the expected output with run_golden.py --update: stderr for errors, stdout otherwise.
        if exit_code == 0 and not name.startswith("bad-published"):
            open(os.path.join(d, "expected_stdout"), "w").close()
    print(f"wrote {len(cases)} cases")


if __name__ == "__main__":
    write_cases()

#!/usr/bin/env python3
"""Exports quote every user string: the generated Python parses and gives back the exact
strings, and every shell line passes `bash -n` and splits back into the exact entry point.

  check_export_quoting.py TRAINPLAN
"""
import ast
import json
import os
import shlex
import subprocess
import sys
import tempfile

NASTY = [
    "train.py",
    "my script.py",
    "it's.py",
    'say "hi".py',
    "$(touch /tmp/trainplan-pwned).py",
    "`id`; rm -rf x",
    "back\\slash\\.py",
    "two\nlines.py",
    "tab\there",
    "caf\u00e9 \u2014 \U0001F600.py",
    "--flag-looking",
    "'",
    "\\",
    "a'b\"c$d`e\\f",
]

PLANS = {
    "sagemaker": {"schema_version": 1, "model": "gpt2-355m", "cluster": {"instance_type": "p3dn.24xlarge", "count": 2},
                  "parallelism": {"dp": 16, "tp": 1, "pp": 1, "zero_stage": 0},
                  "batch": {"global_batch": 512, "micro_batch": 8},
                  "training": {"tokens": "10B", "platform": "sagemaker", "purchase": "spot"}},
    "torchrun": {"schema_version": 1, "model": "gpt3-13b", "cluster": {"instance_type": "p4d.24xlarge", "count": 16},
                 "parallelism": {"dp": 16, "tp": 8, "pp": 1, "zero_stage": 1},
                 "batch": {"global_batch": 1024, "micro_batch": 2}, "recompute": "selective"},
}


def run(binary, args):
    proc = subprocess.run([binary] + args, capture_output=True, text=True, env=dict(os.environ, TRAINPLAN_NO_PROGRESS="1"))
    if proc.returncode != 0:
        raise SystemExit(f"FAIL: trainplan {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout


def keywords(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "PyTorch":
            return {k.arg: ast.literal_eval(k.value) for k in node.keywords if isinstance(k.value, ast.Constant)}
    raise SystemExit("FAIL: no PyTorch(...) call in the SageMaker export")


def main():
    binary = os.path.abspath(sys.argv[1])
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for target, plan in PLANS.items():
            paths[target] = os.path.join(tmp, f"{target}.json")
            with open(paths[target], "w") as f:
                json.dump(plan, f)
        for s in NASTY:
            # SageMaker: a Python program whose literals are exactly the user's strings.
            text = run(binary, ["export", paths["sagemaker"], "--to", "sagemaker", "--max-run", "36h", "--role", s,
                                "--entry-point", s, "--checkpoint-s3-uri", s, "--py-version", s])
            try:
                kw = keywords(ast.parse(text))
            except SyntaxError as e:
                print(f"FAIL: sagemaker export with {s!r} does not parse: {e}\n{text}")
                failures += 1
                continue
            # framework_version is checked against the SDK's exact versions (rule sagemaker.framework-version).
            for key in ("role", "entry_point", "checkpoint_s3_uri", "py_version"):
                if kw.get(key) != s:
                    print(f"FAIL: sagemaker {key}: {kw.get(key)!r} != {s!r}")
                    failures += 1
            # torchrun: both lines are valid shell and the entry point comes back as one word.
            text = run(binary, ["export", paths["torchrun"], "--to", "torchrun", "--entry-point", s])
            check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
            if check.returncode != 0:
                print(f"FAIL: torchrun export with {s!r} is not valid bash: {check.stderr}\n{text}")
                failures += 1
                continue
            commands = [line for line in text.split("\n") if line and not line.startswith("#")]
            # Joined lines: a quoted newline continues the command on the next line.
            joined = shlex.split(text, comments=True)
            torchrun_words = joined[:joined.index("srun")]
            if torchrun_words[-1] != s:
                print(f"FAIL: torchrun line gives {torchrun_words[-1]!r}, not {s!r}")
                failures += 1
            srun_words = joined[joined.index("srun"):]
            inner = srun_words[srun_words.index("-c") + 1]
            if shlex.split(inner)[-1] != s:
                print(f"FAIL: srun bash -c gives {shlex.split(inner)[-1]!r}, not {s!r}")
                failures += 1
            del commands
    if failures:
        print(f"{failures} quoting failures")
        return 1
    print(f"all {len(NASTY)} strings round-trip through the sagemaker and torchrun exports")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Golden tests of the trainplan command line.

Each folder under tests/golden/cases/ is one case:
  cmd              the arguments, one line, split like a shell would (no shell features)
  expected_exit    the exit code (default 0)
  expected_stdout  optional: stdout must equal it (trailing spaces on lines ignored)
  expected_stderr  optional: stderr must equal it
  stdout_contains  optional: each non-empty line must appear in stdout
  env              optional: KEY=VALUE lines added to the environment
  requires         optional: conditions, one a line; the case is skipped where one fails:
                     cuda-module     libtrainplan_backend_cuda.so lies beside the binary
                     no-cuda-driver  libcuda.so.1 (the CUDA driver) cannot be loaded
  must_contain     optional: each non-empty line must appear in stdout or stderr (the file,
                   JSON pointer or flag a bad-input message must name)
Every case that exits 1 must print exactly one line, `error: <where>: <what> — <hint>`.
The command runs with the case folder as working directory, so cases carry their input
files. In the output the binary's folder reads $BUILD. `run_golden.py TRAINPLAN GOLDEN_DIR
--update` rewrites the expected files.
"""
import concurrent.futures
import ctypes
import os
import shutil
import tempfile
import shlex
import subprocess
import sys


def unmet(requirement, binary):
    """Why `requirement` does not hold on this machine, or None when it does."""
    if requirement == "cuda-module":
        module = os.path.join(os.path.dirname(binary), "libtrainplan_backend_cuda.so")
        return None if os.path.exists(module) else "the CUDA module is not built"
    if requirement == "no-cuda-driver":
        try:
            ctypes.CDLL("libcuda.so.1")
            return "this machine has the CUDA driver"
        except OSError:
            return None
    raise SystemExit(f"unknown requirement {requirement!r}")


def normalize(text):
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"


def main():
    binary, golden = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    update = "--update" in sys.argv[3:]
    only = [a for a in sys.argv[3:] if not a.startswith("--")]
    cases_dir = os.path.join(golden, "cases")
    failures = []
    names = sorted(os.listdir(cases_dir))
    selected = [n for n in names if not only or n in only]

    def run_case(name):
        case = os.path.join(cases_dir, name)
        with open(os.path.join(case, "cmd")) as f:
            args = shlex.split(f.read().strip())
        requires = os.path.join(case, "requires")
        if os.path.exists(requires):
            why = [w for w in (unmet(r.strip(), binary) for r in open(requires) if r.strip()) if w]
            if why:
                print(f"skip {name}: {'; '.join(why)}")
                return None
        # Hermetic: an empty calibration profile directory and a fresh error history per case.
        scratch = tempfile.mkdtemp(prefix="golden-")
        env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1", TRAINPLAN_CALIBRATION_DIR=os.path.join(scratch, "calibration"),
                   TRAINPLAN_HISTORY_DB=os.path.join(scratch, "history.sqlite"))
        env_file = os.path.join(case, "env")
        if os.path.exists(env_file):
            for line in open(env_file).read().splitlines():
                if line.strip():
                    key, _, value = line.partition("=")
                    env[key.strip()] = value.strip()
        proc = subprocess.run([binary] + args, cwd=case, capture_output=True, text=True, env=env, timeout=300)
        shutil.rmtree(scratch, ignore_errors=True)
        bindir = os.path.dirname(binary)
        proc.stdout = proc.stdout.replace(bindir, "$BUILD")
        proc.stderr = proc.stderr.replace(bindir, "$BUILD")
        return args, proc

    # Cases are independent (each runs in its own folder): run them a few at a time, report in order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        results = dict(zip(selected, pool.map(run_case, selected)))
    for name in selected:
        case = os.path.join(cases_dir, name)
        if results[name] is None:
            continue
        args, proc = results[name]
        expected_exit = 0
        exit_file = os.path.join(case, "expected_exit")
        if os.path.exists(exit_file):
            expected_exit = int(open(exit_file).read().strip())
        problems = []
        if update:
            open(exit_file, "w").write(f"{proc.returncode}\n")
            for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                path = os.path.join(case, f"expected_{stream}")
                if os.path.exists(path) or (stream == "stderr" and text):
                    open(path, "w").write(normalize(text) if text else "")
            print(f"updated {name}")
            continue
        if proc.returncode != expected_exit:
            problems.append(f"exit code {proc.returncode}, expected {expected_exit}")
        for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            path = os.path.join(case, f"expected_{stream}")
            if os.path.exists(path):
                want = open(path).read()
                if normalize(text) != normalize(want) if want else text.strip() != "":
                    problems.append(f"{stream} differs:\n--- expected\n{want}--- got\n{text}")
        contains = os.path.join(case, "stdout_contains")
        if os.path.exists(contains):
            for line in open(contains).read().splitlines():
                if line.strip() and line.strip() not in proc.stdout:
                    problems.append(f"stdout lacks: {line.strip()}")
        must = os.path.join(case, "must_contain")
        if os.path.exists(must):
            for line in open(must).read().splitlines():
                if line.strip() and line.strip() not in proc.stdout + proc.stderr:
                    problems.append(f"output lacks: {line.strip()}")
        if proc.returncode == 1:
            lines = proc.stderr.strip("\n").split("\n")
            if len(lines) != 1 or not lines[0].startswith("error: ") or " \u2014 " not in lines[0]:
                problems.append(f"exit 1 must print one `error: where: what \u2014 hint` line, got:\n{proc.stderr}")
        if "internal error" in proc.stderr or proc.returncode < 0:
            problems.append(f"crashed or internal error: {proc.stderr}")
        if problems:
            failures.append((name, args, problems))
            print(f"FAIL {name}: trainplan {' '.join(args)}")
            for p in problems:
                print("  " + p.replace("\n", "\n  "))
        else:
            print(f"ok   {name}")
    if failures:
        print(f"{len(failures)} of {len(names)} golden cases failed")
        return 1
    print(f"all {len(names)} golden cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

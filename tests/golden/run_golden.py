#!/usr/bin/env python3
"""Golden tests of the trainplan command line.

Each folder under tests/golden/cases/ is one case:
  cmd              the arguments, one line, split like a shell would (no shell features)
  expected_exit    the exit code (default 0)
  expected_stdout  optional: stdout must equal it (trailing spaces on lines ignored)
  expected_stderr  optional: stderr must equal it
  stdout_contains  optional: each non-empty line must appear in stdout
The command runs with the case folder as working directory, so cases carry their input
files. `run_golden.py TRAINPLAN GOLDEN_DIR --update` rewrites the expected files.
"""
import os
import shutil
import tempfile
import shlex
import subprocess
import sys


def normalize(text):
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"


def main():
    binary, golden = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    update = "--update" in sys.argv[3:]
    only = [a for a in sys.argv[3:] if not a.startswith("--")]
    cases_dir = os.path.join(golden, "cases")
    failures = []
    names = sorted(os.listdir(cases_dir))
    for name in names:
        if only and name not in only:
            continue
        case = os.path.join(cases_dir, name)
        with open(os.path.join(case, "cmd")) as f:
            args = shlex.split(f.read().strip())
        # Hermetic: an empty calibration profile directory and a fresh error history per case.
        scratch = tempfile.mkdtemp(prefix="golden-")
        env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1", TRAINPLAN_CALIBRATION_DIR=os.path.join(scratch, "calibration"),
                   TRAINPLAN_HISTORY_DB=os.path.join(scratch, "history.sqlite"))
        proc = subprocess.run([binary] + args, cwd=case, capture_output=True, text=True, env=env, timeout=300)
        shutil.rmtree(scratch, ignore_errors=True)
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

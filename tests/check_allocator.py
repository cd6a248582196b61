#!/usr/bin/env python3
"""The trainplan command runs on the allocator it was built with, configured as
cli/src/allocator.cpp says: jemalloc with transparent huge pages (MALLOC_CONF still overrides
it), or the C library's malloc in sanitizer builds.

  check_allocator.py BUILD/trainplan jemalloc|libc
Exit 0 when every check holds; prints each failure otherwise.
"""
import os
import re
import subprocess
import sys


def run(binary, args, **env_extra):
    env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1", **env_extra)
    env.pop("MALLOC_CONF", None)
    env.update(env_extra)
    return subprocess.run([binary] + args, capture_output=True, text=True, env=env, timeout=120)


def allocator_line(proc):
    m = re.search(r"^allocator: (.*)$", proc.stdout, re.M)
    return m.group(1) if m else None


def main():
    binary, expected = sys.argv[1], sys.argv[2]
    failures = []
    proc = run(binary, ["--version"])
    line = allocator_line(proc)
    if proc.returncode != 0 or line is None:
        failures.append(f"--version exited {proc.returncode} without an 'allocator:' line:\n{proc.stdout}{proc.stderr}")
    elif expected == "jemalloc":
        if not re.fullmatch(r"jemalloc \d+\.\d+\.\d+\S* \(transparent huge pages: always; freed pages kept\)", line):
            failures.append(f"expected jemalloc with transparent huge pages 'always' and decay off (malloc_conf), got: {line}")
        # The environment overrides the built-in configuration, as jemalloc documents.
        over = allocator_line(run(binary, ["--version"], MALLOC_CONF="thp:never,dirty_decay_ms:10000"))
        if over is None or not over.endswith("(transparent huge pages: never; freed pages returned after 10000 ms)"):
            failures.append(f"MALLOC_CONF=thp:never,dirty_decay_ms:10000 did not override the built-in setting: {over}")
        # The process really allocates through jemalloc: it was mapped by the loader.
        loaded = run(binary, ["--version"], LD_DEBUG="files").stderr
        if not re.search(r"file=\S*libjemalloc\.so\S*\s+\[\d+\];\s+generating link map", loaded):
            failures.append("libjemalloc.so was not loaded by the dynamic loader")
    elif line != "the C library's malloc":
        failures.append(f"expected the C library's malloc, got: {line}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

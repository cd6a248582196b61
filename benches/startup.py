#!/usr/bin/env python3
"""Start-up cost of the trainplan command: wall time and peak RSS of short commands.

  benches/startup.py [--runs N] [--plan-runs M] [--out FILE] LABEL=BINARY [LABEL=BINARY ...]

Each binary runs `--version` and `catalog` N times (default 20) and the README's planning
job (`plan --model gpt3-13b --tokens 300e9`) M times (default 3; 0 skips it), under GNU time:
wall time around fork/exec/wait, CPU time (user + sys, wait4), peak RSS (GNU time's %M). On a
loaded machine wall time includes waiting for a core; CPU time does not. Writes JSON with
the date, machine and load average; prints a table. Targets (issue 16): `--version` and
`catalog` <= 50 ms and <= 40 MB peak RSS.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

COMMANDS = [("version", ["--version"]), ("catalog", ["catalog"])]
PLAN = ("readme_plan_job", ["plan", "--model", "gpt3-13b", "--tokens", "300e9"])


def measure(binary, args, runs):
    wall_ms, cpu_ms, rss_kb = [], [], []
    env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1")
    with tempfile.NamedTemporaryFile("r") as rss_file:
        for _ in range(runs):
            # GNU time reports the command's peak RSS (its own fork is small; a fork of this
            # Python process would count Python's pages); wait4 gives the CPU time of both.
            cmd = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name, binary] + args
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            wall_ms.append((time.perf_counter() - start) * 1e3)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                raise SystemExit(f"{binary} {' '.join(args)} exited {proc.returncode}")
            cpu_ms.append((usage.ru_utime + usage.ru_stime) * 1e3)
            rss_file.seek(0)
            rss_kb.append(int(rss_file.read().split()[-1]))
    return {
        "command": "trainplan " + " ".join(args),
        "runs": runs,
        "wall_ms_median": round(statistics.median(wall_ms), 2),
        "wall_ms_min": round(min(wall_ms), 2),
        "wall_ms_max": round(max(wall_ms), 2),
        "cpu_ms_median": round(statistics.median(cpu_ms), 2),
        "max_rss_mb_median": round(statistics.median(rss_kb) / 1024, 1),
        "max_rss_mb_max": round(max(rss_kb) / 1024, 1),
    }


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--plan-runs", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("binaries", nargs="+", metavar="LABEL=BINARY")
    a = ap.parse_args()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "context": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_model": cpu_model(),
            "cores": os.cpu_count(),
            "load_average_at_start": " ".join(open("/proc/loadavg").read().split()[:3]),
            "git_commit": git or "unknown",
            "method": "wall: around fork/exec/wait of /usr/bin/time + the command; cpu: user+sys of both (wait4); "
                      "max RSS: GNU time's %M of the command",
        },
        "binaries": {},
    }
    for spec in a.binaries:
        label, _, binary = spec.partition("=")
        rows = [dict(name=name, **measure(binary, args, a.runs)) for name, args in COMMANDS]
        if a.plan_runs > 0:
            rows.append(dict(name=PLAN[0], **measure(binary, PLAN[1], a.plan_runs)))
        result["binaries"][label] = {"binary": binary, "results": rows}
        for r in rows:
            print(f"{label:>8} {r['name']:<16} wall median {r['wall_ms_median']:9.1f} ms "
                  f"(min {r['wall_ms_min']:.1f}, max {r['wall_ms_max']:.1f}), cpu {r['cpu_ms_median']:.1f} ms, "
                  f"max RSS median {r['max_rss_mb_median']:.1f} MB over {r['runs']} runs")
    result["context"]["load_average_at_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

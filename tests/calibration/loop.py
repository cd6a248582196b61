#!/usr/bin/env python3
"""The calibration loop, closed on one backend (issue 12, part 5).

  1. execute set A (small GPT / Llama shapes, dp/tp/pp mixes) --repeats times and keep each
     plan's fastest run's timeline;
  2. trainplan bench, then trainplan calibrate: a roofline-only profile ("before": bench peaks
     with the simulator's default efficiencies) and one fitted from A's timelines ("after");
  3. predict set B (other shapes and splits) with both profiles (simulate --on-calibrated-hardware);
  4. execute B in --repeats rounds (the fastest run of each plan counts, as for A) and compare: median and worst
     |error| of the step time, before and after.

Measured step time of a plan = the fastest of its steps after the first two (the first pays
allocation and page faults, the second still warms caches; ten steps by default), and its timeline
is that step's (execute --timeline-step fastest): on a shared machine timing noise only adds time. A reference plan runs before A and after B, and two plans of A
run again in each round of B; an attempt in which the machine's speed drifted by more than
--max-drift (the reference, or A's plans between A and B), or in which the repeats of any plan
of A or B spread by more than --max-spread, is discarded and run again (at most
--attempts). Exit 1 when --bound is given and the median error after calibration exceeds it, or
calibration did not reduce the median error, in two attempts that held still (one such miss is
measured again: a slow spell on a shared machine can outlast the drift and spread checks); exit 77 (CTest "skipped") when no attempt held still.

  loop.py BUILD/trainplan WORKDIR [--backend cpu] [--bound 0.15] [--results FILE.json]
"""
import argparse
import csv
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

GPT = {"family": "gpt", "dropout": False, "vocab": 256}
LLAMA = {"family": "llama", "vocab": 256}

# name -> model fields
MODELS = {
    "gpt-a1": dict(GPT, layers=4, hidden=64, heads=4, seq_len=64),
    "gpt-a2": dict(GPT, layers=2, hidden=128, heads=8, seq_len=32),
    "llama-a3": dict(LLAMA, layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=128, seq_len=48),
    "gpt-b1": dict(GPT, layers=3, hidden=96, heads=6, seq_len=48),
    "gpt-b2": dict(GPT, layers=4, hidden=48, heads=4, seq_len=96),
    "llama-b3": dict(LLAMA, layers=3, hidden=96, heads=6, kv_heads=3, ffn_hidden=192, seq_len=32),
}

# (name, model, dp, tp, pp, global batch, micro batch)
SET_A = [
    ("a1-single", "gpt-a1", 1, 1, 1, 4, 4),
    ("a1-dp2", "gpt-a1", 2, 1, 1, 8, 4),
    ("a2-tp2", "gpt-a2", 1, 2, 1, 4, 2),
    ("a2-pp2", "gpt-a2", 1, 1, 2, 8, 2),
    ("a3-single", "llama-a3", 1, 1, 1, 4, 2),
    ("a3-tp2", "llama-a3", 1, 2, 1, 4, 4),
]
SET_B = [
    ("b1-dp2", "gpt-b1", 2, 1, 1, 8, 4),
    ("b1-tp2", "gpt-b1", 1, 2, 1, 4, 4),
    ("b2-pp2", "gpt-b2", 1, 1, 2, 8, 2),
    ("b2-single", "gpt-b2", 1, 1, 1, 4, 2),
    ("b3-single", "llama-b3", 1, 1, 1, 4, 4),
    ("b3-pp2", "llama-b3", 1, 1, 2, 8, 2),
]


# Plans of A measured again while B runs: the machine must be as fast for B as it was for A.
CONTROLS = ["a1-single", "a1-dp2"]

ENV = dict(os.environ)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, **kw)
    if r.returncode != 0:
        sys.stderr.write(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}\n")
        sys.exit(2)
    return r.stdout


def write_plans(work, plans):
    paths = {}
    for name, model, dp, tp, pp, gb, mb in plans:
        mpath = os.path.join(work, f"{model}.json")
        if not os.path.exists(mpath):
            with open(mpath, "w") as f:
                json.dump(dict(MODELS[model], name=model, display_name=model,
                               notes="calibration loop shape (tests/calibration/loop.py)"), f)
        plan = {"schema_version": 1, "model": mpath,
                "cluster": {"instance_type": "g5.xlarge", "count": dp * tp * pp},
                "parallelism": {"dp": dp, "tp": tp, "pp": pp},
                "batch": {"global_batch": gb, "micro_batch": mb},
                "precision": "fp32"}
        if pp > 1:
            plan["schedule"] = "1f1b"
        p = os.path.join(work, f"plan-{name}.json")
        with open(p, "w") as f:
            json.dump(plan, f)
        paths[name] = p
    return paths


def execute(tp, backend, plan, timeline, steps, profile=None, history=True):
    out = run([tp, "execute", plan, "--backend", backend, "--steps", str(steps), "--timeline", timeline,
               "--timeline-step", "fastest"]
              + (["--calibration", profile] if profile else []) + ([] if history else ["--no-history"]))
    times = []
    for m in re.finditer(r"^step\s+\d+\s+loss \S+\s+grad-norm \S+\s+time (\S+) (\w+)$", out, re.M):
        v, unit = float(m.group(1)), m.group(2)
        times.append(v * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60}.get(unit, 1))
    if not times:
        with open(timeline) as f:
            times = [json.load(f)["step_time_s"]]
    return min(times[2:] if len(times) > 2 else times)


def predict(tp, plan, profile, out_json):
    run([tp, "simulate", plan, "--calibration", profile, "--on-calibrated-hardware", "--json", out_json])
    with open(out_json) as f:
        return json.load(f)["step_time_s"]


def errors(pred, meas):
    e = sorted(abs(p - m) / m for p, m in zip(pred, meas))
    return statistics.median(e), e[-1]


def one_attempt(a, tp, plans_a, plans_b):
    # Each plan of A runs --repeats times and only its fastest run goes into the fit: on a shared
    # machine timing noise only adds time (the same rule as the fastest step within a run), so a
    # run that another process stretched never pulls the fitted efficiencies down.
    fastest, runs = {}, {}
    for rep in range(a.repeats):
        for name, plan in plans_a.items():
            tl = os.path.join(a.work, f"{name}.{rep}.timeline.json")
            t = execute(tp, a.backend, plan, tl, a.steps)
            runs.setdefault(name, []).append(t)
            if name not in fastest or t < fastest[name][0]:
                fastest[name] = (t, rep)
    # How far one plan's repeats spread (slowest / fastest - 1, the widest over A's plans): the
    # timing noise of this machine while A ran. A core taken by another process for a second
    # stretches one plan's run (a 2-rank plan loses its parallelism): the widest spread sees it.
    a.spread = max(max(ts) / min(ts) - 1 for ts in runs.values())
    a.fastest_rep = {name: rep for name, (_, rep) in fastest.items()}
    timelines = [os.path.join(a.work, f"{name}.{rep}.timeline.json") for name, rep in a.fastest_rep.items()]
    bench = os.path.join(a.work, "bench.json")
    run([tp, "bench", "--backend", a.backend, "-o", bench])
    before = os.path.join(a.work, "profile-roofline.json")
    after = os.path.join(a.work, "profile.json")
    run([tp, "calibrate", bench, "-o", before])
    cal_out = run([tp, "calibrate", bench, *timelines, "-o", after])

    # B is measured as A is: --repeats rounds over all of B's plans (a slow period of the machine
    # lasting seconds stretches one round, not every run of one plan), the fastest run of each plan
    # counts, and B's spread joins A's (a plan of B stretched by another process would read as a
    # prediction error).
    # Each round of B also runs two plans of A again (one rank and two ranks, no history): the
    # fitted profile claims to predict B on the machine A was measured on, so when their fastest
    # runs here differ from those in A by more than --max-drift (a core taken, or the host slowed,
    # for the seconds between A and B), the attempt says nothing about the model.
    runs_b, runs_ctl = {}, {}
    for rep in range(a.repeats):
        for name, plan in plans_b.items():
            runs_b.setdefault(name, []).append(
                execute(tp, a.backend, plan, os.path.join(a.work, f"{name}.timeline.json"), a.steps, after))
        for name in CONTROLS:
            runs_ctl.setdefault(name, []).append(
                execute(tp, a.backend, plans_a[name], os.path.join(a.work, f"{name}.control.timeline.json"),
                        a.steps, history=False))
    a.control_drift = max((min(runs_ctl[n]) / min(runs[n]) - 1 for n in CONTROLS), key=abs)
    rows = []
    for name, plan in plans_b.items():
        pb = predict(tp, plan, before, os.path.join(a.work, f"{name}.before.json"))
        pa = predict(tp, plan, after, os.path.join(a.work, f"{name}.after.json"))
        m = min(runs_b[name])
        rows.append({"plan": name, "measured_s": m, "predicted_before_s": pb, "predicted_after_s": pa,
                     "error_before": (pb - m) / m, "error_after": (pa - m) / m})
    a.spread_b = max(max(ts) / min(ts) - 1 for ts in runs_b.values())
    return rows, cal_out, after


def keep_inputs(a, prof_date, rows, mb, ma):
    """Copies what calibrate read into a.keep, every path relative, so the same profile can be
    made again from the copy anywhere (scripts/builtin-profiles.sh)."""
    import shutil
    os.makedirs(a.keep, exist_ok=True)
    shutil.copy(os.path.join(a.work, "bench.json"), os.path.join(a.keep, "bench.json"))
    models = {m for _, m, *_ in SET_A}
    for m in models:
        shutil.copy(os.path.join(a.work, f"{m}.json"), os.path.join(a.keep, f"{m}.json"))
    for name, *_ in SET_A:
        with open(os.path.join(a.work, f"plan-{name}.json")) as f:
            plan = json.load(f)
        plan["model"] = os.path.basename(plan["model"])
        with open(os.path.join(a.keep, f"plan-{name}.json"), "w") as f:
            json.dump(plan, f, indent=1)
            f.write("\n")
        for rep in [a.fastest_rep[name]]:
            tl = f"{name}.{rep}.timeline.json"
            with open(os.path.join(a.work, tl)) as f:
                doc = json.load(f)
            doc["meta"]["plan_file"] = f"plan-{name}.json"
            with open(os.path.join(a.keep, tl), "w") as f:
                json.dump(doc, f, separators=(",", ":"))
                f.write("\n")
    with open(os.path.join(a.keep, "measured.json"), "w") as f:
        json.dump({"what": "calibration inputs of the CPU backend: trainplan bench and set A of tests/calibration/loop.py "
                           f"(the fastest of {a.repeats} runs of each plan, {a.steps} steps each)",
                   "date": prof_date, "machine": platform.node(), "cpus": os.cpu_count(),
                   "load_average_1min": os.getloadavg()[0], "command": " ".join(sys.argv),
                   **({"catalog_gpu": a.catalog_gpu} if a.catalog_gpu else {}),
                   "set_b_median_error_before": mb, "set_b_median_error_after": ma, "set_b": rows}, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainplan")
    ap.add_argument("work")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--attempts", type=int, default=4)
    ap.add_argument("--max-drift", type=float, default=0.10)
    ap.add_argument("--max-spread", type=float, default=0.20,
                    help="discard an attempt in which the repeats of any plan (A or B) spread more than this")
    ap.add_argument("--bound", type=float)
    ap.add_argument("--results")
    ap.add_argument("--keep", help="copy the calibration inputs (bench, set A's timelines, plans, models) here, "
                                   "with relative paths: the data a built-in profile is made from "
                                   "(scripts/builtin-profiles.sh)")
    ap.add_argument("--catalog-gpu", help="with --keep: the catalog GPU the device is (keys a GPU profile)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    a.work = os.path.abspath(a.work)
    tp = a.trainplan
    plans_a, plans_b = write_plans(a.work, SET_A), write_plans(a.work, SET_B)
    history = os.path.join(a.work, "history.sqlite")
    ENV.update(TRAINPLAN_HISTORY_DB=history, TRAINPLAN_CALIBRATION_DIR=os.path.join(a.work, "profiles"))
    # The machine's speed must hold still while A and B are measured: a reference plan runs
    # before A and after B, and an attempt whose reference moved by more than --max-drift is
    # discarded and run again (a shared or throttled machine changes speed for seconds at a time;
    # no model of this machine can predict that).
    ref_plan = plans_a[SET_A[0][0]]
    ref_tl = os.path.join(a.work, "reference.timeline.json")
    # A held-still attempt that misses --bound is measured once more before the loop fails: on a
    # shared VM a slow spell can last through a whole attempt and still pass the drift and spread
    # checks (seen 2026-11-27: set A's own fit 20-25 % off in one attempt, 5-12 % in the next). A
    # loop that is broken misses the bound in both.
    missed = None
    for attempt in range(1, a.attempts + 1):
        t0 = time.time()
        if os.path.exists(history):
            os.remove(history)  # hermetic: the loop's own error history
        ref_before = execute(tp, a.backend, ref_plan, ref_tl, a.steps, history=False)
        rows, cal_out, after = one_attempt(a, tp, plans_a, plans_b)
        ref_after = execute(tp, a.backend, ref_plan, ref_tl, a.steps, history=False)
        drift = ref_after / ref_before - 1
        print(f"attempt {attempt}: reference plan {SET_A[0][0]} {ref_before*1e3:.2f} ms before, "
              f"{ref_after*1e3:.2f} ms after ({100*drift:+.1f}%; {time.time()-t0:.0f} s); "
              f"repeats spread up to {100*a.spread:.1f}% (A), {100*a.spread_b:.1f}% (B); "
              f"A's control plans {100*a.control_drift:+.1f}% while B ran")
        if max(abs(drift), abs(a.control_drift)) <= a.max_drift and max(a.spread, a.spread_b) <= a.max_spread:
            if a.bound is None or missed is not None or attempt == a.attempts:
                break
            meas = [r["measured_s"] for r in rows]
            mb, _ = errors([r["predicted_before_s"] for r in rows], meas)
            ma, _ = errors([r["predicted_after_s"] for r in rows], meas)
            if ma <= a.bound and ma < mb:
                break
            missed = (attempt, ma, mb)
            print(f"  median error after calibration {100*ma:.1f}% (before {100*mb:.1f}%) misses the bound: "
                  "measuring once more (the loop fails when the next held-still attempt misses it too)")
            continue
        if max(abs(drift), abs(a.control_drift)) > a.max_drift:
            print(f"  the machine's speed drifted beyond {100*a.max_drift:.0f}%: measurements discarded")
        else:
            print(f"  the repeats of a plan spread beyond {100*a.max_spread:.0f}%: the machine is too noisy to judge; discarded")
    else:
        if missed:
            print(f"attempt {missed[0]} missed the bound (median after {100*missed[1]:.1f}%, before {100*missed[2]:.1f}%) "
                  "and no later attempt held still: FAILED")
            return 1
        print(f"no attempt of {a.attempts} measured on a machine that held its speed and timing: cannot score the loop here")
        return 77
    meas = [r["measured_s"] for r in rows]
    mb, wb = errors([r["predicted_before_s"] for r in rows], meas)
    ma, wa = errors([r["predicted_after_s"] for r in rows], meas)

    print(cal_out)
    print(f"{'plan':12} {'measured':>10} {'before':>10} {'err':>8} {'after':>10} {'err':>8}")
    for r in rows:
        print(f"{r['plan']:12} {r['measured_s']*1e3:9.2f}ms {r['predicted_before_s']*1e3:9.2f}ms "
              f"{100*r['error_before']:+7.1f}% {r['predicted_after_s']*1e3:9.2f}ms {100*r['error_after']:+7.1f}%")
    print(f"set B step-time error: before median {100*mb:.1f}% worst {100*wb:.1f}%; "
          f"after median {100*ma:.1f}% worst {100*wa:.1f}%")

    # The error history holds A's runs (execute, uncalibrated), A's fastest runs again
    # (calibrate) and B's runs (execute with the fitted profile).
    csv_path = os.path.join(a.work, "history.csv")
    print(run([tp, "history", "--csv", csv_path]))
    with open(csv_path) as f:
        step_rows = [row for row in list(csv.reader(f))[1:] if row[7] == ""]
    expected_rows = (a.repeats + 1) * len(SET_A) + a.repeats * len(SET_B)
    if len(step_rows) != expected_rows:
        print(f"history: {len(step_rows)} runs recorded, expected {expected_rows}")
        return 1

    if a.results:
        with open(after) as f:
            prof = json.load(f)
        res = {"benchmark": "calibration loop (tests/calibration/loop.py)",
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": platform.node(), "hardware": prof["hardware"], "backend": a.backend,
               "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count(),
               "command": " ".join(sys.argv), "attempt": attempt, "reference_drift": drift, "control_drift": a.control_drift,
               "measured_step": "fastest of steps 3..N of each run (timing noise on a shared machine only adds time)",
               "set_a": [r[0] for r in SET_A], "set_b": rows,
               "median_error_before": mb, "worst_error_before": wb,
               "median_error_after": ma, "worst_error_after": wa,
               "goal_median_after": 0.05, "fit": prof["fit"]}
        with open(a.results, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    if a.keep:
        keep_inputs(a, prof_date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), rows=rows, mb=mb, ma=ma)
    if a.bound is not None:
        ok = ma <= a.bound and ma < mb
        if missed:
            print(f"attempt {missed[0]} missed the bound (median after {100*missed[1]:.1f}%, before {100*missed[2]:.1f}%)")
        print(f"bound: median after {100*ma:.1f}% <= {100*a.bound:.0f}% and below before {100*mb:.1f}%: "
              f"{'ok' if ok else 'FAILED'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The README's example chain runs: `plan ... ` writes plan.json, `check plan.json` reads it and
`export plan.json --to T` succeeds for every target, as the README's Examples block writes them
(the commands are read from README.md, so the test follows the README). `trainplan export`
checks each text against the frameworks' rules before writing it (exit 2 on a violation), so
exit 0 means the export passed them.

Usage: check_readme_chain.py TRAINPLAN README.md
"""
import os
import shlex
import subprocess
import sys
import tempfile


def example_commands(readme):
    """The `./build/trainplan plan|check|export` lines of the README's Examples block."""
    text = open(readme).read()
    block = text.split("Examples:", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    out = []
    for line in block.splitlines():
        line = line.split("   #")[0].split("  #")[0].strip()
        words = shlex.split(line) if line else []
        if len(words) > 1 and words[0] == "./build/trainplan" and words[1] in ("plan", "check", "export"):
            out.append(words[1:])
    return out


def main():
    binary, readme = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    commands = example_commands(readme)
    targets = {c[c.index("--to") + 1] for c in commands if c[0] == "export" and "--to" in c}
    if targets != {"deepspeed", "megatron", "sagemaker", "torchrun"}:
        print(f"the README's Examples export to {sorted(targets)}, not to every target")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory(prefix="readme-chain-") as work:
        env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1", TRAINPLAN_CALIBRATION_DIR=os.path.join(work, "calibration"),
                   TRAINPLAN_HISTORY_DB=os.path.join(work, "history.sqlite"))
        for args in commands:
            proc = subprocess.run([binary] + args, cwd=work, capture_output=True, text=True, env=env, timeout=600)
            ok = proc.returncode == 0 and (proc.stdout.strip() or "-o" in args)
            print(f"{'ok  ' if ok else 'FAIL'} trainplan {shlex.join(args)} (exit {proc.returncode})")
            if not ok:
                print(proc.stderr)
                failures += 1
            if args[0] == "plan" and "-o" in args and "--for" in args:  # a plan for one target: export it there
                plan_file = args[args.index("-o") + 1]
                target = args[args.index("--for") + 1]
                proc = subprocess.run([binary, "export", plan_file, "--to", target], cwd=work, capture_output=True, text=True,
                                      env=env, timeout=600)
                print(f"{'ok  ' if proc.returncode == 0 else 'FAIL'} trainplan export {plan_file} --to {target}")
                failures += proc.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

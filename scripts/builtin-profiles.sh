#!/usr/bin/env bash
# The built-in calibration profiles (calibration/profiles/*.json) are trainplan calibrate's
# output on the measurements kept in calibration/data/<name>/, made by this one command and
# never edited by hand (calibration/profiles/README.md).
#
#   scripts/builtin-profiles.sh TRAINPLAN            fit every calibration/data/<name>/ into
#                                                    calibration/profiles/<name>.json
#   scripts/builtin-profiles.sh --check TRAINPLAN    fit into a temporary folder and compare with
#                                                    the committed profiles (exit 1 on any difference)
#   scripts/builtin-profiles.sh --measure TRAINPLAN NAME [--backend cpu|cuda]
#                                                    measure this machine: the calibration loop
#                                                    (tests/calibration/loop.py) keeps bench and
#                                                    set A's timelines in calibration/data/NAME
#
# A data folder holds bench.json, the measured timelines (*.timeline.json) with the plans and
# models they name, any nccl-tests logs (*.log), and measured.json (how and where they were
# measured; "catalog_gpu" keys a GPU machine's profile to a catalog GPU). The profile's date is
# the benchmark's (SOURCE_DATE_EPOCH), so the same data always give the same file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=fit
case "${1:-}" in
  --check) mode=check; shift ;;
  --measure) mode=measure; shift ;;
esac
tp=${1:?usage: builtin-profiles.sh [--check|--measure] TRAINPLAN [NAME]}
tp=$(cd "$(dirname "$tp")" && pwd)/$(basename "$tp")

if [[ $mode == measure ]]; then
  name=${2:?--measure needs a NAME for calibration/data/NAME}
  shift 2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 "$root/tests/calibration/loop.py" "$tp" "$work" --keep "$root/calibration/data/$name" "$@"
  echo "kept in calibration/data/$name; now run: scripts/builtin-profiles.sh $tp"
  exit 0
fi

out=$root/calibration/profiles
if [[ $mode == check ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
shopt -s nullglob
for dir in "$root"/calibration/data/*/; do
  name=$(basename "$dir")
  [[ -f $dir/bench.json ]] || { echo "error: $dir: no bench.json — measure with --measure" >&2; exit 1; }
  read -r epoch gpu < <(python3 - "$dir" <<'PY'
import calendar, json, os, sys, time
d = sys.argv[1]
bench = json.load(open(os.path.join(d, "bench.json")))
t = calendar.timegm(time.strptime(bench["date"], "%Y-%m-%dT%H:%M:%SZ"))
m = os.path.join(d, "measured.json")
gpu = json.load(open(m)).get("catalog_gpu", "") if os.path.exists(m) else ""
print(t, gpu or "-")
PY
)
  args=(bench.json)
  (cd "$dir" && for f in *.timeline.json *.log; do echo "$f"; done) | LC_ALL=C sort > "$out/.$name.inputs"
  while read -r f; do args+=("$f"); done < "$out/.$name.inputs"
  rm -f "$out/.$name.inputs"
  [[ $gpu != - ]] && args+=(--hardware "$gpu")
  (cd "$dir" && SOURCE_DATE_EPOCH=$epoch "$tp" calibrate "${args[@]}" -o "$out/$name.json" --no-history > /dev/null)
  echo "calibration/profiles/$name.json <- calibration/data/$name (${#args[@]} inputs)"
done

if [[ $mode == check ]]; then
  python3 - "$out" "$root/calibration/profiles" <<'PY'
import json, math, os, sys
made, committed = sys.argv[1], sys.argv[2]
def same(a, b, path):
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)
        return [] if ok else [f"{path}: made {a}, committed {b}"]
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in one" for k in set(a) ^ set(b)]
        for k in set(a) & set(b): out += same(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b): return [f"{path}: {len(a)} vs {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}/{i}")]
    return [] if a == b else [f"{path}: made {a!r}, committed {b!r}"]
names = lambda d: sorted(f for f in os.listdir(d) if f.endswith(".json"))
bad = []
if names(made) != names(committed):
    bad.append(f"profiles made {names(made)}, committed {names(committed)}")
for f in set(names(made)) & set(names(committed)):
    bad += [f"{f}: {d}" for d in same(json.load(open(os.path.join(made, f))), json.load(open(os.path.join(committed, f))), "")]
for b in bad: print("differs:", b)
if bad:
    print("the committed built-in profiles are not calibrate's output on calibration/data: run scripts/builtin-profiles.sh BUILD/trainplan")
    sys.exit(1)
print(f"{len(names(made))} built-in profile(s) equal calibrate's output on calibration/data")
PY
fi

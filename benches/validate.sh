#!/usr/bin/env bash
# Scores the predictions against the development set of published runs and keeps the report:
#   benches/validate.sh [published-results.json]
# writes benches/results/validation-<YYYY-MM-DD>.json (another file F: validation-<date>-<F's name>.json): `trainplan validate --json` plus the date,
# CPU model, core count, load average and commit (the accuracy figures do not depend on the
# machine; the context says which build produced them). Build first (./setup.sh); another build
# folder: TRAINPLAN_BUILD_DIR=build-x benches/validate.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:-../shared/validation/published-results.json}
bin=${TRAINPLAN_BUILD_DIR:-build}/trainplan
[[ -x $bin ]] || { echo "error: $bin not built — run ./setup.sh first" >&2; exit 1; }
date=$(date +%F)
name=validation-${date}
# Another file than the shared development set: its name in the result's.
[[ $file == ../shared/validation/published-results.json ]] || name=${name}-$(basename "$file" .json)
out=benches/results/${name}.json
for suffix in b c d e f g h i j k; do  # a later run the same day: <date>b, c, ...
  [[ -e $out ]] || break
  out=benches/results/${name}${suffix}.json
done
[[ -e $out ]] && { echo "error: $out exists (ten results today already); move some aside" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$bin" validate "$file" --json "$tmp" > /dev/null
python3 - "$tmp" "$out" "$date" "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$file" <<'PY'
import json, sys
src, out, date, cpu, cores, load, commit, file = sys.argv[1:]
report = json.load(open(src))
report["context"] = {"date": date, "cpu_model": cpu, "cores": int(cores), "load_average_at_start": load, "git_commit": commit,
                     "command": f"trainplan validate {file} --json"}
json.dump(report, open(out, "w"), indent=1)
PY
echo "wrote $out"

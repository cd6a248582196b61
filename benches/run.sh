#!/usr/bin/env bash
# Runs one benchmark binary for real and keeps its JSON result with the date and machine:
#   benches/run.sh planner [extra google-benchmark flags]
# writes benches/results/<lib>-<YYYY-MM-DD>.json (then <date>b, c, ... on the same day). Build
# first (./setup.sh); another build folder: TRAINPLAN_BUILD_DIR=build-x benches/run.sh planner.
#   benches/run.sh startup [--runs N] [--plan-runs M]
# measures the trainplan command's start-up (benches/startup.py: `--version`, `catalog` and
# the README's planning job; wall time and peak RSS) into benches/results/startup-<date>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$1; shift
if [[ $lib == startup ]]; then
  bin=${TRAINPLAN_BUILD_DIR:-build}/trainplan
  [[ -x $bin ]] || { echo "error: $bin not built — run ./setup.sh first" >&2; exit 1; }
  exec python3 benches/startup.py --out "benches/results/startup-$(date +%F).json" "$@" "trainplan=$bin"
fi
bin=${TRAINPLAN_BUILD_DIR:-build}/benches/trainplan_bench_${lib}
[[ -x $bin ]] || { echo "error: $bin not built — run ./setup.sh first" >&2; exit 1; }
date=$(date +%F)
out=benches/results/${lib}-${date}.json
# A second run on the same day gets the next letter (…-<date>b.json), never overwriting one kept.
for suffix in b c d e f g h i j k; do
  [[ -e $out ]] || break
  out=benches/results/${lib}-${date}${suffix}.json
done
[[ -e $out ]] && { echo "error: $out exists (ten results today already); move some aside" >&2; exit 1; }
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
"$bin" --benchmark_out="$out" --benchmark_out_format=json \
  --benchmark_context=cpu_model="$cpu" \
  --benchmark_context=cores="$(nproc)" \
  --benchmark_context=load_average_at_start="$(cut -d' ' -f1-3 /proc/loadavg)" \
  --benchmark_context=git_commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$@"
echo "wrote $out"

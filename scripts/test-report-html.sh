#!/usr/bin/env bash
# The browser test of `trainplan report` (a CTest test): writes the report of a small search
# into OUT_DIR and checks its HTML with check-html.sh (skipped, exit 77, without chromium).
#   scripts/test-report-html.sh path/to/trainplan OUT_DIR
set -euo pipefail
trainplan=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 &&
   ! command -v google-chrome >/dev/null 2>&1; then
  echo "SKIP: chromium is not installed; install it with 'apt-get install -y --no-install-recommends chromium' (.ci/run does)"
  exit 77
fi
TRAINPLAN_NO_PROGRESS=1 "$trainplan" report --model gpt2-124m --tokens 1e9 --instances p3.8xlarge,g4dn.12xlarge \
  --max-gpus 16 --spot-runs 200 --seed 1 --format html -o "$out/report"
# Cost-time, throughput, efficiency, breakdown, memory, Gantt, 2 purchase-option bars, 2 histograms, checkpoint interval.
"$here/check-html.sh" "$out/report.html" "$out/report.png" 11

#!/usr/bin/env bash
# Renders an HTML report in headless chromium and checks the result:
#   scripts/check-html.sh report.html out.png [MIN_CHARTS]
# - a 1400x6000 screenshot (out.png) that is not blank;
# - the DOM chromium built: at least MIN_CHARTS (default 1) non-empty <svg class="chart">, no
#   <script>, nothing fetched from elsewhere;
# - no console message in the browser log (malformed SVG attributes and failed loads show there).
# Exits 77 (CTest's skip code) when chromium is not installed.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 REPORT.html SCREENSHOT.png [MIN_CHARTS]" >&2
  exit 2
fi
html=$(realpath "$1")
png=$(realpath -m "$2")
min_charts=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    browser=$b
    break
  fi
done
if [[ -z $browser ]]; then
  echo "SKIP: chromium is not installed; install it with 'apt-get install -y --no-install-recommends chromium' (.ci/run does)"
  exit 77
fi
[[ -f $html ]] || { echo "FAIL: no such file: $html"; exit 1; }

# A private profile per run: parallel runs do not share (or lock) one.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(--headless --disable-gpu --no-sandbox --hide-scrollbars --no-first-run --user-data-dir="$work/profile")

rm -f "$png"
timeout 120 "$browser" "${flags[@]}" --screenshot="$png" --window-size=1400,6000 "file://$html" >"$work/shot.log" 2>&1 || true
if [[ ! -s $png ]]; then
  echo "FAIL: chromium wrote no screenshot; its output:"
  cat "$work/shot.log"
  exit 1
fi
timeout 120 "$browser" "${flags[@]}" --enable-logging=stderr --v=0 --dump-dom "file://$html" >"$work/dom.html" 2>"$work/console.log" || true
if [[ ! -s $work/dom.html ]]; then
  echo "FAIL: chromium dumped no DOM; its output:"
  cat "$work/console.log"
  exit 1
fi
python3 "$here/check_html_render.py" "$png" "$work/dom.html" "$work/console.log" --min-charts "$min_charts"
echo "ok: $html renders in $($browser --version 2>/dev/null | head -1); screenshot $png"

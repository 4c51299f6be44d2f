#!/usr/bin/env bash
# Reads, converts and verifies every pair of bundled nnScaler plans
# (resources/nnscaler-plans/expected.json) and prints a Markdown table for docs/benchmarks.md:
# ranks, the mapped plan's size, the wall time and peak memory of `convert` (reading both
# pickles and mapping them) and of `verify --logical --parallel` (reading, mapping and proving),
# and the verdict. A filter argument keeps the pairs whose parallel plan's name contains it.
# Usage: bash bench/nnscaler_benchmarks.sh [FILTER] [JOBS]   (needs a built tree and python3)
set -euo pipefail
cd "$(dirname "$0")/.."
tv=./build/app/trainverify
filter=${1:-}
jobs=${2:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
dir=resources/nnscaler-plans
echo "| parallel plan | ranks | parallel ops | stages | convert s | convert MiB | verify s | verify MiB | verdict |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
python3 -c 'import json,sys; [print(p["logical"], p["parallel"]) for p in json.load(open(sys.argv[1]))["pairs"]]' "$dir/expected.json" |
while read -r logical parallel; do
  case "$parallel" in *"$filter"*) ;; *) continue ;; esac
  l="$dir/$logical.pkl"; p="$dir/$parallel.pkl"
  /usr/bin/time -f "%e %M" -o "$out/ct" "$tv" convert --logical "$l" --parallel "$p" -o "$out/plan.json" 2> "$out/cerr" || true
  /usr/bin/time -f "%e %M" -o "$out/vt" "$tv" verify --logical "$l" --parallel "$p" --jobs "$jobs" --json "$out/r.json" > "$out/v.txt" || true
  if [ -s "$out/plan.json" ]; then "$tv" inspect "$out/plan.json" --json > "$out/i.json"; else echo '{}' > "$out/i.json"; fi
  python3 - "$parallel" "$out" <<'PY'
import json, sys
name, out = sys.argv[1:3]
ct = open(f"{out}/ct").read().split()[-2:]
vt = open(f"{out}/vt").read().split()[-2:]
i = json.load(open(f"{out}/i.json"))
r = json.load(open(f"{out}/r.json"))
ops = i.get("parallel", {}).get("ops", "")
stages = r.get("stages", {}).get("total", "")
ranks = i.get("ranks", "")
verdict = r["verdict"].upper().replace("_", " ")
if r.get("failure"):
    verdict += f" ({r['failure']['kind']})"
print(f"| {name} | {ranks} | {ops:,} | {stages} | {float(ct[0]):.2f} | {int(ct[1]) / 1024:.0f} | {float(vt[0]):.2f} | {int(vt[1]) / 1024:.0f} | {verdict} |"
      if ops != "" else
      f"| {name} | | | {stages} | {float(ct[0]):.2f} | {int(ct[1]) / 1024:.0f} | {float(vt[0]):.2f} | {int(vt[1]) / 1024:.0f} | {verdict} |")
PY
  rm -f "$out/plan.json"
done

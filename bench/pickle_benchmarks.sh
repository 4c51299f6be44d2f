#!/usr/bin/env bash
# Reads every bundled nnScaler plan (resources/nnscaler-plans) with the safe pickle reader
# (`trainverify inspect PLAN.pkl --json`) and prints a Markdown table for docs/benchmarks.md:
# file size, objects built, wall time and peak memory of the whole command.
# Usage: bash bench/pickle_benchmarks.sh   (needs a built tree and python3)
set -euo pipefail
cd "$(dirname "$0")/.."
tv=./build/app/trainverify
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| plan | file KB | objects | classes | read s (wall, whole command) | peak MiB |"
echo "|---|---:|---:|---:|---:|---:|"
for f in resources/nnscaler-plans/*.pkl; do
  t0=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$out/mem" "$tv" inspect "$f" --json > "$out/i.json"
  t1=$(date +%s.%N)
  python3 - "$f" "$t0" "$t1" "$out/i.json" "$out/mem" <<'PY'
import json, os, sys
f, t0, t1, ins, mem = sys.argv[1:6]
p = json.load(open(ins))["pickle"]
peak = int(open(mem).read().split()[-1]) / 1024
print(f"| {os.path.basename(f)[:-4]} | {os.path.getsize(f) / 1024:,.0f} | {p['objects']:,} | {len(p['classes'])} | {float(t1) - float(t0):.2f} | {peak:.0f} |")
PY
done

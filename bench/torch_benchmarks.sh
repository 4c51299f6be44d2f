#!/usr/bin/env bash
# Verifies every bundled pair of captured PyTorch graphs (resources/torch-graphs/expected.json,
# "pairs") and prints a Markdown table for docs/benchmarks.md: ranks, the plan's size once lowered
# and related, stages, the wall time and peak memory of `verify --logical --parallel` (reading,
# lowering, inferring the lineage and proving), and the verdict.
# Usage: bash bench/torch_benchmarks.sh [JOBS]   (needs a built tree and python3)
set -euo pipefail
cd "$(dirname "$0")/.."
tv=./build/app/trainverify
jobs=${1:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
dir=resources/torch-graphs
echo "| pair | ranks | logical ops | parallel ops | stages | verify s | verify MiB | verdict |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
python3 - "$dir/expected.json" <<'PY' > "$out/pairs"
import json, sys
for p in json.load(open(sys.argv[1]))["pairs"]:
    rel = ("resources/torch-relations/" + p["relations"]) if "relations" in p else "-"
    print(p["name"].replace(" ", "_"), p["logical"], rel, " ".join(p["ranks"]))
PY
while read -r name logical relations ranks; do
  args=(--logical "$dir/$logical" --parallel)
  for r in $ranks; do args+=("$dir/$r"); done
  [ "$relations" != "-" ] && args+=(--relations "$relations")
  /usr/bin/time -f "%e %M" -o "$out/vt" "$tv" verify "${args[@]}" --jobs "$jobs" --json "$out/r.json" > "$out/v.txt" || true
  rm -f "$out/plan.json"
  "$tv" convert "${args[@]}" -o "$out/plan.json" 2> /dev/null || true
  if [ -s "$out/plan.json" ]; then "$tv" inspect "$out/plan.json" --json > "$out/i.json"; else echo '{}' > "$out/i.json"; fi
  python3 - "$name" "$out" "$(echo $ranks | wc -w)" <<'PY'
import json, sys
name, out, ranks = sys.argv[1:4]
vt = open(f"{out}/vt").read().split()[-2:]
i = json.load(open(f"{out}/i.json"))
r = json.load(open(f"{out}/r.json"))
lops = i.get("logical", {}).get("ops", "")
pops = i.get("parallel", {}).get("ops", "")
stages = r.get("stages", {}).get("total", "")
verdict = r["verdict"].upper().replace("_", " ")
if r.get("failure"):
    f = r["failure"]
    verdict += f" ({f['kind']}" + (f", {f['parallel_op']}" if f.get("parallel_op") else "") + ")"
print(f"| {name.replace('_', ' ')} | {ranks} | {lops} | {pops} | {stages} | {float(vt[0]):.2f} | {int(vt[1]) / 1024:.0f} | {verdict} |")
PY
done < "$out/pairs"

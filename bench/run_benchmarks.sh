#!/usr/bin/env bash
# Measures the verifier on the bundled examples and on generated deep-MLP plans, and prints a
# Markdown table (paste it into docs/benchmarks.md). Usage: bash bench/run_benchmarks.sh [JOBS]
# Needs a built tree (bash test.sh or cmake --build --preset dev) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}
tv=./build/app/trainverify
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
plans=()
for f in resources/examples/*.json; do plans+=("$f"); done
for cfg in "8 2 2 2 2" "32 2 2 2 2" "32 2 2 2 8" "64 4 4 4 4"; do
  set -- $cfg
  p="$out/mlp-l$1-dp$2-tp$3-pp$4-mb$5.json"
  python3 bench/make_mlp_plan.py --layers "$1" --dp "$2" --tp "$3" --pp "$4" --microbatches "$5" -o "$p" >/dev/null
  plans+=("$p")
done
echo "| plan | parallel ops | stages | unique | verdict | load s | cut s | check s (wall) | stages/s | peak MiB |"
echo "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"
for p in "${plans[@]}"; do
  ops=$("$tv" inspect "$p" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["parallel"]["ops"])')
  "$tv" verify "$p" --jobs "$jobs" --json "$out/r.json" >/dev/null || true
  python3 - "$p" "$ops" "$out/r.json" <<'PY'
import json, os, sys
path, ops, rep = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
t, s = rep["timing"], rep["stages"]
rate = s["total"] / t["check"] if t["check"] > 0 else 0
print(f"| {os.path.basename(path)} | {ops} | {s['total']} | {s.get('unique', s['total'])} | {rep['verdict']} | "
      f"{t['load']:.3f} | {t['cut']:.3f} | {t['check']:.2f} | {rate:.0f} | {rep['peak_memory_kb'] // 1024} |")
PY
done

#!/usr/bin/env bash
# Generates and verifies training-step plans with `trainverify generate` and prints a Markdown
# table (paste it into docs/benchmarks.md): generation time, file size, ops stored and written
# out, stages, unique stages, verification time and peak memory.
# Usage: bash bench/generate_benchmarks.sh [JOBS] [MATCH]   (needs a built tree and python3)
#        MATCH: run only the configurations whose text contains it (e.g. p2p)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}
match=${2:-}
tv=./build/app/trainverify
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
configs=(
  "llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2"
  "llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2 --sp"
  "gpt2 --dp 2 --tp 2 --pp 2 --microbatches 2"
  "llama3-8b --dp 512"
  "llama3-70b --dp 16 --tp 8 --pp 4 --microbatches 32"
  "llama3-405b --dp 64 --tp 8 --pp 16 --microbatches 16"
  "deepseek-v2-lite --dp 16 --tp 4 --pp 2 --microbatches 16 --ep 4"
  "deepseek-v2 --dp 16 --tp 8 --pp 4 --microbatches 16 --ep 8"
  "deepseek-v3 --dp 32 --tp 8 --pp 8 --microbatches 16 --ep 8"
  "deepseek-v3 --dp 16 --ep 8 --pp 16 --zero 1 --microbatches 16"
  "deepseek-v2-lite --dp 16 --tp 2 --ep 8 --etp 2 --pp 2 --zero 2 --microbatches 16"
  "deepseek-v3 --layout deepseek-v3-as-trained"
  "llama3-8b --dp 2 --cp 2 --pp 2 --microbatches 2"
  "llama3-70b --dp 16 --cp 8 --pp 4 --microbatches 32"
  "llama3-70b --dp 16 --tp 8 --cp 2 --pp 4 --microbatches 32"
  "llama3-8b --dp 2 --cp 2 --pp 2 --microbatches 2 --cp-comm p2p"
  "llama3-70b --dp 16 --cp 8 --pp 4 --microbatches 32 --cp-comm p2p"
  "llama3-405b --dp 4 --tp 8 --cp 16 --pp 16"
)
echo "| configuration | generate s | file MB | parallel ops stored | written out | stages | unique | tying lanes | verdict | verify s (wall) | of which load s | peak MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
for cfg in "${configs[@]}"; do
  [[ -n "$match" && "$cfg" != *"$match"* ]] && continue
  set -- $cfg
  model=$1; shift
  p="$out/plan.json"
  t0=$(date +%s.%N)
  "$tv" generate --model "$model" "$@" -o "$p" 2>/dev/null
  t1=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$out/mem" "$tv" verify "$p" --jobs "$jobs" --json "$out/r.json" >/dev/null || true
  "$tv" inspect "$p" --json > "$out/i.json"
  python3 - "$model $*" "$t0" "$t1" "$p" "$out/r.json" "$out/i.json" "$out/mem" <<'PY'
import json, os, sys
cfg, t0, t1, path, rep, ins, mem = sys.argv[1:8]
r, i = json.load(open(rep)), json.load(open(ins))
t, s = r["timing"], r["stages"]
stored = i.get("stored", {}).get("parallel_ops", i["parallel"]["ops"])
peak = int(open(mem).read().split()[-1]) // 1024
print(f"| {cfg} | {float(t1) - float(t0):.1f} | {os.path.getsize(path) / 1e6:.1f} | {stored:,} | {i['parallel']['ops']:,} | "
      f"{s['total']:,} | {s.get('unique', s['total'])} | {s.get('written_out', 0):,} | {r['verdict']} | {t['total']:.1f} | {t['load']:.1f} | {peak:,} |")
PY
done

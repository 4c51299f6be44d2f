#!/usr/bin/env bash
# Verifies every parallel nnScaler plan of a directory against its single-device plan and prints
# one line per pair (a Markdown table): the verdict, the finding (the failure's kind and first
# line), the wall time and the peak resident memory of `trainverify verify --logical --parallel`.
#
# A parallel plan is a `.pkl` whose name holds `dpA_ppB_tpC_nmD` with any of them above 1; its
# single-device plan is the same name with `dp1_pp1_tp1_nm1` there (nnScaler's artifact names its
# plans so). A parallel plan without one is listed as such.
#
# Usage: bash bench/nnscaler_sweep.sh [DIR] [JOBS] [TIMEOUT_S] [MEMORY_MIB]
#   DIR         default resources/nnscaler-plans
#   JOBS        solver processes per pair (default 2)
#   TIMEOUT_S   each pair's time budget, `verify --timeout` (default 150): past it INCONCLUSIVE
#   MEMORY_MIB  what each process may allocate, `verify --memory` (default 6144): past it
#               INCONCLUSIVE (out of memory), never a kill
# Needs a built tree (preset dev) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
tv=./build/app/trainverify
dir=${1:-resources/nnscaler-plans}
jobs=${2:-2}
timeout=${3:-150}
memory=${4:-6144}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -x "$tv" ] || { echo "nnscaler_sweep: build first (cmake --preset dev && cmake --build --preset dev)" >&2; exit 2; }
[ -d "$dir" ] || { echo "nnscaler_sweep: no such directory: $dir" >&2; exit 2; }
echo "| parallel plan | verdict | finding | verify s | verify MiB |"
echo "|---|---|---|---:|---:|"
for p in $(ls "$dir"/*.pkl 2>/dev/null | sort); do
  name=$(basename "$p" .pkl)
  # Parallel plans only: some of dp, pp, tp, nm above 1.
  if ! [[ "$name" =~ _dp([0-9]+)_pp([0-9]+)_tp([0-9]+)_nm([0-9]+)_ ]]; then continue; fi
  if [ "${BASH_REMATCH[1]}${BASH_REMATCH[2]}${BASH_REMATCH[3]}${BASH_REMATCH[4]}" = "1111" ]; then continue; fi
  logical="$dir/$(sed -E 's/_dp[0-9]+_pp[0-9]+_tp[0-9]+_nm[0-9]+_/_dp1_pp1_tp1_nm1_/' <<<"$name").pkl"
  if [ ! -f "$logical" ]; then
    echo "| $name | (no single-device plan) | $(basename "$logical") is not in $dir | | |"
    continue
  fi
  rm -f "$out/r.json"
  /usr/bin/time -f "%e %M" -o "$out/vt" "$tv" verify --logical "$logical" --parallel "$p" --jobs "$jobs" \
    --timeout "$timeout" --memory "$memory" --json "$out/r.json" > "$out/v.txt" 2> "$out/v.err" || true
  python3 - "$name" "$out" <<'PY'
import json, os, sys
name, out = sys.argv[1:3]
vt = open(f"{out}/vt").read().split()
secs, kib = (vt[-2], vt[-1]) if len(vt) >= 2 else ("0", "0")
if not os.path.exists(f"{out}/r.json") or os.path.getsize(f"{out}/r.json") == 0:
    # No report: the process died (the line says how), which the sweep exists to find.
    first = (open(f"{out}/v.txt").read() + open(f"{out}/v.err").read()).strip().splitlines()
    print(f"| {name} | NO REPORT | {(first[-1] if first else 'killed').replace('|', '/')[:160]} | {float(secs):.1f} | {int(kib) // 1024} |")
    sys.exit(0)
r = json.load(open(f"{out}/r.json"))
verdict = r.get("verdict", "?").upper().replace("_", " ")
f = r.get("failure") or {}
finding = ""
if f:
    msg = (f.get("message") or "").splitlines()
    finding = f"{f.get('kind', '')}: {msg[0] if msg else ''}"
    if f.get("parallel_op"):
        finding += f" (at {f['parallel_op']})"
print(f"| {name} | {verdict} | {finding.replace('|', '/')[:240]} | {float(secs):.1f} | {int(kib) // 1024} |")
PY
done

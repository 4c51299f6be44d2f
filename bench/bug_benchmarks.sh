#!/usr/bin/env bash
# The bug lab benchmark: applies every catalog entry (trainverify mutate --list) to the 32-layer
# Llama3-8B dp2 tp2 pp2 nm2 plan, or, for the entries that need a strategy that plan lacks, to
# the first of a few smaller plans that has it (sequence, context and expert parallelism, ZeRO),
# verifies each mutant, and prints a Markdown table for docs/benchmarks.md: the bug, the plan,
# where it was injected, whether it was detected, the diagnosis and where it points, whether that
# location is correct (the edited op and rank, or where its broken dataflow first lands), and the
# time: mutate (writing the mutant) and verify (proving it) inside the process, and the whole
# `trainverify mutate PLAN --bug B -o M.json --verify` run including reading the plan.
# Usage: bash bench/bug_benchmarks.sh [JOBS] [FILTER]   (needs a built tree and python3)
set -euo pipefail
cd "$(dirname "$0")/.."
tv=./build/app/trainverify
jobs=${1:-2}
filter=${2:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

gen() {  # gen NAME ARGS...: a plan, generated once
  local name=$1; shift
  "$tv" generate "$@" -o "$out/$name.json" 2> /dev/null
}
gen llama3-8b-dp2-tp2-pp2-nm2 --model llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2
gen llama3-8b-l2-tp2-pp2-nm2-sp --model llama3-8b --layers 2 --tp 2 --pp 2 --microbatches 2 --sp
gen llama3-8b-l2-dp2-cp2 --model llama3-8b --layers 2 --dp 2 --cp 2
gen llama3-8b-l2-dp2-zero1 --model llama3-8b --layers 2 --dp 2 --zero 1
gen deepseek-l2-dp2-tp2-ep2 --model deepseek --layers 2 --dp 2 --tp 2 --ep 2
gen deepseek-l2-tp2-ep2-sp --model deepseek --layers 2 --tp 2 --ep 2 --sp
plans="llama3-8b-dp2-tp2-pp2-nm2 llama3-8b-l2-tp2-pp2-nm2-sp deepseek-l2-dp2-tp2-ep2 deepseek-l2-tp2-ep2-sp llama3-8b-l2-dp2-cp2 llama3-8b-l2-dp2-zero1"

echo "| bug | paper | plan | injected at | detected | diagnosis | reported at (rank) | location correct | mutate s | verify s | whole run s |"
echo "|---|---:|---|---|---|---|---|---|---:|---:|---:|"
"$tv" mutate --list --json - > "$out/catalog.json"
python3 -c 'import json,sys; [print(k["name"], k["paper_case"] or "") for k in json.load(open(sys.argv[1]))]' "$out/catalog.json" |
while read -r bug paper; do
  case "$bug" in *"$filter"*) ;; *) continue ;; esac
  done_one=0
  for plan in $plans; do
    rc=0
    /usr/bin/time -f "%e" -o "$out/t" "$tv" mutate "$out/$plan.json" --bug "$bug" -o "$out/m.json" --verify --jobs "$jobs" --json "$out/r.json" \
      > /dev/null 2> "$out/err" || rc=$?
    if [ "$rc" = 3 ] && grep -q "does not apply" "$out/err"; then continue; fi
    python3 - "$bug" "$paper" "$plan" "$out" "$rc" <<'PY'
import json, sys
bug, paper, plan, out, rc = sys.argv[1:6]
whole = float(open(f"{out}/t").read().split()[-1])
try:
    r = json.load(open(f"{out}/r.json"))
except Exception:
    err = open(f"{out}/err").read().strip().splitlines()
    print(f"| {bug} | {paper} | {plan} | | ERROR (exit {rc}) | {err[-1] if err else ''} | | | | | {whole:.2f} |")
    sys.exit(0)
rep = r["report"]
f = rep.get("failure") or {}
detected = "yes" if rep["verdict"] in ("not_equivalent", "invalid") else "NO: " + rep["verdict"]
kind = f.get("kind", "")
if rep["verdict"] == "invalid":
    kind = "invalid: " + kind
where = f.get("parallel_op") or f.get("parallel_tensor") or ""
if rep["verdict"] == "invalid":
    where = ", ".join(r["site"])
elif f.get("rank") is not None and f.get("rank", -1) >= 0:
    where += f" ({f['rank']})"
site = r["site"][0] + (f" +{len(r['site']) - 1}" if len(r["site"]) > 1 else "") + (" (written out)" if r["written_out"] else "")
print(f"| {bug} | {paper} | {plan} | {site} | {detected} | {kind} | {where} | {'yes' if r['caught'] else 'NO'} | "
      f"{r['mutate_seconds']:.2f} | {r['verify_seconds']:.2f} | {whole:.2f} |")
PY
    done_one=1
    break
  done
  if [ "$done_one" = 0 ]; then echo "| $bug | $paper | (no plan has a site) | | | | | | | | |"; fi
done

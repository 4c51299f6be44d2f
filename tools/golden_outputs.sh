#!/usr/bin/env bash
# Writes what the command line produces on the bundled examples, the paper configurations and the
# nnScaler plans into one directory, with times and memory taken out, so that a change that should
# not change behaviour (a refactor) can be checked byte for byte:
#
#   bash tools/golden_outputs.sh /tmp/before      # on the old code
#   bash tools/golden_outputs.sh /tmp/after       # on the new code
#   diff -r /tmp/before /tmp/after                # must print nothing
#
# Generated plans are compared whole (sha256), reports as JSON with every time, memory figure and
# job count removed, HTML reports with their times masked. Run from the source tree after building
# (preset dev); needs python3. Takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/golden_outputs.sh OUTDIR}
tv=./build/app/trainverify
rm -rf "$out"
mkdir -p "$out"/{generate,verify,html,inspect,mutate,convert}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Drops what differs from run to run: times, memory, the job count.
strip_json() {
  python3 -c '
import json, re, sys
volatile = re.compile(r"(seconds|timing|peak_memory_kb|^jobs$|elapsed|budget_used)")
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if not volatile.search(k)}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
text = open(sys.argv[1]).read().replace(sys.argv[2], "TMP")
json.dump(clean(json.loads(text)), sys.stdout, indent=1, sort_keys=True)
print()' "$1" "$tmp"
}
mask_times() { sed -E "s#$tmp#TMP#g" "$1" | sed -E 's#<td>[0-9]+\.[0-9]+</td>#<td>T</td>#g' | sed -E 's/[0-9]+(\.[0-9]+)? (s|ms|MB|MiB|KB)\b/T \2/g; s/[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:]+/DATE/g'; }

for ex in resources/examples/*.json; do
  name=$(basename "$ex" .json)
  "$tv" verify "$ex" --json "$tmp/r.json" --html "$tmp/r.html" > "$tmp/r.txt" 2>&1 || echo "exit $?" >> "$tmp/r.txt"
  strip_json "$tmp/r.json" > "$out/verify/$name.json"
  mask_times "$tmp/r.html" > "$out/html/$name.html"
  mask_times "$tmp/r.txt" > "$out/verify/$name.txt"
  "$tv" inspect "$ex" --json > "$out/inspect/$name.json" 2>&1 || echo "exit $?" >> "$out/inspect/$name.json"
done

configs=(
  "llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2"
  "llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2 --sp"
  "llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2 --format 1"
  "llama3-8b --dp 2 --tp 2 --pp 2 --microbatches 2 --format 2"
  "gpt2 --dp 2 --tp 2 --pp 2 --microbatches 2"
  "llama3-8b --dp 512"
  "llama3-70b --dp 16 --tp 8 --pp 4 --microbatches 32"
  "llama3-405b --dp 64 --tp 8 --pp 16 --microbatches 16"
  "deepseek-v2-lite --dp 16 --tp 4 --pp 2 --microbatches 16 --ep 4"
  "deepseek-v2 --dp 16 --tp 8 --pp 4 --microbatches 16 --ep 8"
  "deepseek-v3 --dp 32 --tp 8 --pp 8 --microbatches 16 --ep 8"
  "llama3-8b --dp 2 --cp 2 --pp 2 --microbatches 2"
  "llama3-70b --dp 16 --cp 8 --pp 4 --microbatches 32"
  "llama3-70b --dp 16 --tp 8 --cp 2 --pp 4 --microbatches 32"
  "llama3-8b --dp 2 --cp 2 --pp 2 --microbatches 2 --cp-comm p2p"
  "llama3-70b --dp 16 --cp 8 --pp 4 --microbatches 32 --cp-comm p2p"
  "mlp --dp 2 --zero 1 --format 2"
  "mlp --dp 2 --zero 3 --clip-grad 1.0 --optimizer adamw"
)
for cfg in "${configs[@]}"; do
  name=$(echo "$cfg" | tr ' ' '_' | tr -d '-')
  # shellcheck disable=SC2086
  "$tv" generate --model $cfg -o "$tmp/p.json" > /dev/null 2>&1 || echo "exit $?" > "$out/generate/$name.error"
  [[ -f "$tmp/p.json" ]] && sha256sum < "$tmp/p.json" > "$out/generate/$name.sha256"
  rm -f "$tmp/p.json"
done
# The small ones verified too (the verdict and every stage's result, not only the file).
for cfg in "gpt2 --dp 2 --tp 2 --pp 2 --microbatches 2" "llama3-8b --dp 2 --cp 2 --pp 2 --microbatches 2 --cp-comm p2p"; do
  name=$(echo "$cfg" | tr ' ' '_' | tr -d '-')
  # shellcheck disable=SC2086
  "$tv" generate --model $cfg -o "$tmp/p.json" > /dev/null 2>&1
  "$tv" verify "$tmp/p.json" --json "$tmp/r.json" > /dev/null 2>&1 || true
  strip_json "$tmp/r.json" > "$out/verify/generated-$name.json"
done

# The bug lab: every bug of the catalog on a small Llama plan: the mutant document and the verdict.
"$tv" generate --model llama3 --layers 2 --dp 2 --tp 2 --pp 2 --microbatches 2 --sp -o "$tmp/bugs.json" > /dev/null 2>&1
for bug in $("$tv" mutate --list | awk '{print $1}'); do
  ex="$tmp/bugs.json"
  if "$tv" mutate "$ex" --bug "$bug" -o "$tmp/m.json" > "$out/mutate/$bug.txt" 2>&1; then
    sha256sum < "$tmp/m.json" >> "$out/mutate/$bug.txt"
    "$tv" mutate "$ex" --bug "$bug" --verify --json "$tmp/mj.json" > /dev/null 2>&1 || true
    strip_json "$tmp/mj.json" > "$out/mutate/$bug.json"
  fi
  mask_times "$out/mutate/$bug.txt" > "$tmp/t" && mv "$tmp/t" "$out/mutate/$bug.txt"
done
"$tv" mutate --list > "$out/mutate/list.txt"

# nnScaler: every pair of the bundled plans that convert (logical dp1 pp1 tp1 with each parallel one).
plans=../shared/nnscaler-plans
if [[ -d "$plans" ]]; then
  for par in "$plans"/*.pkl; do
    base=$(basename "$par" .pkl)
    prefix=${base%%_dp*}
    rest=${base#*_nm}; rest=${rest#*_}
    logical=$(ls "$plans"/"${prefix}"_dp1_pp1_tp1_nm1_"$rest".pkl 2>/dev/null || true)
    [[ -z "$logical" || "$logical" == "$par" ]] && continue
    if "$tv" convert --logical "$logical" --parallel "$par" -o "$tmp/c.json" > "$tmp/c.txt" 2>&1; then
      sha256sum < "$tmp/c.json" > "$out/convert/$base.sha256"
    fi
    mask_times "$tmp/c.txt" > "$out/convert/$base.txt"
  done
fi
echo "wrote $(find "$out" -type f | wc -l) files to $out"

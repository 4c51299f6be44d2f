#!/usr/bin/env bash
# Command 2: install what is missing, build, and run every test.
#   bash test.sh          optimised build (preset dev)
#   bash test.sh --asan   AddressSanitizer + UndefinedBehaviorSanitizer build (preset asan), every test
#   bash test.sh --asan-ci  the same build, only the suites labelled sanitizer-ci (CI's budget:
#                           tests/CMakeLists.txt says which and why)
set -euo pipefail
cd "$(dirname "$0")"
preset=dev
target=()
label=()
case "${1:-}" in
  --asan) preset=asan ;;
  --asan-ci) preset=asan; target=(--target sanitizer-ci-tests); label=(-L sanitizer-ci) ;;
  "") ;;
  *) echo "usage: bash test.sh [--asan | --asan-ci]" >&2; exit 2 ;;
esac
bash tools/install-deps.sh
export QT_QPA_PLATFORM=offscreen
start=$(date +%s)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" ${target[@]+"${target[@]}"}
built=$(date +%s)
log=$([ "$preset" = asan ] && echo build-asan || echo build)/ctest-times.log
status=0
ctest --preset "$preset" ${label[@]+"${label[@]}"} 2>&1 | tee "$log" || status=$?
# The time of each suite, slowest first, and of the whole command.
echo "suite times ($preset), slowest first:"
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([A-Za-z0-9_]+) .* ([0-9.]+) sec$/\2 s  \1/p' "$log" | sort -rn | sed 's/^/  /'
echo "$preset: build $((built - start)) s, tests $(($(date +%s) - built)) s"
exit "$status"

#!/usr/bin/env bash
# Command 1: install what is missing, build, and verify the bundled default example plan.
set -euo pipefail
cd "$(dirname "$0")"
bash tools/install-deps.sh
cmake --preset dev >/dev/null
cmake --build --preset dev
plan=${1:-resources/examples/mlp-tp2.json}
echo "== trainverify verify $plan"
status=0
./build/app/trainverify verify "$plan" --stats || status=$?
echo "== exit code $status (0 equivalent, 1 not equivalent, 2 inconclusive, 3 invalid)"
echo "   try a buggy twin: bash run.sh resources/examples/mlp-tp2-missing-allreduce.json"
exit "$status"

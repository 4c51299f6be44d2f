#!/usr/bin/env bash
# Command 2: install what is missing, build, and run every test.
#   bash test.sh          optimised build (preset dev)
#   bash test.sh --asan   AddressSanitizer + UndefinedBehaviorSanitizer build (preset asan)
set -euo pipefail
cd "$(dirname "$0")"
preset=dev
[ "${1:-}" = "--asan" ] && preset=asan
bash tools/install-deps.sh
export QT_QPA_PLATFORM=offscreen
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset"

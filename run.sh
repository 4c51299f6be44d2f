#!/usr/bin/env bash
# Command 1: install what is missing, build, and open the Studio on the bundled default example.
#   bash run.sh [PLAN.json]
# With no display (no DISPLAY or WAYLAND_DISPLAY), says so, verifies the plan with the command
# line instead and saves a picture of the Studio (rendered offscreen) to studio.png.
set -euo pipefail
cd "$(dirname "$0")"
bash tools/install-deps.sh
cmake --preset dev >/dev/null
cmake --build --preset dev
plan=${1:-resources/examples/mlp-tp2.json}
if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
  exec ./build/app/trainverify-studio "$plan"
fi
echo "== No display found (DISPLAY and WAYLAND_DISPLAY are unset), so the Studio cannot open a window here."
echo "   On a desktop: ./build/app/trainverify-studio $plan   (or under Xvfb: xvfb-run -a ./build/app/trainverify-studio $plan)"
echo "== Verifying $plan with the command line instead:"
status=0
./build/app/trainverify verify "$plan" --stats || status=$?
QT_QPA_PLATFORM=offscreen ./build/app/trainverify-studio "$plan" --verify --screenshot studio.png 2>/dev/null \
  && echo "== Saved a picture of the Studio on this plan, verified, to studio.png (rendered offscreen)."
echo "== exit code $status (0 equivalent, 1 not equivalent, 2 inconclusive, 3 invalid)"
exit "$status"

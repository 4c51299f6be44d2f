#!/usr/bin/env bash
# Builds the pickle reader's libFuzzer target with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer) and fuzzes it. New inputs that reach new code go to the working
# corpus (build-fuzz/corpus, seeded from tests/fuzz/pickle-corpus); crashes to build-fuzz/.
# Inputs worth keeping as regression cases are copied into tests/fuzz/pickle-corpus, which
# tst_pickle replays on every test run.
# Usage: bash tests/fuzz/run_pickle_fuzzer.sh [SECONDS]   (default 3600; needs clang and libFuzzer:
#        apt-get install clang)
# FUZZ_TIMEOUT (seconds per input, default 10) may be raised when the run shares the machine
# (e.g. `nice -n 19` beside a build): a starved process would otherwise report CPU starvation
# as a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-3600}
timeout=${FUZZ_TIMEOUT:-10}
out=build-fuzz
mkdir -p "$out/corpus"
clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Icore tests/fuzz/pickle_fuzzer.cpp core/pickle/pickle.cpp -o "$out/pickle_fuzzer"
cp -n tests/fuzz/pickle-corpus/* "$out/corpus/" 2>/dev/null || true
"$out/pickle_fuzzer" "$out/corpus" -max_total_time="$seconds" -max_len=65536 -timeout="$timeout" -rss_limit_mb=2048 \
  -dict=tests/fuzz/pickle.dict -artifact_prefix="$out/" -print_final_stats=1

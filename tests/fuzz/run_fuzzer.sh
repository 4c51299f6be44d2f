#!/usr/bin/env bash
# Builds one of the libFuzzer targets with clang (AddressSanitizer and UndefinedBehaviorSanitizer)
# and fuzzes it:
#   pickle  the safe pickle reader (tests/fuzz/pickle_fuzzer.cpp)
#   plan    the plan JSON reader and what runs on a plan once read (tests/fuzz/plan_fuzzer.cpp;
#           the core library is built instrumented in build-fuzz/core-build)
# New inputs that reach new code go to the working corpus (build-fuzz/TARGET-corpus, seeded from
# tests/fuzz/TARGET-corpus); crashes, timeouts and leaks to build-fuzz/TARGET-*. Inputs worth
# keeping as regression cases are copied into tests/fuzz/TARGET-corpus, which the test suite
# replays on every run (tst_pickle, tst_plan_io).
# Usage: bash tests/fuzz/run_fuzzer.sh pickle|plan [SECONDS]   (default 3600; needs clang:
#        apt-get install clang)
# FUZZ_TIMEOUT (seconds per input, default 10 for pickle, 30 for plan) may be raised when the run
# shares the machine (e.g. `nice -n 19` beside a build): a starved process would otherwise report
# CPU starvation as a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: run_fuzzer.sh pickle|plan [SECONDS]}
seconds=${2:-3600}
out=build-fuzz
mkdir -p "$out/$target-corpus"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
case "$target" in
  pickle)
    timeout=${FUZZ_TIMEOUT:-10}
    clang++ "${flags[@]}" -Icore tests/fuzz/pickle_fuzzer.cpp core/pickle/pickle.cpp -o "$out/pickle_fuzzer"
    extra=(-max_len=65536 -rss_limit_mb=2048)
    ;;
  plan)
    timeout=${FUZZ_TIMEOUT:-30}
    # The core library, instrumented for coverage and the sanitizers (only the library is built).
    cmake -S . -B "$out/core-build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTV_BUILD_TESTS=OFF \
      -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS="-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
    cmake --build "$out/core-build" --target tvcore
    clang++ "${flags[@]}" -Icore -DTV_VERSION='"fuzz"' tests/fuzz/plan_fuzzer.cpp "$out/core-build/core/libtvcore.a" \
      $(pkg-config --libs z3 libgvc libcgraph) -lpthread -o "$out/plan_fuzzer"
    # A plan may be read into up to the repeats' bound (1 GiB of entries): more than that is a finding.
    extra=(-max_len=262144 -rss_limit_mb=4096)
    ;;
  *) echo "unknown fuzz target $target (pickle or plan)" >&2; exit 2 ;;
esac
cp -n tests/fuzz/"$target"-corpus/* "$out/$target-corpus/" 2>/dev/null || true
"$out/${target}_fuzzer" "$out/$target-corpus" -max_total_time="$seconds" -timeout="$timeout" "${extra[@]}" \
  -dict=tests/fuzz/"$target".dict -artifact_prefix="$out/$target-" -print_final_stats=1

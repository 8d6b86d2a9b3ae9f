#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.cpp) with clang and runs each for a bounded
# time on a copy of its seed corpus. Independent of CTest.
# Usage: tools/fuzz.sh [seconds-per-target (default 60)] [build-dir (default build-fuzz)]
# Env: FUZZ_TARGETS="fuzz_filters fuzz_config" to run only some; FUZZ_JOBS=N parallel targets.
# Exit status: non-zero when a target crashed (its reproducer is kept under BUILD/fuzz-out/).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
BUILD=${2:-build-fuzz}
# The project's code is instrumented for coverage (fuzzer-no-link) and ASan+UBSan, so the fuzzer
# is guided by the decoders' and parsers' branches, not only by the target's own.
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DH5D_FUZZ=ON -DH5D_TESTS=OFF -DH5D_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" >/dev/null
targets=${FUZZ_TARGETS:-$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')}
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $targets
out="$BUILD/fuzz-out"
mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in $targets; do
  corpus="$out/$t-corpus"
  mkdir -p "$corpus" "$out/$t-crashes"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  log="$out/$t.log"
  start=$(date +%s)
  if "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/$t-crashes/" \
      "$corpus" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -n 40 "$log"
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
  printf '%-14s %s  %4ss  executions=%s  coverage=%s  corpus=%s files  (log: %s)\n' "$t" "$result" \
    "$(( $(date +%s) - start ))" "$execs" "$cov" "$(ls "$corpus" | wc -l)" "$log"
done
exit $status

#!/usr/bin/env bash
# Sanitizer runs of the test suite (called from .ci/run after tools/test.sh):
#  1. AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer (-DH5D_SANITIZE=ON): the
#     whole suite, i.e. the Catch2 tests and the Python mount tests against the ASan-built daemon
#     (Python itself is not instrumented: it only starts the daemon and reads through the mount).
#     Leaks are checked at every process exit; tools/lsan.supp lists what libhdf5 and libfuse
#     keep for the process's life (each entry says why), never our own allocations.
#  2. ThreadSanitizer (-DH5D_TSAN=ON): the whole Catch2 binary (the [stress] test, the writer's
#     background chunk jobs, the vfs listing, the buffer pool, ...), data races and lock-order
#     inversions (potential deadlocks, detect_deadlocks=1) both fatal; tools/tsan.supp lists
#     reports inside uninstrumented libraries only.
# Usage: tools/test-sanitizers.sh [asan|tsan|all]   (build dirs: $ASAN_BUILD, $TSAN_BUILD)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
TSAN_BUILD=${TSAN_BUILD:-build-tsan}
timer() { echo "[sanitizers] $1: $(( $(date +%s) - $2 )) s"; }

if [[ $what == all || $what == asan ]]; then
  t0=$(date +%s)
  cmake -S . -B "$ASAN_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH5D_SANITIZE=ON -DH5D_BENCH=OFF >/dev/null
  cmake --build "$ASAN_BUILD" -j"$(nproc)"
  timer "ASan build" "$t0"
  t0=$(date +%s)
  mkdir -p "$ASAN_BUILD/test-tmp"
  # Daemon logs of an earlier run in the same build dir must not count for this one.
  find "$ASAN_BUILD/test-tmp" -maxdepth 1 -name '*.log' -delete
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$PWD/tools/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  H5D_SANITIZED=1 H5D_LOAD_SECONDS=${H5D_LOAD_SECONDS:-10} \
    ctest --test-dir "$ASAN_BUILD" --output-on-failure --timeout 1500
  # A sanitizer report in a daemon's log fails the run even when the test passed.
  if grep -l -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$ASAN_BUILD"/test-tmp/*.log 2>/dev/null; then
    echo "[sanitizers] sanitizer reports in daemon logs (above)"; exit 1
  fi
  timer "ASan suite" "$t0"
fi

if [[ $what == all || $what == tsan ]]; then
  t0=$(date +%s)
  cmake -S . -B "$TSAN_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH5D_TSAN=ON -DH5D_BENCH=OFF >/dev/null
  cmake --build "$TSAN_BUILD" -j"$(nproc)" --target h5direct_unit_tests
  timer "TSan build" "$t0"
  t0=$(date +%s)
  mkdir -p "$TSAN_BUILD/test-tmp"
  H5D_TEST_TMP="$PWD/$TSAN_BUILD/test-tmp" H5D_STRESS_SECONDS=${H5D_STRESS_SECONDS:-20} \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0:detect_deadlocks=1:suppressions=$PWD/tools/tsan.supp \
    "$TSAN_BUILD/tests/h5direct_unit_tests"
  timer "TSan unit tests" "$t0"
fi

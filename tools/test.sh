#!/usr/bin/env bash
# Builds h5direct and runs the whole test suite (Catch2 unit/integration tests and the Python
# mount tests) with CTest. Usage: tools/test.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
BUILD=${1:-build}
shift || true
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
bash tools/check-deps.sh "$BUILD"
mkdir -p "$BUILD/test-tmp"
ctest --test-dir "$BUILD" --output-on-failure --timeout 1200

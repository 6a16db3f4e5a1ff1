#!/usr/bin/env bash
# Builds everything and runs the whole test suite. GPU tests (CTest label gpu) skip cleanly on a
# machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"

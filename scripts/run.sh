#!/usr/bin/env bash
# The main job: builds the tool and runs skip-softmax next to dense attention on real-structure
# inputs, printing tile sparsity, skipped softmax mass and the error against dense.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSKIPSOFTMAX_BUILD_TESTS=OFF
cmake --build "$build" -j "$(nproc)" --target skipsoftmax
"$build/skipsoftmax" demo "$@"

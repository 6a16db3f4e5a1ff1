#!/usr/bin/env bash
# The main job: builds the tool and runs skip-softmax next to dense attention on real-structure
# inputs, printing tile sparsity and the error against dense: on the Hopper kernels when there is
# a GPU, on the CPU reference otherwise. Arguments go to `skipsoftmax demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
scripts/install-deps.sh
all_kernels=OFF
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then all_kernels=ON; fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSKIPSOFTMAX_BUILD_TESTS=OFF \
  -DSKIPSOFTMAX_ALL_KERNELS=$all_kernels
cmake --build "$build" -j "$(nproc)" --target skipsoftmax
"$build/skipsoftmax" demo "$@"

#!/usr/bin/env bash
# Builds everything, runs a short round of the fuzz targets, then the whole test suite and the
# Python package's tests. GPU tests (CTest label gpu, pytest's Hopper tests) skip cleanly on a
# machine without a GPU; there only the bf16 head-dim-128 kernels (dense and skip families) are
# compiled, to keep the build short, and every kernel family where a GPU can run them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
all_kernels=OFF
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then all_kernels=ON; fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSKIPSOFTMAX_ALL_KERNELS=$all_kernels
cmake --build "$build" -j "$(nproc)"
# A bounded run of the file readers' fuzz targets (scripts/fuzz.sh: 20 s a target here).
scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
# Tests on the real checkpoints run where scripts/fetch-models.sh has put them.
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] &&
  export SKIPSOFTMAX_SMOLLM2_GGUF=$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f models/gemma-3-270m-q4_k_m.gguf ]] &&
  export SKIPSOFTMAX_GEMMA3_GGUF=$PWD/models/gemma-3-270m-q4_k_m.gguf
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
# The Python package, built as pip builds it, and its tests.
scripts/test-python.sh

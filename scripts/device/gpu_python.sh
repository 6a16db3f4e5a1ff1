#!/usr/bin/env bash
# The Python package's tests on the GPU machine, with the machine's own PyTorch and transformers:
# the ops against the CPU reference (the same skip decisions), a decode step captured in a CUDA
# graph, and the transformers models on the kernels. The package runs from python/ over the
# carried library (no pip there: the machine has no network). Log: $OUT/python_tests.log.
#   scripts/device/gpu_python.sh BUILD_DIR
set -uo pipefail
b=$(realpath "${1:?BUILD_DIR}")
out=$(realpath "${OUT:?set OUT to the folder for the logs}")
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers",
  transformers.__version__, torch.cuda.get_device_name())'
SKIPSOFTMAX_LIBRARY="$b/libskipsoftmax_capi.so" PYTHONPATH="$PWD/python" \
  python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee "$out/python_tests.log"
exit "${PIPESTATUS[0]}"

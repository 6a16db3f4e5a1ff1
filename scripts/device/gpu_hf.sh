#!/usr/bin/env bash
# The Python package's measurements (bench/hf_compare.py) on the GPU machine, with its PyTorch and
# transformers and the gguf/accelerate wheels of BIN_DIR/wheels (unpacked to /tmp/pyd):
#   overhead          the ops against the bare C API (prefill 32k; decode in a CUDA graph, 1 and 64)
#   smollm2 GGUF      SmolLM2 through transformers: exactness, sparsity beside the engine's,
#                     perplexity and TTFT at 4096 and 8160 (fp16, its price list's 75% tier)
#   gemma3 GGUF       the same for Gemma 3 at 4096 and 8192 (bf16)
# JSON and logs go to $OUT.
#   scripts/device/gpu_hf.sh BIN_DIR overhead|smollm2|gemma3 [GGUF]
set -uo pipefail
b=$(realpath "${1:?BIN_DIR}")
what=${2:?overhead, smollm2 or gemma3}
out=$(realpath "${OUT:?set OUT to the folder for the results}")
[[ -d /tmp/pyd ]] || python3 -m pip install -q --no-index --no-deps --target /tmp/pyd "$b"/wheels/*.whl
export PYTHONPATH=/tmp/pyd${PYTHONPATH:+:$PYTHONPATH}
export SKIPSOFTMAX_GIT_REVISION=$(cat "$b/git_revision")
run() { python3 bench/hf_compare.py "$@" --library "$b/libskipsoftmax_capi.so" 2>&1 |
          grep -v 'it/s\]$' | tee -a "$out/hf_$what.log" | tail -8; }
text=$b/corpora/austen_4_pride_and_prejudice.txt
case $what in
  overhead) run overhead --json "$out/hf_overhead.json" ;;
  smollm2) run model --gguf "${3:?GGUF}" --price bench/baselines/ttft_smollm2.json --text "$text" \
             --lengths 4096 8160 --dtype float16 --engine "$b/skipsoftmax" --json "$out/hf_smollm2.json" ;;
  gemma3) run model --gguf "${3:?GGUF}" --price bench/baselines/ttft_gemma3.json --text "$text" \
            --lengths 4096 8192 --dtype bfloat16 --engine "$b/skipsoftmax" --json "$out/hf_gemma3.json" ;;
  *) echo "unknown: $what" >&2; exit 2 ;;
esac

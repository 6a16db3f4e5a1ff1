#!/usr/bin/env bash
# One step of the price-list session on the device machine (README, "Models on the GPU machine"),
# from binaries built on the development machine and unpacked under W: the GPU tests touched by the
# evaluation path, then per model its calibration on the GPU and its price list. Logs and results
# go to $OUT (a tarball per model, as $OUT takes few files).
#   scripts/gpu_price.sh W tests|smollm2|gemma3
# W holds .gpubin/ (tool, tests, ICU), .stage/corpora/, .stage/ck/<model>.json (the checkpoint
# configs) and models/*.gguf.
set -uo pipefail
w=$1 step=$2
out=${OUT:?}
bin=$w/.gpubin
export LD_LIBRARY_PATH=$bin/lib SKIPSOFTMAX_CORPUS_DIR=$w/.stage/corpora
smol=$w/models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=$w/models/gemma-3-270m-q4_k_m.gguf
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

checkpoint() {  # model gguf -> a checkpoint directory with the model's calibrated config
  local ck=$HOME/ckpt/$1
  mkdir -p "$ck" && ln -sf "$2" "$ck/" && cp "$w/.stage/ck/$1.json" "$ck/config.json"
  echo "$ck"
}

case $step in
  tests)
    SKIPSOFTMAX_SMOLLM2_GGUF=$smol SKIPSOFTMAX_GEMMA3_GGUF=$gemma timeout -s KILL 300 \
      "$bin/tests/skipsoftmax_gpu_engine_tests" \
      --gtest_filter='*TargetLogprobs*:*EvaluateAndGate*:*Unreachable*:*ExportRun*' \
      > "$out/engine_tests.log" 2>&1
    echo "engine tests: exit $?"
    grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure" "$out/engine_tests.log" | head -20
    timeout -s KILL 240 "$bin/tests/skipsoftmax_gpu_tests" --gtest_brief=1 \
      > "$out/gpu_tests.log" 2>&1
    echo "gpu tests: exit $?"; tail -5 "$out/gpu_tests.log"
    ;;
  smollm2 | gemma3)
    if [[ $step == smollm2 ]]; then
      gguf=$smol max_seqlen=8176 lengths="1024 2048 4096 6144 8160" acc="4096 8160"
    else
      gguf=$gemma max_seqlen=8192 lengths="1024 2048 4096 8192 16384 32736" acc="4096 8192"
    fi
    ck=$(checkpoint "$step" "$gguf")
    work=$HOME/price/$step
    rm -rf "$work" && mkdir -p "$work"
    start=$(date +%s)
    "$bin/skipsoftmax" calibrate --model-dir "$ck" --phase both --max-seqlen $max_seqlen \
      --bin-min 2048 --bin-step 2048 --samples 2 --backend cuda > "$work/calibrate.log" 2>&1
    echo "calibrate: exit $? in $(( $(date +%s) - start )) s"; tail -14 "$work/calibrate.log"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$bin/skipsoftmax" price --model-dir "$ck" --work-dir "$work" --lengths $lengths \
      --accuracy-lengths $acc > "$work/price.log" 2>&1
    echo "price: exit $? in $(( $(date +%s) - start )) s"
    tr '\r' '\n' < "$work/price.log" | grep -v "tasks [0-9]*/" | tail -40
    cp "$ck/config.json" "$work/checkpoint_config.json"
    tar czf "$out/price_$step.tgz" -C "$HOME/price" "$step"
    ;;
  *)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac

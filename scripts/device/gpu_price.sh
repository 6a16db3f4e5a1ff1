#!/usr/bin/env bash
# One step of the price-list session on the device machine (README, "Models on the GPU machine"),
# from binaries built on the development machine and unpacked under W: the GPU tests touched by the
# evaluation path, then per model its calibration on the GPU and its price list. Logs and results
# go to $OUT (a tarball per model, as $OUT takes few files).
#   [CALIBRATE=0] [SAMPLES=N] [TEXTS=N] scripts/device/gpu_price.sh W tests|logits|generate|smollm2|gemma3|hold
#   [CAL_SAMPLES=N] scripts/device/gpu_price.sh W tables-calibrate; [LENGTHS=".."] [SAMPLES=N] ... tables-check
# CALIBRATE=0 prices the checkpoint config as carried (already calibrated). `hold`: SmolLM2's
# tile sparsity per length on held-out prompts, with its 75% tables and with a flat S (the 75%
# table's first row at every length), for the sparsity-hold check of the calibration;
# RECALIBRATE_SAMPLES=N fits the prefill tables again from N prompts a bin first.
# `generate`: per model, a fixed prompt through the dense engine and a skip engine whose table
# cannot skip (the texts must be identical), and 6k tokens of a book through the dense engine and
# the calibrated 75% tiers (texts to read). `logits`: both checkpoints against transformers on 2k tokens (scripts/check_logits.py; the gguf
# wheel under W/.whl). W holds .gpubin/ (tool, tests, ICU), .stage/corpora/, .stage/ck/<model>.json (the checkpoint
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
      > "$out/engine_tests.log" 2>&1
    echo "engine tests: exit $?"
    grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|top-1" "$out/engine_tests.log" | head -40
    SKIPSOFTMAX_SMOLLM2_GGUF=$smol SKIPSOFTMAX_GEMMA3_GGUF=$gemma timeout -s KILL 240 \
      "$bin/tests/skipsoftmax_gpu_tests" --gtest_brief=1 --gtest_filter="${GPU_TESTS:-*}" \
      > "$out/gpu_tests.log" 2>&1
    echo "gpu tests: exit $?"; tail -5 "$out/gpu_tests.log"
    ;;
  logits)
    python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w"/.whl/*.whl
    for m in smollm2 gemma3; do
      gguf=$smol
      [[ $m == gemma3 ]] && gguf=$gemma
      ck=$(checkpoint "$m" "$gguf")
      PYTHONPATH=/tmp/site timeout -s KILL 300 python3 scripts/check_logits.py \
        --tool "$bin/skipsoftmax" --model-dir "$ck" --text tests/data/engine_text.txt \
        --tokens 2000 --out "$out/check_logits_$m.json" 2>&1 | tail -4
    done
    ;;
  generate)
    for m in smollm2 gemma3; do
      gguf=$smol
      [[ $m == gemma3 ]] && gguf=$gemma
      ck=$(checkpoint "$m" "$gguf")
      eng=$HOME/generate/$m && rm -rf "$eng" && mkdir -p "$eng"
      echo '[[100000, 1000.0]]' > "$eng/far_table.json"
      "$bin/skipsoftmax" export "$ck" "$eng/dense" --skip-softmax-prefill-scale-table none \
        --skip-softmax-decode-scale-table none > /dev/null
      "$bin/skipsoftmax" export "$ck" "$eng/far" --skip-softmax-prefill-scale-table \
        "$eng/far_table.json" --skip-softmax-decode-scale-table "$eng/far_table.json" > /dev/null
      "$bin/skipsoftmax" export "$ck" "$eng/tier75" --prefill-target-sparsity 75% \
        --decode-target-sparsity 75% > /dev/null
      python3 - "$eng" "$w/.stage/corpora/austen_4_pride_and_prejudice.txt" <<'PY'
import json, sys
eng, book = sys.argv[1], open(sys.argv[2]).read()
json.dump([{"prompt": "The three most important things to remember when learning to cook are",
            "max_new_tokens": 64, "id": "cook"}], open(eng + "/short.json", "w"))
start = book.index("It is a truth universally acknowledged")
json.dump([{"prompt": book[start:start + 24000], "max_new_tokens": 48, "id": "book"}],
          open(eng + "/long.json", "w"))
PY
      for run in dense:short far:short dense:long tier75:long; do
        e=${run%%:*} in=${run##*:}
        "$bin/skipsoftmax" run --engine-dir "$eng/$e" --input-file "$eng/$in.json" \
          --output-file "$out/generate_${m}_${e}_$in.json" > /dev/null
      done
      python3 - "$out" "$m" <<'PY'
import json, sys
out, m = sys.argv[1:]
r = {k: json.load(open(f"{out}/generate_{m}_{k}.json"))["requests"][0]
     for k in ("dense_short", "far_short", "dense_long", "tier75_long")}
print(m, "short, dense == far-table skip tokens:", r["dense_short"]["token_ids"] == r["far_short"]["token_ids"])
print(m, "short:", repr(r["dense_short"]["text"])[:300])
print(m, "long prompt tokens:", r["dense_long"]["prompt_tokens"], "tiles skipped (prefill, decode):",
      r["tier75_long"]["attention_tiles"]["prefill"], r["tier75_long"]["attention_tiles"]["decode"])
print(m, "long, dense:", repr(r["dense_long"]["text"])[:300])
print(m, "long, 75%:  ", repr(r["tier75_long"]["text"])[:300])
PY
    done
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
    [[ ${CALIBRATE:-1} == 0 ]] || "$bin/skipsoftmax" calibrate --model-dir "$ck" --phase both --max-seqlen $max_seqlen \
      --bin-min 2048 --bin-step 2048 --samples 2 --backend cuda > "$work/calibrate.log" 2>&1
    echo "calibrate: exit $? in $(( $(date +%s) - start )) s"; tail -14 "$work/calibrate.log"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$bin/skipsoftmax" price --model-dir "$ck" --work-dir "$work" --lengths $lengths \
      --accuracy-lengths $acc --samples "${SAMPLES:-8}" --text-windows "${TEXTS:-2}" \
      > "$work/price.log" 2>&1
    echo "price: exit $? in $(( $(date +%s) - start )) s"
    tr '\r' '\n' < "$work/price.log" | grep -v "tasks [0-9]*/" | tail -40
    cp "$ck/config.json" "$work/checkpoint_config.json"
    tar czf "$out/price_$step.tgz" -C "$HOME/price" "$step"
    ;;
  hold)
    ck=$(checkpoint smollm2 "$smol")
    eng=$HOME/hold && rm -rf "$eng" && mkdir -p "$eng"
    if [[ -n ${RECALIBRATE_SAMPLES:-} ]]; then  # the prefill tables again, from more prompts a bin
      start=$(date +%s)
      timeout -s KILL 420 "$bin/skipsoftmax" calibrate --model-dir "$ck" --phase prefill \
        --max-seqlen 8176 --bin-min 2048 --bin-step 2048 --samples "$RECALIBRATE_SAMPLES" \
        --backend cuda > "$out/hold_calibrate.log" 2>&1
      echo "calibrate: exit $? in $(( $(date +%s) - start )) s"; tail -8 "$out/hold_calibrate.log"
      cp "$ck/config.json" "$out/hold_checkpoint_config.json"
    fi
    # A flat S: the 75% table's first row at every length.
    python3 - "$ck/config.json" "$eng" <<'PY'
import json, sys
config, eng = json.load(open(sys.argv[1])), sys.argv[2]
for phase in ("prefill", "decode"):
    table = config[f"skip_softmax_{phase}_scale_tables"]["75%"]
    json.dump(table[:1], open(f"{eng}/flat_{phase}.json", "w"))
PY
    "$bin/skipsoftmax" export "$ck" "$eng/tiers75" --prefill-target-sparsity 75% \
      --decode-target-sparsity 75% > /dev/null
    "$bin/skipsoftmax" export "$ck" "$eng/flat" \
      --skip-softmax-prefill-scale-table "$eng/flat_prefill.json" \
      --skip-softmax-decode-scale-table "$eng/flat_decode.json" > /dev/null
    for e in tiers75 flat; do
      "$bin/skipsoftmax" evaluate --model-dir "$ck" --engine-dir "$eng/$e" --max-context 8192 \
        --lengths 2048 3072 4096 5120 6144 7168 8160 --tasks ruler_niah_multikey ruler_niah_single \
        --samples "${SAMPLES:-8}" --text-windows 0 --label "$e" --save-results "$out/hold_$e.json" \
        2> "$eng/$e.log" | tail -9
    done
    ;;
  tables-calibrate)  # SmolLM2's ladder again, from CAL_SAMPLES prompts a bin (the advisor as fixed)
    ck=$(checkpoint smollm2 "$smol")
    start=$(date +%s)
    timeout -s KILL 480 "$bin/skipsoftmax" calibrate --model-dir "$ck" --phase both \
      --max-seqlen 8176 --bin-min 2048 --bin-step 2048 --samples "${CAL_SAMPLES:-8}" \
      --backend cuda --cache-dir "$HOME/calib-cache" > "$out/tables_calibrate.log" 2>&1
    echo "calibrate: exit $? in $(( $(date +%s) - start )) s"; tail -22 "$out/tables_calibrate.log"
    cp "$ck/config.json" "$out/tables_checkpoint_config.json"
    ;;
  tables-check)  # the tables of tables-calibrate (W/.stage/ck/smollm2_tables.json) on held-out prompts
    ck=$(checkpoint smollm2 "$smol")
    cp "$w/.stage/ck/smollm2_tables.json" "$ck/config.json"
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout -s KILL 560 "$bin/skipsoftmax" check-tables --model-dir "$ck" \
      --lengths ${LENGTHS:-4096 5120 6144 7168 8160} --samples "${SAMPLES:-4}" --backend cuda \
      --save-results "$out/tables_check.json" > "$out/tables_check.log" 2>&1
    echo "check-tables: exit $? in $(( $(date +%s) - start )) s"
    grep -v "check-tables: length" "$out/tables_check.log" | tail -24
    ;;
  *)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac

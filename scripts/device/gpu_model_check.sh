#!/usr/bin/env bash
# One model end to end on the H200, from the binaries of a development build (see README, "Models
# on the GPU machine"): the engine's GPU tests, logits against transformers on 2k tokens of real
# text, dense and skip generation, TTFT/TPOT over prompt lengths, and a capture of real Q/K/V
# whose prefill kernels are then timed side by side with SDPA. Everything lands in $OUT.
#   scripts/device/gpu_model_check.sh BIN_DIR smollm2|gemma3 GGUF CORPUS_TXT CAPTURE_TOKENS LAYER
set -uo pipefail
bin=$1 model=$2 gguf=$3 corpus=$4 cap_tokens=$5 layer=$6
out=${OUT:?}
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
rev=$(cat "$bin/git_revision")
ck=$HOME/ckpt/$model eng=$HOME/engines/$model
mkdir -p "$ck" "$eng" && ln -sf "$gguf" "$ck/" && echo '{}' > "$ck/config.json"
var=SKIPSOFTMAX_$( [[ $model == smollm2 ]] && echo SMOLLM2 || echo GEMMA3 )_GGUF

env "$var=$gguf" timeout -s KILL 240 "$bin/tests/skipsoftmax_gpu_engine_tests" \
  > "$out/engine_tests_$model.log" 2>&1
echo "engine tests: exit $?"; grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |top-1|layer|Failure" \
  "$out/engine_tests_$model.log" | head -40

timeout -s KILL 200 python3 scripts/check_logits.py --tool "$bin/skipsoftmax" --model-dir "$ck" \
  --text tests/data/engine_text.txt --tokens 2000 --out "$out/check_logits_$model.json" 2>&1 | tail -6

# Dense, and skip with a table whose first bin lies above every prompt: identical text expected.
echo '[[100000, 1000.0]]' > "$eng/far_table.json"
"$bin/skipsoftmax" export "$ck" "$eng/dense" > /dev/null
"$bin/skipsoftmax" export "$ck" "$eng/skip" --skip-softmax-prefill-scale-table "$eng/far_table.json" \
  --skip-softmax-decode-scale-table "$eng/far_table.json" > /dev/null
python3 - "$eng/in.json" <<'PY'
import json, sys
json.dump([{"prompt": "The three most important things to remember when learning to cook are",
            "max_new_tokens": 64, "id": "cook"}], open(sys.argv[1], "w"))
PY
for arm in dense skip; do
  timeout -s KILL 60 "$bin/skipsoftmax" run --engine-dir "$eng/$arm" --input-file "$eng/in.json" \
    --output-file "$out/run_${model}_$arm.json" > /dev/null 2>&1 || echo "run $arm failed"
done
python3 - "$out/run_${model}_dense.json" "$out/run_${model}_skip.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
ra, rb = a["requests"][0], b["requests"][0]
print("dense text:", repr(ra.get("text", ""))[:400])
print("dense == skip tokens:", ra["token_ids"] == rb["token_ids"])
PY

# TTFT / TPOT over prompt lengths of real text (a book, about 4 characters a token), dense engine,
# with the attention kernels' share of the time.
python3 - "$eng/lengths.json" "$cap_tokens" "$corpus" <<'PY'
import json, sys
text = open(sys.argv[3]).read()
reqs = [{"prompt": text[:int(3.6 * n)], "max_new_tokens": 32, "id": n}
        for n in (1024, 2048, 4096, 8192, 16384, 32768) if n <= int(sys.argv[2])]
json.dump(reqs, open(sys.argv[1], "w"))
PY
for arm in dense; do
  timeout -s KILL 120 "$bin/skipsoftmax" run --engine-dir "$eng/$arm" --input-file "$eng/lengths.json" \
    --output-file "$out/run_${model}_lengths.json" --time-attention 2>&1 | tail -3
done

# Real Q/K/V of one layer at a long length, then the prefill kernels on them beside SDPA.
cap=$HOME/capture_$model
timeout -s KILL 120 "$bin/skipsoftmax" capture --model-dir "$ck" --text "$corpus" \
  --tokens "$cap_tokens" --layers "$layer" --dtype f16 --out-dir "$cap" 2>&1 | tail -2
for t in q k v; do ln -sf "$(printf 'layer%02d' "$layer")_$t.npy" "$cap/$t.npy"; done
timeout -s KILL 150 python3 bench/compare_sdpa.py --lib "$bin/libskipsoftmax_capi.so" \
  --inputs "$cap" --lengths "$cap_tokens" --tokens "$cap_tokens" --lambdas 1e-4 1e-3 3e-3 1e-2 \
  --git-revision "$rev" --json "$out/compare_sdpa_${model}_captured.json" 2>&1 | tail -10

#!/usr/bin/env bash
# TTFT and TPOT per prompt length, dense against the calibrated skip tiers, one request a run, on
# real text, for a checkpoint whose config.json holds calibrated tables (skipsoftmax calibrate).
# Writes run_<arm>_<length>.json into $OUT and prints a table.
#   scripts/device/gpu_ttft_tpot.sh BIN_DIR CHECKPOINT_DIR CORPUS_TXT "1024 2048 4096 8192" "50% 75%"
set -uo pipefail
bin=$1 ck=$2 corpus=$3 lengths=$4 tiers=$5
out=${OUT:?}
eng=$(mktemp -d)
"$bin/skipsoftmax" export "$ck" "$eng/dense" --skip-softmax-prefill-scale-table none \
  --skip-softmax-decode-scale-table none > /dev/null || exit 1
arms=dense
for t in $tiers; do
  arm=skip${t%\%}
  "$bin/skipsoftmax" export "$ck" "$eng/$arm" --prefill-target-sparsity "$t" \
    --decode-target-sparsity "$t" > /dev/null || exit 1
  arms="$arms $arm"
done
for n in $lengths; do
  python3 - "$eng/in_$n.json" "$corpus" "$n" <<'PY'
import json, sys
text = open(sys.argv[2]).read()
json.dump([{"prompt": text[:int(3.6 * int(sys.argv[3]))], "max_new_tokens": 128, "id": sys.argv[3]}],
          open(sys.argv[1], "w"))
PY
  for arm in $arms; do  # warm-up run, then the measured one
    "$bin/skipsoftmax" run --engine-dir "$eng/$arm" --input-file "$eng/in_$n.json" \
      --output-file "$eng/warm.json" > /dev/null 2>&1
    timeout -s KILL 60 "$bin/skipsoftmax" run --engine-dir "$eng/$arm" --input-file "$eng/in_$n.json" \
      --output-file "$out/run_${arm}_$n.json" --time-attention > /dev/null 2>&1 || echo "$arm $n failed"
  done
done
python3 - "$out" "$arms" "$lengths" <<'PY'
import json, sys
out, arms, lengths = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print(f"{'length':>7} {'arm':<8} {'prompt':>7} {'TTFT ms':>8} {'TPOT ms':>8} {'attn share':>10} "
      f"{'prefill skip':>12} {'decode skip':>11} {'same text':>9}")
for n in lengths:
    dense = json.load(open(f"{out}/run_dense_{n}.json"))["requests"][0]
    for arm in arms:
        r = json.load(open(f"{out}/run_{arm}_{n}.json"))
        q, t = r["requests"][0], r["totals"]
        tiles = q["attention_tiles"]
        frac = lambda p: tiles[p]["skipped"] / tiles[p]["visited"] if tiles[p]["visited"] else 0.0
        print(f"{n:>7} {arm:<8} {q['prompt_tokens']:>7} {q['ttft_ms']:>8.2f} {q['tpot_ms']:>8.3f} "
              f"{t['attention_share']:>10.1%} {frac('prefill'):>12.1%} {frac('decode'):>11.1%} "
              f"{str(q['token_ids'] == dense['token_ids']):>9}")
PY

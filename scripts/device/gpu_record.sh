#!/usr/bin/env bash
# The recorded H200 run: every GPU test, then the prefill and decode benchmarks of
# docs/PERFORMANCE.md, from a build folder made on the development machine (all kernel families).
# Writes into $OUT:
#   gpu_tests.log          the GPU test suite
#   bench_bf16_causal.json our kernels 4k-64k, bf16, causal, 32/8 heads, d128, lambda sweep
#   compare_sdpa.json      the same shapes side by side with cuDNN and FlashAttention-2 (SDPA),
#                          the median over three processes (medians move 1-5% between them)
#   compare_sdpa_fp16_cutlass.json   fp16 MHA (32/32 heads) at 8k and 32k with CUTLASS's
#                          88_hopper_fmha as a second peer, when its binary is there
#                          (scripts/build-cutlass-fmha.sh; the path in CUTLASS_FMHA, by default
#                          .gpubin/cutlass/88_hopper_fmha)
#   bench_extra.json       KV visit orders, head dims 64/256, fp16, non-causal
#   ncu_dense.txt, ncu_skip.txt   Nsight Compute sections of one dense and one skip launch
#   decode_sdpa.json       paged decode against cuDNN and FlashAttention-2 and a device copy, batch
#                          1-64, 4k-128k (decode_sdpa.py's defaults: every decode row of
#                          docs/PERFORMANCE.md), the median over three processes
#   read_balance.json      reads of decode sizes (32 MiB-8 GiB): bulk copies, the decode cache's
#                          TMA boxes and the decode kernel's pipeline with its math replaced by a
#                          wait (bench/studies/read_balance.cu): the floors of the decode rows
# Usage: scripts/device/gpu_record.sh BUILD_DIR [PART ...]
#   PART: tests, prefill, compare, cutlass, extra, ncu, decode, reads (default: all of them, in
#   that order). The whole run takes about 20-30 minutes; each part fits one call of the device
#   tool (10 minutes at most), so run them one call at a time there.
# The tool links ICU (libicuuc.so.72), which the device machine lacks: pack it beside the build
# once on the development machine, and the tool's GPU test finds it there:
#   tar -C /usr/lib/x86_64-linux-gnu -cJf BUILD_DIR/icu.tar.xz libicuuc.so.72 libicuuc.so.72.1 \
#     libicudata.so.72 libicudata.so.72.1
set -uo pipefail
b=$(realpath "${1:-build-gpu}")
shift
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(tests prefill compare cutlass extra ncu decode reads)
for part in "${parts[@]}"; do
  case $part in
    tests | prefill | compare | cutlass | extra | ncu | decode | reads) ;;
    *) echo "gpu_record.sh: unknown part '$part' (tests, prefill, compare, cutlass, extra, ncu, decode, reads)" >&2
       exit 2 ;;
  esac
done
out=$(realpath "${OUT:?}")
cd "$(dirname "$0")/../.." || exit 1
rev=$(cat "$b/git_revision")
work=$(mktemp -d)

if [[ -f $b/icu.tar.xz ]]; then
  mkdir -p "$work/icu" && tar -C "$work/icu" -xJf "$b/icu.tar.xz"
  export LD_LIBRARY_PATH="$work/icu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv

bench() { timeout -s KILL 150 "$b/skipsoftmax_prefill_bench" "$@"; }
compare() {
  PYTHONUNBUFFERED=1 timeout -s KILL 400 python3 bench/compare_sdpa.py \
    --lib "$b/libskipsoftmax_capi.so" --git-revision "$rev" "$@" | tail -n 40
}

part_tests() {
  timeout -s KILL 240 "$b/tests/skipsoftmax_gpu_tests" > "$out/gpu_tests.log" 2>&1
  echo "gpu tests: exit $? ($(grep -E '^\[  (PASSED|FAILED) ' "$out/gpu_tests.log" | tr '\n' ' '))"
  grep -E "skip decisions" "$out/gpu_tests.log"
}

part_prefill() {
  bench --lengths 4096 8192 16384 32768 65536 \
    --lambdas 1e-6 1e-4 3e-4 1e-3 2e-3 3e-3 5e-3 1e-2 3e-2 0.1 0.3 \
    --json "$out/bench_bf16_causal.json" | tail -n 4
}

part_compare() {
  compare --lengths 4096 8192 16384 32768 65536 --lambdas 1e-3 3e-3 --processes 3 --timeout 130 \
    --json "$out/compare_sdpa.json"
}

part_cutlass() {
  local cutlass=${CUTLASS_FMHA:-.gpubin/cutlass/88_hopper_fmha}
  if [[ -x $cutlass ]]; then
    compare --dtype fp16 --heads-kv 32 --lengths 8192 32768 --lambdas 3e-3 --cutlass-fmha "$cutlass" \
      --json "$out/compare_sdpa_fp16_cutlass.json"
  else
    echo "CUTLASS's 88_hopper_fmha: not at $cutlass (scripts/build-cutlass-fmha.sh builds it);" \
         "not timed"
  fi
}

part_extra() {
  for order in forward reverse sink-reverse; do
    bench --lengths 32768 --lambdas 1e-3 3e-3 --kv-order "$order" --json "$work/order_$order.json" > /dev/null
  done
  bench --lengths 32768 --head-dim 64 --lambdas 1e-3 3e-3 --json "$work/d64.json" > /dev/null
  bench --lengths 32768 --head-dim 256 --lambdas 1e-3 3e-3 --json "$work/d256.json" > /dev/null
  bench --lengths 32768 --dtype fp16 --lambdas 1e-3 3e-3 --json "$work/fp16.json" > /dev/null
  bench --lengths 8192 32768 --non-causal --lambdas 1e-3 3e-3 --json "$work/noncausal.json" > /dev/null
  python3 - "$work" "$out/bench_extra.json" <<'PY'
import glob, json, sys
docs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
json.dump(docs, open(sys.argv[2], "w"), indent=1)
for d in docs:
    for r in d["results"]:
        if r["arm"] != "skip lambda=0":
            print(d["command"].split("bench ")[-1][:60].ljust(60), r["length"], r["arm"],
                  "%.3g" % r.get("lambda", 0), "%.0f TF" % r["tflops"],
                  "%.1f%%" % (100 * r["tile_sparsity"]), "%.3fx" % r["speedup_vs_dense"])
PY
}

ncu_run() {
  timeout -s KILL 120 ncu --clock-control none -k regex:prefill_kernel --launch-skip "$1" --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy \
    "$b/skipsoftmax_prefill_bench" --lengths 32768 --lambdas 3e-3 --warmup 0 --iters 1 --rounds 1 > "$2" 2>&1
  echo "ncu $2: exit $?"
}
part_ncu() {
  # Launch order of the bench: the statistics run of lambda, dense, skip at lambda 0, skip at lambda.
  ncu_run 1 "$out/ncu_dense.txt"
  ncu_run 3 "$out/ncu_skip.txt"
}

part_decode() {
  PYTHONUNBUFFERED=1 timeout -s KILL 500 python3 bench/decode_sdpa.py --lib "$b/libskipsoftmax_capi.so" \
    --processes 3 --timeout 160 --git-revision "$rev" --json "$out/decode_sdpa.json" | tail -n 40
}

part_reads() {
  timeout -s KILL 120 "$b/skipsoftmax_read_balance" --mib 32 128 256 1024 8192 \
    --json "$out/read_balance.json" | grep -E "MiB|boxes of 16 rows \(|static ranges, 264|4 warps"
}

for part in "${parts[@]}"; do
  echo "== $part"
  "part_$part"
done

#!/usr/bin/env bash
# compute-sanitizer over the GPU test suite, every kernel family: memcheck (out-of-bounds and
# misaligned accesses, leaks), racecheck (shared-memory hazards), initcheck (reads of memory never
# written) and synccheck (barriers). The tests run every dtype, head dim, dense and skip variant
# of each family; racecheck, the slowest by far, takes one test of each. Logs go to $OUT.
#   scripts/device/gpu_sanitize.sh BUILD_DIR [SECONDS_PER_TOOL]
set -uo pipefail
b=$(realpath "${1:?BUILD_DIR}")
limit=${2:-150}
out=$(realpath "${OUT:?set OUT to the folder for the logs}")
tests="$b/tests/skipsoftmax_gpu_tests"
families='GpuPrefill.DenseMatchesReferenceOnRaggedAwkwardLengths:GpuPrefill.SkipMatchesReferenceOutputAndDecisions:GpuPrefill.PerSequenceLambdasAndLseMatchReference:GpuDecode.PerSequenceLambdasAndLseMatchReference:GpuPrefillWindow.SlidingWindowMatchesReference:GpuPrefillPaged.PagedHistoryIsBitIdenticalToContiguousKv:GpuDecode.DenseMatchesReferenceOnRaggedPagedBatches:GpuDecode.SkipMatchesReferenceOutputAndDecisions:GpuDecode.MultiTokenGroupsMatchReferenceOutputAndDecisions:GpuCalibration.PrefillMatchesTheCpuPass:GpuCalibration.DecodeWithSplitsMatchesTheCpuPass:GpuLayers.*:GpuDequant.RandomBlocksOfEveryTypeMatchTheCpu'
one_each='GpuPrefill.SkipMatchesReferenceOutputAndDecisions:GpuDecode.SkipMatchesReferenceOutputAndDecisions:GpuCalibration.PrefillMatchesTheCpuPass:GpuLayers.RmsNormAndItsRowGather'
status=0
for tool in memcheck initcheck synccheck racecheck; do
  filter=$families
  extra=()
  [[ $tool == memcheck ]] && extra=(--leak-check full)
  [[ $tool == racecheck ]] && filter=$one_each
  timeout -s KILL "$limit" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 86 \
    "$tests" --gtest_filter="$filter" --gtest_brief=1 > "$out/sanitize_$tool.log" 2>&1
  rc=$?
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$out/sanitize_$tool.log" | tail -n 2 | tr '\n' ' ')
  echo "$tool: exit $rc; $(grep -E '^\[  (PASSED|FAILED) ' "$out/sanitize_$tool.log" | tr '\n' ' ')$summary"
  [[ $rc -eq 0 ]] || status=1
done
exit $status

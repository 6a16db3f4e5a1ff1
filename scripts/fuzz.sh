#!/usr/bin/env bash
# Builds the fuzz targets of the file readers (tests/fuzz: npy, GGUF, JSON configs and requests,
# the BPE tokenizer) with Clang, AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for
# SECONDS (default 20; CI's bounded run) from the seeds of tests/fuzz/make_seeds.py. A crash, a
# leak, undefined behaviour, an allocation past 512 MB or an input slower than 10 s fails the run
# and leaves the input in BUILD/crash-<target>-*. A longer campaign: scripts/fuzz.sh 3600.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
build=${FUZZ_BUILD_DIR:-build-fuzz}
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSKIPSOFTMAX_FUZZ=ON > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)"
python3 tests/fuzz/make_seeds.py "$build/seeds"
targets=(npy gguf json tokenizer)
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  echo "fuzz: $t for ${seconds} s"
  "$build/tests/fuzz/skipsoftmax_fuzz_$t" -max_total_time="$seconds" -malloc_limit_mb=512 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=0 -artifact_prefix="$build/crash-$t-" \
    "$build/corpus/$t" "$build/seeds/$t" > "$build/fuzz-$t.log" 2>&1 ||
    { tail -n 40 "$build/fuzz-$t.log"; echo "fuzz: 0 passed, 1 failed ($t)"; exit 1; }
  tail -n 1 "$build/fuzz-$t.log"
done
echo "fuzz: ${#targets[@]} passed, 0 failed"

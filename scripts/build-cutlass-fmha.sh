#!/usr/bin/env bash
# Builds CUTLASS's own Hopper attention example (examples/88_hopper_fmha, forward, fp16) as a
# second peer to time beside our kernels and cuDNN. Its source comes from the pinned PyPI wheel
# nvidia-cutlass 4.2.0.0 (CUTLASS v4.2.0), which carries include/, tools/util/include/ and the
# examples; the flags are those of CUTLASS's own CMake build of the example.
#   scripts/build-cutlass-fmha.sh [OUT_DIR]    (default .gpubin/cutlass under the repository;
#                                              4-6 min on 2 cores)
# Leaves OUT_DIR/88_hopper_fmha, which bench/compare_sdpa.py --cutlass-fmha runs (through
# bench/cutlass_peer.py). To run it on a machine without network, carry OUT_DIR there.
set -euo pipefail
out=$(realpath -m "${1:-$(dirname "$0")/../.gpubin/cutlass}")
cd "$(dirname "$0")/.."
version=4.2.0.0
cache=.whl/cutlass-$version
src=$cache/cutlass_library/source
# The sources are unpacked beside the cache and moved into place whole, so that an interrupted
# download or extraction is never taken for a complete one.
if [[ ! -d $cache ]]; then
  rm -rf "$cache.tmp" && mkdir -p "$cache.tmp"
  python3 -m pip download --quiet --no-deps --dest "$cache.tmp" "nvidia-cutlass==$version"
  python3 - "$cache.tmp" <<'EOF'
import glob, sys, zipfile
cache = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{cache}/nvidia_cutlass-*.whl")[0])
wanted = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/",
          "cutlass_library/source/examples/88_hopper_fmha/", "cutlass_library/source/examples/common/")
members = [n for n in wheel.namelist() if n.startswith(wanted)]
if not any(n.endswith("88_hopper_fmha.cu") for n in members):
    sys.exit("build-cutlass-fmha: the wheel does not carry examples/88_hopper_fmha")
wheel.extractall(cache, members)
EOF
  mv "$cache.tmp" "$cache"
fi
mkdir -p "$out"
tmp=$out/88_hopper_fmha.tmp.$$
trap 'rm -f "$tmp"' EXIT
nvcc -std=c++17 -O3 -DNDEBUG --use_fast_math --expt-relaxed-constexpr -ftemplate-backtrace-limit=0 \
  -DCUTLASS_ENABLE_TENSOR_CORE_MMA=1 -DCUTLASS_DEBUG_TRACE_LEVEL=0 \
  -gencode arch=compute_90a,code=sm_90a \
  -I "$src/include" -I "$src/tools/util/include" -I "$src/examples/common" \
  -I "$src/examples/88_hopper_fmha" \
  -o "$tmp" "$src/examples/88_hopper_fmha/88_hopper_fmha.cu"
mv "$tmp" "$out/88_hopper_fmha"
echo "build-cutlass-fmha: $out/88_hopper_fmha (CUTLASS $version)"

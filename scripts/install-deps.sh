#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages (pinned to bookworm's versions)
# and the Python test environment from PyPI (pinned). Idempotent: what is present is left alone.
set -euo pipefail

packages=(
  cmake                  # >= 3.25
  ninja-build
  g++
  nlohmann-json3-dev     # 3.11.2
  libcli11-dev           # 2.1.2
  libgtest-dev           # 1.12.1
  libgmock-dev
  libicu-dev             # 72: Unicode classes for the tokenizer
  clang                  # 14: the fuzz targets (scripts/fuzz.sh), with libFuzzer from
  libclang-rt-14-dev     #   compiler-rt and its sanitizers
  chromium               # headless browser for the report tests (bookworm-security tracks upstream)
  fonts-liberation       # text in chromium's screenshots
  python3-venv           # the Python package's test environment (.venv, below)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python package's test environment: .venv with every PyPI package pinned
# (python/requirements-test.txt: torch, transformers, pytest, scikit-build-core). Refreshed when the
# pins change.
cd "$(dirname "$0")/.."
pins=python/requirements-test.txt
if ! cmp -s "$pins" .venv/requirements-installed.txt 2>/dev/null; then
  echo "install-deps: installing the Python test environment in .venv ($pins)"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r "$pins"
  cp "$pins" .venv/requirements-installed.txt
fi

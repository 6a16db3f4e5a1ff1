#!/usr/bin/env bash
# Builds the Python package as `pip install .` does, into .venv (scripts/install-deps.sh makes it),
# and runs its tests (python/tests). Every kernel family is compiled, as for a user: the package's
# CPU reference path takes what its launches take. On a machine without a Hopper GPU the ops run
# that reference and the GPU tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
if [[ ! -x $venv/bin/python ]]; then
  echo "test-python: no $venv; run scripts/install-deps.sh first" >&2
  exit 1
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --force-reinstall .
# The C++ tool, for the test that calibrates a captured transformers checkpoint.
tool=$PWD/${BUILD_DIR:-build}/skipsoftmax
[[ -x $tool ]] && export SKIPSOFTMAX_TOOL=${SKIPSOFTMAX_TOOL:-$tool}
# From the repository root the installed package is the one imported (python/ is not on the path).
"$venv/bin/python" -m pytest -q python/tests

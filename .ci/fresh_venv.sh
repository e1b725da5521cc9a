#!/usr/bin/env bash
# The newcomer's path: the whole CI (.ci/run) in a new virtual environment, so nothing of the
# machine's Python (Cython, pytest, ...) is borrowed: python -m venv v && . v/bin/activate &&
# bash .ci/run. Downloads torch and the test extra from the package index.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m venv "$tmp/v"
# shellcheck disable=SC1091
. "$tmp/v/bin/activate"
if python -c "import Cython" 2>/dev/null; then echo "fresh venv has Cython?"; exit 1; fi
bash "$root/.ci/run"

#!/usr/bin/env bash
# `pip install .` must give a working package on a machine without a C compiler: the compiled
# kernels are optional at build time. Installs into a new virtual environment with CC=/bin/false
# (pip fetches setuptools and Cython for its isolated build) and checks the generic path works
# and `arrpos info` says the kernels are not built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"   # the tracked files only: no extension built in place in the checkout
git -C "$root" ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$tmp/src")
python -m venv "$tmp/venv"
py="$tmp/venv/bin/python"
CC=/bin/false CXX=/bin/false "$py" -m pip install -q --disable-pip-version-check "$tmp/src" \
    > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
cd "$tmp"   # not the checkout: import the installed package
"$py" - <<'PY'
import numpy as np
import arrpos
from arrpos import _dispatch

assert not _dispatch.compiled_available(ignore_switch=True)[0], "a kernel was built with CC=/bin/false"
pe = arrpos.sinusoidal(np.arange(3), 4)
want = np.array([[np.sin(p), np.cos(p), np.sin(p / 100), np.cos(p / 100)] for p in range(3)])
assert np.allclose(pe, want, atol=1e-12), pe
print("installed without a compiler:", arrpos.__file__)
PY
"$tmp/venv/bin/arrpos" info | tee "$tmp/info.txt"
grep -qi "not built\|no module named\|unavailable" "$tmp/info.txt"

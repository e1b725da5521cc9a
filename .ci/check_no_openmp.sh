#!/usr/bin/env bash
# The build must work without OpenMP: build the extension that way in a temporary copy of the
# tracked tree and run the kernel equivalence tests against that build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$tmp")
cd "$tmp"
python -m pip install -q "Cython>=3.0" "setuptools>=77"   # the build tools (a fresh venv has none)
ARRPOS_NO_OPENMP=1 ARRPOS_REQUIRE_EXTENSION=1 python setup.py -q build_ext --inplace > build.log 2>&1 || { cat build.log; exit 1; }
PYTHONPATH="$tmp" python -c "
import arrpos._backends._cpu as c
assert c.__file__.startswith('$tmp'), c.__file__
assert not c.have_threads() and c.max_threads() == 1, 'OpenMP crept in'
print('built without OpenMP:', c.__file__)"
PYTHONPATH="$tmp" python -m pytest -q -p no:cacheprovider tests/test_equivalence.py

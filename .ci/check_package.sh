#!/usr/bin/env bash
# Packaging check (run by .ci/run, or alone: bash .ci/check_package.sh):
#   1. python -m build: an sdist (with csrc/) and a wheel built from it (the extension compiled once)
#   2. the wheel holds the extension, its .pyi stub, py.typed, kernels.cu; the sdist holds csrc/
#   3. the wheel installs into a fresh venv (numpy + array-api-compat from the index, no torch or
#      matplotlib) and works there: import, a table, the CLI, a subset of tests run against the
#      installed package (never the source tree)
#   4. mypy on the package (config in pyproject.toml)
# Everything happens in a temporary directory; the working tree is not written to.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/arrpos-package.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
step() { echo "-- check_package: $* ($SECONDS s)"; }

"$PY" -m build --version >/dev/null 2>&1 || "$PY" -m pip install -q "build>=1.0"
"$PY" -m mypy --version >/dev/null 2>&1 || "$PY" -m pip install -q "mypy>=1.10"

step "build sdist + wheel from a copy of the tracked files"
mkdir "$TMP/src"
# Tracked and not-ignored files only: no in-place .so, no build/ or egg-info of the checkout.
git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$TMP/src"
"$PY" -m build --outdir "$TMP/dist" "$TMP/src" >"$TMP/build.log" 2>&1 || {
    tail -40 "$TMP/build.log"; echo "check_package: python -m build failed"; exit 1; }
rm -rf "$TMP/src"

step "contents of the wheel and the sdist"
"$PY" - "$TMP/dist" "$ROOT" <<'EOF'
import fnmatch, pathlib, sys, tarfile, zipfile
dist, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(whl,), (sdist,) = dist.glob("*.whl"), dist.glob("*.tar.gz")
names = zipfile.ZipFile(whl).namelist()
want = ["arrpos/_backends/_cpu.*.so", "arrpos/_backends/_cpu.pyi", "arrpos/py.typed",
        "arrpos/__main__.py", "arrpos/_cli.py", "arrpos/plot.py", "*.dist-info/entry_points.txt",
        "arrpos/_explore_page/page.html", "arrpos/_explore_page/explore.js",
        "arrpos/_explore_page/explore.css"]
if (root / "arrpos/_backends/cuda/kernels.cu").exists():
    want.append("arrpos/_backends/cuda/kernels.cu")
missing = [w for w in want if not fnmatch.filter(names, w)]
stray = [n for n in names if n.startswith(("tests/", "csrc/", "benchmarks/"))]
src = [n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n]
s_missing = [w for w in ["csrc/_cpu.pyx", "csrc/*.hpp", "setup.py", "pyproject.toml",
                         "MANIFEST.in", "tests/conftest.py", "benchmarks/run.py",
                         "arrpos/_backends/_cpu.pyi", "arrpos/py.typed"]
             if not fnmatch.filter(src, w)]
s_stray = [n for n in src if n.endswith((".so", ".pyd", ".o"))]
problems = ([f"wheel lacks {m}" for m in missing] + [f"wheel holds {s}" for s in stray]
            + [f"sdist lacks {m}" for m in s_missing] + [f"sdist holds {s}" for s in s_stray])
if problems:
    sys.exit("check_package: " + "; ".join(problems))
print(f"{whl.name}: {len(names)} files; {sdist.name}: {len(src)} files")
EOF

step "install the wheel into a fresh venv"
"$PY" -m venv "$TMP/venv"
VPY=$TMP/venv/bin/python
"$VPY" -m pip install -q "$TMP"/dist/*.whl pytest hypothesis mpmath

step "smoke test of the installed package (from $TMP, away from the source tree)"
mkdir "$TMP/run"
cd "$TMP/run"
"$VPY" - <<'EOF'
import math, pathlib, sys
import numpy as np
import arrpos
from arrpos import _dispatch
where = pathlib.Path(arrpos.__file__).resolve()
assert "site-packages" in where.parts, f"arrpos imported from {where}, not from the wheel"
ok, why = _dispatch.compiled_available()
assert ok, f"the wheel's compiled extension does not import: {why}"
pe = arrpos.sinusoidal(16, 8, dtype=np.float32)
p, i = 5, 2  # an entry against the paper's formula
assert abs(pe[p, 2 * i] - math.sin(p * 10000.0 ** (-2 * i / 8))) < 1e-6
assert "matplotlib" not in sys.modules
print("import ok:", where.parent, "compiled kernels ok")
EOF
"$TMP/venv/bin/arrpos" info
"$TMP/venv/bin/arrpos" table sinusoidal --length 32 --dim 16 -o pe.npy
"$VPY" -c "import numpy as np; assert np.load('pe.npy').shape == (32, 16)"
"$VPY" -m arrpos --help >/dev/null
"$TMP/venv/bin/arrpos" explore --length 8 --dim 8 --rope-positions 4 -o page.html
grep -q 'id="rope-playground"' page.html  # the page template ships in the wheel
# Without the plot extra the plot command fails with one line, not a traceback.
if "$VPY" -m arrpos plot sinusoidal -o pe.png 2>err.txt; then
    echo "check_package: 'arrpos plot' succeeded without matplotlib"; exit 1
fi
[ "$(wc -l <err.txt)" -eq 1 ] && grep -q "matplotlib" err.txt || {
    cat err.txt; echo "check_package: 'arrpos plot' without matplotlib: not one clear line"; exit 1; }

step "tests against the installed wheel"
cp -r "$ROOT/tests" "$TMP/run/tests"
printf '[pytest]\naddopts = -p no:cacheprovider\n' >"$TMP/run/pytest.ini"
"$VPY" -m pytest -q -x tests/test_absolute.py tests/test_dispatch.py tests/test_cli.py \
    tests/test_plot.py
cd "$ROOT"

step "compiled kernels listed in the stub"
"$PY" - "$ROOT" <<'EOF'
import ast, pathlib, re, sys
root = pathlib.Path(sys.argv[1])
pyx = (root / "csrc/_cpu.pyx").read_text()
kernels = {k for k in re.findall(r"^def (\w+)\(", pyx, flags=re.M) if not k.startswith("_")}
stub = ast.parse((root / "arrpos/_backends/_cpu.pyi").read_text())
typed = {n.name for n in stub.body if isinstance(n, ast.FunctionDef)}
typed |= {n.target.id for n in stub.body if isinstance(n, ast.AnnAssign)}
untyped = sorted(kernels - typed)
if untyped:
    print("note: arrpos/_backends/_cpu.pyi does not list (typed as Any):", ", ".join(untyped))
EOF

step "mypy"
"$PY" -m mypy
step "done"

#!/usr/bin/env bash
# Compile arrpos/_backends/cuda/kernels.cu with NVRTC exactly as the CUDA driver does at run
# time: cupy.cuda.compiler with the source, options and name expressions of
# arrpos._backends.cuda.driver.module_spec() (what cupy.RawModule receives; the name expressions
# are the CUDA kernels of the op table, arrpos._backends.ops, per element and offset type), plus
# the -ftz=true that CuPy's RawModule appends, for sm_80 and sm_90 (SASS, as CuPy builds for a
# GPU it knows) and compute_80 (PTX, read to check that no .ftz instruction slipped in: the
# kernels keep subnormals). Fails on any error, on any NVRTC log output (warnings included)
# and on a name expression that does not resolve. No GPU or driver is needed: the architecture
# is given explicitly instead of being read from the device.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q cupy-cuda12x nvidia-cuda-nvrtc-cu12

python - <<'EOF'
import io
import re
import sys

import cupy
from cupy.cuda import compiler

from arrpos._backends.cuda.driver import module_spec

spec = module_spec()
options = tuple(spec["options"]) + ("-ftz=true",)  # appended by cupy.RawModule


def compile_for(arch, kind):
    # cupy asks the driver for the best -arch; without a GPU say it: sm_XX -> cubin (what CuPy
    # builds for a GPU it supports), compute_XX -> PTX
    flag = f"-arch={'sm' if kind == 'cubin' else 'compute'}_{arch}"
    compiler._get_arch_for_options_for_nvrtc = lambda arch=None: (flag, kind)
    log = io.StringIO()
    binary, mapping = compiler.compile_using_nvrtc(
        spec["code"], options, arch=arch, name_expressions=spec["name_expressions"],
        log_stream=log)
    if log.getvalue().strip():
        sys.exit(f"NVRTC {flag}: log output (treated as an error):\n{log.getvalue()}")
    missing = [n for n in spec["name_expressions"] if not mapping.get(n)]
    if missing:
        sys.exit(f"NVRTC {flag}: unresolved name expressions {missing}")
    compile_for.mapping = mapping
    return binary


major, minor = compiler._get_nvrtc_version()
for arch in ("80", "90"):
    cubin = compile_for(arch, "cubin")
    if not cubin.startswith(b"\x7fELF"):
        sys.exit(f"NVRTC sm_{arch}: no cubin")
ptx = compile_for("80", "ptx").decode()
# one chunk per kernel (".visible .entry name(", ".weak .entry name(" for template instances)
# and per device function (libdevice's slow-path trigonometric reduction, never reached for
# the reduced angles, keeps a local array: only the kernels' own code is checked)
chunks = re.split(r"(?m)^(?=(?:\.\w+ )*\.(?:entry|func) )", ptx)[1:]
entries = {m.group(1): c for c in chunks if (m := re.match(r"(?:\.\w+ )*\.entry (\w+)", c))}
names = {mangled: name for name, mangled in compile_for.mapping.items()}
if sorted(entries) != sorted(names):
    sys.exit(f"PTX entries {sorted(entries)} are not the name expressions' {sorted(names)}")
for mangled, body in entries.items():
    name = names.get(mangled, mangled)
    # a stack frame or spills, e.g. the by-value frequency block copied out to be indexed
    if ".local" in body:
        sys.exit(f"PTX of {name} uses local memory")
    vector = re.search(r"ld\.global(\.nc)?\.v[24]\.", body)
    if name.startswith(("arrpos::apply_rope<", "arrpos::apply_rope_cached<")) and not vector:
        sys.exit(f"PTX of {name} has no vector loads: the two-pairs-per-thread path is gone")
flushed = sorted(set(re.findall(r"\b\w+(?:\.\w+)*\.ftz\b(?:\.\w+)*", ptx)))
if flushed:
    sys.exit(f"PTX holds flush-to-zero instructions {flushed}: float32 subnormals (bfloat16's "
             "among them) would become 0 unlike the CPU path")
print(f"nvrtc {major}.{minor} (cupy {cupy.__version__}): kernels.cu compiled for sm_80 and "
      f"sm_90, {len(spec['name_expressions'])} name expressions, no log output; PTX: no .ftz, "
      "no local memory, vector loads in the apply kernels")
EOF

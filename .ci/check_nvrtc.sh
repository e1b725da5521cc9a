#!/usr/bin/env bash
# Compile arrpos/_backends/kernels.cu with NVRTC exactly as the CuPy adapter does at run time:
# cupy.cuda.compiler with the source, options and name expressions of
# arrpos._backends._cupy.module_spec() (what cupy.RawModule receives), plus the -ftz=true that
# CuPy's RawModule appends, for sm_80 and sm_90 (SASS, as CuPy builds for a GPU it knows) and
# compute_80 (PTX, read to check that no .ftz instruction slipped in: the kernels keep
# subnormals). Fails on any error, on any NVRTC log output (warnings included) and on a name
# expression that does not resolve. No GPU or driver is needed: the architecture is given
# explicitly instead of being read from the device.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q cupy-cuda12x nvidia-cuda-nvrtc-cu12

python - <<'EOF'
import io
import re
import sys

import cupy
from cupy.cuda import compiler

from arrpos._backends._cupy import module_spec

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
    return binary


major, minor = compiler._get_nvrtc_version()
for arch in ("80", "90"):
    cubin = compile_for(arch, "cubin")
    if not cubin.startswith(b"\x7fELF"):
        sys.exit(f"NVRTC sm_{arch}: no cubin")
ptx = compile_for("80", "ptx").decode()
flushed = sorted(set(re.findall(r"\b\w+(?:\.\w+)*\.ftz\b(?:\.\w+)*", ptx)))
if flushed:
    sys.exit(f"PTX holds flush-to-zero instructions {flushed}: float32 subnormals (bfloat16's "
             "among them) would become 0 unlike the CPU path")
print(f"nvrtc {major}.{minor} (cupy {cupy.__version__}): kernels.cu compiled for sm_80 and "
      f"sm_90, {len(spec['name_expressions'])} name expressions, no log output, no .ftz in PTX")
EOF

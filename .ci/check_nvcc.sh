#!/usr/bin/env bash
# Compile the CUDA source shipped as package data (arrpos/_backends/cuda/kernels.cu) with nvcc for
# sm_80 and sm_90, instantiating every kernel the CUDA driver names (one list, from the op table:
# arrpos._backends.cuda.driver.kernel_names(), which imports without CuPy), so that a syntax or
# template error fails CI instead of a user's first GPU call. No GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC="${NVCC:-nvcc}"
if ! command -v "$NVCC" >/dev/null 2>&1; then
    echo "skip: nvcc not found; arrpos/_backends/cuda/kernels.cu not compiled"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python -c 'import sys
from arrpos._backends.cuda.driver import instantiation_source, kernel_names
sys.stdout.write(instantiation_source())
print(len(kernel_names()), file=sys.stderr)' >"$tmp/instances.cu" 2>"$tmp/count"

for arch in 80 90; do
    # -Werror all-warnings: nvcc/cudafe warnings; -Xcompiler: the host side of the wrapper;
    # -Xptxas -Werror: ptxas warnings (spills are not warnings, so they do not fail).
    "$NVCC" -std=c++17 -O3 -arch="sm_${arch}" -Werror all-warnings \
        -Xcompiler -Wall,-Wextra,-Werror -Xptxas -Werror \
        -c "$tmp/instances.cu" -o "$tmp/rope_sm${arch}.o"
done
echo "nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'): kernels.cu compiled" \
     "for sm_80 and sm_90, $(cat "$tmp/count") kernel instantiations"

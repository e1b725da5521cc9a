#!/usr/bin/env bash
# Download HERE (a machine with network) the wheels that .ci/gpu installs on the lent GPU
# machine, which has no network: exactly what the package and the GPU tests import beyond
# the machine's own packages, pinned, into .ci/gpu-wheels/ (ignored by git; carried with the
# device call's `carry`, see docs/gpu.md). Running it again keeps the folder to exactly the
# pinned files (a second version of a package would stop pip there).
#
#   bash .ci/gpu-wheels.sh              download (a few hundred KB)
#   bash .ci/gpu-wheels.sh --list       the pinned requirements, one a line (.ci/gpu reads it)
#   bash .ci/gpu-wheels.sh --device-has the GPU machine's own distributions (the tests read it)
#
# tests/test_gpu_script.py checks that WHEELS is exactly the third-party imports of the GPU
# tests, .ci/gpu_check.py, the GPU benchmarks and the build, less DEVICE_HAS.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3 on the GPU machines (nvidia-h100-x1, nvidia-h200): Python 3.12.3, x86-64
DEVICE_PYTHON=3.12

WHEELS=(
    "array-api-compat==1.16.0"  # arrpos's dependency (pyproject.toml); not in the image
)

# Distributions of the GPU machines' image ('cuda'), as the device tool's KINDS.md lists
# them ("Python packages already there", read on 2026-11-17). Versions there, where seen:
# numpy 2.5.2, cupy-cuda13x 14.2.0, torch 2.11.0+cu130, transformers 5.17.0.
DEVICE_HAS=(
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
    coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
    diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
    frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
    meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
    narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
    nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
    onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
    pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
    sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
    statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
    typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
)

case "${1:-}" in
    --list) printf '%s\n' "${WHEELS[@]}"; exit 0 ;;
    --device-has) printf '%s\n' "${DEVICE_HAS[@]}"; exit 0 ;;
    "") ;;
    *) echo "usage: bash .ci/gpu-wheels.sh [--list | --device-has]" >&2; exit 2 ;;
esac

DEST=.ci/gpu-wheels
mkdir -p "$DEST"
PY=${PYTHON:-python3}
# --no-deps: each needed distribution is named above (the tests check the list); the
# platforms cover what pip on the machine accepts, pure-Python wheels match any of them
"$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version "$DEVICE_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --dest "$DEST" "${WHEELS[@]}"

# keep exactly the pinned files: wheel names are {name}-{version}-..., name with '_' for '-'
prefixes=()
for req in "${WHEELS[@]}"; do
    name=${req%%==*}
    name=${name,,}
    prefixes+=("${name//-/_}-${req##*==}-")
done
for f in "$DEST"/*; do
    [ -e "$f" ] || continue
    base=$(basename "$f")
    base=${base,,}
    keep=0
    for p in "${prefixes[@]}"; do
        [[ $base == "$p"*.whl ]] && keep=1
    done
    if (( ! keep )); then
        echo "removing $f (not pinned in .ci/gpu-wheels.sh)"
        rm -f "$f"
    fi
done
for p in "${prefixes[@]}"; do
    found=$(find "$DEST" -maxdepth 1 -iname "${p}*.whl" | wc -l)
    if [ "$found" -ne 1 ]; then
        echo "expected one wheel ${p}*.whl in $DEST, found $found" >&2
        exit 1
    fi
done
size=$(du -sk "$DEST" | cut -f1)
if (( size > 16384 )); then  # the device call carries at most 64 MiB, the tree included
    echo "$DEST holds ${size} KiB: more than the 16 MiB this check allows itself" >&2
    exit 1
fi
echo "$DEST: ${#WHEELS[@]} wheel(s), ${size} KiB, for Python $DEVICE_PYTHON on x86-64:"
ls -1 "$DEST"
echo 'device call: run(command="bash .ci/gpu", carry=[".ci/gpu-wheels"], timeout_s=600)'

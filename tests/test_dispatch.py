"""Which implementation each input takes, and that nothing heavy is imported by arrpos."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import _xp
from conftest import get_backend

NO_EXT = os.environ.get("ARRPOS_NO_EXTENSIONS", "") not in ("", "0")


def _impl_name(backend, dtype_name):
    dtype = getattr(backend.xp, dtype_name)
    return _dispatch.select("sinusoid_table", backend.xp, dtype=dtype).__name__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_numpy_takes_compiled_kernel(dtype_name):
    b = get_backend("numpy")
    expected = "_xp" if NO_EXT else "_numpy"
    assert _impl_name(b, dtype_name) == expected


def test_numpy_float16_takes_generic():
    b = get_backend("numpy")
    assert _impl_name(b, "float16") == "_xp"


@pytest.mark.parametrize("name", ["array_api_strict", "jax", "dask"])
def test_other_namespaces_take_generic(name):
    b = get_backend(name)
    assert _impl_name(b, "float32") == "_xp"


def _select_rope(x, cos, sin):
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    mod = _dispatch.select("apply_rope", xp, dtype=x.dtype, arrays=(x, cos, sin, None))
    return mod.__name__.rsplit(".", 1)[-1]


def test_torch_cpu_without_grad_takes_kernels_through_dlpack():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8)
    cos, sin = torch.randn(5, 1, 8), torch.randn(5, 1, 8)
    assert _select_rope(x, cos, sin) == ("_xp" if NO_EXT else "_torch_cpu")
    # zero-copy: rotating in place changes the caller's tensor storage
    ptr = x.data_ptr()
    ref = arrpos.apply_rope(x.clone(), cos, sin)
    got = arrpos.apply_rope(x, cos, sin, out=x)
    assert got is x and x.data_ptr() == ptr
    torch.testing.assert_close(x, ref, rtol=0, atol=1e-6)


def test_torch_requiring_grad_takes_generic_path():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8, requires_grad=True)
    cos, sin = torch.randn(5, 1, 8), torch.randn(5, 1, 8)
    assert _select_rope(x, cos, sin) == "_xp"
    y = arrpos.apply_rope(x, cos, sin)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_torch_half_precision_takes_generic_path():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8, dtype=torch.bfloat16)
    cos = sin = torch.randn(5, 1, 8, dtype=torch.bfloat16)
    assert _select_rope(x, cos, sin) == "_xp"


def test_env_var_forces_generic():
    code = (
        "import numpy as np, arrpos._dispatch as d, array_api_compat.numpy as xp;"
        "print(d.select('sinusoid_table', xp, dtype=np.float32).__name__)"
    )
    env = dict(os.environ, ARRPOS_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "arrpos._backends._xp"


def test_compiled_extension_builds():
    if NO_EXT:
        pytest.skip("extensions disabled by ARRPOS_NO_EXTENSIONS for this run")
    ok, why = _dispatch.compiled_available()
    assert ok, f"the compiled extension did not import: {why}"


def test_import_is_light():
    """`import arrpos` must not import any array library but NumPy, nor matplotlib."""
    code = (
        "import sys, arrpos;"
        "heavy = [m for m in ('cupy', 'torch', 'jax', 'dask', 'matplotlib') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_result_matches_selected_impl():
    """The public function returns what the selected implementation computes."""
    from arrpos._exact import power_frequencies
    import array_api_compat.numpy as xp

    hi, lo = power_frequencies(8, 16, 10000.0)
    pos = np.arange(300)
    ref = _xp.sinusoid_table(xp.asarray(pos), hi, lo, layout="interleaved", dtype=np.float64,
                             width=16, xp=xp)
    np.testing.assert_allclose(arrpos.sinusoidal(pos, 16), ref, rtol=0, atol=1e-14)

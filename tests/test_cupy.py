"""The GPU path: CuPy arrays and CUDA torch tensors on the kernels of ``kernels.cu``.

Tests that need a GPU skip cleanly without one (``get_backend("cupy")``); the packaging and
bookkeeping tests at the top run everywhere. The same kernels run on the CPU in
tests/test_cuda_emulated.py.
"""
from __future__ import annotations

import importlib.resources
import re

import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import Unsupported, _xp, ops
from arrpos._backends.cuda import cupy as _cupy
from arrpos._backends.cuda import driver
from conftest import get_backend
from reference import rope_apply_loop

# ------------------------------------------------------------------------------------------
# no GPU needed


def test_cuda_source_is_shipped():
    res = importlib.resources.files("arrpos._backends.cuda").joinpath("kernels.cu")
    assert res.is_file()
    assert res.read_text() == driver.cuda_source()
    import pathlib

    pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.exists():  # a source checkout: the .cu is declared as package data
        m = re.search(r"\[tool\.setuptools\.package-data\]\s*arrpos\s*=\s*\[([^\]]*)\]",
                      pyproject.read_text())
        assert m and '"_backends/cuda/*.cu"' in m.group(1)


def test_name_list_covers_every_kernel_template():
    """The instantiation list is the op table's: every template of kernels.cu is the kernel of
    an op with CUDA dtypes, instantiated for each of them (and each offset type where its
    template takes one), and nothing else."""
    src = driver.cuda_source()
    templates = {name: bool(index) for index, name in re.findall(
        r"template\s*<typename T(,\s*typename I)?>\s*__global__\s+void\s+"
        r"(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\(", src)}
    kernels = ops.cuda_kernels()
    assert set(templates) == set(kernels)
    assert {k: offsets for k, (_, offsets) in kernels.items()} == templates
    names = driver.kernel_names()
    assert len(names) == len(set(names))
    want = [driver.kernel_name(op.kernel, d, index) for op in ops.OPS.values()
            if op.kernel and op.dtypes.get("cuda") for d in op.dtypes["cuda"]
            for index in (("int", "long long") if op.offsets else (None,))]
    assert sorted(set(want)) == sorted(names)
    code = re.sub(r"//[^\n]*", "", src)  # comments may name what the code must not do
    assert not re.search(r'extern\s+"C"', code)
    assert not re.search(r"^\s*#\s*include", code, flags=re.M)  # NVRTC has no host headers
    inst = driver.instantiation_source()
    assert all(f"&{n}," in inst for n in names)


def test_angle_constants_match_generic_code():
    src = driver.cuda_source()
    for name, value in [("C1", _xp._C1), ("C2", _xp._C2), ("C3", _xp._C3), ("C4", _xp._C4),
                        ("INV_2PI", _xp._INV_2PI)]:
        m = re.search(rf"#define ARRPOS_{name} (\S+)", src)
        assert m and float(m.group(1)) == value, name


def test_parameter_structures_match_the_source():
    """The by-value structures: block size and field order as kernels.cu declares them (the
    emulator also checks their sizes against the compiled C++)."""
    src = driver.cuda_source()
    m = re.search(r"#define ARRPOS_FREQ_BLOCK (\d+)", src)
    assert m and int(m.group(1)) == driver.FREQ_BLOCK
    assert re.search(r"struct freq_block \{\s*double hi\[ARRPOS_FREQ_BLOCK\];\s*"
                     r"double lo\[ARRPOS_FREQ_BLOCK\];\s*\};", src)
    assert driver.FREQ_DTYPE.names == ("hi", "lo") and driver.FREQ_DTYPE.itemsize == 16 * 192
    fields = re.search(r"struct strides4 \{[^\n]*\n\s*long long ([^;]*);", src).group(1)
    assert tuple(f.strip() for f in fields.split(",")) == driver.STRIDES_FIELDS
    # the largest parameter list stays within the 4 KiB every driver accepts
    assert driver.FREQ_DTYPE.itemsize + 128 <= 4096


def test_taps_block_matches_the_source():
    """resample's by-value taps: block size and fields as kernels.cu declares them, within
    the 4 KiB parameter space with the kernel's other arguments."""
    from arrpos._backends.cuda import tap_blocks

    src = driver.cuda_source()
    m = re.search(r"#define ARRPOS_TAPS_BLOCK (\d+)", src)
    assert m and int(m.group(1)) == tap_blocks.TAPS_BLOCK
    assert re.search(r"struct taps_block \{\s*double w\[ARRPOS_TAPS_BLOCK\];\s*"
                     r"int idx\[ARRPOS_TAPS_BLOCK\];\s*\};", src)
    assert tap_blocks.TAPS_DTYPE.names == ("w", "idx")
    assert tap_blocks.TAPS_DTYPE.itemsize == 12 * tap_blocks.TAPS_BLOCK
    assert tap_blocks.TAPS_DTYPE.itemsize + 2 * 8 + 13 * 8 + 3 * 4 <= 4096


def test_exact_split_is_not_left_to_the_compiler():
    """The angle split uses explicit round-to-nearest intrinsics: no compiler may contract
    p * w_hi into the reduction (finding 5 of the review)."""
    src = driver.cuda_source()
    body = src[src.index("void exact_sincos("):]
    body = body[:body.index("\n}\n")]
    code = re.sub(r"//[^\n]*", "", body.split("{", 1)[1])
    assert "__dmul_rn(p, w_hi)" in code and "__fma_rn(p, w_hi, -big)" in code
    # no bare arithmetic operator between operands outside the intrinsics' arguments
    assert not re.search(r"\w\s*[*+]\s*\w", code.replace("double *", ""))


def test_import_needs_no_cupy():
    import subprocess
    import sys

    code = ("import sys, arrpos._backends.cuda.driver as m, arrpos._backends.cuda.cupy, "
            "arrpos._backends.cuda.torch_cuda;"
            "m.kernel_names(); print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("value, expected", [("1", "None"), ("0", "arrpos._backends.cuda.cupy")])
def test_env_var_disables_gpu_path(value, expected):
    import os
    import subprocess
    import sys

    code = ("import arrpos._dispatch as d; m = d.front_end('cuda.cupy');"
            "print(m.__name__ if m else None)")
    env = dict(os.environ, ARRPOS_NO_EXTENSIONS=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == expected


# ------------------------------------------------------------------------------------------
# CuPy on a GPU


@pytest.fixture
def cpb():
    return get_backend("cupy")


def _impl(op, xp, dtype, *arrays):
    arrays = arrays + (None,) * (op == "apply_rope" and len(arrays) == 3)
    kwargs = {} if op == "apply_rope" else {"dtype": dtype}
    return _dispatch.plan(op, xp, arrays, **kwargs).module.__name__.rsplit(".", 1)[-1]


def _no_ext():
    return _dispatch.extensions_disabled()


@pytest.mark.parametrize("layout", ["interleaved", "split"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sinusoidal_kernel_matches_generic(cpb, layout, dtype):
    cp, xp = cpb.module, cpb.xp
    pos = cp.asarray(np.array([[0, 1, 17], [4095, 65536, 2**24]]))
    dt = getattr(cp, dtype)
    got = arrpos.sinusoidal(pos, 64, layout=layout, dtype=dt)
    assert isinstance(got, cp.ndarray) and got.dtype == dt and got.shape == (2, 3, 64)
    assert _impl("sinusoid_table", xp, dt, pos) == ("_xp" if _no_ext() else "cupy")
    from arrpos._exact import power_frequencies

    hi, lo = power_frequencies(32, 64, 10000.0)
    ref = _xp.sinusoid_table(pos, hi, lo, layout=layout, dtype=dt, width=64, xp=xp)
    tol = 1e-15 if dtype == "float64" else 1.2e-7  # one float32 rounding apart at most
    assert float(cp.max(cp.abs(got - ref))) <= tol


@pytest.mark.parametrize("dtype, tol", [("float32", 2e-7), ("float64", 1e-12)])
def test_accuracy_contract_on_gpu(cpb, dtype, tol):
    """Within 2e-7 (float32) / 1e-12 (float64) of exact up to position 2**24."""
    cp = cpb.module
    p = np.array([0, 1, 1000, 999_999, 1_000_000, 2**23 + 1, 2**24 - 1, 2**24], dtype=np.int64)
    exact = arrpos.sinusoidal(p, 128, dtype=np.float64)  # NumPy: the exact path (tested there)
    got = cp.asnumpy(arrpos.sinusoidal(cp.asarray(p), 128, dtype=getattr(cp, dtype)))
    assert np.max(np.abs(got - exact)) <= tol
    t = cp.asnumpy(arrpos.timestep_embedding(cp.asarray(p), 64, dtype=getattr(cp, dtype)))
    assert np.max(np.abs(t - arrpos.timestep_embedding(p, 64, dtype=np.float64))) <= tol


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rope_cos_sin_kernel_matches_generic(cpb, layout, dtype):
    cp, xp = cpb.module, cpb.xp
    inv, _ = arrpos.rope_frequencies(128, xp=cp)
    pos = cp.arange(5000)
    dt = getattr(cp, dtype)
    assert _impl("rope_cos_sin", xp, dt, pos, inv) == ("_xp" if _no_ext() else "cupy")
    cos, sin = arrpos.rope_cos_sin(pos, inv, layout=layout, attention_factor=1.1, dtype=dt)
    rc, rs = _xp.rope_cos_sin(pos, inv, layout=layout, attention_factor=1.1, axes=None,
                              dtype=dt, xp=xp)
    tol = 1e-15 if dtype == "float64" else 2.4e-7
    assert float(cp.max(cp.abs(cos - rc))) <= tol and float(cp.max(cp.abs(sin - rs))) <= tol
    big = cp.asarray([2**24])
    c64, s64 = arrpos.rope_cos_sin(big, inv, dtype=cp.float64)
    cn, sn = arrpos.rope_cos_sin(np.asarray([2**24]), cp.asnumpy(inv), dtype=np.float64)
    assert np.max(np.abs(cp.asnumpy(c64) - cn)) <= 1e-12


def test_rope_cos_sin_axes_on_gpu(cpb):
    cp = cpb.module
    inv, _ = arrpos.rope_frequencies(16, xp=cp)
    pos = cp.asarray(np.random.default_rng(0).integers(0, 50, size=(7, 3)))
    axes = arrpos.mrope_axes((2, 3, 3))
    cos, sin = arrpos.rope_cos_sin(pos, inv, axes=axes)
    cn, sn = arrpos.rope_cos_sin(cp.asnumpy(pos), cp.asnumpy(inv), axes=axes)
    np.testing.assert_allclose(cp.asnumpy(cos), cn, atol=1e-7)


def _rand(cp, shape, dtype, seed=0):
    return cp.asarray(np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


def _tables(cp, seq, r, dtype, layout="half"):
    inv, _ = arrpos.rope_frequencies(r, xp=cp)
    return arrpos.rope_cos_sin(cp.arange(seq), inv, layout=layout, dtype=dtype)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("rotary", [128, 64])
def test_apply_rope_kernel_matches_generic(cpb, layout, inverse, rotary):
    cp, xp = cpb.module, cpb.xp
    x = _rand(cp, (2, 33, 4, 128), cp.float32)
    cos, sin = _tables(cp, 33, rotary, cp.float32, layout)
    c, s = cos[:, None, :], sin[:, None, :]  # broadcast over heads: zero strides, no copy
    assert _impl("apply_rope", xp, x.dtype, x, c, s) == ("_xp" if _no_ext() else "cupy")
    got = arrpos.apply_rope(x, c, s, layout=layout, inverse=inverse)
    ref = _xp.apply_rope(x, c, s, layout=layout, inverse=inverse, xp=xp)
    assert got.shape == x.shape and got.dtype == x.dtype
    assert float(cp.max(cp.abs(got - ref))) <= 1e-5
    cp.testing.assert_array_equal(got[..., rotary:], x[..., rotary:])  # passed through


def test_apply_rope_in_place_strided_and_round_trip(cpb):
    cp = cpb.module
    q = _rand(cp, (2, 16, 8, 64), cp.float64).transpose(0, 2, 1, 3)  # (b, h, s, d) view
    orig = q.copy()
    cos, sin = _tables(cp, 16, 64, cp.float64)
    ref = arrpos.apply_rope(q, cos, sin)
    ptr = q.data.ptr
    got = arrpos.apply_rope(q, cos, sin, out=q)
    assert got is q and q.data.ptr == ptr
    assert float(cp.max(cp.abs(q - ref))) <= 1e-14
    arrpos.apply_rope(q, cos, sin, inverse=True, out=q)
    assert float(cp.max(cp.abs(q - orig))) <= 1e-13


def test_apply_rope_float16(cpb):
    cp = cpb.module
    x = _rand(cp, (3, 40, 2, 32), cp.float16)
    cos, sin = _tables(cp, 40, 32, cp.float16)
    got = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    exact = arrpos.apply_rope(x.astype(cp.float64), cos[:, None].astype(cp.float64),
                              sin[:, None].astype(cp.float64))
    assert got.dtype == cp.float16
    # float32 arithmetic, one rounding to float16
    assert bool(cp.all(cp.abs(got - exact) <= cp.abs(exact) * 2**-11 * 1.01 + 2**-24))


def test_apply_rope_mixed_dtypes_take_generic(cpb):
    cp, xp = cpb.module, cpb.xp
    x = _rand(cp, (5, 2, 8), cp.float32)
    cos, sin = _tables(cp, 5, 8, cp.float64)
    assert _impl("apply_rope", xp, x.dtype, x, cos[:, None], sin[:, None]) == "_xp"
    got = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    assert got.dtype == x.dtype


def test_apply_rope_errors_on_gpu(cpb):
    cp = cpb.module
    x = _rand(cp, (4, 8), cp.float32)
    cos, sin = _tables(cp, 4, 8, cp.float32)
    with pytest.raises(ValueError, match="out"):
        arrpos.apply_rope(x, cos, sin, out=cp.empty((4, 6), cp.float32))
    with pytest.raises(ValueError, match="cos"):
        arrpos.apply_rope(x, cos[:3], sin[:3])
    with pytest.raises(Unsupported):  # the driver's guard (no integer kernel)
        _cupy.apply_rope(x.astype(cp.int32), cos, sin, layout="half", inverse=False, xp=None)


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_alibi_kernel_matches_generic(cpb, mode, dtype):
    cp, xp = cpb.module, cpb.xp
    slopes = arrpos.alibi_slopes(12, xp=cp, dtype=getattr(cp, dtype))
    assert _impl("alibi_bias", xp, slopes.dtype, slopes) == ("_xp" if _no_ext() else "cupy")
    got = arrpos.alibi_bias(slopes, 17, 300, mode=mode)
    exact = _xp.alibi_bias(slopes.astype(cp.float64), 17, 300, mode=mode, query_offset=283,
                           dtype=cp.float64, xp=xp)
    assert got.shape == (12, 17, 300) and got.dtype == slopes.dtype
    rel = {"float16": 2**-11, "float32": 2**-24, "float64": 2**-53}[dtype]
    assert bool(cp.all(cp.abs(got - exact) <= cp.abs(exact) * rel * 1.01))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("antialias", [False, True])
def test_resample_kernel_equals_numpy(cpb, dtype, antialias):
    """The CUDA kernel's sums are the CPU path's (NumPy's generic code or its kernel) bit for
    bit, with a class token, up and down (a shrink's taps in several launches)."""
    cp, xp = cpb.module, cpb.xp
    rng = np.random.default_rng(5)
    table = (rng.standard_normal((2, 1 + 24 * 20, 48)) * 3).astype(dtype)
    grid = cp.asarray(table)[:, 1:].reshape(2, 24, 20, 48)
    assert _impl("resample_grid", xp, grid.dtype, grid, None) == (
        "_xp" if _no_ext() else "cupy")
    for new in ((40, 5), (7, 31)):
        got = arrpos.resample(cp.asarray(table), new, old_size=(24, 20), prefix_tokens=1,
                              method="cubic", antialias=antialias)
        ref = arrpos.resample(table, new, old_size=(24, 20), prefix_tokens=1, method="cubic",
                              antialias=antialias)
        assert isinstance(got, cp.ndarray) and cp.asnumpy(got).tobytes() == ref.tobytes()


def test_kernels_follow_the_current_stream(cpb):
    cp = cpb.module
    x = _rand(cp, (4, 256, 8, 64), cp.float32)
    cos, sin = _tables(cp, 256, 64, cp.float32)
    ref = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    made = cp.cuda.Event()
    made.record()  # x, cos, sin, ref were made on the legacy stream
    s = cp.cuda.Stream(non_blocking=True)  # does not wait for the legacy stream by itself
    s.wait_event(made)
    with s:
        out = cp.empty_like(x)
        arrpos.apply_rope(x, cos[:, None], sin[:, None], out=out)
    s.synchronize()
    cp.testing.assert_array_equal(out, ref)


# ------------------------------------------------------------------------------------------
# torch CUDA tensors through DLPack


@pytest.fixture
def torch_cuda(cpb):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_cuda_takes_kernels_zero_copy(torch_cuda, dtype):
    torch = torch_cuda
    import array_api_compat.torch as txp

    dt = getattr(torch, dtype)
    x = torch.randn(2, 50, 4, 64, device="cuda").to(dt)
    inv, _ = arrpos.rope_frequencies(64, xp=torch, device=x.device)
    cos, sin = arrpos.rope_cos_sin(torch.arange(50, device="cuda"), inv, dtype=dt)
    c, s = cos[:, None], sin[:, None]
    expected = "_xp" if _no_ext() else "torch_cuda"
    assert _impl("apply_rope", txp, dt, x, c, s) == expected
    exact = _xp.apply_rope(x.double(), c.double(), s.double(), layout="half", inverse=False,
                           xp=txp)
    ptr = x.data_ptr()
    got = arrpos.apply_rope(x, c, s, out=x)
    assert got is x and x.data_ptr() == ptr and x.dtype == dt and x.is_cuda
    # 16-bit: each pair is fma(xa, ca, -(xb sa)) in float32 with an exact product (11 x 11
    # bits at most), rounded to float32 and then to the storage type. A correctly rounded
    # value is within half an ulp: 2**-11 relative for float16 (11 significant bits), 2**-8
    # for bfloat16 (8 significant bits); the float32 rounding before it adds at most 2**-24
    # relative, inside the 1.01. float32: rounding of the products too (no relative bound
    # under cancellation, hence the atol).
    rel = {"float32": 2**-24, "bfloat16": 2**-8, "float16": 2**-11}[dtype]
    atol = {"float32": 2e-6, "bfloat16": 0.0, "float16": 2**-24}[dtype]
    assert bool(((x.double() - exact).abs() <= exact.abs() * rel * 1.01 + atol).all())


def test_torch_cuda_respects_current_stream_and_grad(torch_cuda):
    torch = torch_cuda
    import array_api_compat.torch as txp

    x = torch.randn(4, 128, 8, 64, device="cuda")
    inv, _ = arrpos.rope_frequencies(64, xp=torch, device=x.device)
    cos, sin = arrpos.rope_cos_sin(torch.arange(128, device="cuda"), inv)
    c, s = cos[:, None], sin[:, None]
    ref = _xp.apply_rope(x, c, s, layout="half", inverse=False, xp=txp)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = arrpos.apply_rope(x, c, s)
    stream.synchronize()
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    xg = x.clone().requires_grad_(True)
    assert _impl("apply_rope", txp, xg.dtype, xg, c, s) == "_xp"
    arrpos.apply_rope(xg, c, s).sum().backward()
    assert xg.grad is not None


def test_torch_cuda_tables_and_alibi(torch_cuda):
    torch = torch_cuda
    pos = torch.arange(1000, device="cuda")
    got = arrpos.sinusoidal(pos, 64, dtype=torch.float32)
    ref = arrpos.sinusoidal(np.arange(1000), 64, dtype=np.float64)
    assert got.is_cuda and np.max(np.abs(got.cpu().numpy() - ref)) <= 2e-7
    slopes = arrpos.alibi_slopes(8, xp=torch, device=pos.device, dtype=torch.bfloat16)
    bias = arrpos.alibi_bias(slopes, 4, 16)
    exact = arrpos.alibi_bias(slopes.double().cpu().numpy(), 4, 16)
    assert bias.is_cuda and bias.dtype == torch.bfloat16
    np.testing.assert_allclose(bias.double().cpu().numpy(), exact, rtol=2**-8, atol=0)


# ------------------------------------------------------------------------------------------
# apply_rope_cached / apply_rope_qk on a GPU (emulated in tests/test_cuda_emulated.py)


def _widen(t, layout):
    return np.concatenate([t, t], -1) if layout == "half" else np.repeat(t, 2, -1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype, rel", [("float16", 2**-11), ("float32", 2**-24),
                                        ("float64", 2**-53)])
def test_apply_rope_cached_on_gpu(cpb, layout, dtype, rel):
    cp = cpb.module
    rng = np.random.default_rng(20)
    x = rng.uniform(-2, 2, size=(2, 7, 4, 128)).astype(dtype)
    ang = rng.uniform(-6, 6, size=(300, 48))  # R = 96 of 128
    cc, sc = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    ids = rng.integers(0, 300, size=(2, 7, 1))
    got = _cupy.apply_rope_cached(cp.asarray(x), cp.asarray(cc), cp.asarray(sc),
                                  cp.asarray(ids), layout=layout, inverse=False, xp=None)
    i = np.broadcast_to(ids, x.shape[:-1])
    exact = rope_apply_loop(x, _widen(cc[i].astype(np.float64), layout),
                            _widen(sc[i].astype(np.float64), layout), layout)
    err = np.abs(cp.asnumpy(got).astype(np.float64) - exact)
    assert (err <= np.abs(exact) * rel * 1.01 + 8 * 2.0**-24).all()


def test_apply_rope_qk_on_gpu_in_place(cpb):
    cp = cpb.module
    rng = np.random.default_rng(21)
    q = cp.asarray(rng.standard_normal((2, 8, 33, 64)))
    k = cp.asarray(rng.standard_normal((2, 2, 33, 64)))
    cos, sin = _tables(cp, 33, 64, cp.float64)
    qe = rope_apply_loop(cp.asnumpy(q), cp.asnumpy(cos), cp.asnumpy(sin), "half")
    ke = rope_apply_loop(cp.asnumpy(k), cp.asnumpy(cos), cp.asnumpy(sin), "half")
    got = _cupy.apply_rope_qk(q, k, cos, sin, layout="half", inverse=False, xp=None,
                              out=(q, k))
    assert got[0] is q and got[1] is k
    assert np.max(np.abs(cp.asnumpy(q) - qe)) <= 1e-14
    assert np.max(np.abs(cp.asnumpy(k) - ke)) <= 1e-14


def test_cupy_graph_capture(cpb):
    """After the module is built (any first call), the first call with a new frequency set
    and the apply kernels are capturable: launches only, no copy, no synchronisation."""
    cp = cpb.module
    from arrpos._exact import power_frequencies

    pos = cp.arange(64, dtype=cp.float64)
    out = cp.empty((64, 96), cp.float32)
    x = _rand(cp, (64, 2, 96), cp.float32)
    cos, sin = _tables(cp, 64, 96, cp.float32)
    y = cp.empty_like(x)
    _cupy.apply_rope(x, cos[:, None], sin[:, None], layout="half", inverse=False, xp=None,
                     out=y)  # builds the module
    cp.cuda.Device().synchronize()
    hi, lo = power_frequencies(48, 96, 12345.0)  # a frequency set not seen before
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        _cupy.sinusoid_table(pos, hi, lo, layout="split", dtype=cp.float32, width=96,
                             xp=None, out=out)
        _cupy.apply_rope(x, cos[:, None], sin[:, None], layout="half", inverse=False, xp=None,
                         out=y)
        graph = s.end_capture()
    out[...] = 0
    y[...] = 0
    graph.launch(stream=s)
    s.synchronize()
    ref = _xp.sinusoid_table(pos, hi, lo, layout="split", dtype=cp.float32, width=96, xp=cpb.xp)
    assert float(cp.max(cp.abs(out - ref))) <= 2.4e-7
    ref = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    assert float(cp.max(cp.abs(y - ref))) <= 1e-6


def test_torch_cuda_graph_capture(torch_cuda):
    torch = torch_cuda
    from arrpos._backends.cuda import torch_cuda as _torch_cuda

    x = torch.randn(4, 64, 8, 64, device="cuda")
    inv, _ = arrpos.rope_frequencies(64, xp=torch, device=x.device)
    cos, sin = arrpos.rope_cos_sin(torch.arange(64, device="cuda"), inv)
    c, s = cos[:, None], sin[:, None]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph asks: builds the module
        arrpos.apply_rope(x, c, s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = _torch_cuda.apply_rope(x, c, s, layout="half", inverse=False, xp=None)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    ref = arrpos.apply_rope(x, c, s)
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-5)


def test_compile_failure_falls_back_on_gpu(cpb, monkeypatch):
    """A module that cannot be built (here: RawModule made to fail) warns once; the call runs
    the generic code on the GPU and later calls are declined up front."""
    cp, xp = cpb.module, cpb.xp
    if _no_ext():
        pytest.skip("kernels disabled")

    def broken(**kwargs):
        raise RuntimeError("simulated NVRTC failure")

    monkeypatch.setattr(driver, "_MODULES", {})
    monkeypatch.setattr(driver, "_FUNCTIONS", {})
    monkeypatch.setattr(driver, "_FAILED", {})
    monkeypatch.setattr(cp, "RawModule", broken)
    x = _rand(cp, (5, 2, 8), cp.float32)
    cos, sin = _tables(cp, 5, 8, cp.float32)
    with pytest.warns(RuntimeWarning, match="simulated NVRTC failure"):
        got = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    ref = _xp.apply_rope(x, cos[:, None], sin[:, None], layout="half", inverse=False, xp=xp)
    assert float(cp.max(cp.abs(got - ref))) == 0.0
    assert _impl("apply_rope", xp, x.dtype, x, cos[:, None], sin[:, None]) == "_xp"

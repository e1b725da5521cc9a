"""The compiled kernels against the generic implementation on hypothesis-drawn inputs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import array_api_compat.numpy as xp
from arrpos import _dispatch
from arrpos._backends import _xp
from arrpos._exact import power_frequencies, timestep_frequencies

_numpy = _dispatch.adapter("_numpy")
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")

LAYOUTS = ["interleaved", "split", "split_cos"]


def _apply(x, cos, sin, *, layout, inverse, out=None):
    """apply_rope as the dispatcher runs it: the NumPy adapter wherever it serves the call."""
    return _dispatch.call("apply_rope", xp, x, cos, sin, arrays=(x, cos, sin, out),
                          layout=layout, inverse=inverse, out=out)
int_positions = hnp.arrays(
    np.int64,
    hnp.array_shapes(min_dims=0, max_dims=3, max_side=70),
    elements=st.integers(-(2**34), 2**34),  # |p w| < 5e10: the exact range
)
real_positions = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=0, max_dims=2, max_side=40),
    elements=st.floats(-1e7, 1e7, allow_nan=False),
)


def _check(pos, half, base, layout, dtype, extra):
    hi, lo = power_frequencies(half, 2 * half, base)
    width = 2 * half + extra
    a = _numpy.sinusoid_table(pos, hi, lo, layout=layout, dtype=dtype, width=width, xp=xp)
    b = _xp.sinusoid_table(xp.asarray(pos), hi, lo, layout=layout, dtype=dtype, width=width,
                           xp=xp)
    assert a.shape == b.shape == np.shape(pos) + (width,)
    assert a.dtype == b.dtype == dtype
    # both are within ~1e-15 of exact before rounding; float32 may round either side
    tol = 1e-13 if dtype == np.float64 else 1.2e-7
    np.testing.assert_allclose(a, b, rtol=0, atol=tol)


@settings(max_examples=60, deadline=None)
@given(pos=int_positions, half=st.integers(1, 40), base=st.sampled_from([100.0, 10000.0, 5e5]),
       layout=st.sampled_from(LAYOUTS), dtype=st.sampled_from([np.float32, np.float64]),
       extra=st.integers(0, 1))
def test_sinusoid_integer_positions(pos, half, base, layout, dtype, extra):
    _check(pos, half, base, layout, dtype, extra)


@settings(max_examples=40, deadline=None)
@given(pos=real_positions, half=st.integers(1, 24), layout=st.sampled_from(LAYOUTS),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_sinusoid_real_positions(pos, half, layout, dtype):
    _check(pos, half, 10000.0, layout, dtype, 0)


@settings(max_examples=20, deadline=None)
@given(start=st.integers(0, 2**24), n=st.integers(1, 3000))
def test_sinusoid_long_runs_cross_many_blocks(start, n):
    """Consecutive positions exercise the block-to-block recurrence and its re-anchoring."""
    _check(np.arange(start, start + n), 16, 10000.0, "interleaved", np.float64, 0)


def test_timestep_frequencies_through_kernel():
    hi, lo = timestep_frequencies(64, 10000.0, 1.0, 1.0)
    t = np.arange(1000)
    a = _numpy.sinusoid_table(t, hi, lo, layout="split", dtype=np.float32, width=129, xp=xp)
    b = _xp.sinusoid_table(xp.asarray(t), hi, lo, layout="split", dtype=np.float32, width=129,
                           xp=xp)
    np.testing.assert_allclose(a, b, rtol=0, atol=1.2e-7)


def test_kernel_checks_shapes():
    """A wrong call to the raw kernel raises before touching memory."""
    from arrpos._backends import _cpu

    hi, lo = power_frequencies(4, 8, 10000.0)
    rc, rs, pc, ps = _numpy._rotation_tables(hi.tobytes(), lo.tobytes())
    pos = np.arange(10.0)
    work = np.empty((1, 16))
    with pytest.raises(ValueError, match="out"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((9, 8), np.float32), 0, 1)
    with pytest.raises(ValueError, match="out"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((10, 6), np.float32), 0, 1)
    with pytest.raises(ValueError, match="layout"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((10, 8), np.float32), 5, 1)
    with pytest.raises(ValueError, match="work"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((10, 8), np.float32), 0, 4)
    with pytest.raises(ValueError):  # non-contiguous output is refused by the memoryview
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work,
                            np.empty((10, 16), np.float32)[:, ::2], 0, 1)


# ---- RoPE kernels --------------------------------------------------------------------------

ROPE_LAYOUTS = ["half", "interleaved"]


@st.composite
def rope_case(draw):
    """x of 1-6 axes with a random axis order (non-contiguous leading strides), cos/sin of
    a narrower or equal rotary width that broadcast over some leading axes."""
    ndim = draw(st.integers(1, 6))
    lead = draw(st.lists(st.integers(1, 4), min_size=ndim - 1, max_size=ndim - 1))
    half_r = draw(st.integers(1, 12))
    extra = draw(st.integers(0, 6))
    d = 2 * half_r + extra
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    base = rng.normal(size=tuple(lead) + (d,)).astype(dtype)
    perm = draw(st.permutations(range(ndim - 1))) if ndim > 1 else []
    x = np.transpose(np.ascontiguousarray(np.transpose(base, list(perm) + [ndim - 1])),
                     list(np.argsort(perm)) + [ndim - 1]) if ndim > 1 else base
    # cos/sin: size 1 (broadcast) on a random subset of leading axes, maybe fewer axes
    cshape = [1 if draw(st.booleans()) else n for n in lead]
    drop = draw(st.integers(0, len(cshape)))
    cshape = tuple(cshape[drop:]) + (2 * half_r,)
    cos = rng.normal(size=cshape).astype(dtype)
    sin = rng.normal(size=cshape).astype(dtype)
    if draw(st.booleans()):
        for a in (x, cos, sin):
            a.flags.writeable = False
    return x, cos, sin


@settings(max_examples=80, deadline=None)
@given(case=rope_case(), layout=st.sampled_from(ROPE_LAYOUTS), inverse=st.booleans())
def test_apply_rope_out_of_place(case, layout, inverse):
    x, cos, sin = case
    a = _apply(x, cos, sin, layout=layout, inverse=inverse)
    b = _xp.apply_rope(xp.asarray(x), cos, sin, layout=layout, inverse=inverse, xp=xp)
    assert a.shape == x.shape and a.dtype == x.dtype
    tol = 1e-13 if x.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(a, b, rtol=0, atol=tol)


@settings(max_examples=60, deadline=None)
@given(case=rope_case(), layout=st.sampled_from(ROPE_LAYOUTS), inverse=st.booleans())
def test_apply_rope_in_place(case, layout, inverse):
    x, cos, sin = case
    x = x.copy()  # writable, C-contiguous
    ref = _xp.apply_rope(xp.asarray(x.copy()), cos, sin, layout=layout, inverse=inverse, xp=xp)
    got = _apply(x, cos, sin, layout=layout, inverse=inverse, out=x)
    assert got is x
    tol = 1e-13 if x.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(x, ref, rtol=0, atol=tol)


def test_apply_rope_strided_in_place_view():
    """In place on a non-contiguous view (a head slice of a fused qkv buffer)."""
    rng = np.random.default_rng(1)
    qkv = rng.normal(size=(2, 7, 3, 4, 16)).astype(np.float32)
    q = qkv[:, :, 0]  # (2, 7, 4, 16), strides skip k and v
    cos = rng.normal(size=(7, 1, 16)).astype(np.float32)
    sin = rng.normal(size=(7, 1, 16)).astype(np.float32)
    ref = _xp.apply_rope(xp.asarray(q.copy()), cos, sin, layout="half", inverse=False, xp=xp)
    k_before = qkv[:, :, 1].copy()
    _apply(q, cos, sin, layout="half", inverse=False, out=q)
    np.testing.assert_allclose(qkv[:, :, 0], ref, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(qkv[:, :, 1], k_before)  # neighbours untouched


def test_apply_rope_large_streaming_and_threads():
    """Above the streaming threshold and the thread threshold (2 threads where available)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 256, 32, 128)).astype(np.float32)  # 8 MiB
    cos = rng.normal(size=(256, 1, 128)).astype(np.float32)
    sin = rng.normal(size=(256, 1, 128)).astype(np.float32)
    for layout in ROPE_LAYOUTS:
        a = _apply(x, cos, sin, layout=layout, inverse=False)
        b = _xp.apply_rope(xp.asarray(x), cos, sin, layout=layout, inverse=False, xp=xp)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_apply_rope_declines_what_it_cannot_serve():
    """Mixed dtypes (other than float32 x with float64 tables, which the kernel serves after
    rounding the tables) and a non-contiguous last axis go to the generic path."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 4, 16))
    cos32 = rng.normal(size=(4, 16)).astype(np.float32)
    assert not _numpy.supports("apply_rope", (x, cos32, cos32, None))
    a = _apply(x, cos32, cos32, layout="half", inverse=False)
    b = _xp.apply_rope(xp.asarray(x), cos32, cos32, layout="half", inverse=False, xp=xp)
    np.testing.assert_array_equal(a, b)
    x32, cos64 = x.astype(np.float32), rng.normal(size=(4, 16))
    assert _numpy.supports("apply_rope", (x32, cos64, cos64, None))
    a = _apply(x32, cos64, cos64, layout="half", inverse=False)
    b = _xp.apply_rope(xp.asarray(x32), cos64, cos64, layout="half", inverse=False, xp=xp)
    np.testing.assert_allclose(a, b, rtol=0, atol=4e-6)  # tables rounded to float32 first
    xs = rng.normal(size=(3, 4, 32)).astype(np.float32)[..., ::2]
    c = rng.normal(size=(4, 16)).astype(np.float32)
    assert not _numpy.supports("apply_rope", (xs, c, c, None))
    a = _apply(xs, c, c, layout="interleaved", inverse=True)
    b = _xp.apply_rope(xp.asarray(xs), c, c, layout="interleaved", inverse=True, xp=xp)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


@settings(max_examples=50, deadline=None)
@given(pos=int_positions, half=st.integers(1, 40), layout=st.sampled_from(ROPE_LAYOUTS),
       dtype=st.sampled_from([np.float32, np.float64]),
       factor=st.sampled_from([1.0, 1.2, 0.5]), base=st.sampled_from([1e4, 5e5]))
def test_rope_cos_sin_tables(pos, half, layout, dtype, factor, base):
    inv = (1.0 / base ** (np.arange(half) * 2.0 / (2 * half))).astype(np.float32)
    a = _numpy.rope_cos_sin(pos, inv, layout=layout, attention_factor=factor, axes=None,
                            dtype=dtype, xp=xp)
    b = _xp.rope_cos_sin(xp.asarray(pos), xp.asarray(inv), layout=layout,
                         attention_factor=factor, axes=None, dtype=dtype, xp=xp)
    tol = 1e-13 if dtype == np.float64 else 1.2e-7 * max(1.0, factor)
    for u, v in zip(a, b):
        assert u.shape == v.shape == np.shape(pos) + (2 * half,) and u.dtype == dtype
        np.testing.assert_allclose(u, v, rtol=0, atol=tol)


@settings(max_examples=30, deadline=None)
@given(pos=real_positions, half=st.integers(1, 16), layout=st.sampled_from(ROPE_LAYOUTS))
def test_rope_cos_sin_real_positions(pos, half, layout):
    inv = 1.0 / 1e4 ** (np.arange(half) * 2.0 / (2 * half))
    a = _numpy.rope_cos_sin(pos, inv, layout=layout, attention_factor=1.0, axes=None,
                            dtype=np.float64, xp=xp)
    b = _xp.rope_cos_sin(xp.asarray(pos), xp.asarray(inv), layout=layout,
                         attention_factor=1.0, axes=None, dtype=np.float64, xp=xp)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-13)


def test_rope_kernels_check_shapes():
    from arrpos._backends import _cpu

    x = np.zeros((1, 2, 3, 8), np.float32)
    c = np.zeros((1, 2, 3, 8), np.float32)
    w = np.zeros((1, 8), np.float32)
    with pytest.raises(ValueError, match="rotary width"):
        _cpu.apply_rope(x, c[..., :3], c[..., :3], x.copy(), w, False, False, False, 1)
    with pytest.raises(ValueError, match="sin"):
        _cpu.apply_rope(x, c, c[:, :, :2], x.copy(), w, False, False, False, 1)
    with pytest.raises(ValueError, match="out"):
        _cpu.apply_rope(x, c, c, np.zeros((1, 2, 3, 6), np.float32), w, False, False, False, 1)
    with pytest.raises(ValueError, match="contiguous"):
        _cpu.apply_rope(np.zeros((1, 2, 3, 16), np.float32)[..., ::2], c, c, x.copy(), w,
                        False, False, False, 1)
    with pytest.raises(ValueError, match="inplace"):
        _cpu.apply_rope(x, c, c, x.copy(), w, False, False, True, 1)
    with pytest.raises(ValueError, match="work"):
        _cpu.apply_rope(x, c, c, x.copy(), w, False, False, False, 3, True)
    with pytest.raises(ValueError, match="nthreads"):
        _cpu.apply_rope(x, c, c, x.copy(), None, False, False, False, 0)


_STREAM_SCRIPT = """
import numpy as np, array_api_compat.numpy as xp
from arrpos._backends import _numpy, _xp


def at_offset(shape, dt, offset):
    # an output whose data starts `offset` bytes past a 64-byte boundary
    n = int(np.prod(shape)) * np.dtype(dt).itemsize
    return _numpy.aligned_empty((n + 64,), np.uint8)[offset:offset + n].view(dt).reshape(shape)


rng = np.random.default_rng(5)
for dt in (np.float32, np.float64):
    x = rng.normal(size=(4, 128, 32, 128)).astype(dt)   # >= 8 MiB: streaming stores
    cos = rng.normal(size=(128, 1, 96)).astype(dt)        # partial rotary: 32 pass-through
    sin = rng.normal(size=(128, 1, 96)).astype(dt)
    tol = 1e-5 if dt == np.float32 else 1e-12
    for layout in ("half", "interleaved"):
        ref = _xp.apply_rope(xp.asarray(x), cos, sin, layout=layout, inverse=True, xp=xp)
        got = _numpy.apply_rope(x, cos, sin, layout=layout, inverse=True, xp=xp)
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
        # full-width stores, 16-byte pieces, and the portable rows with a scratch row
        for offset in (0, 16, np.dtype(dt).itemsize):
            out = at_offset(x.shape, dt, offset)
            _numpy.apply_rope(x, cos, sin, layout=layout, inverse=True, xp=xp, out=out)
            np.testing.assert_allclose(out, ref, rtol=0, atol=tol, err_msg=f"offset {offset}")
print("ok")
"""


@pytest.mark.parametrize("level", ["0", "1", "2"])
def test_streaming_paths_at_every_simd_level(level):
    """The portable, AVX2 and AVX-512 streaming rows (as far as the CPU has them), with
    64-byte aligned, 16-byte aligned and unaligned outputs, agree with the generic path."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, ARRPOS_SIMD_LEVEL=level)
    res = subprocess.run([sys.executable, "-c", _STREAM_SCRIPT], env=env, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "ok"

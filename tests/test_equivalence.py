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

_numpy = _dispatch.front_end("host.numpy")
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")

LAYOUTS = ["interleaved", "split", "split_cos"]


def _apply(x, cos, sin, *, layout, inverse, out=None):
    """apply_rope as the dispatcher runs it: the NumPy front-end wherever it serves the call."""
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


@settings(max_examples=30, deadline=None)
@given(pos=int_positions, half=st.integers(1, 40), dtype=st.sampled_from([np.float32, np.float64]))
def test_sinusoid_odd_interleaved_width(pos, half, dtype):
    """Odd widths (keras-hub): the compiled twin drops the last cosine like the generic one."""
    _check(pos, half, 10000.0, "interleaved", dtype, -1)

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
    rc, rs, pc, ps = _dispatch.driver("host").rotation_tables(hi.tobytes(), lo.tobytes())
    pos = np.arange(10.0)
    f32 = _cpu.F32
    with pytest.raises(ValueError, match="out"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, np.empty((9, 8), np.float32), f32, 0)
    with pytest.raises(ValueError, match="out"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, np.empty((10, 6), np.float32), f32, 0)
    with pytest.raises(ValueError, match="out"):  # wrong element type for the code
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, np.empty((10, 8)), f32, 0)
    with pytest.raises(ValueError, match="layout"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, np.empty((10, 8), np.float32), f32, 5)
    with pytest.raises(ValueError, match="nthreads"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, np.empty((10, 8), np.float32), f32, 0,
                            0)
    with pytest.raises(ValueError, match="out"):  # non-contiguous output
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo,
                            np.empty((10, 16), np.float32)[:, ::2], f32, 0)


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


def test_apply_rope_mixed_and_strided():
    """float32 x with float64 tables (the README's flow) reaches the kernel (tables converted
    once); a non-contiguous last axis is refused late and served by the generic path."""
    from arrpos._backends import Unsupported, _cpu

    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 4, 16)).astype(np.float32)
    ang = rng.uniform(-3, 3, size=(4, 16))
    cos64, sin64 = np.cos(ang), np.sin(ang)
    assert _numpy.supports("apply_rope", (x, cos64, sin64, None))
    a = _numpy.apply_rope(x, cos64, sin64, layout="half", inverse=False, xp=xp)
    b = _xp.apply_rope(xp.asarray(x), cos64, sin64, layout="half", inverse=False, xp=xp)
    assert a.dtype == b.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    xs = rng.normal(size=(3, 4, 32)).astype(np.float32)[..., ::2]
    c = rng.normal(size=(4, 16)).astype(np.float32)
    with pytest.raises(Unsupported):
        _cpu.apply_rope(xs, c, c, np.empty(xs.shape, np.float32), _cpu.F32, _cpu.F32, True,
                        True)
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
    """The raw kernel refuses (Unsupported, nothing written) what it cannot serve."""
    from arrpos._backends import Unsupported, _cpu

    f32 = _cpu.F32
    x = np.zeros((1, 2, 3, 8), np.float32)
    c = np.zeros((1, 2, 3, 8), np.float32)
    buf = np.arange(49, dtype=np.float32)
    bad = [
        (x, c[..., :3], c[..., :3], x.copy(), f32),  # odd rotary width
        (x, c, c[:, :, :2], x.copy(), f32),  # sin's shape differs from cos's
        (x, c, c, np.zeros((1, 2, 3, 6), np.float32), f32),  # out's shape
        (np.zeros((1, 2, 3, 16), np.float32)[..., ::2], c, c, x.copy(), f32),  # strided rows
        (x, c, c, x.astype(np.float64), f32),  # out's dtype
        (buf[:48].reshape(x.shape), c, c, buf[1:].reshape(x.shape), f32),  # out overlaps x
        (x.astype(np.float64), c, c, x.astype(np.float64), _cpu.F64),  # table type mismatch
        (x, np.zeros((5, 2, 3, 8), np.float32), np.zeros((5, 2, 3, 8), np.float32), x.copy(),
         f32),  # tables would broadcast x
    ]
    for args in bad:
        out = args[3]
        before = out.copy()
        with pytest.raises(Unsupported):
            _cpu.apply_rope(*args[:4], args[4], _cpu.F32, False, False)
        np.testing.assert_array_equal(out, before)
    shared = np.zeros((1, 2, 1, 8), np.float32)
    expanded = np.lib.stride_tricks.as_strided(shared, (1, 2, 3, 8), (64, 32, 0, 4))
    with pytest.raises(Unsupported):  # a stride-0 out (in place or not) is refused
        _cpu.apply_rope(expanded, c, c, expanded, f32, f32, False, False)
    ro = x.copy()
    ro.flags.writeable = False
    with pytest.raises(Unsupported):
        _cpu.apply_rope(x, c, c, ro, f32, f32, False, False)


def aligned_empty(shape, dtype, align=64):
    """An empty array whose data starts on an ``align``-byte boundary."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.empty(n + align, dtype=np.uint8)
    start = (-buf.ctypes.data) % align
    return buf[start:start + n].view(dtype).reshape(shape)


_STREAM_SCRIPT = """
import numpy as np, array_api_compat.numpy as xp
from arrpos._backends import _xp
from arrpos._backends.host import numpy as _numpy


def at_offset(shape, dt, offset):
    # an output whose data starts `offset` bytes past a 64-byte boundary
    n = int(np.prod(shape)) * np.dtype(dt).itemsize
    buf = np.empty(n + 128, dtype=np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    return buf[start:start + n].view(dt).reshape(shape)


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


@pytest.mark.parametrize("level", ["0", "1", "2", "3"])
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


# ---- 16-bit storage, tables of another type, fused gather, q and k together ------------------

import ml_dtypes  # noqa: E402  (installed with the test extras; NumPy's bfloat16)

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
# relative spacing of each storage type: the kernels compute in float32 (16-bit) and round once
EPS = {np.dtype(np.float32): 2.0**-22, np.dtype(np.float64): 2.0**-50, F16: 2.0**-10,
       BF16: 2.0**-7}


def _widen(a):
    return np.asarray(a).astype(np.float64)


def _rope64(x, cos, sin, layout, inverse):
    """The float64 formula on widened inputs (independent of the code under test)."""
    x, cos, sin = _widen(x), _widen(cos), _widen(sin)
    r = cos.shape[-1]
    xr = x[..., :r]
    if layout == "half":
        rot = np.concatenate([-xr[..., r // 2:], xr[..., :r // 2]], axis=-1)
    else:
        rot = np.stack([-xr[..., 1::2], xr[..., ::2]], axis=-1).reshape(xr.shape)
    y = xr * cos - rot * sin if inverse else xr * cos + rot * sin
    return np.concatenate([y, np.broadcast_to(x[..., r:], y.shape[:-1] + (x.shape[-1] - r,))],
                          axis=-1), np.abs(xr) * np.abs(cos) + np.abs(rot) * np.abs(sin)


def _close(got, x, cos, sin, layout, inverse):
    """got within one rounding of its storage type (plus float32 work) of the float64 result."""
    ref, mag = _rope64(x, cos, sin, layout, inverse)
    r = cos.shape[-1]
    eps = EPS[np.dtype(got.dtype)]
    err = np.abs(_widen(got) - ref)
    tol = np.concatenate([eps * np.maximum(np.abs(ref[..., :r]), mag) + 1e-30,
                          np.zeros(ref.shape[:-1] + (ref.shape[-1] - r,))], axis=-1)
    assert got.shape == ref.shape and got.dtype == x.dtype
    assert (err <= tol).all(), f"max excess {(err - tol).max()}"


@st.composite
def rope16_case(draw):
    """rope_case with any storage type for x and a table type drawn separately."""
    dtype = draw(st.sampled_from([F16, BF16, np.dtype(np.float32), np.dtype(np.float64)]))
    tdtype = draw(st.sampled_from([dtype, np.dtype(np.float32), np.dtype(np.float64)]))
    x, cos, sin = draw(rope_case())
    return x.astype(dtype), cos.astype(tdtype), sin.astype(tdtype)


@settings(max_examples=80, deadline=None)
@given(case=rope16_case(), layout=st.sampled_from(ROPE_LAYOUTS), inverse=st.booleans(),
       inplace=st.booleans())
def test_apply_rope_every_storage_type(case, layout, inverse, inplace):
    x, cos, sin = case
    if inplace:
        x = x.copy()
        before = x.copy()
        got = _numpy.apply_rope(x, cos, sin, layout=layout, inverse=inverse, xp=xp, out=x)
        assert got is x
        _close(x, before, cos, sin, layout, inverse)
    else:
        _close(_numpy.apply_rope(x, cos, sin, layout=layout, inverse=inverse, xp=xp),
               x, cos, sin, layout, inverse)


def test_sixteen_bit_rounding_is_to_nearest_even():
    """Products that land exactly between two 16-bit values round to the even one."""
    # x * 1 + 0 * s: exact ties of the storage grid come from x itself, so build ties in x's
    # float32 product: x = 1 + 2**-11 (float16 tie) through cos = 1 + 2**-11, x = 1
    for dt, half_ulp in ((F16, 2.0**-11), (BF16, 2.0**-8)):
        x = np.ones((1, 4), dtype=dt)
        cos = np.full((1, 4), 1 + half_ulp, dtype=np.float32)
        cos[0, 1] = 1 + 3 * half_ulp  # tie above an odd value: rounds up
        sin = np.zeros((1, 4), dtype=np.float32)
        got = _widen(_numpy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=xp))
        np.testing.assert_array_equal(got[0], [1.0, 1 + 4 * half_ulp, 1.0, 1.0])


@settings(max_examples=40, deadline=None)
@given(pos=int_positions, half=st.integers(1, 24), layout=st.sampled_from(LAYOUTS),
       dtype=st.sampled_from([F16, BF16]))
def test_sinusoid_into_sixteen_bits(pos, half, layout, dtype):
    """Rounded once from the exact table: equal to the float64 table rounded (1 ulp where the
    reference conversion itself may round twice)."""
    hi, lo = power_frequencies(half, 2 * half, 10000.0)
    a = _numpy.sinusoid_table(pos, hi, lo, layout=layout, dtype=dtype, width=2 * half, xp=xp)
    b = _xp.sinusoid_table(xp.asarray(pos), hi, lo, layout=layout, dtype=np.float64,
                           width=2 * half, xp=xp)
    assert a.dtype == dtype
    if dtype == F16:
        np.testing.assert_array_equal(_widen(a), _widen(b.astype(F16)))
    else:
        np.testing.assert_allclose(_widen(a), b, rtol=0, atol=2.0**-9)


@settings(max_examples=30, deadline=None)
@given(pos=int_positions, half=st.integers(1, 24), layout=st.sampled_from(ROPE_LAYOUTS),
       dtype=st.sampled_from([F16, BF16]))
def test_rope_cos_sin_into_sixteen_bits(pos, half, layout, dtype):
    inv = 1.0 / 1e4 ** (np.arange(half) * 2.0 / (2 * half))
    a = _numpy.rope_cos_sin(pos, inv, layout=layout, attention_factor=1.0, axes=None,
                            dtype=dtype, xp=xp)
    b = _xp.rope_cos_sin(xp.asarray(pos), xp.asarray(inv), layout=layout, attention_factor=1.0,
                         axes=None, dtype=np.float64, xp=xp)
    for u, v in zip(a, b):
        assert u.dtype == dtype and u.shape == v.shape
        np.testing.assert_allclose(_widen(u), v, rtol=0, atol=2.0**-11 if dtype == F16 else 2.0**-8)


def cached_reference(x, cos_cache, sin_cache, position_ids, *, layout, inverse):
    """apply_rope_cached by its definition (API.md): gather the half-width rows, widen them to
    the layout, apply the float64 formula. Returns (result, magnitude) in float64."""
    c = _widen(cos_cache)[position_ids]
    s = _widen(sin_cache)[position_ids]
    if layout == "half":
        c, s = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)
    else:
        c, s = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
    return c, s


@st.composite
def cached_case(draw):
    """x of 1-5 axes (random axis order), position ids broadcasting against x.shape[:-1]
    (size-1 axes, fewer axes), half-width caches of any storage type."""
    ndim = draw(st.integers(1, 5))
    lead = draw(st.lists(st.integers(1, 4), min_size=ndim - 1, max_size=ndim - 1))
    half_r = draw(st.integers(1, 40))
    d = 2 * half_r + draw(st.integers(0, 5))
    dtype = draw(st.sampled_from([F16, BF16, np.dtype(np.float32), np.dtype(np.float64)]))
    tdtype = draw(st.sampled_from([dtype, np.dtype(np.float32), np.dtype(np.float64)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    x = rng.normal(size=tuple(lead) + (d,)).astype(dtype)
    if ndim > 2 and draw(st.booleans()):  # non-contiguous leading axes
        x = np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 0, 1)), 0, 1)
    pshape = [1 if draw(st.booleans()) else n for n in lead]
    pshape = tuple(pshape[draw(st.integers(0, len(pshape))):])
    npos = draw(st.integers(1, 50))
    pos = rng.integers(0, npos, size=pshape).astype(draw(st.sampled_from([np.int64, np.int32])))
    ang = rng.uniform(-4, 4, size=(npos, half_r))
    return x, np.cos(ang).astype(tdtype), np.sin(ang).astype(tdtype), pos


@settings(max_examples=80, deadline=None)
@given(case=cached_case(), layout=st.sampled_from(ROPE_LAYOUTS), inverse=st.booleans(),
       inplace=st.booleans())
def test_apply_rope_cached_fused_gather(case, layout, inverse, inplace):
    x, cc, sc, pos = case
    c, s = cached_reference(x, cc, sc, pos, layout=layout, inverse=inverse)
    if inplace:
        x = x.copy()
        before = x.copy()
        got = _numpy.apply_rope_cached(x, cc, sc, pos, layout=layout, inverse=inverse, xp=xp,
                                       out=x)
        assert got is x
        _close(x, before, c, s, layout, inverse)
    else:
        got = _numpy.apply_rope_cached(x, cc, sc, pos, layout=layout, inverse=inverse, xp=xp)
        _close(got, x, c, s, layout, inverse)


def test_apply_rope_cached_per_sequence_positions_and_bad_ids():
    """32 sequences, each at its own position (a decode batch); ids outside the cache raise."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(32, 1, 8, 128)).astype(np.float32)
    ang = rng.uniform(-4, 4, size=(4096, 64))
    cc, sc = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = rng.integers(0, 4096, size=(32, 1, 1))
    got = _numpy.apply_rope_cached(x, cc, sc, pos, layout="half", inverse=False, xp=xp)
    c, s = cached_reference(x, cc, sc, pos, layout="half", inverse=False)
    _close(got, x, c, s, "half", False)
    for bad in (-1, 4096):
        p = pos.copy()
        p[3] = bad
        out = np.zeros_like(x)
        with pytest.raises(ValueError, match="position_ids"):
            _numpy.apply_rope_cached(x, cc, sc, p, layout="half", inverse=False, xp=xp, out=out)
        assert not out.any()  # nothing written


def test_apply_rope_cached_large_threads_and_streaming():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2, 512, 16, 128)).astype(np.float32)  # 8 MiB: streaming, 2 threads
    ang = rng.uniform(-4, 4, size=(600, 48))  # partial rotary: R = 96
    cc, sc = np.cos(ang), np.sin(ang)
    pos = rng.integers(0, 600, size=(2, 512, 1))
    for layout in ROPE_LAYOUTS:
        got = _numpy.apply_rope_cached(x, cc.astype(np.float32), sc.astype(np.float32), pos,
                                       layout=layout, inverse=True, xp=xp)
        c, s = cached_reference(x, cc.astype(np.float32), sc.astype(np.float32), pos,
                                layout=layout, inverse=True)
        _close(got, x, c, s, layout, True)


@settings(max_examples=40, deadline=None)
@given(heads=st.tuples(st.integers(1, 6), st.integers(1, 6)), half_r=st.integers(1, 20),
       extra=st.integers(0, 4), layout=st.sampled_from(ROPE_LAYOUTS), inverse=st.booleans(),
       dtype=st.sampled_from([F16, BF16, np.dtype(np.float32), np.dtype(np.float64)]),
       with_out=st.booleans(), seed=st.integers(0, 2**31))
def test_apply_rope_qk(heads, half_r, extra, layout, inverse, dtype, with_out, seed):
    """q and k (k with its own head count) in one call equal two separate rotations."""
    rng = np.random.default_rng(seed)
    d = 2 * half_r + extra
    q = rng.normal(size=(2, 5, heads[0], d)).astype(dtype)
    k = rng.normal(size=(2, 5, heads[1], d)).astype(dtype)
    ang = rng.uniform(-4, 4, size=(5, 1, 2 * half_r))
    cos, sin = np.cos(ang), np.sin(ang)
    out = (np.empty_like(q), np.empty_like(k)) if with_out else None
    qo, ko = _numpy.apply_rope_qk(q, k, cos, sin, layout=layout, inverse=inverse, xp=xp,
                                  out=out)
    if with_out:
        assert qo is out[0] and ko is out[1]
    # the tables are converted to float32 for 16-bit and float32 x (the kernel's table type)
    tdt = np.float64 if dtype == np.float64 else np.float32
    _close(qo, q, cos.astype(tdt), sin.astype(tdt), layout, inverse)
    _close(ko, k, cos.astype(tdt), sin.astype(tdt), layout, inverse)


def test_torch_sixteen_bit_tensors_through_dlpack():
    """torch float16 / bfloat16 CPU tensors reach the kernels (bfloat16 as int16 bits)."""
    torch = pytest.importorskip("torch")
    tmod = _dispatch.front_end("host.torch_cpu")
    rng = np.random.default_rng(9)
    x64 = rng.normal(size=(2, 6, 4, 32))
    ang = rng.uniform(-4, 4, size=(6, 1, 32))
    for tdt, ndt in ((torch.float16, F16), (torch.bfloat16, BF16)):
        x = torch.from_numpy(x64).to(tdt)
        cos, sin = torch.from_numpy(np.cos(ang)).float(), torch.from_numpy(np.sin(ang)).float()
        assert tmod.supports("apply_rope", (x, cos, sin, None), layout="half", inverse=False)
        got = tmod.apply_rope(x, cos, sin, layout="half", inverse=False, xp=None)
        assert got.dtype == tdt
        xn = x.float().numpy().astype(ndt)
        got_n = got.float().numpy().astype(ndt)
        _close(got_n, xn, cos.numpy(), sin.numpy(), "half", False)
        ptr = x.data_ptr()
        tmod.apply_rope(x, cos, sin, layout="interleaved", inverse=True, xp=None, out=x)
        assert x.data_ptr() == ptr
        _close(x.float().numpy().astype(ndt), xn, cos.numpy(), sin.numpy(), "interleaved", True)
        pos = torch.tensor([[3], [0]])
        cc, sc = torch.from_numpy(np.cos(ang[:, 0, :16])).to(tdt), torch.from_numpy(
            np.sin(ang[:, 0, :16])).to(tdt)
        got = tmod.apply_rope_cached(x[:, :1, 0], cc, sc, pos, layout="half", inverse=False,
                                     xp=None)
        c, s = cached_reference(None, cc.float().numpy(), sc.float().numpy(), pos.numpy(),
                                layout="half", inverse=False)
        _close(got.float().numpy().astype(ndt), x[:, :1, 0].float().numpy().astype(ndt), c, s,
               "half", False)


def test_large_outputs_reuse_blocks_without_sharing_live_memory():
    """Allocating calls from 8 MiB get reusable blocks: live results never share memory, a
    released block serves the next call, and every result is right."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=(2, 512, 16, 128)).astype(np.float32)  # 8 MiB
    ang = rng.uniform(-3, 3, size=(512, 1, 128))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    a = _numpy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=xp)
    b = _numpy.apply_rope(x, cos, sin, layout="half", inverse=True, xp=xp)
    assert not np.may_share_memory(a, b)
    assert a.flags.writeable and a.flags.c_contiguous and a.ctypes.data % 64 == 0
    _close(a, x, cos, sin, "half", False)
    _close(b, x, cos, sin, "half", True)
    ptr = b.ctypes.data
    del b
    c = _numpy.apply_rope(x, cos, sin, layout="interleaved", inverse=False, xp=xp)
    assert c.ctypes.data == ptr  # the released block came back
    _close(c, x, cos, sin, "interleaved", False)
    _close(a, x, cos, sin, "half", False)  # untouched by the later calls

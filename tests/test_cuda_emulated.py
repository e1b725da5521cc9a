"""The CUDA kernels, their driver and front-ends, run on the CPU without a GPU
(tests/cuda_emulation.py).

The kernels' index arithmetic, layouts, strides, broadcasting, in-place and partial rotation,
the 16-bit conversions, the driver's argument marshalling and memory guards are checked here
against the generic ``_xp`` code and float64 references; tests/test_cupy.py repeats the comparisons on a
real GPU where there is one.
"""
from __future__ import annotations

import sys

import array_api_compat.numpy as npx
import numpy as np
import pytest

from arrpos._backends import Unsupported, _xp
from arrpos._backends.cuda import cupy as _cupy
from arrpos._backends.cuda import driver, tap_blocks
from arrpos._exact import power_frequencies

import cuda_emulation
from reference import rope_apply_loop


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    try:
        return cuda_emulation.build(tmp_path_factory.mktemp("cuda_emulation"))
    except RuntimeError as exc:
        pytest.skip(f"CUDA emulation unavailable: {exc}")


def _clear_caches():
    driver.forget()


@pytest.fixture
def cp(emulator, monkeypatch):
    """A NumPy-backed ``cupy`` whose kernels run in the emulator (caches reset around it)."""
    fake = cuda_emulation.FakeCupy(emulator)
    _clear_caches()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    yield fake
    _clear_caches()


def _bf16_bits(a):
    """float32 -> bfloat16 bits (round to nearest even) as int16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).view(np.int16)


def _bf16_value(bits):
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _ulps(dtype):
    return {np.float64: 4e-16, np.float32: 1.2e-7, np.float16: 1e-3}[dtype]


# ------------------------------------------------------------------------------------------
# tables


@pytest.mark.parametrize("layout", ["interleaved", "split", "split_cos"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sinusoid_table_matches_generic(cp, layout, dtype):
    hi, lo = power_frequencies(6, 12, 10000.0)
    pos = np.array([[0, 1, 2], [1000, 65535, 2**24]], dtype=np.int64)
    got = _cupy.sinusoid_table(cp.asfake(pos), hi, lo, layout=layout, dtype=dtype, width=14,
                               xp=cp)
    ref = _xp.sinusoid_table(pos, hi, lo, layout=layout, dtype=dtype, width=14, xp=npx)
    assert got.shape == (2, 3, 14) and got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got), ref, rtol=0, atol=2 * _ulps(dtype))
    assert not np.asarray(got)[..., 12:].any()  # padding columns are zero
    cxx = driver.CXX_TYPES[np.dtype(dtype).name]
    assert cp.launches and cp.launches[-1][0] == f"arrpos::sinusoid_table<{cxx}>"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sinusoid_odd_interleaved_width_in_the_kernel(cp, dtype):
    """An odd interleaved width 2F - 1 (keras-hub): one launch writes whole pairs but the last
    cosine, which falls outside the row; the rest equals the even table."""
    hi, lo = power_frequencies(5, 9, 10000.0)
    pos = np.array([0, 3, 70000], dtype=np.int64)
    got = _cupy.sinusoid_table(cp.asfake(pos), hi, lo, layout="interleaved", dtype=dtype,
                               width=9, xp=cp)
    ref = _xp.sinusoid_table(pos, hi, lo, layout="interleaved", dtype=dtype, width=10, xp=npx)
    assert got.shape == (3, 9) and len(cp.launches) == 1
    np.testing.assert_allclose(np.asarray(got), ref[:, :9], rtol=0, atol=2 * _ulps(dtype))
    with pytest.raises(Unsupported):  # rows too narrow for the split layout: nothing launched
        _cupy.sinusoid_table(cp.asfake(pos), hi, lo, layout="split", dtype=dtype, width=9, xp=cp)
    assert len(cp.launches) == 1


def test_sinusoid_accuracy_to_2_24(cp):
    """Within 1e-12 (float64) of exact up to 2**24; the exact values come from decimals."""
    import mpmath

    dim = 64
    hi, lo = power_frequencies(dim // 2, dim, 10000.0)
    pos = np.array([2**24, 2**24 - 1, 1_000_000, 123_457.5])
    got = np.asarray(_cupy.sinusoid_table(cp.asfake(pos), hi, lo, layout="split",
                                          dtype=np.float64, width=dim, xp=cp))
    with mpmath.workprec(200):
        for r, p in enumerate(pos):
            for i in range(0, dim // 2, 5):
                ang = mpmath.mpf(float(p)) * (mpmath.mpf(hi[i]) + mpmath.mpf(lo[i]))
                assert abs(got[r, i] - float(mpmath.sin(ang))) < 1e-12
                assert abs(got[r, dim // 2 + i] - float(mpmath.cos(ang))) < 1e-12


def test_sinusoid_out_and_guards(cp):
    """The driver's guards refuse what its kernel cannot write safely (``Unsupported``,
    nothing launched); the user-facing errors are the public layer's (tests/test_absolute.py)."""
    hi, lo = power_frequencies(4, 8, 100.0)
    pos = cp.asfake(np.arange(5))
    out = cp.empty((5, 8), dtype=np.float32)
    got = _cupy.sinusoid_table(pos, hi, lo, layout="split", dtype=np.float32, width=8, xp=cp,
                               out=out)
    assert got is out
    launches = len(cp.launches)
    with pytest.raises(Unsupported):  # an output of another type
        _cupy.sinusoid_table(pos, hi, lo, layout="split", dtype=np.float32, width=8, xp=cp,
                             out=cp.empty((5, 8), dtype=np.float64))
    with pytest.raises(Unsupported):  # an output that is not C-contiguous
        _cupy.sinusoid_table(pos, hi, lo, layout="split", dtype=np.float32, width=8, xp=cp,
                             out=cp.empty((8, 5), dtype=np.float32).T)
    with pytest.raises(Unsupported):  # no float16 table kernel
        _cupy.sinusoid_table(pos, hi, lo, layout="split", dtype=np.float16, width=8, xp=cp)
    with pytest.raises(Unsupported):
        _cupy.sinusoid_table(pos, hi, lo, layout="diagonal", dtype=np.float32, width=8, xp=cp)
    with pytest.raises(Unsupported):  # host memory is not the device's
        _cupy.sinusoid_table(np.arange(5), hi, lo, layout="split", dtype=np.float32, width=8,
                             xp=cp)
    assert len(cp.launches) == launches
    assert not _cupy.supports("sinusoid_table", (pos,), dtype=np.float16, layout="split")
    assert not _cupy.supports("sinusoid_table", (np.arange(5),), dtype=np.float32)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rope_cos_sin_matches_generic(cp, layout, dtype):
    inv = (1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)).astype(np.float32)
    pos = np.array([[0, 7, 4096], [1, 2**20, 3]])
    cos, sin = _cupy.rope_cos_sin(cp.asfake(pos), cp.asfake(inv), layout=layout,
                                  attention_factor=1.25, axes=None, dtype=dtype, xp=cp)
    rc, rs = _xp.rope_cos_sin(pos, inv, layout=layout, attention_factor=1.25, axes=None,
                              dtype=dtype, xp=npx)
    assert cos.shape == (2, 3, 16) and cos.dtype == dtype
    np.testing.assert_allclose(np.asarray(cos), rc, rtol=0, atol=4 * _ulps(dtype))
    np.testing.assert_allclose(np.asarray(sin), rs, rtol=0, atol=4 * _ulps(dtype))
    c2, s2 = cp.empty((2, 3, 16), dtype), cp.empty((2, 3, 16), dtype)
    got = _cupy.rope_cos_sin(cp.asfake(pos), cp.asfake(inv), layout=layout,
                             attention_factor=1.25, axes=None, dtype=dtype, xp=cp, out=(c2, s2))
    assert got[0] is c2 and got[1] is s2
    np.testing.assert_array_equal(np.asarray(c2), np.asarray(cos))


def test_rope_cos_sin_axes_are_declined(cp):
    """Multimodal ``axes`` are the generic code's: the adapter declines them up front."""
    inv = cp.asfake(np.array([1.0, 0.1, 0.01]))
    pos = cp.asfake(np.array([[3, 4], [5, 6]]))
    assert not _cupy.supports("rope_cos_sin", (pos, inv), axes=(0, 1, 1), dtype=np.float64)
    assert _cupy.supports("rope_cos_sin", (pos, inv), axes=None, dtype=np.float64)
    assert not cp.launches


# ------------------------------------------------------------------------------------------
# apply_rope


def _tables(rng, seq, r, dtype=np.float32):
    """Rotation tables in the "half" layout (cat(f, f)) for random angles."""
    ang = rng.uniform(-3, 3, size=(seq, r // 2))
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("rotary", [8, 4])  # full and partial rotary of a head dim of 8
def test_apply_rope_broadcast_over_heads(cp, layout, inverse, rotary):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)  # (batch, seq, heads, dim)
    cos, sin = _tables(rng, 5, rotary)
    c, s = cos[:, None, :], sin[:, None, :]  # broadcast over heads through zero strides
    got = _cupy.apply_rope(cp.asfake(x), cp.asfake(c), cp.asfake(s), layout=layout,
                           inverse=inverse, xp=cp)
    ref = _xp.apply_rope(x, c, s, layout=layout, inverse=inverse, xp=npx)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got), rope_apply_loop(x, c, s, layout, inverse), rtol=0,
                               atol=1e-6)
    assert cp.launches[-1][0] == "arrpos::apply_rope<float, int>"


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_in_place_and_strided(cp, layout):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((2, 6, 4, 16))  # (batch, seq, heads, dim), float64
    x = np.swapaxes(base, 1, 2)  # (batch, heads, seq, dim): a strided view, as q.transpose
    cos, sin = _tables(rng, 6, 12, np.float64)  # partial rotary: 12 of 16
    ref = rope_apply_loop(x, cos, sin, layout, False)
    fx = cp.asfake(x)
    got = _cupy.apply_rope(fx, cp.asfake(cos), cp.asfake(sin), layout=layout, inverse=False,
                           xp=cp, out=fx)
    assert got is fx
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-14)  # written through the view


def test_apply_rope_inverse_round_trip(cp):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 7, 10))
    cos, sin = _tables(rng, 7, 10, np.float64)
    fx = cp.asfake(x.copy())
    for inverse in (False, True):
        _cupy.apply_rope(fx, cp.asfake(cos), cp.asfake(sin), layout="half", inverse=inverse,
                         xp=cp, out=fx)
    np.testing.assert_allclose(np.asarray(fx), x, rtol=0, atol=1e-14)


def test_apply_rope_float16(cp):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 8)).astype(np.float16)
    cos, sin = _tables(rng, 4, 8, np.float16)
    got = np.asarray(_cupy.apply_rope(cp.asfake(x), cp.asfake(cos[:, None]),
                                      cp.asfake(sin[:, None]), layout="half", inverse=False,
                                      xp=cp))
    assert got.dtype == np.float16
    exact = rope_apply_loop(x, cos[:, None], sin[:, None], "half", False)
    # float32 arithmetic, one rounding: within half an ulp of float16 of the exact result
    # (plus float32 rounding in between)
    assert np.all(np.abs(got - exact) <= np.abs(exact) * 2**-11 * 1.01 + 2**-24)


def test_apply_rope_bfloat16_storage(cp):
    """bfloat16 arrives from torch as int16 bits; the kernel computes in float32."""
    rng = np.random.default_rng(4)
    xv = _bf16_value(_bf16_bits(rng.standard_normal((3, 2, 8))))
    cv, sv = (_bf16_value(_bf16_bits(t)) for t in _tables(rng, 3, 8))
    x, c, s = (cp.asfake(_bf16_bits(t)) for t in (xv, cv[:, None], sv[:, None]))
    out = cp.empty(x.shape, np.int16)
    driver.apply_rope(x, c, s, out, "interleaved", False, "bfloat16")
    got = _bf16_value(np.asarray(out))
    exact = rope_apply_loop(xv, cv[:, None], sv[:, None], "interleaved", False)
    assert np.all(np.abs(got - exact) <= np.abs(exact) * 2**-8 * 1.01 + 1e-30)
    np.testing.assert_array_equal(np.asarray(out), _bf16_bits(exact.astype(np.float32)))


def test_apply_rope_overlapping_out_goes_through_a_temporary(cp, monkeypatch):
    """The adapter declines an out over its inputs (a race for a direct launch); the
    dispatcher's rule (_backends._memory) sends it through a temporary, on the kernel."""
    from arrpos import _dispatch

    rng = np.random.default_rng(5)
    buf = rng.standard_normal((6, 8))
    x = buf[:5]
    cos, sin = _tables(rng, 5, 8, np.float64)
    ref = rope_apply_loop(x, cos, sin, "half", False)
    out = cp.asfake(buf[1:])  # overlaps x shifted by one row
    args = (cp.asfake(x), cp.asfake(cos), cp.asfake(sin))
    with pytest.raises(_dispatch.Unsupported):
        _cupy.apply_rope(*args, layout="half", inverse=False, xp=cp, out=out)
    launches = len(cp.launches)
    _through_dispatch(monkeypatch, "apply_rope", *args, arrays=args + (out,), layout="half",
                      inverse=False, out=out)
    assert len(cp.launches) == launches + 1
    np.testing.assert_allclose(buf[1:], ref, rtol=0, atol=1e-14)


def _through_dispatch(monkeypatch, op, *args, arrays, **kwargs):
    """``_dispatch.call`` with the CuPy adapter as the only candidate (the fake namespace is
    not recognised as CuPy's): the adapter's refusals fall through to ``_xp``."""
    from arrpos import _dispatch

    monkeypatch.setattr(_dispatch, "candidates", lambda xp: (_cupy,))
    return _dispatch.call(op, npx, *args, arrays=arrays, **kwargs)


def test_apply_rope_many_axes_takes_generic(cp, monkeypatch):
    rng = np.random.default_rng(6)
    x = cp.asfake(rng.standard_normal((2, 3, 2, 3, 2, 4)))
    cos = cp.asfake(rng.standard_normal((2, 1, 2, 1, 2, 4)))  # alternating broadcast: 5 axes
    sin = cp.asfake(rng.standard_normal((2, 1, 2, 1, 2, 4)))
    with pytest.raises(Unsupported, match="at most 4"):
        _cupy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=npx)
    got = _through_dispatch(monkeypatch, "apply_rope", x, cos, sin, arrays=(x, cos, sin, None),
                            layout="half", inverse=False, out=None)
    np.testing.assert_allclose(np.asarray(got), rope_apply_loop(x, cos, sin, "half", False),
                               atol=1e-14)
    assert not cp.launches


def test_apply_rope_guards(cp):
    """What would read or write outside the call's memory is refused (``Unsupported``),
    nothing launched: the generic code then serves the call, and the public layer, which runs
    first, names the argument to the user (tests/test_rope.py)."""
    x = cp.asfake(np.zeros((2, 8), np.float32))
    c = cp.asfake(np.zeros((2, 8), np.float32))
    with pytest.raises(Unsupported):  # tables of another type than x
        _cupy.apply_rope(x, cp.asfake(np.zeros((2, 8))), c, layout="half", inverse=False, xp=cp)
    with pytest.raises(Unsupported):  # an odd rotary width
        _cupy.apply_rope(x, cp.asfake(np.zeros((2, 3), np.float32)),
                         cp.asfake(np.zeros((2, 3), np.float32)), layout="half", inverse=False,
                         xp=cp)
    with pytest.raises(Unsupported):  # an output of another shape
        _cupy.apply_rope(x, c, c, layout="half", inverse=False, xp=cp,
                         out=cp.empty((2, 4), np.float32))
    with pytest.raises(Unsupported):  # an expanded output
        _cupy.apply_rope(x, c, c, layout="half", inverse=False, xp=cp,
                         out=cp.asfake(np.broadcast_to(np.zeros(8, np.float32), (2, 8))))
    with pytest.raises(Unsupported):  # tables that do not broadcast
        _cupy.apply_rope(x, cp.asfake(np.zeros((3, 8), np.float32)),
                         cp.asfake(np.zeros((3, 8), np.float32)), layout="half", inverse=False,
                         xp=cp)
    with pytest.raises(Unsupported):
        _cupy.apply_rope(x, c, c, layout="neox", inverse=False, xp=cp)
    with pytest.raises(Unsupported):  # integer data
        _cupy.apply_rope(cp.asfake(np.zeros((2, 8), np.int32)), c, c, layout="half",
                         inverse=False, xp=cp)
    assert not cp.launches


# ------------------------------------------------------------------------------------------
# ALiBi


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_alibi_matches_generic(cp, mode, dtype):
    slopes = (2.0 ** -np.arange(1, 5)).astype(dtype)
    got = _cupy.alibi_bias(cp.asfake(slopes), 3, 7, mode=mode, query_offset=2, dtype=dtype,
                           xp=cp)
    ref = _xp.alibi_bias(slopes, 3, 7, mode=mode, query_offset=2, dtype=dtype, xp=npx)
    assert got.shape == (4, 3, 7) and got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), ref)  # powers of two: exact either way
    np.testing.assert_array_equal(np.signbit(np.asarray(got)), np.signbit(ref))


def test_alibi_default_offset_and_bf16(cp):
    slopes = np.array([0.3, 0.07])
    ref = _xp.alibi_bias(slopes, 4, 9, mode="causal", query_offset=5, dtype=np.float64, xp=npx)
    got = _cupy.alibi_bias(cp.asfake(slopes), 4, 9, mode="causal", query_offset=None,
                           dtype=np.float64, xp=cp)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-15)
    out = cp.empty((2, 4, 9), np.int16)
    driver.alibi_bias(cp.asfake(slopes), 4, 9, out, "symmetric", 5, "bfloat16")
    exact = _xp.alibi_bias(slopes, 4, 9, mode="symmetric", query_offset=5, dtype=np.float64,
                           xp=npx)
    np.testing.assert_array_equal(np.asarray(out), _bf16_bits(exact.astype(np.float32)))


def test_launch_shape(cp):
    hi, lo = power_frequencies(3, 6, 10000.0)
    _cupy.sinusoid_table(cp.asfake(np.arange(1000)), hi, lo, layout="split", dtype=np.float32,
                         width=6, xp=cp)
    name, grid, block = cp.launches[-1]
    assert block == (4, 64)  # 3 frequencies per row -> 4 threads across, 64 rows per block
    assert grid == (min(-(-1000 // 64), 32 * 2), 1)  # enough row blocks: rows not split


# ------------------------------------------------------------------------------------------
# the torch bridge (CPU tensors stand in for CUDA ones; streams are not emulated)


@pytest.fixture
def bridge(cp, monkeypatch):
    import contextlib

    torch = pytest.importorskip("torch")
    from arrpos._backends.cuda import torch_cuda as _torch_cuda

    monkeypatch.setattr(_torch_cuda, "_on_torch_stream", lambda device: contextlib.nullcontext())
    return torch, _torch_cuda


def test_torch_bridge_bfloat16_in_place(bridge, cp):
    torch, tc = bridge
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 8, generator=g).to(torch.bfloat16)
    ang = torch.rand(3, 1, 4, generator=g, dtype=torch.float64) * 6
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    exact = rope_apply_loop(x.double().numpy(), cos.double().numpy(), sin.double().numpy(), "half",
                      False)
    ptr, version = x.data_ptr(), x._version
    got = tc.apply_rope(x, cos, sin, layout="half", inverse=False, xp=None, out=x)
    assert got is x and x.data_ptr() == ptr and x.dtype == torch.bfloat16
    assert x._version > version  # autograd told about the write
    want = torch.from_numpy(exact.astype(np.float32)).to(torch.bfloat16)
    assert torch.equal(x, want)
    assert cp.launches[-1][0] == "arrpos::apply_rope<arrpos::bfloat16, int>"


def test_torch_bridge_tables_and_alibi(bridge, cp):
    torch, tc = bridge
    hi, lo = power_frequencies(4, 8, 10000.0)
    pos = torch.arange(6)
    table = tc.sinusoid_table(pos, hi, lo, layout="interleaved", dtype=torch.float32, width=8,
                              xp=None)
    ref = _xp.sinusoid_table(np.arange(6), hi, lo, layout="interleaved", dtype=np.float32,
                             width=8, xp=npx)
    assert isinstance(table, torch.Tensor) and table.dtype == torch.float32
    np.testing.assert_allclose(table.numpy(), ref, rtol=0, atol=2.4e-7)
    inv = torch.tensor([1.0, 0.01], dtype=torch.float32)
    cos, sin = tc.rope_cos_sin(pos, inv, layout="interleaved", attention_factor=1.0, axes=None,
                               dtype=torch.float64, xp=None)
    rc, rs = _xp.rope_cos_sin(np.arange(6), inv.numpy(), layout="interleaved",
                              attention_factor=1.0, axes=None, dtype=np.float64, xp=npx)
    np.testing.assert_allclose(cos.numpy(), rc, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin.numpy(), rs, rtol=0, atol=1e-15)
    bias = tc.alibi_bias(torch.tensor([0.5, 0.25], dtype=torch.bfloat16), 2, 5, mode="causal",
                         query_offset=3, dtype=torch.bfloat16, xp=None)
    ref = _xp.alibi_bias(np.array([0.5, 0.25]), 2, 5, mode="causal", query_offset=3,
                         dtype=np.float64, xp=npx)
    assert bias.dtype == torch.bfloat16
    np.testing.assert_array_equal(bias.double().numpy(), ref)


def test_torch_bridge_declines_cpu_and_grad_tensors(bridge):
    torch, tc = bridge
    x = torch.zeros(2, 8)
    assert not tc.supports("apply_rope", (x, x, x, None))  # not CUDA
    assert not tc.supports("apply_rope", ())  # device unknown without arrays


# ------------------------------------------------------------------------------------------
# apply_rope_cached and apply_rope_qk: every dtype, both layouts, partial rotary, in place


# the generic code is the reference of every emulated kernel
_TWINS = _xp


def _expected(op, *arrays, **kwargs):
    """The twin's result on float64 copies of the (real) arrays; integer ids as they are."""
    args = [np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a)
            for a in arrays]
    return getattr(_TWINS, op)(*args, xp=npx, **kwargs)


# unit roundoff of the storage type and of the arithmetic (float32 for 16-bit storage)
_ROUNDOFF = {"float16": (2**-11, 2**-24), "bfloat16": (2**-8, 2**-24),
             "float32": (2**-24, 2**-24), "float64": (2**-53, 2**-53)}


class _Stored:
    """Values held in a dtype on the fake device: ``.dev`` (bfloat16 as int16 bits, as torch
    hands it over) and ``.value`` (the stored values in float64)."""

    def __init__(self, cp, values, dtype):
        values = np.asarray(values)
        if dtype == "bfloat16":
            bits = _bf16_bits(values)
            self.dev, self.value = cp.asfake(bits), _bf16_value(bits).astype(np.float64)
        else:
            stored = values.astype(dtype)
            self.dev, self.value = cp.asfake(stored), stored.astype(np.float64)


def _read(a, dtype):
    a = np.asarray(a)
    return _bf16_value(a).astype(np.float64) if dtype == "bfloat16" else a.astype(np.float64)


def _assert_rounded_once(got, exact, dtype, scale):
    """Within one rounding to the storage type of the exact value, plus the float arithmetic
    before it (products of |x| <= scale with |cos|, |sin| <= 1)."""
    store, arith = _ROUNDOFF[dtype]
    bound = store * np.abs(exact) + 4 * arith * scale + (2**-24 if dtype == "float16" else 0)
    bad = np.abs(got - exact) > bound
    assert not bad.any(), (dtype, np.max(np.abs(got - exact)), np.argwhere(bad)[:5])


def _caches(rng, max_pos, half, dtype, cp):
    ang = rng.uniform(-6, 6, size=(max_pos, half))
    return _Stored(cp, np.cos(ang), dtype), _Stored(cp, np.sin(ang), dtype)


def _call_cached(cp, x, cc, sc, ids, dtype, *, layout, inverse, out=None):
    if dtype == "bfloat16":  # torch's route: int16 bits, storage named
        return driver.apply_rope_cached(x, cc, sc, ids, out, layout, inverse, "bfloat16")
    return _cupy.apply_rope_cached(x, cc, sc, ids, layout=layout, inverse=inverse, xp=cp,
                                   out=out)


_DTYPES = ["float16", "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("inverse", [False, True])
def test_apply_rope_cached_matches_twin(cp, dtype, layout, inverse):
    rng = np.random.default_rng(10)
    x = _Stored(cp, rng.uniform(-3, 3, size=(2, 5, 3, 12)), dtype)  # (batch, seq, heads, D)
    cc, sc = _caches(rng, 40, 4, dtype, cp)  # R = 8 of D = 12: partial rotary
    ids = np.array([[0, 1, 2, 3, 4], [17, 18, 19, 39, 5]])[:, :, None]  # per sequence
    got = _call_cached(cp, x.dev, cc.dev, sc.dev, cp.asfake(ids), dtype, layout=layout,
                       inverse=inverse)
    exact = _expected("apply_rope_cached", x.value, cc.value, sc.value, ids, layout=layout,
                      inverse=inverse)
    assert got.shape == x.dev.shape and got.dtype == x.dev.dtype
    _assert_rounded_once(_read(got, dtype), exact, dtype, 3.0)
    np.testing.assert_array_equal(np.asarray(got)[..., 8:], np.asarray(x.dev)[..., 8:])
    assert cp.launches[-1][0] == driver.kernel_name("apply_rope_cached", dtype, "int")


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_cached_in_place_heads_first(cp, dtype, layout):
    """``(batch, heads, seq, D)`` through a transposed view, int32 ids ``(batch, 1, seq)``,
    caches sliced from wider tables (row stride != R/2), rotated in place."""
    rng = np.random.default_rng(11)
    base = _Stored(cp, rng.uniform(-2, 2, size=(2, 6, 3, 10)), dtype)
    x = base.dev.transpose(0, 2, 1, 3)  # (batch, heads, seq, D): strided
    value = base.value.transpose(0, 2, 1, 3)
    cwide, swide = _caches(rng, 30, 8, dtype, cp)
    cc, sc = cwide.dev[:, :5], swide.dev[:, :5]  # R = 10 = D: full rotary
    ids = rng.integers(0, 30, size=(2, 1, 6)).astype(np.int32)
    exact = _expected("apply_rope_cached", value, cwide.value[:, :5], swide.value[:, :5], ids,
                      layout=layout, inverse=False)
    got = _call_cached(cp, x, cc, sc, cp.asfake(ids), dtype, layout=layout, inverse=False,
                       out=x)
    assert got is x
    _assert_rounded_once(_read(base.dev, dtype).transpose(0, 2, 1, 3), exact, dtype, 2.0)


def test_apply_rope_cached_equals_apply_rope_on_widened_tables(cp):
    """Bit for bit: the same pair arithmetic as apply_rope on the gathered, widened tables."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 4, 2, 8)).astype(np.float32)
    cc = rng.uniform(-1, 1, (9, 4)).astype(np.float32)
    sc = rng.uniform(-1, 1, (9, 4)).astype(np.float32)
    ids = rng.integers(0, 9, size=(3, 4, 1))
    for layout in ("half", "interleaved"):
        c, s = cc[ids], sc[ids]
        wide = (lambda t: np.concatenate([t, t], -1)) if layout == "half" else \
            (lambda t: np.repeat(t, 2, -1))
        direct = _cupy.apply_rope(cp.asfake(x), cp.asfake(wide(c)), cp.asfake(wide(s)),
                                  layout=layout, inverse=False, xp=cp)
        cached = _cupy.apply_rope_cached(cp.asfake(x), cp.asfake(cc), cp.asfake(sc),
                                         cp.asfake(ids), layout=layout, inverse=False, xp=cp)
        np.testing.assert_array_equal(np.asarray(cached), np.asarray(direct))


def test_apply_rope_cached_guards(cp):
    """As :func:`test_apply_rope_guards`, for the gather: float ids, caches wider than x, ids
    that do not broadcast to x's rows, caches of another type are refused unlaunched."""
    x = cp.asfake(np.zeros((2, 3, 8), np.float32))
    c = cp.asfake(np.zeros((10, 4), np.float32))
    ids = cp.asfake(np.zeros((2, 3), np.int64))
    with pytest.raises(Unsupported):
        _cupy.apply_rope_cached(x, c, c, cp.asfake(np.zeros((2, 3))), layout="half",
                                inverse=False, xp=cp)
    with pytest.raises(Unsupported):
        _cupy.apply_rope_cached(x, cp.asfake(np.zeros((10, 5), np.float32)),
                                cp.asfake(np.zeros((10, 5), np.float32)), ids, layout="half",
                                inverse=False, xp=cp)
    with pytest.raises(Unsupported):
        _cupy.apply_rope_cached(x, c, c, cp.asfake(np.zeros((4, 3), np.int64)), layout="half",
                                inverse=False, xp=cp)
    with pytest.raises(Unsupported):
        _cupy.apply_rope_cached(x, cp.asfake(np.zeros((10, 4))), c, ids, layout="half",
                                inverse=False, xp=cp)
    assert not cp.launches


def test_apply_rope_cached_clamps_ids_inside_the_cache(cp):
    """An id the caller did not check never reads outside the caches (clamped, as JAX's
    gather): the public function rejects such ids before dispatch."""
    x = np.ones((1, 3, 4))
    cc = np.array([[1.0, 1.0], [0.0, 0.0]])
    sc = np.array([[0.0, 0.0], [1.0, 1.0]])
    got = _cupy.apply_rope_cached(cp.asfake(x), cp.asfake(cc), cp.asfake(sc),
                                  cp.asfake(np.array([[-5, 0, 99]])), layout="half",
                                  inverse=False, xp=cp)
    exact = _expected("apply_rope_cached", x, cc, sc, np.array([[0, 0, 1]]), layout="half",
                      inverse=False)
    np.testing.assert_array_equal(np.asarray(got), exact)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("in_place", [False, True])
def test_apply_rope_qk_matches_twin(cp, dtype, layout, in_place):
    rng = np.random.default_rng(13)
    q = _Stored(cp, rng.uniform(-3, 3, size=(2, 4, 5, 8)), dtype)  # (batch, heads, seq, D)
    k = _Stored(cp, rng.uniform(-3, 3, size=(2, 2, 5, 8)), dtype)  # two kv heads (GQA)
    ang = rng.uniform(-6, 6, size=(5, 3))
    ang = np.concatenate([ang, ang], -1) if layout == "half" else np.repeat(ang, 2, -1)
    cos, sin = _Stored(cp, np.cos(ang), dtype), _Stored(cp, np.sin(ang), dtype)  # R = 6 of 8
    qe, ke = _expected("apply_rope_qk", q.value, k.value, cos.value, sin.value, layout=layout,
                       inverse=False)
    out = (q.dev, k.dev) if in_place else None
    if dtype == "bfloat16":
        got = tuple(driver.apply_rope(t, cos.dev, sin.dev, o, layout, False, "bfloat16")
                    for t, o in zip((q.dev, k.dev), out or (None, None)))
    else:
        got = _cupy.apply_rope_qk(q.dev, k.dev, cos.dev, sin.dev, layout=layout,
                                  inverse=False, xp=cp, out=out)
    if in_place:
        assert got[0] is q.dev and got[1] is k.dev
    _assert_rounded_once(_read(got[0], dtype), qe, dtype, 3.0)
    _assert_rounded_once(_read(got[1], dtype), ke, dtype, 3.0)


def test_supports_new_ops(cp):
    f32, f16 = np.zeros((2, 3, 8), np.float32), np.zeros((2, 3, 8), np.float16)
    cache = cp.asfake(np.zeros((9, 4), np.float32))
    ids = cp.asfake(np.zeros((2, 3), np.int64))
    x = cp.asfake(f32)
    assert _cupy.supports("apply_rope_cached", (x, cache, cache, ids, None))
    assert not _cupy.supports("apply_rope_cached", (x, cache, cache, cp.asfake(np.zeros((2, 3))),
                                                    None))  # float ids
    assert not _cupy.supports("apply_rope_cached",
                              (cp.asfake(f16), cache, cache, ids, None))  # mixed dtypes
    assert _cupy.supports("apply_rope_qk", (x, x, x, x, None, None))
    assert not _cupy.supports("apply_rope_qk", (x, cp.asfake(f16), x, x, None, None))


# ------------------------------------------------------------------------------------------
# review findings: compile failures, graph safety, FTZ, launch shape, offsets


def test_compile_failure_warns_once_and_declines(cp, monkeypatch):
    """NVRTC missing (a driver-only machine) or any build error: one RuntimeWarning, the call
    goes to the generic code, and later calls are declined up front."""

    class DynamicLibNotFoundError(RuntimeError):  # what CuPy raises without NVRTC
        pass

    cp.compile_error = DynamicLibNotFoundError("libnvrtc.so.12: cannot open shared object")
    rng = np.random.default_rng(14)
    x, cos, sin = (cp.asfake(rng.standard_normal((3, 8))) for _ in range(3))
    arrays = (x, cos, sin, None)
    assert _cupy.supports("apply_rope", arrays)
    with pytest.warns(RuntimeWarning, match="DynamicLibNotFoundError.*generic"):
        got = _through_dispatch(monkeypatch, "apply_rope", x, cos, sin, arrays=arrays,
                                layout="half", inverse=False, out=None)
    np.testing.assert_allclose(np.asarray(got), rope_apply_loop(x, cos, sin, "half", False),
                               atol=1e-15)
    assert "DynamicLibNotFoundError" in driver.module_failure(0)
    assert not _cupy.supports("apply_rope", arrays)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        again = _through_dispatch(monkeypatch, "apply_rope", x, cos, sin, arrays=arrays,
                                  layout="half", inverse=False, out=None)
        with pytest.raises(Unsupported):  # called directly: declined, not retried
            _cupy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=cp)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(got))
    assert cp.modules_built == 1 and not cp.launches


def test_sinusoid_frequencies_travel_by_value(cp):
    """More frequencies than one parameter block (192): several launches, each with its block
    as a by-value structure, no device array of frequencies; padding columns zero."""
    hi, lo = power_frequencies(200, 400, 10000.0)
    pos = np.array([0, 3, 1000, 2**20])
    got = _cupy.sinusoid_table(cp.asfake(pos), hi, lo, layout="interleaved", dtype=np.float64,
                               width=404, xp=cp)
    ref = _xp.sinusoid_table(pos, hi, lo, layout="interleaved", dtype=np.float64, width=404,
                             xp=npx)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=0, atol=1e-15)
    assert not np.asarray(got)[:, 400:].any()
    assert [name for name, _, _ in cp.launches] == ["arrpos::sinusoid_table<double>"] * 2


def _forbid_host_copies(cp, monkeypatch):
    """Make a host-to-device copy or a stream synchronisation an AssertionError; returns the
    raising function."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a host-to-device copy or a synchronisation")

    monkeypatch.setattr(cp.cuda, "get_current_stream", forbidden, raising=False)
    monkeypatch.setattr(cp, "asarray", lambda a, dtype=None: (
        cp.asfake(np.asarray(a, dtype=dtype)) if isinstance(a, cuda_emulation.FakeArray)
        else forbidden()))
    return forbidden


def test_no_device_copies_or_synchronisation(cp, monkeypatch):
    """Graph-capture safety: no call uploads host data or synchronises a stream."""
    _forbid_host_copies(cp, monkeypatch)
    hi, lo = power_frequencies(4, 8, 10000.0)
    pos = cp.asfake(np.arange(6))
    _cupy.sinusoid_table(pos, hi, lo, layout="split", dtype=np.float32, width=8, xp=cp)
    _cupy.rope_cos_sin(pos, cp.asfake(np.array([1.0, 0.1])), layout="half",
                       attention_factor=1.0, axes=None, dtype=np.float32, xp=cp)
    x = cp.asfake(np.ones((6, 4)))
    _cupy.apply_rope_cached(x, cp.asfake(np.ones((6, 2))), cp.asfake(np.zeros((6, 2))), pos,
                            layout="half", inverse=False, xp=cp)
    _cupy.alibi_bias(cp.asfake(np.array([0.5])), 2, 3, mode="causal", query_offset=None,
                     dtype=np.float32, xp=cp)
    assert len(cp.launches) == 4


def test_bfloat16_subnormals_are_kept(cp):
    """bfloat16 subnormals are float32 subnormals: the kernels' float arithmetic does not flush
    them (explicit non-.ftz PTX on the GPU; .ci/check_nvrtc.sh checks the PTX)."""
    tiny = np.array([2.0**-133, -(2.0**-130), 2.0**-127, 3 * 2.0**-128], dtype=np.float32)
    x = cp.asfake(_bf16_bits(np.tile(tiny, (2, 1))))
    one, zero = (cp.asfake(_bf16_bits(np.full((2, 4), v, np.float32))) for v in (1.0, 0.0))
    out = cp.empty(x.shape, np.int16)
    driver.apply_rope(x, one, zero, out, "half", False, "bfloat16")
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    assert (_bf16_value(np.asarray(out)) != 0).all()


def test_wide_short_rows_split_across_blocks(cp):
    """An ALiBi decode row (one query, many keys, few heads) is split into column chunks over
    the grid's y axis; the result is unchanged."""
    slopes = np.array([0.5, 0.03125])
    got = _cupy.alibi_bias(cp.asfake(slopes), 1, 3000, mode="causal", query_offset=None,
                           dtype=np.float32, xp=cp)
    ref = _xp.alibi_bias(slopes, 1, 3000, mode="causal", query_offset=2999, dtype=np.float32,
                         xp=npx)
    np.testing.assert_array_equal(np.asarray(got), ref)
    _, grid, block = cp.launches[-1]
    assert grid[1] > 1 and block[0] == 32


def test_launch_shape_covers_every_item_once():
    for rows, items, sms in [(1, 32768, 132), (32, 32768, 132), (10**6, 64, 132), (3, 5, 2),
                             (1, 1, 1), (7, 10**6, 8)]:
        (gx, gy), (bx, by), chunk = driver.launch_shape(rows, items, sms)
        assert bx * by <= 256 and chunk % bx == 0 and gy <= 65535
        assert (gy - 1) * chunk < items <= gy * chunk  # chunks tile the row, none empty
        assert gx * by >= min(rows, 32 * sms * by)


@pytest.mark.parametrize("op", ["apply_rope", "apply_rope_cached"])
def test_64_bit_offset_instantiation(cp, monkeypatch, op):
    """The long long instantiation (taken when an offset reaches 2**31) gives the same bits."""
    rng = np.random.default_rng(15)
    x = cp.asfake(rng.standard_normal((3, 4, 8)).astype(np.float32))
    cc, sc = (cp.asfake(rng.uniform(-1, 1, (6, 4)).astype(np.float32)) for _ in range(2))
    ids = cp.asfake(rng.integers(0, 6, size=(3, 4)))
    if op == "apply_rope":
        args = (x, cp.asfake(np.asarray(cc)[np.asarray(ids)].repeat(2, -1)),
                cp.asfake(np.asarray(sc)[np.asarray(ids)].repeat(2, -1)))
    else:
        args = (x, cc, sc, ids)
    narrow = getattr(_cupy, op)(*args, layout="interleaved", inverse=False, xp=cp)
    monkeypatch.setattr(driver, "INT_OFFSETS_BELOW", 0)
    wide = getattr(_cupy, op)(*args, layout="interleaved", inverse=False, xp=cp)
    assert [n for n, _, _ in cp.launches] == [driver.kernel_name(op, "float32", "int"),
                                              driver.kernel_name(op, "float32", "long long")]
    np.testing.assert_array_equal(np.asarray(wide), np.asarray(narrow))


def test_torch_bridge_cached_and_qk_bfloat16(bridge, cp):
    """torch bfloat16 through the bridge: the caches gathered in the kernel; q and k (fewer
    heads) rotated in place with one export of the tables."""
    torch, tc = bridge
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(2, 5, 3, 8, generator=g) * 4 - 2).to(torch.bfloat16)
    ang = torch.rand(16, 4, generator=g, dtype=torch.float64) * 12 - 6
    cc, sc = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    ids = torch.tensor([[0, 1, 2, 3, 4], [9, 10, 11, 12, 15]])[:, :, None]
    got = tc.apply_rope_cached(x, cc, sc, ids, layout="interleaved", inverse=False, xp=None)
    exact = _expected("apply_rope_cached", x.double().numpy(), cc.double().numpy(),
                      sc.double().numpy(), ids.numpy(), layout="interleaved", inverse=False)
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    _assert_rounded_once(got.double().numpy(), exact, "bfloat16", 2.0)
    assert cp.launches[-1][0] == "arrpos::apply_rope_cached<arrpos::bfloat16, int>"

    q = (torch.rand(1, 4, 5, 8, generator=g) * 4 - 2).to(torch.bfloat16)
    k = (torch.rand(1, 2, 5, 8, generator=g) * 4 - 2).to(torch.bfloat16)
    full = torch.cat([ang[:5], ang[:5]], dim=-1)
    cos, sin = full.cos().to(torch.bfloat16), full.sin().to(torch.bfloat16)
    qe, ke = _expected("apply_rope_qk", q.double().numpy(), k.double().numpy(),
                       cos.double().numpy(), sin.double().numpy(), layout="half", inverse=False)
    qv, kv = q._version, k._version
    qr, kr = tc.apply_rope_qk(q, k, cos, sin, layout="half", inverse=False, xp=None,
                              out=(q, k))
    assert qr is q and kr is k and q._version > qv and k._version > kv
    _assert_rounded_once(q.double().numpy(), qe, "bfloat16", 2.0)
    _assert_rounded_once(k.double().numpy(), ke, "bfloat16", 2.0)


def test_torch_bridge_declines_after_a_compile_failure(bridge, cp, monkeypatch):
    torch, tc = bridge
    x = torch.zeros(2, 8)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(tc, "cupy_available", lambda: True)
    arrays = (x, x, x, None)
    assert tc.supports("apply_rope", arrays)
    assert tc.supports("apply_rope_qk", (x, x, x, x, None, None))
    assert not tc.supports("apply_rope_qk", (x, x.double(), x, x, None, None))
    driver._FAILED[x.device.index] = "CompileException: simulated"
    assert not tc.supports("apply_rope", arrays)


@pytest.mark.parametrize("op, signature", [
    ("apply_rope_cached",
     "(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None)"),
    ("apply_rope_qk", "(q, k, cos, sin, *, layout, inverse, xp, out=None)"),
])
def test_new_ops_have_the_generic_signatures(op, signature):
    import inspect

    from arrpos._backends.cuda import torch_cuda as _torch_cuda

    for mod in (_cupy, _torch_cuda):
        assert str(inspect.signature(getattr(mod, op))) == signature
    if hasattr(_xp, op):  # the generic twin, once merged
        assert str(inspect.signature(getattr(_xp, op))) == signature


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_vector_path_gives_the_scalar_bits(cp, monkeypatch, dtype, layout):
    """Two pairs per thread through aligned packs (feature stride 1, aligned rows) computes
    exactly what the pair-by-pair path computes: broadcast tables, partial rotary, in place."""
    rng = np.random.default_rng(16)
    x = _Stored(cp, rng.uniform(-3, 3, size=(2, 6, 3, 16)), dtype)
    ang = rng.uniform(-6, 6, size=(6, 6))
    ang = np.concatenate([ang, ang], -1) if layout == "half" else np.repeat(ang, 2, -1)
    cos, sin = _Stored(cp, np.cos(ang)[:, None], dtype), _Stored(cp, np.sin(ang)[:, None], dtype)

    def run(out=None, inverse=False):
        if dtype == "bfloat16":
            return driver.apply_rope(x.dev, cos.dev, sin.dev, out, layout, inverse,
                                     "bfloat16")
        return _cupy.apply_rope(x.dev, cos.dev, sin.dev, layout=layout, inverse=inverse,
                                xp=cp, out=out)

    fast = np.asarray(run()).copy()
    assert cuda_emulation.FakeKernel.last_args[-2] == 1  # vec
    back = np.asarray(run(inverse=True)).copy()
    monkeypatch.setattr(driver, "VECTOR_PAIRS", False)
    slow = np.asarray(run()).copy()
    assert cuda_emulation.FakeKernel.last_args[-2] == 0
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(back, np.asarray(run(inverse=True)))
    monkeypatch.setattr(driver, "VECTOR_PAIRS", True)
    run(out=x.dev)  # in place, vector path
    np.testing.assert_array_equal(np.asarray(x.dev), slow)
    exact = rope_apply_loop(x.value, cos.value, sin.value, layout, False)
    _assert_rounded_once(_read(slow, dtype), exact, dtype, 3.0)


def test_vector_path_declined_when_misaligned(cp):
    rng = np.random.default_rng(17)
    buf = rng.standard_normal((4, 17)).astype(np.float32)
    x = cp.asfake(buf)[:, 1:]  # rows start one float past 8-byte alignment
    c = cp.asfake(np.ones((4, 16), np.float32))
    s = cp.asfake(np.zeros((4, 16), np.float32))
    got = _cupy.apply_rope(x, c, s, layout="half", inverse=False, xp=cp)
    assert cuda_emulation.FakeKernel.last_args[-2] == 0
    np.testing.assert_array_equal(np.asarray(got), buf[:, 1:])
    _cupy.apply_rope(cp.asfake(buf[:, :16].copy()), c, s, layout="half", inverse=False, xp=cp)
    assert cuda_emulation.FakeKernel.last_args[-2] == 1


def test_bfloat16_rounding_bound_is_2_pow_minus_8(cp):
    """bfloat16 keeps 8 significant bits: a correctly rounded result is within 2**-8 relative
    of exact, and many results are further than 2**-9 from it (the review's finding 1)."""
    rng = np.random.default_rng(18)
    x = _Stored(cp, rng.standard_normal((50, 4, 128)), "bfloat16")
    ang = rng.uniform(-6, 6, size=(50, 1, 64))
    ang = np.concatenate([ang, ang], -1)
    cos, sin = _Stored(cp, np.cos(ang), "bfloat16"), _Stored(cp, np.sin(ang), "bfloat16")
    out = cp.empty(x.dev.shape, np.int16)
    driver.apply_rope(x.dev, cos.dev, sin.dev, out, "half", False, "bfloat16")
    got = _read(out, "bfloat16")
    exact = rope_apply_loop(x.value, cos.value, sin.value, "half", False)
    rel = np.abs(got - exact) / np.abs(exact)
    assert (rel <= 2**-8 * 1.01).all()
    assert (rel > 2**-9).sum() > 1000  # out of 25,600: a 2**-9 bound would fail


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cached_vector_path_gives_the_scalar_bits(cp, monkeypatch, dtype, layout):
    """apply_rope_cached's two-pairs-per-thread path (one cache pack per two pairs) computes
    what its pair-by-pair path computes, partial rotary and in place included."""
    rng = np.random.default_rng(19)
    x = _Stored(cp, rng.uniform(-3, 3, size=(2, 5, 3, 16)), dtype)
    cc, sc = _caches(rng, 20, 6, dtype, cp)  # R = 12 of 16
    ids = cp.asfake(rng.integers(0, 20, size=(2, 5, 1)))

    def run(out=None, inverse=False):
        return np.asarray(_call_cached(cp, x.dev, cc.dev, sc.dev, ids, dtype, layout=layout,
                                       inverse=inverse, out=out)).copy()

    fast, back = run(), run(inverse=True)
    assert cuda_emulation.FakeKernel.last_args[-2] == 1  # vec
    monkeypatch.setattr(driver, "VECTOR_PAIRS", False)
    np.testing.assert_array_equal(fast, run())
    assert cuda_emulation.FakeKernel.last_args[-2] == 0
    np.testing.assert_array_equal(back, run(inverse=True))
    monkeypatch.setattr(driver, "VECTOR_PAIRS", True)
    run(out=x.dev)
    np.testing.assert_array_equal(np.asarray(x.dev), fast)
    exact = _expected("apply_rope_cached", x.value, cc.value, sc.value, np.asarray(ids),
                      layout=layout, inverse=False)
    _assert_rounded_once(_read(fast, dtype), exact, dtype, 3.0)


# ------------------------------------------------------------------------------------------
# ALiBi of positions and of a mask, the relative-bias gather: bit for bit against the generic
# code (bfloat16, which NumPy lacks: the generic float64 product rounded once to bfloat16)


def _bf16_round(v):
    """float64 -> the nearest bfloat16 (ties to even), as float64: the significand rounded to
    8 bits with ``rint`` (normal, finite values: the tests' range)."""
    m, e = np.frexp(np.asarray(v, np.float64))
    return np.ldexp(np.rint(m * 2.0**8), e - 8)


def _slopes(heads):
    """ALiBi's slopes 2**(-8 k / heads): not powers of two for 12 heads, so products round."""
    return 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)


def _alibi_positions_case(kind):
    rng = np.random.default_rng(21)
    if kind == "int":
        qp = rng.integers(-30000, 30000, size=(2, 1, 5))
        kp = np.concatenate([qp[..., :2], rng.integers(-30000, 30000, size=(2, 1, 4))], -1)
        return qp, kp[:1]  # leading axes (2, 1) and (1, 1) broadcast to (2, 1)
    qp = rng.uniform(-1e4, 1e4, size=(3, 4))
    kp = np.concatenate([qp[:, :2], [[-0.0, 0.0]] * 3, rng.uniform(-1e4, 1e4, (3, 3))], -1)
    qp[0, 0] = 0.0  # a zero distance against -0.0 and +0.0 keys
    return qp, kp


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("kind", ["int", "float"])
def test_alibi_from_positions_matches_generic(cp, mode, dtype, kind):
    qp, kp = _alibi_positions_case(kind)
    lead = np.broadcast_shapes(qp.shape[:-1], kp.shape[:-1])
    slopes = _slopes(12).astype(dtype)
    got = _cupy.alibi_bias_from_positions(cp.asfake(slopes), cp.asfake(qp), cp.asfake(kp),
                                          mode=mode, lead=lead, dtype=np.dtype(dtype), xp=cp)
    ref = _xp.alibi_bias_from_positions(slopes, qp, kp, mode=mode, lead=lead,
                                        dtype=np.dtype(dtype), xp=npx)
    assert got.shape == lead + (12, qp.shape[-1], kp.shape[-1]) and got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), ref)
    np.testing.assert_array_equal(np.signbit(np.asarray(got)), np.signbit(ref))
    assert cp.launches[-1][0] == driver.kernel_name("alibi_bias_from_positions", dtype)


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
def test_alibi_from_positions_bfloat16_rounds_once(cp, mode):
    qp, kp = _alibi_positions_case("int")
    lead = (2, 1)
    slopes = _bf16_round(_slopes(12))  # bfloat16 slopes, exactly
    out = cp.empty(lead + (12, 5, 6), np.int16)
    driver.alibi_bias_from_positions(cp.asfake(slopes), cp.asfake(qp), cp.asfake(kp), out, mode,
                                     lead, "bfloat16")
    exact = _xp.alibi_bias_from_positions(slopes, qp, kp, mode=mode, lead=lead,
                                          dtype=np.float64, xp=npx)
    np.testing.assert_array_equal(_bf16_value(np.asarray(out)), _bf16_round(exact))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("mask_dtype", [bool, np.int64, np.int32, np.uint8])
def test_alibi_from_mask_matches_generic(cp, dtype, mask_dtype):
    rng = np.random.default_rng(22)
    mask = np.ones((4, 300), dtype=mask_dtype)
    mask[0, :17] = 0  # left padding
    mask[1] = 0  # nothing real
    mask[2] = rng.integers(0, 2, 300)  # holes
    slopes = _slopes(12).astype(dtype)
    got = _cupy.alibi_bias_from_mask(cp.asfake(slopes), cp.asfake(mask), dtype=np.dtype(dtype),
                                     xp=cp)
    ref = _xp.alibi_bias_from_mask(slopes, mask, dtype=np.dtype(dtype), xp=npx)
    assert got.shape == (4, 12, 1, 300) and got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), ref)
    np.testing.assert_array_equal(np.signbit(np.asarray(got)), np.signbit(ref))
    assert cp.launches[-1][0] == driver.kernel_name("alibi_bias_from_positions", dtype)


def test_alibi_from_mask_bfloat16_and_the_float32_limit(cp, monkeypatch):
    mask = np.array([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1, 1, 1, 1]], bool)
    slopes = _bf16_round(_slopes(5))
    counts = cp.asfake(np.cumsum(mask, axis=-1))
    out = cp.empty((2, 5, 1, 9), np.int16)
    driver.alibi_bias_from_mask(cp.asfake(slopes), counts, out, "bfloat16")
    exact = _xp.alibi_bias_from_mask(slopes, mask, dtype=np.float64, xp=npx)
    np.testing.assert_array_equal(_bf16_value(np.asarray(out)), _bf16_round(exact))
    # float32 positions past 2**24 are rounded by the generic code before the product: refused
    monkeypatch.setattr(driver, "_F32_EXACT", 7)
    launches = len(cp.launches)
    with pytest.raises(Unsupported):
        driver.alibi_bias_from_mask(cp.asfake(slopes.astype(np.float32)), counts, None,
                                    "float32")
    driver.alibi_bias_from_mask(cp.asfake(slopes), counts, None, "float64")
    assert len(cp.launches) == launches + 1


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_relative_bias_matches_generic(cp, dtype, index_dtype):
    rng = np.random.default_rng(23)
    table = rng.standard_normal((32, 6)).astype(dtype)
    rel = np.arange(40)[None, :] - np.arange(33)[:, None]  # a T5-style shifted index
    index = (np.abs(rel) % 32).astype(index_dtype)
    for t, idx in ((table, index), (table[::-2], index % 16),  # a strided table view
                   (np.asfortranarray(table), rng.integers(0, 32, (2, 3, 7)))):
        got = _cupy.relative_bias(cp.asfake(t), cp.asfake(idx), dtype=np.dtype(dtype), xp=cp)
        ref = _xp.relative_bias(t, idx, dtype=np.dtype(dtype), xp=npx)
        assert got.shape == (6,) + idx.shape and got.dtype == dtype
        np.testing.assert_array_equal(np.asarray(got).view(f"u{t.dtype.itemsize}"),
                                      np.ascontiguousarray(ref).view(f"u{t.dtype.itemsize}"))
        assert cp.launches[-1][0] == driver.kernel_name("relative_bias", dtype)


def test_relative_bias_copies_bits_and_clamps_ids(cp):
    """bfloat16 (int16 bits, torch's route) and NaN payloads copied as bits; ids outside the
    table (rejected by the public function first) are clamped, never read outside."""
    bits = np.arange(-60, 60, dtype=np.int16).reshape(20, 6)
    bits[3, 2] = np.int16(0x7FC1)  # a NaN with a payload
    index = np.array([[0, 3, 19], [5, 3, 3]])
    out = driver.relative_bias(cp.asfake(bits), cp.asfake(index), None, "bfloat16")
    np.testing.assert_array_equal(np.asarray(out), np.moveaxis(bits[index], -1, 0))
    nan = np.array([[1.0, np.nan]], np.float32)
    nan.view(np.uint32)[0, 1] = 0x7FA00001  # a signalling NaN's bits survive the copy
    got = _cupy.relative_bias(cp.asfake(nan), cp.asfake(np.zeros(3, np.int64)),
                              dtype=np.dtype(np.float32), xp=cp)
    assert (np.asarray(got)[1].view(np.uint32) == 0x7FA00001).all()
    wild = np.array([-5, 0, 19, 20, 10**12])
    got = np.asarray(driver.relative_bias(cp.asfake(bits), cp.asfake(wild), None, "bfloat16"))
    np.testing.assert_array_equal(got, np.moveaxis(bits[[0, 0, 19, 19, 19]], -1, 0))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("q, k", [(1, 1), (5, 9), (40, 3)])
def test_toeplitz_bias_is_the_gather_of_its_ids(cp, dtype, q, k):
    """t5_bias's windows on CUDA: the relative_bias kernel at ids j - i + q - 1 made on the
    device; equal to a loop over the rows."""
    lines = np.random.default_rng(5).standard_normal((q + k - 1, 3)).astype(dtype)
    got = np.asarray(_cupy.toeplitz_bias(cp.asfake(lines), q=q, k=k, dtype=np.dtype(dtype),
                                         xp=cp))
    ref = np.stack([lines[q - 1 - i:q - 1 - i + k].T for i in range(q)], axis=1)
    assert got.shape == (3, q, k) and got.dtype == dtype
    np.testing.assert_array_equal(got, ref)
    assert cp.launches[-1][0] == driver.kernel_name("relative_bias", dtype)


def test_new_bias_ops_through_dispatch(cp, monkeypatch):
    """The dispatcher sends them to the kernels; the ids' and the mask's checks run first (the
    CUDA driver does not validate them), so a bad value is a ValueError, nothing launched."""
    table = cp.asfake(np.arange(12.0).reshape(4, 3))
    index = cp.asfake(np.array([[0, 3], [2, 1]]))
    arrays = (table, index)
    assert _cupy.supports("relative_bias", arrays, dtype=np.dtype(np.float64))
    got = _through_dispatch(monkeypatch, "relative_bias", table, index, arrays=arrays,
                            dtype=np.dtype(np.float64), check=lambda: None)
    np.testing.assert_array_equal(np.asarray(got), np.moveaxis(np.asarray(table)[index], -1, 0))

    def bad():
        raise ValueError("index must lie in [0, 4)")
    launches = len(cp.launches)
    with pytest.raises(ValueError, match="index"):
        _through_dispatch(monkeypatch, "relative_bias", table, index, arrays=arrays,
                          dtype=np.dtype(np.float64), check=bad)
    assert len(cp.launches) == launches
    slopes = cp.asfake(np.array([0.5, 0.25]))
    mask = cp.asfake(np.array([[0, 1, 1]]))
    assert _cupy.supports("alibi_bias_from_mask", (slopes, mask), dtype=np.dtype(np.float64))
    got = _through_dispatch(monkeypatch, "alibi_bias_from_mask", slopes, mask,
                            arrays=(slopes, mask), dtype=np.dtype(np.float64))
    np.testing.assert_array_equal(np.asarray(got)[:, :, 0], [[[0, 0, 0.5], [0, 0, 0.25]]])
    qp = cp.asfake(np.array([2, 0]))
    arrays = (slopes, qp, qp)
    assert _cupy.supports("alibi_bias_from_positions", arrays, dtype=np.dtype(np.float32))
    assert not _cupy.supports("alibi_bias_from_positions", (slopes, qp, np.array([2, 0])),
                              dtype=np.dtype(np.float32))  # host memory
    assert len(cp.launches) == launches + 1


def test_torch_bridge_bias_ops(bridge, cp):
    torch, tc = bridge
    slopes = torch.tensor(_slopes(4)).to(torch.bfloat16)
    s64 = slopes.double().numpy()
    qp, kp = torch.tensor([[5, 0, 9]]), torch.arange(7)
    got = tc.alibi_bias_from_positions(slopes, qp, kp, mode="symmetric", lead=(1,),
                                       dtype=torch.bfloat16, xp=None)
    exact = _xp.alibi_bias_from_positions(s64, qp.numpy(), kp.numpy(), mode="symmetric",
                                          lead=(1,), dtype=np.float64, xp=npx)
    assert got.dtype == torch.bfloat16 and got.shape == (1, 4, 3, 7)
    np.testing.assert_array_equal(got.double().numpy(), _bf16_round(exact))
    mask = torch.tensor([[False, True, True, True], [True, True, False, True]])
    got = tc.alibi_bias_from_mask(slopes.float(), mask, dtype=torch.float32, xp=None)
    ref = _xp.alibi_bias_from_mask(s64.astype(np.float32), mask.numpy(), dtype=np.float32,
                                   xp=npx)
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), ref)
    table = torch.randn(9, 4, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    index = torch.tensor([[0, 8, 3], [3, 3, 1]], dtype=torch.int32)
    got = tc.relative_bias(table.t().contiguous().t(), index, dtype=torch.bfloat16, xp=None)
    assert got.dtype == torch.bfloat16 and got.shape == (4, 2, 3)
    assert torch.equal(got, table[index.long()].permute(2, 0, 1))
    assert cp.launches[-1][0] == "arrpos::relative_bias<arrpos::bfloat16>"
    got = tc.toeplitz_bias(table, q=4, k=6, dtype=torch.bfloat16, xp=None)
    ref = torch.stack([table[3 - i:3 - i + 6].t() for i in range(4)], dim=1)
    assert got.dtype == torch.bfloat16 and torch.equal(got, ref)
    assert cp.launches[-1][0] == "arrpos::relative_bias<arrpos::bfloat16>"


# ------------------------------------------------------------------------------------------
# conv_positional: the depthwise convolution with bias, activation and residual fused.
# Without an activation the sums are the generic code's, term by term: bit for bit. The
# activations' exp is the host kernel's (a few ulps from NumPy's): within the stated bounds
# of the generic result, and of float64 references (math.erfc, math.tanh).

# |got - generic| <= _CONV_TOL * max(1, |generic|) with an activation: a few ulps of the
# working type (float32 for 16-bit x) plus one rounding to the storage type
_CONV_TOL = {"float16": 2**-10, "bfloat16": 2**-7, "float32": 2**-19, "float64": 2**-44}


def _conv_case(rng, form, dtype):
    """``(x, weight, bias)``: a 1-D grid (kw = 1), a 3x3 grid, an even 4x2 kernel (padding
    one more after than before), a strided view of x."""
    c = 6
    if form == "1d":
        x, w = rng.uniform(-3, 3, (2, 9, 1, c)), rng.uniform(-1, 1, (5, 1, c))
    elif form == "even":
        x, w = rng.uniform(-3, 3, (1, 5, 4, c)), rng.uniform(-1, 1, (4, 2, c))
    else:
        x, w = rng.uniform(-3, 3, (2, 5, 4, 2 * c)), rng.uniform(-1, 1, (3, 3, c))
    x = x.astype(dtype)
    if form == "strided":
        x = x[..., ::2]  # every other channel: a view with a channel stride of 2
    elif form != "1d":
        x = x[..., :c]
    return x, w.astype(np.float32 if dtype != np.float64 else np.float64), rng.uniform(-1, 1, c)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("activation", [None, "gelu", "tanh"])
@pytest.mark.parametrize("form", ["1d", "2d", "even", "strided"])
def test_conv_positional_matches_generic(cp, dtype, activation, form):
    rng = np.random.default_rng(24)
    x, w, b = _conv_case(rng, form, dtype)
    for bias, residual in ((b, True), (None, False)):
        got = _cupy.conv_positional(cp.asfake(x), cp.asfake(w),
                                    None if bias is None else cp.asfake(bias),
                                    activation=activation, residual=residual,
                                    dtype=np.dtype(dtype), xp=cp)
        ref = _xp.conv_positional(x, w, bias, activation=activation, residual=residual,
                                  dtype=np.dtype(dtype), xp=npx)
        assert got.shape == x.shape and got.dtype == dtype
        got = np.asarray(got)
        if activation is None:
            np.testing.assert_array_equal(got, ref)
        else:
            tol = _CONV_TOL[np.dtype(dtype).name]
            g, r = got.astype(np.float64), ref.astype(np.float64)
            assert (np.abs(g - r) <= tol * np.maximum(1.0, np.abs(r))).all(), \
                np.max(np.abs(g - r))
        assert cp.launches[-1][0] == driver.kernel_name("conv_positional",
                                                        np.dtype(dtype).name)


def test_conv_positional_bfloat16_rounds_once(cp):
    """bfloat16 (int16 bits, torch's route): the float32 sums rounded once, as the generic
    code rounds its float32 result."""
    rng = np.random.default_rng(25)
    x32 = _bf16_value(_bf16_bits(rng.uniform(-3, 3, (2, 5, 4, 6))))
    w, b = rng.uniform(-1, 1, (3, 3, 6)).astype(np.float32), rng.uniform(-1, 1, 6)
    got = driver.conv_positional(cp.asfake(_bf16_bits(x32)), cp.asfake(w), cp.asfake(b), None,
                                 None, True, "bfloat16")
    ref = _xp.conv_positional(x32, w, b, activation=None, residual=True,
                              dtype=np.dtype(np.float32), xp=npx)
    np.testing.assert_array_equal(np.asarray(got), _bf16_bits(ref))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_activations_against_float64_references(cp, dtype):
    """A 1x1 identity convolution shows the activations alone: tanh within 4 ulps of
    ``math.tanh``; GELU within 8 ulps (float32) or 1e-13 relative (float64, the generic
    series' own accuracy) of ``x erfc(-x / sqrt 2) / 2`` by ``math.erfc``; -0, +0 and NaN
    kept by tanh."""
    import math

    v = np.concatenate([np.linspace(-12, 12, 2401), [1e-30, -1e-30, 0.3, -0.3, 1e-8, 40, -40]])
    x = v.astype(dtype).reshape(-1, 1, 1)
    xs = x.astype(np.float64).ravel()
    one = cp.asfake(np.ones((1, 1, 1), dtype))
    refs = {"tanh": (math.tanh, 4.0, None),
            "gelu": (lambda t: 0.5 * t * math.erfc(-t / math.sqrt(2)), 8.0,
                     1e-13 if dtype == np.float64 else None)}
    for act, (f, ulps, rel) in refs.items():
        got = np.asarray(_cupy.conv_positional(cp.asfake(x), one, None, activation=act,
                                               residual=False, dtype=np.dtype(dtype), xp=cp))
        got = got.astype(np.float64).ravel()
        ref = np.array([f(t) for t in xs])
        bound = rel * np.abs(ref) if rel else ulps * np.spacing(np.abs(ref).astype(dtype))
        assert (np.abs(got - ref) <= bound).all(), (act, np.max(np.abs(got - ref) / bound))
    special = np.array([-0.0, 0.0, np.nan], dtype).reshape(-1, 1, 1)
    got = np.asarray(_cupy.conv_positional(cp.asfake(special), one, None, activation="tanh",
                                           residual=False, dtype=np.dtype(dtype), xp=cp))
    assert np.signbit(got[0]).all() and not np.signbit(got[1]).any() and np.isnan(got[2]).all()


def test_conv_erfc_series_is_the_generic_codes():
    """The Chebyshev coefficients written out in kernels.cu are ``_xp._ERFC_CHEB``."""
    import re

    src = driver.cuda_source()
    body = src[src.index("__device__ __forceinline__ C gelu_c"):]
    terms = [float(t) for t in re.findall(r"ARRPOS_CLENSHAW\(([-+0-9.e]+)\)", body)]
    c0 = float(re.search(r"C\((-0\.65\d+)\)", body).group(1))
    assert terms[::-1] == list(_xp._ERFC_CHEB[1:]) and c0 == _xp._ERFC_CHEB[0]
    # float sums the generic path's first _ERFC_TERMS_FLOAT32 terms: the rest are double's only
    double_only = body[body.index("if (sizeof(C) == 8) {"):]
    double_only = double_only[:double_only.index("}")]
    skipped = [float(t) for t in re.findall(r"ARRPOS_CLENSHAW\(([-+0-9.e]+)\)", double_only)]
    assert skipped[::-1] == list(_xp._ERFC_CHEB[_xp._ERFC_TERMS_FLOAT32:])


def test_conv_positional_guards(cp):
    x = cp.asfake(np.zeros((2, 3, 1, 4), np.float32))
    w = cp.asfake(np.ones((3, 1, 4), np.float32))
    with pytest.raises(Unsupported):  # weight of another channel count
        driver.conv_positional(x, cp.asfake(np.ones((3, 1, 5), np.float32)), None, None, None,
                               True, "float32")
    with pytest.raises(Unsupported):  # an unknown activation
        driver.conv_positional(x, w, None, None, "relu", True, "float32")
    with pytest.raises(Unsupported):  # host memory
        driver.conv_positional(x, np.ones((3, 1, 4), np.float32), None, None, None, True,
                               "float32")
    with pytest.raises(Unsupported):  # x of another type than the storage named
        driver.conv_positional(x, w, None, None, None, True, "float64")
    assert not cp.launches
    empty = _cupy.conv_positional(cp.asfake(np.zeros((0, 3, 1, 4), np.float32)), w, None,
                                  activation="gelu", residual=True,
                                  dtype=np.dtype(np.float32), xp=cp)
    assert empty.shape == (0, 3, 1, 4) and not cp.launches


def test_torch_bridge_conv_positional(bridge, cp):
    torch, tc = bridge
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(2, 7, 1, 5, generator=g) * 6 - 3).to(torch.bfloat16)
    w = torch.rand(3, 1, 5, generator=g, dtype=torch.float64) - 0.5  # converted to float32
    b = torch.rand(5, generator=g).to(torch.bfloat16)
    got = tc.conv_positional(x.transpose(0, 1).contiguous().transpose(0, 1), w, b,
                             activation=None, residual=True, dtype=torch.bfloat16, xp=None)
    ref = _xp.conv_positional(x.float().numpy(), w.float().numpy(), b.float().numpy(),
                              activation=None, residual=True, dtype=np.dtype(np.float32),
                              xp=npx)
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    assert torch.equal(got, torch.from_numpy(ref).to(torch.bfloat16))
    assert cp.launches[-1][0] == "arrpos::conv_positional<arrpos::bfloat16>"


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("activation", ["gelu", "tanh"])
def test_conv_positional_equals_the_cpu_kernel(cp, dtype, activation):
    """float32 arithmetic (float16 storage included): the CUDA kernel's activations are the
    CPU kernel's, operation for operation, so the results agree bit for bit (float64 tanh
    differs: the CPU kernel calls the C library's)."""
    from arrpos import _dispatch

    host = _dispatch.front_end("host.numpy")
    if host is None:
        pytest.skip("the compiled CPU kernels are not built or are disabled")
    rng = np.random.default_rng(26)
    x, w, b = _conv_case(rng, "2d", dtype)
    got = _cupy.conv_positional(cp.asfake(x), cp.asfake(w), cp.asfake(b), activation=activation,
                                residual=True, dtype=np.dtype(dtype), xp=cp)
    ref = host.conv_positional(x, w, b, activation=activation, residual=True,
                               dtype=np.dtype(dtype), xp=npx)
    np.testing.assert_array_equal(np.asarray(got), ref)


def test_new_ops_make_no_host_copies_or_synchronisation(cp, monkeypatch):
    """Graph-capture safety of the bias and convolution twins: their conversions (ids to
    int64, positions broadcast, weights to the working type) and the mask's scan stay on the
    device."""
    forbidden = _forbid_host_copies(cp, monkeypatch)
    real_contiguous = cp.ascontiguousarray
    monkeypatch.setattr(cp, "ascontiguousarray", lambda a, dtype=None: (
        real_contiguous(a, dtype=dtype) if isinstance(a, cuda_emulation.FakeArray)
        else forbidden()))
    slopes = cp.asfake(np.array([0.5, 0.25], np.float32))
    pos = cp.asfake(np.array([[0, 3, 1]], np.int32))
    _cupy.alibi_bias_from_positions(slopes, pos, pos, mode="causal", lead=(1,),
                                    dtype=np.dtype(np.float32), xp=cp)
    _cupy.alibi_bias_from_mask(slopes, cp.asfake(np.array([[0, 1, 1]], bool)),
                               dtype=np.dtype(np.float32), xp=cp)
    _cupy.relative_bias(cp.asfake(np.ones((4, 2), np.float32)), pos,
                        dtype=np.dtype(np.float32), xp=cp)
    x = cp.asfake(np.ones((2, 3, 1, 4), np.float16))
    _cupy.conv_positional(x, cp.asfake(np.ones((3, 1, 4))), cp.asfake(np.ones(4)),
                          activation="gelu", residual=True, dtype=np.dtype(np.float16), xp=cp)
    assert len(cp.launches) == 4


# ------------------------------------------------------------------------------------------
# resample_grid: the separable taps (host-made, arrpos._taps) applied as the CPU kernel and the
# generic code apply them: in float64, the first grid axis first, each product rounded and
# added in tap order, one rounding. With two channels or more the generic sums run in that
# order too, so the results are equal bit for bit (one channel with 8 taps and more: NumPy
# sums pairwise, tests/test_resample_kernels.py's stated tolerance).

def _resample_taps(old, new, method, antialias, single, align_corners=False):
    from arrpos import _taps

    return tuple(None if a == b else _taps.host_taps(a, b, method, antialias, single,
                                                     align_corners)
                 for a, b in zip(old, new))


def _resample_case(rng, form, dtype):
    """``(grid, prefix, old, new, method, antialias, align_corners)``."""
    if form == "1d":
        grid, old, new = rng.standard_normal((2, 7, 5)), (7,), (12,)
        return grid.astype(dtype), None, old, new, "linear", False, True
    if form == "up":  # a ViT's 14 x 14 -> 32 x 32 in small: 4 x 3 -> 9 x 7, class token
        table = rng.standard_normal((1 + 4 * 3, 6)).astype(dtype)
        return (table[1:].reshape(4, 3, 6), table[:1], (4, 3), (9, 7), "cubic", False,
                False)
    if form == "down":  # antialiased shrink: 17 and 9 taps a side, several launches
        grid = rng.standard_normal((2, 40, 30, 3)).astype(dtype)
        return grid, None, (40, 30), (5, 7), "cubic", True, False
    if form == "one_axis":  # the first axis kept, the second resampled (and strided channels)
        grid = rng.standard_normal((5, 6, 8)).astype(dtype)[..., ::2]
        return grid, None, (5, 6), (5, 11), "linear", True, False
    # reversed rows and channels (negative strides), a prefix of two rows
    table = rng.standard_normal((3, 2 + 6 * 5, 4)).astype(dtype)[:, ::-1, ::-1]
    return (table[:, 2:].reshape(3, 6, 5, 4), table[:, :2], (6, 5), (4, 8), "cubic", True,
            True)


_RESAMPLE_FORMS = ["1d", "up", "down", "one_axis", "reversed"]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("form", _RESAMPLE_FORMS)
def test_resample_grid_matches_generic(cp, dtype, form):
    rng = np.random.default_rng(30)
    grid, prefix, old, new, method, aa, corners = _resample_case(rng, form, dtype)
    taps = _resample_taps(old, new, method, aa, dtype != np.float64, corners)
    got = _cupy.resample_grid(cp.asfake(grid), None if prefix is None else cp.asfake(prefix),
                              taps=taps, dtype=np.dtype(dtype), xp=cp)
    ref = _xp.resample_grid(grid, prefix, taps=taps, dtype=np.dtype(dtype), xp=npx)
    got = np.asarray(got)
    assert got.shape == ref.shape and got.dtype == ref.dtype and got.flags.c_contiguous
    assert got.tobytes() == ref.tobytes(), np.abs(got.astype(float) - ref.astype(float)).max()
    assert cp.launches[-1][0] == driver.kernel_name("resample_grid", np.dtype(dtype).name)
    if form == "down":  # 5 x 17 + 7 x 9 taps: more than one block of kernel parameters
        assert len(cp.launches) > 1


def test_resample_grid_bfloat16_rounds_once(cp):
    """bfloat16 (int16 bits, torch's route): the float64 sums rounded once to bfloat16, as the
    generic code rounds its float64 result."""
    rng = np.random.default_rng(31)
    grid = _bf16_value(_bf16_bits(rng.uniform(-3, 3, (2, 5, 4, 6))))
    taps = _resample_taps((5, 4), (9, 3), "cubic", True, True)
    got = driver.resample_grid(cp.asfake(_bf16_bits(grid)), None, taps, None, "bfloat16")
    exact = _xp.resample_grid(grid.astype(np.float64), None, taps=taps,
                              dtype=np.dtype(np.float64), xp=npx)
    np.testing.assert_array_equal(_bf16_value(np.asarray(got)).astype(np.float64),
                                  _bf16_round(exact))


def test_resample_grid_launch_blocks_and_refusals(cp, monkeypatch):
    """Output rows and columns are launched in blocks whose taps fit the by-value block (each
    covering every output once); an output whose own taps do not fit, a third grid axis or
    prefix rows of another type are refused before anything is written, and the dispatcher
    then serves the call with the generic code."""
    for ho, th, wo, tw in [(5, 17, 7, 9), (64, 4, 64, 4), (3, 100, 2, 156), (200, 0, 9, 30),
                           (1, 256, 1, 0)]:
        rows, cols = tap_blocks.spans(ho, th, wo, tw)
        assert sum(n for _, n in rows) == ho and sum(n for _, n in cols) == wo
        assert max(n for _, n in rows) * th + max(n for _, n in cols) * tw <= \
            tap_blocks.TAPS_BLOCK
        assert [a for a, _ in rows] == list(np.cumsum([0] + [n for _, n in rows])[:-1])
    rng = np.random.default_rng(32)
    grid = cp.asfake(rng.standard_normal((160, 120, 2)))
    wide = _resample_taps((160, 120), (4, 3), "cubic", True, False)  # 161 + 161 taps
    with pytest.raises(Unsupported, match="taps"):
        _cupy.resample_grid(grid, None, taps=wide, dtype=np.dtype(np.float64), xp=cp)
    got = _through_dispatch(monkeypatch, "resample_grid", grid, None, arrays=(grid, None),
                            taps=wide, dtype=np.dtype(np.float64))
    ref = _xp.resample_grid(np.asarray(grid), None, taps=wide, dtype=np.dtype(np.float64),
                            xp=npx)
    assert np.asarray(got).tobytes() == ref.tobytes()
    cube = cp.asfake(np.ones((3, 3, 3, 2)))
    with pytest.raises(Unsupported):
        driver.resample_grid(cube, None, _resample_taps((3, 3, 3), (4, 4, 4), "linear", False,
                                                        False), None, "float64")
    small = cp.asfake(np.ones((3, 3, 2)))
    with pytest.raises(Unsupported):  # a prefix of another type than the grid's
        driver.resample_grid(small, cp.asfake(np.ones((1, 2), np.float32)),
                             _resample_taps((3, 3), (4, 4), "linear", False, False), None,
                             "float64")
    assert not cp.launches


def test_resample_grid_many_taps_one_channel(cp):
    """One channel and many taps: NumPy's pairwise sums against the kernel's sum in order,
    within 1 ulp of a float32 output (tests/test_resample_kernels.py's stated tolerance)."""
    rng = np.random.default_rng(33)
    grid = rng.standard_normal((48, 40, 1)).astype(np.float32)
    taps = _resample_taps((48, 40), (4, 5), "linear", True, True)
    got = np.asarray(_cupy.resample_grid(cp.asfake(grid), None, taps=taps,
                                         dtype=np.dtype(np.float32), xp=cp))
    ref = _xp.resample_grid(grid, None, taps=taps, dtype=np.dtype(np.float32), xp=npx)
    assert (np.abs(got - ref) <= np.spacing(np.abs(ref))).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_resample_grid_equals_the_cpu_kernel(cp, dtype):
    from arrpos import _dispatch

    host = _dispatch.front_end("host.numpy")
    if host is None:
        pytest.skip("the compiled CPU kernels are not built or are disabled")
    rng = np.random.default_rng(34)
    for form in _RESAMPLE_FORMS:
        grid, prefix, old, new, method, aa, corners = _resample_case(rng, form, dtype)
        taps = _resample_taps(old, new, method, aa, dtype != np.float64, corners)
        got = _cupy.resample_grid(cp.asfake(grid),
                                  None if prefix is None else cp.asfake(prefix), taps=taps,
                                  dtype=np.dtype(dtype), xp=cp)
        ref = host.resample_grid(grid, prefix, taps=taps, dtype=np.dtype(dtype), xp=npx)
        assert np.asarray(got).tobytes() == np.asarray(ref).tobytes(), form


def test_torch_bridge_resample_grid(bridge, cp):
    torch, tc = bridge
    g = torch.Generator().manual_seed(4)
    table = (torch.rand(2, 1 + 6 * 4, 5, generator=g) * 6 - 3).to(torch.bfloat16)
    grid = table[:, 1:].reshape(2, 6, 4, 5)
    taps = _resample_taps((6, 4), (3, 9), "cubic", True, True)
    got = tc.resample_grid(grid, table[:, :1], taps=taps, dtype=torch.bfloat16, xp=None)
    exact = _xp.resample_grid(grid.double().numpy(), table[:, :1].double().numpy(), taps=taps,
                              dtype=np.dtype(np.float64), xp=npx)
    assert got.dtype == torch.bfloat16 and got.shape == (2, 1 + 27, 5)
    np.testing.assert_array_equal(got.double().numpy(), _bf16_round(exact))
    assert cp.launches[-1][0] == "arrpos::resample_grid<arrpos::bfloat16>"
    t32 = torch.randn(1 + 9, 3, generator=g, dtype=torch.float32)
    taps = _resample_taps((3, 3), (5, 2), "linear", False, True)
    got = tc.resample_grid(t32[1:].reshape(3, 3, 3), t32[:1], taps=taps, dtype=torch.float32,
                           xp=None)
    ref = _xp.resample_grid(t32[1:].reshape(3, 3, 3).numpy(), t32[:1].numpy(), taps=taps,
                            dtype=np.dtype(np.float32), xp=npx)
    assert got.numpy().tobytes() == ref.tobytes()


def test_resample_grid_makes_no_host_copies_or_synchronisation(cp, monkeypatch):
    """Graph-capture safety: the host taps travel in the kernel parameters (no device array
    is made from host data), the prefix rows and a strided grid are copied on the device."""
    forbidden = _forbid_host_copies(cp, monkeypatch)
    real_contiguous = cp.ascontiguousarray
    monkeypatch.setattr(cp, "ascontiguousarray", lambda a, dtype=None: (
        real_contiguous(a, dtype=dtype) if isinstance(a, cuda_emulation.FakeArray)
        else forbidden()))
    rng = np.random.default_rng(35)
    for form in _RESAMPLE_FORMS:
        grid, prefix, old, new, method, aa, corners = _resample_case(rng, form, np.float32)
        taps = _resample_taps(old, new, method, aa, True, corners)
        _cupy.resample_grid(cp.asfake(grid), None if prefix is None else cp.asfake(prefix),
                            taps=taps, dtype=np.dtype(np.float32), xp=cp)
    assert len(cp.launches) >= len(_RESAMPLE_FORMS)
    assert all(name.startswith("arrpos::resample_grid<") for name, _, _ in cp.launches)

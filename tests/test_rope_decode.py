"""RoPE.apply from integer positions through its cached half-width tables (issue 12, item 1).

The cache path (one apply_rope_cached call per step) must give what the table path gives
(rope_cos_sin at the positions, then apply_rope): each token is compared with the table path
run on that token's position alone. Equal up to one rounding: the compiled apply_rope and
apply_rope_cached kernels may round the interleaved tail of a partial rotary differently (by one
rounding of an operand); every other case seen is bit for bit (asserted for the half layout on
NumPy). An independent float64
formula bounds both.
"""
from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import array_namespace

import arrpos

LAYOUTS = ["half", "interleaved"]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _dtypes(backend):
    return [np.float32, np.float64] if backend.float64 else [np.float32]


def _table_path(rope, x, pos, heads_axis, seq_len=None):
    """What RoPE.apply computed before the cache: tables at the positions, then apply_rope."""
    cos, sin = rope.cos_sin(pos, dtype=x.dtype, seq_len=seq_len)
    if heads_axis is not None:
        xp = array_namespace(cos)
        cos = xp.expand_dims(cos, axis=cos.ndim + heads_axis + 1)
        sin = xp.expand_dims(sin, axis=sin.ndim + heads_axis + 1)
    return arrpos.apply_rope(x, cos, sin, layout=rope.layout)


def _per_token_reference(backend, rope, x, pos, heads_axis, seq_len=None):
    """The table path on each sequence's own position (what a lone decode step gets)."""
    want = np.empty(x.shape, dtype=x.dtype)
    for b in range(x.shape[0]):
        xb = backend.asarray(x[b:b + 1])
        pb = backend.asarray(pos[b:b + 1])
        want[b:b + 1] = backend.to_numpy(_table_path(rope, xb, pb, heads_axis, seq_len))
    return want


def _same(got, want):
    """Equal up to one rounding of the result (the kernels' differing last bit, absolute:
    near a cancellation one ulp of an operand is many of the result)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    eps = np.finfo(got.dtype).eps
    np.testing.assert_allclose(got, want, rtol=0, atol=2 * eps * max(1.0, np.abs(want).max()))


def _formula(rope, x, pos, heads_axis):
    """float64 cos/sin of p * inv_freq (plain NumPy), rotated in float64: an independent bound."""
    inv, att = rope.frequencies(None, np, dtype=np.float64)
    theta = pos[..., None].astype(np.float64) * inv
    c, s = att * np.cos(theta), att * np.sin(theta)
    if heads_axis is not None:
        c = np.expand_dims(c, c.ndim + heads_axis + 1)
        s = np.expand_dims(s, s.ndim + heads_axis + 1)
    x = x.astype(np.float64)
    r, h = rope.rotary_dim, rope.rotary_dim // 2
    out = x.copy()
    first, second = ((np.arange(h), np.arange(h) + h) if rope.layout == "half"
                     else (np.arange(0, r, 2), np.arange(1, r, 2)))
    for i, (a, b) in enumerate(zip(first, second)):
        out[..., a] = x[..., a] * c[..., i] - x[..., b] * s[..., i]
        out[..., b] = x[..., b] * c[..., i] + x[..., a] * s[..., i]
    return out


def _decode_case(seed, heads_axis, dtype, batch=4, heads=3, dim=16):
    rng = _rng(seed)
    if heads_axis == -2:
        x = rng.standard_normal((batch, 1, heads, dim))
    elif heads_axis == -3:
        x = rng.standard_normal((batch, heads, 1, dim))
    else:
        x = rng.standard_normal((batch, 1, dim))
    return x.astype(dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("heads_axis", [-2, -3, None])
@pytest.mark.parametrize("prf", [1.0, 0.5])
def test_cache_equals_table_path(backend, layout, heads_axis, prf):
    rope = arrpos.RoPE(16, layout=layout, partial_rotary_factor=prf, base=500.0)
    for dtype in _dtypes(backend):
        # mixed positions per sequence, then past the first cache (1024 rows): it grows
        for step, top in enumerate((900, 3000, 70000)):
            x = _decode_case(step, heads_axis, dtype)
            pos = _rng(10 + step).integers(0, top, size=(x.shape[0], 1))
            got = backend.to_numpy(rope.apply(backend.asarray(x), backend.asarray(pos),
                                              heads_axis=heads_axis))
            want = _per_token_reference(backend, rope, x, pos, heads_axis)
            _same(got, want)
            if backend.name == "numpy" and layout == "half":
                np.testing.assert_array_equal(got, want)
            exact = _formula(rope, x, pos, heads_axis)
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, exact, rtol=0, atol=tol * np.abs(x).max())


def test_cache_grows_and_is_used(numpy_backend):
    rope = arrpos.RoPE(8, base=123.0)
    x = _decode_case(1, -2, np.float32, dim=8)
    entries = lambda: list(rope._tables.values())  # noqa: E731  (the caches it holds)
    rope.apply(x, np.full((4, 1), 5), heads_axis=-2)
    assert [e.rows for e in entries()] == [1024]
    y = rope.apply(x, np.full((4, 1), 5000), heads_axis=-2)
    assert [e.rows for e in entries()] == [8192]  # doubled to a power of two past 5000
    want = _per_token_reference(numpy_backend, rope, x, np.full((4, 1), 5000), -2)
    _same(y, want)


def test_cache_keyed_per_dtype(backend):
    if not backend.float64:
        pytest.skip("no float64 on this backend")
    rope = arrpos.RoPE(16, base=777.0)
    pos = np.array([[3], [1500], [40], [2047]])
    x32 = _decode_case(3, -2, np.float32)
    x64 = _decode_case(3, -2, np.float64)
    y32 = rope.apply(backend.asarray(x32), backend.asarray(pos), heads_axis=-2)
    y64 = rope.apply(backend.asarray(x64), backend.asarray(pos), heads_axis=-2)
    assert backend.to_numpy(y32).dtype == np.float32
    assert backend.to_numpy(y64).dtype == np.float64
    want64 = _per_token_reference(backend, rope, x64, pos, -2)
    _same(backend.to_numpy(y64), want64)
    # float32 tables would leave ~1e-7 errors in the float64 result
    exact = _formula(rope, x64, pos, -2)
    np.testing.assert_allclose(backend.to_numpy(y64), exact, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scaling", [
    arrpos.DynamicNTKScaling(2.0, 64),
    arrpos.LongRopeScaling([1.0, 1.5, 2.0, 3.0], [2.0, 4.0, 8.0, 16.0], 64, factor=8.0),
], ids=["dynamic", "longrope"])
def test_seq_dependent_scalings(backend, scaling):
    rope = arrpos.RoPE(8, scaling=scaling)
    dtype = np.float64 if backend.float64 else np.float32
    # below the original length (short/default frequencies), then past it, each twice (the
    # cache of a frequency set is built the second time it is met)
    for top in (40, 40, 300, 300, 301):
        x = _decode_case(top, -2, dtype, dim=8)
        pos = np.array([[0], [top - 1], [top // 2], [7]])
        lazy = {"seq_len": top} if backend.name == "dask" else {}  # not read from the ids
        got = backend.to_numpy(rope.apply(backend.asarray(x), backend.asarray(pos),
                                          heads_axis=-2, **lazy))
        want = _per_token_reference(backend, rope, x, pos, -2, seq_len=top)
        _same(got, want)
        # and the table path over the whole batch (seq_len from its largest position)
        whole = backend.to_numpy(_table_path(rope, backend.asarray(x), backend.asarray(pos),
                                             -2, **lazy))
        np.testing.assert_allclose(got, whole, rtol=0, atol=1e-5 if dtype == np.float32
                                   else 1e-13)


def test_out_and_in_place(backend):
    if not backend.mutable:
        pytest.skip("immutable arrays")
    rope = arrpos.RoPE(16)
    x = _decode_case(5, -2, np.float32)
    pos = np.array([[9], [99], [999], [1999]])
    want = _per_token_reference(backend, rope, x, pos, -2)
    out = backend.asarray(np.zeros_like(x))
    res = rope.apply(backend.asarray(x), backend.asarray(pos), heads_axis=-2, out=out)
    assert res is out
    _same(backend.to_numpy(out), want)
    xb = backend.asarray(x.copy())
    res = rope.apply(xb, backend.asarray(pos), heads_axis=-2, out=xb, inverse=False)
    _same(backend.to_numpy(xb), want)


def test_fallbacks_match_table_path(numpy_backend):
    x = _decode_case(6, -2, np.float64)
    rope = arrpos.RoPE(16)
    # negative and real positions are not cache rows: the table path serves them
    for pos in (np.array([[-3], [5], [0], [2]]), np.array([[1.5], [2.0], [3.25], [0.0]])):
        got = rope.apply(x, pos, heads_axis=-2)
        np.testing.assert_allclose(got, _formula(rope, x, pos, -2), rtol=0, atol=1e-12)
    mm = arrpos.RoPE(16, axes=arrpos.mrope_axes([4, 2, 2]))
    coords = _rng(7).integers(0, 50, size=(4, 1, 3))
    got = mm.apply(x, coords, heads_axis=-2)
    np.testing.assert_array_equal(got, _table_path(mm, x, coords, -2))


def test_errors_unchanged(numpy_backend):
    rope = arrpos.RoPE(16)
    x = _decode_case(8, -2, np.float32)
    with pytest.raises(ValueError):
        rope.apply(x, np.zeros((5, 1), dtype=np.int64), heads_axis=-2)  # does not broadcast
    with pytest.raises(ValueError, match="out"):
        rope.apply(x, np.zeros((4, 1), dtype=np.int64), heads_axis=-2,
                   out=np.empty((4, 1, 3, 8), np.float32))

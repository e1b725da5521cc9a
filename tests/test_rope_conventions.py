"""The rotary conventions of issue 13 on every backend, against float64 formulas written here:
apply_rope_cached (the ONNX form), apply_rope_qk, xpos_scale, NTKScaling, pixel_frequencies,
period_frequencies and RoPE-Mixed (a 2-D inv_freq in rope_cos_sin); their errors.

Comparisons with the peers' own code (onnx, onnxruntime, rotary-embedding-torch,
x-transformers, transformers, timm's formulas) are in test_rope_peers.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos
from conftest import get_backend

LAYOUTS = ["half", "interleaved"]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _work(backend):
    """The dtype the backend computes our float64 test data in (float32 for JAX without x64)."""
    return np.float64 if backend.float64 else np.float32


def _tol(backend, scale=1.0):
    return (1e-14 if backend.float64 else 1e-6) * scale


def _pairs(r, layout):
    """Indices (first, second) of the rotated pairs of a rotary width r."""
    if layout == "half":
        return np.arange(r // 2), np.arange(r // 2) + r // 2
    return np.arange(0, r, 2), np.arange(1, r, 2)


def rotate_loop(x, c, s, layout, inverse=False):
    """Reference rotation: pair (a, b) -> (a c - b s, b c + a s) with half-width c, s that
    broadcast against x[..., :1]; features past 2 * c.shape[-1] pass through."""
    x = np.asarray(x, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    s = -np.asarray(s, dtype=np.float64) if inverse else np.asarray(s, dtype=np.float64)
    out = x.copy()
    first, second = _pairs(2 * c.shape[-1], layout)
    for i, (a, b) in enumerate(zip(first, second)):
        out[..., a] = x[..., a] * c[..., i] - x[..., b] * s[..., i]
        out[..., b] = x[..., b] * c[..., i] + x[..., a] * s[..., i]
    return out


# --- apply_rope_cached -------------------------------------------------------------------------


def _cached_case(seed=0, shape=(2, 3, 4, 10), half=4, max_positions=20):
    rng = _rng(seed)
    x = rng.standard_normal(shape)
    cos_cache = rng.standard_normal((max_positions, half))
    sin_cache = rng.standard_normal((max_positions, half))
    return x, cos_cache, sin_cache


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("inverse", [False, True])
def test_cached_matches_loop_seq_heads(backend, layout, inverse):
    x, cc, sc = _cached_case()
    ids = _rng(1).integers(0, 20, size=(2, 3))
    want = rotate_loop(x, cc[ids][:, :, None, :], sc[ids][:, :, None, :], layout, inverse)
    got = arrpos.apply_rope_cached(backend.asarray(x), backend.asarray(cc), backend.asarray(sc),
                                   backend.asarray(ids[:, :, None]), layout=layout,
                                   inverse=inverse)
    assert tuple(got.shape) == x.shape
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend, 10))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cached_heads_first_and_full_width(backend, layout):
    # (batch, heads, seq, D), R == D, ids (batch, 1, seq)
    x, cc, sc = _cached_case(2, shape=(2, 4, 5, 8), half=4, max_positions=9)
    ids = _rng(3).integers(0, 9, size=(2, 5))
    want = rotate_loop(x, cc[ids][:, None], sc[ids][:, None], layout)
    got = arrpos.apply_rope_cached(backend.asarray(x), backend.asarray(cc), backend.asarray(sc),
                                   backend.asarray(ids[:, None, :]), layout=layout)
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend, 10))


def test_cached_equals_apply_rope_on_widened_tables(numpy_backend):
    x, cc, sc = _cached_case(4)
    ids = _rng(5).integers(0, 20, size=(3, 1))
    for layout in LAYOUTS:
        widen = ((lambda t: np.concatenate([t, t], -1)) if layout == "half"
                 else (lambda t: np.repeat(t, 2, -1)))
        want = arrpos.apply_rope(x, widen(cc[ids]), widen(sc[ids]), layout=layout)
        got = arrpos.apply_rope_cached(x, cc, sc, ids, layout=layout)
        # the compiled apply_rope may fuse multiply-adds: equal to the last bit or two
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("id_dtype", [np.uint8, np.int16, np.int32, np.int64])
def test_cached_any_integer_id_dtype(backend, id_dtype):
    x, cc, sc = _cached_case(19, shape=(3, 2, 8), half=4)
    ids = np.array([[1], [19], [0]], dtype=id_dtype)
    want = rotate_loop(x, cc[ids.astype(np.int64)], sc[ids.astype(np.int64)], "half")
    got = arrpos.apply_rope_cached(backend.asarray(x), backend.asarray(cc), backend.asarray(sc),
                                   backend.asarray(ids))
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend, 10))


def test_cached_inverse_undoes_and_dtype_follows_x(backend):
    inv, _ = arrpos.rope_frequencies(8, xp=backend.module,
                                     dtype=backend.xp.float64 if backend.float64 else None)
    cos, sin = arrpos.rope_cos_sin(backend.asarray(np.arange(16)), inv)
    cc, sc = cos[:, :4], sin[:, :4]
    x = backend.asarray(_rng(6).standard_normal((3, 2, 8)).astype(np.float32))
    ids = backend.asarray(np.array([[4], [15], [0]]))
    y = arrpos.apply_rope_cached(x, cc, sc, ids)
    assert y.dtype == x.dtype
    back = arrpos.apply_rope_cached(y, cc, sc, ids, inverse=True)
    np.testing.assert_allclose(backend.to_numpy(back), backend.to_numpy(x), atol=2e-6)
    norms = np.linalg.norm(backend.to_numpy(y), axis=-1)
    np.testing.assert_allclose(norms, np.linalg.norm(backend.to_numpy(x), axis=-1), rtol=2e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cached_out_and_in_place(backend, layout):
    if not backend.mutable:
        pytest.skip("immutable arrays (refusal checked in test_cached_errors)")
    x, cc, sc = _cached_case(7)
    ids = _rng(8).integers(0, 20, size=(2, 3, 1))
    want = rotate_loop(x, cc[ids], sc[ids], layout)
    args = [backend.asarray(a) for a in (cc, sc, ids)]
    out = backend.asarray(np.zeros_like(x))
    res = arrpos.apply_rope_cached(backend.asarray(x), *args, layout=layout, out=out)
    assert res is out
    np.testing.assert_allclose(backend.to_numpy(out), want, atol=_tol(backend, 10))
    xb = backend.asarray(x.copy())
    res = arrpos.apply_rope_cached(xb, *args, layout=layout, out=xb)
    assert res is xb
    np.testing.assert_allclose(backend.to_numpy(xb), want, atol=_tol(backend, 10))


def test_cached_jit_and_gradients():
    import jax
    import torch

    x, cc, sc = _cached_case(9, shape=(3, 2, 8), half=4)
    ids = np.array([[1], [5], [19]])
    want = rotate_loop(x, cc[ids], sc[ids], "half")
    b = get_backend("jax")
    f = jax.jit(lambda a, c, s, i: arrpos.apply_rope_cached(a, c, s, i))
    got = f(*(b.asarray(a) for a in (x, cc, sc, ids)))
    np.testing.assert_allclose(np.asarray(got), want, atol=_tol(b, 10))
    xt = torch.tensor(x, requires_grad=True)
    y = arrpos.apply_rope_cached(xt, torch.tensor(cc), torch.tensor(sc), torch.tensor(ids))
    g = torch.tensor(_rng(10).standard_normal(x.shape))
    (y * g).sum().backward()
    # the gradient of a rotation is the inverse rotation of the incoming gradient
    np.testing.assert_allclose(xt.grad.numpy(), rotate_loop(g.numpy(), cc[ids], sc[ids],
                                                             "half", inverse=True), atol=1e-14)


def test_cached_errors(backend):
    x, cc, sc = _cached_case(11)
    X, C, S = backend.asarray(x), backend.asarray(cc), backend.asarray(sc)
    ids = backend.asarray(np.zeros((2, 3, 1), dtype=np.int64))
    with pytest.raises(TypeError, match="position_ids must be an integer array"):
        arrpos.apply_rope_cached(X, C, S, backend.asarray(np.zeros((2, 3, 1))))
    with pytest.raises(TypeError, match="x must be a (real )?floating array"):
        arrpos.apply_rope_cached(backend.asarray(np.zeros(x.shape, dtype=np.int32)), C, S, ids)
    with pytest.raises(ValueError, match="cos_cache and sin_cache must have the same shape"):
        arrpos.apply_rope_cached(X, C, S[:5, ...], ids)
    with pytest.raises(ValueError, match=r"cos_cache must have shape \(max_positions"):
        arrpos.apply_rope_cached(X, C[0, ...], S[0, ...], ids)
    with pytest.raises(ValueError, match="wider than x"):
        wide = backend.asarray(np.zeros((20, 6)))
        arrpos.apply_rope_cached(X, wide, wide, ids)
    with pytest.raises(ValueError, match="position_ids of shape .* do not broadcast"):
        arrpos.apply_rope_cached(X, C, S, backend.asarray(np.zeros((2, 3), dtype=np.int64)))
    with pytest.raises(ValueError, match="layout"):
        arrpos.apply_rope_cached(X, C, S, ids, layout="neox")
    with pytest.raises(TypeError, match="inverse must be a bool"):
        arrpos.apply_rope_cached(X, C, S, ids, inverse=1)
    if backend.name != "dask":  # lazy ids are not read
        for bad, shown in ((20, "20"), (-1, "-1")):
            ids_bad = np.zeros((2, 3, 1), dtype=np.int64)
            ids_bad[1, 2, 0] = bad
            with pytest.raises(ValueError, match=rf"\[0, 20\).*got {shown}"):
                arrpos.apply_rope_cached(X, C, S, backend.asarray(ids_bad))
    if not backend.mutable:
        with pytest.raises(TypeError, match="out= needs a mutable array"):
            arrpos.apply_rope_cached(X, C, S, ids, out=X)
    else:
        with pytest.raises(ValueError, match="out must have x's shape"):
            arrpos.apply_rope_cached(X, C, S, ids, out=backend.asarray(np.zeros((2, 3, 4, 9))))


def test_cached_validation_is_memoised_but_ids_always_read(numpy_backend):
    x, cc, sc = _cached_case(12)
    ids = np.zeros((2, 3, 1), dtype=np.int64)
    arrpos.apply_rope_cached(x, cc, sc, ids)  # this signature is now known
    ids[0, 0, 0] = 25
    with pytest.raises(ValueError, match="got 25"):
        arrpos.apply_rope_cached(x, cc, sc, ids)


# --- apply_rope_qk -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_qk_grouped_query(backend, layout):
    rng = _rng(13)
    q = rng.standard_normal((2, 8, 5, 12))  # (batch, heads, seq, D)
    k = rng.standard_normal((2, 2, 5, 12))  # two kv heads
    ang = rng.uniform(-4, 4, size=(2, 1, 5, 4))  # half-width, partial rotary R = 8
    c, s = np.cos(ang), np.sin(ang)
    widen = ((lambda t: np.concatenate([t, t], -1)) if layout == "half"
             else (lambda t: np.repeat(t, 2, -1)))
    cos, sin = backend.asarray(widen(c)), backend.asarray(widen(s))
    qr, kr = arrpos.apply_rope_qk(backend.asarray(q), backend.asarray(k), cos, sin,
                                  layout=layout)
    np.testing.assert_allclose(backend.to_numpy(qr), rotate_loop(q, c, s, layout),
                               atol=_tol(backend, 10))
    np.testing.assert_allclose(backend.to_numpy(kr), rotate_loop(k, c, s, layout),
                               atol=_tol(backend, 10))
    qi, ki = arrpos.apply_rope_qk(qr, kr, cos, sin, layout=layout, inverse=True)
    np.testing.assert_allclose(backend.to_numpy(ki), k, atol=_tol(backend, 100))


def test_qk_out_pair_in_place(backend):
    if not backend.mutable:
        pytest.skip("immutable arrays")
    rng = _rng(14)
    q, k = rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 1, 8))
    c, s = rng.standard_normal((3, 1, 4)), rng.standard_normal((3, 1, 4))
    cos, sin = (backend.asarray(np.concatenate([t, t], -1)) for t in (c, s))
    qb, kb = backend.asarray(q.copy()), backend.asarray(k.copy())
    qr, kr = arrpos.apply_rope_qk(qb, kb, cos, sin, out=(qb, kb))
    assert qr is qb and kr is kb
    np.testing.assert_allclose(backend.to_numpy(qb), rotate_loop(q, c, s, "half"),
                               atol=_tol(backend, 10))
    np.testing.assert_allclose(backend.to_numpy(kb), rotate_loop(k, c, s, "half"),
                               atol=_tol(backend, 10))
    kb2 = backend.asarray(k.copy())
    qr, kr = arrpos.apply_rope_qk(backend.asarray(q), kb2, cos, sin, out=(None, kb2))
    assert kr is kb2 and qr is not kb2


def test_qk_errors_name_the_argument(backend):
    rng = _rng(15)
    q = backend.asarray(rng.standard_normal((3, 4, 8)))
    k = backend.asarray(rng.standard_normal((3, 1, 8)))
    cos = sin = backend.asarray(np.ones((3, 1, 8)))
    with pytest.raises(ValueError, match="to k"):
        arrpos.apply_rope_qk(q, backend.asarray(np.ones((2, 1, 8))), cos, sin)
    with pytest.raises(ValueError, match="wider than q"):
        arrpos.apply_rope_qk(backend.asarray(np.ones((3, 4, 6))), k, cos, sin)
    with pytest.raises(TypeError, match="k must be a (real )?floating array"):
        arrpos.apply_rope_qk(q, backend.asarray(np.ones((3, 1, 8), dtype=np.int32)), cos, sin)
    with pytest.raises(TypeError, match="out must be None or a pair"):
        arrpos.apply_rope_qk(q, k, cos, sin, out=q)
    if backend.mutable:
        with pytest.raises(ValueError, match=r"out\[1\] must have k's shape"):
            arrpos.apply_rope_qk(q, k, cos, sin, out=(None, q))


# --- xpos_scale ----------------------------------------------------------------------------------


def xpos_loop(positions, dim, scale_base, layout):
    p = np.asarray(positions, dtype=np.float64)
    zeta = np.array([(2 * i / dim + 0.4) / 1.4 for i in range(dim // 2)])
    s = zeta ** (p[..., None] / scale_base)
    return np.concatenate([s, s], -1) if layout == "half" else np.repeat(s, 2, -1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_xpos_formula(backend, layout):
    pos = np.arange(-40, 41).reshape(9, 9)
    dt = backend.xp.float64 if backend.float64 else backend.xp.float32
    got = arrpos.xpos_scale(backend.asarray(pos), 16, scale_base=64.0, layout=layout, dtype=dt)
    assert tuple(got.shape) == (9, 9, 16)
    want = xpos_loop(pos, 16, 64.0, layout)
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=_tol(backend, 3))
    real = arrpos.xpos_scale(backend.asarray(pos * 0.5), 16, layout=layout, dtype=dt)
    np.testing.assert_allclose(backend.to_numpy(real), xpos_loop(pos * 0.5, 16, 512.0, layout),
                               rtol=_tol(backend, 3))


def test_xpos_exponent_exact_far_from_zero(backend):
    # |exponent| ~ 75: a float32 exponent alone would be 75 * 6e-8 = 4.5e-6 off, relatively
    pos = np.array([-30000, -29999, -12345, 0, 17, 29999, 30000])
    dt = backend.xp.float64 if backend.float64 else backend.xp.float32
    got = arrpos.xpos_scale(backend.asarray(pos), 8, layout="half", dtype=dt)
    rtol = 2e-15 * 80 if backend.float64 else 3e-7
    np.testing.assert_allclose(backend.to_numpy(got), xpos_loop(pos, 8, 512.0, "half"),
                               rtol=rtol)


def test_xpos_dtypes_and_length(backend):
    s = arrpos.xpos_scale(backend.asarray(np.arange(5)), 4)
    default = backend.xp.float64 if backend.float64 else backend.xp.float32
    if backend.name == "torch":
        import torch

        default = torch.get_default_dtype()
    assert s.dtype == default
    s32 = arrpos.xpos_scale(backend.asarray(np.arange(5, dtype=np.float32)), 4)
    assert s32.dtype == backend.xp.float32
    n = arrpos.xpos_scale(5, 4)
    np.testing.assert_allclose(n, xpos_loop(np.arange(5), 4, 512.0, "half"), rtol=1e-15)
    # the query scale times the key scale of the same position is one
    p = backend.asarray(np.array([3.0, -7.0, 100.0]))
    prod = backend.to_numpy(arrpos.xpos_scale(p, 8)) * backend.to_numpy(
        arrpos.xpos_scale(-p, 8))
    np.testing.assert_allclose(prod, 1.0, rtol=_tol(backend, 5))


def test_xpos_errors(backend):
    pos = backend.asarray(np.arange(4))
    with pytest.raises(ValueError, match="dim must be divisible by 2"):
        arrpos.xpos_scale(pos, 7)
    with pytest.raises(ValueError, match="scale_base must be > 0"):
        arrpos.xpos_scale(pos, 8, scale_base=0.0)
    with pytest.raises(ValueError, match="layout"):
        arrpos.xpos_scale(pos, 8, layout="split")
    with pytest.raises(TypeError, match="positions"):
        arrpos.xpos_scale("abc", 8)
    if backend.name != "dask":
        with pytest.raises(ValueError, match=r"\|positions\| < 36.*centre"):
            arrpos.xpos_scale(backend.asarray(np.array([0.0, 40000.0], dtype=np.float32)), 8)
        with pytest.raises(ValueError, match="finite"):
            arrpos.xpos_scale(backend.asarray(np.array([np.nan])), 8)


# --- NTKScaling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dim,factor", [(64, 4.0), (128, 8.0), (4, 2.0)])
def test_ntk_formula(backend, dim, factor):
    new_base = 10000.0 * factor ** (dim / (dim - 2))
    want = np.array([new_base ** (-2 * i / dim) for i in range(dim // 2)])
    dt = backend.xp.float64 if backend.float64 else backend.xp.float32
    inv, att = arrpos.rope_frequencies(dim, scaling=arrpos.NTKScaling(factor),
                                       xp=backend.module, dtype=dt)
    assert att == 1.0
    np.testing.assert_allclose(backend.to_numpy(inv), want, rtol=_tol(backend, 5))
    # no dependence on seq_len
    again, _ = arrpos.rope_frequencies(dim, scaling=arrpos.NTKScaling(factor), seq_len=10**6,
                                       xp=backend.module, dtype=dt)
    np.testing.assert_array_equal(backend.to_numpy(again), backend.to_numpy(inv))


def test_ntk_object():
    a = arrpos.NTKScaling(2)
    assert a == arrpos.NTKScaling(2.0) and hash(a) == hash(arrpos.NTKScaling(2.0))
    assert repr(a) == "NTKScaling(factor=2.0)" and not a.seq_dependent
    # transformers has no static NTK rope_type: no config selects it
    from arrpos._rope.scaling import SCALINGS

    assert a.rope_type == "" and arrpos.NTKScaling not in SCALINGS.values()
    with pytest.raises(AttributeError):
        a.factor = 3.0
    with pytest.raises(ValueError, match="factor must be >= 1"):
        arrpos.NTKScaling(0.5)
    with pytest.raises(TypeError, match="factor must be a real number"):
        arrpos.NTKScaling("2")
    with pytest.raises(ValueError, match="dim must be >= 4 for NTKScaling"):
        arrpos.rope_frequencies(2, scaling=a)
    rope = arrpos.RoPE(64, scaling=a)
    np.testing.assert_array_equal(rope.frequencies()[0],
                                  arrpos.rope_frequencies(64, base=10000.0 * 2 ** (64 / 62))[0])


# --- pixel and period frequencies ----------------------------------------------------------------


def test_pixel_and_period_formulas(backend):
    dt = backend.xp.float64 if backend.float64 else backend.xp.float32
    for dim, max_freq in ((16, 10.0), (2, 7.0), (64, 224.0)):
        got = arrpos.pixel_frequencies(dim, max_freq=max_freq, xp=backend.module, dtype=dt)
        n = dim // 2
        want = [math.pi * (1 + (max_freq / 2 - 1) * j / max(n - 1, 1)) for j in range(n)]
        np.testing.assert_allclose(backend.to_numpy(got), want, rtol=_tol(backend, 3))
    for dim, lo, hi in ((16, 1.0, 100.0), (2, 3.0, 50.0), (32, 0.5, 0.5), (64, 2.0, 1e4)):
        got = arrpos.period_frequencies(dim, min_period=lo, max_period=hi, xp=backend.module,
                                        dtype=dt)
        n = dim // 2
        periods = [lo * math.exp(math.log(hi / lo) * j / max(n - 1, 1)) for j in range(n)]
        np.testing.assert_allclose(backend.to_numpy(got), [2 * math.pi / p for p in periods],
                                   rtol=_tol(backend, 5))


def test_frequency_schedule_defaults_and_errors():
    assert arrpos.pixel_frequencies(8).dtype == np.float64
    assert arrpos.pixel_frequencies(8, dtype=np.float32).dtype == np.float32
    import torch

    t = arrpos.period_frequencies(8, min_period=1, max_period=10, xp=torch)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match="dim must be divisible by 2"):
        arrpos.pixel_frequencies(5)
    with pytest.raises(ValueError, match="max_freq must be > 0"):
        arrpos.pixel_frequencies(8, max_freq=-1.0)
    with pytest.raises(ValueError, match="min_period must be <= max_period"):
        arrpos.period_frequencies(8, min_period=10.0, max_period=1.0)
    with pytest.raises(ValueError, match="min_period must be > 0"):
        arrpos.period_frequencies(8, min_period=0.0, max_period=1.0)
    with pytest.raises(TypeError):
        arrpos.period_frequencies(8, min_period=1.0)  # max_period is required
    with pytest.raises(TypeError, match="dtype"):
        arrpos.pixel_frequencies(8, dtype=np.int32)


# --- RoPE-Mixed ------------------------------------------------------------------------------------


def mixed_loop(positions, inv_freq, layout):
    ang = np.asarray(positions, dtype=np.float64) @ np.asarray(inv_freq, dtype=np.float64)
    widen = ((lambda t: np.concatenate([t, t], -1)) if layout == "half"
             else (lambda t: np.repeat(t, 2, -1)))
    return widen(np.cos(ang)), widen(np.sin(ang))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mixed_formula(backend, layout):
    rng = _rng(16)
    pos = rng.uniform(-20, 20, size=(2, 7, 3)).astype(_work(backend))
    inv = rng.standard_normal((3, 5)).astype(_work(backend))
    cos, sin = arrpos.rope_cos_sin(backend.asarray(pos), backend.asarray(inv), layout=layout,
                                   attention_factor=0.5)
    assert tuple(cos.shape) == (2, 7, 10)
    wc, ws = mixed_loop(pos, inv, layout)
    np.testing.assert_allclose(backend.to_numpy(cos), 0.5 * wc, atol=_tol(backend, 5))
    np.testing.assert_allclose(backend.to_numpy(sin), 0.5 * ws, atol=_tol(backend, 5))
    ipos = rng.integers(0, 50, size=(4, 3))
    cos, sin = arrpos.rope_cos_sin(backend.asarray(ipos), backend.asarray(inv), layout=layout)
    wc, ws = mixed_loop(ipos, inv, layout)
    np.testing.assert_allclose(backend.to_numpy(sin), ws, atol=_tol(backend, 20))


def test_mixed_exact_at_far_positions(backend):
    # angles ~ 1e5 rad: a float32 product alone would be ~4e-3 rad off
    rng = _rng(17)
    inv = rng.uniform(0.5, 1.0, size=(2, 6)).astype(np.float32)
    pos = rng.integers(50_000, 100_000, size=(5, 2))
    cos, sin = arrpos.rope_cos_sin(backend.asarray(pos), backend.asarray(inv),
                                   dtype=backend.xp.float32)
    # float64 products of the exact float32 values, reduced in float64 (~1e-11 rad)
    wc, ws = mixed_loop(pos, inv.astype(np.float64), "half")
    np.testing.assert_allclose(backend.to_numpy(cos), wc, atol=3e-7)
    np.testing.assert_allclose(backend.to_numpy(sin), ws, atol=3e-7)


def test_mixed_with_one_row_is_axial(backend):
    rng = _rng(18)
    w = rng.uniform(0.1, 1, size=4).astype(_work(backend))
    mixed = np.zeros((2, 4), dtype=_work(backend))
    mixed[1] = w
    pos = rng.integers(0, 100, size=(6, 2))
    got = arrpos.rope_cos_sin(backend.asarray(pos), backend.asarray(mixed))
    want = arrpos.rope_cos_sin(backend.asarray(pos), backend.asarray(w), axes=(1, 1, 1, 1))
    for g, h in zip(got, want):
        np.testing.assert_allclose(backend.to_numpy(g), backend.to_numpy(h),
                                   atol=_tol(backend, 5))


def test_mixed_errors(backend):
    inv = backend.asarray(np.ones((2, 3)))
    pos = backend.asarray(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="trailing axis of 2 coordinates"):
        arrpos.rope_cos_sin(backend.asarray(np.zeros((4, 3))), inv)
    with pytest.raises(ValueError, match="axes cannot be combined"):
        arrpos.rope_cos_sin(pos, inv, axes=(0, 1, 0))
    with pytest.raises(TypeError, match="array of coordinates"):
        arrpos.rope_cos_sin(2, inv)
    with pytest.raises(ValueError, match=r"inv_freq must have shape \(F,\) or \(n_coords, F\)"):
        arrpos.rope_cos_sin(pos, backend.asarray(np.ones((2, 3, 1))))
    with pytest.raises(ValueError, match=r"inv_freq must have shape"):
        arrpos.rope_cos_sin(pos, backend.asarray(np.ones((2, 0))))

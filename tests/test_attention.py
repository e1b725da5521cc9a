"""Reference attention, similarity and the properties of position tables, on every backend."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos


def attention_loop(q, k, v, bias=None, allowed=None, scale=None):
    """Row by row in float64 with Python's math.exp."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    lead = q.shape[:-2]
    out = np.zeros(lead + (q.shape[-2], v.shape[-1]))
    for idx in np.ndindex(*lead):
        for i in range(q.shape[-2]):
            s = [float(q[idx][i] @ k[idx][j]) * scale for j in range(k.shape[-2])]
            if bias is not None:
                s = [a + float(np.broadcast_to(bias, lead + (q.shape[-2], k.shape[-2]))[idx][i, j])
                     for j, a in enumerate(s)]
            ok = [True] * len(s) if allowed is None else list(allowed[i])
            top = max((a for a, o in zip(s, ok) if o), default=0.0)
            e = [math.exp(a - top) if o else 0.0 for a, o in zip(s, ok)]
            z = sum(e)
            out[idx][i] = sum((w / z) * v[idx][j] for j, w in enumerate(e)) if z else 0.0
    return out


def test_attention_plain_and_scale(backend):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 6, 8)), \
        rng.standard_normal((2, 6, 3))
    b = backend
    got = b.to_numpy(arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v)))
    np.testing.assert_allclose(got, attention_loop(q, k, v), rtol=1e-5, atol=1e-6)
    got = b.to_numpy(arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v), scale=0.1))
    np.testing.assert_allclose(got, attention_loop(q, k, v, scale=0.1), rtol=1e-5, atol=1e-6)


def test_attention_causal_alibi_and_mask(backend):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((3, 5, 4)) for _ in range(3))
    slopes = np.array([0.5, 0.25, 0.125])
    bias = np.asarray(arrpos.alibi_bias(slopes, 5, 5))
    causal = np.tril(np.ones((5, 5), dtype=bool))
    b = backend
    got = b.to_numpy(arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v),
                                      bias=b.asarray(bias), causal=True))
    np.testing.assert_allclose(got, attention_loop(q, k, v, bias, causal), rtol=1e-5, atol=1e-6)
    mask = rng.random((5, 5)) > 0.3
    mask[:, 0] = True
    got = b.to_numpy(arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v),
                                      mask=b.asarray(mask)))
    np.testing.assert_allclose(got, attention_loop(q, k, v, None, mask), rtol=1e-5, atol=1e-6)


def test_attention_stable_and_fully_masked(backend):
    q = np.full((1, 2, 2), 300.0)
    k = np.full((1, 3, 2), 300.0)
    v = np.arange(6.0).reshape(1, 3, 2)
    b = backend
    out = b.to_numpy(arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v)))
    assert np.isfinite(out).all()  # exp(300**2 * 2 / sqrt 2) would overflow unshifted
    np.testing.assert_allclose(out[0, 0], [2.0, 3.0], rtol=1e-6)
    mask = np.array([[False, False, False], [True, True, True]])
    out, w = arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v), mask=b.asarray(mask),
                              return_weights=True)
    out, w = b.to_numpy(out), b.to_numpy(w)
    np.testing.assert_array_equal(out[0, 0], [0.0, 0.0])
    np.testing.assert_allclose(w[0, 1], [1 / 3] * 3, rtol=1e-6)


def test_attention_matches_torch_sdpa():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    bias = torch.randn(3, 7, 7)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    np.testing.assert_allclose(arrpos.attention(q, k, v, bias=bias).numpy(), ref.numpy(),
                               atol=1e-5)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    np.testing.assert_allclose(arrpos.attention(q, k, v, causal=True).numpy(), ref.numpy(),
                               atol=1e-5)


def test_attention_gradients_torch():
    torch = pytest.importorskip("torch")
    q = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a: arrpos.attention(a, k, v, causal=True), (q,))


def test_similarity(backend):
    t = np.random.default_rng(2).standard_normal((6, 4))
    b = backend
    dot = b.to_numpy(arrpos.similarity(b.asarray(t)))
    np.testing.assert_allclose(dot, [[float(a @ c) for c in t] for a in t], rtol=1e-5, atol=1e-6)
    cos = b.to_numpy(arrpos.similarity(b.asarray(t), metric="cosine"))
    ref = [[float(a @ c) / (np.linalg.norm(a) * np.linalg.norm(c)) for c in t] for a in t]
    np.testing.assert_allclose(cos, ref, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------- properties

def properties_loop(phi):
    """The three definitions of arrpos.properties written pair by pair (float64)."""
    phi = np.asarray(phi, dtype=np.float64)
    n = phi.shape[0]
    m = max(2, n // 2)
    rhos = []
    for x in range(n):
        for direction in (1, -1):
            ys = [x + direction * s for s in range(1, m + 1)]
            if not all(0 <= y < n for y in ys):
                continue
            prox = np.array([phi[x, y] for y in ys])
            order = sorted(range(m), key=lambda i: (-prox[i], i))  # descending, ties in order
            rank = np.empty(m)
            rank[order] = np.arange(m)
            d = rank - np.arange(m)
            rhos.append(1 - 6 * (d**2).sum() / (m * (m * m - 1)))
    pairs = [(x, y) for x in range(n) for y in range(n) if x != y]
    vals = np.array([phi[x, y] for x, y in pairs])
    total = ((vals - vals.mean()) ** 2).sum()
    within = 0.0
    for off in range(-(n - 1), n):
        if off == 0:
            continue
        g = np.array([phi[x, x + off] for x in range(n) if 0 <= x + off < n])
        within += ((g - g.mean()) ** 2).sum()
    transposed = np.array([phi[y, x] for x, y in pairs])
    sym = ((vals - vals.mean()) * (transposed - vals.mean())).sum() / total
    return float(np.mean(rhos)), 1 - within / total, sym


def test_properties_sinusoidal(backend):
    t = arrpos.sinusoidal(48, 64, xp=backend.module)
    p = arrpos.properties(t)
    assert isinstance(p, arrpos.PositionProperties)
    assert all(isinstance(v, float) for v in p)
    t64 = arrpos.sinusoidal(48, 64, dtype=np.float64)
    ref = properties_loop(t64 @ t64.T)
    np.testing.assert_allclose(tuple(p), ref, atol=1e-4)
    assert p.translation_invariance > 0.9999 and p.symmetry > 0.9999 and p.monotonicity > 0.9


def test_properties_against_loop(backend):
    rng = np.random.default_rng(3)
    t = rng.standard_normal((20, 8))
    p = arrpos.properties(backend.asarray(t), metric="cosine")
    cos = t @ t.T / np.outer(np.linalg.norm(t, axis=1), np.linalg.norm(t, axis=1))
    np.testing.assert_allclose(tuple(p), properties_loop(cos), atol=1e-5)
    assert p.translation_invariance < 0.5  # a random table is not translation invariant
    # a causal-looking (lower-triangle-only) matrix is far from symmetric
    asym = np.tril(rng.standard_normal((12, 12)))
    q = arrpos.properties(backend.asarray(asym), metric="precomputed")
    np.testing.assert_allclose(tuple(q), properties_loop(asym), atol=1e-5)


def test_properties_relative_biases():
    """T5's bidirectional bias is Toeplitz but not symmetric; ALiBi symmetric mode is both."""
    table = np.random.default_rng(4).standard_normal((32, 1))
    t5 = arrpos.relative_bias(table, arrpos.t5_bucket(arrpos.relative_positions(40, 40)))[0]
    p = arrpos.properties(t5, metric="precomputed")
    assert p.translation_invariance == pytest.approx(1.0, abs=1e-12)
    assert p.symmetry < 0.99
    al = arrpos.alibi_bias(np.array([0.5]), 30, 30, mode="symmetric")[0]
    p = arrpos.properties(al, metric="precomputed")
    assert p == pytest.approx((1.0, 1.0, 1.0), abs=1e-12)


def test_errors():
    q = np.zeros((3, 4))
    with pytest.raises(ValueError, match="k"):
        arrpos.attention(q, np.zeros((3, 5)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="v"):
        arrpos.attention(q, q, np.zeros((2, 2)))
    with pytest.raises(TypeError, match="mask"):
        arrpos.attention(q, q, q, mask=np.ones((3, 3)))
    with pytest.raises(ValueError, match="mask"):
        arrpos.attention(q, q, q, mask=np.ones((2, 3), dtype=bool))
    with pytest.raises(TypeError, match="causal"):
        arrpos.attention(q, q, q, causal="yes")
    with pytest.raises(ValueError, match="scale"):
        arrpos.attention(q, q, q, scale=-1.0)
    with pytest.raises(TypeError, match="q"):
        arrpos.attention(q.astype(np.int64), q, q)
    with pytest.raises(TypeError, match="bias"):
        arrpos.attention(q, q, q, bias=np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="relative"):
        arrpos.attention(q, q, q, relative=[None, None, None])
    with pytest.raises(ValueError, match="metric"):
        arrpos.similarity(q, metric="l2")
    with pytest.raises(ValueError, match="table"):
        arrpos.similarity(np.zeros(3))
    with pytest.raises(ValueError, match="table"):
        arrpos.properties(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="table"):
        arrpos.properties(np.zeros((3, 4)), metric="precomputed")
    with pytest.raises(ValueError, match="table"):
        arrpos.properties(np.zeros((2, 3, 4)))
    with pytest.raises(TypeError, match="table"):
        arrpos.properties(np.zeros((5, 4), dtype=np.int64))

"""The relative family on every backend, against the published formulas and transformers."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos

DIST = np.arange(-1000, 1001)


# ----------------------------------------------------------------- independent references

def t5_bucket_loop(rel, bidirectional, num_buckets, max_distance):
    """docs/reference.md's T5 rule, one Python int at a time (float32 log like the reference)."""
    out = []
    for r in np.asarray(rel).reshape(-1).tolist():
        nb = num_buckets
        b = 0
        if bidirectional:
            nb //= 2
            b = nb if r > 0 else 0
            n = abs(r)
        else:
            n = -min(r, 0)
        me = nb // 2
        if n < me:
            b += n
        else:
            v = np.float32(math.log(np.float32(n) / np.float32(me))) / np.float32(
                math.log(max_distance / me)) * np.float32(nb - me)
            b += min(me + int(v), nb - 1)
        out.append(b)
    return np.array(out).reshape(np.shape(rel))


def deberta_bucket_loop(rel_qk, bucket_size, max_position):
    """docs/reference.md's DeBERTa rule on ``query - key``, one Python int at a time."""
    mid = bucket_size // 2
    out = []
    for r in np.asarray(rel_qk).reshape(-1).tolist():
        a = mid - 1 if -mid < r < mid else abs(r)
        if a <= mid:
            out.append(r)
            continue
        lg = np.float32(math.log(np.float32(a) / np.float32(mid)))
        lp = math.ceil(lg / np.float32(math.log((max_position - 1) / mid)) * np.float32(mid - 1))
        out.append(int(lp + mid) * (1 if r > 0 else -1))
    return np.array(out).reshape(np.shape(rel_qk))


def _int(backend, a):
    return backend.asarray(np.asarray(a, dtype=np.int64))


# ----------------------------------------------------------------- relative positions / Shaw

@pytest.mark.parametrize("q,k,off", [(3, 5, 0), (1, 6, 5), (4, 4, -2), (0, 3, 0)])
def test_relative_positions(backend, q, k, off):
    got = backend.to_numpy(arrpos.relative_positions(q, k, query_offset=off, xp=backend.module))
    ref = np.array([[j - (i + off) for j in range(k)] for i in range(q)]).reshape(q, k)
    assert got.shape == (q, k)
    np.testing.assert_array_equal(got, ref)
    assert np.issubdtype(got.dtype, np.integer)


def test_shaw_index(backend):
    rel = _int(backend, np.arange(-6, 7).reshape(1, -1))
    got = backend.to_numpy(arrpos.shaw_index(rel, max_distance=3))
    ref = [[min(max(r, -3), 3) + 3 for r in range(-6, 7)]]
    np.testing.assert_array_equal(got, ref)


# ----------------------------------------------------------------- T5

@pytest.mark.parametrize("num_buckets", [32, 64])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bucket_formula(backend, num_buckets, bidirectional):
    ref = t5_bucket_loop(DIST, bidirectional, num_buckets, 128)
    got = backend.to_numpy(arrpos.t5_bucket(_int(backend, DIST), bidirectional=bidirectional,
                                            num_buckets=num_buckets, max_distance=128))
    np.testing.assert_array_equal(got, ref)
    assert got.min() >= 0 and got.max() < num_buckets


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (64, 128), (16, 50), (128, 1024)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bucket_equals_transformers(backend, num_buckets, max_distance, bidirectional):
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = np.arange(-5000, 5001)
    ref = t5.T5Attention._relative_position_bucket(
        torch.from_numpy(rel), bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance).numpy()
    got = backend.to_numpy(arrpos.t5_bucket(_int(backend, rel), bidirectional=bidirectional,
                                            num_buckets=num_buckets, max_distance=max_distance))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("q,k,off", [(300, 500, 0), (1, 700, 699), (130, 129, 0), (1, 1, 0),
                                     (5, 400, 3), (0, 7, 0), (6, 0, 0)])
@pytest.mark.parametrize("decoder", [False, True])
def test_t5_bias_equals_transformers_compute_bias(q, k, off, decoder):
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    from transformers import T5Config

    cfg = T5Config(num_heads=6, d_model=48, d_kv=8, relative_attention_num_buckets=32,
                   relative_attention_max_distance=128, is_decoder=decoder)
    torch.manual_seed(0)
    att = t5.T5Attention(cfg, has_relative_attention_bias=True).eval()
    table = att.relative_attention_bias.weight.detach()
    with torch.no_grad():
        ref = att.compute_bias(q, k, past_seen_tokens=off)[0]
    got = arrpos.t5_bias(table, q, k, bidirectional=not decoder, query_offset=off)
    assert got.dtype == ref.dtype and torch.equal(got, ref)


def test_t5_bias_equals_unfused(backend):
    # the lengths' form against relative_bias(table, t5_bucket(relative_positions(...))), on
    # every backend, both directions, offsets either side, several bucket counts
    rng = np.random.default_rng(3)
    for nb, md, q, k, off, bid in [(32, 128, 40, 300, 0, True), (16, 20, 9, 70, -30, False),
                                   (64, 1000, 33, 33, 260, True), (8, 5, 3, 4, 1, True)]:
        table = backend.asarray(rng.standard_normal((nb, 3)).astype(np.float32))
        rel = arrpos.relative_positions(q, k, query_offset=off, xp=backend.module)
        ref = arrpos.relative_bias(table, arrpos.t5_bucket(rel, bidirectional=bid,
                                                           num_buckets=nb, max_distance=md))
        got = arrpos.t5_bias(table, q, k, bidirectional=bid, max_distance=md, query_offset=off)
        np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(ref))


def test_t5_bias_refuses():
    with pytest.raises(TypeError, match="table"):
        arrpos.t5_bias(np.zeros((32, 2), np.int64), 3, 3)
    with pytest.raises(ValueError, match="table"):
        arrpos.t5_bias(np.zeros(32), 3, 3)
    with pytest.raises(ValueError, match="query_len"):
        arrpos.t5_bias(np.zeros((32, 2)), -1, 3)
    with pytest.raises(ValueError, match="num_buckets"):  # the table's rows are the buckets
        arrpos.t5_bias(np.zeros((2, 2)), 3, 3)


def test_t5_no_warning_no_nan():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = arrpos.t5_bucket(np.zeros((3, 3), dtype=np.int64))
    assert out.tolist() == [[0] * 3] * 3


def test_t5_shape_and_matrix(backend):
    rel = arrpos.relative_positions(5, 7, xp=backend.module)
    got = backend.to_numpy(arrpos.t5_bucket(rel))
    ref = t5_bucket_loop(backend.to_numpy(rel), True, 32, 128)
    assert got.shape == (5, 7)
    np.testing.assert_array_equal(got, ref)


# ----------------------------------------------------------------- DeBERTa

EDGES = np.array(sorted({s * (m + d) for m in (4, 64, 128, 256, 511, 512, 1000, 5000)
                         for d in (-2, -1, 0, 1, 2) for s in (-1, 1)} | {0}))


@pytest.mark.parametrize("bucket_size,max_position", [(256, 512), (8, 128), (64, 1024)])
def test_deberta_bucket_formula(backend, bucket_size, max_position):
    ref = deberta_bucket_loop(-EDGES, bucket_size, max_position)  # DeBERTa's sign: q - k
    got = backend.to_numpy(arrpos.deberta_bucket(_int(backend, EDGES), bucket_size=bucket_size,
                                                 max_position=max_position))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("bucket_size,max_position", [(256, 512), (8, 128), (64, 1024), (512, 4096)])
def test_deberta_bucket_equals_transformers(backend, bucket_size, max_position):
    torch = pytest.importorskip("torch")
    dv2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    rel = np.concatenate([np.arange(-3000, 3001), EDGES])
    ref = dv2.make_log_bucket_position(torch.from_numpy(-rel), bucket_size, max_position)
    got = backend.to_numpy(arrpos.deberta_bucket(_int(backend, rel), bucket_size=bucket_size,
                                                 max_position=max_position))
    np.testing.assert_array_equal(got, ref.to(torch.long).numpy())


def test_deberta_build_relative_position():
    """arrpos' (q, k) buckets equal transformers' ``build_relative_position``."""
    torch = pytest.importorskip("torch")
    dv2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    ql, kl = torch.zeros(1, 300, 4), torch.zeros(1, 300, 4)
    ref = dv2.build_relative_position(ql, kl, bucket_size=256, max_position=512)[0].numpy()
    got = arrpos.deberta_bucket(arrpos.relative_positions(300, 300), bucket_size=256,
                                max_position=512)
    np.testing.assert_array_equal(got, ref)


# ----------------------------------------------------------------- bias and shift

def test_relative_bias(backend):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((32, 4))
    idx = np.asarray(arrpos.t5_bucket(arrpos.relative_positions(6, 9)))
    got = backend.to_numpy(arrpos.relative_bias(backend.asarray(table), _int(backend, idx)))
    ref = np.empty((4, 6, 9))
    for h in range(4):
        for i in range(6):
            for j in range(9):
                ref[h, i, j] = table[idx[i, j], h]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("shape", [(4, 4), (3, 7), (2, 5, 6), (6, 2)])
def test_rel_shift_index_identity(backend, shape):
    rng = np.random.default_rng(1)
    s = rng.standard_normal(shape)
    got = backend.to_numpy(arrpos.rel_shift(backend.asarray(s)))
    q, k = shape[-2:]
    ref = np.zeros(shape)
    for i in range(q):
        for j in range(k):
            m = j + q - 1 - i
            if 0 <= m < k:
                ref[..., i, j] = s[..., i, m]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_rel_shift_equals_transformer_xl_trick():
    """Where the index exists, the result is Transformer-XL's pad-reshape-drop buffer."""
    s = np.random.default_rng(2).standard_normal((3, 5, 8))
    q, k = s.shape[-2:]
    padded = np.concatenate([np.zeros((3, q, 1)), s], axis=-1).reshape(3, k + 1, q)
    txl = padded[:, 1:].reshape(3, q, k)
    got = arrpos.rel_shift(s)
    i, j = np.arange(q)[:, None], np.arange(k)[None, :]
    valid = np.broadcast_to(j - i <= k - q, (3, q, k))
    np.testing.assert_array_equal(got[valid], txl[valid])


# ----------------------------------------------------------------- Shaw's efficient terms

def _shaw_naive(q, kt, vt, w, idx):
    """Materialise a_ij (q, k, dim) as in the paper."""
    a_k = kt[idx]  # (q, k, d)
    a_v = vt[idx]
    key = np.einsum("...id,ijd->...ij", q, a_k)
    val = np.einsum("...ij,ijd->...id", w, a_v)
    return key, val


def test_shaw_terms_against_naive(backend):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 5, 8))
    kt = rng.standard_normal((7, 8))
    vt = rng.standard_normal((7, 6))
    w = rng.random((2, 3, 5, 9))
    idx = np.asarray(arrpos.shaw_index(arrpos.relative_positions(5, 9, query_offset=4),
                                       max_distance=3))
    key_ref, val_ref = _shaw_naive(q, kt, vt, w, idx)
    b = backend
    key = b.to_numpy(arrpos.shaw_key_scores(b.asarray(q), b.asarray(kt), _int(b, idx)))
    val = b.to_numpy(arrpos.shaw_value_term(b.asarray(w), b.asarray(vt), _int(b, idx)))
    tol = 1e-10 if b.float64 else 1e-5
    np.testing.assert_allclose(key, key_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(val, val_ref, rtol=tol, atol=tol)


def test_attention_with_shaw_terms(backend):
    """attention(relative=...) equals the paper's formula written with the naive a_ij."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 6, 4)) for _ in range(3))
    kt, vt = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    idx = np.asarray(arrpos.shaw_index(arrpos.relative_positions(6, 6), max_distance=2))
    e = (np.einsum("bid,bjd->bij", q, k) + np.einsum("bid,ijd->bij", q, kt[idx])) / 2.0
    w = np.exp(e - e.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    ref = w @ v + np.einsum("bij,ijd->bid", w, vt[idx])
    b = backend
    got = b.to_numpy(arrpos.attention(b.asarray(q), b.asarray(k), b.asarray(v),
                                      relative=(b.asarray(kt), b.asarray(vt), _int(b, idx))))
    np.testing.assert_allclose(got, ref, rtol=1e-5 if not b.float64 else 1e-10, atol=1e-6)


# ----------------------------------------------------------------- Transformer-XL

def test_transformer_xl_scores(backend):
    """Against the per-pair definition: (q_i+u).k_j + (q_i+v).r[distance]."""
    rng = np.random.default_rng(5)
    h, ql, kl, d = 2, 3, 7, 4
    q = rng.standard_normal((h, ql, d))
    k = rng.standard_normal((h, kl, d))
    r = rng.standard_normal((h, kl, d))  # row m: distance kl - 1 - m
    u = rng.standard_normal((h, 1, d))
    v = rng.standard_normal((h, 1, d))
    ref = np.zeros((h, ql, kl))
    for i in range(ql):
        for j in range(kl):
            dist = (kl - ql + i) - j
            ref[:, i, j] = np.einsum("hd,hd->h", q[:, i] + u[:, 0], k[:, j])
            if dist >= 0:
                ref[:, i, j] += np.einsum("hd,hd->h", q[:, i] + v[:, 0], r[:, kl - 1 - dist])
    b = backend
    got = b.to_numpy(arrpos.transformer_xl_scores(*(b.asarray(a) for a in (q, k, r, u, v))))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- DeBERTa scores

def test_deberta_scores_equal_transformers():
    torch = pytest.importorskip("torch")
    tr = pytest.importorskip("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import (
        DisentangledSelfAttention,
        build_relative_position,
    )

    torch.manual_seed(0)
    cfg = tr.DebertaV2Config(hidden_size=16, num_attention_heads=2, relative_attention=True,
                             position_buckets=8, max_relative_positions=64,
                             pos_att_type=["p2c", "c2p"], share_att_key=True)
    att = DisentangledSelfAttention(cfg).eval()
    n, heads, d = 40, 2, 8
    hidden = torch.randn(1, n, 16)
    rel_emb = torch.randn(2 * 8, 16)
    with torch.no_grad():
        ql = att.transpose_for_scores(att.query_proj(hidden), heads)  # (heads, n, d)
        kl = att.transpose_for_scores(att.key_proj(hidden), heads)
        rel_pos = build_relative_position(ql, kl, bucket_size=8, max_position=64)
        scale = math.sqrt(d * 3)
        c2c = torch.bmm(ql, kl.transpose(-1, -2)) / scale
        ref = c2c + att.disentangled_attention_bias(ql, kl, rel_pos, rel_emb, 3)
        pk = att.transpose_for_scores(att.key_proj(rel_emb[None]), heads)
        pq = att.transpose_for_scores(att.query_proj(rel_emb[None]), heads)
    bucket = arrpos.deberta_bucket(arrpos.relative_positions(n, n, xp=torch), bucket_size=8,
                                   max_position=64)
    got = arrpos.deberta_scores(ql, kl, pk, pq, bucket)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_deberta_scores_definition(backend):
    rng = np.random.default_rng(6)
    q, k = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    pk, pq = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    bucket = np.asarray(arrpos.deberta_bucket(arrpos.relative_positions(5, 5), bucket_size=4,
                                              max_position=8))
    ref = np.zeros((5, 5))
    for i in range(5):
        for j in range(5):
            t = min(max(bucket[i, j] + 3, 0), 5)
            ref[i, j] = q[i] @ k[j] + q[i] @ pk[t] + k[j] @ pq[t]
    ref /= math.sqrt(4 * 3)
    b = backend
    got = b.to_numpy(arrpos.deberta_scores(b.asarray(q), b.asarray(k), b.asarray(pk),
                                           b.asarray(pq), _int(b, bucket)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    only_c2p = b.to_numpy(arrpos.deberta_scores(b.asarray(q), b.asarray(k), b.asarray(pk), None,
                                                _int(b, bucket)))
    ref2 = (q @ k.T + np.array([[q[i] @ pk[min(max(bucket[i, j] + 3, 0), 5)] for j in range(5)]
                                for i in range(5)])) / math.sqrt(4 * 2)
    np.testing.assert_allclose(only_c2p, ref2, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------- jit and laziness

def test_jit_safe():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    rel = jnp.arange(-300, 300).reshape(20, 30)
    f = jax.jit(lambda r: (arrpos.t5_bucket(r), arrpos.deberta_bucket(r, bucket_size=8,
                                                                      max_position=64)))
    a, b = f(rel)
    np.testing.assert_array_equal(np.asarray(a), t5_bucket_loop(np.asarray(rel), True, 32, 128))
    np.testing.assert_array_equal(np.asarray(b), deberta_bucket_loop(-np.asarray(rel), 8, 64))


def test_dask_stays_lazy():
    da = pytest.importorskip("dask.array")
    rel = da.from_array(np.arange(-50, 50).reshape(10, 10), chunks=5)
    out = arrpos.t5_bucket(rel)
    assert isinstance(out, da.Array)
    np.testing.assert_array_equal(out.compute(), t5_bucket_loop(np.arange(-50, 50).reshape(10, 10),
                                                                True, 32, 128))


# ----------------------------------------------------------------- errors

def test_errors():
    rel = arrpos.relative_positions(3, 3)
    with pytest.raises(TypeError, match="relative"):
        arrpos.t5_bucket(rel.astype(np.float64))
    with pytest.raises(TypeError, match="relative"):
        arrpos.t5_bucket([1, 2])
    with pytest.raises(TypeError, match="bidirectional"):
        arrpos.t5_bucket(rel, bidirectional=1)
    with pytest.raises(ValueError, match="num_buckets"):
        arrpos.t5_bucket(rel, num_buckets=2)
    with pytest.raises(ValueError, match="max_distance"):
        arrpos.t5_bucket(rel, num_buckets=32, max_distance=8)
    with pytest.raises(TypeError, match="num_buckets"):
        arrpos.t5_bucket(rel, num_buckets=32.0)
    with pytest.raises(ValueError, match="max_position"):
        arrpos.deberta_bucket(rel, bucket_size=256, max_position=100)
    with pytest.raises(ValueError, match="bucket_size"):
        arrpos.deberta_bucket(rel, bucket_size=1)
    with pytest.raises(ValueError, match="max_distance"):
        arrpos.shaw_index(rel, max_distance=-1)
    with pytest.raises(TypeError, match="relative"):
        arrpos.shaw_index(rel > 0, max_distance=2)
    with pytest.raises(ValueError, match="query_len"):
        arrpos.relative_positions(-1, 3)
    with pytest.raises(TypeError, match="query_offset"):
        arrpos.relative_positions(2, 3, query_offset=0.5)
    with pytest.raises(ValueError, match="index"):
        arrpos.relative_bias(np.zeros((4, 2)), np.array([[0, 4]]))
    with pytest.raises(ValueError, match="table"):
        arrpos.relative_bias(np.zeros(4), np.array([[0, 1]]))
    with pytest.raises(TypeError, match="table"):
        arrpos.relative_bias(np.zeros((4, 2), dtype=np.int64), np.array([[0, 1]]))
    with pytest.raises(TypeError, match="index"):
        arrpos.relative_bias(np.zeros((4, 2)), np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="scores"):
        arrpos.rel_shift(np.zeros(3))
    with pytest.raises(TypeError, match="scores"):
        arrpos.rel_shift(np.zeros((2, 2), dtype=bool))
    q, t = np.zeros((3, 4)), np.zeros((5, 4))
    with pytest.raises(ValueError, match="index"):
        arrpos.shaw_key_scores(q, t, np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="index"):
        arrpos.shaw_key_scores(q, t, np.full((3, 3), 5))
    with pytest.raises(ValueError, match="table"):
        arrpos.shaw_key_scores(q, np.zeros((5, 3)), np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="index"):
        arrpos.shaw_value_term(np.zeros((3, 3)), t, np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="r"):
        arrpos.transformer_xl_scores(q, np.zeros((5, 4)), np.zeros((4, 4)), np.zeros(4),
                                     np.zeros(4))
    with pytest.raises(ValueError, match="pos_key"):
        arrpos.deberta_scores(q, q, np.zeros((5, 4)), None, np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="bucket"):
        arrpos.deberta_scores(q, q, None, None, np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="scale_factor"):
        arrpos.deberta_scores(q, q, None, None, np.zeros((3, 3), dtype=np.int64), scale_factor=0)


# ----------------------------------------------------------------- Swin / BEiT n-D index

def video_swin_index(window):
    """Video Swin's ``WindowAttention3D.relative_position_index``, written from its source."""
    wd, wh, ww = window
    coords = np.stack(np.meshgrid(np.arange(wd), np.arange(wh), np.arange(ww), indexing="ij"))
    flat = coords.reshape(3, -1)
    rel = (flat[:, :, None] - flat[:, None, :]).transpose(1, 2, 0).copy()
    rel[:, :, 0] += wd - 1
    rel[:, :, 1] += wh - 1
    rel[:, :, 2] += ww - 1
    rel[:, :, 0] *= (2 * wh - 1) * (2 * ww - 1)
    rel[:, :, 1] *= 2 * ww - 1
    return rel.sum(-1)


def index_nd_loop(window):
    """API.md's definition, one token pair at a time."""
    window = tuple(window)
    coords = list(np.ndindex(*window))
    grid = tuple(2 * w - 1 for w in window)
    out = np.empty((len(coords), len(coords)), dtype=np.int64)
    for a, ca in enumerate(coords):
        for b, cb in enumerate(coords):
            d = tuple(x - y + w - 1 for x, y, w in zip(ca, cb, window))
            out[a, b] = np.ravel_multi_index(d, grid)
    return out


@pytest.mark.parametrize("window", [(7, 7), (3, 5), (1, 4), (2, 1)])
def test_relative_index_nd_matches_transformers_swin_and_beit(backend, window):
    pytest.importorskip("torch")
    swin = pytest.importorskip("transformers.models.swin.modeling_swin")
    beit = pytest.importorskip("transformers.models.beit.modeling_beit")
    n = math.prod(window)
    ref = swin.SwinRelativePositionBias(2, window).relative_position_index.view(n, n).numpy()
    got = arrpos.relative_index_nd(window, xp=backend.module)
    assert backend.xp.isdtype(got.dtype, "integral")
    np.testing.assert_array_equal(backend.to_numpy(got), ref)
    bidx = beit.BeitRelativePositionBias.generate_relative_position_index(window)
    np.testing.assert_array_equal(backend.to_numpy(got), bidx[1:, 1:].numpy())


@pytest.mark.parametrize("window", [(2, 7, 7), (3, 2, 4), (1, 1, 1)])
def test_relative_index_nd_matches_video_swin(backend, window):
    got = backend.to_numpy(arrpos.relative_index_nd(window, xp=backend.module))
    np.testing.assert_array_equal(got, video_swin_index(window))


@pytest.mark.parametrize("window", [(5,), (2, 3, 2, 3), (3, 1, 2, 1, 2)])
def test_relative_index_nd_any_number_of_axes(backend, window):
    got = backend.to_numpy(arrpos.relative_index_nd(list(window), xp=backend.module))
    np.testing.assert_array_equal(got, index_nd_loop(window))
    assert got.max() < math.prod(2 * w - 1 for w in window)


def test_relative_index_nd_feeds_relative_bias(backend):
    table = np.random.default_rng(0).normal(size=(5 * 7, 3))
    idx = arrpos.relative_index_nd((3, 4), xp=backend.module)
    bias = backend.to_numpy(arrpos.relative_bias(backend.asarray(table), idx))
    ref = np.transpose(table[index_nd_loop((3, 4))], (2, 0, 1))
    np.testing.assert_allclose(bias, ref.astype(bias.dtype), rtol=0, atol=0)


def test_relative_index_nd_errors():
    with pytest.raises(TypeError, match="window"):
        arrpos.relative_index_nd(7)
    with pytest.raises(TypeError, match="window"):
        arrpos.relative_index_nd("77")
    with pytest.raises(ValueError, match="window"):
        arrpos.relative_index_nd(())
    with pytest.raises(ValueError, match=r"window\[1\]"):
        arrpos.relative_index_nd((3, 0))
    with pytest.raises(TypeError, match=r"window\[0\]"):
        arrpos.relative_index_nd((2.5, 3))
    with pytest.raises(ValueError, match="too large"):
        arrpos.relative_index_nd((2**16, 2**16))

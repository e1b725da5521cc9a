"""Serving-engine RoPE forms (issue 29, item 5) against float64 restatements of vLLM's source.

vLLM does not install here; each reference below restates, in NumPy float64, the function of
``vllm/model_executor/layers/rotary_embedding/`` it names (file, commit, function, lines), and
arrpos must give the same numbers. Positions are exact integers, so the tables agree to
float64 rounding.
"""
from __future__ import annotations

import numpy as np
import pytest

import arrpos

RNG = np.random.default_rng(29)


def _base_inv_freq(base, rotary_dim):
    """base.py ``RotaryEmbedding._compute_inv_freq``: ``1 / base ** (arange(0, d, 2) / d)``."""
    return 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def _rotate_neox(x):
    """common.py ``rotate_neox``: ``cat(-x2, x1)`` of the two halves."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


# --- rope_type "ntk": ntk_scaling_rope.py (commit 91b4f8fbfcc33a9cb58456f3061dced32509af4f) -----


def _vllm_ntk(base, rotary_dim, factor, mixed_b=None):
    """``NTKScalingRotaryEmbedding._compute_inv_freq``, lines 31-47."""
    base = base * (factor if mixed_b is None else 1)  # line 32
    inv_freq = _base_inv_freq(base, rotary_dim)  # line 33
    if mixed_b is None:
        return inv_freq / factor ** (2 / rotary_dim)  # line 36
    a = np.log(factor) / (rotary_dim / 2) ** mixed_b  # lines 38-41
    lambda_1_m = np.exp(a * np.arange(1, rotary_dim // 2 + 1, dtype=np.float64) ** mixed_b)
    return inv_freq / lambda_1_m  # line 45


@pytest.mark.parametrize("dim,base,factor", [(128, 10000.0, 4.0), (64, 1e6, 2.5), (8, 500.0, 16.0)])
def test_fixed_ntk_equals_vllm(dim, base, factor):
    inv, att = arrpos.rope_frequencies(dim, base=base, scaling=arrpos.FixedNTKScaling(factor),
                                       dtype=np.float64)
    np.testing.assert_allclose(inv, _vllm_ntk(base, dim, factor), rtol=4e-16, atol=0)
    assert att == 1.0
    # not the static NTK rule of rotary-embedding-torch (the test can fail)
    other, _ = arrpos.rope_frequencies(dim, base=base, scaling=arrpos.NTKScaling(factor))
    assert np.abs(other / inv - 1).max() > 1e-3
    # the engine's cos_sin_cache rows: positions * inv_freq (base.py _compute_cos_sin_cache)
    pos = np.array([0, 1, 17, 4095, 100000])
    cos, sin = arrpos.RoPE(dim, base=base, scaling=arrpos.FixedNTKScaling(factor)).cos_sin(
        pos, dtype=np.float64)
    ang = pos[:, None] * _vllm_ntk(base, dim, factor)
    np.testing.assert_allclose(cos[:, :dim // 2], np.cos(ang), atol=1e-10)
    np.testing.assert_allclose(sin[:, dim // 2:], np.sin(ang), atol=1e-10)


@pytest.mark.parametrize("dim,base,factor,mixed_b", [(128, 10000.0, 4.0, 0.625),
                                                     (64, 1e6, 8.0, 1.5), (16, 100.0, 2.0, 1.0)])
def test_mixed_ntk_equals_vllm(dim, base, factor, mixed_b):
    scaling = arrpos.MixedNTKScaling(factor, mixed_b)
    inv, att = arrpos.rope_frequencies(dim, base=base, scaling=scaling, dtype=np.float64)
    np.testing.assert_allclose(inv, _vllm_ntk(base, dim, factor, mixed_b), rtol=1e-15, atol=0)
    assert att == 1.0
    unscaled = _base_inv_freq(base, dim)
    np.testing.assert_allclose(unscaled[-1] / inv[-1], factor, rtol=1e-14)  # lowest: / factor


def test_ntk_scalings_check_arguments():
    with pytest.raises(ValueError, match="factor must be >= 1"):
        arrpos.FixedNTKScaling(0.5)
    with pytest.raises(ValueError, match="mixed_b"):
        arrpos.MixedNTKScaling(2.0, mixed_b=0.0)
    with pytest.raises(TypeError, match="mixed_b"):
        arrpos.MixedNTKScaling(2.0, mixed_b="1")
    with pytest.raises(ValueError, match="base \\* factor"):
        arrpos.rope_frequencies(8, base=1e308, scaling=arrpos.FixedNTKScaling(10.0))
    assert arrpos.FixedNTKScaling(2) == arrpos.FixedNTKScaling(2.0)
    assert "MixedNTKScaling" in str(pytest.raises(TypeError, arrpos.RoPE, 8, scaling=1).value)


# --- M-RoPE presets ------------------------------------------------------------------------------


def _cache(base, rotary_dim, max_pos):
    """base.py ``_compute_cos_sin_cache``: ``cat(cos, sin)`` of ``arange(max_pos) * inv_freq``."""
    freqs = np.outer(np.arange(max_pos, dtype=np.float64), _base_inv_freq(base, rotary_dim))
    return np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1)


def _vllm_bailing_cos_sin(cache, positions, sections, rotary_dim):
    """bailing_mrope.py (commit 9c5b71639542eda95a0a3fa92e6802e4b4ecbdae)
    ``BailingMRotaryEmbedding.select_cos_sin``: rows (t, h, w) of ``positions`` (3, N); among
    the first ``spatial_size = h + w`` frequencies even ones take H, odd ones W; the rest T."""
    spatial = sections[1] + sections[2]
    cos_sin = cache[positions]
    cos, sin = cos_sin[..., :rotary_dim // 2], cos_sin[..., rotary_dim // 2:]
    mask = (np.arange(spatial) % 2 == 0)[None]
    spatial_cos = np.where(mask, cos[1, :, :spatial], cos[2, :, :spatial])
    spatial_sin = np.where(mask, sin[1, :, :spatial], sin[2, :, :spatial])
    return (np.concatenate([spatial_cos, cos[0, :, spatial:]], -1),
            np.concatenate([spatial_sin, sin[0, :, spatial:]], -1))


@pytest.mark.parametrize("sections", [(16, 24, 24), (8, 12, 12), (0, 4, 4), (5, 1, 1)])
def test_bailing_preset_equals_vllm(sections):
    rotary_dim = 2 * sum(sections)
    pos = RNG.integers(0, 300, size=(3, 11))
    want_cos, want_sin = _vllm_bailing_cos_sin(_cache(1e4, rotary_dim, 300), pos, sections,
                                               rotary_dim)
    inv, _ = arrpos.rope_frequencies(rotary_dim, dtype=np.float64)
    axes = arrpos.mrope_axes(sections, preset="bailing")
    cos, sin = arrpos.rope_cos_sin(pos.T, inv, axes=axes, dtype=np.float64)
    np.testing.assert_allclose(cos[:, :rotary_dim // 2], want_cos, atol=1e-12)
    np.testing.assert_allclose(sin[:, :rotary_dim // 2], want_sin, atol=1e-12)


def _vllm_openpangu_ids(a, b, c, force_last=False):
    """openpangu_rope.py (commit 098d12c28e9311e924de1827a4bdc43610efbbba)
    ``MRotaryEmbeddingInterleaved.get_mrope_interleaved_id_list``, restated."""
    if force_last:
        a -= 1
    counts = {0: a, 1: b, 2: c}
    placed = {k: 0 for k in counts}
    rem = counts.copy()
    seq, last = [], None
    for _ in range(a + b + c):
        cands = [k for k in rem if rem[k] > 0 and k != last]
        if not cands:
            cands = [k for k in rem if rem[k] > 0]
        best = min(cands, key=lambda k: (placed[k] / counts[k], k))
        seq.append(best)
        placed[best] += 1
        rem[best] -= 1
        last = best
    if force_last:
        seq.append(0)
    return seq


def _vllm_openpangu_cos_sin(cache, positions, sections):
    """``__init__`` (the id list of two or three sections, doubled) and ``_rebuild_pos_emb``:
    column ``i`` of the ``[cos | sin]`` cache is taken at row ``mrope_dim[i]`` of positions."""
    if len(sections) == 2:
        mrope_dim = _vllm_openpangu_ids(sections[0], sections[1], 0)
    else:
        mrope_dim = _vllm_openpangu_ids(*sections, force_last=True)
    mrope_dim = mrope_dim * 2
    cos_sin = cache[positions]  # (rows, N, rotary_dim)
    out = np.stack([cos_sin[mrope_dim[i], :, i] for i in range(len(mrope_dim))], axis=-1)
    half = len(mrope_dim) // 2
    return out[..., :half], out[..., half:]


@pytest.mark.parametrize("sections", [(24, 20, 20), (8, 12, 12), (1, 3, 2), (10, 30, 24),
                                      (32, 32), (5, 11)])
def test_openpangu_preset_equals_vllm(sections):
    rotary_dim = 2 * sum(sections)
    pos = RNG.integers(0, 200, size=(len(sections), 9))
    want_cos, want_sin = _vllm_openpangu_cos_sin(_cache(1e6, rotary_dim, 200), pos, sections)
    inv, _ = arrpos.rope_frequencies(rotary_dim, base=1e6, dtype=np.float64)
    axes = arrpos.mrope_axes(sections, preset="openpangu")
    cos, sin = arrpos.rope_cos_sin(pos.T, inv, axes=axes, dtype=np.float64)
    np.testing.assert_allclose(cos[:, :rotary_dim // 2], want_cos, atol=1e-12)
    np.testing.assert_allclose(sin[:, :rotary_dim // 2], want_sin, atol=1e-12)
    assert axes != arrpos.mrope_axes(sections if len(sections) == 3 else (0, *sections))


def test_mrope_preset_errors():
    with pytest.raises(ValueError, match="preset must be one of"):
        arrpos.mrope_axes([2, 2, 2], preset="pangu")
    with pytest.raises(ValueError, match="h == w"):
        arrpos.mrope_axes([2, 2, 3], preset="bailing")
    with pytest.raises(ValueError, match="not with interleaved=True"):
        arrpos.mrope_axes([2, 2, 2], preset="bailing", interleaved=True)
    with pytest.raises(ValueError, match="two sections"):
        arrpos.mrope_axes([2, 2, 2, 2], preset="openpangu")
    with pytest.raises(ValueError, match="sections\\[0\\] must be >= 1"):
        arrpos.mrope_axes([0, 2, 2], preset="openpangu")


# --- dual chunk attention: dual_chunk_rope.py (commit b5e2318e566c60b7f0e80ca2b72ca0b978b59fdc) --


def _vllm_dual_chunk(query, key, positions, *, head_size, rotary_dim, base, chunk_size,
                     local_size, max_pos, neox):
    """``DualChunkRotaryEmbedding``: ``_compute_cos_sin_cache`` (lines 69-80: q_t, qc_t
    clamped to chunk_size, k_t = arange % chunk_len, qc_no_clamp_t, q_inter_t) and
    ``forward_native`` (the five query lookups and the key's), float64; query/key
    ``(tokens, heads, head_size)``; returns the five rotated queries and the key."""
    inv = _base_inv_freq(base, rotary_dim)
    chunk_len = chunk_size - local_size
    q_t = np.arange(chunk_len, dtype=np.float64)
    qc_t = np.minimum(np.arange(chunk_len, dtype=np.float64) + chunk_len, chunk_size)
    k_t = np.arange(max_pos, dtype=np.float64) % chunk_len
    qc_no_clamp_t = np.arange(chunk_len, dtype=np.float64) + chunk_len
    q_inter_t = np.arange(chunk_len, dtype=np.float64) + chunk_size

    def cache(t):
        f = np.outer(t, inv)
        return np.concatenate([np.cos(f), np.sin(f)], -1)

    q_c, qc_c, k_c, qcn_c, qi_c = map(cache, (q_t, qc_t, k_t, qc_no_clamp_t, q_inter_t))

    def rotate(cos_sin, x):  # _apply_rotary_embedding
        cos, sin = cos_sin[..., :rotary_dim // 2], cos_sin[..., rotary_dim // 2:]
        if neox:
            cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
            rot = _rotate_neox(x[..., :rotary_dim])
        else:
            cos, sin = np.repeat(cos, 2, -1), np.repeat(sin, 2, -1)
            xr = x[..., :rotary_dim]
            rot = np.stack([-xr[..., 1::2], xr[..., 0::2]], -1).reshape(xr.shape)
        out = x[..., :rotary_dim] * cos[:, None] + rot * sin[:, None]
        return np.concatenate([out, x[..., rotary_dim:]], -1)

    p = positions % chunk_len
    queries = [rotate(q_c[p], query), rotate(qc_c[p], query),
               rotate(np.repeat(qc_c[chunk_len - 1][None], len(positions), 0), query),
               rotate(qcn_c[p], query), rotate(qi_c[p], query)]
    return queries, rotate(k_c[positions], key)


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("chunk_size,local_size", [(32, 8), (16, 0), (10, 9)])
def test_dual_chunk_equals_vllm(neox, chunk_size, local_size):
    head, rotary, base, max_pos = 16, 12, 1e6, 200
    positions = np.concatenate([np.arange(0, 40), RNG.integers(0, max_pos, size=20)])
    q = RNG.normal(size=(len(positions), 4, head))
    k = RNG.normal(size=(len(positions), 2, head))
    want_q, want_k = _vllm_dual_chunk(q, k, positions, head_size=head, rotary_dim=rotary,
                                      base=base, chunk_size=chunk_size, local_size=local_size,
                                      max_pos=max_pos, neox=neox)
    rope = arrpos.RoPE(head, base=base, partial_rotary_factor=rotary / head,
                       layout="half" if neox else "interleaved")
    dcp = arrpos.dual_chunk_positions(positions, chunk_size=chunk_size, local_size=local_size)
    assert isinstance(dcp, arrpos.DualChunkPositions)
    got_q = [rope.apply(q, p, heads_axis=-2) for p in dcp[:5]]
    for got, want in zip(got_q, want_q):
        np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_allclose(rope.apply(k, dcp.key, heads_axis=-2), want_k, atol=1e-12)


def test_dual_chunk_positions_arguments():
    torch = pytest.importorskip("torch")
    p = arrpos.dual_chunk_positions(torch.arange(20), chunk_size=8, local_size=3)
    assert p.query_succ.dtype == torch.int64 and p.query_inter.tolist() == [8] * 20
    assert arrpos.dual_chunk_positions(6, chunk_size=4, local_size=1).key.tolist() == [
        0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="local_size must be < chunk_size"):
        arrpos.dual_chunk_positions(np.arange(3), chunk_size=4, local_size=4)
    with pytest.raises(ValueError, match="positions must be >= 0"):
        arrpos.dual_chunk_positions(np.array([-1, 2]), chunk_size=4, local_size=1)
    with pytest.raises(TypeError, match="positions"):
        arrpos.dual_chunk_positions(np.array([1.0, 2.0]), chunk_size=4, local_size=1)


# --- FoPE: fope.py (commit c215d1e62d7394f965f92676143fc9c5b4913ad2) ----------------------------


def _vllm_fope(query, key, positions, *, head_size, rotary_dim, base, max_pos, num_inv_freq,
               cos_coef, sin_coef, sep_head):
    """``FourierRotaryEmbedding``: ``_compute_inv_freq`` (the first ``num_inv_freq``, else those
    above ``2 pi / max_position_embeddings``), ``_compute_cos_sin_cache`` (einsum with the
    coefficients, ``F.pad(..., value=1)`` to ``head_size // 2`` for cos and sin, ``cat(x, x)``)
    and ``forward_native`` (per key-value head tables over each head group, neox rotation)."""
    inv = _base_inv_freq(base, rotary_dim)
    inv = inv[:num_inv_freq] if num_inv_freq is not None else inv[inv > 2 * np.pi / max_pos]
    f = np.outer(np.arange(max_pos, dtype=np.float64), inv)
    if sep_head:
        cos = np.einsum("tD,hDd->thd", np.cos(f), cos_coef)
        sin = np.einsum("tD,hDd->thd", np.sin(f), sin_coef)
    else:
        cos, sin = np.cos(f) @ cos_coef, np.sin(f) @ sin_coef
    pad = [(0, 0)] * (cos.ndim - 1) + [(0, head_size // 2 - cos.shape[-1])]
    cos = np.pad(cos, pad, constant_values=1)
    sin = np.pad(sin, pad, constant_values=1)
    cos, sin = np.concatenate([cos, cos], -1)[positions], np.concatenate([sin, sin], -1)[positions]
    if cos.ndim == 3:  # (tokens, kv_heads, D): query viewed (tokens * kv_heads, group, D)
        n = len(positions)
        q = query.reshape(n * cos.shape[1], -1, head_size)
        k = key.reshape(n * cos.shape[1], -1, head_size)
        cos, sin = cos.reshape(-1, head_size), sin.reshape(-1, head_size)
    else:
        q, k = query, key
    cos, sin = cos[:, None], sin[:, None]
    q = q * cos + _rotate_neox(q) * sin
    k = k * cos + _rotate_neox(k) * sin
    return q.reshape(query.shape), k.reshape(key.shape)


@pytest.mark.parametrize("sep_head", [True, False])
@pytest.mark.parametrize("num_inv_freq", [None, 5])
def test_fope_equals_vllm(sep_head, num_inv_freq):
    head, rotary, base, max_pos, kv_heads, heads = 16, 16, 1e4, 64, 2, 6
    inv, _ = arrpos.rope_frequencies(rotary, base=base, dtype=np.float64)
    kept = inv[:num_inv_freq] if num_inv_freq is not None else inv[inv > 2 * np.pi / max_pos]
    n_in = len(kept)
    shape = (kv_heads, n_in, n_in) if sep_head else (n_in, n_in)
    cos_coef, sin_coef = RNG.normal(size=shape), RNG.normal(size=shape)
    positions = RNG.integers(0, max_pos, size=13)
    q = RNG.normal(size=(13, heads, head))
    k = RNG.normal(size=(13, kv_heads, head))
    want_q, want_k = _vllm_fope(q, k, positions, head_size=head, rotary_dim=rotary, base=base,
                                max_pos=max_pos, num_inv_freq=num_inv_freq, cos_coef=cos_coef,
                                sin_coef=sin_coef, sep_head=sep_head)
    assert n_in < head // 2  # padded frequencies present
    cos, sin = arrpos.fope_cos_sin(positions, kept, cos_coef, sin_coef, head)
    if sep_head:  # (tokens, kv_heads, D): broadcast over each group of query heads
        assert cos.shape == (13, kv_heads, head)
        qg = q.reshape(13, kv_heads, heads // kv_heads, head)
        got_q = arrpos.apply_rope(qg, cos[:, :, None], sin[:, :, None]).reshape(q.shape)
        got_k = arrpos.apply_rope(k, cos, sin)
    else:
        got_q = arrpos.apply_rope(q, cos[:, None], sin[:, None])
        got_k = arrpos.apply_rope(k, cos[:, None], sin[:, None])
    np.testing.assert_allclose(got_q, want_q, atol=1e-11)
    np.testing.assert_allclose(got_k, want_k, atol=1e-11)


def test_fope_arguments():
    torch = pytest.importorskip("torch")
    inv = torch.tensor([1.0, 0.1], dtype=torch.float64)
    coef = torch.eye(2, dtype=torch.float32)
    cos, sin = arrpos.fope_cos_sin(torch.arange(4), inv, coef, coef, 6)
    assert cos.dtype == torch.float32 and cos.shape == (4, 6)
    assert cos[:, 2].tolist() == [1.0] * 4 and sin[:, 2].tolist() == [1.0] * 4  # vLLM's pad
    with pytest.raises(ValueError, match="cos_coef must have shape"):
        arrpos.fope_cos_sin(torch.arange(4), inv, torch.eye(3), torch.eye(3), 6)
    with pytest.raises(ValueError, match="d <= head_dim // 2"):
        arrpos.fope_cos_sin(torch.arange(4), inv, torch.ones(2, 4), torch.ones(2, 4), 6)
    with pytest.raises(ValueError, match="same shape"):
        arrpos.fope_cos_sin(torch.arange(4), inv, torch.ones(2, 2), torch.ones(2, 3), 6)
    with pytest.raises(ValueError, match="head_dim"):
        arrpos.fope_cos_sin(torch.arange(4), inv, coef, coef, 7)
    with pytest.raises(TypeError, match="cos_coef"):
        arrpos.fope_cos_sin(torch.arange(4), inv, torch.eye(2, dtype=torch.int64), coef, 6)


@pytest.mark.parametrize("lib", ["array_api_strict", "jax.numpy", "dask.array", "torch"])
def test_engine_functions_on_every_backend(lib):
    mod = pytest.importorskip(lib)
    conv = {"dask.array": getattr(mod, "from_array", None), "torch": getattr(mod, "as_tensor", None)
            }.get(lib, getattr(mod, "asarray", None))
    positions = np.arange(30)
    want = arrpos.dual_chunk_positions(positions, chunk_size=8, local_size=3)
    got = arrpos.dual_chunk_positions(conv(positions), chunk_size=8, local_size=3)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    inv = np.array([1.0, 0.1, 0.01], dtype=np.float32)
    coef = RNG.normal(size=(2, 3, 2)).astype(np.float32)
    want = arrpos.fope_cos_sin(positions, inv, coef, coef[::-1], 8)
    got = arrpos.fope_cos_sin(conv(positions), conv(inv), conv(coef), conv(coef[::-1].copy()), 8)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, atol=1e-6)

"""Packed sequences on every backend: positions and masks against loops, transformers'
packed-sequence helpers (the flash-attn ``cu_seqlens`` convention), and packed attention
against attention run on each document alone."""
from __future__ import annotations

import numpy as np
import pytest

import arrpos

CASES = [[3, 1, 4], [5], [1, 1, 1], [2, 0, 3, 0], [0], []]


def positions_loop(lengths):
    return [p for n in lengths for p in range(n)]


def mask_loop(lengths, causal):
    doc = [d for d, n in enumerate(lengths) for _ in range(n)]
    n = len(doc)
    return np.array([[doc[i] == doc[j] and (not causal or j <= i) for j in range(n)]
                     for i in range(n)], dtype=bool).reshape(n, n)


@pytest.mark.parametrize("lengths", CASES)
def test_positions_and_mask_match_loops(backend, lengths):
    arr = backend.asarray(np.array(lengths, dtype=np.int64))
    pos = arrpos.packed_positions(arr)
    assert backend.xp.isdtype(pos.dtype, "integral")
    np.testing.assert_array_equal(backend.to_numpy(pos), positions_loop(lengths))
    for causal in (False, True):
        m = arrpos.packed_mask(arr, causal=causal)
        assert backend.xp.isdtype(m.dtype, "bool")
        np.testing.assert_array_equal(backend.to_numpy(m), mask_loop(lengths, causal))


def test_sequences_and_small_integer_dtypes(backend):
    got = arrpos.packed_positions((2, 3), xp=backend.module)
    np.testing.assert_array_equal(backend.to_numpy(got), [0, 1, 0, 1, 2])
    small = backend.asarray(np.array([100, 100], dtype=np.int8))  # their sum overflows int8
    np.testing.assert_array_equal(backend.to_numpy(arrpos.packed_positions(small)),
                                  positions_loop([100, 100]))


def test_cu_seqlens_convention_of_transformers_flash_attention():
    """transformers turns packed position_ids into flash-attn's cu_seqlens and into the
    document index of its packed-sequence mask; both must give back our lengths and mask."""
    torch = pytest.importorskip("torch")
    fa = pytest.importorskip("transformers.modeling_flash_attention_utils")
    masking = pytest.importorskip("transformers.masking_utils")
    for lengths in ([3, 1, 4], [2, 2], [1, 5, 1, 1]):
        pos = torch.from_numpy(arrpos.packed_positions(lengths))[None]
        (cu_q, cu_k), (max_q, _) = fa.prepare_fa_kwargs_from_position_ids(pos)
        np.testing.assert_array_equal(cu_q.numpy(), np.concatenate([[0], np.cumsum(lengths)]))
        assert int(max_q) == max(lengths)
        ours = arrpos.packed_positions(np.diff(cu_q.numpy()))  # back from cu_seqlens
        np.testing.assert_array_equal(ours, pos[0].numpy())
        doc = masking.find_packed_sequence_indices(pos)[0].numpy()
        np.testing.assert_array_equal(arrpos.packed_mask(lengths), doc[:, None] == doc[None, :])


def test_positions_feed_rope_tables(backend):
    lengths = [4, 2, 5]
    inv = backend.asarray(1.0 / 100.0 ** (np.arange(4) / 4))
    cos, sin = arrpos.rope_cos_sin(arrpos.packed_positions(lengths, xp=backend.module), inv)
    pieces = [arrpos.rope_cos_sin(backend.asarray(np.arange(n)), inv) for n in lengths]
    np.testing.assert_array_equal(backend.to_numpy(cos),
                                  np.concatenate([backend.to_numpy(c) for c, _ in pieces]))
    np.testing.assert_array_equal(backend.to_numpy(sin),
                                  np.concatenate([backend.to_numpy(s) for _, s in pieces]))


def _doc_attention(backend, q, k, v, slopes, inv, n):
    """One document alone: RoPE at 0..n-1, causal ALiBi, causal mask."""
    cos, sin = arrpos.rope_cos_sin(backend.asarray(np.arange(n)), inv)
    bias = arrpos.alibi_bias(slopes, n, n, mode="causal")
    return arrpos.attention(arrpos.apply_rope(q, cos, sin), arrpos.apply_rope(k, cos, sin), v,
                            bias=bias, causal=True)


def test_packed_attention_equals_per_document_attention(backend):
    lengths = [3, 1, 4, 2]
    n, heads, d = sum(lengths), 2, 8
    rng = np.random.default_rng(3)
    q, k, v = (backend.asarray(rng.normal(size=(heads, n, d))) for _ in range(3))
    slopes = arrpos.alibi_slopes(heads, dtype=q.dtype, xp=backend.module)
    inv = backend.asarray(1.0 / 100.0 ** (np.arange(d // 2) / (d // 2)))
    pos = arrpos.packed_positions(lengths, xp=backend.module)
    cos, sin = arrpos.rope_cos_sin(pos, inv)
    bias = arrpos.alibi_bias_from_positions(slopes, pos, pos, mode="causal")
    mask = arrpos.packed_mask(lengths, causal=True, xp=backend.module)
    packed = backend.to_numpy(arrpos.attention(
        arrpos.apply_rope(q, cos, sin), arrpos.apply_rope(k, cos, sin), v, bias=bias,
        mask=mask))
    start, parts = 0, []
    for m in lengths:
        sl = slice(start, start + m)
        parts.append(backend.to_numpy(_doc_attention(backend, q[:, sl, :], k[:, sl, :], v[:, sl, :],
                                                     slopes, inv, m)))
        start += m
    tol = 1e-10 if packed.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(packed, np.concatenate(parts, axis=1), rtol=tol, atol=tol)


def test_errors():
    with pytest.raises(TypeError, match="lengths"):
        arrpos.packed_positions(5)
    with pytest.raises(TypeError, match="lengths"):
        arrpos.packed_positions([2.0, 3.0])
    with pytest.raises(TypeError, match="lengths"):
        arrpos.packed_positions(np.array([2.0, 3.0]))
    with pytest.raises(TypeError, match="lengths"):
        arrpos.packed_mask([True, False])
    with pytest.raises(ValueError, match="lengths"):
        arrpos.packed_positions(np.array([[2, 3]]))
    with pytest.raises(ValueError, match="lengths"):
        arrpos.packed_mask([2, -1])
    with pytest.raises(ValueError, match="sum"):
        arrpos.packed_positions(np.array([2**62, 2**62]))
    with pytest.raises(TypeError, match="causal"):
        arrpos.packed_mask([2], causal=1)


def test_jit_needs_concrete_lengths():
    jax = pytest.importorskip("jax")
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(arrpos.packed_positions)(jax.numpy.asarray([2, 3]))


def test_dask_lengths_are_read():
    da = pytest.importorskip("dask.array")
    got = arrpos.packed_positions(da.from_array(np.array([2, 3]), chunks=1))
    np.testing.assert_array_equal(np.asarray(got), [0, 1, 0, 1, 2])

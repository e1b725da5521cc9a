"""Issue 29, item 7: arrpos's rotary tables in the forms of the serving engines and kernels,
and the converters between them.

The engines do not install here (vLLM, SGLang, FlashInfer need CUDA builds; MLX needs Apple
silicon; Liger needs Triton): their formulas are restated in float64 from their sources, each
named by file, line and commit:

* vLLM ``vllm/model_executor/layers/rotary_embedding/base.py`` (072d10a)
  ``RotaryEmbeddingBase._compute_inv_freq`` / ``_compute_cos_sin_cache`` L56-79 and
  ``RotaryEmbedding.forward_static`` L110-152 (``index_select``, ``chunk(2)``, rotate the first
  ``rotary_dim`` features); ``common.py`` (1593f0c) ``apply_rotary_emb_torch`` L28-46
  (``is_neox_style``: halves, else ``x[..., ::2]`` / ``x[..., 1::2]``).
* SGLang ``python/sglang/srt/layers/rotary_embedding/base.py`` (b531adb)
  ``_compute_cos_sin_cache`` and ``forward_native``: vLLM's, line for line.
* FlashInfer ``flashinfer/rope.py`` (fb28d72) ``apply_rope_with_cos_sin_cache`` L1159-1225
  (the vLLM cache, ``interleave = not is_neox``) and ``apply_rope_pos_ids`` L879-946 with
  ``include/flashinfer/pos_enc.cuh`` L590-617 (``freq = rcp_theta ** (2 (i // 2) / rd)``,
  ``smooth`` clamped, ``freq = (1 - smooth) freq rcp_scale + smooth freq``; ``smooth_a`` and
  ``smooth_b`` 0, or Llama 3.1's at L1538-1539).
* MLX ``mlx/fast.cpp`` (3b259a8) ``rope``'s fallback: ``positions = (arange(T) + offset) *
  scale``, ``inv_freqs = reciprocal(freqs)`` or ``exp(-arange(half) log(base) / half)``,
  ``traditional``: consecutive pairs.
* Liger-Kernel ``src/liger_kernel/ops/rope.py`` (ead96b6) ``_triton_rope`` L33-110: HF-style
  ``cos``/``sin`` ``(1 or bsz, seq, head_dim)``, only their left half read (L50-51), halves
  rotated (L91-100), the backward the transpose (L103-110).

diffusers (installed) runs: ``get_1d_rotary_pos_embed`` (complex and both real layouts),
``apply_rotary_emb`` and PRX's 2x2 ``rope`` / ``apply_rope``. Meta's LLaMA
``precompute_freqs_cis`` / ``apply_rotary_emb`` (``llama/model.py``) is restated.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos


def _tol(backend):
    return 1e-12 if backend.float64 else 2e-6


def _tables(backend, positions, dim, base=10000.0, layout="half"):
    dtype = "float64" if backend.float64 else "float32"
    inv, _ = arrpos.rope_frequencies(dim, base=base, dtype=dtype, xp=backend.module)
    return arrpos.rope_cos_sin(backend.asarray(np.asarray(positions)), inv, layout=layout,
                               dtype=dtype)


# --------------------------------------------------------------------- vLLM / SGLang

def vllm_cos_sin_cache(rotary_dim, max_position, base):
    """vLLM base.py L56-79 (and SGLang's ``_compute_cos_sin_cache``), in float64."""
    inv_freq = 1.0 / base ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    freqs = np.einsum("i,j->ij", np.arange(max_position, dtype=np.float64), inv_freq)
    return np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1)


def vllm_forward_static(positions, query, head_size, rotary_dim, cache, is_neox_style):
    """vLLM base.py L110-152 with common.py L28-46, float64; ``query`` is
    ``(num_tokens, num_heads * head_size)``."""
    cos, sin = np.split(cache[positions.reshape(-1)], 2, axis=-1)
    q = query.reshape(len(positions.reshape(-1)), -1, head_size)
    rot, rest = q[..., :rotary_dim], q[..., rotary_dim:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    if is_neox_style:
        x1, x2 = np.split(rot, 2, axis=-1)
    else:
        x1, x2 = rot[..., ::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    rot = np.concatenate([o1, o2], -1) if is_neox_style else np.stack([o1, o2], -1).reshape(
        rot.shape)
    return np.concatenate([rot, rest], axis=-1).reshape(query.shape)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_vllm_cos_sin_cache(backend, layout):
    cos, sin = _tables(backend, np.arange(64), 32, base=500000.0, layout=layout)
    cache = backend.to_numpy(arrpos.to_cos_sin_cache(cos, sin, layout=layout))
    np.testing.assert_allclose(cache, vllm_cos_sin_cache(32, 64, 500000.0), rtol=0,
                               atol=_tol(backend))
    back = arrpos.from_cos_sin_cache(backend.asarray(cache), layout=layout)
    np.testing.assert_array_equal(backend.to_numpy(back[0]), backend.to_numpy(cos))
    np.testing.assert_array_equal(backend.to_numpy(back[1]), backend.to_numpy(sin))


@pytest.mark.parametrize("is_neox_style", [True, False])
def test_vllm_forward_static(backend, is_neox_style):
    """vLLM's ``get_rope(head_size=64, max_position, is_neox_style,
    {"partial_rotary_factor": 0.5})`` on packed tokens: ``apply_rope_cached`` on the cache's
    two halves, the same rotation."""
    head_size, rotary_dim, heads, n = 64, 32, 3, 11
    cache = vllm_cos_sin_cache(rotary_dim, 128, 10000.0)
    rng = np.random.default_rng(0)
    positions = rng.integers(0, 128, size=n)
    query = rng.normal(size=(n, heads * head_size))
    want = vllm_forward_static(positions, query, head_size, rotary_dim, cache, is_neox_style)
    layout = "half" if is_neox_style else "interleaved"
    x = backend.asarray(query.reshape(n, heads, head_size))
    c = backend.asarray(cache if backend.float64 else cache.astype(np.float32))
    got = arrpos.apply_rope_cached(x, c[:, :rotary_dim // 2], c[:, rotary_dim // 2:],
                                   backend.asarray(positions[:, None]), layout=layout)
    np.testing.assert_allclose(backend.to_numpy(got).reshape(n, -1), want, rtol=0,
                               atol=_tol(backend) * 10)
    cos, sin = arrpos.from_cos_sin_cache(c, layout=layout)      # the same through full tables
    idx = backend.asarray(positions)
    full = arrpos.apply_rope(x, backend.xp.take(cos, idx, axis=0)[:, None, :],
                             backend.xp.take(sin, idx, axis=0)[:, None, :], layout=layout)
    np.testing.assert_allclose(backend.to_numpy(full).reshape(n, -1), want, rtol=0,
                               atol=_tol(backend) * 10)


# --------------------------------------------------------------------- FlashInfer

def flashinfer_freq(rotary_dim, rope_theta, rope_scale, smooth_a=0.0, smooth_b=0.0):
    """pos_enc.cuh L590-603 in float64 (one value per pair; the kernel's ``__powf`` and
    ``__sincosf`` are float32 approximations of these)."""
    freq = (1.0 / rope_theta) ** (2 * np.arange(rotary_dim // 2) / rotary_dim)
    smooth = np.clip(freq * smooth_a + smooth_b, 0.0, 1.0)
    return (1 - smooth) * (freq / rope_scale) + smooth * freq


@pytest.mark.parametrize("interleave", [False, True])
def test_flashinfer_pos_ids(backend, interleave):
    """``apply_rope_pos_ids(q, k, pos_ids, rotary_dim, interleave, rope_scale, rope_theta)``
    is ``apply_rope`` with ``LinearScaling(rope_scale)`` frequencies."""
    rd, theta, scale = 64, 1e6, 4.0
    want = flashinfer_freq(rd, theta, scale)
    inv, _ = arrpos.rope_frequencies(rd, base=theta, scaling=arrpos.LinearScaling(scale),
                                     dtype="float64")
    np.testing.assert_allclose(inv, want, rtol=1e-14)
    pos = np.array([0, 5, 1000, 123456])
    rng = np.random.default_rng(1)
    q = rng.normal(size=(4, 2, 80))
    layout = "interleaved" if interleave else "half"
    if not backend.float64:  # the frequencies reach the backend rounded to float32
        inv = inv.astype(np.float32)
    ang = pos[:, None] * inv.astype(np.float64)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    rot = q[..., :rd]
    x1, x2 = (rot[..., ::2], rot[..., 1::2]) if interleave else np.split(rot, 2, -1)
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    rot = np.stack([o1, o2], -1).reshape(rot.shape) if interleave else np.concatenate([o1, o2], -1)
    ref = np.concatenate([rot, q[..., rd:]], -1)
    cos, sin = arrpos.rope_cos_sin(backend.asarray(pos), backend.asarray(inv), layout=layout)
    got = arrpos.apply_rope(_floats(backend, q), cos[:, None, :], sin[:, None, :],
                           layout=layout)
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=_tol(backend) * 100)


def _floats(backend, a):
    return backend.asarray(a if backend.float64 else np.asarray(a, dtype=np.float32))


def test_flashinfer_llama31():
    """``apply_llama31_rope_pos_ids``: pos_enc.cuh L1538-1539 ``smooth_a = old_ctx / (2 pi
    (high - low))``, ``smooth_b = -1 / (high / low - 1)``: arrpos's ``Llama3Scaling``."""
    rd, theta, factor, low, high, old = 128, 500000.0, 8.0, 1.0, 4.0, 8192
    a = old / (2 * math.pi * high - 2 * math.pi * low)
    b = -1.0 / (high / low - 1.0)
    want = flashinfer_freq(rd, theta, factor, a, b)
    got, _ = arrpos.rope_frequencies(rd, base=theta, dtype="float64", scaling=arrpos.Llama3Scaling(
        factor, low_freq_factor=low, high_freq_factor=high, original_max_positions=old))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_flashinfer_cos_sin_cache(backend):
    """``apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache,
    is_neox)`` (rope.py L1159-1225): vLLM's cache, float32, ``interleave = not is_neox``."""
    cos, sin = _tables(backend, np.arange(16), 8)
    cache = arrpos.to_cos_sin_cache(cos, sin)
    want = vllm_cos_sin_cache(8, 16, 10000.0)
    np.testing.assert_allclose(backend.to_numpy(cache), want, rtol=0, atol=_tol(backend))


# --------------------------------------------------------------------- MLX

def mlx_fast_rope(x, dims, traditional, base, scale, offset, freqs=None):
    """mlx/fast.cpp ``rope``'s fallback in float64; ``x`` ``(B, N, T, D)``."""
    half = dims // 2
    positions = (np.arange(x.shape[2]) + offset) * scale
    inv = 1.0 / freqs if freqs is not None else np.exp(-np.arange(half) * math.log(base) / half)
    theta = positions[:, None] * inv
    c, s = np.cos(theta), np.sin(theta)
    if traditional:
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
    else:
        x1, x2 = x[..., :half], x[..., half:dims]
    o1, o2 = x1 * c - x2 * s, x1 * s + x2 * c
    rot = np.stack([o1, o2], -1).reshape(*x.shape[:-1], dims) if traditional else \
        np.concatenate([o1, o2], -1)
    return np.concatenate([rot, x[..., dims:]], -1)


@pytest.mark.parametrize("traditional", [False, True])
def test_mlx_fast_rope(backend, traditional):
    """``mx.fast.rope(x, dims, traditional=t, base=None, scale=s, offset=o, freqs=f)`` is
    ``apply_rope(x, *rope_cos_sin((arange(T) + o) * s, 1 / f, layout=...))``: MLX's ``freqs``
    are periods, the reciprocals of ``inv_freq``."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 7, 24))
    dims, scale, offset = 16, 0.25, 5
    freqs = 1.0 / arrpos.rope_frequencies(dims, base=1e4, dtype="float64")[0] * 1.5
    layout = "interleaved" if traditional else "half"
    for f, base in ((freqs, None), (None, 1e4)):
        want = mlx_fast_rope(x, dims, traditional, base, scale, offset, f)
        inv = 1.0 / f if f is not None else arrpos.rope_frequencies(dims, base=base,
                                                                    dtype="float64")[0]
        pos = (np.arange(7) + offset) * scale
        cos, sin = arrpos.rope_cos_sin(_floats(backend, pos), _floats(backend, inv),
                                       layout=layout)
        got = arrpos.apply_rope(_floats(backend, x), cos, sin, layout=layout)
        np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend) * 10)


# --------------------------------------------------------------------- Liger

def liger_rope(q, cos, sin, backward=False):
    """Liger ``_triton_rope`` (ops/rope.py L33-110), float64: ``q`` ``(bsz, heads, seq, hd)``
    as ``liger_rotary_pos_emb`` takes it, ``cos``/``sin`` ``(1 or bsz, seq, hd)`` of which only
    the left half is read."""
    h = q.shape[-1] // 2
    c, s = cos[:, None, :, :h], sin[:, None, :, :h]
    x1, x2 = q[..., :h], q[..., h:]
    if backward:
        return np.concatenate([x1 * c + x2 * s, x2 * c - x1 * s], -1)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def test_liger_rope(backend):
    """``liger_rotary_pos_emb(q, k, cos, sin)`` takes transformers' full-width tables:
    arrpos's ``"half"`` tables, ``apply_rope`` with a heads axis; its backward is
    ``inverse=True``."""
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 4, 9, 32))
    cos, sin = _tables(backend, np.arange(9), 32)
    c, s = backend.to_numpy(cos)[None], backend.to_numpy(sin)[None]
    got = arrpos.apply_rope(_floats(backend, q), cos[None, None, ...], sin[None, None, ...])
    np.testing.assert_allclose(backend.to_numpy(got), liger_rope(q, c, s), rtol=0,
                               atol=_tol(backend) * 10)
    back = arrpos.apply_rope(_floats(backend, q), cos[None, None, ...], sin[None, None, ...],
                             inverse=True)
    np.testing.assert_allclose(backend.to_numpy(back), liger_rope(q, c, s, backward=True),
                               rtol=0, atol=_tol(backend) * 10)


# --------------------------------------------------------------------- complex freqs_cis

def llama_freqs_cis(dim, end, theta=10000.0):
    """Meta's LLaMA ``precompute_freqs_cis`` (llama/model.py) in float64."""
    freqs = 1.0 / theta ** (np.arange(0, dim, 2)[: dim // 2] / dim)
    return np.exp(1j * np.outer(np.arange(end), freqs))


def test_freqs_cis_llama(backend):
    cos, sin = _tables(backend, np.arange(20), 16, layout="interleaved")
    fc = arrpos.to_freqs_cis(cos, sin, layout="interleaved")
    want = llama_freqs_cis(16, 20)
    np.testing.assert_allclose(backend.to_numpy(fc), want, rtol=0, atol=_tol(backend))
    # LLaMA's apply_rotary_emb: view_as_complex(x.reshape(..., -1, 2)) * freqs_cis
    x = np.random.default_rng(4).normal(size=(20, 2, 16))
    xc = x.reshape(20, 2, 8, 2)
    ref = (xc[..., 0] + 1j * xc[..., 1]) * want[:, None, :]
    ref = np.stack([ref.real, ref.imag], -1).reshape(x.shape)
    got = arrpos.apply_rope(_floats(backend, x), cos[:, None, :], sin[:, None, :],
                            layout="interleaved")
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=_tol(backend) * 10)
    c2, s2 = arrpos.from_freqs_cis(fc, layout="interleaved")
    np.testing.assert_array_equal(backend.to_numpy(c2), backend.to_numpy(cos))
    np.testing.assert_array_equal(backend.to_numpy(s2), backend.to_numpy(sin))


def test_freqs_cis_diffusers():
    torch = pytest.importorskip("torch")
    embeddings = pytest.importorskip("diffusers.models.embeddings")
    dim, n, theta = 16, 12, 10000.0
    pos = np.arange(n)
    inv, _ = arrpos.rope_frequencies(dim, base=theta, dtype="float64")
    for repeat, layout in ((True, "interleaved"), (False, "half")):
        ref_cos, ref_sin = embeddings.get_1d_rotary_pos_embed(
            dim, pos, theta, use_real=True, repeat_interleave_real=repeat,
            freqs_dtype=torch.float64)
        cos, sin = arrpos.rope_cos_sin(pos, inv, layout=layout, dtype="float64")
        # diffusers' float32 output of float64 angles
        np.testing.assert_allclose(cos, ref_cos.numpy(), rtol=0, atol=1e-7)
        np.testing.assert_allclose(sin, ref_sin.numpy(), rtol=0, atol=1e-7)
    ref = embeddings.get_1d_rotary_pos_embed(dim, pos, theta, use_real=False,
                                             freqs_dtype=torch.float64)
    cos, sin = arrpos.rope_cos_sin(pos, inv, layout="interleaved", dtype="float64")
    fc = arrpos.to_freqs_cis(cos, sin, layout="interleaved")
    np.testing.assert_allclose(fc, ref.numpy(), rtol=0, atol=1e-15)
    # apply_rotary_emb(x, freqs_cis, use_real=False) (Lumina: x (B, S, H, D)): complex pairs
    # (x[2j], x[2j+1])
    x = torch.randn(1, n, 2, dim, dtype=torch.float64)
    out = embeddings.apply_rotary_emb(x, ref[None], use_real=False).numpy()  # (B, S, D/2)
    got = arrpos.apply_rope(x.numpy(), cos[:, None, :], sin[:, None, :], layout="interleaved")
    np.testing.assert_allclose(got, out, rtol=0, atol=1e-6)  # diffusers rotates in float32


# --------------------------------------------------------------------- 2x2 matrices

def test_rotation_matrices_diffusers_prx():
    """diffusers PRX ``PRXEmbedND.rope(pos, dim, theta)`` (``[[cos, -sin], [sin, cos]]`` per
    pair, float64 then ``.float()``) and its ``apply_rope`` (pairs ``(x[2j], x[2j+1])``)."""
    torch = pytest.importorskip("torch")
    prx = pytest.importorskip("diffusers.models.transformers.transformer_prx")
    dim, theta = 16, 10000
    embed = prx.PRXEmbedND(dim=dim, theta=theta, axes_dim=[dim])
    pos = torch.arange(10, dtype=torch.float64)[None] * 3.0
    ref = embed.rope(pos, dim, theta)[0].numpy()                # (10, dim/2, 2, 2) float32
    inv, _ = arrpos.rope_frequencies(dim, base=float(theta), dtype="float64")
    cos, sin = arrpos.rope_cos_sin(pos[0].numpy(), inv, layout="interleaved")
    m = arrpos.rotation_matrices(cos, sin, layout="interleaved")
    np.testing.assert_allclose(m, ref, rtol=0, atol=1e-7)
    x = torch.randn(10, dim, dtype=torch.float32)
    out = prx.apply_rope(x, torch.from_numpy(m.astype(np.float32))).numpy()
    got = arrpos.apply_rope(x.numpy(), cos.astype(np.float32), sin.astype(np.float32),
                            layout="interleaved")
    np.testing.assert_allclose(got, out, rtol=0, atol=2e-6)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_round_trips(backend, layout):
    cos, sin = _tables(backend, np.array([[0, 3, 7], [1, 100, 5000]]), 12, layout=layout)
    for to, back in ((arrpos.to_freqs_cis, arrpos.from_freqs_cis),
                     (arrpos.to_cos_sin_cache, arrpos.from_cos_sin_cache),
                     (arrpos.rotation_matrices, arrpos.from_rotation_matrices)):
        c2, s2 = back(to(cos, sin, layout=layout), layout=layout)
        np.testing.assert_array_equal(backend.to_numpy(c2), backend.to_numpy(cos))
        np.testing.assert_array_equal(backend.to_numpy(s2), backend.to_numpy(sin))
    m = backend.to_numpy(arrpos.rotation_matrices(cos, sin, layout=layout))
    assert m.shape == (2, 3, 6, 2, 2)
    np.testing.assert_allclose(m @ np.swapaxes(m, -1, -2), np.broadcast_to(np.eye(2), m.shape),
                               atol=_tol(backend) * 10)


def test_bfloat16_and_gradients():
    torch = pytest.importorskip("torch")
    cos, sin = arrpos.rope_cos_sin(torch.arange(5), torch.tensor([1.0, 0.1]),
                                   dtype=torch.bfloat16)
    assert arrpos.to_freqs_cis(cos, sin).dtype == torch.complex64
    assert arrpos.to_cos_sin_cache(cos, sin).dtype == torch.bfloat16
    c = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    arrpos.rotation_matrices(c, torch.zeros(3, 4, dtype=torch.float64)).sum().backward()
    assert c.grad is not None


def test_errors():
    cos, sin = arrpos.rope_cos_sin(np.arange(3), np.array([1.0, 0.5]))
    with pytest.raises(ValueError, match="layout='interleaved'"):
        arrpos.to_freqs_cis(cos, sin, layout="interleaved")   # a half table, read wrong
    with pytest.raises(ValueError, match="cos and sin"):
        arrpos.to_cos_sin_cache(cos, sin[:2])
    with pytest.raises(ValueError, match="even"):
        arrpos.rotation_matrices(cos[:, :3], sin[:, :3])
    with pytest.raises(TypeError, match="freqs_cis"):
        arrpos.from_freqs_cis(cos)
    with pytest.raises(TypeError, match="cos"):
        arrpos.to_freqs_cis(np.exp(1j * cos), sin)
    with pytest.raises(ValueError, match="layout"):
        arrpos.from_cos_sin_cache(cos, layout="neox")
    with pytest.raises(ValueError, match="even"):
        arrpos.from_cos_sin_cache(cos[:, :3])
    with pytest.raises(ValueError, match="rotations"):
        arrpos.from_rotation_matrices(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match=r"\(\.\.\., R/2, 2, 2\)"):
        arrpos.from_rotation_matrices(np.ones((2, 2, 3)))

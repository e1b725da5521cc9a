"""Issue 29, item 6: data-dependent encodings, each against its peer's code.

* Inkling's content-conditioned relative bias (``content_relative_bias``): transformers 5.24
  ``inkling2`` ``Inkling2RelativePositionBias`` (run, with and without log scaling) and
  x-transformers 2.31 ``RelativeProjPositionalBias`` (run).
* The Forgetting Transformer's bias (``forgetting_bias``, ``forgetting_bias_per_row``):
  x-transformers ``DataDependentAlibi`` (causal and bidirectional) and
  ``PerRowDataDependentAlibi`` (run); the official reference of Lin et al.,
  zhixuan-lin/forgetting-transformer ``src/forgetting_transformer/ops/forgetting_attention.py``
  ``test_op`` (``log_lambda = cumsum(log_fgate)``, ``decay_bias = log_lambda[..., -M:, None]
  - log_lambda[..., None, :]``, ``mask = tril(ones(M, N), diagonal=N - M)``), and fla's
  ``fla/ops/forgetting_attn/naive.py`` ``naive_forgetting_attn`` (``gc[:, i] - gc[:, j]``
  under ``tril``), restated in float64 (neither installs here: Triton).
* CoPE (``cope_positions``, ``cope_bias``): x-transformers ``CoPE`` (run, interpolated form);
  its ``soft_onehot`` form fails in x-transformers 2.31.10 with the installed einx
  (``einx.subtract('i, j -> i j', pos, positions)`` on a 4-d ``pos``: a RankError), so it is
  restated from ``x_transformers.py`` L564-566 in float64.
* PoPE (``pope_cos_sin``, ``apply_pope``): x-transformers ``PolarEmbedding`` and
  ``apply_polar_pos_emb`` (run).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos


def _tol(backend, single=1e-6):
    return 1e-12 if backend.float64 else single


def _floats(backend, a):
    return backend.asarray(a if backend.float64 else np.asarray(a, dtype=np.float32))


# --------------------------------------------------------------------- Inkling

@pytest.mark.parametrize("log_scaling", [False, True])
def test_inkling_transformers(backend, log_scaling):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.inkling2.configuration_inkling2 import Inkling2TextConfig
    from transformers.models.inkling2.modeling_inkling2 import Inkling2RelativePositionBias

    b, n, hidden, heads, d_rel, extent = 2, 9, 16, 3, 4, 5
    config = Inkling2TextConfig(hidden_size=hidden, d_rel=d_rel, rel_extent=extent,
                                log_scaling_n_floor=3, log_scaling_alpha=0.3,
                                rel_l2_clip_threshold=1.5)
    torch.manual_seed(1)
    module = Inkling2RelativePositionBias(config, heads, extent, log_scaling=log_scaling).double()
    with torch.no_grad():
        module.proj.normal_()
        module.linear.weight.normal_()
        module.norm.scale.uniform_(0.5, 2.0)
    x = torch.randn(b, n, hidden, dtype=torch.float64)
    for q_len, offset in [(n, 0), (3, n - 3)]:  # prefill, then decoding with a cache
        pos = torch.arange(q_len)[None].expand(b, q_len) + offset + 4
        distance = (torch.arange(q_len)[:, None] + offset) - torch.arange(n)[None, :]
        with torch.no_grad():
            ref = module(x[:, offset:], distance, pos).numpy()
            states = (module.linear(x[:, offset:]).view(b, q_len, heads, d_rel)
                      * module.norm.scale).transpose(1, 2).numpy()
        scale = None
        if log_scaling:
            scale = arrpos.position_scale(pos.numpy(), kind="log_floor", alpha=0.3,
                                          floor_scale=3, dtype="float64")
            scale = _floats(backend, scale)
        rel = arrpos.relative_positions(q_len, n, query_offset=offset, xp=backend.module)
        got = arrpos.content_relative_bias(_floats(backend, states),
                                           _floats(backend, module.proj.detach().numpy()),
                                           rel, scale, clip=1.5)
        # Inkling clips and scales in float32 whatever the module's dtype
        np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0,
                                   atol=2e-6 * abs(ref).max())


def inkling_float64(states, profiles, relative, scale, clip):
    """Inkling2 ``L2Clip`` / ``LogScale`` / ``RelativePositionBias.forward``
    (``modeling_inkling2.py`` L133-227) in float64, states ``(b, heads, q, d)``."""
    norm = np.linalg.norm(states, axis=-1, keepdims=True)
    s = states * np.minimum(clip / (norm + 1e-6), 1.0)
    if scale is not None:
        s = s * scale[:, None, :, None]
    curves = s @ profiles
    distance = -relative
    out = np.take_along_axis(curves, np.broadcast_to(np.clip(distance, 0, profiles.shape[1] - 1),
                                                     curves.shape[:-1] + (distance.shape[1],)),
                             axis=-1)
    return np.where((distance < 0) | (distance >= profiles.shape[1]), 0.0, out)


def test_inkling_float64(backend):
    rng = np.random.default_rng(0)
    states = rng.normal(size=(2, 3, 6, 4)) * 2
    profiles = rng.normal(size=(4, 4))
    rel = arrpos.relative_positions(6, 8, query_offset=2)
    scale = 1 + rng.random((2, 6))
    want = inkling_float64(states, profiles, rel, scale, 1.5)
    got = arrpos.content_relative_bias(_floats(backend, states), _floats(backend, profiles),
                                       backend.asarray(rel), _floats(backend, scale), clip=1.5)
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend, 3e-6))


def test_inkling_x_transformers(backend):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(2)
    module = xt.RelativeProjPositionalBias(16, 3, num_distance_basis=4, max_dist=5).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        for q_len in (9, 3):
            ref = module(x[:, -q_len:], seq_len_k=9).numpy()
            weights = module.to_distance_weights(x[:, -q_len:]).numpy()
            rel = arrpos.relative_positions(q_len, 9, query_offset=9 - q_len, xp=backend.module)
            got = arrpos.content_relative_bias(_floats(backend, weights),
                                               _floats(backend, module.distance_bank.numpy()),
                                               rel)
            np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0,
                                       atol=_tol(backend, 2e-6) * abs(ref).max())


def test_inkling_gradient_and_errors():
    torch = pytest.importorskip("torch")
    states = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    profiles = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    rel = arrpos.relative_positions(3, 3, xp=torch)
    arrpos.content_relative_bias(states, profiles, rel, clip=1.0).sum().backward()
    assert states.grad is not None and profiles.grad is not None
    s, p, r = np.zeros((2, 3, 4)), np.zeros((4, 5)), arrpos.relative_positions(3, 3)
    with pytest.raises(ValueError, match="profiles"):
        arrpos.content_relative_bias(s, np.zeros((3, 5)), r)
    with pytest.raises(ValueError, match="relative"):
        arrpos.content_relative_bias(s, p, arrpos.relative_positions(2, 3))
    with pytest.raises(TypeError, match="relative"):
        arrpos.content_relative_bias(s, p, r.astype(float))
    with pytest.raises(ValueError, match="query_scale"):
        arrpos.content_relative_bias(s, p, r, np.ones(4))
    with pytest.raises(ValueError, match="clip"):
        arrpos.content_relative_bias(s, p, r, clip=0.0)
    with pytest.raises(TypeError, match="states"):
        arrpos.content_relative_bias(s.astype(int), p, r)


# --------------------------------------------------------------------- Forgetting Transformer

def fox_reference(log_fgate, q_len):
    """Lin et al.'s ``test_op`` reference, float64: ``cumsum`` over keys, the last ``M`` rows
    minus every column, masked by ``tril(ones(M, N), diagonal=N - M)`` (0 there: arrpos
    leaves the masking of future keys to the caller)."""
    n = log_fgate.shape[-1]
    log_lambda = np.cumsum(log_fgate, axis=-1)
    decay = log_lambda[..., n - q_len:, None] - log_lambda[..., None, :]  # -M: for M > 0
    mask = np.tril(np.ones((q_len, n)), k=n - q_len).astype(bool)
    return np.where(mask, decay, 0.0)


def test_forgetting_official_reference(backend):
    rng = np.random.default_rng(3)
    log_fgate = np.log(1 / (1 + np.exp(-rng.uniform(-2, 6, size=(2, 3, 11)))))  # logsigmoid
    for q_len in (11, 4, 1, 0):
        got = arrpos.forgetting_bias(_floats(backend, log_fgate), query_len=q_len)
        np.testing.assert_allclose(backend.to_numpy(got), fox_reference(log_fgate, q_len),
                                   rtol=0, atol=_tol(backend, 3e-6))


def test_forgetting_fla_naive(backend):
    """fla ``naive_forgetting_attn``: ``g`` is ``(B, T, HQ)``, ``gc = g.cumsum(1)``, the bias
    ``gc[:, i] - gc[:, j]`` (``rearrange(gc, 'b t h -> b h t 1') - '... -> b h 1 t'``)."""
    g = -np.random.default_rng(4).random((2, 10, 3))
    gc = np.cumsum(g, axis=1).transpose(0, 2, 1)
    want = np.where(np.tril(np.ones((10, 10), bool)), gc[..., :, None] - gc[..., None, :], 0.0)
    got = arrpos.forgetting_bias(_floats(backend, g.transpose(0, 2, 1)))
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend, 3e-6))


@pytest.mark.parametrize("causal", [True, False])
def test_forgetting_x_transformers(backend, causal):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(5)
    b, n, dim, heads = 2, 8, 16, 3
    module = xt.DataDependentAlibi(dim, heads, causal=causal, post_log_scale=0.7).double()
    with torch.no_grad():
        module.to_forget_gates[0].bias.uniform_(-2.0, 3.0)
        x = torch.randn(b, n, dim, dtype=torch.float64)
        ref = module(x).numpy()
        gates = (torch.nn.functional.logsigmoid(module.to_forget_gates[0](x)) * 0.7)
        gates = gates.permute(0, 2, 1).numpy()                      # (b, heads[*2], n)
    if causal:
        got = backend.to_numpy(arrpos.forgetting_bias(_floats(backend, gates)))
        lower = np.tril(np.ones((n, n), bool))  # x-transformers' future keys are masked later
        np.testing.assert_allclose(got[..., lower], ref[..., lower], rtol=0,
                                   atol=_tol(backend, 3e-6))
        assert not got[..., ~lower].any()
    else:
        got = arrpos.forgetting_bias(_floats(backend, gates[:, :heads]),
                                     _floats(backend, gates[:, heads:]))
        np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=_tol(backend, 3e-6))


def test_forgetting_per_row_x_transformers(backend):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(6)
    module = xt.PerRowDataDependentAlibi(16, 3, dim_head=4, post_log_scale=1.3).double()
    with torch.no_grad():
        x = torch.randn(2, 7, 16, dtype=torch.float64)
        ref = module(x).numpy()
        q, k = module.to_forget_gates(x)
        gates = (torch.nn.functional.logsigmoid(q @ k.transpose(-1, -2) * module.scale)
                 * 1.3).numpy()
    got = arrpos.forgetting_bias_per_row(_floats(backend, gates))
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=_tol(backend, 3e-6))


def test_forgetting_errors_and_gradient():
    torch = pytest.importorskip("torch")
    g = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    arrpos.forgetting_bias(g).sum().backward()
    assert g.grad is not None
    with pytest.raises(ValueError, match="query_len"):
        arrpos.forgetting_bias(np.zeros(4), query_len=5)
    with pytest.raises(ValueError, match="query_len"):
        arrpos.forgetting_bias(np.zeros(4), np.zeros(4), query_len=2)
    with pytest.raises(ValueError, match="log_forget_reverse"):
        arrpos.forgetting_bias(np.zeros(4), np.zeros(5))
    with pytest.raises(TypeError, match="log_forget"):
        arrpos.forgetting_bias(np.zeros(4, dtype=int))
    with pytest.raises(ValueError, match="square"):
        arrpos.forgetting_bias_per_row(np.zeros((3, 4)))


# --------------------------------------------------------------------- CoPE

def _cope_inputs(seed, b=2, heads=3, n=7, d=8, n_pos=5):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(b, heads, n, d)), rng.normal(size=(b, heads, n, n)) * 2,
            rng.normal(size=(n_pos, d)))


def test_cope_x_transformers(backend):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    q, sim, table = _cope_inputs(7)
    n = sim.shape[-1]
    module = xt.CoPE(dim=8, heads=3, max_pos=table.shape[0]).double()
    with torch.no_grad():
        module.pos_emb.copy_(torch.from_numpy(table))
        causal = torch.ones(n, n).triu(1).bool()   # Attend masks before CoPE (attend.py L594-604)
        masked = torch.from_numpy(sim).masked_fill(causal, -torch.finfo(torch.float64).max)
        ref = module(torch.from_numpy(q), masked).numpy()
    got = arrpos.cope_bias(_floats(backend, q), _floats(backend, sim), _floats(backend, table))
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=_tol(backend, 5e-6))


def cope_soft_float64(q, sim, table, temperature):
    """x-transformers ``CoPE.forward`` with ``soft_onehot=True`` (``x_transformers.py``
    L555-566): gates ``sigmoid`` of the causally masked logits, ``pos`` their reverse cumsum
    clamped to ``max_pos - 1``, weights ``softmax(-|pos - p| / temp)`` over ``p``, times
    ``q . pos_emb[p]``."""
    n = sim.shape[-1]
    gates = np.where(np.tril(np.ones((n, n), bool)), 1 / (1 + np.exp(-sim)), 0.0)
    pos = np.minimum(np.flip(np.cumsum(np.flip(gates, -1), -1), -1), table.shape[0] - 1)
    logits = q @ table.T
    diff = np.abs(pos[..., None] - np.arange(table.shape[0]))
    w = np.exp(-diff / temperature)
    w = w / w.sum(-1, keepdims=True)
    return np.einsum("bhijp,bhip->bhij", w, logits)


def test_cope_soft_onehot(backend):
    q, sim, table = _cope_inputs(8)
    want = cope_soft_float64(q, sim, table, 0.05)
    got = arrpos.cope_bias(_floats(backend, q), _floats(backend, sim), _floats(backend, table),
                           temperature=0.05)
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=_tol(backend, 2e-5))


def test_cope_positions_mask_and_decoding(backend):
    """A padding mask gates 0, like x-transformers' masked logits; queries aligned to the end
    of the keys when ``q < k``."""
    rng = np.random.default_rng(9)
    sim = rng.normal(size=(2, 2, 3, 6))
    mask = np.ones((2, 1, 3, 6), bool)
    mask[0, ..., :2] = False
    got = backend.to_numpy(arrpos.cope_positions(_floats(backend, sim),
                                                 backend.asarray(mask), max_position=2.5))
    gates = 1 / (1 + np.exp(-sim))
    gates = np.where(np.tril(np.ones((3, 6), bool), k=3) & mask, gates, 0.0)
    want = np.minimum(np.flip(np.cumsum(np.flip(gates, -1), -1), -1), 2.5)
    assert got.shape == (2, 2, 3, 6)
    np.testing.assert_allclose(got, want, rtol=0, atol=_tol(backend, 1e-6))


def test_cope_errors():
    q, sim, table = _cope_inputs(10)
    with pytest.raises(ValueError, match="table"):
        arrpos.cope_bias(q, sim, table[:, :4])
    with pytest.raises(ValueError, match="q <= k"):
        arrpos.cope_positions(np.zeros((4, 3)))
    with pytest.raises(TypeError, match="mask"):
        arrpos.cope_positions(sim, np.ones(sim.shape))
    with pytest.raises(ValueError, match="mask"):
        arrpos.cope_positions(sim, np.ones((5, 7, 7), bool))
    with pytest.raises(ValueError, match="temperature"):
        arrpos.cope_bias(q, sim, table, temperature=0.0)
    with pytest.raises(ValueError, match="queries"):
        arrpos.cope_bias(q[..., :3, :], sim, table)


# --------------------------------------------------------------------- PoPE

def test_pope_x_transformers(backend):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(11)
    b, heads, n, d = 2, 3, 9, 8
    module = xt.PolarEmbedding(d, heads)
    with torch.no_grad():  # bias_uniform_init=True fails in 2.31.10 (in-place on a leaf)
        module.learned_bias.uniform_(-2 * math.pi, 0.0)
        freqs, bias = module(torch.arange(n))
        q, k = torch.randn(b, heads, n, d), torch.randn(b, heads, n, d)
        ref_q = xt.apply_polar_pos_emb(q, freqs).numpy()
        ref_k = xt.apply_polar_pos_emb(k, freqs + bias).numpy()
    cos, sin = arrpos.pope_cos_sin(n, d, dtype="float32", xp=backend.module)
    got_q = arrpos.apply_pope(backend.asarray(q.numpy()), cos, sin)
    got_k = arrpos.apply_pope(backend.asarray(k.numpy()), cos, sin,
                              backend.asarray(bias.numpy()))
    # x-transformers forms t * inv_freq and adds the phase in float32
    np.testing.assert_allclose(backend.to_numpy(got_q), ref_q, rtol=0, atol=1e-6)
    np.testing.assert_allclose(backend.to_numpy(got_k), ref_k, rtol=0, atol=2e-6)


def test_pope_float64_and_scores(backend):
    """The PoPE score ``sum_j softplus(q_j) softplus(k_j) cos(t_q - t_k - phase_j)``
    (arXiv 2509.10534), with frequencies ``base ** (-j / d)``, in float64."""
    if not backend.float64:
        pytest.skip("no float64 on this backend")
    rng = np.random.default_rng(12)
    d, n = 6, 5
    q, k = rng.normal(size=(n, d)), rng.normal(size=(n, d)) * 3
    phase = rng.uniform(-2 * np.pi, 0, size=(d,))
    pos = np.array([0.0, 3.0, 17.0, 1000.0, 123456.0])
    cos, sin = arrpos.pope_cos_sin(backend.asarray(pos), d, base=500.0)
    qq = backend.to_numpy(arrpos.apply_pope(backend.asarray(q), cos, sin))
    kk = backend.to_numpy(arrpos.apply_pope(backend.asarray(k), cos, sin, backend.asarray(phase)))
    theta = pos[:, None] * 500.0 ** (-np.arange(d) / d)
    soft = np.log1p(np.exp(q)), np.log1p(np.exp(k))
    want = np.einsum("id,jd,ijd->ij", soft[0], soft[1],
                     np.cos(theta[:, None, :] - theta[None, :, :] - phase))
    np.testing.assert_allclose(qq @ kk.T, want, rtol=1e-10, atol=1e-10)


def test_pope_errors():
    cos, sin = arrpos.pope_cos_sin(4, 6)
    with pytest.raises(ValueError, match="broadcast against x"):
        arrpos.apply_pope(np.zeros((4, 5)), cos, sin)
    with pytest.raises(TypeError, match="x"):
        arrpos.apply_pope(np.zeros((4, 6), dtype=int), cos, sin)
    with pytest.raises(ValueError, match="dim"):
        arrpos.pope_cos_sin(4, 0)
    with pytest.raises(TypeError, match="phase"):
        arrpos.apply_pope(np.zeros((4, 6)), cos, sin, np.zeros(6, dtype=bool))

"""The rotary conventions of issue 13 against the peers' own code.

* onnx: every ``test_rotary_embedding*`` node case (``onnx.backend.test``), run through onnx's
  ``ReferenceEvaluator`` and its stored expected output, and onnx's reference function on the
  same inputs in float64;
* onnxruntime: ``com.microsoft.RotaryEmbedding`` and the ai.onnx ``RotaryEmbedding`` (opset 23);
* rotary-embedding-torch 0.9 and x-transformers 2.31: xPos scale, static NTK rescaling,
  pixel frequencies;
* transformers: ``apply_rotary_pos_emb(q, k, ...)`` with grouped-query attention and DINOv3's
  rotary embedding (period schedule, axial layout);
* timm's RoPE-Mixed (``get_mixed_freqs``) and DINOv3's min/max period schedule, as float64
  formulas transcribed here (timm cannot be installed beside the CPU torch).

How each peer's call maps to arrpos is in docs/coming-from.md; each test states it too.
Tolerances: float64 against float64 within 1e-12; where the peer computes in float32, within its
float32 rounding, as stated per case.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import arrpos
from conftest import get_backend

try:
    import onnx
except ImportError:  # the onnx cases skip; the other peers still run
    onnx = None


def _widen(t, layout):
    return np.concatenate([t, t], -1) if layout == "half" else np.repeat(t, 2, -1)


# --- ONNX RotaryEmbedding (ai.onnx, opset 23) -------------------------------------------------


def onnx_rotary_via_arrpos(x, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                           rotary_embedding_dim=0, num_heads=0, backend=None):
    """ONNX ``RotaryEmbedding`` as one ``apply_rope_cached`` call.

    * 4-D input is ``(batch, heads, seq, head_size)``: ids ``(batch, seq)`` -> ``ids[:, None, :]``.
    * 3-D input ``(batch, seq, heads * head_size)`` with ``num_heads``: reshape to
      ``(batch, seq, heads, head_size)``, ids ``(batch, seq)`` -> ``ids[:, :, None]``, reshape back.
    * ``interleaved=1`` -> ``layout="interleaved"``; ``rotary_embedding_dim`` is the cache
      width times two (features past it pass through).
    * Without ``position_ids`` the caches are already gathered, ``(batch, seq, R/2)``: flatten
      them to ``(batch * seq, R/2)`` and use ids ``arange(batch * seq).reshape(batch, seq)``.
    """
    b = backend or get_backend("numpy")
    x = np.asarray(x)
    batch = x.shape[0]
    if position_ids is None:
        seq = cos_cache.shape[1]
        position_ids = np.arange(batch * seq).reshape(batch, seq)
        cos_cache = cos_cache.reshape(batch * seq, -1)
        sin_cache = sin_cache.reshape(batch * seq, -1)
    r = 2 * cos_cache.shape[-1]
    assert rotary_embedding_dim in (0, r)
    layout = "interleaved" if interleaved else "half"
    if x.ndim == 3:
        xs = x.reshape(batch, x.shape[1], num_heads, -1)
        ids = position_ids[:, :, None]
    else:
        xs, ids = x, position_ids[:, None, :]
    y = arrpos.apply_rope_cached(b.asarray(xs), b.asarray(cos_cache), b.asarray(sin_cache),
                                 b.asarray(ids), layout=layout)
    return b.to_numpy(y).reshape(x.shape)


def _node_cases():
    """onnx's RotaryEmbedding node cases. Importing the op's case module runs its exports,
    which register the cases; ``collect_testcases`` (every op's cases, ~10 s) is the fallback."""
    if onnx is None:
        return []
    import importlib

    node = importlib.import_module("onnx.backend.test.case.node")
    importlib.import_module("onnx.backend.test.case.node.rotaryembedding")
    cases = [c for c in getattr(node, "_NodeTestCases", [])
             if c.name.startswith("test_rotary_embedding")]
    if not cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = node.collect_testcases("RotaryEmbedding")
    return [c for c in cases if c.name.startswith("test_rotary_embedding")]


_NODE_CASES = _node_cases()


def _attrs(model):
    node = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    if not node:  # an *_expanded case: the attributes are those of the unexpanded twin
        return None
    return {a.name: onnx.helper.get_attribute_value(a) for a in node[0].attribute}


def test_every_onnx_node_case_is_collected():
    pytest.importorskip("onnx")
    names = {c.name for c in _NODE_CASES}
    for want in ("test_rotary_embedding", "test_rotary_embedding_3d_input",
                 "test_rotary_embedding_interleaved", "test_rotary_embedding_with_rotary_dim",
                 "test_rotary_embedding_with_interleaved_rotary_dim",
                 "test_rotary_embedding_no_position_ids",
                 "test_rotary_embedding_no_position_ids_interleaved",
                 "test_rotary_embedding_no_position_ids_rotary_dim"):
        assert want in names and want + "_expanded" in names


@pytest.mark.parametrize("case", _NODE_CASES, ids=lambda c: c.name)
def test_onnx_node_case(case):
    """Each case's stored output, the ReferenceEvaluator's output on its model, and arrpos
    agree; all three compute ``x1 c - x2 s`` in float32, so within float32 rounding (1e-6
    absolute on values of order 1)."""
    from onnx.reference import ReferenceEvaluator

    attrs = _attrs(case.model)
    if attrs is None:
        twin = [c for c in _NODE_CASES if c.name == case.name[: -len("_expanded")]][0]
        attrs = _attrs(twin.model)
    inputs, outputs = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    feeds = dict(zip(names, inputs))
    ref = ReferenceEvaluator(case.model).run(None, feeds)[0]
    np.testing.assert_allclose(ref, outputs[0], rtol=0, atol=1e-6)
    got = onnx_rotary_via_arrpos(feeds["input"], feeds["cos_cache"], feeds["sin_cache"],
                                 feeds.get("position_ids"), **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", [c for c in _NODE_CASES if not c.name.endswith("_expanded")],
                         ids=lambda c: c.name)
def test_onnx_reference_function_float64_every_backend(case, backend):
    """onnx's reference ``rotary_embedding`` on the node inputs in float64 (1e-12), and arrpos
    on every backend (float32 where JAX runs without x64)."""
    from onnx.reference.ops.op_rotary_embedding import rotary_embedding

    attrs = _attrs(case.model)
    inputs, _ = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    feeds = {k: (v.astype(np.float64) if v.dtype == np.float32 else v)
             for k, v in zip(names, inputs)}
    want = rotary_embedding(feeds["input"], feeds["cos_cache"], feeds["sin_cache"],
                            position_ids=feeds.get("position_ids"), **attrs)
    got = onnx_rotary_via_arrpos(feeds["input"], feeds["cos_cache"], feeds["sin_cache"],
                                 feeds.get("position_ids"), backend=backend, **attrs)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 if backend.float64 else 1e-6)


# --- onnxruntime: com.microsoft.RotaryEmbedding and ai.onnx RotaryEmbedding -----------------


def _ort_session(domain, input_names, attrs):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    kinds = {"position_ids": TensorProto.INT64}
    node = helper.make_node("RotaryEmbedding", input_names, ["output"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node], "rope",
        [helper.make_tensor_value_info(n, kinds.get(n, TensorProto.FLOAT), None)
         for n in input_names],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 23)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _caches(max_positions, rotary_dim, base=10000.0):
    inv, _ = arrpos.rope_frequencies(rotary_dim, base=base)
    cos, sin = arrpos.rope_cos_sin(max_positions, inv, dtype=np.float32)
    return cos[:, : rotary_dim // 2], sin[:, : rotary_dim // 2]


# (batch, seq, heads, head_size, rotary_dim, interleaved)
ORT_SHAPES = [(2, 5, 4, 16, 16, 0), (1, 7, 3, 32, 16, 1), (3, 1, 2, 8, 8, 1), (2, 4, 2, 64, 32, 0)]
# ORT's kernels are float32 (vectorised, possibly fused multiply-adds): within its rounding
ORT_ATOL = 2e-6


@pytest.mark.parametrize("shape", ORT_SHAPES)
def test_onnxruntime_microsoft_rotary(shape):
    """com.microsoft: inputs (input, position_ids, cos_cache, sin_cache); 4-D input is
    (batch, heads, seq, head_size); 3-D (batch, seq, hidden) with num_heads; position_ids
    (batch, seq), or (1,) meaning offset + arange(seq)."""
    batch, seq, heads, hs, r, inter = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((batch, heads, seq, hs)).astype(np.float32)
    cc, sc = _caches(64, r)
    ids = rng.integers(0, 64, size=(batch, seq))
    attrs = {"interleaved": inter, "num_heads": heads, "rotary_embedding_dim": r if r < hs else 0}
    names = ["input", "position_ids", "cos_cache", "sin_cache"]
    sess = _ort_session("com.microsoft", names, attrs)
    layout = "interleaved" if inter else "half"
    want = sess.run(None, {"input": x, "position_ids": ids, "cos_cache": cc, "sin_cache": sc})[0]
    got = arrpos.apply_rope_cached(x, cc, sc, ids[:, None, :], layout=layout)
    np.testing.assert_allclose(got, want, rtol=0, atol=ORT_ATOL)
    # 3-D (batch, seq, heads * head_size)
    x3 = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(batch, seq, heads * hs)
    want3 = sess.run(None, {"input": x3, "position_ids": ids, "cos_cache": cc,
                            "sin_cache": sc})[0]
    got3 = arrpos.apply_rope_cached(x3.reshape(batch, seq, heads, hs), cc, sc, ids[:, :, None],
                                    layout=layout).reshape(x3.shape)
    np.testing.assert_allclose(got3, want3, rtol=0, atol=ORT_ATOL)
    # position_ids of shape (1,): an offset, positions offset .. offset + seq - 1 for every row
    offset = 64 - seq
    want_off = sess.run(None, {"input": x, "position_ids": np.array([offset]), "cos_cache": cc,
                               "sin_cache": sc})[0]
    ids_off = np.arange(offset, offset + seq)[None, None, :]
    got_off = arrpos.apply_rope_cached(x, cc, sc, ids_off, layout=layout)
    np.testing.assert_allclose(got_off, want_off, rtol=0, atol=ORT_ATOL)


@pytest.mark.parametrize("shape", ORT_SHAPES)
def test_onnxruntime_onnx_domain_rotary(shape):
    """ai.onnx RotaryEmbedding (opset 23): inputs (input, cos_cache, sin_cache, position_ids);
    4-D input (batch, heads, seq, head_size)."""
    batch, seq, heads, hs, r, inter = shape
    rng = np.random.default_rng(sum(shape) + 1)
    x = rng.standard_normal((batch, heads, seq, hs)).astype(np.float32)
    cc, sc = _caches(64, r, base=500000.0)
    ids = rng.integers(0, 64, size=(batch, seq))
    attrs = {"interleaved": inter, "rotary_embedding_dim": r if r < hs else 0}
    sess = _ort_session("", ["input", "cos_cache", "sin_cache", "position_ids"], attrs)
    want = sess.run(None, {"input": x, "position_ids": ids, "cos_cache": cc, "sin_cache": sc})[0]
    got = arrpos.apply_rope_cached(x, cc, sc, ids[:, None, :],
                                   layout="interleaved" if inter else "half")
    np.testing.assert_allclose(got, want, rtol=0, atol=ORT_ATOL)


# --- transformers: apply_rotary_pos_emb(q, k, ...) with grouped-query attention ----------------


def test_transformers_apply_rotary_pos_emb_gqa(backend):
    """LLaMA's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` ==
    ``apply_rope_qk(q, k, cos[:, None], sin[:, None])``: the same float64 operations (1e-12)."""
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rng = np.random.default_rng(21)
    q = rng.standard_normal((2, 8, 6, 16))  # (batch, heads, seq, dim)
    k = rng.standard_normal((2, 2, 6, 16))  # (batch, kv_heads, seq, dim)
    ids = rng.integers(0, 1000, size=(2, 6))
    inv, _ = arrpos.rope_frequencies(16, base=500000.0)
    cos, sin = arrpos.rope_cos_sin(ids, inv)
    wq, wk = apply_rotary_pos_emb(*(torch.from_numpy(a) for a in (q, k, cos, sin)))
    b = backend
    qr, kr = arrpos.apply_rope_qk(b.asarray(q), b.asarray(k), b.asarray(cos[:, None]),
                                  b.asarray(sin[:, None]))
    tol = 1e-12 if b.float64 else 2e-6
    np.testing.assert_allclose(b.to_numpy(qr), wq.numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(b.to_numpy(kr), wk.numpy(), rtol=0, atol=tol)


# --- rotary-embedding-torch and x-transformers ----------------------------------------------


@pytest.fixture
def torch_float64():
    """Build the peers' modules with float64 as torch's default dtype (restored after)."""
    torch = pytest.importorskip("torch")
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield torch
    torch.set_default_dtype(old)


@pytest.mark.parametrize("dim,scale_base,n", [(16, 512, 33), (32, 64, 40), (8, 16, 7)])
def test_xpos_rotary_embedding_torch(torch_float64, backend, dim, scale_base, n):
    """rotary-embedding-torch ``get_scale(arange(n))`` centres by ``len // 2``:
    ``xpos_scale(arange(n) - n // 2, dim, scale_base=, layout="interleaved")``; float64."""
    rer = pytest.importorskip("rotary_embedding_torch")
    torch = torch_float64
    peer = rer.RotaryEmbedding(dim, use_xpos=True, xpos_scale_base=scale_base,
                               cache_if_possible=False)
    want = peer.get_scale(torch.arange(n, dtype=torch.float64)).numpy()
    got = arrpos.xpos_scale(backend.asarray(np.arange(n) - n // 2), dim,
                            scale_base=float(scale_base), layout="interleaved",
                            dtype=backend.xp.float64 if backend.float64 else backend.xp.float32)
    np.testing.assert_allclose(backend.to_numpy(got), want,
                               rtol=1e-12 if backend.float64 else 3e-7)


def test_xpos_rotate_queries_and_keys(torch_float64):
    """The whole xPos rotation of rotary-embedding-torch (``custom_freqs`` keeps its angles
    float64) against arrpos: queries ``cos * s``, keys ``cos / s``."""
    rer = pytest.importorskip("rotary_embedding_torch")
    torch = torch_float64
    dim, n = 16, 12
    inv, _ = arrpos.rope_frequencies(dim)
    peer = rer.RotaryEmbedding(dim, custom_freqs=torch.from_numpy(inv.copy()), use_xpos=True,
                               xpos_scale_base=32, cache_if_possible=False)
    rng = np.random.default_rng(22)
    q, k = rng.standard_normal((2, 3, n, dim)), rng.standard_normal((2, 3, n, dim))
    wq, wk = peer.rotate_queries_and_keys(torch.from_numpy(q), torch.from_numpy(k))
    cos, sin = arrpos.rope_cos_sin(n, inv, layout="interleaved")
    s = arrpos.xpos_scale(np.arange(n) - n // 2, dim, scale_base=32.0, layout="interleaved")
    gq = arrpos.apply_rope(q, cos * s, sin * s, layout="interleaved")
    gk = arrpos.apply_rope(k, cos / s, sin / s, layout="interleaved")
    np.testing.assert_allclose(gq, wq.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(gk, wk.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("positions", [np.arange(9), np.array([3, 7, 20, 21])])
def test_xpos_x_transformers(torch_float64, positions):
    """x-transformers ``RotaryEmbedding(use_xpos=True).forward(t)`` centres by
    ``(max(t) + 1) // 2``: ``xpos_scale(t - (t.max() + 1) // 2, layout="interleaved")``."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch = torch_float64
    peer = xt.RotaryEmbedding(32, use_xpos=True, scale_base=64)
    _, want = peer(torch.from_numpy(positions))
    centred = positions - (positions.max() + 1) // 2
    got = arrpos.xpos_scale(centred, 32, scale_base=64.0, layout="interleaved")
    np.testing.assert_allclose(got, want[0].numpy(), rtol=1e-12)


@pytest.mark.parametrize("dim,factor", [(64, 2.0), (128, 8.0), (32, 1.5)])
def test_ntk_rescale_peers(dim, factor):
    """rotary-embedding-torch ``theta_rescale_factor`` and x-transformers ``base_rescale_factor``
    build ``1 / base' ** (arange(0, dim, 2).float() / dim)`` in float32 (``.float()`` fixes the
    dtype): within 1e-6 relative of arrpos' float64 frequencies (float32 rounding of the
    exponent times ln(base') ~ 10, plus that of the power)."""
    rer = pytest.importorskip("rotary_embedding_torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    ours, _ = arrpos.rope_frequencies(dim, base=10000.0, scaling=arrpos.NTKScaling(factor))
    a = rer.RotaryEmbedding(dim, theta=10000, theta_rescale_factor=factor).freqs.detach()
    b = xt.RotaryEmbedding(dim, base=10000, base_rescale_factor=factor).inv_freq
    for peer in (a, b):
        assert peer.dtype.is_floating_point and peer.element_size() == 4
        np.testing.assert_allclose(ours, peer.double().numpy(), rtol=1e-6)
    # the same without rescaling differs by much more than that: the test can fail
    plain, _ = arrpos.rope_frequencies(dim, base=10000.0)
    assert np.max(np.abs(plain / a.double().numpy() - 1)) > 1e-2


@pytest.mark.parametrize("dim,max_freq", [(16, 10.0), (64, 256.0), (4, 7.0)])  # dim 2: the peer divides by dim - 2
def test_pixel_rotary_embedding_torch(torch_float64, backend, dim, max_freq):
    """``RotaryEmbedding(dim, freqs_for="pixel", max_freq=)``: ``torch.linspace`` in the default
    dtype (float64 here) times pi; within 1e-12."""
    rer = pytest.importorskip("rotary_embedding_torch")
    peer = rer.RotaryEmbedding(dim, freqs_for="pixel", max_freq=max_freq).freqs.detach()
    assert peer.dtype == torch_float64.float64
    dt = backend.xp.float64 if backend.float64 else backend.xp.float32
    got = arrpos.pixel_frequencies(dim, max_freq=max_freq, xp=backend.module, dtype=dt)
    np.testing.assert_allclose(backend.to_numpy(got), peer.numpy(),
                               rtol=1e-12 if backend.float64 else 1e-7)


def test_pixel_axial_tables_rotary_embedding_torch(torch_float64):
    """``get_axial_freqs(h, w)`` (pixel: coordinates linspace(-1, 1)) == ``rope_cos_sin`` of the
    (y, x) grid with each axis' frequencies: ``axes = (0,)*F + (1,)*F``, interleaved."""
    rer = pytest.importorskip("rotary_embedding_torch")
    torch = torch_float64
    dim, h, w = 8, 5, 3
    peer = rer.RotaryEmbedding(dim, freqs_for="pixel", max_freq=10.0)
    angles = peer.get_axial_freqs(h, w).numpy()  # (h, w, 2 * dim), interleaved, y then x
    f = arrpos.pixel_frequencies(dim, max_freq=10.0)
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    coords = np.stack([yy, xx], -1)
    cos, sin = arrpos.rope_cos_sin(coords, np.concatenate([f, f]), layout="interleaved",
                                   axes=(0,) * (dim // 2) + (1,) * (dim // 2))
    np.testing.assert_allclose(cos, np.cos(angles), rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin, np.sin(angles), rtol=0, atol=1e-12)
    del torch


# --- DINOv3 periods and timm RoPE-Mixed -------------------------------------------------------


@pytest.mark.parametrize("head_dim,lo,hi", [(64, 0.5, 200.0), (128, 1.0, 1e4), (8, 2.0, 3.0)])
def test_period_frequencies_dinov3_formula(backend, head_dim, lo, hi):
    """DINOv3 / timm ``RotaryEmbeddingDinoV3`` with min/max periods, in float64:
    ``periods = min_period * (max_period / min_period) ** linspace(0, 1, head_dim // 4)``,
    angle ``2 pi * coord / period`` == ``period_frequencies(head_dim // 2, ...)``."""
    periods = lo * (hi / lo) ** np.linspace(0.0, 1.0, head_dim // 4)
    dt = backend.xp.float64 if backend.float64 else backend.xp.float32
    got = arrpos.period_frequencies(head_dim // 2, min_period=lo, max_period=hi,
                                    xp=backend.module, dtype=dt)
    np.testing.assert_allclose(backend.to_numpy(got), 2 * np.pi / periods,
                               rtol=1e-12 if backend.float64 else 1e-7)


def test_dinov3_transformers_rope():
    """transformers' DINOv3 rotary tables (base schedule, float32, centred grid, half layout,
    (y, x) axes) == rope_cos_sin with period_frequencies(head_dim // 2, min_period=1,
    max_period=base ** ((n - 1) / n)) and axes (0,)*n + (1,)*n twice; float32 rounding of
    transformers' angles (up to 2 pi): 2e-6."""
    torch = pytest.importorskip("torch")
    from transformers import DINOv3ViTConfig
    from transformers.models.dinov3_vit.modeling_dinov3_vit import (
        DINOv3ViTRopePositionEmbedding,
    )

    cfg = DINOv3ViTConfig(hidden_size=96, num_attention_heads=3, patch_size=4, image_size=24,
                          rope_theta=100.0)
    peer = DINOv3ViTRopePositionEmbedding(cfg).eval()
    h, w = 5, 7
    with torch.no_grad():
        wc, ws = peer(torch.zeros(1, 3, 4 * h, 4 * w))
    head_dim = 32
    n = head_dim // 4
    f = arrpos.period_frequencies(head_dim // 2, min_period=1.0, max_period=100.0 ** ((n - 1) / n))
    cy, cx = (2 * (np.arange(h) + 0.5) / h - 1), (2 * (np.arange(w) + 0.5) / w - 1)
    coords = np.stack(np.meshgrid(cy, cx, indexing="ij"), -1).reshape(h * w, 2)
    cos, sin = arrpos.rope_cos_sin(coords, np.concatenate([f, f]), layout="half",
                                   axes=(0,) * n + (1,) * n)
    np.testing.assert_allclose(cos, wc.numpy(), rtol=0, atol=2e-6)
    np.testing.assert_allclose(sin, ws.numpy(), rtol=0, atol=2e-6)


def timm_init_random_2d_freqs(head_dim, num_heads, temperature, angles):
    """timm ``init_random_2d_freqs`` (one block) in float64 with given rotation angles:
    (2, num_heads, head_dim // 2)."""
    mag = 1.0 / temperature ** (np.arange(0, head_dim, 4) / head_dim)
    a = np.asarray(angles)[:, None]
    fx = np.concatenate([mag * np.cos(a), mag * np.cos(a + np.pi / 2)], -1)
    fy = np.concatenate([mag * np.sin(a), mag * np.sin(a + np.pi / 2)], -1)
    return np.stack([fx, fy])


def timm_get_mixed_freqs(freqs, t_x, t_y):
    """timm ``get_mixed_freqs`` in float64: (heads, N, head_dim) = [sin | cos], each interleaved."""
    combined = t_x[:, None] * freqs[0][:, None, :] + t_y[:, None] * freqs[1][:, None, :]
    sin = np.repeat(np.sin(combined), 2, -1)
    cos = np.repeat(np.cos(combined), 2, -1)
    return np.concatenate([sin, cos], -1)


def test_rope_mixed_timm_formula(backend):
    """timm ``RotaryEmbeddingMixed``: per head, ``rope_cos_sin(stack([t_x, t_y], -1),
    freqs[:, head], layout="interleaved")``; timm's grid (``get_mixed_grid``, 'xy' indexing)
    has ``t_x`` the column index and ``t_y`` the row index; float64 within 1e-12."""
    head_dim, heads, h, w = 16, 3, 6, 5
    freqs = timm_init_random_2d_freqs(head_dim, heads, 10.0, [0.3, 2.0, 5.1])
    t_x, t_y = (a.reshape(-1).astype(np.float64)
                for a in np.meshgrid(np.arange(h), np.arange(w), indexing="xy"))
    want = timm_get_mixed_freqs(freqs, t_x, t_y)
    coords = backend.asarray(np.stack([t_x, t_y], -1))
    for head in range(heads):
        inv = backend.asarray(freqs[:, head, :])
        cos, sin = arrpos.rope_cos_sin(coords, inv, layout="interleaved")
        tol = 1e-12 if backend.float64 else 1e-6
        np.testing.assert_allclose(backend.to_numpy(sin), want[head, :, : head_dim], atol=tol)
        np.testing.assert_allclose(backend.to_numpy(cos), want[head, :, head_dim:], atol=tol)


def test_mixed_reduces_to_axial_when_not_rotated():
    """With rotation angle 0, timm's mixed frequencies are axial: x turns the first half of the
    frequencies, y the second (fy = mag * sin(pi/2) for the second half)."""
    head_dim = 8
    freqs = timm_init_random_2d_freqs(head_dim, 1, 10.0, [0.0])[:, 0, :]
    coords = np.array([[2.0, 3.0], [5.0, 1.0]])
    mixed = arrpos.rope_cos_sin(coords, freqs, layout="interleaved")
    mag = 1.0 / 10.0 ** (np.arange(0, head_dim, 4) / head_dim)
    axial = arrpos.rope_cos_sin(coords, np.concatenate([mag, mag]), layout="interleaved",
                                axes=(0,) * 2 + (1,) * 2)
    for m, a in zip(mixed, axial):
        np.testing.assert_allclose(m, a, atol=1e-15)
    assert math.isclose(float(freqs[1, 0]), 0.0, abs_tol=0.0)


# --- the mapping document's examples run as written ------------------------------------------


def _mapping_blocks():
    """Python blocks of the rotary mapping: docs/coming-from.md, or its section of
    docs/coming-from.md (between the rope:begin / rope:end markers) once merged there."""
    import pathlib
    import re

    docs = pathlib.Path(__file__).resolve().parent.parent / "docs"
    for name in ("coming-from-rope.md", "coming-from.md"):
        path = docs / name
        if path.exists() and "<!-- rope:begin -->" in path.read_text():
            text = path.read_text().split("<!-- rope:begin -->", 1)[1]
            text = text.split("<!-- rope:end -->", 1)[0]
            return re.findall(r"```python\n(.*?)```", text, flags=re.S)
    raise AssertionError("the rotary mapping (rope:begin ... rope:end) is in no docs file")


def test_mapping_examples_run():
    blocks = _mapping_blocks()
    assert len(blocks) >= 2
    for i, code in enumerate(blocks):
        if "freqs[:, block, head]" in code:  # a fragment naming timm's module: shown, not run
            continue
        exec(compile(code, f"coming-from rope block {i}", "exec"), {})

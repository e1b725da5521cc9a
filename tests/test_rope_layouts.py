"""RoPE layouts and selections (issue 29, item 4), each against the peer's own code:

- ``layout="blocks"``: each axis rotating half-wise inside its own block of the head
  (transformers 5.24 ``models/gemma4/modeling_gemma4.py``: ``Gemma4VisionRotaryEmbedding`` and
  ``apply_multidimensional_rope``), through ``RoPE.from_hf_config`` of a ``gemma4_vision``
  config; ChatGLM-6B's 2-D rotary restated in float64;
- ``rotary_part="last"``: the last R features of each head (transformers 5.24
  ``models/deepseek_v4/modeling_deepseek_v4.py``: ``DeepseekV4RotaryEmbedding`` and
  ``apply_rotary_pos_emb``, which rotates ``x[..., -rope_dim:]``);
- ``rotate_num_heads``: only the last heads (x-transformers ``Attention(rotate_num_heads=...)``,
  its q and k captured as they enter its attend).
"""
from __future__ import annotations

import copy
import json
import os
import pickle

import numpy as np
import pytest

import arrpos

torch = pytest.importorskip("torch")

DATA = os.path.join(os.path.dirname(__file__), "data", "hf_configs")


# --- blocks: Gemma 4 vision -------------------------------------------------------------------


def _gemma4():
    from transformers.models.gemma4 import configuration_gemma4, modeling_gemma4
    return configuration_gemma4, modeling_gemma4


@pytest.mark.parametrize("kwargs", [{}, {"head_dim": 32, "rope_parameters": {
    "rope_type": "axial", "rope_theta": 1000.0}}])
def test_gemma4_vision_from_hf_config_equals_transformers(kwargs):
    conf, mod = _gemma4()
    cfg = conf.Gemma4VisionConfig(**kwargs)
    rope = arrpos.RoPE.from_hf_config(cfg.to_dict())
    assert rope.layout == "blocks" and rope.rotary_dim == cfg.head_dim
    emb = mod.Gemma4VisionRotaryEmbedding(cfg)
    rng = np.random.default_rng(0)
    # (batch, patches, 2) = (h, w); padding patches at -1 as the model passes them
    pos = rng.integers(0, 64, size=(2, 9, 2))
    pos[1, -3:] = -1
    q = torch.rand(2, 9, cfg.num_attention_heads, cfg.head_dim, dtype=torch.float64) * 2 - 1
    ids = torch.as_tensor(pos)
    with torch.no_grad():
        cos, sin = emb(q.float(), ids)
        want = mod.apply_multidimensional_rope(q, cos.double(), sin.double(), ids)
    c, s = rope.cos_sin(pos, dtype=np.float64)
    # transformers forms float32 angles: ~|p| * 2**-24 rad
    np.testing.assert_allclose(c, cos.double().numpy(), atol=2e-6, rtol=0)
    np.testing.assert_allclose(s, sin.double().numpy(), atol=2e-6, rtol=0)
    got = rope.apply(q.numpy(), pos, heads_axis=-2)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=0)
    # (batch, heads, patches, D) names its heads axis likewise
    got = rope.apply(np.moveaxis(q.numpy(), 2, 1), pos, heads_axis=-3)
    np.testing.assert_allclose(np.moveaxis(got, 1, 2), want.numpy(), atol=1e-5, rtol=0)
    # the exact tables rotate like transformers' apply on them (no float32 angle then)
    exact = mod.apply_multidimensional_rope(q, torch.as_tensor(c), torch.as_tensor(s), ids)
    np.testing.assert_allclose(rope.apply(q.numpy(), pos, heads_axis=-2), exact.numpy(),
                               atol=1e-13, rtol=0)


def test_gemma4_composite_config_gives_its_vision_rope():
    conf, _ = _gemma4()
    vision = conf.Gemma4VisionConfig(head_dim=48)
    whole = conf.Gemma4Config(vision_config=vision.to_dict()).to_dict()
    rope = arrpos.RoPE.from_hf_config(whole, subconfig="vision_config")
    assert rope == arrpos.RoPE.from_hf_config(vision.to_dict())
    assert rope.layout == "blocks" and rope.axes == (0,) * 12 + (1,) * 12


def test_gemma4_vision_is_not_the_half_layout():
    """The blocks layout differs from rotate_half over the whole head (the test can fail)."""
    conf, _ = _gemma4()
    rope = arrpos.RoPE.from_hf_config(conf.Gemma4VisionConfig().to_dict())
    half = arrpos.RoPE(rope.head_dim, base=rope.base, scaling=rope.scaling, axes=rope.axes)
    pos = np.array([[3, 7], [11, 2]])
    q = np.random.default_rng(1).normal(size=(2, 4, rope.head_dim))
    assert np.abs(rope.apply(q, pos, heads_axis=-2) - half.apply(q, pos, heads_axis=-2)).max() > .1


def test_blocks_inverse_out_and_torch():
    rope = arrpos.RoPE(16, base=100.0, scaling=arrpos.AxialScaling(2), layout="blocks",
                       axes=(0,) * 4 + (1,) * 4)
    pos = np.array([[1, 2], [5, 9], [0, 3]])
    x = np.random.default_rng(2).normal(size=(3, 2, 16))
    y = rope.apply(x, pos, heads_axis=-2)
    np.testing.assert_allclose(rope.apply(y, pos, heads_axis=-2, inverse=True), x, atol=1e-13)
    out = x.copy()
    assert rope.apply(out, pos, heads_axis=-2, out=out) is out
    np.testing.assert_array_equal(out, y)
    yt = rope.apply(torch.as_tensor(x), torch.as_tensor(pos), heads_axis=-2)
    np.testing.assert_allclose(yt.numpy(), y, atol=1e-13)
    # block k's table is cat(f_k, f_k) of its own frequencies, at its own coordinate
    c, _ = rope.cos_sin(pos, dtype=np.float64)
    inv, _ = rope.frequencies()
    np.testing.assert_allclose(c[..., :8], np.cos(pos[:, :1] * np.tile(inv[:4], 2)), atol=1e-15)
    np.testing.assert_allclose(c[..., 8:], np.cos(pos[:, 1:] * np.tile(inv[4:], 2)), atol=1e-15)


def _chatglm6b_2d(q, position_ids, block_position_ids, base=10000.0):
    """ChatGLM-6B's 2-D rotary restated in float64 (THUDM chatglm-6b ``modeling_chatglm.py``,
    as copied in samson-wang/chatglm-6b-huggingface@867860a6: ``RotaryEmbedding`` of width
    ``head_dim // 2``, ``apply_rotary_pos_emb_index`` with ``rotate_half``, and
    ``SelfAttention.forward``'s ``position_encoding_2d`` branch: ``q.chunk(2)``, the first half
    at the position ids, the second at the block position ids). Its ``inv_freq.half()`` (float16
    frequencies) is left out: the layout is what is compared."""
    dim = q.shape[-1] // 2
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)

    def rotate(x, pos):
        emb = np.concatenate([pos[..., None] * inv] * 2, -1)[..., None, :]  # heads axis
        x1, x2 = x[..., :dim // 2], x[..., dim // 2:]
        return x * np.cos(emb) + np.concatenate([-x2, x1], -1) * np.sin(emb)

    return np.concatenate([rotate(q[..., :dim], position_ids),
                           rotate(q[..., dim:], block_position_ids)], -1)


def test_blocks_layout_is_chatglm6b_2d():
    head = 32
    rope = arrpos.RoPE(head, scaling=arrpos.AxialScaling(2), layout="blocks",
                       axes=(0,) * (head // 4) + (1,) * (head // 4))
    rng = np.random.default_rng(6)
    pos = np.stack([rng.integers(0, 500, size=(2, 9)), rng.integers(0, 9, size=(2, 9))], -1)
    q = rng.normal(size=(2, 9, 3, head))  # (batch, seq, heads, dim)
    want = _chatglm6b_2d(q, pos[..., 0], pos[..., 1])
    np.testing.assert_allclose(rope.apply(q, pos, heads_axis=-2), want, atol=1e-12)


def test_blocks_errors():
    with pytest.raises(ValueError, match="layout='blocks' needs axes"):
        arrpos.RoPE(16, layout="blocks")
    with pytest.raises(ValueError, match="runs of equal length"):
        arrpos.RoPE(16, layout="blocks", axes=(0, 0, 0, 1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="layout must be one of"):
        arrpos.RoPE(16, layout="block")


# --- the last R features: DeepSeek-V4 ---------------------------------------------------------


@pytest.mark.parametrize("layer_type", ["main", "compress"])
def test_deepseek_v4_rotates_the_last_features(layer_type):
    from transformers import AutoConfig
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mod
    with open(os.path.join(DATA, "nvidia__DeepSeek-V4-Flash-NVFP4.json")) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    rope = arrpos.RoPE.from_hf_config(raw, layer_type=layer_type)
    assert (rope.head_dim, rope.rotary_dim, rope.rotary_part) == (512, 64, "last")
    cfg = AutoConfig.for_model("deepseek_v4", **{k: v for k, v in raw.items()
                                                 if k != "model_type"})
    emb = mod.DeepseekV4RotaryEmbedding(cfg)
    pos = np.array([[0, 1, 5, 700, 70000, 3]])  # past the YaRN original length too
    q = torch.rand(1, 2, pos.shape[1], 512, dtype=torch.float64) * 2 - 1  # (batch, heads, seq, D)
    with torch.no_grad():
        cos, sin = emb(q.float(), torch.as_tensor(pos), layer_type=layer_type)
    c, s = rope.cos_sin(pos, dtype=np.float64)
    # transformers holds one entry per interleaved pair; its float32 angles at p = 70000
    np.testing.assert_allclose(c[..., 0::2], cos.double().numpy(), atol=70000 * 2**-23, rtol=0)
    with torch.no_grad():
        exact = mod.apply_rotary_pos_emb(q, torch.as_tensor(c[..., 0::2]),
                                         torch.as_tensor(s[..., 0::2]))
    got = rope.apply(q.numpy(), pos, heads_axis=-3)
    np.testing.assert_allclose(got, exact.numpy(), atol=1e-6, rtol=0)  # it rotates in float32
    assert np.array_equal(got[..., :448], q.numpy()[..., :448])  # the nope part passes through
    first = arrpos.RoPE(512, base=rope.base, scaling=rope.scaling, layout=rope.layout,
                        partial_rotary_factor=rope.partial_rotary_factor)
    assert np.abs(first.apply(q.numpy(), pos, heads_axis=-3) - exact.numpy()).max() > 0.1


def test_rotary_part_last_paths_agree():
    rope = arrpos.RoPE(24, partial_rotary_factor=1 / 3, rotary_part="last")
    plain = arrpos.RoPE(8)
    x = np.random.default_rng(3).normal(size=(2, 5, 3, 24)).astype(np.float32)
    pos = np.arange(5)
    y = rope.apply(x, pos, heads_axis=-2)
    np.testing.assert_array_equal(y[..., :16], x[..., :16])
    np.testing.assert_array_equal(y[..., 16:], plain.apply(x[..., 16:], pos, heads_axis=-2))
    np.testing.assert_allclose(rope.apply(y, pos, heads_axis=-2, inverse=True), x, atol=1e-6)
    t = rope.apply(torch.as_tensor(x), torch.as_tensor(pos), heads_axis=-2)
    np.testing.assert_array_equal(t.numpy(), y)


# --- some heads: x-transformers rotate_num_heads ----------------------------------------------


@pytest.mark.parametrize("rotate_num_heads", [1, 3, 4])
def test_rotate_num_heads_equals_x_transformers(rotate_num_heads):
    from x_transformers.x_transformers import Attention, RotaryEmbedding
    torch.manual_seed(rotate_num_heads)
    attn = Attention(64, heads=4, dim_head=16, rotate_num_heads=rotate_num_heads).eval()
    seen = {}
    attn.to_q.register_forward_hook(lambda m, i, o: seen.__setitem__("q", o))
    attn.to_k.register_forward_hook(lambda m, i, o: seen.__setitem__("k", o))
    attn.attend.register_forward_pre_hook(lambda m, a: seen.__setitem__("rotated", a[:2]))
    n = 7
    with torch.no_grad():
        attn(torch.randn(2, n, 64), rotary_pos_emb=RotaryEmbedding(8)(torch.arange(n)))
    # x-transformers 2.31 pairs (x_2i, x_2i+1) and rotates the first rotary_emb_dim features
    rope = arrpos.RoPE(16, partial_rotary_factor=0.5, layout="interleaved",
                       rotate_num_heads=rotate_num_heads)
    for name, rotated in zip("qk", seen["rotated"]):
        x = seen[name].reshape(2, n, 4, 16).double().numpy()  # (batch, seq, heads, dim)
        got = rope.apply(x, np.arange(n), heads_axis=-2)
        want = rotated.transpose(1, 2).double().numpy()
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)  # its float32 tables
        assert np.array_equal(got[:, :, :4 - rotate_num_heads], x[:, :, :4 - rotate_num_heads])
        got = rope.apply(np.moveaxis(x, 2, 1), np.arange(n), heads_axis=1)
        np.testing.assert_allclose(np.moveaxis(got, 1, 2), want, atol=1e-6, rtol=0)


def test_rotate_num_heads_errors():
    rope = arrpos.RoPE(8, rotate_num_heads=3)
    x = np.zeros((4, 2, 8))
    with pytest.raises(ValueError, match="rotate_num_heads = 3 exceeds the 2 heads"):
        rope.apply(x, np.arange(4), heads_axis=-2)
    with pytest.raises(ValueError, match="heads_axis is None"):
        rope.apply(x, np.arange(4)[:, None], heads_axis=None)
    with pytest.raises(ValueError, match="rotate_num_heads"):
        arrpos.RoPE(8, rotate_num_heads=0)
    with pytest.raises(TypeError, match="rotate_num_heads"):
        arrpos.RoPE(8, rotate_num_heads=1.5)
    with pytest.raises(ValueError, match="rotary_part must be one of"):
        arrpos.RoPE(8, rotary_part="end")


def test_selected_ropes_compare_pickle_and_copy():
    a = arrpos.RoPE(32, partial_rotary_factor=0.5, rotary_part="last", rotate_num_heads=2)
    assert a != arrpos.RoPE(32, partial_rotary_factor=0.5, rotate_num_heads=2)
    assert a != arrpos.RoPE(32, partial_rotary_factor=0.5, rotary_part="last")
    assert "rotary_part='last'" in repr(a) and "rotate_num_heads=2" in repr(a)
    x = np.random.default_rng(5).normal(size=(3, 4, 32))
    for b in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a)):
        assert b == a and hash(b) == hash(a)
        np.testing.assert_array_equal(b.apply(x, np.arange(3), heads_axis=-2),
                                      a.apply(x, np.arange(3), heads_axis=-2))


@pytest.mark.parametrize("lib", ["array_api_strict", "jax.numpy", "dask.array", "torch"])
def test_selections_on_every_backend(lib):
    """The selected paths (slices, concatenation, the blocks' column gather) are Array API code:
    the same numbers on every namespace as on NumPy."""
    mod = pytest.importorskip(lib)
    conv = {"dask.array": getattr(mod, "from_array", None), "torch": getattr(mod, "as_tensor", None)
            }.get(lib, getattr(mod, "asarray", None))
    x = np.random.default_rng(7).normal(size=(3, 4, 3, 16)).astype(np.float32)
    blocks = arrpos.RoPE(16, base=100.0, scaling=arrpos.AxialScaling(2), layout="blocks",
                         axes=(0,) * 4 + (1,) * 4)
    some = arrpos.RoPE(16, partial_rotary_factor=0.5, rotary_part="last", rotate_num_heads=2)
    coords = np.stack(np.meshgrid(np.arange(3), np.arange(4), indexing="ij"), -1)
    for rope, pos in ((blocks, coords), (some, np.arange(4))):
        want = rope.apply(x, pos, heads_axis=-2)
        got = rope.apply(conv(x), conv(pos), heads_axis=-2)
        got = np.asarray(got.compute() if hasattr(got, "compute") else got)
        np.testing.assert_allclose(got, want, atol=1e-6)

"""RoPE against transformers 5 itself: ``ROPE_INIT_FUNCTIONS``, LLaMA's ``apply_rotary_pos_emb``
(incl. partial rotary as Phi / GPT-NeoX do it), GPT-J's ``rotate_every_two`` and the Qwen2-VL /
Qwen3-VL multimodal rotary embeddings.

transformers computes in float32. To compare to float64 rounding its own code is run with
``torch.float``/``torch.float32`` and ``Tensor.float()`` meaning float64 (``float64_torch``):
the formulas are transformers', only the precision changes. Unpatched float32 runs are
compared too, at float32 tolerance.
"""
from __future__ import annotations

import contextlib
import importlib
import logging

import numpy as np
import pytest

import arrpos

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
logging.getLogger("transformers").setLevel(logging.ERROR)

from transformers import LlamaConfig  # noqa: E402
from transformers import modeling_rope_utils as mru  # noqa: E402
from transformers.models.gptj import modeling_gptj  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402


class _Torch64:
    """``torch`` as seen by a transformers module, with its float32 names meaning float64."""

    def __getattr__(self, name):
        if name in ("float", "float32"):
            return torch.float64
        return getattr(torch, name)


@contextlib.contextmanager
def float64_torch(*modules):
    with pytest.MonkeyPatch.context() as mp:
        proxy = _Torch64()
        for mod in modules:
            mp.setattr(mod, "torch", proxy)
        mp.setattr(torch.Tensor, "float", lambda self, *a, **k: self.double())
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(old)


def _llama_config(rope_parameters, head_dim=64, max_pos=8192, **extra):
    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                       num_key_value_heads=4, max_position_embeddings=max_pos,
                       rope_parameters=dict(rope_parameters), **extra)


SHORT = [1.0 + 0.03 * i for i in range(32)]
LONG = [1.5 + 0.7 * i for i in range(32)]

# (id, rope_parameters, extra config, seq_lens to try)
HF_CASES = [
    ("linear", {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}, {}, [None]),
    ("dynamic", {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0}, {},
     [None, 100, 8192, 8193, 30000]),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
              "rope_theta": 10000.0}, {}, [None]),
    ("yarn-deepseek", {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                       "mscale_all_dim": 0.8, "beta_fast": 24, "beta_slow": 2,
                       "original_max_position_embeddings": 4096, "rope_theta": 10000.0},
     {}, [None]),
    ("yarn-notrunc", {"rope_type": "yarn", "factor": 8.0, "truncate": False,
                      "attention_factor": 1.2, "original_max_position_embeddings": 1024,
                      "rope_theta": 1e6}, {}, [None]),
    ("yarn-nofactor", {"rope_type": "yarn", "factor": None,
                       "original_max_position_embeddings": 2048, "rope_theta": 10000.0},
     {}, [None]),
    ("longrope", {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                  "rope_theta": 10000.0}, {"original_max_position_embeddings": 4096},
     [None, 100, 4096, 4097, 9000]),
    ("longrope-factor", {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                         "factor": 16.0, "original_max_position_embeddings": 2048,
                         "rope_theta": 10000.0}, {}, [2048, 2049]),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                "rope_theta": 500000.0}, {"max_position_embeddings": 131072}, [None]),
    ("llama3-b", {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 2.0,
                  "high_freq_factor": 3.0, "original_max_position_embeddings": 1024,
                  "rope_theta": 10000.0}, {}, [None]),
    ("proportional", {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                      "factor": 2.0, "rope_theta": 1e6}, {}, [None]),
    ("partial-linear", {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5,
                        "rope_theta": 10000.0}, {}, [None]),
]


def _make(case):
    _, rp, extra, _ = case
    extra = dict(extra)
    max_pos = extra.pop("max_position_embeddings", 8192)
    return _llama_config(rp, max_pos=max_pos, **extra)


def _hf_frequencies(case, seq_len, float64=True):
    cfg = _make(case)
    fn = mru.ROPE_INIT_FUNCTIONS[cfg.rope_parameters["rope_type"]]
    ctx = float64_torch(mru) if float64 else contextlib.nullcontext()
    with ctx:
        inv, att = fn(cfg, "cpu", seq_len=seq_len)
    return inv.double().numpy(), float(att), cfg


@pytest.mark.parametrize("case", HF_CASES, ids=[c[0] for c in HF_CASES])
def test_frequencies_equal_transformers(case, backend):
    """From the config dict, arrpos equals transformers' init function to float64 rounding."""
    for seq_len in case[3]:
        want, want_att, cfg = _hf_frequencies(case, seq_len)
        assert want.dtype == np.float64
        rope = arrpos.RoPE.from_hf_config(cfg.to_dict())
        dtype = backend.xp.float64 if backend.float64 else backend.xp.float32
        inv, att = rope.frequencies(seq_len, backend.module, dtype=dtype)
        got = backend.to_numpy(inv)
        rtol = 4e-16 * 8 if backend.float64 else 1.2e-7
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0,
                                   err_msg=f"{case[0]} seq_len={seq_len}")
        assert att == pytest.approx(want_att, rel=1e-15, abs=0)


@pytest.mark.parametrize("case", HF_CASES, ids=[c[0] for c in HF_CASES])
def test_frequencies_equal_transformers_float32(case):
    """Unpatched transformers (float32 arithmetic) agrees to float32 rounding."""
    for seq_len in case[3]:
        want, want_att, cfg = _hf_frequencies(case, seq_len, float64=False)
        inv, att = arrpos.RoPE.from_hf_config(cfg.to_dict()).frequencies(seq_len)
        # float32 blends (llama3, yarn) lose a few more bits than one rounding
        np.testing.assert_allclose(inv, want, rtol=2e-6, atol=0)
        assert att == pytest.approx(want_att, rel=1e-7)


def test_the_float64_patch_does_change_precision():
    """Guard for the golden test: patched transformers is float64, unpatched float32."""
    case = HF_CASES[0]
    f64, _, _ = _hf_frequencies(case, None)
    f32, _, _ = _hf_frequencies(case, None, float64=False)
    assert np.abs(f64 - f32).max() > 0
    assert np.array_equal(f32.astype(np.float32).astype(np.float64), f32)


# --- application: LLaMA, partial rotary (Phi / NeoX), GPT-J, Qwen-VL -----------------------------


def _position_ids(batch, seq, offset_max=3000, seed=0):
    """Batched ids with a cache offset per row and a packed row whose positions restart."""
    rng = np.random.default_rng(seed)
    ids = np.arange(seq)[None, :] + rng.integers(0, offset_max, size=(batch, 1))
    ids[-1] = np.concatenate([np.arange(seq // 2), np.arange(seq - seq // 2)])
    return ids


@pytest.mark.parametrize("case_id", ["default", "dynamic", "yarn", "longrope", "llama3",
                                     "partial-linear"])
def test_llama_apply_rotary_pos_emb(backend, case_id):
    """q, k (batch, heads, seq, dim) through LlamaRotaryEmbedding + apply_rotary_pos_emb."""
    if case_id == "default":
        cfg = _llama_config({"rope_type": "default", "rope_theta": 10000.0})
    else:
        cfg = _make(next(c for c in HF_CASES if c[0] == case_id))
    ids = _position_ids(3, 10, offset_max=9000 if case_id in ("dynamic", "longrope") else 3000)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, 4, 10, 64))
    k = rng.standard_normal((3, 4, 10, 64))
    with float64_torch(mru, modeling_llama):
        rot = modeling_llama.LlamaRotaryEmbedding(cfg)
        qt = torch.tensor(q)
        cos, sin = rot(qt, torch.tensor(ids))
        r = cos.shape[-1]  # partial rotary: as Phi / GPT-NeoX, rotate the first r features
        qe, ke = modeling_llama.apply_rotary_pos_emb(qt[..., :r], torch.tensor(k)[..., :r],
                                                     cos, sin, unsqueeze_dim=1)
        want_q = torch.cat([qe, qt[..., r:]], dim=-1).numpy()
        want_k = torch.cat([ke, torch.tensor(k)[..., r:]], dim=-1).numpy()
    rope = arrpos.RoPE.from_hf_config(cfg.to_dict())
    assert rope.rotary_dim == r
    if not backend.float64:
        q, k = q.astype(np.float32), k.astype(np.float32)
    # transformers' dynamic/LongRoPE update reads max(position_ids) + 1; passed explicitly here
    # (lazy Dask positions cannot be read without computing them)
    n = int(ids.max()) + 1
    got_q = backend.to_numpy(rope.apply(backend.asarray(q), backend.asarray(ids), heads_axis=-3,
                                        seq_len=n))
    got_k = backend.to_numpy(rope.apply(backend.asarray(k), backend.asarray(ids), heads_axis=-3,
                                        seq_len=n))
    tol = 1e-11 if backend.float64 else 2e-5
    np.testing.assert_allclose(got_q, want_q, atol=tol, rtol=0)
    np.testing.assert_allclose(got_k, want_k, atol=tol, rtol=0)


def test_llama_float32_unpatched(numpy_backend):
    """transformers' own float32 path, short positions: agreement to float32 rounding."""
    cfg = _llama_config({"rope_type": "default", "rope_theta": 10000.0})
    ids = np.arange(12)[None, :]
    q = np.random.default_rng(2).standard_normal((1, 4, 12, 64)).astype(np.float32)
    rot = modeling_llama.LlamaRotaryEmbedding(cfg)
    qt = torch.tensor(q)
    cos, sin = rot(qt, torch.tensor(ids))
    want, _ = modeling_llama.apply_rotary_pos_emb(qt, qt, cos, sin)
    got = arrpos.RoPE.from_hf_config(cfg.to_dict()).apply(q, ids, heads_axis=-3)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_gptj_rotate_every_two_partial(backend):
    """GPT-J: interleaved pairs, rotary_dim < head_dim, x as (batch, seq, heads, dim)."""
    rotary_dim, head_dim = 16, 40
    ids = _position_ids(2, 7, offset_max=1500, seed=3)
    x = np.random.default_rng(4).standard_normal((2, 7, 3, head_dim))
    with float64_torch(modeling_gptj):
        table = modeling_gptj.create_sinusoidal_positions(2048, rotary_dim)
        sincos = table[torch.tensor(ids)]
        sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
        xt = torch.tensor(x)
        x_rot = modeling_gptj.apply_rotary_pos_emb(xt[..., :rotary_dim], sin, cos)
        want = torch.cat([x_rot, xt[..., rotary_dim:]], dim=-1).numpy()
        # rotate_every_two itself is the interleaved partner arrpos uses
        assert torch.equal(modeling_gptj.rotate_every_two(xt[..., :4]),
                           torch.stack([-xt[..., 1:4:2], xt[..., 0:4:2]], -1).flatten(-2))
    cfg = {"model_type": "gptj", "n_embd": 120, "n_head": 3, "rotary_dim": rotary_dim,
           "n_positions": 2048}
    rope = arrpos.RoPE.from_hf_config(cfg)
    assert rope.layout == "interleaved" and rope.rotary_dim == rotary_dim
    if not backend.float64:
        x = x.astype(np.float32)
    got = backend.to_numpy(rope.apply(backend.asarray(x), backend.asarray(ids), heads_axis=-2))
    np.testing.assert_allclose(got, want, atol=1e-11 if backend.float64 else 2e-5, rtol=0)
    # the same with the plain functions
    inv, _ = arrpos.rope_frequencies(rotary_dim, xp=backend.module,
                                     dtype=backend.xp.float64 if backend.float64 else None)
    c, s = arrpos.rope_cos_sin(backend.asarray(ids), inv, layout="interleaved")
    got2 = arrpos.apply_rope(backend.asarray(x), c[:, :, None, :], s[:, :, None, :],
                             layout="interleaved")
    np.testing.assert_allclose(backend.to_numpy(got2), want,
                               atol=1e-11 if backend.float64 else 2e-5, rtol=0)


def _qwen(version):
    mod = importlib.import_module(f"transformers.models.qwen{version}_vl.modeling_qwen{version}_vl")
    if version == 2:
        from transformers import Qwen2VLTextConfig as Cfg

        cfg = Cfg(hidden_size=128, num_attention_heads=4, rope_parameters={
            "rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0})
        return mod, cfg, mod.Qwen2VLRotaryEmbedding
    from transformers import Qwen3VLTextConfig as Cfg

    cfg = Cfg(hidden_size=128, num_attention_heads=4, head_dim=32, rope_parameters={
        "rope_type": "default", "mrope_section": [6, 5, 5], "rope_theta": 5e6})
    return mod, cfg, mod.Qwen3VLTextRotaryEmbedding


@pytest.mark.parametrize("version", [2, 3])
def test_qwen_vl_multimodal_rotary(backend, version):
    """Qwen2-VL (chunked t/h/w) and Qwen3-VL (interleaved) rotary tables and application."""
    mod, cfg, Rotary = _qwen(version)
    rng = np.random.default_rng(5)
    thw = rng.integers(0, 2000, size=(3, 2, 9))  # transformers' (3, batch, seq)
    thw[:, :, :3] = thw[0:1, :, :3]  # some text tokens: t = h = w
    q = rng.standard_normal((2, 4, 9, 32))
    with float64_torch(mod):
        rot = Rotary(cfg)
        qt = torch.tensor(q)
        cos, sin = rot(qt, torch.tensor(thw))
        want, _ = mod.apply_rotary_pos_emb(qt, qt, cos, sin)
    rope = arrpos.RoPE.from_hf_config(cfg.to_dict())
    assert rope.axes == arrpos.mrope_axes(cfg.rope_parameters["mrope_section"],
                                          interleaved=version == 3)
    pos = np.moveaxis(thw, 0, -1)  # arrpos: coordinates last, (batch, seq, 3)
    c, s = rope.cos_sin(backend.asarray(pos), backend.xp.float64 if backend.float64 else None)
    tol = 1e-12 if backend.float64 else 2e-7
    np.testing.assert_allclose(backend.to_numpy(c), cos.numpy(), atol=tol, rtol=0)
    np.testing.assert_allclose(backend.to_numpy(s), sin.numpy(), atol=tol, rtol=0)
    if not backend.float64:
        q = q.astype(np.float32)
    got = rope.apply(backend.asarray(q), backend.asarray(pos), heads_axis=-3)
    np.testing.assert_allclose(backend.to_numpy(got), want.numpy(),
                               atol=1e-11 if backend.float64 else 2e-5, rtol=0)

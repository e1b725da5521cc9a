"""from_hf_config's config reading without transformers: the scaling registry, the keys it
reads and its refusals (the per-model-type behaviour is checked against transformers itself
in test_hf_families.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import arrpos
from arrpos._rope import scaling as _rope_scaling

LLAMA = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
         "max_position_embeddings": 4096}


def test_every_scaling_registers_itself():
    classes = [arrpos.LinearScaling, arrpos.DynamicNTKScaling, arrpos.YarnScaling,
               arrpos.LongRopeScaling, arrpos.Llama3Scaling, arrpos.ProportionalScaling]
    for cls in classes:
        assert _rope_scaling.SCALINGS[cls.rope_type] is cls
    assert {c for c in classes if c.seq_dependent} == {arrpos.DynamicNTKScaling,
                                                       arrpos.LongRopeScaling}


def test_a_new_scaling_is_one_class():
    @dataclasses.dataclass(frozen=True)
    class HalfScaling(_rope_scaling.RopeScaling):
        rope_type = "test_half"

        def frequencies(self, dim, base, seq_len):
            return _rope_scaling.default_inv_freq(dim, base) / 2, 1.0

        @classmethod
        def from_config(cls, rope_parameters, config):
            return cls()

    try:
        rope = arrpos.RoPE.from_hf_config(dict(LLAMA, rope_parameters={"rope_type": "test_half"}))
        assert rope.scaling == HalfScaling()
        assert rope.frequencies()[0][1] == pytest.approx(0.5 * 10000.0 ** (-2 / 64), rel=1e-15)
    finally:
        del _rope_scaling.SCALINGS["test_half"]


def test_a_scaling_class_defined_elsewhere_is_accepted_and_listed():
    """A scaling is one class: defined here, outside arrpos, it is accepted wherever a scaling
    is (frequencies, RoPE, its tables and decode path), and the message of a bad ``scaling=``
    lists it with the others (the list is made from the classes, not written out)."""
    @dataclasses.dataclass(frozen=True)
    class TenthScaling(_rope_scaling.RopeScaling):
        def frequencies(self, dim, base, seq_len):
            return _rope_scaling.default_inv_freq(dim, base) / 10, 1.0

    inv, att = arrpos.rope_frequencies(8, base=100.0, scaling=TenthScaling())
    assert inv.tolist() == (arrpos.rope_frequencies(8, base=100.0)[0] / 10).tolist()
    rope = arrpos.RoPE(8, base=100.0, scaling=TenthScaling())
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 8))
    pos = np.arange(3)
    cos, sin = arrpos.rope_cos_sin(pos, inv, dtype=np.float64)
    want = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    for p in (pos.astype(np.float64), pos):  # the table path, the decode path
        np.testing.assert_allclose(rope.apply(x, p, heads_axis=-2), want, rtol=0, atol=1e-15)
    for bad in (lambda: arrpos.RoPE(8, scaling="linear"),
                lambda: arrpos.rope_frequencies(8, scaling=2.0)):
        with pytest.raises(TypeError, match="scaling must be None or one of") as info:
            bad()
        names = [*_rope_scaling.__all__, "TenthScaling"]
        assert all(n in str(info.value) for n in names), str(info.value)


def test_every_scaling_class_is_exported_and_documented():
    """The one export a new scaling adds: its name in ``_rope.scaling.__all__``, which arrpos
    exports whole; ``rope_frequencies``' docstring lists every class."""
    defined = [c for c in vars(_rope_scaling).values()
               if isinstance(c, type) and issubclass(c, _rope_scaling.RopeScaling)
               and c is not _rope_scaling.RopeScaling and c.__module__ == _rope_scaling.__name__]
    assert sorted(c.__name__ for c in defined) == sorted(_rope_scaling.__all__), (
        "a scaling class of arrpos/_rope/scaling.py is missing from its __all__")
    for cls in defined:
        assert getattr(arrpos, cls.__name__) is cls and cls.__name__ in arrpos.__all__
        assert f":class:`{cls.__name__}`" in " ".join(arrpos.rope_frequencies.__doc__.split())


def test_width_and_layout_keys():
    r = arrpos.RoPE.from_hf_config(dict(LLAMA, qk_rope_head_dim=32, head_dim=96))
    assert (r.head_dim, r.rotary_dim) == (32, 32)  # MLA: the rope slice only
    r = arrpos.RoPE.from_hf_config({"model_type": "dbrx", "d_model": 512, "n_heads": 8})
    assert r.head_dim == 64
    r = arrpos.RoPE.from_hf_config(dict(LLAMA, kv_channels=48))
    assert r.head_dim == 48
    assert arrpos.RoPE.from_hf_config(dict(LLAMA, rope_interleave=True)).layout == "interleaved"
    assert arrpos.RoPE.from_hf_config(dict(LLAMA, model_type="cohere")).layout == "interleaved"
    gemma = dict(LLAMA, head_dim=32, layer_types=["sliding_attention", "full_attention"],
                 per_layer_config={"01": {"head_dim": 64}},
                 rope_parameters={"sliding_attention": {"rope_type": "default"},
                                  "full_attention": {"rope_type": "default"}})
    assert arrpos.RoPE.from_hf_config(gemma, layer_type="full_attention").head_dim == 64
    assert arrpos.RoPE.from_hf_config(gemma, layer_type="sliding_attention").head_dim == 32


def test_mrope_defaults_by_model_type():
    cfg = dict(LLAMA, hidden_size=512, model_type="qwen2_vl_text")
    assert arrpos.RoPE.from_hf_config(cfg).axes == arrpos.mrope_axes([16, 24, 24])
    cfg = dict(LLAMA, hidden_size=512, model_type="cosmos3_edge_text")
    assert arrpos.RoPE.from_hf_config(cfg).axes == arrpos.mrope_axes([24, 20, 20],
                                                                      interleaved=True)
    ernie = arrpos.RoPE.from_hf_config(dict(cfg, model_type="ernie4_5_vl_moe_text"))
    assert ernie.axes == (1, 2) * 22 + (0,) * 20 and ernie.layout == "interleaved"


@pytest.mark.parametrize("cfg, error, words", [
    ({"model_type": "some_vision", "hidden_size": 64, "num_attention_heads": 2,
      "rope_parameters": {"rope_type": "axial"}}, ValueError, "transformers 5.24.*axial"),
    ({"model_type": "glm4_moe", "hidden_size": 84, "num_attention_heads": 2,
      "partial_rotary_factor": 0.5}, ValueError, "even"),
    ({"model_type": "mystery", "rope_theta": 1e4}, ValueError, "head_dim"),
])
def test_refusals_name_the_model_type(cfg, error, words):
    with pytest.raises(error, match=f"^{cfg['model_type']}: .*{words}"):
        arrpos.RoPE.from_hf_config(cfg)


def test_inverse_rotation():
    """RoPE(inverse=True) rotates by -theta: a float64 loop of NanoChat's flipped rotate_half
    (q * cos + cat(x2, -x1) * sin)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    x, pos = rng.standard_normal((5, 8)), np.arange(5) * 7
    want = np.empty_like(x)
    for p in range(5):
        for i in range(4):
            th = pos[p] * 100.0 ** (-2 * i / 8)
            a, b = x[p, i], x[p, i + 4]
            want[p, i] = a * np.cos(th) + b * np.sin(th)
            want[p, i + 4] = b * np.cos(th) - a * np.sin(th)
    rope = arrpos.RoPE(8, base=100.0, inverse=True)
    assert np.abs(rope.apply(x, pos, heads_axis=None) - want).max() < 1e-13
    back = rope.apply(want, pos, heads_axis=None, inverse=True)
    assert np.abs(back - x).max() < 1e-13
    assert rope != arrpos.RoPE(8, base=100.0) and "inverse=True" in repr(rope)
    nano = arrpos.RoPE.from_hf_config({"model_type": "nanochat", "hidden_size": 64,
                                       "num_attention_heads": 2})
    assert nano.inverse and nano.head_dim == 32
    with pytest.raises(TypeError, match="inverse"):
        arrpos.RoPE(8, inverse=1)


def test_axial_frequencies():
    f = [100.0 ** (-2 * i / 8) for i in range(4)]  # the 1-D frequencies of width 8
    per_axis = [1.0, 100.0 ** (-2 / 4)]            # width 8 / 2 axes
    cases = [("blocks", per_axis * 2), ("pairs", [per_axis[0]] * 2 + [per_axis[1]] * 2),
             ("strided", [f[0], f[2], f[1], f[3]])]
    for arrangement, want in cases:
        inv, att = arrpos.rope_frequencies(8, base=100.0,
                                           scaling=arrpos.AxialScaling(2, arrangement))
        assert inv.tolist() == pytest.approx(want, rel=1e-15) and att == 1.0
    with pytest.raises(ValueError, match="arrangement"):
        arrpos.AxialScaling(2, "rows")
    with pytest.raises(ValueError, match="multiple"):
        arrpos.rope_frequencies(6, scaling=arrpos.AxialScaling(2))


def test_axial_vision_config():
    qwen = {"model_type": "qwen2_vl_vision", "embed_dim": 64, "num_heads": 2,
            "hidden_size": 1536, "rope_parameters": {"rope_type": "axial", "rope_theta": 1e4}}
    rope = arrpos.RoPE.from_hf_config(qwen)
    assert rope.head_dim == 32 and rope.scaling == arrpos.AxialScaling(2)
    assert rope.axes == (0,) * 8 + (1,) * 8 and rope.layout == "half"


def test_patch_coordinate_vision_configs():
    """Llama 4 vision / DINOv3 / EfficientLoFTR: 2-D RoPEs over the model's own coordinates."""
    import math

    inv, _ = arrpos.rope_frequencies(8, base=100.0, scaling=arrpos.AxialScaling(2, turns=True))
    assert inv.tolist() == pytest.approx([2 * math.pi * f for f in (1.0, 0.1)] * 2, rel=1e-15)
    dino = arrpos.RoPE.from_hf_config({"model_type": "eomt_dinov3", "hidden_size": 64,
                                       "num_attention_heads": 2,
                                       "rope_parameters": {"rope_type": "default",
                                                           "rope_theta": 100.0}})
    assert dino.head_dim == 32 and dino.layout == "half" and dino.scaling.turns
    assert dino.axes == (0,) * 8 + (1,) * 8
    loftr = {"model_type": "efficientloftr", "hidden_size": 64, "num_attention_heads": 8,
             "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                 "partial_rotary_factor": 4.0}}
    rope = arrpos.RoPE.from_hf_config(loftr)  # the whole hidden state: 16 frequencies per axis
    assert rope.head_dim == 64 and rope.axes == (0, 1) * 16 and rope.layout == "interleaved"
    loftr["rope_parameters"]["partial_rotary_factor"] = 1.0
    with pytest.raises(ValueError, match="^efficientloftr: .*hidden_size / 4"):
        arrpos.RoPE.from_hf_config(loftr)
    with pytest.raises(TypeError, match="turns"):
        arrpos.AxialScaling(2, turns=1)

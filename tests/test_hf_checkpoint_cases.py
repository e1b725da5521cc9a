"""``from_hf_config`` on the checkpoint configs an outside check found silently wrong, layer plans
(NoPE layers) and position scales, each against transformers' own code.

Where no released ``config.json`` is in the corpus (``tests/data/hf_configs``), the case's dict
restates the rope keys of the released file as the issue reported them (HunYuan's
``{"type": "dynamic", "alpha": 1000.0, "factor": 1.0}``, Phi-3.5-MoE's ``short_mscale`` /
``long_mscale``, ...) on the model's own sizes; transformers builds its config from the same
dict, and its own rotary module and apply function are the reference (``hf_real_configs``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import arrpos  # noqa: E402
import hf_families as fam  # noqa: E402
import hf_real_configs as real  # noqa: E402

RNG = np.random.default_rng(24)

# model type -> a config.json dict with the released checkpoint's rope keys
CASES = {
    "hunyuan_dense_alpha": {
        "model_type": "hunyuan_v1_dense", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 2,
        "max_position_embeddings": 262144, "rope_theta": 10000.0,
        "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}},
    "hunyuan_moe_alpha": {
        "model_type": "hunyuan_v1_moe", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 2,
        "max_position_embeddings": 262144, "rope_theta": 10000.0, "num_experts": 4,
        "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}},
    "phimoe_mscale": {
        "model_type": "phimoe", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 2, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "short_mscale": 1.243163121016122,
                         "long_mscale": 1.243163121016122,
                         "original_max_position_embeddings": 4096,
                         "short_factor": (1.0 + RNG.random(64)).round(4).tolist(),
                         "long_factor": (1.0 + 40 * RNG.random(64)).round(4).tolist()}},
    "hy_v4_vl_text_no_sections": {
        "model_type": "hy_v4_vl_text", "hidden_size": 1024, "num_attention_heads": 8,
        "num_hidden_layers": 2, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64,
        "max_position_embeddings": 32768, "rope_theta": 10000.0},
    "nanochat": {
        "model_type": "nanochat", "hidden_size": 1280, "num_attention_heads": 10,
        "num_key_value_heads": 10, "num_hidden_layers": 2, "max_position_embeddings": 2048,
        "rope_theta": 10000.0},
    "sarvam_deepseek_yarn": {
        "model_type": "sarvam_mla", "hidden_size": 4096, "num_attention_heads": 64,
        "num_hidden_layers": 2, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "kv_lora_rank": 512, "v_head_dim": 128, "max_position_embeddings": 131072,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "deepseek_yarn", "factor": 32.0, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096}},
    "gemma3_1b_text_legacy": {
        "model_type": "gemma3_text", "hidden_size": 1152, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 26,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "rope_scaling": None, "sliding_window": 512,
        "sliding_window_pattern": 6},
    "qwen2_vl_vision_parent_type": {  # Qwen2-VL's vision_config says model_type "qwen2_vl"
        "model_type": "qwen2_vl", "depth": 2, "embed_dim": 1280, "hidden_size": 3584,
        "num_heads": 16, "in_chans": 3, "mlp_ratio": 4, "patch_size": 14,
        "spatial_merge_size": 2, "spatial_patch_size": 14, "temporal_patch_size": 2},
}


def _hf_config(d):
    if d["model_type"] == "qwen2_vl":  # the vision tower as its parent builds it
        return transformers.AutoConfig.for_model("qwen2_vl", vision_config=dict(d)).vision_config
    return real.config_from_dict(d)


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_case_through_transformers(case):
    """Reproduced at positions inside and past the trained context, as transformers' own
    rotary module and apply function compute them."""
    d = CASES[case]
    config = _hf_config(d)
    if case == "qwen2_vl_vision_parent_type":
        rope = arrpos.RoPE.from_hf_config(d)
        assert rope == arrpos.RoPE.from_hf_config(config.to_dict())  # the survey checks that one
        assert isinstance(rope.scaling, arrpos.AxialScaling) and rope.head_dim == 80
        return
    problems, summary = real.check_dict(case, d, config)
    assert not problems, "\n".join(problems) + f"\n(checked: {summary})"
    assert "refuse" not in summary and "mismatch" not in summary, summary


def test_the_cases_get_what_transformers_does():
    """The values of the issue's table, each read off the object arrpos builds."""
    hy = arrpos.RoPE.from_hf_config(CASES["hunyuan_dense_alpha"])
    assert hy.scaling == arrpos.NTKScaling(1000.0)
    inv, _ = hy.frequencies()
    assert inv[-1] == pytest.approx((10000.0 * 1000.0 ** (128 / 126)) ** (-126 / 128), rel=1e-12)
    phi = arrpos.RoPE.from_hf_config(CASES["phimoe_mscale"])
    for seq in (100, 4096, 4097, 131072):
        inv, att = phi.frequencies(seq_len=seq)
        assert att == 1.243163121016122
        short = np.array(CASES["phimoe_mscale"]["rope_scaling"]["short_factor"])
        assert np.allclose(inv, 10000.0 ** (-np.arange(0, 128, 2) / 128) / short, rtol=1e-12)
    hy4 = arrpos.RoPE.from_hf_config(CASES["hy_v4_vl_text_no_sections"])
    assert hy4.layout == "interleaved"
    assert hy4.axes == arrpos.mrope_axes([12, 10, 10], interleaved=True)
    assert arrpos.RoPE.from_hf_config(CASES["nanochat"]).inverse
    sarvam = arrpos.RoPE.from_hf_config(CASES["sarvam_deepseek_yarn"])
    assert isinstance(sarvam.scaling, arrpos.YarnScaling) and sarvam.layout == "interleaved"
    gemma = CASES["gemma3_1b_text_legacy"]
    full = arrpos.RoPE.from_hf_config(gemma, layer_type="full_attention")
    local = arrpos.RoPE.from_hf_config(gemma, layer_type="sliding_attention")
    assert (full.base, local.base, local.scaling) == (1e6, 1e4, None)
    with pytest.raises(ValueError, match="^gemma3_text: .*layer_type"):
        arrpos.RoPE.from_hf_config(gemma)


def test_deepseek_v3_defaults_and_softmax_scale():
    """DeepSeek-V3's file has no rope_interleave: its config class's default (True) applies;
    the softmax scale factor is transformers' ``yarn_apply_mscale``."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    d = real.raw("deepseek-ai__DeepSeek-V3.json")
    assert "rope_interleave" not in d
    rope = arrpos.RoPE.from_hf_config(d)
    assert rope.layout == "interleaved"
    config = real.hf_config("deepseek-ai__DeepSeek-V3.json")
    assert rope.attention_scale == pytest.approx(m.yarn_apply_mscale(config.rope_parameters, 1.0),
                                                 rel=1e-15)
    assert rope.attention_scale > 1.0 and rope.query_scale(np.arange(3)) is None


def test_clvp_rotary_width_and_values():
    """CLVP: ``ClvpRotaryPositionalEmbedding`` rotates max(projection_dim // (heads * 2), 32)
    features with base 10000, applied by the file's ``apply_rotary_pos_emb``."""
    from transformers.models.clvp import modeling_clvp as m

    d = {"model_type": "clvp", "text_config": {"model_type": "clvp_encoder", "hidden_size": 768,
                                               "num_attention_heads": 12, "projection_dim": 768}}
    config = transformers.AutoConfig.for_model("clvp", text_config=d["text_config"]).text_config
    for cfg in (d, d["text_config"]):
        rope = arrpos.RoPE.from_hf_config(cfg)
        assert (rope.head_dim, rope.rotary_dim) == (64, 32)
    emb = m.ClvpRotaryPositionalEmbedding(config)
    n = 50
    with torch.no_grad():
        table = emb(torch.zeros(1, n, config.hidden_size)).squeeze(0)
        cos, sin = table.cos(), table.sin()
        ids = torch.arange(n)[None]
        q = torch.rand(1, 2, n, 32, generator=torch.Generator().manual_seed(1)) * 2 - 1
        want = m.apply_rotary_pos_emb(q, q, q, cos, sin, ids)[0]
    full = np.concatenate([q.double().numpy(), np.zeros((1, 2, n, 32))], axis=-1)
    got = rope.apply(full, np.arange(n), heads_axis=-3)[..., :32]
    assert np.abs(got - want.double().numpy()).max() < 2e-5


def test_vision_subconfig():
    """A raw vision_config without model_type is refused with the way out; ``subconfig=``
    reads it as transformers does (its sub-config class)."""
    d = real.raw("Qwen__Qwen2.5-VL-7B-Instruct.json")
    with pytest.raises(ValueError, match="^config without model_type: .*subconfig='vision_config'"):
        arrpos.RoPE.from_hf_config(d["vision_config"])
    config = real.hf_config("Qwen__Qwen2.5-VL-7B-Instruct.json")
    rope = arrpos.RoPE.from_hf_config(d, subconfig="vision_config")
    assert rope == arrpos.RoPE.from_hf_config(config.vision_config.to_dict())
    assert isinstance(rope.scaling, arrpos.AxialScaling)
    with pytest.raises(ValueError, match="no 'audio_config' dict"):
        arrpos.RoPE.from_hf_config(d, subconfig="audio_config")


@pytest.mark.parametrize("cfg", [
    {"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12},
    {"model_type": "gpt2", "n_embd": 768, "n_head": 12},
    {"model_type": "bloom", "hidden_size": 1024, "n_head": 16},
    {"model_type": "t5", "d_model": 512, "num_heads": 8},
])
def test_models_without_rotary_are_refused(cfg):
    with pytest.raises(ValueError, match=f"^{cfg['model_type']}: {cfg['model_type']} does not "
                                         "use rotary embeddings"):
        arrpos.RoPE.from_hf_config(cfg)


def test_unknown_model_types():
    """Unknown and plain: built with a warning naming the assumption; anything else refused
    with the verified release and the explicit way."""
    plain = {"model_type": "brand_new_lm", "hidden_size": 256, "num_attention_heads": 4,
             "rope_theta": 5e5}
    with pytest.warns(UserWarning, match="transformers 5.24.*no model type 'brand_new_lm'.*half"):
        rope = arrpos.RoPE.from_hf_config(plain)
    assert rope == arrpos.RoPE(64, base=5e5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known type warns nothing
        arrpos.RoPE.from_hf_config(dict(plain, model_type="llama"))
    odd = dict(plain, rope_parameters={"rope_type": "default", "mrope_section": [8, 12, 12]})
    with pytest.raises(ValueError, match="^brand_new_lm: .*transformers 5.24.*mrope_section.*"
                                         "RoPE\\(head_dim"):
        arrpos.RoPE.from_hf_config(odd)
    with pytest.raises(ValueError, match="^brand_new_lm: .*not a plain 1-D rope"):
        arrpos.RoPE.from_hf_config(dict(plain, rope_parameters={"rope_type": "fancy"}))
    # rope per layer type with a NoPE layer: refused by the same rule, its message naming
    # the layers' types (not a TypeError from sorting None with them)
    per_layer = dict(plain, layer_types=["full_attention", "nope"], rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e4}, "nope": None})
    with pytest.raises(ValueError, match="^brand_new_lm: .*not a plain 1-D rope "
                                         "\\(\\['None', 'default'\\]\\)"):
        arrpos.RoPE.from_hf_config(per_layer)


@pytest.mark.parametrize("bad, words", [
    ({"rope_scaling": [1, 2]}, "rope_scaling.*must be a dict"),
    ({"rope_scaling": {"type": "linear"}}, "factor"),
    ({"num_attention_heads": 0}, "malformed|num_attention_heads"),
    ({"rope_scaling": {"type": "yarn", "factor": "x", "original_max_position_embeddings": 4}},
     "factor"),
    ({"model_type": 7}, "model_type"),
])
def test_malformed_configs_name_the_model_type_and_key(bad, words):
    cfg = dict({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}, **bad)
    with pytest.raises(ValueError, match=words):
        arrpos.RoPE.from_hf_config(cfg)


# --- layer plans -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["meta-llama__Llama-4-Scout-17B-16E-Instruct.json",
                                  "meta-llama__Llama-4-Maverick-17B-128E-Instruct.json",
                                  "HuggingFaceTB__SmolLM3-3B.json"])
def test_nope_layers_as_transformers_builds_them(name):
    """``None`` exactly where transformers' attention sets ``use_rope = no_rope_layers[i]`` to 0
    (the config transformers loads from the file is the reference)."""
    d = real.raw(name)
    config = real.hf_config(name)
    text = getattr(config, "text_config", config)
    layers = arrpos.hf_layer_ropes(d)
    assert len(layers) == text.num_hidden_layers
    assert [r is None for r in layers] == [not f for f in text.no_rope_layers]
    ropes = [r for r in layers if r is not None]
    assert ropes and all(r is ropes[0] for r in ropes)  # one object per layer type
    assert ropes[0] == arrpos.RoPE.from_hf_config(d)


def test_per_layer_type_plan():
    """Gemma 3: layers take their layer type's RoPE, in transformers' layer_types order."""
    name = "google__gemma-3-27b-it.json"
    d, config = real.raw(name), real.hf_config(name)
    layers = arrpos.hf_layer_ropes(d)
    types = config.text_config.layer_types
    assert len(layers) == len(types)
    for rope, lt in zip(layers, types):
        assert rope == arrpos.RoPE.from_hf_config(d, layer_type=lt)


def test_llama4_temperature_tuning_plan():
    d = real.raw("meta-llama__Llama-4-Scout-17B-16E-Instruct.json")
    config = real.hf_config("meta-llama__Llama-4-Scout-17B-16E-Instruct.json").text_config
    scales = arrpos.hf_layer_query_scales(d)
    for scale, use_rope in zip(scales, config.no_rope_layers):
        if use_rope or not config.attn_temperature_tuning:
            assert scale is None
        else:
            assert scale == arrpos.PositionScale("llama4", floor_scale=config.floor_scale,
                                                 attn_scale=config.attn_scale)


# --- position scales ---------------------------------------------------------------------------

POSITIONS = np.arange(0, 100001)


def test_llama4_position_scale():
    """transformers/models/llama4/modeling_llama4.py lines 363-365 (Llama4TextAttention.forward),
    restated in torch exactly: float32 positions, ``log1p(floor((p + 1) / floor_scale)) *
    attn_scale + 1``."""
    p = torch.as_tensor(POSITIONS)
    want = torch.log1p(torch.floor((p.float() + 1.0) / 8192)) * 0.1 + 1.0
    got = arrpos.position_scale(POSITIONS, kind="llama4", floor_scale=8192, attn_scale=0.1)
    assert np.abs(got - want.double().numpy()).max() < 1e-6


def test_log_position_scale_and_query_scale():
    """Ministral 3 / Mistral 4: transformers' own ``get_llama_4_attn_scale``; the Devstral-Small-2
    file's RoPE gives it as ``query_scale``."""
    from transformers.models.ministral3 import modeling_ministral3 as m

    name = "mistralai__Devstral-Small-2-24B-Instruct-2512.json"
    text = real.hf_config(name).text_config
    beta = text.rope_parameters["llama_4_scaling_beta"]
    orig = text.rope_parameters["original_max_position_embeddings"]
    want = m.get_llama_4_attn_scale(torch.as_tensor(POSITIONS)[None], beta, orig)[0, 0, :, 0]
    rope = arrpos.RoPE.from_hf_config(real.raw(name))
    got = rope.query_scale(POSITIONS)
    assert np.abs(got - want.double().numpy()).max() < 1e-6
    assert np.array_equal(got, arrpos.position_scale(POSITIONS, kind="log", beta=beta,
                                                     original_max_positions=orig))
    assert arrpos.hf_layer_query_scales(real.raw(name))[0] == rope.position_scale


def test_log_floor_position_scale():
    """Inkling 2: transformers' own ``Inkling2LogScale`` module on ones."""
    from transformers.models.inkling2 import modeling_inkling2 as m

    config = transformers.AutoConfig.for_model("inkling2").text_config
    module = m.Inkling2LogScale(config)
    p = torch.as_tensor(POSITIONS)[None]
    want = module(torch.ones(1, len(POSITIONS), 1, 1), p)[0, :, 0, 0]
    got = arrpos.position_scale(POSITIONS, kind="log_floor", alpha=config.log_scaling_alpha,
                                floor_scale=config.log_scaling_n_floor)
    assert np.abs(got - want.double().numpy()).max() < 1e-6


@pytest.mark.parametrize("kwargs, words", [
    ({"kind": "llama4", "floor_scale": 8192}, "needs attn_scale"),
    ({"kind": "log", "beta": 0.1, "original_max_positions": 10, "alpha": 1.0}, "not alpha"),
    ({"kind": "cubic"}, "kind"),
    ({"kind": "llama4", "floor_scale": 0, "attn_scale": 0.1}, "floor_scale"),
])
def test_position_scale_refusals(kwargs, words):
    with pytest.raises(ValueError, match=words):
        arrpos.position_scale(np.arange(3), **kwargs)
    with pytest.raises(ValueError, match="positions must be >= 0"):
        arrpos.position_scale(np.array([-1]), kind="llama4", floor_scale=8, attn_scale=0.1)


def test_position_scale_on_other_backends():
    p = np.arange(0, 50000, 37)
    want = arrpos.position_scale(p, kind="llama4", floor_scale=8192, attn_scale=0.1)
    got = arrpos.position_scale(torch.as_tensor(p), kind="llama4", floor_scale=8192,
                                attn_scale=0.1, dtype=torch.float64)
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), want)

"""Reading a transformers ``config.json`` into the arguments of :class:`arrpos.RoPE`.

``rope_from_config(RoPE, config, layer_type)`` is what ``RoPE.from_hf_config`` calls. The
scaling is a lookup in ``scaling.SCALINGS`` (each scaling class builds itself from the
config); this module reads the rest: the rotary width, the layout, the multimodal sections and
the axes of vision towers. Config keys come first; what only the modeling file fixes is in the
per-model-type tables below, read off the modeling files of transformers 5.24 and checked by
``tests/test_hf_families.py``. What arrpos cannot reproduce exactly is refused with a ValueError
or NotImplementedError naming the model type and the missing feature, never answered with a
different RoPE.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping

from .hf_models import MODELS, NO_ROTARY, TRANSFORMERS_VERSION
from .position_scales import PositionScale
from .scaling import (
    SCALINGS,
    AxialScaling,
    LongRopeScaling,
    NTKScaling,
    original_max_positions,
    yarn_mscale,
)
from .tables import mrope_axes

# The config keys the reader uses: tools/generate_hf_models.py records the config classes'
# constant defaults of exactly these (a key absent from a config.json means its default)
HF_KEYS = frozenset({
    # rotary parameters and their legacy spellings
    "rope_theta", "rope_parameters", "rope_scaling", "rope_interleave", "partial_rotary_factor",
    "rotary_pct", "rotary_dim", "rotary_emb_base", "rope_local_base_freq", "global_rope_theta",
    "local_rope_theta", "swa_rope_theta", "position_embedding_type", "rotary_value",
    "use_rotary_embedding", "compress_rope_theta",
    # widths
    "head_dim", "qk_rope_head_dim", "kv_channels", "attention_head_dim", "hidden_size",
    "num_attention_heads", "n_head", "n_heads", "num_heads", "d_model", "n_embd", "embed_dim",
    "decoder_num_attention_heads", "projection_dim", "global_head_dim", "per_layer_config",
    "memory_attention_hidden_size", "memory_attention_downsample_rate",
    "memory_attention_num_attention_heads",
    # lengths
    "max_position_embeddings", "original_max_position_embeddings",
    # layers, NoPE layers and position-dependent attention scaling
    "num_hidden_layers", "layer_types", "sliding_window_pattern", "no_rope_layers",
    "no_rope_layer_interval", "attn_temperature_tuning", "floor_scale", "attn_scale",
    "log_scaling", "log_scaling_alpha", "log_scaling_n_floor",
})

# rope_type values that mean "no scaling" ("mrope": Qwen2-VL's old name for default)
_UNSCALED = ("default", "mrope")

# model types whose modeling file rotates interleaved pairs (x[2i], x[2i+1]) whatever the config
# says: a rotate_half on x[..., ::2] / x[..., 1::2] with repeat_interleave'd tables
_INTERLEAVED = frozenset({
    "blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "blt_patcher",
    "cohere", "cohere2", "cohere2_moe", "deepseek_v4", "ernie4_5", "ernie4_5_moe",
    "ernie4_5_vl_moe", "ernie4_5_vl_moe_text", "glm", "glm4", "glm4v", "glm4v_text",
    "glm_ocr", "glm_ocr_text", "helium", "moonshine",
    "moonshine_streaming", "pe_audio_encoder", "pe_audio_video_encoder", "pe_video_encoder",
    "openai_privacy_filter", "bailing_hybrid", "glm_moe_dsa", "longcat_flash",
    "mistral_large4", "mistral_large4_text", "deepseek_v2", "llama4", "llama4_text",
    "gptj", "codegen", "hy_v4_vl", "hy_v4_vl_text", "roformer",
})
# model types whose modeling file reads ``rotary_dim`` (elsewhere it is a stale key:
# transformers takes the width from partial_rotary_factor)
_ROTARY_DIM_TYPES = frozenset({"gptj", "codegen"})

# multimodal RoPE: model type -> (the modeling file's default mrope_section, arrangement).
# "chunked": Qwen2-VL (sections of consecutive frequencies take t, h, w); "interleaved":
# Qwen3-VL (t, h, w, t, h, w, ...); "ernie": ERNIE-4.5-VL (h, w alternating, then t).
_MROPE = {
    **dict.fromkeys(("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text",
                     "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen2_5_omni_talker",
                     "paddleocr_vl", "paddleocr_vl_text"), ((16, 24, 24), "chunked")),
    **dict.fromkeys(("glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text", "glm_image",
                     "glm_image_text", "glm_ocr", "glm_ocr_text"), ((8, 12, 12), "chunked")),
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text",
                     "qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker",
                     "qwen3_omni_moe_talker_text", "qwen3_omni_moe_talker_code_predictor",
                     "cosmos3_edge", "cosmos3_edge_text", "cohere_compass",
                     "cohere_compass_text"), ((24, 20, 20), "interleaved")),
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen4_exp",
                     "qwen4_exp_text"), ((11, 11, 10), "interleaved")),
    **dict.fromkeys(("hy_v4_vl", "hy_v4_vl_text"), ((12, 10, 10), "interleaved")),
    **dict.fromkeys(("ernie4_5_vl_moe", "ernie4_5_vl_moe_text"), ((22, 22, 20), "ernie")),
    "neomme": ((), "alternating"),  # NeoMME: even frequencies turn with rows, odd with columns
}

# rope_type "axial" vision towers: model type -> (AxialScaling arrangement, the coordinate of
# each block of frequencies, layout). Coordinates are (h, w) — (t, h, w) with three blocks —
# as transformers' vision rotary takes them: position_ids[..., k].
_QWEN_VISION = ("blocks", (0, 1), "half")
_AXIAL = {
    **dict.fromkeys((
        "cohere_compass_vision", "dots3_note_vision_encoder", "ernie4_5_vl_moe_vision",
        "exaone4_5_vision", "glm4v_vision", "glm4v_moe_vision", "glm5_next_vision",
        "glm_ocr_vision", "lfm3_vl_vision", "mlcd_vision_model", "muse_glimmer_vision",
        "muse_spark_vision", "paddleocr_vl_vision", "qwen2_vl_vision", "qwen2_5_vl_vision",
        "qwen2_5_omni_vision_encoder", "qwen3_vl_vision", "qwen3_vl_moe_vision",
        "qwen3_5_vision", "qwen3_5_moe_vision", "qwen3_omni_moe_vision_encoder",
        "qwen4_exp_vision", "video_llama_3_vision"), _QWEN_VISION),
    **dict.fromkeys(("sam2_video", "edgetam_video", "sam3_tracker_video", "sam3_vit_model"),
                    ("blocks", (0, 1), "interleaved")),
    "inkling2_vision": ("blocks", (1, 0), "interleaved"),
    "step3p5_vision": ("blocks", (1, 0), "half"),
    "kimi_k25_vision": ("pairs", (1, 0), "half"),
    "pixtral": ("strided", (0, 1), "half"),
    "minimax_m3_vl_vision": ("blocks", (0, 1, 2), "half"),
    # Gemma 4 vision: h and w halves of the head, each rotated half-wise on its own
    # (apply_multidimensional_rope)
    "gemma4_vision": ("blocks", (0, 1), "blocks"),
}
# model types whose rotate_half has flipped signs: they rotate by -theta (RoPE(inverse=True))
_INVERSE = frozenset({"nanochat"})
# model types whose rotary ignores rope_theta: RoFormer's sinusoidal table and CLVP's rotary
# hard-code 10000
_FIXED_BASE = {"roformer": 10000.0, "clvp_encoder": 10000.0}
# HunYuan: rope_type "dynamic" with an "alpha" is static NTK-alpha (base * alpha ** (d/(d-2)),
# HunYuanDenseV1RotaryEmbedding.compute_ntk_alpha_rope_parameters)
_NTK_ALPHA = frozenset({"hunyuan_v1_dense", "hunyuan_v1_moe"})
# Phi-3.5-MoE: PhimoeRotaryEmbedding.forward recomputes inv_freq without seq_len (short factors
# at every length) and scales cos/sin by short_mscale or long_mscale by the regime
_MSCALE_LONGROPE = frozenset({"phimoe"})

# vision rotaries the model drives with patch coordinates it computes itself: model type ->
# (the rotated width: "head" (head_dim) or "hidden" (the whole hidden state, before the head
# split), AxialScaling, layout). apply() takes the coordinates (docs/rope.md says which):
# Llama 4 vision (column + 1, row + 1; 0, 0 for CLS), DINOv3 in EoMT (patch-centre y, x in
# [-1, 1], in turns; 0, 0 for prefix tokens), EfficientLoFTR (row + 1, column + 1).
_DINOV3 = ("head", AxialScaling(2, "blocks", turns=True), "half")
_GRID = {
    "llama4_vision_model": ("head", AxialScaling(2, "blocks"), "interleaved"),
    "eomt_dinov3": _DINOV3, "dinov3_vit": _DINOV3, "sapiens2": _DINOV3,
    "efficientloftr": ("hidden", AxialScaling(2, "pairs"), "interleaved"),
}

# model types whose apply rotates the LAST rotary_dim features of each head ([nope | rope]):
# DeepSeek-V4's apply_rotary_pos_emb (x[..., -rope_dim:]); the width is
# int(head_dim * partial_rotary_factor), that factor defaulting to qk_rope_head_dim / head_dim
_ROTARY_LAST = frozenset({"deepseek_v4"})

# SAM 2's memory attention: the rotary width is its own
_MEMORY_ATTENTION = frozenset({"sam2_video", "edgetam_video", "sam3_tracker_video"})

# model type -> what its modeling file does that a RoPE cannot (refused, never approximated)
_HUNYUAN = ("multimodal sections cut from the doubled table (cos[i] and cos[i + d/2] may turn "
            "with different axes)")
_UNSUPPORTED = {
    "esmfold2": "a 3-D rotary over atom coordinates",
    "musicflamingo": "a rotary time embedding modulated by absolute timestamps",
    "hunyuan_vl": _HUNYUAN,
    "hunyuan_vl_text": _HUNYUAN,
    "vjepa2": "a 3-D rotary over (frame, row, column) patch coordinates in its own layout",
    "lightglue": "a learned Fourier positional encoding of keypoint coordinates",
    "clvp_decoder": "CLVP's decoder (GPT-2) has no rotary embedding; its encoders have one",
    **dict.fromkeys(
        ("wav2vec2_conformer", "wav2vec2_bert", "seamless_m4t", "seamless_m4t_v2"),
        "a conformer whose rotary (position_embeddings_type='rotary') is not reproduced yet"),
}

# Moonshine's num_attention_heads is its decoder's (transformers' attribute_map)
_HEAD_COUNT_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads",
                    "decoder_num_attention_heads")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")


def as_dict(config):
    if hasattr(config, "to_dict") and not isinstance(config, Mapping):
        config = config.to_dict()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json) or a transformers "
                        f"PretrainedConfig, got {type(config).__name__}")
    return config


class Refusal(ValueError):
    """A config arrpos does not reproduce (a ValueError; the message starts with the model type)."""


# --- which model type's rules apply, with its config class's defaults ------------------------

# keys only a vision tower's config has: a sub-config dict carrying its parent's model_type
# (Qwen2-VL's vision_config says "qwen2_vl") is recognised by them, as transformers does
_VISION_KEYS = ("patch_size", "spatial_patch_size", "spatial_merge_size", "in_chans",
                "in_channels", "temporal_patch_size", "image_size")


# composite configs that read a missing text_config from the top-level keys (legacy files)
_TOP_LEVEL_TEXT = frozenset({"dots3_note", "fuyu", "glm5_next", "hunyuan_vl", "paddleocr_vl",
                             "qwen2_vl", "qwen2_5_vl"})


def _is_vision_dict(config, entry, model_type):
    """A vision tower's dict that carries its parent's model type (Qwen2-VL's vision_config says
    "qwen2_vl"): transformers renames that type for its vision_config; told by the keys only a
    vision tower has."""
    renamed = entry.get("sub_config_renames", {}).get("vision_config", {})
    return (model_type in renamed and not any(key in config for key in entry["sub_configs"])
            and any(key in config for key in _VISION_KEYS))


def _sub_type(entry, key, sub):
    """The model type transformers builds sub-config ``key`` as: the dict's own ``model_type``
    (after the parent class's renames of legacy types) where the parent takes any
    (AutoConfig), else the class's type whatever the dict says."""
    default = entry["sub_configs"][key]
    if key not in entry.get("auto_sub_configs", ()):
        return default
    given = sub.get("model_type")
    if given is not None and not isinstance(given, str):
        raise Refusal(f"config[{key!r}]['model_type'] must be a string, got {given!r}")
    renames = entry.get("sub_config_renames", {}).get(key, {})
    if str(given) in renames:
        given = renames[str(given)]
    elif "*" in renames:
        given = renames["*"]
    return given or default


def resolve(config):
    """``(model_type, effective config)``: the model type whose rules apply (the text model of
    a composite config, the vision tower of a vision sub-config) and its config with the config
    class's constant defaults under the file's keys and ``attribute_map`` aliases resolved.
    ``model_type`` is None for a config without one; unknown types keep their name."""
    config = as_dict(config)
    model_type: str | None = config.get("model_type") or None
    if model_type is not None and not isinstance(model_type, str):
        raise Refusal(f"config['model_type'] must be a string, got {model_type!r}")
    for _ in range(4):  # composite configs nest at most a few levels
        entry = None if model_type is None else MODELS.get(model_type)
        if entry is None:
            break
        subs = entry.get("sub_configs", {})
        if _is_vision_dict(config, entry, model_type):
            model_type = entry["sub_config_renames"]["vision_config"][model_type]
            continue
        if "text_config" not in subs:
            break
        text = config.get("text_config")
        if isinstance(text, Mapping):  # transformers builds the text model from it alone
            config, model_type = text, _sub_type(entry, "text_config", text)
        elif text is None and model_type in _TOP_LEVEL_TEXT:
            model_type = subs["text_config"]  # legacy files: the text keys at the top level
        else:
            break
    entry = {} if model_type is None else MODELS.get(model_type, {})
    aliases = entry.get("attribute_map", {})
    merged = dict(entry.get("defaults", {}))
    for key, value in config.items():
        merged[aliases.get(key, key)] = value
    return model_type, merged


# --- rope parameters, standardised as transformers' config classes do -----------------------

# config classes that split flat (legacy) keys into full and sliding layer entries: model type
# -> (the key of the full layers' theta, of the sliding layers' theta, whether rope_scaling
# also applies to sliding layers); default thetas are the class's {"global", "local"}
_SPLIT_THETA = {
    **dict.fromkeys(("gemma3_text", "gemma3n_text", "t5gemma2_text", "t5gemma2_encoder",
                     "t5gemma2_decoder"), ("rope_theta", "rope_local_base_freq", False)),
    **dict.fromkeys(("modernbert", "modernbert_decoder"),
                    ("global_rope_theta", "local_rope_theta", True)),
    "olmo3": ("rope_theta", "rope_theta", False),
}
# GPT-NeoX's legacy keys: rotary_emb_base for the theta, rotary_pct (this default) for the width
_NEOX_PCT = {"gpt_neox": 0.25, "gpt_neox_japanese": 1.0}
# Phi-3's legacy rope_type names of LongRoPE
_PHI3 = frozenset({"phi3", "phi4_multimodal", "phi4_multimodal_audio", "phi4_multimodal_vision"})
_LONGROPE_NAMES = ("su", "yarn")
# rope_type aliases every reader accepts (transformers' sarvam_mla; vLLM's DeepSeek YaRN is the
# same formula)
_ALIASES = {"deepseek_yarn": "yarn"}


def _default_theta(entry, layer_type):
    theta = entry.get("default_theta", 10_000.0)
    if isinstance(theta, Mapping):  # Gemma: {"global", "local"}; NeoMME: per layer type
        key = {"full_attention": "global", "sliding_attention": "local"}.get(layer_type,
                                                                            layer_type)
        return theta.get(key, theta.get("global", 10_000.0))
    return theta


def _mapping(value, what):
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Refusal(f"config[{what!r}] must be a dict, got {type(value).__name__}")
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in value.items()}


def standard_rope_parameters(model_type, config):
    """``{layer type or None: one layer's rope parameters (None: no rotary)}`` with
    ``rope_type``, ``rope_theta`` and ``partial_rotary_factor`` filled in from the legacy and
    top-level keys and the class defaults, as transformers' ``convert_rope_params_to_dict``."""
    entry = MODELS.get(model_type, {})
    # transformers: rope_scaling (older name) wins over rope_parameters
    if config.get("rope_scaling"):
        rp = _mapping(config["rope_scaling"], "rope_scaling")
    elif config.get("rope_parameters") is None and entry.get("rope_parameters_default"):
        # the config class's __post_init__ default (GPT-OSS, Mistral Large 4: YaRN); its theta
        # is the class default, which a top-level rope_theta overrides
        rp = dict(entry["rope_parameters_default"])
        if rp.get("rope_theta") == _default_theta(entry, None):
            del rp["rope_theta"]
    else:
        rp = _mapping(config.get("rope_parameters"), "rope_parameters")
    theta_key, prf = "rope_theta", config.get("partial_rotary_factor")
    if prf is None and isinstance(entry.get("default_partial_rotary_factor"), float) and (
            "qk_rope_head_dim" not in config):  # DeepSeek-V4: a class default, not a field
        prf = entry["default_partial_rotary_factor"]
    if model_type in _NEOX_PCT:
        theta_key = "rotary_emb_base" if "rotary_emb_base" in config else "rope_theta"
        if prf is None:
            prf = config.get("rotary_pct", _NEOX_PCT[model_type])
    if model_type in _SPLIT_THETA and not any(isinstance(v, Mapping) for v in rp.values()):
        full_key, local_key, both = _SPLIT_THETA[model_type]
        flat = rp
        rp = {"full_attention": {"rope_type": "default", **flat,
                                 "rope_theta": flat.get("rope_theta", config.get(
                                     full_key, _default_theta(entry, "full_attention")))},
              "sliding_attention": {"rope_type": "default", **(flat if both else {}),
                                    "rope_theta": config.get(
                                        local_key, _default_theta(entry, "sliding_attention"))}}
    if model_type == "deepseek_v4":
        rp = _deepseek_v4_rope_parameters(rp, config)
    labels = set(config.get("layer_types") or ())
    nested = {k: v for k, v in rp.items() if isinstance(v, Mapping) or (v is None and k in labels)}
    layers = nested or {None: rp}
    out: dict[str | None, dict | None] = {}
    for layer_type, params in layers.items():
        if params is None:  # transformers: "possibly a NoPE layer"
            out[layer_type] = None
            continue
        params = dict(params)
        rope_type = params.pop("type", None)
        params.setdefault("rope_type", rope_type or "default")
        params["rope_type"] = _ALIASES.get(params["rope_type"], params["rope_type"])
        if model_type in _PHI3 and params["rope_type"] in _LONGROPE_NAMES:
            params["rope_type"] = "longrope"
        if params["rope_type"] == "default" and entry.get("default_rope_type"):
            params["rope_type"] = entry["default_rope_type"]
        params.setdefault("rope_theta", config.get(theta_key, _default_theta(entry, layer_type)))
        if prf is not None:
            params.setdefault("partial_rotary_factor", prf)
        out[layer_type] = params
    return out


def _deepseek_v4_rope_parameters(rp, config):
    """DeepseekV4Config.__post_init__: a plain rope for the attention ("main") and the file's
    scaling with ``compress_rope_theta`` for the compressor ("compress"; YaRN without mscale)."""
    if isinstance(rp.get("main"), Mapping) and isinstance(rp.get("compress"), Mapping):
        return {"main": rp["main"], "compress": rp["compress"]}
    flat = {k: v for k, v in rp.items() if k not in ("main", "compress")}
    compress = {**flat, "rope_theta": config.get("compress_rope_theta", 160000.0)}
    compress.setdefault("rope_type", compress.pop("type", "default"))
    if compress["rope_type"] == "yarn":
        compress.setdefault("attention_factor", 1.0)
    return {"main": {"rope_type": "default", "rope_theta": config.get("rope_theta", 10000.0)},
            "compress": compress}


def _rope_parameters(config, layer_type, model_type=None):
    layers = standard_rope_parameters(model_type, config)
    if None in layers:
        return layers[None]
    if layer_type is None:
        raise ValueError(f"rope_parameters are given per layer type {sorted(layers)}; pass "
                         "layer_type= to choose one")
    if layer_type not in layers:
        raise ValueError(f"layer_type must be one of {sorted(layers)}, got {layer_type!r}")
    if layers[layer_type] is None:
        raise ValueError(f"layer type {layer_type!r} applies no rotary embedding "
                         "(rope_parameters is null for it)")
    return layers[layer_type]


def _scaling(rp, config, model_type):
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type == "dynamic" and rp.get("alpha") and model_type in _NTK_ALPHA:
        return NTKScaling(rp["alpha"])
    if rope_type == "longrope" and model_type in _MSCALE_LONGROPE:
        return LongRopeScaling.from_config({**rp, "long_factor": rp.get("short_factor")}, config)
    if rope_type == "axial":
        if model_type not in _AXIAL:
            raise NotImplementedError(
                "rope_type 'axial': how this vision model arranges its axes is not known to "
                "arrpos; build it with RoPE(..., scaling=AxialScaling(...), axes=...)")
        n_axes = len(_AXIAL[model_type][1])
        return AxialScaling(n_axes, _AXIAL[model_type][0])
    if rope_type in _UNSCALED:
        return None
    if rope_type not in SCALINGS:
        known = (*_UNSCALED, *SCALINGS)
        raise ValueError(f"unknown rope_type {rope_type!r}; known: "
                         f"{', '.join(repr(t) for t in known)}")
    return SCALINGS[rope_type].from_config(rp, config)


def _layer_overrides(config, layer_type):
    """Per-layer head sizes (Gemma 4: ``per_layer_config`` / ``global_head_dim``)."""
    if layer_type is None:
        return {}
    per_layer = config.get("per_layer_config") or {}
    types = config.get("layer_types") or []
    for index, kind in enumerate(types):
        if kind == layer_type:
            for key, value in per_layer.items():
                if str(key).isdigit() and int(key) == index and isinstance(value, Mapping):
                    return dict(value)
            break
    if layer_type == "full_attention" and config.get("global_head_dim"):
        return {"head_dim": config["global_head_dim"]}
    return {}


def _first(config, keys):
    for key in keys:
        if config.get(key):
            return config[key]
    return None


def _head_dim(config, model_type):
    """The width the rotary is computed for, before ``partial_rotary_factor``."""
    if model_type in _MEMORY_ATTENTION:
        width = config["memory_attention_hidden_size"] // (
            config["memory_attention_downsample_rate"]
            * config["memory_attention_num_attention_heads"])
        return width, "memory_attention_hidden_size"
    if model_type == "qwen2_vl_vision":  # its hidden_size is the merger's output
        return config["embed_dim"] // config["num_heads"], "embed_dim"
    keys: tuple[str, ...] = ("qk_rope_head_dim", "head_dim", "attention_head_dim", "kv_channels")
    if model_type in _ROTARY_LAST:  # the whole head: the rotary part is its last features
        keys = keys[1:]
    for key in keys:
        if config.get(key):
            return config[key], key
    hidden, heads = _first(config, _HIDDEN_KEYS), _first(config, _HEAD_COUNT_KEYS)
    if not hidden or not heads:
        raise ValueError("config needs head_dim (or qk_rope_head_dim, kv_channels, "
                         "attention_head_dim), or hidden_size (or n_embd, d_model) and "
                         "num_attention_heads (or n_head, n_heads, num_heads)")
    return hidden // heads, "hidden_size"


def _partial_rotary_factor(rp, config, head_dim, width_key, scaling, model_type):
    if model_type == "minimax_m3_vl_vision":  # three even axis widths of head_dim // 3
        return 3 * 2 * ((head_dim // 3) // 2) / head_dim
    if model_type == "clvp_encoder":  # ClvpRotaryPositionalEmbedding's own width
        return max(config["projection_dim"] // (config["num_attention_heads"] * 2), 32) / head_dim
    if model_type in _ROTARY_LAST and rp.get("partial_rotary_factor") is None and config.get(
            "qk_rope_head_dim"):  # DeepseekV4Config: qk_rope_head_dim / head_dim
        return config["qk_rope_head_dim"] / head_dim
    if width_key == "qk_rope_head_dim" or (scaling is not None and scaling.full_width):
        return 1.0  # MLA: the rotary is the qk_rope_head_dim slice; proportional: full table
    if config.get("rotary_dim") and model_type in _ROTARY_DIM_TYPES:
        return config["rotary_dim"] / head_dim
    prf = rp.get("partial_rotary_factor")
    if prf is None and config.get("rotary_dim") and model_type == "minimax_m2":
        prf = config["rotary_dim"] / head_dim  # MiniMaxM2Config.convert_rope_params_to_dict
    return 1.0 if prf is None else prf


def _layout(config, model_type, rp):
    if model_type in _AXIAL and rp.get("rope_type") == "axial":
        return _AXIAL[model_type][2]
    if config.get("rope_interleave") is not None:
        return "interleaved" if config["rope_interleave"] else "half"
    return "interleaved" if model_type in _INTERLEAVED else "half"


def _axes(rp, model_type, n_freq):
    if model_type in _AXIAL and rp.get("rope_type") == "axial":
        _, coords, _ = _AXIAL[model_type]
        per_axis = n_freq // len(coords)
        if _AXIAL[model_type][0] == "pairs":
            return coords * per_axis
        return tuple(c for c in coords for _ in range(per_axis))
    default, arrangement = _MROPE.get(model_type, (None, "chunked"))
    if arrangement == "alternating":
        return tuple(i % 2 for i in range(n_freq))
    sections = rp.get("mrope_section") or default
    if not sections:
        return None
    if rp.get("mrope_interleaved") is not None:
        arrangement = "interleaved" if rp["mrope_interleaved"] else "chunked"
    if arrangement == "chunked":
        return mrope_axes(list(sections))
    if arrangement == "interleaved":  # Qwen3-VL: h, w on strided slices of all n_freq; t the rest
        if len(sections) != 3:
            raise ValueError(f"interleaved mrope_section needs three sections, got {sections}")
        return tuple(k if k and i % 3 == k and i < 3 * sections[k] else 0
                     for i in range(n_freq) for k in (i % 3,))
    h, w, t = sections  # ERNIE-4.5-VL: h and w frequencies alternate, then t
    if h != w:
        raise NotImplementedError(f"ERNIE-VL mrope_section {list(sections)}: the h and w "
                                  "sections must be equal to alternate")
    return tuple(1 + k % 2 for k in range(h + w)) + (0,) * t


def _subconfig(config, key):
    """``config[key]`` with its model type (a missing one, or the parent's, is the parent's
    sub-config type for ``key``)."""
    config = as_dict(config)
    parent = config.get("model_type")
    sub = config.get(key)
    if not isinstance(sub, Mapping):
        raise Refusal(f"{parent or 'config'}: subconfig={key!r}: the config has no {key!r} dict")
    entry = MODELS.get(parent, {})
    if key in entry.get("sub_configs", {}):
        sub = {**sub, "model_type": _sub_type(entry, key, sub)}
    return sub


def rope_from_config(cls, config, layer_type=None, subconfig=None):
    """``cls(head_dim, **kwargs)``: the RoPE of a config; errors name the model type."""
    if subconfig is not None:
        config = _subconfig(config, subconfig)
    model_type, config = resolve(config)
    name = model_type or "config without model_type"
    try:
        if model_type in NO_ROTARY or config.get("use_rotary_embedding") is False:
            raise Refusal(f"{model_type} does not use rotary embeddings")
        if _modeling(model_type) in _UNSUPPORTED:
            raise NotImplementedError("not expressible as a RoPE: "
                                      f"{_UNSUPPORTED[_modeling(model_type)]}")
        if model_type not in MODELS:
            _refuse_ambiguous(config, model_type)
        elif not MODELS[model_type]["rotary"]:
            raise Refusal("has no rotary embedding of its own; pass the config of the part "
                          f"that has one ({', '.join(MODELS[model_type].get('sub_configs', {}))})")
        if _modeling(model_type) in _GRID:
            head_dim, kwargs = _grid_arguments(config, _modeling(model_type))
        else:
            head_dim, kwargs = _rope_arguments(config, layer_type, model_type)
        rope = cls(head_dim, **kwargs)
    except (ValueError, NotImplementedError) as e:
        raise type(e)(f"{name}: {e}") from None
    except (TypeError, KeyError, ZeroDivisionError, ArithmeticError) as e:
        # a malformed value in the file: the caller's terms, not Python's
        raise Refusal(f"{name}: malformed config ({type(e).__name__}: {e})") from None
    if model_type not in MODELS:
        _warn_assumption(config, model_type)
    return rope


# keys a plain 1-D rope of an unknown model type may carry (anything else may change how the
# model rotates: refused rather than guessed)
_PLAIN_RP_KEYS = frozenset({"rope_type", "type", "rope_theta", "factor", "partial_rotary_factor",
                            "original_max_position_embeddings", "low_freq_factor",
                            "high_freq_factor", "beta_fast", "beta_slow", "mscale",
                            "mscale_all_dim", "attention_factor", "short_factor", "long_factor",
                            "truncate"})
_PLAIN_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


def _unknown(model_type):
    return (f"arrpos reads config.json files as transformers {TRANSFORMERS_VERSION} does, and "
            "that release has no model type " + (repr(model_type) if model_type else "here"))


_EXPLICIT = ("build the RoPE explicitly: RoPE(head_dim, base=..., scaling=..., "
             "layout='half' or 'interleaved', partial_rotary_factor=...)")


def _refuse_ambiguous(config, model_type):
    """An unknown model type is refused unless its config is a plain 1-D rope."""
    if any(key in config for key in _VISION_KEYS):
        raise Refusal(f"{_unknown(model_type)}; a vision tower's config needs its model type: "
                      "pass the whole config.json with subconfig='vision_config'")
    layers = standard_rope_parameters(model_type, config)
    extra = set()
    for params in layers.values():
        extra |= set(params or {}) - _PLAIN_RP_KEYS
    types = {(p or {}).get("rope_type") for p in layers.values()}
    if None not in layers or extra or not types <= set(_PLAIN_TYPES):
        raise Refusal(f"{_unknown(model_type)}; its rope is not a plain 1-D rope "
                      f"({', '.join(sorted(extra)) or sorted(map(str, types))}): {_EXPLICIT}")


def _warn_assumption(config, model_type):
    layout = "interleaved" if config.get("rope_interleave") else "half"
    stated = "rope_interleave" in config
    warnings.warn(f"{_unknown(model_type)}: assuming a 1-D RoPE on {layout} pairs"
                  + ("" if stated else " (rotate_half, as Llama; set config['rope_interleave'] "
                     "to state the layout)")
                  + f". If the model differs, {_EXPLICIT}.", UserWarning, stacklevel=4)


def _modeling(model_type):
    """The model type whose modeling file's rules apply (``sarvam_mla`` runs DeepSeek-V3's)."""
    return MODELS.get(model_type, {}).get("modeling", model_type)


def _rope_arguments(config, layer_type, model_type):
    config = {**config, **_layer_overrides(config, layer_type)}
    rp = _rope_parameters(config, layer_type, model_type)
    rules = _modeling(model_type)
    scaling = _scaling(rp, config, rules)
    head_dim, width_key = _head_dim(config, rules)
    prf = _partial_rotary_factor(rp, config, head_dim, width_key, scaling, rules)
    base = _FIXED_BASE.get(rules, rp["rope_theta"])
    n_freq = int(head_dim * prf) // 2
    layout, axes = _layout(config, rules, rp), _axes(rp, rules, n_freq)
    position_scale, attention_scale = query_scale_of(model_type, config, rp, True)
    return head_dim, dict(base=base, scaling=scaling, partial_rotary_factor=prf,
                          layout=layout, axes=axes, inverse=rules in _INVERSE,
                          attention_scale=attention_scale, position_scale=position_scale,
                          rotary_part="last" if rules in _ROTARY_LAST else "first")


def _grid_arguments(config, model_type):
    """A vision rotary over patch coordinates (``_GRID``): a 2-D RoPE with two axes."""
    rotated, scaling, layout = _GRID[model_type]
    rp = _rope_parameters(config, None, model_type)
    if rp.get("rope_type", "default") != "default":
        raise NotImplementedError(f"rope_type {rp['rope_type']!r} on a patch-coordinate rotary")
    head_dim, _ = _head_dim(config, model_type)
    width = head_dim
    if rotated == "hidden":  # EfficientLoFTR: hidden // 4 frequencies per axis
        width = config["hidden_size"]
        n_freq = int(head_dim * _partial_rotary_factor(rp, config, head_dim, "", None,
                                                       model_type)) // 2
        if 4 * n_freq != width:
            raise ValueError(f"int(head_dim * partial_rotary_factor) / 2 = {n_freq} frequencies "
                             f"must be hidden_size / 4 = {width / 4} (transformers' own rotary "
                             "needs it too)")
    if width % 4:
        raise ValueError(f"the rotated width {width} must be a multiple of 4 (two axes)")
    per_axis = width // 4
    if scaling.arrangement == "pairs":
        axes = (0, 1) * per_axis
    else:
        axes = (0,) * per_axis + (1,) * per_axis
    base = rp.get("rope_theta", config.get("rope_theta", 10000.0))
    return width, dict(base=base, scaling=scaling, layout=layout, axes=axes)


def query_scale_of(model_type, config, layer_params, uses_rope):
    """The :class:`PositionScale` a layer's queries get (None: none), and the constant softmax
    scale factor (DeepSeek's ``mscale(factor, mscale_all_dim) ** 2``, else 1.0)."""
    entry = MODELS.get(model_type, {})
    scale = None
    rp = layer_params or {}
    if entry.get("beta_query_scale") and rp.get("llama_4_scaling_beta") is not None:
        scale = PositionScale("log", beta=rp["llama_4_scaling_beta"],
                              original_max_positions=original_max_positions(
                                  rp, config, rp.get("rope_type")))
    if entry.get("temperature_tuning") and not uses_rope and config.get("attn_temperature_tuning"):
        scale = PositionScale("llama4", floor_scale=config["floor_scale"],
                              attn_scale=config["attn_scale"])
    softmax = 1.0
    if entry.get("softmax_mscale") and rp.get("rope_type", "default") != "default":
        mscale_all_dim = rp.get("mscale_all_dim") or 0
        if mscale_all_dim:
            m = yarn_mscale(rp["factor"], mscale_all_dim)
            softmax = m * m
    return scale, softmax

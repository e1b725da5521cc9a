"""Reading a transformers ``config.json`` into the arguments of :class:`arrpos.RoPE`.

``rope_from_config(RoPE, config, layer_type)`` is what ``RoPE.from_hf_config`` calls. The
scaling is a lookup in ``_rope_scaling.SCALINGS`` (each scaling class builds itself from the
config); this module reads the rest: the rotary width, the layout, the multimodal sections and
the axes of vision towers. Config keys come first; what only the modeling file fixes is in the
per-model-type tables below, read off the modeling files of transformers 5.24 and checked by
``tests/test_hf_families.py``. What arrpos cannot reproduce exactly is refused with a ValueError
or NotImplementedError naming the model type and the missing feature, never answered with a
different RoPE.
"""
from __future__ import annotations

from collections.abc import Mapping

from ._rope_scaling import SCALINGS, AxialScaling

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
    "gptj", "codegen", "hy_v4_vl", "hy_v4_vl_text",
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
}
# model types whose rotate_half has flipped signs: they rotate by -theta (RoPE(inverse=True))
_INVERSE = frozenset({"nanochat"})

# vision rotaries the model drives with patch coordinates it computes itself: model type ->
# (the rotated width: "head" (head_dim) or "hidden" (the whole hidden state, before the head
# split), AxialScaling, layout). apply() takes the coordinates (docs/rope.md says which):
# Llama 4 vision (column + 1, row + 1; 0, 0 for CLS), DINOv3 in EoMT (patch-centre y, x in
# [-1, 1], in turns; 0, 0 for prefix tokens), EfficientLoFTR (row + 1, column + 1).
_GRID = {
    "llama4_vision_model": ("head", AxialScaling(2, "blocks"), "interleaved"),
    "eomt_dinov3": ("head", AxialScaling(2, "blocks", turns=True), "half"),
    "efficientloftr": ("hidden", AxialScaling(2, "pairs"), "interleaved"),
}

# SAM 2's memory attention: the rotary width is its own
_MEMORY_ATTENTION = frozenset({"sam2_video", "edgetam_video", "sam3_tracker_video"})

# model type -> what its modeling file does that a RoPE cannot (refused, never approximated)
_HUNYUAN = ("multimodal sections cut from the doubled table (cos[i] and cos[i + d/2] may turn "
            "with different axes)")
_UNSUPPORTED = {
    "gemma4_vision": "an axial rotary whose h and w halves of the head each rotate half-wise "
                     "(pairs j, j + head_dim/4 within each half), a layout RoPE does not have; "
                     "apply a RoPE(head_dim // 2) at h to x[..., :head_dim // 2] and one at w to "
                     "the rest",
    "esmfold2": "a 3-D rotary over atom coordinates",
    "musicflamingo": "a rotary time embedding modulated by absolute timestamps",
    "hunyuan_vl": _HUNYUAN,
    "hunyuan_vl_text": _HUNYUAN,
}

# Moonshine's num_attention_heads is its decoder's (transformers' attribute_map)
_HEAD_COUNT_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads",
                    "decoder_num_attention_heads")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")


def _as_dict(config):
    if hasattr(config, "to_dict") and not isinstance(config, Mapping):
        config = config.to_dict()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json) or a transformers "
                        f"PretrainedConfig, got {type(config).__name__}")
    return config


def _rope_parameters(config, layer_type):
    rp = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(rp, Mapping):
        raise TypeError(f"config['rope_parameters'] must be a dict, got {type(rp).__name__}")
    nested = [k for k, v in rp.items() if isinstance(v, Mapping)]
    if nested:
        if layer_type is None:
            raise ValueError(f"rope_parameters are given per layer type {nested}; pass "
                             "layer_type= to choose one")
        if layer_type not in rp:
            raise ValueError(f"layer_type must be one of {nested}, got {layer_type!r}")
        rp = rp[layer_type]
    return rp


def _scaling(rp, config, model_type):
    rope_type = rp.get("rope_type", rp.get("type", "default"))
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
    for key in ("qk_rope_head_dim", "head_dim", "attention_head_dim", "kv_channels"):
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
    if width_key == "qk_rope_head_dim" or (scaling is not None and scaling.full_width):
        return 1.0  # MLA: the rotary is the qk_rope_head_dim slice; proportional: full table
    if config.get("rotary_dim") and model_type in _ROTARY_DIM_TYPES:
        return config["rotary_dim"] / head_dim
    prf = rp.get("partial_rotary_factor",
                 config.get("partial_rotary_factor", config.get("rotary_pct")))
    return 1.0 if prf is None else prf


def _layout(config, model_type, rp):
    if model_type in _AXIAL and rp.get("rope_type") == "axial":
        return _AXIAL[model_type][2]
    if config.get("rope_interleave") is not None:
        return "interleaved" if config["rope_interleave"] else "half"
    return "interleaved" if model_type in _INTERLEAVED else "half"


def _axes(rp, model_type, n_freq):
    from ._rope import mrope_axes  # _rope imports this module

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


def rope_from_config(cls, config, layer_type=None):
    """``cls(head_dim, **kwargs)``: the RoPE of a config; errors name the model type."""
    config = _as_dict(config)
    if isinstance(config.get("text_config"), Mapping):
        config = {**config, **config["text_config"]}
    model_type = str(config.get("model_type") or "unknown model type")
    try:
        if model_type in _UNSUPPORTED:
            raise NotImplementedError(f"not expressible as a RoPE: {_UNSUPPORTED[model_type]}")
        if model_type in _GRID:
            head_dim, kwargs = _grid_arguments(config, model_type)
        else:
            head_dim, kwargs = _rope_arguments(config, layer_type, model_type)
        return cls(head_dim, **kwargs)
    except (ValueError, NotImplementedError) as e:
        raise type(e)(f"{model_type}: {e}") from None


def _rope_arguments(config, layer_type, model_type):
    config = {**config, **_layer_overrides(config, layer_type)}
    rp = _rope_parameters(config, layer_type)
    scaling = _scaling(rp, config, model_type)
    head_dim, width_key = _head_dim(config, model_type)
    prf = _partial_rotary_factor(rp, config, head_dim, width_key, scaling, model_type)
    base = rp.get("rope_theta", config.get("rope_theta", 10000.0))
    n_freq = int(head_dim * prf) // 2
    layout, axes = _layout(config, model_type, rp), _axes(rp, model_type, n_freq)
    return head_dim, dict(base=base, scaling=scaling, partial_rotary_factor=prf,
                          layout=layout, axes=axes, inverse=model_type in _INVERSE)


def _grid_arguments(config, model_type):
    """A vision rotary over patch coordinates (``_GRID``): a 2-D RoPE with two axes."""
    rotated, scaling, layout = _GRID[model_type]
    rp = _rope_parameters(config, None)
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

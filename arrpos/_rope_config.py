"""Reading a transformers ``config.json`` into the arguments of :class:`arrpos.RoPE`.

``rope_arguments(config, layer_type)`` is what ``RoPE.from_hf_config`` calls. The scaling is a
lookup in ``_rope_scaling.SCALINGS`` (each scaling class builds itself from the config); this
module reads the rest: which sub-config holds the rotary embedding, the rotary width, the
layout, the multimodal sections. What a config and its model type determine but arrpos cannot
reproduce exactly is refused with a ValueError or NotImplementedError naming both.
"""
from __future__ import annotations

from collections.abc import Mapping

from ._rope_scaling import SCALINGS

# rope_type values that mean "no scaling" ("mrope": Qwen2-VL's old name for default)
_UNSCALED = ("default", "mrope")


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


def _scaling(rp, config):
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type in _UNSCALED:
        return None
    if rope_type not in SCALINGS:
        known = (*_UNSCALED, *SCALINGS)
        raise ValueError(f"unknown rope_type {rope_type!r}; known: "
                         f"{', '.join(repr(t) for t in known)}")
    return SCALINGS[rope_type].from_config(rp, config)


def _head_dim(config):
    head_dim = config.get("head_dim")
    if head_dim:
        return head_dim
    hidden = config.get("hidden_size", config.get("n_embd"))  # n_embd, n_head: GPT-J
    heads = config.get("num_attention_heads", config.get("n_head"))
    if not hidden or not heads:
        raise ValueError("config needs head_dim, or hidden_size and num_attention_heads")
    return hidden // heads


def rope_arguments(config, layer_type=None):
    """``(head_dim, kwargs)`` such that ``RoPE(head_dim, **kwargs)`` is the config's rotary."""
    from ._rope import mrope_axes

    config = _as_dict(config)
    if isinstance(config.get("text_config"), Mapping):
        config = {**config, **config["text_config"]}
    rp = _rope_parameters(config, layer_type)
    scaling = _scaling(rp, config)
    head_dim = _head_dim(config)
    base = rp.get("rope_theta", config.get("rope_theta", 10000.0))
    prf = rp.get("partial_rotary_factor",
                 config.get("partial_rotary_factor", config.get("rotary_pct", 1.0)))
    prf = 1.0 if prf is None or (scaling is not None and scaling.full_width) else prf
    axes = None
    if rp.get("mrope_section"):
        interleaved = rp.get("mrope_interleaved",
                             str(config.get("model_type", "")).startswith("qwen3"))
        axes = mrope_axes(rp["mrope_section"], interleaved=bool(interleaved))
    layout = "interleaved" if config.get("model_type") in ("gptj", "codegen") else "half"
    if config.get("rotary_dim") and layout == "interleaved":
        prf = config["rotary_dim"] / head_dim
    return head_dim, dict(base=base, scaling=scaling, partial_rotary_factor=prf, layout=layout,
                          axes=axes)

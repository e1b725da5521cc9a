"""The rotary family (RoPE): frequencies, scalings, tables, application, the ``RoPE`` layer and
its decode caches, and the model plans read from transformers configs.

This package's ``__all__`` is what ``arrpos`` exports from it.
"""
from .hf_layers import hf_layer_query_scales, hf_layer_ropes
from .layer import (
    RoPE,
    apply_rope,
    apply_rope_cached,
    apply_rope_qk,
    clear_caches,
    mrope_axes,
    period_frequencies,
    pixel_frequencies,
    rope_cos_sin,
    rope_frequencies,
    xpos_scale,
)
from .mrope_ids import mrope_position_ids, vision_position_ids
from .position_scales import PositionScale, position_scale
from .scaling import (
    AxialScaling,
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    YarnScaling,
)

__all__ = [
    "AxialScaling",
    "DynamicNTKScaling",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "NTKScaling",
    "PositionScale",
    "ProportionalScaling",
    "RoPE",
    "YarnScaling",
    "apply_rope",
    "apply_rope_cached",
    "apply_rope_qk",
    "clear_caches",
    "hf_layer_query_scales",
    "hf_layer_ropes",
    "mrope_axes",
    "mrope_position_ids",
    "period_frequencies",
    "pixel_frequencies",
    "position_scale",
    "rope_cos_sin",
    "rope_frequencies",
    "vision_position_ids",
    "xpos_scale",
]

"""The rotary family (RoPE) as a wing of modules named by their jobs:

``frequencies``  rope_frequencies, pixel_frequencies, period_frequencies (host float64)
``scaling``      the scaling classes and their registry (``SCALINGS``, ``check_scaling``)
``tables``       rope_cos_sin, xpos_scale, mrope_axes
``apply``        apply_rope, apply_rope_qk, apply_rope_cached and their per-signature plans
``layer``        class RoPE
``engines``      serving-engine forms: dual_chunk_positions, fope_cos_sin
``decode``       RoPE's decode caches, clear_caches
``checks``       the argument rules they share (layouts, ``out``, ``heads_axis``)
``hf_config``    RoPE.from_hf_config: transformers config.json files (``hf_models``: the
                 table generated from transformers' sources); ``hf_layers``: per-layer plans;
                 ``position_scales``: position-dependent query scales; ``mrope_ids`` and
                 ``mrope_layout``: multimodal position ids of vision-language prompts

Imports run one way: checks, scaling, frequencies <- tables, apply <- decode <- hf_config <-
layer <- hf_layers; tables <- engines. This package's ``__all__`` is what ``arrpos`` exports from it (the scaling
classes: ``scaling.__all__``).
"""
from . import scaling
from .apply import apply_rope, apply_rope_cached, apply_rope_qk
from .decode import clear_caches
from .engines import DualChunkPositions, dual_chunk_positions, fope_cos_sin
from .frequencies import period_frequencies, pixel_frequencies, rope_frequencies
from .hf_layers import hf_layer_query_scales, hf_layer_ropes
from .layer import RoPE
from .mrope_ids import mrope_position_ids, vision_position_ids
from .position_scales import PositionScale, position_scale
from .scaling import *  # noqa: F403 (the scaling classes: scaling.__all__)
from .tables import mrope_axes, rope_cos_sin, xpos_scale

__all__ = [
    "DualChunkPositions",
    "PositionScale",
    "RoPE",
    "apply_rope",
    "apply_rope_cached",
    "apply_rope_qk",
    "clear_caches",
    "dual_chunk_positions",
    "fope_cos_sin",
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
__all__ += scaling.__all__

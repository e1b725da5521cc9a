"""arrpos: positional encodings for transformers, written once against the Array API.

The same functions run on NumPy, CuPy, PyTorch, JAX, Dask and array-api-strict arrays and give
the same numbers; NumPy inputs take compiled CPU kernels and CuPy inputs CUDA kernels where
those serve better. See ``docs/api.md`` for the contract and the README for a tour.
"""
from ._absolute import decode_sinusoidal, grid_coords, sinusoidal, sinusoidal_nd, timestep_embedding
from ._rope import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    RoPE,
    YarnScaling,
    apply_rope,
    apply_rope_cached,
    apply_rope_qk,
    mrope_axes,
    period_frequencies,
    pixel_frequencies,
    rope_cos_sin,
    rope_frequencies,
    xpos_scale,
)
from ._rope_scaling import AxialScaling
from ._alibi import alibi_bias, alibi_bias_from_mask, alibi_bias_from_positions, alibi_slopes
from ._attention import PositionProperties, attention, properties, similarity
from ._conv import conv_positional, conv_positional_2d
from ._learned import learned_init, lookup, resample
from ._packed import packed_mask, packed_positions
from ._relative import (
    deberta_bucket,
    deberta_scores,
    rel_shift,
    relative_bias,
    relative_index_nd,
    relative_positions,
    shaw_index,
    shaw_key_scores,
    shaw_value_term,
    t5_bucket,
    transformer_xl_scores,
)

__version__ = "0.1.0"

__all__ = sorted(
    [
        "decode_sinusoidal",
        "grid_coords",
        "sinusoidal",
        "sinusoidal_nd",
        "timestep_embedding",
        # rotary
        "AxialScaling",
        "DynamicNTKScaling",
        "LinearScaling",
        "Llama3Scaling",
        "LongRopeScaling",
        "ProportionalScaling",
        "RoPE",
        "YarnScaling",
        "apply_rope",
        "mrope_axes",
        "rope_cos_sin",
        "rope_frequencies",
        "NTKScaling",
        "apply_rope_cached",
        "apply_rope_qk",
        "period_frequencies",
        "pixel_frequencies",
        "xpos_scale",
        # alibi
        "alibi_bias",
        "alibi_bias_from_mask",
        "alibi_bias_from_positions",
        "alibi_slopes",
        # attention and analysis
        "PositionProperties",
        "attention",
        "properties",
        "similarity",
        # convolutional
        "conv_positional",
        "conv_positional_2d",
        # learned
        "learned_init",
        "lookup",
        "resample",
        # packed sequences
        "packed_mask",
        "packed_positions",
        # relative
        "deberta_bucket",
        "deberta_scores",
        "rel_shift",
        "relative_bias",
        "relative_index_nd",
        "relative_positions",
        "shaw_index",
        "shaw_key_scores",
        "shaw_value_term",
        "t5_bucket",
        "transformer_xl_scores",
    ]
)

"""arrpos: positional encodings for transformers, written once against the Array API.

The same functions run on NumPy, CuPy, PyTorch, JAX, Dask and array-api-strict arrays and give
the same numbers; NumPy inputs take compiled CPU kernels and CuPy inputs CUDA kernels where
those serve better. See ``docs/api.md`` for the contract and the README for a tour.
"""
from . import _rope
from ._absolute import decode_sinusoidal, grid_coords, sinusoidal, sinusoidal_nd, timestep_embedding
from ._rope import *  # noqa: F403 (rotary: every name of _rope.__all__)
from ._diffusers import DiffusersPositions, from_diffusers_config
from ._alibi import alibi_bias, alibi_bias_from_mask, alibi_bias_from_positions, alibi_slopes
from ._attention import PositionProperties, attention, properties, similarity
from ._conv import conv_positional, conv_positional_2d
from ._data_dependent import (
    apply_pope,
    content_relative_bias,
    cope_bias,
    cope_positions,
    forgetting_bias,
    forgetting_bias_per_row,
    pope_cos_sin,
)
from ._interop import (
    from_cos_sin_cache,
    from_freqs_cis,
    from_rotation_matrices,
    rotation_matrices,
    to_cos_sin_cache,
    to_freqs_cis,
)
from ._learned import learned_init, lookup, resample, resample_grids, resize_relative_table
from ._packed import packed_mask, packed_positions
from ._vision import CoordAugmentation, augment_coords, coord_augmentation, patch_coords
from ._relative import (
    deberta_bucket,
    deberta_scores,
    log_relative_coords,
    rel_shift,
    relative_bias,
    relative_index_nd,
    relative_positions,
    shaw_index,
    shaw_key_scores,
    shaw_value_term,
    t5_bias,
    t5_bucket,
    transformer_xl_scores,
)

__version__ = "0.1.0"

__all__ = sorted(
    _rope.__all__  # rotary, its scalings and the transformers model plans
    + [
        "decode_sinusoidal",
        "grid_coords",
        "sinusoidal",
        "sinusoidal_nd",
        "timestep_embedding",
        # converters to and from other libraries' rotary tables
        "from_cos_sin_cache",
        "from_freqs_cis",
        "from_rotation_matrices",
        "rotation_matrices",
        "to_cos_sin_cache",
        "to_freqs_cis",
        # model plans and positions (diffusers)
        "DiffusersPositions",
        "from_diffusers_config",
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
        # data-dependent
        "apply_pope",
        "content_relative_bias",
        "cope_bias",
        "cope_positions",
        "forgetting_bias",
        "forgetting_bias_per_row",
        "pope_cos_sin",
        # convolutional
        "conv_positional",
        "conv_positional_2d",
        # learned
        "learned_init",
        "lookup",
        "resample",
        "resample_grids",
        "resize_relative_table",
        # vision: per-sample patch grids, coordinate augmentation
        "CoordAugmentation",
        "augment_coords",
        "coord_augmentation",
        "patch_coords",
        # packed sequences
        "packed_mask",
        "packed_positions",
        # relative
        "deberta_bucket",
        "deberta_scores",
        "log_relative_coords",
        "rel_shift",
        "relative_bias",
        "relative_index_nd",
        "relative_positions",
        "shaw_index",
        "shaw_key_scores",
        "shaw_value_term",
        "t5_bias",
        "t5_bucket",
        "transformer_xl_scores",
    ]
)


def _unbuilt_source_tree() -> "tuple[str, str | None] | None":
    """``(this package's directory, a directory with built kernels or None)`` when arrpos is
    imported from a source checkout (``setup.py`` and ``csrc/`` beside it) whose compiled CPU
    kernels are not built: Python puts the current directory first on ``sys.path``, so after
    ``pip install .`` a command run from the checkout imports the sources, not the install."""
    import os
    import sys
    from importlib.machinery import EXTENSION_SUFFIXES

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if not (os.path.isfile(os.path.join(root, "setup.py"))
            and os.path.isdir(os.path.join(root, "csrc"))):
        return None

    def built(pkg: str) -> bool:
        return any(os.path.isfile(os.path.join(pkg, "_backends", "_cpu" + suffix))
                   for suffix in EXTENSION_SUFFIXES)

    if built(here):
        return None
    for entry in sys.path:  # an installed copy that the source tree shadows
        other = os.path.join(os.path.abspath(entry or os.curdir), "arrpos")
        if os.path.normcase(other) != os.path.normcase(here) and built(other):
            return here, other
    return here, None


def _warn_unbuilt_source_tree() -> None:
    import os

    found = _unbuilt_source_tree()
    if found is None or found[1] is None or os.environ.get("ARRPOS_NO_EXTENSIONS"):
        return  # only the trap: a built install elsewhere, shadowed by the sources
    import warnings

    warnings.warn_explicit(  # once per process: at the first import
        f"arrpos is imported from its source tree ({found[0]}), where the compiled kernels are "
        f"not built, not from the installed copy that has them ({found[1]}): NumPy and torch "
        "CPU calls run the generic code, 10-80x slower. Run from another directory, or build "
        "the checkout in place with: pip install -e .", RuntimeWarning, "arrpos", 0,
        module="arrpos")


_warn_unbuilt_source_tree()

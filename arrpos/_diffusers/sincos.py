"""Diffusers transformers that add a fixed sincos table to their patch tokens.

diffusers' ``get_2d_sincos_pos_embed`` lays a table out as ``[sincos(x), sincos(y)]`` (the
column coordinate first, each half ``sinusoidal(..., layout="split")``) over a grid
``arange(n) / (n / base_size) / interpolation_scale``; ``PatchEmbed`` with
``pos_embed_max_size`` crops the centre of a fixed ``max x max`` table (SD3), without it
recomputes the table for the latent's grid (DiT, PixArt). The ids here are those coordinates,
``(x, y)`` per token in row-major order.
"""
from __future__ import annotations

import numpy as np

from .spec import Chunk, Spec, grid

__all__ = ["BUILDERS", "REFUSED", "cogvideox_sincos"]


def _xy(rows, cols):
    """``(x, y)`` per token, rows outermost (``meshgrid(grid_w, grid_h, indexing="xy")``)."""
    return grid(rows, cols)[:, ::-1].copy()


def _halves(dim):
    return (Chunk(0, dim // 2), Chunk(1, dim // 2))


def _patch_embed(r, dim, *, base, interpolation, max_size=None, order=""):
    """embeddings.py ``PatchEmbed``: a crop of the ``max_size`` table (``pos_embed_max_size``),
    else the table of the latent's own grid (``get_2d_sincos_pos_embed(grid_size=(h, w))``)."""
    if dim % 4:
        raise r.fail(f"the embedding width {dim} must be divisible by 4 (two sincos halves)")

    def ids(*, height, width):
        if max_size:
            if height > max_size or width > max_size:
                raise ValueError(f"{r.name}: height and width must be <= pos_embed_max_size "
                                 f"{max_size}, got {height} x {width}")
            top, left = (max_size - height) // 2, (max_size - width) // 2
            step = max_size / base * interpolation
            return _xy((top + np.arange(height)) / step, (left + np.arange(width)) / step)
        return _xy(np.arange(height) / (height / base) / interpolation,
                   np.arange(width) / (width / base) / interpolation)
    return Spec(r.name, "sincos", ids, 2, _halves(dim),
                order=order or "image tokens, rows outermost; ids are (x, y)")


def _inner(r, heads=16, head=88):
    return r.int("num_attention_heads", heads) * r.int("attention_head_dim", head)


def _sd3(r):
    """transformer_sd3.py: ``PatchEmbed(pos_embed_max_size=96)``, base ``sample_size //
    patch_size``, interpolation 1."""
    patch = r.int("patch_size", 2)
    return _patch_embed(r, _inner(r, 18, 64), base=r.int("sample_size", 128) // patch,
                        interpolation=1.0, max_size=r.int("pos_embed_max_size", 96))


def _dit(r):
    """dit_transformer_2d.py: ``PatchEmbed`` of the latent grid, base ``sample_size //
    patch_size``, interpolation 1."""
    return _patch_embed(r, _inner(r, 16, 72), base=r.int("sample_size", 32) // r.int(
        "patch_size", 2), interpolation=1.0)


def _pixart(r, heads=16, head=72, sample=128):
    """pixart_transformer_2d.py / transformer_2d.py: interpolation ``interpolation_scale`` or
    ``max(sample_size // 64, 1)``."""
    if r.get("patch_size", 2 if sample else None) is None or r.get("sample_size", sample) is None:
        raise r.fail("without patch_size and sample_size the model takes continuous or "
                     "discrete inputs: it adds no positional encoding")
    sample = r.int("sample_size", sample)
    interp = r.get("interpolation_scale", None)
    interp = max(sample // 64, 1) if interp is None else r.real("interpolation_scale", None)
    return _patch_embed(r, _inner(r, heads, head), base=sample // r.int("patch_size", 2),
                        interpolation=interp)


def _latte(r):
    """latte_transformer_3d.py: the ``PatchEmbed`` table of each frame's tokens (interpolation
    ``max(sample_size // 64, 1)``). Its temporal table, added across frames, is
    ``sinusoidal(arange(video_length), dim, layout="split")``."""
    sample = r.int("sample_size", 64)
    if r.get("patch_size", None) is None:
        raise r.fail("patch_size is None: the model cannot patchify (the released checkpoint "
                     "uses 2)")
    return _patch_embed(r, _inner(r, 16, 88), base=sample // r.int("patch_size", None),
                        interpolation=float(max(sample // 64, 1)),
                        order="one frame's tokens, rows outermost; ids are (x, y)")


def _cogview3plus(r):
    """embeddings.py ``CogView3PlusPatchEmbed``: the top-left ``h x w`` of a
    ``pos_embed_max_size`` table with base ``pos_embed_max_size`` (ids ``(j, i)``); the text
    tokens before the image get zeros."""
    size = r.int("pos_embed_max_size", 128)
    dim = _inner(r, 64, 40)

    def ids(*, height, width):
        if height > size or width > size:
            raise ValueError(f"{r.name}: height and width must be <= pos_embed_max_size {size}, "
                             f"got {height} x {width}")
        return _xy(np.arange(height), np.arange(width))
    return Spec(r.name, "sincos", ids, 2, _halves(dim),
                order="image tokens (the text tokens before them get zeros); ids are (x, y)")


def _sana(r):
    """sana_transformer.py: a ``PatchEmbed`` table only when ``interpolation_scale`` is set."""
    if r.get("interpolation_scale", None) is None:
        raise r.fail("interpolation_scale is None: the model adds no positional encoding "
                     "(Sana is position-free; PatchEmbed(pos_embed_type=None))")
    sample, patch = r.int("sample_size", 32), r.int("patch_size", 1)
    return _patch_embed(r, _inner(r, 70, 32), base=sample // patch,
                        interpolation=r.real("interpolation_scale", None))


def cogvideox_sincos(r, dim):
    """embeddings.py ``CogVideoXPatchEmbed._get_positional_embeddings``: per video token
    ``[sincos(t) (d/4), sincos(x) (3d/8), sincos(y) (3d/8)]`` of ``t / temporal_interpolation``
    and ``x, y / spatial_interpolation``; the ``max_text_seq_length`` text tokens before the
    video get zeros."""
    if dim % 16:
        raise r.fail(f"the embedding width {dim} must be divisible by 16")
    s = r.real("spatial_interpolation_scale", 1.875)
    t = r.real("temporal_interpolation_scale", 1.0)

    def ids(*, frames, height, width):
        g = grid(np.arange(frames) / t, np.arange(height) / s, np.arange(width) / s)
        return g[:, [0, 2, 1]]
    return Spec(r.name, "sincos", ids, 3, (Chunk(0, dim // 4), Chunk(1, dim // 8 * 3),
                                           Chunk(2, dim // 8 * 3)),
                order="video tokens (the text tokens before them get zeros); ids are (t, x, y)")


BUILDERS = {
    "SD3Transformer2DModel": _sd3,
    "DiTTransformer2DModel": _dit,
    "PixArtTransformer2DModel": _pixart,
    "Transformer2DModel": lambda r: _pixart(r, 8, 64, None),
    "LatteTransformer3DModel": _latte,
    "CogView3PlusTransformer2DModel": _cogview3plus,
    "SanaTransformer2DModel": _sana,
}

REFUSED = {
    "AuraFlowTransformer2DModel": "its position table is a learned weight (AuraFlowPatchEmbed."
                                  "pos_embed), not a rotary or sincos encoding",
}

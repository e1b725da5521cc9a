"""What a diffusers transformer's positional module computes, as data: the pieces the family
modules (``image``, ``video``, ``seq``, ``sincos``) describe each model class with, and the
host-side helpers they share.

A model is a :class:`Spec`: the keywords of its position ids and the function that builds
them (NumPy float64 on the host: ids are small and exact there), then either rotary
:class:`Block` s (frequencies, the coordinate each turns with, the pairing) or sincos
:class:`Chunk` s. ``positions`` turns a Spec into tables with arrpos' own
``rope_cos_sin`` / ``apply_rope`` / ``sinusoidal``.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .._rope import RoPE

__all__ = ["Block", "Chunk", "Refusal", "Spec", "Reader", "powers", "grid", "axis_blocks"]


class Refusal(ValueError):
    """A config that arrpos cannot reproduce exactly (the message names what is missing)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """Rotary features that rotate together: ``inv_freq[i]`` turns with coordinate
    ``axes[i]``; ``layout`` lays the table out as ``rope_cos_sin`` does ("interleaved": pairs
    ``(2i, 2i+1)``; "half": ``(i, i + F)`` within this block). ``pairs``: how the model's apply
    function pairs the features of ``x``, when not as its table (ERNIE-Image).
    """

    inv_freq: tuple
    axes: tuple
    layout: str = "interleaved"
    pairs: str | None = None

    @property
    def rotate(self) -> str:
        return self.pairs or self.layout

    @property
    def width(self) -> int:
        return 2 * len(self.inv_freq)


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Sincos features: ``sinusoidal(coords[..., axis], width, layout="split")``."""

    axis: int
    width: int


@dataclasses.dataclass(frozen=True)
class Spec:
    """One model class's positional encoding.

    ``ids(**sizes)`` builds the position ids (float64, shape ``(tokens, n_axes)``) from the
    keywords its signature names. ``transform``: per coordinate ``(scale, shift)`` applied to the
    ids before the angles (LTX turns by ``w * (2 g - 1)``). ``lead``: leading features that pass
    through (cos 1, sin 0: LTX's front padding). ``head_dim``: the features of ``x`` per head
    (the rotated ones first, the rest pass through). ``per_head``: the rotary spans all heads
    (LTX-2 "split": head ``h`` takes the ``h``-th slice of the frequencies).
    """

    class_name: str
    kind: str                      # "rope" or "sincos"
    ids: Callable
    n_axes: int
    blocks: tuple = ()             # Block s (rope) or Chunk s (sincos)
    head_dim: int | None = None
    lead: int = 0
    transform: tuple | None = None
    attention_factor: float = 1.0
    heads: int | None = None       # per-head frequencies (LTX-2 "split")
    rope: RoPE | None = None       # a 1-D arrpos RoPE instead of blocks (OmniGen's LongRoPE)
    order: str = ""                # how the ids are laid out, for the reader

    @property
    def width(self) -> int:
        """Features the tables cover (rotated plus leading pass-through; sincos: the table)."""
        if self.rope is not None:
            return self.rope.rotary_dim
        return self.lead + sum(b.width for b in self.blocks)


# --- reading a config.json dict --------------------------------------------------------------

class Reader:
    """``config[key]`` with the model class's default, checked, every error naming the class."""

    def __init__(self, config: Mapping, name: str):
        self.config, self.name = config, name

    def fail(self, message: str) -> Refusal:
        return Refusal(f"{self.name}: {message}")

    def get(self, key, default):
        value = self.config.get(key, default)
        return default if value is None and default is not None else value

    def int(self, key, default, *, minimum=1):
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            raise self.fail(f"{key} must be an integer >= {minimum}, got {value!r}")
        return int(value)

    def real(self, key, default, *, positive=True):
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(
                value) or (positive and value <= 0):
            raise self.fail(f"{key} must be a finite {'positive ' if positive else ''}number, "
                            f"got {value!r}")
        return float(value)

    def ints(self, key, default, *, length=None, even=False):
        value = self.get(key, default)
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or any(
                isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0
                for v in value):
            raise self.fail(f"{key} must be a list of non-negative integers, got {value!r}")
        if length is not None and len(value) not in np.atleast_1d(length):
            raise self.fail(f"{key} must have {length} entries, got {list(value)}")
        if even and any(v % 2 for v in value):
            raise self.fail(f"{key} must be even (pairs of features rotate), got {list(value)}")
        return tuple(int(v) for v in value)

    def choice(self, key, default, allowed):
        value = self.get(key, default)
        if value not in allowed:
            raise self.fail(f"{key} must be one of {sorted(map(str, allowed))}, got {value!r}")
        return value

    def patch(self, key, default, length=3):
        """A patch size: an int (every spatial axis) or a tuple."""
        value = self.get(key, default)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        return self.ints(key, default, length=length)

    def even(self, value, what):
        if value % 2 or value <= 0:
            raise self.fail(f"{what} = {value} must be even and positive (features rotate in "
                            "pairs)")
        return value


# --- frequencies ------------------------------------------------------------------------------

def powers(dim: int, theta: float, *, scale: float = 1.0) -> tuple:
    """``1 / theta ** (arange(0, dim, 2) / dim) / scale``: the rotary frequencies of one axis
    (diffusers' ``get_1d_rotary_pos_embed``, transformers' default rope), float64."""
    return tuple(float(v) for v in 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
                 / scale)


def axis_blocks(dims, theta, layout="interleaved", *, joint=False, scale=None):
    """Frequencies of one axis per entry of ``dims`` (``powers(dims[a], theta)``), axis ``a``.

    ``joint=False``: one :class:`Block` per axis (each axis pairs its own features, as a
    per-axis concatenation of ``get_1d_rotary_pos_embed`` tables does); ``joint=True``: one
    block over all axes (the concatenated angles paired as one table: ``cat([f, f])`` of the
    whole width in "half").
    """
    thetas = theta if isinstance(theta, tuple) else (theta,) * len(dims)
    scales = scale or (1.0,) * len(dims)
    blocks = [Block(powers(d, t, scale=s), (a,) * (d // 2), layout)
              for a, (d, t, s) in enumerate(zip(dims, thetas, scales)) if d]
    if joint:
        return (Block(sum((b.inv_freq for b in blocks), ()), sum((b.axes for b in blocks), ()),
                      layout),)
    return tuple(blocks)


# --- ids --------------------------------------------------------------------------------------

def grid(*axes: Sequence[float] | np.ndarray) -> np.ndarray:
    """Every combination of the coordinates ``axes`` (1-D arrays), the last varying fastest:
    shape ``(prod(len), len(axes))``, float64 (``torch.meshgrid(..., indexing="ij")`` stacked
    and flattened, the order patch tokens take in every model here)."""
    mesh = np.meshgrid(*[np.asarray(a, dtype=np.float64) for a in axes], indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=-1)


def constant(n: int, value: float, n_axes: int) -> np.ndarray:
    """``n`` ids with every coordinate ``value`` (text tokens of Flux-like models: zeros)."""
    return np.full((n, n_axes), float(value))


def centred(n: int) -> np.ndarray:
    """``-(n - n // 2) .. n // 2 - 1``: Qwen-Image's centred grid (``scale_rope``)."""
    return np.arange(-(n - n // 2), n // 2, dtype=np.float64)

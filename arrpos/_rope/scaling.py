"""RoPE frequency scalings (transformers 5 ``modeling_rope_utils``), computed on the host in float64.

Each scaling is an immutable value object: equal by value, hashable, with a readable repr, its
parameters checked when it is made. ``frequencies(dim, base, seq_len)`` returns the float64
frequencies of a rotary width ``dim`` and the attention factor, by the formulas of
transformers' ``ROPE_INIT_FUNCTIONS`` (docs/reference.md lists them with their traps).
The unscaled frequencies ``base ** (-2i / dim)`` are correctly rounded (``arrpos._exact``).

Every subclass of :class:`RopeScaling` registers itself when it is defined: under its
``rope_type`` in ``SCALINGS`` (what ``RoPE.from_hf_config`` reads), and in the list that the
messages and docstrings naming the scalings are made from (:func:`scaling_names`). A new
scaling is one class here plus its name in ``__all__`` (arrpos exports this module's
``__all__``; ``tests/test_rope_config.py`` checks that every class defined here is in it).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import textwrap
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._exact import power_frequencies
from .._lib import check_bool, check_positive_int, check_real_scalar

# the scaling classes arrpos exports (``from .scaling import *`` in the wing and in arrpos)
__all__ = [
    "AxialScaling",
    "DynamicNTKScaling",
    "FixedNTKScaling",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "MixedNTKScaling",
    "NTKScaling",
    "ProportionalScaling",
    "YarnScaling",
]


def default_inv_freq(dim: int, base: float) -> np.ndarray:
    base = float(base)
    if not (math.isfinite(base) and base > 0.0):
        raise ValueError(f"the rotary base after scaling must be finite and > 0, got {base}")
    return np.array(power_frequencies(dim // 2, dim, base)[0], dtype=np.float64)


def _ntk_base(base: float, stretch: float, dim: int, name: str) -> float:
    """``base * stretch ** (dim / (dim - 2))``, the NTK-aware base; ``name`` is the parameter
    that made ``stretch`` when the result is not a finite float."""
    try:
        new_base = base * stretch ** (dim / (dim - 2))
    except OverflowError:
        new_base = math.inf
    if not math.isfinite(new_base):
        raise ValueError(f"{name} or base too large: the NTK-scaled base {base} * {stretch} ** "
                         f"({dim} / {dim - 2}) is not a finite float")
    return new_base


def _factor(value: float, name: str) -> float:
    value = check_real_scalar(value, name)
    if value < 1.0:
        raise ValueError(f"{name} must be >= 1 (a scaling stretches the context), got {value}")
    return value


def _optional_real(value: float | None, name: str, *, positive: bool = False) -> float | None:
    return None if value is None else check_real_scalar(value, name, positive=positive)


# transformers rope_type -> scaling class; filled by RopeScaling.__init_subclass__
SCALINGS: dict = {}
# every scaling class, in the order defined (weakly: a class made and dropped, as in a test,
# leaves the list); filled by RopeScaling.__init_subclass__
_DEFINED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_ORDER = itertools.count()


def _need(rope_parameters, key, rope_type):
    value = rope_parameters.get(key)
    if value is None:
        raise ValueError(f"rope_type {rope_type!r} needs {key} in the config")
    return value


def _max_positions(config, rope_type):
    value = config.get("max_position_embeddings")
    if value is None:
        raise ValueError(f"rope_type {rope_type!r} needs max_position_embeddings in the config")
    return value


def original_max_positions(rope_parameters, config, rope_type):
    """``original_max_position_embeddings``: a top-level value wins, as in transformers."""
    if config.get("original_max_position_embeddings") is not None:
        return config["original_max_position_embeddings"]
    value = rope_parameters.get("original_max_position_embeddings",
                                config.get("max_position_embeddings"))
    if value is None:
        raise ValueError(f"rope_type {rope_type!r} needs max_position_embeddings or "
                         "original_max_position_embeddings in the config")
    return value


class RopeScaling:
    """Base class of the RoPE scalings; subclasses are frozen dataclasses.

    A subclass describes itself: ``rope_type`` (transformers' name, registered in
    ``SCALINGS`` when set), ``seq_dependent`` (whether the frequencies read ``seq_len``),
    ``full_width`` (the table stays ``head_dim`` wide whatever ``partial_rotary_factor``),
    ``from_config(rope_parameters, config)``, its constructor from a transformers config, and
    ``frequencies(dim, base, seq_len)``, its rule.
    """

    rope_type: str = ""
    seq_dependent: bool = False
    full_width: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _DEFINED[next(_ORDER)] = cls
        if cls.__dict__.get("rope_type"):
            SCALINGS[cls.rope_type] = cls

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],  # pragma: no cover - abstract
                    config: Mapping[str, Any]) -> RopeScaling:
        """The scaling of ``rope_parameters`` (one layer's dict) in a config.json ``config``."""
        raise NotImplementedError

    def frequencies(self, dim: int, base: float,  # pragma: no cover - abstract
                    seq_len: int | None) -> tuple[np.ndarray, float]:
        """``(inv_freq, attention_factor)``: the float64 NumPy frequencies of a rotary width
        ``dim`` (even, validated) with ``base`` at ``seq_len`` (None: as at initialisation)."""
        raise NotImplementedError

    def _set(self, name, value):  # frozen dataclass: normalise fields in __post_init__
        object.__setattr__(self, name, value)


@dataclasses.dataclass(frozen=True)
class LinearScaling(RopeScaling):
    """Position interpolation (kaiokendev; Chen et al. 2023): ``inv_freq / factor``.

    transformers ``rope_type="linear"``.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.LinearScaling(4)
    LinearScaling(factor=4.0)
    >>> arrpos.rope_frequencies(8, scaling=arrpos.LinearScaling(4))[0].tolist()
    [0.25, 0.025, 0.0025, 0.00025]
    """

    factor: float
    rope_type = "linear"

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],
                    config: Mapping[str, Any]) -> LinearScaling:
        return cls(_need(rope_parameters, "factor", cls.rope_type))

    def __post_init__(self):
        self._set("factor", _factor(self.factor, "factor"))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        return default_inv_freq(dim, base) / self.factor, 1.0


@dataclasses.dataclass(frozen=True)
class DynamicNTKScaling(RopeScaling):
    """Dynamic NTK-aware scaling (/u/bloc97, /u/emozilla): a larger base past ``max_positions``.

    For ``L = max(seq_len, max_positions)``:
    ``base' = base * (factor * L / max_positions - (factor - 1)) ** (dim / (dim - 2))``; at or
    below ``max_positions`` (and with ``seq_len=None``) the frequencies are the default ones.
    transformers ``rope_type="dynamic"`` (which uses ``max_position_embeddings``).
    """

    factor: float
    max_positions: int
    rope_type = "dynamic"
    seq_dependent = True

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],
                    config: Mapping[str, Any]) -> DynamicNTKScaling:
        return cls(_need(rope_parameters, "factor", cls.rope_type),
                   _max_positions(config, cls.rope_type))

    def __post_init__(self):
        self._set("factor", _factor(self.factor, "factor"))
        self._set("max_positions", check_positive_int(self.max_positions, "max_positions"))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        if dim < 4:
            raise ValueError(f"dim must be >= 4 for DynamicNTKScaling (exponent dim/(dim-2)), "
                             f"got {dim}")
        length = self.max_positions if seq_len is None else max(seq_len, self.max_positions)
        stretch = (self.factor * length / self.max_positions) - (self.factor - 1)
        return default_inv_freq(dim, _ntk_base(base, stretch, dim, "factor")), 1.0


# --- static NTK-aware base rescaling (rotary-embedding-torch, x-transformers) ---------------


@dataclasses.dataclass(frozen=True)
class NTKScaling(RopeScaling):
    """Static NTK-aware base rescaling (/u/bloc97): ``base' = base * factor ** (dim / (dim - 2))``.

    rotary-embedding-torch ``RotaryEmbedding(theta_rescale_factor=factor)`` and x-transformers
    ``RotaryEmbedding(base_rescale_factor=factor)``. Unlike :class:`DynamicNTKScaling` it does
    not depend on ``seq_len``: the larger base applies at every length. transformers has no
    ``rope_type`` for it (its ``"dynamic"`` is the sequence-dependent form).

    Examples
    --------
    >>> import arrpos
    >>> arrpos.NTKScaling(4)
    NTKScaling(factor=4.0)
    >>> inv, _ = arrpos.rope_frequencies(4, base=100.0, scaling=arrpos.NTKScaling(4))
    >>> inv.tolist()                                   # base' = 100 * 4 ** 2 = 1600
    [1.0, 0.025]
    """

    factor: float
    # no rope_type: transformers has no static NTK (its "dynamic" reads seq_len), so no config
    # names it and SCALINGS leaves it out

    def __post_init__(self):
        self._set("factor", _factor(self.factor, "factor"))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        if dim < 4:
            raise ValueError(f"dim must be >= 4 for NTKScaling (exponent dim/(dim-2)), got {dim}")
        return default_inv_freq(dim, _ntk_base(base, self.factor, dim, "factor")), 1.0


# --- vLLM's rope_type "ntk" (NTKScalingRotaryEmbedding, https://kexue.fm/archives/9706) -----
# No rope_type here either: transformers 5.24 has no "ntk", so a config.json naming it is not
# read as transformers reads it; build these by hand for checkpoints served by vLLM.


@dataclasses.dataclass(frozen=True)
class FixedNTKScaling(RopeScaling):
    """vLLM's fixed NTK scaling (``rope_type: "ntk"`` without ``mixed_b``):
    ``inv[i] = (base * factor) ** (-2i / dim) / factor ** (2 / dim)``.

    vLLM ``NTKScalingRotaryEmbedding`` (``ntk_scaling_rope.py``). The larger base alone is
    :class:`NTKScaling`'s rule with another exponent; the extra ``factor ** (2 / dim)`` divides
    every frequency, the highest included. Independent of ``seq_len``.

    Examples
    --------
    >>> import arrpos
    >>> inv, _ = arrpos.rope_frequencies(4, base=100.0, scaling=arrpos.FixedNTKScaling(4))
    >>> inv.tolist()                                   # (400 ** -[0, 0.5]) / 4 ** 0.5
    [0.5, 0.025]
    """

    factor: float

    def __post_init__(self):
        self._set("factor", _factor(self.factor, "factor"))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        try:
            scaled = base * self.factor
        except OverflowError:  # pragma: no cover - float * float does not raise
            scaled = math.inf
        if not math.isfinite(scaled):
            raise ValueError(f"factor or base too large: base * factor = {base} * "
                             f"{self.factor} is not a finite float")
        return default_inv_freq(dim, scaled) / self.factor ** (2.0 / dim), 1.0


@dataclasses.dataclass(frozen=True)
class MixedNTKScaling(RopeScaling):
    """vLLM's NTK-mixed scaling (``rope_type: "ntk"`` with ``mixed_b``): frequency ``i`` of the
    unscaled ``base ** (-2i / dim)`` divided by ``lambda_i = exp(a * (i + 1) ** mixed_b)``,
    ``a = ln(factor) / (dim / 2) ** mixed_b``, so the lowest frequency is divided by ``factor``
    and the highest by ``factor ** ((2 / dim) ** mixed_b)``.

    vLLM ``NTKScalingRotaryEmbedding(mixed_b=...)`` (``ntk_scaling_rope.py``; Su Jianlin,
    kexue.fm 9706). Independent of ``seq_len``.

    Examples
    --------
    >>> import arrpos
    >>> inv, _ = arrpos.rope_frequencies(4, base=100.0,
    ...                                  scaling=arrpos.MixedNTKScaling(4, mixed_b=2.0))
    >>> [round(v, 12) for v in inv.tolist()]           # [1, 0.1] / 4 ** ([1, 4] / 4)
    [0.707106781187, 0.025]
    """

    factor: float
    mixed_b: float

    def __init__(self, factor: float, mixed_b: float) -> None:
        self._set("factor", _factor(factor, "factor"))
        self._set("mixed_b", check_real_scalar(mixed_b, "mixed_b", positive=True))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        half = dim // 2
        a = math.log(self.factor) / half ** self.mixed_b
        lam = np.exp(a * np.arange(1, half + 1, dtype=np.float64) ** self.mixed_b)
        return default_inv_freq(dim, base) / lam, 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclasses.dataclass(frozen=True)
class YarnScaling(RopeScaling):
    """YaRN (Peng et al. 2023) as transformers 5 computes it (``rope_type="yarn"``).

    Frequencies ramp from interpolated (``inv / factor``) to unchanged between the correction
    dimensions of ``beta_fast`` and ``beta_slow`` rotations over ``original_max_positions``
    (floored/ceiled when ``truncate``). The attention factor is ``attention_factor`` if given,
    else ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` when both are set and
    non-zero (DeepSeek), else ``0.1 ln(factor) + 1``.
    """

    factor: float
    original_max_positions: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    rope_type = "yarn"

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],
                    config: Mapping[str, Any]) -> YarnScaling:
        rp = rope_parameters
        orig = original_max_positions(rp, config, cls.rope_type)
        factor = rp.get("factor")
        if factor is None:  # DeepSeek-V3: the ratio of the context lengths
            factor = _max_positions(config, cls.rope_type) / orig
        return cls(factor, orig, beta_fast=rp.get("beta_fast") or 32.0,
                   beta_slow=rp.get("beta_slow") or 1.0, mscale=rp.get("mscale"),
                   mscale_all_dim=rp.get("mscale_all_dim"),
                   attention_factor=rp.get("attention_factor"),
                   truncate=bool(rp.get("truncate", True)))

    def __init__(self, factor: float, original_max_positions: int, *, beta_fast: float = 32.0,
                 beta_slow: float = 1.0, mscale: float | None = None,
                 mscale_all_dim: float | None = None, attention_factor: float | None = None,
                 truncate: bool = True) -> None:
        # an explicit __init__ makes everything after original_max_positions keyword-only
        self._set("factor", _factor(factor, "factor"))
        self._set("original_max_positions",
                  check_positive_int(original_max_positions, "original_max_positions"))
        beta_fast = check_real_scalar(beta_fast, "beta_fast", positive=True)
        beta_slow = check_real_scalar(beta_slow, "beta_slow", positive=True)
        if beta_fast < beta_slow:
            raise ValueError(f"beta_fast must be >= beta_slow, got beta_fast={beta_fast}, "
                             f"beta_slow={beta_slow}")
        self._set("beta_fast", beta_fast)
        self._set("beta_slow", beta_slow)
        self._set("mscale", _optional_real(mscale, "mscale"))
        self._set("mscale_all_dim", _optional_real(mscale_all_dim, "mscale_all_dim"))
        self._set("attention_factor",
                  _optional_real(attention_factor, "attention_factor", positive=True))
        self._set("truncate", check_bool(truncate, "truncate"))

    def _attention_factor(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return float(yarn_mscale(self.factor, self.mscale)
                         / yarn_mscale(self.factor, self.mscale_all_dim))
        return yarn_mscale(self.factor)

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        def correction_dim(rotations):
            return (dim * math.log(self.original_max_positions / (rotations * 2 * math.pi))) / (
                2 * math.log(base)
            )

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)  # dim - 1, not dim/2 - 1: as transformers
        if low == high:
            high += 0.001  # transformers' guard against a zero-width ramp
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        extrapolation = 1.0 - ramp
        inv = default_inv_freq(dim, base)
        inv = (inv / self.factor) * (1.0 - extrapolation) + inv * extrapolation
        return inv, self._attention_factor()


def _factor_list(values: Sequence[float], name: str) -> tuple:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    out = tuple(check_real_scalar(v, f"{name}[{i}]", positive=True)
                for i, v in enumerate(list(values)))
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


@dataclasses.dataclass(frozen=True)
class LongRopeScaling(RopeScaling):
    """Phi-3 LongRoPE (``rope_type="longrope"``): per-frequency divisors, short or long set.

    ``inv[i] = base ** (-2i/dim) / ext[i]`` with ``ext = long_factor`` when
    ``seq_len > original_max_positions`` (strictly; ``seq_len`` is the largest position + 1),
    else ``short_factor``. ``factor`` defaults to ``max_positions / original_max_positions``
    (1 when ``max_positions`` is not given either); the attention factor defaults to
    ``sqrt(1 + ln(factor) / ln(original_max_positions))`` (1 when ``factor <= 1``). Phi-3.5-MoE
    gives the attention factor of each regime instead: ``long_mscale`` past
    ``original_max_positions``, else ``short_mscale`` (transformers ``PhimoeRotaryEmbedding``).
    """

    short_factor: tuple
    long_factor: tuple
    original_max_positions: int
    factor: float | None = None
    max_positions: int | None = None
    attention_factor: float | None = None
    short_mscale: float | None = None
    long_mscale: float | None = None
    rope_type = "longrope"
    seq_dependent = True

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],
                    config: Mapping[str, Any]) -> LongRopeScaling:
        rp = rope_parameters
        name = cls.rope_type
        return cls(_need(rp, "short_factor", name), _need(rp, "long_factor", name),
                   original_max_positions(rp, config, name), factor=rp.get("factor"),
                   max_positions=config.get("max_position_embeddings"),
                   attention_factor=rp.get("attention_factor"),
                   short_mscale=rp.get("short_mscale"), long_mscale=rp.get("long_mscale"))

    def __init__(self, short_factor: Sequence[float], long_factor: Sequence[float],
                 original_max_positions: int, *, factor: float | None = None,
                 max_positions: int | None = None, attention_factor: float | None = None,
                 short_mscale: float | None = None, long_mscale: float | None = None) -> None:
        short = _factor_list(short_factor, "short_factor")
        long = _factor_list(long_factor, "long_factor")
        if len(short) != len(long):
            raise ValueError(f"short_factor and long_factor must have the same length, got "
                             f"{len(short)} and {len(long)}")
        self._set("short_factor", short)
        self._set("long_factor", long)
        self._set("original_max_positions",
                  check_positive_int(original_max_positions, "original_max_positions"))
        self._set("factor", None if factor is None else _factor(factor, "factor"))
        self._set("max_positions",
                  None if max_positions is None else check_positive_int(max_positions,
                                                                        "max_positions"))
        self._set("attention_factor",
                  _optional_real(attention_factor, "attention_factor", positive=True))
        if (short_mscale is None) != (long_mscale is None):
            raise ValueError("short_mscale and long_mscale must be given together")
        self._set("short_mscale", _optional_real(short_mscale, "short_mscale", positive=True))
        self._set("long_mscale", _optional_real(long_mscale, "long_mscale", positive=True))

    def _attention_factor(self, use_long: bool) -> float:
        short, long = self.short_mscale, self.long_mscale  # given together or not at all
        if short is not None and long is not None:
            return long if use_long else short
        if self.attention_factor is not None:
            return self.attention_factor
        factor = self.factor
        if factor is None:
            factor = (1.0 if self.max_positions is None
                      else self.max_positions / self.original_max_positions)
        if factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(factor) / math.log(self.original_max_positions))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        if len(self.short_factor) != dim // 2:
            raise ValueError(
                f"short_factor and long_factor must have dim // 2 = {dim // 2} entries for "
                f"dim={dim}, got {len(self.short_factor)}"
            )
        use_long = seq_len is not None and seq_len > self.original_max_positions
        ext = np.array(self.long_factor if use_long else self.short_factor, dtype=np.float64)
        return default_inv_freq(dim, base) / ext, self._attention_factor(use_long)


@dataclasses.dataclass(frozen=True)
class Llama3Scaling(RopeScaling):
    """Llama 3.1 frequency-dependent scaling (``rope_type="llama3"``).

    With wavelength ``wl = 2 pi / inv``: ``wl > original_max_positions / low_freq_factor`` is
    divided by ``factor``, ``wl < original_max_positions / high_freq_factor`` is kept, and the
    band between (boundaries included) is blended with
    ``s = (original_max_positions / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
    ``low_freq_factor == high_freq_factor`` (Llama 4) leaves no band: every frequency is kept
    or divided.
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192
    rope_type = "llama3"

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],
                    config: Mapping[str, Any]) -> Llama3Scaling:
        rp, name = rope_parameters, cls.rope_type
        return cls(_need(rp, "factor", name), _need(rp, "low_freq_factor", name),
                   _need(rp, "high_freq_factor", name),
                   original_max_positions(rp, config, name))

    def __post_init__(self):
        self._set("factor", _factor(self.factor, "factor"))
        low = check_real_scalar(self.low_freq_factor, "low_freq_factor", positive=True)
        high = check_real_scalar(self.high_freq_factor, "high_freq_factor", positive=True)
        if low > high:
            raise ValueError(f"low_freq_factor must be <= high_freq_factor, got "
                             f"low_freq_factor={low}, high_freq_factor={high}")
        self._set("low_freq_factor", low)
        self._set("high_freq_factor", high)
        self._set("original_max_positions",
                  check_positive_int(self.original_max_positions, "original_max_positions"))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        inv = default_inv_freq(dim, base)
        orig = self.original_max_positions
        low_wl, high_wl = orig / self.low_freq_factor, orig / self.high_freq_factor
        wl = 2 * math.pi / inv
        scaled = np.where(wl > low_wl, inv / self.factor, inv)
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        band = self.high_freq_factor - self.low_freq_factor
        if band == 0.0:  # Llama 4: no band; a wavelength exactly on the edge has no value
            if medium.any():
                raise ValueError(f"low_freq_factor == high_freq_factor and a wavelength equals "
                                 f"original_max_positions / low_freq_factor = {low_wl}: the "
                                 "blend is 0 / 0 there")
            return scaled, 1.0
        smooth = (orig / wl - self.low_freq_factor) / band
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        return np.where(medium, smoothed, scaled), 1.0


@dataclasses.dataclass(frozen=True)
class ProportionalScaling(RopeScaling):
    """Gemma-style proportional RoPE (``rope_type="proportional"``).

    The first ``int(partial_rotary_factor * dim // 2)`` frequencies are ``base ** (-2j / dim)``
    (denominator: the whole width ``dim``), the rest zero (those pairs do not turn); all are
    divided by ``factor``. Unlike a partial rotary width, the table stays ``dim`` wide.
    """

    partial_rotary_factor: float
    factor: float = 1.0
    rope_type = "proportional"
    full_width = True  # zero frequencies past the fraction

    @classmethod
    def from_config(cls, rope_parameters: Mapping[str, Any],
                    config: Mapping[str, Any]) -> ProportionalScaling:
        prf = rope_parameters.get("partial_rotary_factor",
                                  config.get("partial_rotary_factor", 1.0))
        return cls(1.0 if prf is None else prf, factor=rope_parameters.get("factor", 1.0))

    def __post_init__(self):
        prf = check_real_scalar(self.partial_rotary_factor, "partial_rotary_factor")
        if not 0.0 <= prf <= 1.0:
            raise ValueError(f"partial_rotary_factor must be in [0, 1], got {prf}")
        self._set("partial_rotary_factor", prf)
        self._set("factor", _factor(self.factor, "factor"))

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        k = int(self.partial_rotary_factor * dim // 2)
        inv = np.zeros(dim // 2, dtype=np.float64)
        inv[:k] = default_inv_freq(dim, base)[:k]
        return inv / self.factor, 1.0


_ARRANGEMENTS = ("blocks", "pairs", "strided")


@dataclasses.dataclass(frozen=True)
class AxialScaling(RopeScaling):
    """The frequencies of axial (2-D / 3-D vision) RoPE: ``n_axes`` coordinates share a width.

    With ``per = dim // n_axes`` and ``f = base ** (-2j / per)`` (``j < per // 2``), the
    ``dim // 2`` frequencies are ``"blocks"``: ``f`` once per axis, one block after the other
    (Qwen2-VL, SAM 2 and most vision towers); ``"pairs"``: each ``f[j]`` repeated ``n_axes``
    times in a row (Kimi-K2.5); ``"strided"``: the 1-D frequencies ``base ** (-2i / dim)`` dealt
    round-robin, axis ``k`` taking ``i % n_axes == k``, one block per axis (Pixtral). Which
    coordinate each frequency turns with is ``RoPE(axes=...)``; ``from_hf_config`` knows both
    for every transformers vision model with ``rope_type: "axial"`` it reproduces. With
    ``turns=True`` the frequencies count turns per unit coordinate (each times ``2 pi``): DINOv3
    turns with patch-centre coordinates in ``[-1, 1]``.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.rope_frequencies(8, base=100.0, scaling=arrpos.AxialScaling(2))[0].tolist()
    [1.0, 0.1, 1.0, 0.1]
    """

    n_axes: int = 2
    arrangement: str = "blocks"
    turns: bool = False

    def __post_init__(self):
        self._set("n_axes", check_positive_int(self.n_axes, "n_axes"))
        if not isinstance(self.turns, bool):
            raise TypeError(f"turns must be a bool, got {type(self.turns).__name__}")
        if self.arrangement not in _ARRANGEMENTS:
            raise ValueError(f"arrangement must be one of {_ARRANGEMENTS}, got "
                             f"{self.arrangement!r}")

    def frequencies(self, dim: int, base: float, seq_len: int | None) -> tuple[np.ndarray, float]:
        inv, att = self._axial_frequencies(dim, base)
        return (inv * (2 * math.pi) if self.turns else inv), att

    def _axial_frequencies(self, dim, base):
        n = self.n_axes
        if dim % (2 * n):
            raise ValueError(f"dim must be a multiple of 2 * n_axes = {2 * n} for "
                             f"AxialScaling, got {dim}")
        if self.arrangement == "strided":
            inv = default_inv_freq(dim, base)
            return np.concatenate([inv[k::n] for k in range(n)]), 1.0
        per_axis = default_inv_freq(dim // n, base)
        if self.arrangement == "pairs":
            return np.repeat(per_axis, n), 1.0
        return np.tile(per_axis, n), 1.0


def scaling_names() -> list:
    """The names of the scaling classes, in the order they were defined."""
    return [cls.__name__ for cls in list(_DEFINED.values())]


def check_scaling(scaling):
    """``scaling``: None or a scaling object (a TypeError naming every scaling class)."""
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise TypeError(f"scaling must be None or one of {', '.join(scaling_names())}; got "
                        f"{type(scaling).__name__}")
    return scaling


def lists_scalings(fn):
    """``fn`` whose docstring line ``{scalings} <rest>`` (8 spaces in: a parameter's
    description) becomes the scaling classes as Sphinx references, ``:class:`LinearScaling`,
    ... or :class:`AxialScaling```, then ``<rest>``, wrapped within 96 columns."""
    refs = [f":class:`{name}`" for name in scaling_names()]
    listed = ", ".join(refs[:-1]) + f" or {refs[-1]}" if len(refs) > 1 else "".join(refs)
    head, marker, tail = (fn.__doc__ or "").partition("        {scalings}")
    if marker:
        rest, _, tail = tail.partition("\n")
        filled = textwrap.fill(listed + rest, width=96, initial_indent=" " * 8,
                               subsequent_indent=" " * 8, break_on_hyphens=False)
        fn.__doc__ = f"{head}{filled}\n{tail}"
    return fn

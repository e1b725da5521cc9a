"""Validation at the public boundary: every message names the argument, what came and what is allowed."""
from __future__ import annotations

import numbers
import operator

from ._namespace import dtype_kind

__all__ = [
    "check_choice",
    "check_dtype_arg",
    "check_even_dim",
    "check_positive_int",
    "check_real_array",
    "check_real_scalar",
]


def check_positive_int(value, name: str, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; bools and non-integral numbers are TypeErrors."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        try:  # 0-d integer arrays and numpy integers
            if isinstance(value, bool):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise TypeError(
                f"{name} must be an integer, got {type(value).__name__} {value!r}"
            ) from None
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_even_dim(dim, name: str = "dim", *, multiple: int = 2) -> int:
    """A positive integer divisible by ``multiple``."""
    dim = check_positive_int(dim, name)
    if dim % multiple:
        raise ValueError(f"{name} must be divisible by {multiple}, got {dim}")
    return dim


def check_real_scalar(value, name: str, *, positive: bool = False, finite: bool = True) -> float:
    """``value`` as a Python float; complex, strings and non-finite values are rejected."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            if isinstance(value, (bool, str, bytes, complex)):
                raise TypeError
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be a real number, got {type(value).__name__} {value!r}"
            ) from None
    value = float(value)
    if finite and value != value or finite and value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def check_choice(value, name: str, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        opts = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {opts}, got {value!r}")
    return value


def check_real_array(xp, x, name: str, *, integer_ok: bool = True, float_ok: bool = True):
    """Reject boolean, complex and (when asked) integer or floating arrays, naming ``name``."""
    dt = x.dtype
    kind = dtype_kind(xp, dt)
    if kind == "real floating":
        if not float_ok:
            raise TypeError(f"{name} must be an integer array, got dtype {dt}")
    elif kind == "integral":
        if not integer_ok:
            raise TypeError(f"{name} must be a floating array, got dtype {dt}")
    elif kind in ("bool", "complex floating"):
        raise TypeError(f"{name} must be a real (integer or floating) array, got dtype {dt}")
    else:
        raise TypeError(f"{name} must be a numeric array, got dtype {dt}")
    return x


def check_dtype_arg(xp, dtype, name: str = "dtype", *, device=None):
    """A requested output dtype: must be a real floating dtype of ``xp`` (None passes)."""
    if dtype is None:
        return None
    try:
        ok = xp.isdtype(dtype, "real floating")
    except Exception:
        ok = False
    if not ok:
        raise TypeError(f"{name} must be a real floating dtype of {xp.__name__}, got {dtype!r}")
    return dtype

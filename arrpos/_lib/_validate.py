"""Validation at the public boundary, in one message style:
``"<name> must be <what is allowed>, got <what was given>"``.

Public modules call only these checks (kinds, dtypes and ndims of arrays; bools; ints with
ranges; enumerated strings; finite reals; output sizes); positions have their own check in
``_arrays`` because it reads values.
"""
from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable
from typing import TypeVar

import numpy as _np

from ._namespace import dtype_kind, has_zero_stride, is_read_only, is_writeable

__all__ = [
    "MAX_DIM",
    "MAX_ELEMENTS",
    "MAX_OFFSET",
    "check_array",
    "check_bool",
    "check_choice",
    "check_dtype_arg",
    "check_even_dim",
    "check_int",
    "check_out_memory",
    "check_positive_int",
    "check_real_array",
    "check_real_scalar",
    "check_shape",
    "check_size",
    "broadcast_leads",
    "describe",
    "not_an_array",
]

# Largest number of elements any function here builds (2**34: 64 GiB of float32); a bigger
# request is a mistake (e.g. ``sinusoidal(4, 2**40)``) and is refused before any work.
MAX_ELEMENTS = 2**34
# Largest feature width (``dim``): the frequencies are computed on the host with decimal
# arithmetic (~50 us each), so 2**17 features take a few seconds once, then are cached.
MAX_DIM = 2**17
# Largest |query_offset|: positions and their distances stay exact in float64 and int64.
MAX_OFFSET = 2**53


def describe(value) -> str:
    """How a value is shown after "got": arrays by dtype and shape, other objects by type."""
    if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, type):
        return f"an array of dtype {value.dtype} and shape {tuple(value.shape)}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_bool(value, name: str) -> bool:
    """``value`` if it is a Python or NumPy bool (not 0/1, not None)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be a bool (True or False), got {describe(value)}")


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int in ``[minimum, maximum]`` (None: unbounded on that side).

    Python and NumPy integers and 0-d integer arrays pass; bools and non-integral numbers are
    TypeErrors, values out of range ValueErrors.
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {describe(value)}") from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "" if minimum is None else f">= {minimum}"
        hi = "" if maximum is None else f"<= {maximum}"
        raise ValueError(f"{name} must be {' and '.join(s for s in (lo, hi) if s)}, got {value}")
    return int(value)


def check_positive_int(value, name: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int >= ``minimum`` (a count or a length)."""
    return check_int(value, name, minimum=minimum, maximum=maximum)


def check_even_dim(dim, name: str = "dim", *, multiple: int = 2) -> int:
    """A positive integer divisible by ``multiple``."""
    dim = check_int(dim, name, minimum=1, maximum=MAX_DIM)
    if dim % multiple:
        raise ValueError(f"{name} must be divisible by {multiple}, got {dim}")
    return dim


def check_size(count: int, name: str, *, limit: int = MAX_ELEMENTS) -> int:
    """Refuse an output of ``count`` elements above ``limit`` before any work is done."""
    if count > limit:
        raise ValueError(
            f"{name} would have {count} elements, more than the limit of {limit} "
            f"(2**{int(math.log2(limit))}); ask for a smaller table"
        )
    return count


def check_real_scalar(value, name: str, *, positive: bool = False, finite: bool = True,
                      minimum: float | None = None, maximum: float | None = None) -> float:
    """``value`` as a Python float; complex, strings, bools and (by default) non-finite values
    are rejected; ``positive``/``minimum``/``maximum`` bound it."""
    if isinstance(value, (bool, str, bytes, complex)) or type(value).__name__ == "bool_":
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    try:
        value = float(value)
    except OverflowError:  # a Python int past float64: a real number, out of range
        raise ValueError(f"{name} must be finite, got {describe(value)} (beyond float64)") from None
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {describe(value)}") from None
    if finite and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if minimum is not None and not value >= minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and not value <= maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


_Choice = TypeVar("_Choice", bound=str)  # the caller's type (a Literal of the choices) comes back


def check_choice(value: _Choice, name: str, allowed: Iterable[str | None]) -> _Choice:
    """``value`` if it is one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        opts = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {opts}, got {describe(value)}")
    return value


# dtype kinds an array may have -> (kinds of dtype_kind, how the message says it)
_KINDS = {
    "real": (("integral", "real floating"), "a real (integer or floating) array"),
    "floating": (("real floating",), "a real floating array"),
    "integer": (("integral",), "an integer array"),
    "bool or integer": (("bool", "integral"), "a bool or integer array"),
    "bool": (("bool",), "a boolean array"),
    "any": (("bool", "integral", "real floating", "complex floating", "other"), "an array"),
}


def not_an_array(value, name: str, what: str) -> TypeError:
    """The TypeError for a non-array where ``what`` (an array kind) is expected. Array-likes
    (lists, tuples, Python scalars) are refused by every function, consistently: they carry no
    library, device or dtype, and arrays are never made behind the caller's back; the message
    says what to write instead."""
    hint = ""
    if isinstance(value, (list, tuple, int, float, complex)) and not isinstance(value, bool):
        hint = (f"; arrays are not made from lists or scalars for you: pass an array of "
                f"your library, e.g. np.asarray({name}) or torch.asarray({name}, device=...)")
    return TypeError(f"{name} must be {what}, got {describe(value)}{hint}")


def broadcast_leads(arrays: dict, keep: int = 2) -> tuple:
    """The broadcast of the leading axes (all but the last ``keep``) of the named arrays, or a
    ValueError naming them with their shapes, in place of the library's "operands could not
    be broadcast" / "size of tensor a must match". Axes of unknown length (lazy arrays) are
    not checked."""
    leads = {n: tuple(a.shape[:a.ndim - keep]) for n, a in arrays.items() if a is not None}
    try:
        return tuple(_np.broadcast_shapes(*leads.values()))
    except ValueError:
        shapes = ", ".join(f"{n} {tuple(a.shape)}" for n, a in arrays.items() if a is not None)
        raise ValueError(f"the leading (batch, heads) axes of {shapes} do not broadcast") from None
    except TypeError:  # unknown lengths
        return ()


def check_shape(value, name: str, *, minimum: int = 1, example: str = "(7, 7)") -> tuple:
    """A sequence of ints, one per axis (each >= ``minimum``), as a non-empty tuple. A bare int
    is a TypeError: it is ambiguous between a 1-D shape and a square one (timm and Swin read
    ``14`` as ``(14, 14)``)."""
    if isinstance(value, (bool, str, bytes, numbers.Number)) or not hasattr(value, "__iter__"):
        raise TypeError(
            f"{name} must be a sequence of ints, one per axis (e.g. {example}; a bare int is "
            f"ambiguous between a 1-D and a square {name}: write (n,) or (n, n)), got "
            f"{describe(value)}"
        )
    value = tuple(value)
    if not value:
        raise ValueError(f"{name} must have at least one axis, got ()")
    return tuple(check_int(v, f"{name}[{i}]", minimum=minimum) for i, v in enumerate(value))


def check_array(xp, x, name: str, *, kind: str = "real", ndim: int | None = None,
                min_ndim: int = 0, shape_hint: str = ""):
    """``x`` if it is an array of ``xp`` with a dtype of ``kind`` and the wanted ndim.

    ``kind``: "real", "floating", "integer", "bool or integer", "bool" or "any".
    ``ndim`` (exact) or ``min_ndim``: wrong numbers of axes are ValueErrors; ``shape_hint``
    (e.g. ``"(heads,)"``) says what the axes mean.
    """
    kinds, what = _KINDS[kind]
    if not (hasattr(x, "dtype") and hasattr(x, "shape") and hasattr(x, "ndim")):
        raise not_an_array(x, name, what)
    if dtype_kind(xp, x.dtype) not in kinds:
        raise TypeError(f"{name} must be {what}, got dtype {x.dtype}")
    hint = f" {shape_hint}" if shape_hint else ""
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes{hint}, got shape {tuple(x.shape)}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes{hint}, got shape "
                         f"{tuple(x.shape)}")
    return x


def check_real_array(xp, x, name: str, *, integer_ok: bool = True, float_ok: bool = True):
    """Reject boolean, complex and (when asked) integer or floating arrays, naming ``name``."""
    kind = "real" if integer_ok and float_ok else "floating" if float_ok else "integer"
    return check_array(xp, x, name, kind=kind)


def check_dtype_arg(xp, dtype, name: str = "dtype", *, device=None):
    """A requested output dtype: a real floating dtype of ``xp`` (None passes).

    A dtype of the namespace or its name (``"float32"``) is accepted; the dtype object is
    returned.
    """
    if dtype is None:
        return None
    if isinstance(dtype, str):
        dtype = getattr(xp, dtype, dtype)
    try:
        ok = dtype_kind(xp, dtype) == "real floating"
    except Exception:
        ok = False
    if not ok:
        raise TypeError(f"{name} must be a real floating dtype of {xp.__name__} (or its name, "
                        f"e.g. 'float32'), got {describe(dtype)}")
    return dtype


def check_out_memory(out, name="out"):
    """``out`` (None allowed) may be written in place: not read-only, not immutable (JAX),
    no elements sharing memory. Run on every call: flags and strides are not in a signature."""
    if out is None:
        return
    if type(out) is _np.ndarray:  # a decode step's out=: the same checks, fewer calls
        if out.flags.writeable and (0 not in out.strides or not has_zero_stride(out)):
            return
    if is_read_only(out):
        raise ValueError(f"{name} must be a writable array, got a read-only one")
    if not is_writeable(out):
        raise TypeError(f"{name}= needs a mutable array; this library's arrays are immutable "
                        "(JAX): use the return value (under jit, XLA reuses the buffer)")
    if has_zero_stride(out):
        raise ValueError(f"{name} must not have elements that share memory (an expanded or "
                         f"broadcast array), got one of shape {tuple(out.shape)} with a "
                         f"zero stride")

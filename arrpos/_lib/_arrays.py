"""Turning public arguments into arrays of the right namespace, dtype and device."""
from __future__ import annotations

import math
import numbers

from ._namespace import (
    computable_positions,
    default_float,
    dense_array,
    detached,
    device_of,
    has_float64,
    is_lazy,
)
from ._validate import MAX_ELEMENTS, check_dtype_arg, check_int, check_real_array, check_size

__all__ = ["POSITION_LIMIT", "POSITION_LIMIT_F32", "as_positions", "check_device",
           "check_finite_values", "check_positions", "output_dtype"]

# |position * frequency| below which tables meet the accuracy contract (float32 within 2e-7,
# float64 within 1e-12 of exact; measured against mpmath on the compiled and the generic path:
# the generic float64 reduction holds to 2**36, the compiled one to 2**37; 2**35 leaves a
# margin and is inside the proven range of the three-piece Cody-Waite reduction, 5.4e10).
# Below 2**53 every integer position is exact in float64, so the compiled path's power table
# (bits up to 2**52) covers every accepted position.
POSITION_LIMIT = 2**35
# Without float64 (JAX without x64) the exact float32 split stays within 2e-7 to 2**28 (1.3e-7
# measured at 2**28, 2.5e-7 at 2**29).
POSITION_LIMIT_F32 = 2**28


def check_device(x, device, name: str):
    """Raise if an explicit ``device`` disagrees with where the array ``x`` lives."""
    if device is not None and x is not None and device_of(x) != device:
        raise ValueError(
            f"device={device!r} differs from the device of {name} ({device_of(x)!r}); "
            "move the array yourself if that is what you want"
        )


def as_positions(xp, positions, name: str = "positions", *, device=None, width: int = 1):
    """An int ``n`` -> ``arange(n)``; an array -> itself after kind checks; else a TypeError.

    ``width``: features per position of the table to be built; an output of more than
    ``MAX_ELEMENTS`` elements is refused here, before any work.
    """
    if isinstance(positions, bool):
        raise TypeError(f"{name} must be an int length or an array, got bool {positions!r}")
    if isinstance(positions, numbers.Integral):
        n = check_int(positions, name, minimum=0, maximum=MAX_ELEMENTS)
        check_size(n * width, "the output")
        return xp.arange(n, device=device)
    if isinstance(positions, (numbers.Number, str, bytes)) or positions is None:
        raise TypeError(
            f"{name} must be an int length or a real array, got {type(positions).__name__}"
            f" {positions!r}"
        )
    if not hasattr(positions, "dtype") or not hasattr(positions, "shape"):
        try:
            positions = xp.asarray(positions, device=device)
        except Exception as exc:
            raise TypeError(f"{name} could not be read as an array: {exc}") from None
    dense_array(positions, name)
    check_real_array(xp, positions, name)
    check_device(positions, device, name)
    check_size(_element_count(positions) * width, "the output")
    return positions


def _element_count(x) -> int:
    """Elements of ``x``; axes of unknown length (lazy arrays) count as 1."""
    n = 1
    for s in x.shape:
        n *= s if isinstance(s, int) else 1
    return n


def check_positions(xp, x, name: str = "positions", *, frequency: float = 1.0):
    """Positions whose tables meet the accuracy contract, or a ValueError; returns them in a
    dtype their library computes with (``computable_positions``).

    Eager arrays are read: every value finite and ``|p| * max(frequency, 1)`` below
    ``POSITION_LIMIT`` (2**35) where the device has float64, ``POSITION_LIMIT_F32`` (2**28)
    where it does not (JAX without x64). Integer positions are compared through their min and
    max, so no ``abs`` overflows (``-2**63``). Lazy arrays (Dask, JAX tracers) are not read:
    checking would force their computation; out-of-range values there give inaccurate tables.
    """
    x = computable_positions(dense_array(x, name))
    if is_lazy(x) or _element_count(x) == 0:  # (torch's .size is a method)
        return x
    limit = POSITION_LIMIT if has_float64(xp, device_of(x)) else POSITION_LIMIT_F32
    values = detached(x)
    if xp.isdtype(x.dtype, "integral"):
        big = _read(lambda: max(int(xp.max(values)), -int(xp.min(values))))
    else:
        big = check_finite_values(xp, x, name)
    if big is None:  # traced (a constant inside jit): not readable
        return x
    scale = max(float(frequency), 1.0)
    if big * scale >= limit:
        bits = int(math.log2(limit))
        what = f"|{name}|" if scale == 1.0 else f"|{name}| * {scale:g} (the largest frequency)"
        raise ValueError(
            f"{name} must satisfy {what} < 2**{bits} = {limit}, the range where the tables "
            f"keep their accuracy contract; got a value of {big}"
        )
    return x


def check_finite_values(xp, x, name: str) -> float:
    """Eager arrays: every value finite (a ValueError otherwise); returns ``max |x|`` (0 for an
    empty or lazy array, whose values are not read)."""
    if is_lazy(x) or _element_count(x) == 0:
        return 0.0
    values = detached(x)
    finite = _read(lambda: bool(xp.all(xp.isfinite(values))))
    if finite is None:  # traced (a constant inside jit): not readable
        return 0.0
    if not finite:
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    return float(xp.max(xp.abs(values)))


def _read(compute):
    """``compute()``, or None when it reads a traced value (a concrete JAX array used inside
    ``jit`` becomes a tracer as soon as an op touches it)."""
    try:
        return compute()
    except Exception as exc:  # jax.errors.ConcretizationTypeError and its subclasses
        if "Tracer" in type(exc).__name__ or "Concretization" in type(exc).__name__:
            return None
        raise


def output_dtype(xp, x, dtype, *, device=None, name: str = "dtype"):
    """``dtype`` if given (checked real floating), else the float input's dtype, else the default."""
    dtype = check_dtype_arg(xp, dtype, name, device=device)
    if dtype is not None:
        if dtype == getattr(xp, "float64", None) and not has_float64(xp, device):
            raise TypeError(f"{name}=float64 is not available on this device ({xp.__name__})")
        return dtype
    if x is not None and xp.isdtype(x.dtype, "real floating"):
        return x.dtype
    return default_float(xp, device)

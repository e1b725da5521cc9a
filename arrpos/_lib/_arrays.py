"""Turning public arguments into arrays of the right namespace, dtype and device."""
from __future__ import annotations

import numbers

from ._namespace import default_float, device_of, has_float64, is_lazy
from ._validate import check_dtype_arg, check_positive_int, check_real_array

__all__ = ["as_positions", "check_device", "check_finite_range", "output_dtype"]

_MAX_EXACT = 2.0**53


def check_device(x, device, name: str):
    """Raise if an explicit ``device`` disagrees with where the array ``x`` lives."""
    if device is not None and x is not None and device_of(x) != device:
        raise ValueError(
            f"device={device!r} differs from the device of {name} ({device_of(x)!r}); "
            "move the array yourself if that is what you want"
        )


def as_positions(xp, positions, name: str = "positions", *, device=None):
    """An int ``n`` -> ``arange(n)``; an array -> itself after kind checks; else a TypeError."""
    if isinstance(positions, bool):
        raise TypeError(f"{name} must be an int length or an array, got bool {positions!r}")
    if isinstance(positions, numbers.Integral):
        n = check_positive_int(positions, name, minimum=0)
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
    check_real_array(xp, positions, name)
    check_device(positions, device, name)
    return positions


def check_finite_range(xp, x, name: str, *, limit: float = _MAX_EXACT):
    """Eager arrays only: every value finite and ``|x| < limit`` (exact float64 integers).

    Lazy arrays (Dask, JAX tracers) are not read: checking would force their computation.
    """
    if is_lazy(x) or x.size == 0:
        return
    if xp.isdtype(x.dtype, "integral"):
        big = xp.max(xp.abs(x)) if x.ndim else xp.abs(x)
        if float(big) >= limit:
            raise ValueError(f"{name} must satisfy |{name}| < 2**53, got a value of {int(big)}")
        return
    if not bool(xp.all(xp.isfinite(x))):
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    big = float(xp.max(xp.abs(x)))
    if big >= limit:
        raise ValueError(f"{name} must satisfy |{name}| < 2**53, got a value of {big}")


def output_dtype(xp, x, dtype, *, device=None, name: str = "dtype"):
    """``dtype`` if given (checked real floating), else the float input's dtype, else the default."""
    check_dtype_arg(xp, dtype, name, device=device)
    if dtype is not None:
        if dtype == getattr(xp, "float64", None) and not has_float64(xp, device):
            raise TypeError(f"{name}=float64 is not available on this device ({xp.__name__})")
        return dtype
    if x is not None and xp.isdtype(x.dtype, "real floating"):
        return x.dtype
    return default_float(xp, device)

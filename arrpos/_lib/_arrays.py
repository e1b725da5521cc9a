"""Turning public arguments into arrays of the right namespace, dtype and device."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ._namespace import (
    backend_name,
    computable_positions,
    dtype_name,
    float_bits,
    default_float,
    dense_array,
    detached,
    device_of,
    dtype_kind,
    has_float64,
    index_dtype,
    is_lazy,
    is_writeable,
)
from ._validate import (
    MAX_ELEMENTS,
    MAX_OFFSET,
    check_dtype_arg,
    check_int,
    check_real_array,
    check_size,
    not_an_array,
)

__all__ = ["POSITION_LIMIT", "POSITION_LIMIT_F32", "as_index", "as_positions", "check_device",
           "check_index", "check_offset", "from_host", "round_once",
           "check_finite_values", "check_positions", "clip_shift", "largest_magnitude",
           "output_dtype", "take_rows"]

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


def check_offset(xp, offset, *lengths, device=None, name: str = "query_offset") -> int:
    """``offset`` (an int) of positions ``arange(n) + offset``: ``|offset|`` at most
    ``MAX_OFFSET`` (2**53: positions and distances exact in float64) and, with the lengths,
    within the index dtype of ``device`` (int32 without x64: no silent wrap-around)."""
    top = int(xp.iinfo(index_dtype(xp, device)).max) - sum(lengths)
    limit = max(0, min(MAX_OFFSET, top))
    return check_int(offset, name, minimum=-limit, maximum=limit)


def round_once(xp, x, dtype):
    """``x`` in ``dtype``, rounded once from its exact value.

    A float64 ``x`` goes to a 16-bit ``dtype`` through float32 in NumPy (ml_dtypes) and torch,
    which rounds twice: a float32 value that lands exactly halfway between two 16-bit values
    is then rounded to even, whatever side the float64 value was on (about one element in
    2**16 of a table). Here that tie is broken by the sign of the float32 rounding error, so
    the result is the correctly rounded one, as the compiled kernels give.
    """
    if x.dtype == dtype:
        return x
    if x.dtype != getattr(xp, "float64", None) or float_bits(xp, dtype) > 16:
        return xp.astype(x, dtype)
    h = xp.astype(x, xp.float32)
    err = x - xp.astype(h, xp.float64)  # exact
    dev = device_of(x)
    inf = xp.asarray(math.inf, dtype=xp.float32, device=dev)
    up = xp.astype(xp.nextafter(h, inf), dtype)
    down = xp.astype(xp.nextafter(h, -inf), dtype)
    # h is halfway between two dtype values (both exact in float32, and so is their mean)
    tie = (up != down) & (h == (xp.astype(up, xp.float32) + xp.astype(down, xp.float32)) * 0.5)
    near = xp.astype(h, dtype)
    return xp.where(tie & (err > 0), up, xp.where(tie & (err < 0), down, near))


def from_host(xp, host, dtype, device=None):
    """A float64 NumPy array on ``device`` in ``dtype``, rounded once (see :func:`round_once`):
    float64 travels as float64 where the device has it; otherwise a float32 target gets the
    nearest float32 and a 16-bit one the round-to-odd float32, whose nearest 16-bit value is
    the nearest of the float64 one."""
    host = np.array(host, dtype=np.float64)  # a fresh writable copy: torch warns otherwise
    if has_float64(xp, device):
        return round_once(xp, xp.asarray(host, dtype=xp.float64, device=device), dtype)
    if float_bits(xp, dtype) > 16:
        return xp.asarray(host.astype(np.float32), dtype=dtype, device=device)
    return xp.astype(xp.asarray(_float32_odd(host), device=device), dtype)


def _float32_odd(x):
    """float32 round-to-odd of float64 ``x``: truncated toward zero, the last bit set when
    inexact (a value rounded this way to 2 or more bits fewer is rounded correctly)."""
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f = np.where(over, np.nextafter(f, np.float32(0)), f)
    inexact = (f.astype(np.float64) != x) & np.isfinite(x)
    return (f.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


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
    if not hasattr(positions, "dtype") or not hasattr(positions, "shape"):
        # array-likes are refused, as by every function (API.md conventions): a list carries
        # no namespace, device or dtype, so converting it would be a guess
        raise not_an_array(positions, name, "an int length or a real array")
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


def check_positions(xp, x, name: str = "positions", *, frequency: float = 1.0,
                    source: str = "the largest frequency"):
    """Positions whose tables meet the accuracy contract, or a ValueError; returns them in a
    dtype their library computes with (``computable_positions``).

    Eager arrays are read: every value finite and ``|p| * max(frequency, 1)`` below
    ``POSITION_LIMIT`` (2**35) where the device has float64, ``POSITION_LIMIT_F32`` (2**28)
    where it does not (JAX without x64). Integer positions are compared through their min and
    max, so no ``abs`` overflows (``-2**63``). Lazy arrays (Dask, JAX tracers, torch meta and
    fake tensors) are not read: checking would force their computation; out-of-range values
    there give inaccurate tables. ``source`` says in the message where ``frequency`` comes from
    (the options that set it).
    """
    x = computable_positions(dense_array(x, name))
    if is_lazy(x) or _element_count(x) == 0:  # (torch's .size is a method)
        return x
    limit = POSITION_LIMIT if has_float64(xp, device_of(x)) else POSITION_LIMIT_F32
    big = largest_magnitude(xp, x, name)
    if big is None:  # traced (a constant inside jit): not readable
        return x
    scale = max(float(frequency), 1.0)
    if big * scale >= limit:
        bits = int(math.log2(limit))
        what = f"|{name}|" if scale == 1.0 else f"|{name}| * {scale:g} ({source})"
        raise ValueError(
            f"{name} must satisfy {what} < 2**{bits} = {limit}, the range where the tables "
            f"keep their accuracy contract; got a value of {big}"
        )
    return x


def largest_magnitude(xp, x, name: str):
    """``max |x|`` of an eager real array, exactly (a Python int for integers: min and max are
    compared, so no ``abs`` overflows at ``-2**63``; unsigned torch dtypes, whose min/max torch
    lacks, are read widened); floats must be finite (a ValueError naming ``name``). None for
    lazy, empty or traced arrays, whose values are not read."""
    if is_lazy(x) or _element_count(x) == 0:
        return None
    if dtype_kind(xp, x.dtype) != "integral":
        return check_finite_values(xp, x, name)
    if xp.iinfo(x.dtype).min == 0:  # unsigned: torch has no min/max for uint16/32/64
        x = as_index(xp, x, name)
    values = detached(x)
    if backend_name(xp) == "torch":  # one pass for both (a third of amin then amax)
        return _read(lambda: _span_magnitude(xp.aminmax(values)))
    return _read(lambda: max(int(xp.max(values)), -int(xp.min(values))))


def _span_magnitude(span) -> int:
    lo, hi = span
    return max(int(hi), -int(lo))


def as_index(xp, x, name: str):
    """An integer array in the widest signed integer dtype of its device (``index_dtype``:
    int64, int32 without x64), where indices, distances and buckets are formed without
    overflow: torch's int8/uint8 indices, which its gathers refuse, and unsigned dtypes, whose
    differences wrap, are widened exactly. Unsigned values that do not fit (uint64 from
    ``2**63``) are a ValueError naming ``name`` (eager arrays; lazy ones are not read)."""
    wide = index_dtype(xp, device_of(x))
    if x.dtype == wide:
        return x
    y = xp.astype(x, wide)
    if xp.iinfo(x.dtype).max > xp.iinfo(wide).max and not is_lazy(x) and _element_count(x):
        if _read(lambda: bool(xp.any(detached(y) < 0))):  # wrapped: the value was too large
            bits = int(xp.iinfo(wide).max).bit_length()
            raise ValueError(f"{name} must be < 2**{bits} (integers are used as "
                             f"{dtype_name(wide)} indices and distances), got a larger "
                             f"{dtype_name(x.dtype)} value")
    return y


def check_index(xp, index, n: int, name: str, rows: str):
    """Row indices into ``n`` rows (``rows`` says of what, for the message): ``index`` in the
    index dtype (:func:`as_index`; torch gathers refuse int8/uint8 indices), every entry in
    ``[0, n)`` on eager arrays, else a ValueError naming ``name`` (lazy ones are not read:
    JAX clamps, Dask raises on compute)."""
    index = as_index(xp, dense_array(index, name), name)
    if is_lazy(index) or _element_count(index) == 0:
        return index
    values = detached(index)
    span = _read(lambda: (int(xp.min(values)), int(xp.max(values))))
    if span is not None and (span[0] < 0 or span[1] >= n):
        raise ValueError(f"{name} must lie in [0, {n}) ({rows}), got values in "
                         f"[{span[0]}, {span[1]}]")
    return index


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
    if x is not None and dtype_kind(xp, x.dtype) == "real floating":
        return x.dtype
    return default_float(xp, device)


def clip_shift(xp, x, lo: int, hi: int, shift: int):
    """``clip(x, lo, hi) + shift`` of an integer array in its dtype (the bounds and the shifted
    values must fit it), with one temporary: the shift is added in place where the clipped
    array is writable (``clip`` returns a new array on every namespace). NumPy's own ``clip``
    takes the scalar bounds as they are (array-api-compat's broadcasts them to the array's
    shape, a strided pass twice as slow)."""
    if backend_name(xp) == "numpy" and x.ndim:
        out = np.clip(x, lo, hi)  # Python int bounds inside the dtype: x's dtype (NEP 50)
    else:
        out = xp.clip(x, min=lo, max=hi)
    if not shift:
        return out
    if is_writeable(out):
        out += shift
        return out
    return out + shift


def take_rows(xp, table, index):
    """``table[index]`` of a 1-D ``table`` at an index array of any shape whose entries are
    known to lie in ``[0, len(table))``, shaped like ``index``. The same values as ``take``;
    torch's ``index_select`` directly, without the wrap of negative indices that
    array-api-compat's torch ``take`` pays a full pass and a temporary for."""
    flat = xp.reshape(index, (-1,))
    if backend_name(xp) == "torch":
        out = xp.index_select(table, 0, flat)
    else:
        out = xp.take(table, flat, axis=0)
    return xp.reshape(out, tuple(index.shape))

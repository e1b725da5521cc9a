"""T5 and DeBERTa buckets, exact to transformers' float32 arithmetic.

The T5 and DeBERTa buckets reproduce transformers' float32 arithmetic exactly: the bucket is a
non-decreasing step function of the distance, so its steps are found once on the host (in the
reference's float32 arithmetic with a correctly rounded log, by a bisection per bucket value:
``O(buckets)`` memory whatever ``max_distance`` is) and the device only counts the steps below
each distance (``searchsorted``). Every backend therefore gives the same integers, whatever its
own ``log`` rounds to, and no ``log(0)`` is ever evaluated. Distances up to ``LUT_MAX`` are
read from a host table of those same steps' buckets, one lookup per element.

Integer inputs of every width are accepted: distances, indices and buckets are formed in the
widest signed integer dtype of the device (``_lib.as_index``), so int8/16/32 minima (``abs``
overflows) and unsigned inputs (differences wrap) give transformers' buckets; a bucket keeps
the input's dtype where that dtype is signed and holds every bucket.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import _dispatch
from .._lib import (
    array_namespace,
    as_index,
    check_array,
    check_bool,
    check_positive_int,
    device_of,
    index_dtype,
    largest_magnitude,
    namespace_for,
    take_rows,
)
from ..typing import Array, DType, Namespace

__all__ = [
    "deberta_bucket",
    "t5_bucket",
]


# --------------------------------------------------------------------------- buckets

# Distinct bucket values whose steps a bucketing may need: T5's ``num_buckets`` and DeBERTa's
# log buckets up to the largest distance the input dtype holds. The steps live on the host and
# the device (``O(buckets)``, never ``O(distance)``); far above any model (T5: 32, DeBERTa:
# 256), and bounding the host bisection (64 float32 logs per bucket) to about a second.
MAX_BUCKETS = 2**20


def _first_reaching(value, targets, lo, hi):
    """For each of the ascending ``targets``, the least integer ``a`` in ``(lo, hi]`` with
    ``value(a) >= target`` (``value`` non-decreasing, ``value(lo)`` below every target), by a
    vectorised bisection: ``O(len(targets))`` memory whatever ``hi`` is. Targets that
    ``value(hi)`` does not reach have no step and are dropped."""
    targets = targets[targets <= value(np.array([hi], dtype=np.int64))[0]]
    lo = np.full(targets.shape, lo, dtype=np.int64)  # value(lo) < target
    hi = np.full(targets.shape, hi, dtype=np.int64)  # value(hi) >= target
    while np.any(hi - lo > 1):
        m = lo + (hi - lo) // 2
        ok = value(m) >= targets
        hi = np.where(ok, m, hi)
        lo = np.where(ok, lo, m)
    return hi


def _t5_value(num_buckets, max_exact, max_distance):
    """T5's bucket of distances ``n >= max_exact`` in transformers' float32 arithmetic:
    ``log(float32(n) / max_exact) / log(max_distance / max_exact) * (nb - me)`` truncated
    toward zero, capped at ``nb - 1`` (the log correctly rounded)."""
    denom = np.float32(math.log(max_distance / max_exact))

    def value(n):
        ratio = n.astype(np.float32) / np.float32(max_exact)
        logs = np.log(ratio.astype(np.float64)).astype(np.float32)
        val = logs / denom * np.float32(num_buckets - max_exact)
        return np.minimum(max_exact + val.astype(np.int64), num_buckets - 1)

    return value


@functools.lru_cache(maxsize=64)
def _t5_steps(num_buckets, max_exact, max_distance, top):
    """Distances at which T5's logarithmic bucket steps up, up to ``top`` (the largest distance
    the input can hold): ``bucket(n) = max_exact + #{steps <= n}`` for ``n >= max_exact``.
    Every distance from ``max_distance`` on has the last bucket, so the search ends there."""
    value = _t5_value(num_buckets, max_exact, max_distance)
    targets = np.arange(max_exact + 1, num_buckets, dtype=np.int64)
    return _read_only(_first_reaching(value, targets, max_exact, min(max_distance, top)))


def _read_only(a):
    """A cached array every caller shares: nobody may write it."""
    a.flags.writeable = False
    return a


def _deberta_value(bucket_size, max_position):
    """DeBERTa's log bucket magnitude of distances ``a > mid`` in transformers' float32
    arithmetic: ``ceil(log(float32(a) / mid) / log(float32((max_position - 1) / mid))
    * (mid - 1)) + mid`` (the logs correctly rounded)."""
    mid = bucket_size // 2
    span = np.float32((max_position - 1) / mid)  # torch.tensor(python float): float32
    denom = np.log(span.astype(np.float64)).astype(np.float32)

    def value(a):
        ratio = a.astype(np.float32) / np.float32(mid)
        logs = np.log(ratio.astype(np.float64)).astype(np.float32)
        return (np.ceil(logs / denom * np.float32(mid - 1)) + mid).astype(np.int64)

    return value


def _deberta_top(bucket_size: int, max_position: int, top: int) -> int:
    """The largest bucket magnitude of distances up to ``top``."""
    mid = bucket_size // 2
    if top <= mid:
        return top
    return max(mid, int(_deberta_value(bucket_size, max_position)(np.array([top]))[0]))


@functools.lru_cache(maxsize=64)
def _deberta_steps(bucket_size, max_position, top):
    """Distances ``a > mid`` at which DeBERTa's log bucket steps up, up to ``top``: the
    magnitude is ``mid + #{steps <= a}`` (a step repeats where the bucket jumps by more than
    one). ``mid - 1 = 0`` (bucket sizes 2 and 3) gives no step: every distance past ``mid`` has
    the bucket ``mid``, as in transformers."""
    mid = bucket_size // 2
    if top <= mid:
        return _read_only(np.zeros((0,), dtype=np.int64))
    vmax = _deberta_top(bucket_size, max_position, top)
    targets = np.arange(mid + 1, vmax + 1, dtype=np.int64)
    return _read_only(_first_reaching(_deberta_value(bucket_size, max_position), targets, mid,
                                      top))


def _distance_top(xp: Namespace, dtype: DType, wide: DType) -> int:
    """The largest ``|value|`` an integer ``dtype`` holds, capped at the index dtype's maximum
    (``float32(2**63 - 1) == 2**63``: the buckets of the two are equal)."""
    info = xp.iinfo(dtype)
    return min(max(int(info.max), -int(info.min)), int(xp.iinfo(wide).max))


def _holds_index(xp: Namespace, dtype: DType, n: int) -> bool:
    """Whether a table index up to ``n`` can be formed in ``dtype`` itself (signed, holding
    ``n``, and 32 or 64 bits: torch's gathers refuse narrower indices), sparing the widened
    copy of the whole input."""
    info = xp.iinfo(dtype)
    return info.min < 0 and info.bits >= 32 and n <= info.max


def bucket_dtype(xp: Namespace, dtype: DType, wide: DType, largest: int) -> DType:
    """``dtype`` when it is signed and holds every bucket (``|bucket| <= largest``), else the
    index dtype: buckets of int8 distances may not fit int8, and buckets are signed."""
    info = xp.iinfo(dtype)
    return dtype if info.min < 0 and largest <= info.max else wide


def _steps_array(xp, steps, like):
    """Host steps as an array of ``like``'s (index) dtype and device."""
    return xp.asarray(steps, dtype=like.dtype, device=device_of(like))


def _count_steps(xp, steps, n):
    """``#{steps <= n}`` elementwise, as ``n``'s dtype."""
    if steps.shape[0] == 0:
        return xp.zeros_like(n)
    flat = xp.reshape(n, (-1,))
    c = xp.searchsorted(steps, flat, side="right")
    return xp.reshape(xp.astype(c, n.dtype), n.shape)


def t5_bucket(relative: Array, /, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> Array:
    """T5's relative-position bucket, identical to transformers'
    ``T5Attention._relative_position_bucket``.

    With ``nb = num_buckets // 2`` (bidirectional; keys after the query use the upper half)
    or ``num_buckets`` (causal; keys after the query fall in bucket 0), distances below
    ``nb // 2`` get a bucket each and larger ones logarithmic buckets up to ``max_distance``;
    everything further shares the last bucket.

    Parameters
    ----------
    relative : array
        Integer ``key - query`` positions, any shape.
    bidirectional : bool, optional
        Encoder (True) or decoder (False) buckets.
    num_buckets : int, optional
        Total buckets (T5 uses 32).
    max_distance : int, optional
        Distance from which everything shares the last bucket (T5 uses 128).

    Returns
    -------
    array
        Bucket ids in ``[0, num_buckets)``, same shape as ``relative``; its dtype when it is
        signed and holds ``num_buckets - 1`` (int8 with the defaults), else the index dtype.

    Raises
    ------
    TypeError
        ``relative`` not an integer array; a non-bool ``bidirectional``; non-int sizes.
    ValueError
        Too few buckets (``nb // 2 < 1``) or more than 2**20; ``max_distance`` not above
        ``nb // 2`` or past 2**63; (eager) uint64 values from 2**63.

    Notes
    -----
    The logarithmic buckets follow the reference's float32 arithmetic exactly (see the module
    notes); no ``log(0)`` is evaluated, so there is no warning and no NaN.
    Backend support: generic Array API code on every namespace (jit-safe); the dispatcher
    routes the table index's clip-and-shift of NumPy arrays and torch CPU tensors to a
    compiled pass (the same integers).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.t5_bucket(np.array([-200, -20, -3, 0, 3, 20, 200])).tolist()
    [15, 10, 3, 0, 19, 26, 31]
    >>> arrpos.t5_bucket(np.array([-200, -3, 0, 3]), bidirectional=False).tolist()
    [31, 3, 0, 0]
    """
    xp = array_namespace(relative, name="relative")
    check_array(xp, relative, "relative", kind="integer")
    bidirectional = check_bool(bidirectional, "bidirectional")
    num_buckets = check_positive_int(num_buckets, "num_buckets", maximum=MAX_BUCKETS)
    max_distance = check_positive_int(max_distance, "max_distance", maximum=2**63)
    nb = num_buckets // 2 if bidirectional else num_buckets
    max_exact = nb // 2
    if max_exact < 1:
        raise ValueError(
            f"num_buckets must be >= {4 if bidirectional else 2} "
            f"(bidirectional={bidirectional}), got {num_buckets}"
        )
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be > {max_exact} (half of the buckets are exact), got {max_distance}"
        )
    wide = index_dtype(xp, device_of(relative))
    top = min(max_distance, _distance_top(xp, relative.dtype, wide))
    # every distance from max_distance on has the last bucket: clipping there is exact, and
    # abs cannot overflow at the dtype's minimum
    dtype = bucket_dtype(xp, relative.dtype, wide, num_buckets - 1)
    if top <= LUT_MAX:  # every distance a row of one small table
        return _lookup(xp, _t5_table(bidirectional, nb, max_exact, max_distance, top),
                       _table_index(xp, relative, wide, top, top), dtype)
    rel = as_index(xp, relative, "relative")  # no abs overflow, no unsigned wrap-around
    rel = xp.clip(rel, min=-top, max=top)
    out = _t5_rule(xp, rel, bidirectional, nb, max_exact, max_distance, top)
    return out if dtype == out.dtype else xp.astype(out, dtype)


def _t5_rule(xp, rel, bidirectional, nb, max_exact, max_distance, top):
    """T5's buckets of index-dtype distances clipped to ``[-top, top]``, by counting steps."""
    zero = xp.zeros_like(rel)
    if bidirectional:
        offset = xp.where(rel > 0, zero + nb, zero)
        n = xp.abs(rel)
    else:
        offset = zero
        n = -xp.minimum(rel, zero)
    steps = _steps_array(xp, _t5_steps(nb, max_exact, max_distance, top), rel)
    large = max_exact + _count_steps(xp, steps, n)
    return offset + xp.where(n < max_exact, n, large)


# Distances up to this magnitude are bucketed by one lookup in a host table of the bucket of
# every distance (2 * LUT_MAX + 1 entries at most), itself made by the step-counting rule:
# the same integers in a third of the passes over a large matrix
LUT_MAX = 2**16


@functools.lru_cache(maxsize=64)
def _t5_table(bidirectional, nb, max_exact, max_distance, top):
    """The T5 bucket of every distance ``-top .. top`` (host int64, read-only)."""
    rel = np.arange(-top, top + 1, dtype=np.int64)
    xp = namespace_for(np)
    return _read_only(np.asarray(_t5_rule(xp, rel, bidirectional, nb, max_exact, max_distance,
                                          top), dtype=np.int64))


def _table_index(xp, relative, wide, c, most):
    """``clip(relative, -c, c) + c``, a table index: in relative's dtype where it holds
    ``most`` (``_holds_index``), else in the index dtype, into which every value is taken
    exactly (uint64 from 2**63 refused on eager arrays: no unsigned wrap-around)."""
    dtype = relative.dtype if _holds_index(xp, relative.dtype, most) else wide
    if dtype != relative.dtype and xp.iinfo(relative.dtype).max > xp.iinfo(wide).max:
        relative = as_index(xp, relative, "relative")
    return _dispatch.call("clip_shift", xp, relative, arrays=(relative,), lo=-c, hi=c,
                          shift=c, dtype=dtype)


def _lookup(xp, table, index, dtype):
    """``table[index]`` in ``dtype`` (``0 <= index < len(table)``), shaped like ``index``."""
    t = xp.asarray(table.copy(), dtype=dtype, device=device_of(index))  # torch: a writable one
    return take_rows(xp, t, index)


def deberta_bucket(relative: Array, /, *, bucket_size: int = 256, max_position: int = 512) -> Array:
    """DeBERTa-v2 log bucket of ``query - key``, identical to transformers'
    ``make_log_bucket_position(-relative, bucket_size, max_position)``.

    Note the sign: this function takes the T5-style ``relative = key - query`` (as from
    :func:`relative_positions`) and buckets DeBERTa's ``query - key = -relative``. Distances up
    to ``bucket_size // 2`` keep their value; larger ones grow logarithmically, reaching
    ``bucket_size - 1`` at ``max_position - 1``.

    Parameters
    ----------
    relative : array
        Integer ``key - query`` positions, any shape.
    bucket_size : int, optional
        DeBERTa's ``position_buckets`` (256 in DeBERTa-v3), >= 2.
    max_position : int, optional
        DeBERTa's ``max_relative_positions`` (512), > ``bucket_size // 2 + 1``.

    Returns
    -------
    array
        Signed buckets of ``query - key``, same shape as ``relative``; its dtype when it is
        signed and holds every bucket (not int8 with the defaults: ``-(-128)`` is 128), else
        the index dtype.

    Raises
    ------
    TypeError
        ``relative`` not an integer array; non-int sizes.
    ValueError
        ``bucket_size < 2`` or past 2**31, ``max_position <= bucket_size // 2 + 1`` or past
        2**63; options that give more than 2**20 log buckets over the distances of
        ``relative``'s dtype (``max_position`` just above ``bucket_size // 2`` with int64
        distances); (eager) uint64 values from 2**63.

    Notes
    -----
    Exact equality with the reference's float32 arithmetic, as for :func:`t5_bucket`, for every
    ``bucket_size`` (2 and 3 included: every distance past ``bucket_size // 2`` has the bucket
    ``bucket_size // 2``) and every distance up to ``2**63 - 1``; ``-2**63`` (whose absolute
    value transformers wraps) has the bucket of ``-(2**63 - 1)``.
    Backend support: generic Array API code on every namespace (jit-safe); the dispatcher
    routes the table index's clip-and-shift of NumPy arrays and torch CPU tensors to a
    compiled pass (the same integers).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.deberta_bucket(np.array([-1000, -200, -129, -128, 0, 5, 600]),
    ...                       bucket_size=256, max_position=512).tolist()
    [317, 169, 129, 128, 0, -5, -270]
    """
    xp = array_namespace(relative, name="relative")
    check_array(xp, relative, "relative", kind="integer")
    bucket_size = check_positive_int(bucket_size, "bucket_size", minimum=2, maximum=2**31)
    max_position = check_positive_int(max_position, "max_position", maximum=2**63)
    mid = bucket_size // 2
    if max_position <= mid + 1:
        raise ValueError(
            f"max_position must be > bucket_size // 2 + 1 = {mid + 1}, got {max_position}"
        )
    wide = index_dtype(xp, device_of(relative))
    top = _distance_top(xp, relative.dtype, wide)
    largest = _deberta_top(bucket_size, max_position, top)
    if largest - mid > MAX_BUCKETS:
        raise ValueError(
            f"bucket_size={bucket_size} with max_position={max_position} gives "
            f"{largest - mid} log buckets for {relative.dtype} distances, more than "
            f"{MAX_BUCKETS} (2**20); use a smaller bucket_size or a max_position further "
            "above bucket_size // 2"
        )
    dtype = bucket_dtype(xp, relative.dtype, wide, largest)
    # the table covers the distances present (eager arrays: read once), in powers of two
    big = top if top <= LUT_MAX else largest_magnitude(xp, relative, "relative")
    if big is not None and min(big, top) <= LUT_MAX:
        c = min(top, 1 << max(int(min(big, top)), 1).bit_length())
        # past c: only the index dtype's minimum, clipped to the same bucket
        return _lookup(xp, _deberta_table(bucket_size, max_position, top, c),
                       _table_index(xp, relative, wide, c, 4 * LUT_MAX), dtype)
    rel = as_index(xp, relative, "relative")
    out = _deberta_rule(xp, xp.clip(rel, min=-top, max=top), bucket_size, max_position, top)
    return out if dtype == out.dtype else xp.astype(out, dtype)


def _deberta_rule(xp, rel, bucket_size, max_position, top):
    """DeBERTa's buckets of index-dtype ``key - query`` clipped to ``[-top, top]``."""
    mid = bucket_size // 2
    rel = -rel  # only the index dtype's minimum was clipped: the same bucket
    a = xp.abs(rel)
    steps = _steps_array(xp, _deberta_steps(bucket_size, max_position, top), a)
    mag = mid + _count_steps(xp, steps, a)
    sign = xp.where(rel < 0, xp.zeros_like(rel) - 1, xp.ones_like(rel))
    return xp.where(a <= mid, rel, sign * mag)


@functools.lru_cache(maxsize=64)
def _deberta_table(bucket_size, max_position, top, c):
    """The DeBERTa bucket of every ``key - query`` in ``-c .. c`` (host int64, read-only)."""
    rel = np.arange(-c, c + 1, dtype=np.int64)
    xp = namespace_for(np)
    return _read_only(np.asarray(_deberta_rule(xp, rel, bucket_size, max_position, top),
                                 dtype=np.int64))



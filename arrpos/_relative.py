"""Relative position encodings: index matrices, buckets (T5, DeBERTa), bias tables, Shaw et al.'s
two terms, the Transformer-XL score and DeBERTa's disentangled terms.

Sign convention: ``relative = key_position - query_position`` (T5, Shaw). DeBERTa buckets
``query - key``; :func:`deberta_bucket` takes the T5-style value and says so.

The T5 and DeBERTa buckets reproduce transformers' float32 arithmetic exactly: the bucket is a
non-decreasing step function of the distance, so its steps are found once on the host (in the
reference's float32 arithmetic with a correctly rounded log, by a bisection per bucket value:
``O(buckets)`` memory whatever ``max_distance`` is) and the device only counts the steps below
each distance (``searchsorted``). Every backend therefore gives the same integers, whatever its
own ``log`` rounds to, and no ``log(0)`` is ever evaluated.

Integer inputs of every width are accepted: distances, indices and buckets are formed in the
widest signed integer dtype of the device (``_lib.as_index``), so int8/16/32 minima (``abs``
overflows) and unsigned inputs (differences wrap) give transformers' buckets; a bucket keeps
the input's dtype where that dtype is signed and holds every bucket.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ._lib import (
    array_namespace,
    as_index,
    broadcast_leads,
    check_array,
    check_index,
    check_bool,
    check_choice,
    check_dtype_arg,
    check_offset,
    check_positive_int,
    check_real_scalar,
    check_shape,
    check_size,
    default_float,
    device_of,
    from_host,
    work_float,
)

__all__ = [
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
    "t5_bucket",
    "transformer_xl_scores",
]


# --------------------------------------------------------------------------- helpers

def _gather_last(xp, s, index):
    """``out[..., i, j] = s[..., i, index[i, j]]`` without a ``(q, k, n)`` intermediate.

    ``s`` has shape ``(..., q, n)`` and ``index`` ``(q, k)``; the rows are flattened so one
    ``take`` along the last axis does the gather (``take_along_axis`` is not in every namespace).
    """
    q, n = s.shape[-2], s.shape[-1]
    k = index.shape[-1]
    rows = xp.reshape(xp.arange(q, dtype=index.dtype, device=device_of(index)), (q, 1))
    flat = xp.reshape(rows * n + index, (q * k,))
    lead = tuple(s.shape[:-2])
    out = xp.take(xp.reshape(s, lead + (q * n,)), flat, axis=-1)
    return xp.reshape(out, lead + (q, k))


def _matmul_t(xp, a, b):
    """``a @ b^T`` on the last two axes."""
    return xp.matmul(a, xp.matrix_transpose(b))


# --------------------------------------------------------------------------- index matrices

def relative_positions(query_len, key_len, *, query_offset=0, device=None, xp=None):
    """Relative positions ``key - query`` of every query/key pair.

    Parameters
    ----------
    query_len, key_len : int
        Number of queries and keys (>= 0).
    query_offset : int, optional
        Absolute position of the first query. ``key_len - query_len`` aligns the queries to the
        end of the keys, as when decoding with a key/value cache.
    device : device, optional
        Where to create the matrix (default: the namespace default).
    xp : namespace, optional
        Array namespace (default NumPy).

    Returns
    -------
    array
        Integer matrix ``(query_len, key_len)`` (the namespace's default integer dtype) with
        ``out[i, j] = j - (i + query_offset)``.

    Raises
    ------
    TypeError
        A length or ``query_offset`` that is not an int.
    ValueError
        A negative length, a matrix of more than 2**34 elements, ``|query_offset|`` past 2**53
        or past the index dtype (int32 on JAX without x64).

    Notes
    -----
    Backend support: generic Array API code on every namespace.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.relative_positions(2, 3).tolist()
    [[0, 1, 2], [-1, 0, 1]]
    >>> arrpos.relative_positions(1, 4, query_offset=3).tolist()
    [[-3, -2, -1, 0]]
    """
    xp = array_namespace(xp=xp)
    query_len = check_positive_int(query_len, "query_len", minimum=0)
    key_len = check_positive_int(key_len, "key_len", minimum=0)
    check_size(query_len * key_len, "the matrix")
    query_offset = check_offset(xp, query_offset, query_len, key_len, device=device)
    kpos = xp.arange(key_len, device=device)
    qpos = xp.arange(query_len, device=device) + query_offset
    return xp.reshape(kpos, (1, key_len)) - xp.reshape(qpos, (query_len, 1))



def relative_index_nd(window, *, device=None, xp=None):
    """Swin / BEiT relative position index of a window with any number of axes.

    Tokens are the window flattened in C order. For tokens ``a`` and ``b`` with coordinates
    ``c(a)`` and ``c(b)``, the index is the C-order flat index of ``c(a) - c(b) + (w - 1)`` in a
    grid of shape ``2 w - 1``: a row of a bias table of ``prod(2 w - 1)`` rows.

    Parameters
    ----------
    window : sequence of int
        The window shape, e.g. ``(7, 7)`` (Swin, BEiT) or ``(8, 7, 7)`` (Video Swin).
    device : device, optional
        Where to create the matrix (default: the namespace default).
    xp : namespace, optional
        Array namespace (default NumPy).

    Returns
    -------
    array
        Integer matrix ``(N, N)``, ``N = prod(window)``, in the namespace's default integer
        dtype, values in ``[0, prod(2 w - 1))``. ``relative_bias(table, index)`` turns a table
        ``(prod(2 w - 1), heads)`` into the bias ``(heads, N, N)``.

    Raises
    ------
    TypeError
        ``window`` not a sequence of ints (a bare int is refused: Swin reads it as a square).
    ValueError
        An empty ``window``, a size < 1, a table of more than 2**31 - 1 rows or an index of more
        than 2**34 elements.

    Notes
    -----
    Equal to transformers' ``SwinRelativePositionBias.relative_position_index`` for 2-D windows
    and to Video Swin's 3-D index; BEiT's index is this one bordered by its three class-token
    rows (``num_relative_distance - 3 .. - 1``), which are not part of this matrix.
    The index is ``f(a) - f(b) + f(w - 1)`` with ``f`` the flat index in the ``2 w - 1`` grid,
    so one subtraction of two vectors builds it. Backend support: generic Array API code.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.relative_index_nd((2, 2)).tolist()
    [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]
    >>> arrpos.relative_index_nd((8, 7, 7)).shape
    (392, 392)
    """
    xp = array_namespace(xp=xp)
    window = check_shape(window, "window")
    n = math.prod(window)
    strides, centre, stride = [], 0, 1
    for w in reversed(window):  # strides of the (2w - 1) grid, last axis fastest
        strides.append(stride)
        centre += (w - 1) * stride
        stride *= 2 * w - 1
    strides.reverse()
    if stride > 2**31 - 1:  # the index must fit the int32 default of JAX without x64
        raise ValueError(f"window {window} is too large: its table of {stride} rows overflows")
    check_size(n * n, f"the ({n}, {n}) index of window {window}")
    token = xp.arange(n, device=device)
    flat = xp.zeros_like(token)
    inner = n
    for w, s in zip(window, strides):  # the coordinate along each axis, weighted by its stride
        inner //= w
        flat = flat + ((token // inner) % w) * s
    return xp.reshape(flat, (n, 1)) - xp.reshape(flat, (1, n)) + centre


def log_relative_coords(window, *, pretrained_window=None, mode="swin", dtype=None,
                        device=None, xp=None):
    """Swin-V2's log-spaced continuous relative coordinates of a window (the input of its
    continuous position bias MLP).

    For every relative offset ``d`` of a window ``w`` (``-(w_a - 1) .. w_a - 1`` along each
    axis, the rows of :func:`relative_index_nd`'s table), ``mode="swin"`` gives per axis
    ``x = 8 d_a / max(p_a - 1, 1)`` with ``p`` the ``pretrained_window`` (default ``w``), then
    ``sign(x) log2(1 + |x|) / log2(8)``; ``mode="cr"`` gives ``sign(d_a) ln(1 + |d_a|)``
    (timm's ``swin_transformer_v2_cr``).

    Parameters
    ----------
    window : sequence of int
        The window shape, e.g. ``(8, 8)``; a bare int is refused (Swin reads it as a square).
    pretrained_window : sequence of int, optional
        The window of pre-training (Swin-V2 ``pretrained_window_size``): offsets are
        normalised by it so that a model fine-tuned at a larger window keeps its scale.
        ``mode="swin"`` only.
    mode : {"swin", "cr"}, optional
        Swin-V2's normalised log2 coordinates, or timm's unnormalised natural-log ones.
    dtype : dtype, optional
        Real floating dtype (default: the namespace's default float).
    device, xp : optional
        Device and namespace (default NumPy, default device).

    Returns
    -------
    array
        ``tuple(2 w - 1) + (len(w),)``: ``out[i0, i1, ..., a]`` is the coordinate of axis
        ``a`` (in window order: ``(h, w)`` for images, as the peers) at offset
        ``d = (i0 - (w0 - 1), i1 - (w1 - 1), ...)``. Reshaped to ``(prod(2 w - 1), len(w))``
        its rows are in the order :func:`relative_index_nd` indexes.

    Raises
    ------
    TypeError
        Windows not sequences of ints; ``dtype`` not real floating.
    ValueError
        Sizes < 1; ``pretrained_window`` of another length, or with ``mode="cr"``; unknown
        ``mode``.

    Notes
    -----
    Equal to timm's ``SwinTransformerV2`` ``WindowAttention._make_pair_wise_relative_positions``
    (with ``max(n - 1, 1)``), timm's ``gen_relative_log_coords`` and transformers'
    ``Swinv2SelfAttention.create_coords_table_and_index``. The peers form them in float32
    (their values are within a float32 rounding of these); here they are formed on the host
    in float64 and rounded once. Two edges differ between the peers: timm's
    ``gen_relative_log_coords`` divides by ``w - 1`` even for ``w = 1`` (NaN), and
    transformers skips the normalisation of every axis when the first window axis is 1
    (and divides by 0 for a pretrained size of 1); this function follows timm's model
    (``max(n - 1, 1)`` per axis). Backend support: host arithmetic, one transfer.

    Examples
    --------
    >>> import arrpos
    >>> c = arrpos.log_relative_coords((2, 3))
    >>> c.shape
    (3, 5, 2)
    >>> c[2, 4].tolist()          # offset (+1, +2): log2(1 + 8) / 3 on both axes
    [1.0566416671474375, 1.0566416671474375]
    >>> arrpos.log_relative_coords((2, 3), pretrained_window=(4, 4))[2, 4].round(4).tolist()
    [0.6248, 0.8877]
    """
    xp = array_namespace(xp=xp, dtype=dtype)
    window = check_shape(window, "window")
    mode = check_choice(mode, "mode", ("swin", "cr"))
    if pretrained_window is None:
        norm = window
    else:
        if mode != "swin":
            raise ValueError("pretrained_window applies to mode='swin' only, got mode='cr'")
        norm = check_shape(pretrained_window, "pretrained_window")
        if len(norm) != len(window):
            raise ValueError(f"pretrained_window {norm} and window {window} must have the same "
                             "number of axes")
    k = len(window)
    check_size(math.prod(2 * w - 1 for w in window) * k, "the coordinates")
    dtype = check_dtype_arg(xp, dtype, device=device)
    dtype = dtype if dtype is not None else default_float(xp, device)
    offsets = [np.arange(-(w - 1), w, dtype=np.float64) for w in window]
    grids = np.meshgrid(*offsets, indexing="ij")
    if mode == "swin":
        coords = [8.0 * g / max(p - 1, 1) for g, p in zip(grids, norm)]
        coords = [np.sign(c) * np.log2(1.0 + np.abs(c)) / 3.0 for c in coords]
    else:
        coords = [np.sign(g) * np.log1p(np.abs(g)) for g in grids]
    return from_host(xp, np.stack(coords, axis=-1), dtype, device)


def shaw_index(relative, /, *, max_distance):
    """Shaw et al. (2018) index: ``clip(relative, -K, K) + K`` into a table of ``2K+1`` rows.

    Parameters
    ----------
    relative : array
        Integer relative positions (``key - query``), any shape and integer dtype.
    max_distance : int
        ``K >= 0``: distances beyond it share the edge rows.

    Returns
    -------
    array
        Same shape as ``relative``, values in ``[0, 2K]``; ``relative``'s dtype when it is
        signed and holds ``2K``, else the index dtype (int64; int32 without x64).

    Raises
    ------
    TypeError
        ``relative`` not an integer array, ``max_distance`` not an int.
    ValueError
        ``max_distance < 0`` or ``2K`` past the index dtype; (eager) uint64 values from 2**63.

    Notes
    -----
    Backend support: generic Array API code on every namespace.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.shaw_index(arrpos.relative_positions(1, 6), max_distance=2).tolist()
    [[2, 3, 4, 4, 4, 4]]
    """
    xp = array_namespace(relative, name="relative")
    check_array(xp, relative, "relative", kind="integer")
    rel = as_index(xp, relative, "relative")  # clip bounds and 2K fit; no unsigned wrap
    k = check_positive_int(max_distance, "max_distance", minimum=0,
                           maximum=int(xp.iinfo(rel.dtype).max) // 2)
    out = xp.clip(rel, min=-k, max=k) + k
    dtype = _bucket_dtype(xp, relative.dtype, rel.dtype, 2 * k)
    return out if dtype == out.dtype else xp.astype(out, dtype)


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


def _deberta_top(bucket_size, max_position, top) -> int:
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


def _distance_top(xp, dtype, wide) -> int:
    """The largest ``|value|`` an integer ``dtype`` holds, capped at the index dtype's maximum
    (``float32(2**63 - 1) == 2**63``: the buckets of the two are equal)."""
    info = xp.iinfo(dtype)
    return min(max(int(info.max), -int(info.min)), int(xp.iinfo(wide).max))


def _bucket_dtype(xp, dtype, wide, largest: int):
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


def t5_bucket(relative, /, *, bidirectional=True, num_buckets=32, max_distance=128):
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
    Backend support: generic Array API code on every namespace (jit-safe).

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
    rel = as_index(xp, relative, "relative")  # no abs overflow, no unsigned wrap-around
    top = min(max_distance, _distance_top(xp, relative.dtype, rel.dtype))
    # every distance from max_distance on has the last bucket: clipping there is exact, and
    # abs cannot overflow at the dtype's minimum
    rel = xp.clip(rel, min=-top, max=top)
    zero = xp.zeros_like(rel)
    if bidirectional:
        offset = xp.where(rel > 0, zero + nb, zero)
        n = xp.abs(rel)
    else:
        offset = zero
        n = -xp.minimum(rel, zero)
    steps = _steps_array(xp, _t5_steps(nb, max_exact, max_distance, top), rel)
    large = max_exact + _count_steps(xp, steps, n)
    out = offset + xp.where(n < max_exact, n, large)
    dtype = _bucket_dtype(xp, relative.dtype, rel.dtype, num_buckets - 1)
    return out if dtype == out.dtype else xp.astype(out, dtype)


def deberta_bucket(relative, /, *, bucket_size=256, max_position=512):
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
    Backend support: generic Array API code on every namespace (jit-safe).

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
    rel = as_index(xp, relative, "relative")  # no negation overflow, no unsigned wrap-around
    top = _distance_top(xp, relative.dtype, rel.dtype)
    largest = _deberta_top(bucket_size, max_position, top)
    if largest - mid > MAX_BUCKETS:
        raise ValueError(
            f"bucket_size={bucket_size} with max_position={max_position} gives "
            f"{largest - mid} log buckets for {relative.dtype} distances, more than "
            f"{MAX_BUCKETS} (2**20); use a smaller bucket_size or a max_position further "
            "above bucket_size // 2"
        )
    rel = -xp.clip(rel, min=-top, max=top)  # only the index dtype's minimum moves: same bucket
    a = xp.abs(rel)
    steps = _steps_array(xp, _deberta_steps(bucket_size, max_position, top), a)
    mag = mid + _count_steps(xp, steps, a)
    sign = xp.where(rel < 0, xp.zeros_like(rel) - 1, xp.ones_like(rel))
    out = xp.where(a <= mid, rel, sign * mag)
    dtype = _bucket_dtype(xp, relative.dtype, rel.dtype, largest)
    return out if dtype == out.dtype else xp.astype(out, dtype)


# --------------------------------------------------------------------------- bias and shift

def relative_bias(table, index, /):
    """A learned per-head bias looked up by bucket: ``out[h, i, j] = table[index[i, j], h]``.

    Parameters
    ----------
    table : array
        Real ``(num_buckets, heads)`` (T5's ``relative_attention_bias.weight``).
    index : array
        Integer bucket ids in ``[0, num_buckets)`` (any integer dtype), any shape ``P``
        (usually ``(q, k)``).

    Returns
    -------
    array
        ``(heads,) + P``, in ``table``'s dtype; gradients flow into ``table`` on autograd
        backends.

    Raises
    ------
    TypeError
        ``table`` not a floating array or ``index`` not an integer array.
    ValueError
        ``table`` not 2-D; (eager arrays) an index outside ``[0, num_buckets)``.

    Notes
    -----
    Backend support: generic Array API code (one ``take``) on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> table = np.arange(6.0).reshape(3, 2)     # 3 buckets, 2 heads
    >>> arrpos.relative_bias(table, np.array([[0, 2], [1, 0]]))[1].tolist()
    [[1.0, 5.0], [3.0, 1.0]]
    """
    xp = array_namespace(table, index, name="table and index")
    check_array(xp, table, "table", kind="floating")
    check_array(xp, index, "index", kind="integer")
    if table.ndim != 2:
        raise ValueError(f"table must have shape (num_buckets, heads), got {tuple(table.shape)}")
    index = check_index(xp, index, table.shape[0], "index", "the rows of table")
    shape = tuple(index.shape)
    rows = xp.take(table, xp.reshape(index, (-1,)), axis=0)  # (prod(P), heads)
    rows = xp.reshape(rows, shape + (table.shape[1],))
    return xp.permute_dims(rows, (rows.ndim - 1,) + tuple(range(rows.ndim - 1)))


def rel_shift(scores, /):
    """Transformer-XL's relative shift on the last two axes ``(q, k)``.

    ``scores[..., i, m]`` is computed against the relative embedding of distance ``k-1-m``
    (descending positions ``k-1 .. 0``); the result is aligned so that
    ``out[..., i, j] = scores[..., i, j + q - 1 - i]`` wherever ``j + q - 1 - i < k``, i.e.
    query ``i`` (absolute position ``k - q + i``) against key ``j`` at distance
    ``k - q + i - j``; the remaining entries (keys after the query) are zero.

    Parameters
    ----------
    scores : array
        Real array of shape ``(..., q, k)``.

    Returns
    -------
    array
        Same shape and dtype.

    Raises
    ------
    TypeError
        ``scores`` not a real array.
    ValueError
        Fewer than two axes.

    Notes
    -----
    Computed as in Transformer-XL: prepend a zero column, re-read the buffer with the rows one
    element longer, drop the first ``q`` elements; then the entries without a source are zeroed.
    Backend support: generic Array API code (reshapes only) on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> s = np.arange(1.0, 10.0).reshape(3, 3)
    >>> arrpos.rel_shift(s).tolist()
    [[3.0, 0.0, 0.0], [5.0, 6.0, 0.0], [7.0, 8.0, 9.0]]
    """
    xp = array_namespace(scores, name="scores")
    check_array(xp, scores, "scores", kind="real", min_ndim=2)
    return _rel_shift(xp, scores)


def _rel_shift(xp, scores):
    q, k = scores.shape[-2], scores.shape[-1]
    lead = tuple(scores.shape[:-2])
    dev = device_of(scores)
    pad = xp.zeros(lead + (q, 1), dtype=scores.dtype, device=dev)
    flat = xp.reshape(xp.concat([pad, scores], axis=-1), lead + (q * (k + 1),))
    out = xp.reshape(flat[..., q:], lead + (q, k))
    i = xp.reshape(xp.arange(q, device=dev), (q, 1))
    j = xp.reshape(xp.arange(k, device=dev), (1, k))
    return xp.where(j - i <= k - q, out, xp.zeros_like(out))


# --------------------------------------------------------------------------- Shaw et al.

def _check_qd(q, table, qname, tname):
    if q.shape[-1] != table.shape[-1]:
        raise ValueError(
            f"{qname} and {tname} must share the feature size, got {qname}.shape "
            f"{tuple(q.shape)} and {tname}.shape {tuple(table.shape)}"
        )


def _check_index(xp, index, q, n, qname, tname):
    """``index`` ``(q, k)`` into the ``n`` rows of ``tname``, in the index dtype."""
    check_array(xp, index, "index", kind="integer")
    if index.ndim != 2 or index.shape[0] != q:
        raise ValueError(
            f"index must have shape ({q}, k) (one row per row of {qname}), got {tuple(index.shape)}"
        )
    return check_index(xp, index, n, "index", f"the rows of {tname}")


def shaw_key_scores(q, table, index, /):
    """Shaw et al.'s key term ``out[..., i, j] = q[..., i, :] . table[index[i, j], :]``.

    Computed as one product of the queries with the ``2K+1`` rows of the table followed by a
    gather, never forming the ``(q, k, dim)`` tensor of per-pair embeddings ``a_ij``.

    Parameters
    ----------
    q : array
        Floating queries ``(..., q, dim)``.
    table : array
        Floating relative embeddings ``(num_rows, dim)`` (``a^K`` of the paper, ``2K+1`` rows).
    index : array
        Integer ``(q, k)`` rows of ``table`` per pair, e.g. from :func:`shaw_index`.

    Returns
    -------
    array
        ``(..., q, k)``: add it to ``q @ k^T`` before scaling, as in the paper. The promoted
        dtype of ``q`` and ``table`` (16-bit inputs are computed in float32 and rounded once).

    Raises
    ------
    TypeError
        Non-floating ``q`` / ``table`` or non-integer ``index``.
    ValueError
        Mismatched feature sizes, ``index`` not ``(q, k)``, (eager) an index out of range.

    Notes
    -----
    Cost ``O(q * num_rows * dim)`` for the product plus ``O(q * k)`` for the gather, instead of
    ``O(q * k * dim)`` memory and time for the naive form.
    Backend support: generic Array API code on every namespace; gradients flow on autograd
    backends.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> q = np.ones((2, 3)); table = np.arange(9.0).reshape(3, 3)
    >>> idx = arrpos.shaw_index(arrpos.relative_positions(2, 2), max_distance=1)
    >>> arrpos.shaw_key_scores(q, table, idx).tolist()
    [[12.0, 21.0], [3.0, 12.0]]
    """
    xp = array_namespace(q, table, index, name="q, table and index")
    check_array(xp, q, "q", kind="floating", min_ndim=2)
    index = check_shaw_key(xp, q, table, index)
    work, out = work_float(xp, q.dtype, table.dtype)
    s = shaw_key(xp, xp.astype(q, work), xp.astype(table, work), index)
    return xp.astype(s, out)


def check_shaw_key(xp, q, table, index, tname="table"):
    """Shaw's key table ``(num_rows, dim)`` and ``(q, k)`` index for queries ``q``; returns
    the index in the index dtype."""
    check_array(xp, table, tname, kind="floating", ndim=2, shape_hint="(num_rows, dim)")
    _check_qd(q, table, "q", tname)
    return _check_index(xp, index, q.shape[-2], table.shape[0], "q", tname)


def shaw_key(xp, q, table, index):
    """``q . table[index]`` per pair (validated, one dtype): a product, then a gather."""
    return _gather_last(xp, _matmul_t(xp, q, table), index)


def shaw_value_term(weights, table, index, /):
    """Shaw et al.'s value term ``out[..., i, :] = sum_j weights[..., i, j] table[index[i, j], :]``.

    The attention weights are first scattered into the ``num_rows`` buckets
    (``w[..., i, b] = sum over j with index[i, j] == b``), then multiplied by the table: the
    ``(q, k, dim)`` tensor of per-pair embeddings is never formed.

    Parameters
    ----------
    weights : array
        Floating attention weights ``(..., q, k)`` (after the softmax).
    table : array
        Floating relative embeddings ``(num_rows, dim)`` (``a^V`` of the paper).
    index : array
        Integer ``(q, k)`` rows of ``table`` per pair.

    Returns
    -------
    array
        ``(..., q, dim)``: add it to ``weights @ v``. The promoted dtype of ``weights`` and
        ``table`` (16-bit inputs are computed in float32 and rounded once).

    Raises
    ------
    TypeError
        Non-floating ``weights`` / ``table`` or non-integer ``index``.
    ValueError
        ``table`` not 2-D, ``index`` not ``weights.shape[-2:]``, (eager) an index out of range.

    Notes
    -----
    The scatter is ``num_rows`` masked row sums over the weights (the Array API has no
    scatter-add): ``O(num_rows * q * k)`` time and one weights-sized temporary, then
    ``O(q * num_rows * dim)`` for the product.
    Backend support: generic Array API code on every namespace; gradients flow on autograd
    backends.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> w = np.full((2, 2), 0.5); table = np.arange(6.0).reshape(3, 2)
    >>> idx = arrpos.shaw_index(arrpos.relative_positions(2, 2), max_distance=1)
    >>> arrpos.shaw_value_term(w, table, idx).tolist()
    [[3.0, 4.0], [1.0, 2.0]]
    """
    xp = array_namespace(weights, table, index, name="weights, table and index")
    check_array(xp, weights, "weights", kind="floating", min_ndim=2)
    index = check_shaw_value(xp, tuple(weights.shape), table, index, "weights")
    work, out = work_float(xp, weights.dtype, table.dtype)
    term = shaw_value(xp, xp.astype(weights, work), xp.astype(table, work), index)
    return xp.astype(term, out)


def check_shaw_value(xp, weights_shape, table, index, wname="scores", tname="table"):
    """Shaw's value table ``(num_rows, dim)`` and the ``(q, k)`` index of weights of shape
    ``weights_shape``; returns the index in the index dtype."""
    check_array(xp, table, tname, kind="floating", ndim=2, shape_hint="(num_rows, dim)")
    index = _check_index(xp, index, weights_shape[-2], table.shape[0], wname, tname)
    if index.shape[1] != weights_shape[-1]:
        raise ValueError(
            f"index must have the shape of {wname}' last two axes {tuple(weights_shape[-2:])}, "
            f"got {tuple(index.shape)}"
        )
    return index


def shaw_value(xp, weights, table, index):
    """``sum_j weights[.., i, j] table[index[i, j]]`` (validated, one dtype): the weights
    scattered into the table's rows, then one product."""
    zero = xp.zeros_like(weights)
    buckets = [xp.sum(xp.where(index == b, weights, zero), axis=-1)
               for b in range(table.shape[0])]
    scattered = xp.stack(buckets, axis=-1)  # (..., q, num_rows)
    return xp.matmul(scattered, table)


# --------------------------------------------------------------------------- Transformer-XL

def transformer_xl_scores(q, k, r, u, v, /):
    """Transformer-XL's attention score ``(q + u) k^T + rel_shift((q + v) r^T)`` (unscaled).

    Parameters
    ----------
    q : array
        Floating queries ``(..., q, dim)``; the last query is the last key (memory first).
    k : array
        Floating keys ``(..., k, dim)`` (memory followed by the segment), ``k >= q``.
    r : array
        Projected relative embeddings ``(..., k, dim)`` for the descending distances
        ``k-1, ..., 0`` (Transformer-XL's ``W_{k,R} R``, R the split-layout sinusoid).
    u, v : array
        The two global biases (``r_w_bias``, ``r_r_bias``), broadcastable against ``q``,
        e.g. ``(dim,)`` or ``(heads, 1, dim)``.

    Returns
    -------
    array
        ``(..., q, k)``: entry ``(i, j)`` scores query ``i`` (at position ``k - q + i``)
        against key ``j`` at distance ``k - q + i - j``; entries for keys after the query
        get only the content term (mask them). The promoted dtype of ``q``, ``k`` and ``r``
        (16-bit inputs are computed in float32 and rounded once).

    Raises
    ------
    TypeError
        A non-floating input.
    ValueError
        Mismatched feature sizes or ``r`` not one row per key.

    Notes
    -----
    Backend support: generic Array API code (two products and :func:`rel_shift`).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> q = np.ones((2, 2)); k = np.ones((3, 2)); r = np.arange(6.0).reshape(3, 2)
    >>> u = np.zeros(2); v = np.zeros(2)
    >>> arrpos.transformer_xl_scores(q, k, r, u, v).tolist()
    [[7.0, 11.0, 2.0], [3.0, 7.0, 11.0]]
    """
    xp = array_namespace(q, k, r, u, v, name="q, k, r, u and v")
    for name, a in (("q", q), ("k", k), ("r", r)):
        check_array(xp, a, name, kind="floating", min_ndim=2)
    for name, a in (("u", u), ("v", v)):
        check_array(xp, a, name, kind="floating", min_ndim=1)
        _check_qd(q, a, "q", name)
    _check_qd(q, k, "q", "k")
    _check_qd(q, r, "q", "r")
    if r.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"r must have one row per key ({k.shape[-2]}), got r.shape {tuple(r.shape)}"
        )
    if k.shape[-2] < q.shape[-2]:
        raise ValueError(f"k must have at least as many rows as q, got {k.shape} and {q.shape}")
    broadcast_leads({"q": q, "k": k, "r": r})
    broadcast_leads({"q": q, "u": u, "v": v}, keep=0)  # u, v are added to q
    work, out = work_float(xp, q.dtype, k.dtype, r.dtype)
    q, k, r, u, v = (xp.astype(a, work) for a in (q, k, r, u, v))
    content = _matmul_t(xp, q + u, k)
    position = _rel_shift(xp, _matmul_t(xp, q + v, r))
    return xp.astype(content + position, out)


# --------------------------------------------------------------------------- DeBERTa

def deberta_scores(q, k, pos_key, pos_query, bucket, /, *, scale_factor=None):
    """DeBERTa's disentangled attention score: content-to-content, content-to-position and
    position-to-content, as transformers' DeBERTa-v2 (``disentangled_attention_bias``).

    With ``span = num_rows // 2`` and ``idx = clip(bucket + span, 0, 2 span - 1)``::

        c2c[i, j] = q_i . k_j
        c2p[i, j] = q_i . pos_key[idx[i, j]]
        p2c[i, j] = k_j . pos_query[idx[i, j]]
        out = (c2c + c2p + p2c) / sqrt(dim * scale_factor)

    Parameters
    ----------
    q, k : array
        Floating ``(..., q, dim)`` and ``(..., k, dim)`` (projected content).
    pos_key, pos_query : array or None
        Projected relative embeddings ``(..., 2 span, dim)``: the key projection (c2p) and the
        query projection (p2c) of the first ``2 span`` rows of ``rel_embeddings``. ``None``
        leaves that term out (``pos_att_type`` without it).
    bucket : array
        Integer ``(q, k)`` DeBERTa buckets of ``query - key``, as from
        ``deberta_bucket(relative_positions(q, k))``.
    scale_factor : float, optional
        Default ``1 + `` the number of position terms present (transformers' rule).

    Returns
    -------
    array
        ``(..., q, k)`` scores before bias, mask and softmax, in the promoted dtype of ``q``
        and ``k`` (16-bit inputs are computed in float32 and rounded once).

    Raises
    ------
    TypeError
        A non-floating input or a non-integer ``bucket``.
    ValueError
        Mismatched feature sizes, an odd or unequal number of position rows, ``bucket`` not
        ``(q, k)``, a non-positive ``scale_factor``.

    Notes
    -----
    transformers builds the p2c index from ``key - key`` positions, which equals the rule
    above for self-attention (``q == k``); for ``q != k`` this function uses the same
    ``(q, k)`` bucket for both terms.
    Backend support: generic Array API code on every namespace; gradients flow.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> q = np.ones((2, 4)); k = np.ones((2, 4)); pk = np.zeros((4, 4)); pq = np.zeros((4, 4))
    >>> b = arrpos.deberta_bucket(arrpos.relative_positions(2, 2), bucket_size=4, max_position=8)
    >>> arrpos.deberta_scores(q, k, pk, pq, b).tolist()
    [[1.1547005383792517, 1.1547005383792517], [1.1547005383792517, 1.1547005383792517]]
    """
    xp = array_namespace(q, k, pos_key, pos_query, bucket,
                         name="q, k, pos_key, pos_query and bucket")
    check_array(xp, q, "q", kind="floating", min_ndim=2)
    check_array(xp, k, "k", kind="floating", min_ndim=2)
    _check_qd(q, k, "q", "k")
    rows = None
    for name, p in (("pos_key", pos_key), ("pos_query", pos_query)):
        if p is None:
            continue
        check_array(xp, p, name, kind="floating", min_ndim=2)
        _check_qd(q, p, "q", name)
        if p.shape[-2] % 2 or (rows is not None and p.shape[-2] != rows):
            raise ValueError(
                f"{name} must have an even number of rows (2 * span), the same for pos_key and "
                f"pos_query, got shape {tuple(p.shape)}"
            )
        rows = p.shape[-2]
    check_array(xp, bucket, "bucket", kind="integer")
    qn, kn = q.shape[-2], k.shape[-2]
    if tuple(bucket.shape) != (qn, kn):
        raise ValueError(f"bucket must have shape ({qn}, {kn}), got {tuple(bucket.shape)}")
    broadcast_leads({"q": q, "k": k, "pos_key": pos_key, "pos_query": pos_query})
    terms = sum(p is not None for p in (pos_key, pos_query))
    if scale_factor is None:
        scale_factor = 1.0 + terms
    scale_factor = check_real_scalar(scale_factor, "scale_factor", positive=True)
    work, out = work_float(xp, q.dtype, k.dtype)
    q, k = xp.astype(q, work), xp.astype(k, work)
    scores = _matmul_t(xp, q, k)
    if rows is not None:
        span = rows // 2
        idx = xp.clip(as_index(xp, bucket, "bucket") + span, min=0, max=2 * span - 1)
        if pos_key is not None:
            scores = scores + _gather_last(xp, _matmul_t(xp, q, xp.astype(pos_key, work)), idx)
        if pos_query is not None:
            # p2c[i, j] = (k pos_query^T)[j, idx[i, j]]: gather along the key rows' buckets
            s = _matmul_t(xp, k, xp.astype(pos_query, work))  # (..., k, 2 span)
            s_t = _gather_last(xp, s, xp.matrix_transpose(idx))  # [j, i] = s[j, idx[i, j]]
            scores = scores + xp.matrix_transpose(s_t)
    return xp.astype(scores / math.sqrt(q.shape[-1] * scale_factor), out)

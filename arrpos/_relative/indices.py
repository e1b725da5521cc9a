"""Relative index matrices: 1-D key-minus-query distances, Swin/BEiT window indices,
Swin-V2 log-spaced coordinates and Shaw et al.'s clipped index."""
from __future__ import annotations

import math
from typing import Literal

import numpy as np

from .. import _dispatch
from .._lib import (
    array_namespace,
    as_index,
    check_array,
    check_choice,
    check_dtype_arg,
    check_offset,
    check_positive_int,
    check_shape,
    check_size,
    default_float,
    device_of,
    from_host,
    index_dtype,
)
from .buckets import bucket_dtype
from ..typing import Array, DType, Device, Namespace, Shape

__all__ = [
    "log_relative_coords",
    "relative_index_nd",
    "relative_positions",
    "shaw_index",
]


# --------------------------------------------------------------------------- index matrices

def relative_positions(query_len: int, key_len: int, *, query_offset: int = 0,
                       device: Device | None = None, xp: Namespace | None = None) -> Array:
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



def relative_index_nd(window: Shape, *, device: Device | None = None,
                      xp: Namespace | None = None) -> Array:
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


def log_relative_coords(window: Shape, *, pretrained_window: Shape | None = None,
                        mode: Literal["swin", "cr"] = "swin", dtype: DType | None = None,
                        device: Device | None = None, xp: Namespace | None = None) -> Array:
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


def shaw_index(relative: Array, /, *, max_distance: int) -> Array:
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
    Backend support: generic Array API code on every namespace; the dispatcher routes NumPy
    arrays and torch CPU tensors to a compiled clip-and-shift (one pass over ``relative``,
    every integer dtype, the same integers; the result C-contiguous).

    Examples
    --------
    >>> import arrpos
    >>> arrpos.shaw_index(arrpos.relative_positions(1, 6), max_distance=2).tolist()
    [[2, 3, 4, 4, 4, 4]]
    """
    xp = array_namespace(relative, name="relative")
    check_array(xp, relative, "relative", kind="integer")
    wide = index_dtype(xp, device_of(relative))
    k = check_positive_int(max_distance, "max_distance", minimum=0,
                           maximum=int(xp.iinfo(wide).max) // 2)
    # relative's dtype when it is signed and holds 2K (then -K fits too), else the index
    # dtype, into which every value is taken exactly: no unsigned wrap-around
    dtype = bucket_dtype(xp, relative.dtype, wide, 2 * k)
    rel = relative
    if dtype != rel.dtype and xp.iinfo(rel.dtype).max > xp.iinfo(wide).max:
        rel = as_index(xp, rel, "relative")  # uint64 from 2**63: refused (eager arrays)
    return _dispatch.call("clip_shift", xp, rel, arrays=(rel,), lo=-k, hi=k, shift=k,
                          dtype=dtype)



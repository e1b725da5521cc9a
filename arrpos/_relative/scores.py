"""Relative biases and scores: the bias gather, Transformer-XL's shift, Shaw et al.'s two
terms, the Transformer-XL score and DeBERTa's disentangled terms."""
from __future__ import annotations

import math

from .. import _dispatch
from .._lib import (
    array_namespace,
    as_index,
    broadcast_leads,
    check_array,
    check_index,
    check_offset,
    check_positive_int,
    check_real_scalar,
    check_size,
    device_of,
    work_float,
)
from .._lib._namespace import dense_array
from ..typing import Array
from .buckets import t5_bucket

__all__ = [
    "deberta_scores",
    "rel_shift",
    "relative_bias",
    "shaw_key_scores",
    "shaw_value_term",
    "t5_bias",
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


# --------------------------------------------------------------------------- bias and shift

def relative_bias(table: Array, index: Array, /) -> Array:
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
    Backend support: generic Array API code (one ``take``) on every namespace; the dispatcher
    routes NumPy arrays and torch CPU tensors to a compiled gather, CuPy arrays and torch
    CUDA tensors without autograd to a CUDA one (the same values, bit for bit; their result
    is C-contiguous, the generic one a transposed view), and Dask arrays to one task per
    chunk of heads and ``index`` (the table's rows whole; lazy ids are checked as their
    chunks are computed).

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
    index = dense_array(index, "index")
    if index.dtype != xp.int32:  # every gather takes int32 ids as they are: no widened copy
        index = as_index(xp, index, "index")
    # ids in range: checked here unless the kernel that serves the call checks them itself
    return _dispatch.call("relative_bias", xp, table, index, arrays=(table, index),
                          dtype=table.dtype, check=lambda: check_index(
                              xp, index, table.shape[0], "index", "the rows of table"))


def t5_bias(table: Array, /, query_len: int, key_len: int, *, bidirectional: bool = True,
            max_distance: int = 128, query_offset: int = 0) -> Array:
    """T5's position bias of ``query_len`` queries against ``key_len`` keys, from the lengths:
    ``relative_bias(table, t5_bucket(relative_positions(query_len, key_len, ...), ...))``
    without bucketing the ``(q, k)`` distances.

    Parameters
    ----------
    table : array
        Real ``(num_buckets, heads)``: T5's ``relative_attention_bias.weight`` (its rows are
        the buckets, ``num_buckets`` of :func:`t5_bucket`).
    query_len, key_len : int
        Number of queries and keys (>= 0).
    bidirectional : bool, optional
        ``not is_decoder`` in transformers' ``T5Attention``.
    max_distance : int, optional
        T5's ``relative_attention_max_distance``.
    query_offset : int, optional
        Absolute position of the first query (transformers' ``cache_position[0]``; as for
        :func:`relative_positions`).

    Returns
    -------
    array
        ``(heads, query_len, key_len)`` in ``table``'s dtype, equal to ``relative_bias`` of the
        bucketed matrix, bit for bit (transformers' ``compute_bias(q, k)[0]``).

    Raises
    ------
    TypeError
        ``table`` not a floating array; non-int lengths or options.
    ValueError
        ``table`` not 2-D; what :func:`t5_bucket` and :func:`relative_positions` refuse.

    Notes
    -----
    A bucket depends on the distance ``j - i`` only, so the ``q + k - 1`` distinct distances
    are bucketed once, their rows of ``table`` gathered, and row ``i`` of head ``h`` is the
    window of those rows' column ``h`` at ``q - 1 - i``: no bucket matrix. Backend support:
    the buckets as :func:`t5_bucket`; the windows copied by a compiled kernel for NumPy arrays
    and torch CPU tensors without autograd (no ids at all), gathered by :func:`relative_bias`'s
    CUDA kernel and Dask graph at ids ``j - i + q - 1`` made on the device, and by ``take``
    elsewhere.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> table = np.arange(64.0).reshape(32, 2)
    >>> arrpos.t5_bias(table, 2, 3)[0].tolist()
    [[0.0, 34.0, 36.0], [2.0, 0.0, 34.0]]
    """
    xp = array_namespace(table, name="table")
    check_array(xp, table, "table", kind="floating")
    if table.ndim != 2:
        raise ValueError(f"table must have shape (num_buckets, heads), got {tuple(table.shape)}")
    q = check_positive_int(query_len, "query_len", minimum=0)
    k = check_positive_int(key_len, "key_len", minimum=0)
    check_size(q * k, "the bias matrix")
    dev = device_of(table)
    query_offset = check_offset(xp, query_offset, q, k, device=dev)
    # the line of distances j - (i + offset) for u = j - i + q - 1 in [0, q + k - 1)
    n = max(q + k - 1, 0)
    line = xp.arange(n, device=dev) - (q - 1 + query_offset)
    buckets = t5_bucket(line, bidirectional=bidirectional, num_buckets=table.shape[0],
                        max_distance=max_distance)
    if q == 0 or k == 0:
        return relative_bias(table, xp.zeros((q, k), dtype=xp.int32, device=dev))
    # each distance's row of the table: row i of the bias is the window of those rows at
    # q - 1 - i (the kernels copy the windows: no (q, k) ids to make or check)
    rows = xp.take(table, buckets, axis=0)
    return _dispatch.call("toeplitz_bias", xp, rows, arrays=(rows,), q=q, k=k, dtype=rows.dtype)


def rel_shift(scores: Array, /) -> Array:
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


def shaw_key_scores(q: Array, table: Array, index: Array, /) -> Array:
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


def shaw_value_term(weights: Array, table: Array, index: Array, /) -> Array:
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

def transformer_xl_scores(q: Array, k: Array, r: Array, u: Array, v: Array, /) -> Array:
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

def deberta_scores(q: Array, k: Array, pos_key: Array | None, pos_query: Array | None,
                   bucket: Array, /, *, scale_factor: float | None = None) -> Array:
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

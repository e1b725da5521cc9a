"""Reference attention with position terms, and the analysis of position tables.

``properties`` measures the three properties of a position encoding from the lecture notes
(after Wang et al., 2021, "On position embeddings in BERT") on a proximity matrix
``phi(x, y)`` between positions: monotonicity (``m > n  <=>  phi(x, x+m) < phi(x, x+n)``),
translation invariance (``phi(x1, x1+m) = phi(x2, x2+m)``) and symmetry
(``phi(x, y) = phi(y, x)``).
"""
from __future__ import annotations

import math
from typing import Literal, NamedTuple

import numpy as np

from ._lib import (
    array_namespace,
    broadcast_leads,
    check_array,
    check_bool,
    check_choice,
    check_real_scalar,
    check_size,
    device_of,
    has_float64,
    is_unreadable,
    work_float,
)
from ._relative.scores import check_shaw_key, check_shaw_value, shaw_key, shaw_value
from .typing import Array

__all__ = ["PositionProperties", "attention", "properties", "similarity"]


def attention(q: Array, k: Array, v: Array, /, *, bias: Array | None = None,
              mask: Array | None = None, causal: bool = False, scale: float | None = None,
              relative: tuple[Array, Array, Array] | None = None,
              return_weights: bool = False) -> Array | tuple[Array, Array]:
    """Reference softmax attention over ``(..., seq, dim)`` with position terms.

    ``softmax(scale * (q k^T + key_term) + bias, masked) @ v + value_term``, computed stably
    (the row maximum is subtracted before ``exp``).

    Parameters
    ----------
    q, k, v : array
        Floating ``(..., q, d)``, ``(..., k, d)``, ``(..., k, dv)``.
    bias : array, optional
        Additive bias broadcastable to ``(..., q, k)``, added after scaling: ALiBi, T5's
        relative bias, ``-inf`` for masked keys.
    mask : array, optional
        Boolean, broadcastable to ``(..., q, k)``; ``True`` where a query may attend (torch's
        ``scaled_dot_product_attention`` convention).
    causal : bool, optional
        Query ``i`` sees keys ``j <= i + (k - q)`` (the queries are the last positions, as
        with a cache).
    scale : float, optional
        Default ``1 / sqrt(d)``.
    relative : tuple, optional
        Shaw et al.'s relative representations ``(key_table, value_table, index)``:
        ``key_table`` ``(rows, d)`` enters the scores through :func:`shaw_key_scores` (before
        scaling, as in the paper), ``value_table`` ``(rows, dv)`` the output through
        :func:`shaw_value_term`; either table may be ``None``; ``index`` is ``(q, k)``.
    return_weights : bool, optional
        Also return the attention weights ``(..., q, k)``.

    Returns
    -------
    array or tuple
        ``(..., q, dv)`` in the promoted dtype of ``q``, ``k`` and ``v``; with
        ``return_weights``, ``(output, weights)``. A query that may attend to no key gets zero
        weights and a zero output (not NaN).

    Raises
    ------
    TypeError
        Non-floating ``q``/``k``/``v``/``bias``, a non-bool ``mask`` or ``causal``, a
        ``relative`` that is not a 3-tuple; arrays of different libraries.
    ValueError
        Mismatched shapes (a ``bias`` or ``mask`` that does not broadcast to the scores
        ``(..., q, k)`` is named), ``scale <= 0``, arrays on different devices, scores of more
        than 2**34 elements.

    Notes
    -----
    The scale multiplies ``q`` before ``q k^T`` (as torch's ``scaled_dot_product_attention``
    does), and 16-bit inputs are computed in float32 and rounded once: float16 ``q k^T``
    overflows at 65504 where the scaled scores do not. Scaled scores past the working dtype's
    range (a ``scale`` near its maximum) give NaN rows, as torch's does: infinite scores have no
    softmax, and rounding them to a finite one would pick an answer.
    Backend support: generic Array API code on every namespace; gradients flow.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> q = np.zeros((1, 3, 4)); k = np.zeros((1, 3, 4)); v = np.eye(3)[None]
    >>> arrpos.attention(q, k, v, causal=True)[0].round(3).tolist()
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.333, 0.333, 0.333]]
    >>> slopes = arrpos.alibi_slopes(1)
    >>> out = arrpos.attention(q, k, v, bias=arrpos.alibi_bias(slopes, 3, 3), causal=True)
    >>> out.shape
    (1, 3, 3)
    """
    key_table = value_table = index = None
    if relative is not None:
        if not isinstance(relative, tuple) or len(relative) != 3:
            raise TypeError(
                "relative must be a tuple (key_table, value_table, index), got "
                f"{type(relative).__name__}"
            )
        key_table, value_table, index = relative
    xp = array_namespace(q, k, v, bias, mask, key_table, value_table, index,
                         name="q, k, v, bias, mask, key_table, value_table and index")
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_array(xp, a, name, kind="floating", min_ndim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the feature size, got {q.shape} and {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of rows, got {k.shape} and {v.shape}")
    causal = check_bool(causal, "causal")
    return_weights = check_bool(return_weights, "return_weights")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        scale = check_real_scalar(scale, "scale", positive=True)
    scores_shape = _scores_shape(q, k, v)
    if bias is not None:
        check_array(xp, bias, "bias", kind="floating")
        scores_shape = _broadcast_scores(bias, "bias", scores_shape)
    if mask is not None:
        check_array(xp, mask, "mask", kind="bool")
        scores_shape = _broadcast_scores(mask, "mask", scores_shape)
    check_size(math.prod(scores_shape), "the attention scores")
    if relative is not None:
        if key_table is not None:
            index = check_shaw_key(xp, q, key_table, index, "key_table")
            if index.shape[1] != scores_shape[-1]:
                raise ValueError(f"index must have shape ({q.shape[-2]}, {k.shape[-2]}) (one "
                                 f"row per query, one column per key), got {tuple(index.shape)}")
        if value_table is not None:
            if index is None:
                raise ValueError("relative needs an index for the value table")
            index = check_shaw_value(xp, scores_shape, value_table, index, tname="value_table")
    # 16-bit inputs are computed in float32 and rounded once; the scale is applied to q before
    # the product, as torch's scaled_dot_product_attention does, so q k^T cannot overflow
    # where the scaled scores do not (float16: 65504)
    work, out_dtype = work_float(xp, q.dtype, k.dtype, v.dtype)
    qs = xp.astype(q, work) * scale
    scores = xp.matmul(qs, xp.matrix_transpose(xp.astype(k, work)))
    if key_table is not None:
        scores = scores + shaw_key(xp, qs, xp.astype(key_table, work), index)
    if bias is not None:
        scores = scores + xp.astype(bias, work)
    weights = _softmax(xp, scores, _allowed(xp, scores, mask, causal))
    out = xp.matmul(weights, xp.astype(v, work))
    if value_table is not None:
        out = out + shaw_value(xp, weights, xp.astype(value_table, work), index)
    out = xp.astype(out, out_dtype)
    return (out, xp.astype(weights, out_dtype)) if return_weights else out


def _scores_shape(q: Array, k: Array, v: Array) -> tuple:
    """``(..., q, k)``: the leading axes of ``q``, ``k`` and ``v`` broadcast, or a ValueError
    naming them."""
    return broadcast_leads({"q": q, "k": k, "v": v}) + (q.shape[-2], k.shape[-2])


def _broadcast_scores(a: Array, name: str, shape: tuple) -> tuple:
    """The scores' shape once ``a`` (a bias or mask) is added: ``a`` must broadcast against
    ``(..., q, k)`` and keep its last two axes (it may add leading ones, e.g. heads), else a
    ValueError naming ``name`` rather than the library's "operands could not be broadcast"."""
    try:
        out = tuple(np.broadcast_shapes(tuple(a.shape), shape))
    except TypeError:  # axes of unknown length (lazy): not checked
        return shape
    except ValueError:
        out = None
    if out is None or out[-2:] != shape[-2:]:
        raise ValueError(f"{name} must broadcast to the scores (..., q, k) = {shape}, got "
                         f"shape {tuple(a.shape)}")
    return out


def _allowed(xp, scores, mask, causal):
    """The boolean mask of allowed (query, key) pairs, broadcast to ``scores``; None: all."""
    allowed = mask
    if causal:
        qn, kn = scores.shape[-2], scores.shape[-1]
        dev = device_of(scores)
        i = xp.reshape(xp.arange(qn, device=dev), (qn, 1))
        j = xp.reshape(xp.arange(kn, device=dev), (1, kn))
        c = j <= i + (kn - qn)  # queries aligned to the end of the keys (a cache)
        allowed = c if allowed is None else xp.logical_and(allowed, c)
    if allowed is None:
        return None
    return xp.broadcast_to(allowed, scores.shape)  # shapes checked at the boundary


def _softmax(xp, scores, allowed):
    """Row softmax with the row maximum subtracted; fully masked rows give zeros, not NaN."""
    if scores.shape[-1] == 0:  # no key: no weight (and no maximum to take)
        return scores
    if allowed is not None:
        scores = xp.where(allowed, scores, xp.full_like(scores, -math.inf))
    top = xp.max(scores, axis=-1, keepdims=True)
    top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
    e = xp.exp(scores - top)
    denom = xp.sum(e, axis=-1, keepdims=True)
    return e / xp.where(denom > 0, denom, xp.ones_like(denom))


def similarity(table: Array, /, *, metric: Literal["dot", "cosine"] = "dot") -> Array:
    """Proximity of every pair of rows of a position table.

    Parameters
    ----------
    table : array
        Floating ``(..., L, dim)``.
    metric : {"dot", "cosine"}, optional
        Dot product, or cosine similarity (rows of zero norm give 0).

    Returns
    -------
    array
        ``(..., L, L)``, symmetric, in ``table``'s dtype (16-bit inputs are computed in
        float32 and rounded once).

    Raises
    ------
    TypeError
        ``table`` not floating.
    ValueError
        Fewer than two axes, unknown ``metric``.

    Notes
    -----
    Backend support: generic Array API code on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.similarity(np.array([[1.0, 0.0], [3.0, 4.0]]), metric="cosine").tolist()
    [[1.0, 0.6], [0.6, 1.0]]
    """
    xp = array_namespace(table, name="table")
    check_array(xp, table, "table", kind="floating", min_ndim=2)
    metric = check_choice(metric, "metric", ("dot", "cosine"))
    check_size(math.prod(table.shape[:-1]) * table.shape[-2], "the similarity matrix")
    work, out = work_float(xp, table.dtype)
    table = xp.astype(table, work)
    if metric == "cosine":
        norm = xp.sqrt(xp.sum(table * table, axis=-1, keepdims=True))
        table = table / xp.where(norm > 0, norm, xp.ones_like(norm))
    return xp.astype(xp.matmul(table, xp.matrix_transpose(table)), out)


class PositionProperties(NamedTuple):
    """The three properties of a position encoding, each a float (1 = holds perfectly)."""

    monotonicity: float
    translation_invariance: float
    symmetry: float


def _skew(xp, s):
    """``(L, 2L-1)``: ``out[x, L-1 + x - y] = s[x, y]``, zeros elsewhere (diagonals as columns)."""
    n = s.shape[-1]
    flipped = xp.flip(s, axis=-1)
    padded = xp.concat([flipped, xp.zeros_like(s)], axis=-1)  # (L, 2L)
    flat = xp.reshape(padded, (2 * n * n,))[: n * (2 * n - 1)]
    return xp.reshape(flat, (n, 2 * n - 1))


def _between_offsets(xp, cen):
    """Translation invariance: the sum of squares explained by grouping the centred pairs by
    their offset (the columns of the skewed matrix)."""
    n = cen.shape[0]
    sk = _skew(xp, cen)  # zero-padded, diagonal (offset 0) entries already zero
    offsets = xp.arange(2 * n - 1, device=device_of(cen)) - (n - 1)
    counts = xp.astype(n - xp.abs(offsets), cen.dtype)
    gsum = xp.sum(sk, axis=0)
    return xp.sum(xp.where(offsets != 0, gsum * gsum / counts, xp.zeros_like(gsum)))


def _monotonicity(xp, phi):
    """Mean Spearman correlation between distance and proximity rank along each row, forward
    and backward, over ``max(2, n // 2)`` steps."""
    n = phi.shape[0]
    dev = device_of(phi)
    m = max(2, n // 2)
    rhos = []
    for direction in (1, -1):
        anchors = n - m
        x = xp.reshape(xp.arange(anchors, device=dev), (anchors, 1))
        if direction < 0:
            x = x + m
        steps = xp.reshape(xp.arange(1, m + 1, device=dev), (1, m))
        cols = x + direction * steps
        flat = xp.reshape(x * n + cols, (anchors * m,))
        prox = xp.reshape(xp.take(xp.reshape(phi, (n * n,)), flat), (anchors, m))
        ranks = xp.argsort(xp.argsort(-prox, axis=1, stable=True), axis=1, stable=True)
        d = xp.astype(ranks, phi.dtype) - xp.astype(steps - 1, phi.dtype)
        rhos.append(1.0 - 6.0 * xp.sum(d * d, axis=1) / (m * (m * m - 1)))
    return xp.mean(xp.concat(rhos))


def properties(table: Array, /, *,
               metric: Literal["dot", "cosine", "precomputed"] = "dot") -> PositionProperties:
    """Monotonicity, translation invariance and symmetry of a position encoding.

    The proximity ``phi`` is ``similarity(table, metric=metric)``, or ``table`` itself with
    ``metric="precomputed"`` (an ``(L, L)`` matrix such as one head of a relative bias).

    * **monotonicity**: for every anchor ``x`` and direction, the Spearman rank correlation
      between the distance ``m = 1 .. M`` (``M = max(2, L // 2)``) and ``phi(x, x +- m)``,
      negated and averaged over the anchors with ``M`` neighbours on that side: 1 when
      proximity always falls with distance, about 0 when unrelated (ties ranked in order).
    * **translation invariance**: the share of the variance of ``phi(x, y)`` (``x != y``)
      explained by the offset ``y - x``: ``1 - sum_offsets sum (phi - mean_offset)^2 /
      sum (phi - mean)^2``; 1 for a Toeplitz ``phi``, near 0 for unrelated values.
    * **symmetry**: the correlation of ``phi(x, y)`` with ``phi(y, x)`` over ``x != y``:
      1 symmetric, -1 antisymmetric (always 1 for the dot and cosine metrics).

    A ``phi`` constant over the pairs counts as translation invariant and symmetric.

    Parameters
    ----------
    table : array
        Floating ``(L, dim)`` (or ``(L, L)`` with ``metric="precomputed"``), ``L >= 3``.
    metric : {"dot", "cosine", "precomputed"}, optional
        How ``phi`` is formed.

    Returns
    -------
    PositionProperties
        A named tuple of three Python floats.

    Raises
    ------
    TypeError
        ``table`` not floating.
    ValueError
        Not 2-D, fewer than 3 positions, a precomputed matrix that is not square, unknown
        ``metric``; a table whose values cannot be read (traced under jit, a meta or fake
        tensor).

    Notes
    -----
    The values are read back (Dask arrays are computed). Backend support: generic Array API
    code on every namespace.

    Examples
    --------
    >>> import arrpos
    >>> p = arrpos.properties(arrpos.sinusoidal(64, 128))
    >>> round(p.translation_invariance, 6), round(p.symmetry, 6), p.monotonicity > 0.9
    (1.0, 1.0, True)
    """
    xp = array_namespace(table, name="table")
    check_array(xp, table, "table", kind="floating", min_ndim=2)
    metric = check_choice(metric, "metric", ("dot", "cosine", "precomputed"))
    if is_unreadable(table):  # a Dask table is computed (documented)
        raise ValueError("table must have values that can be read: properties returns Python "
                         "floats, and a traced (jit), meta or fake table has none")
    if table.ndim != 2:
        raise ValueError(f"table must be 2-D, got shape {tuple(table.shape)}")
    if metric == "precomputed":
        if table.shape[0] != table.shape[1]:
            raise ValueError(
                f"table must be a square (L, L) proximity matrix with metric='precomputed', "
                f"got shape {tuple(table.shape)}"
            )
        phi = table
    else:
        phi = similarity(table, metric=metric)
    n = phi.shape[0]
    if n < 3:
        raise ValueError(f"table must have at least 3 positions, got {n}")
    dev = device_of(phi)
    phi = xp.astype(phi, xp.float64 if has_float64(xp, dev) else xp.float32)  # sums of L**2
    off = xp.logical_not(xp.eye(n, dtype=xp.bool, device=dev))
    zero = xp.zeros_like(phi)
    count = n * (n - 1)
    mean = xp.sum(xp.where(off, phi, zero)) / count
    cen = xp.where(off, phi - mean, zero)
    total = xp.sum(cen * cen)
    within = total - _between_offsets(xp, cen)
    cross = xp.sum(cen * xp.matrix_transpose(cen))  # symmetry: correlation with the transpose
    mono = _monotonicity(xp, phi)
    total_f = float(total)
    scale = max(abs(float(mean)), 1.0) ** 2 * count * 1e-24
    if total_f <= scale:  # constant phi
        ti, sym = 1.0, 1.0
    else:
        ti = 1.0 - float(within) / total_f
        sym = float(cross) / total_f
    return PositionProperties(float(mono), ti, sym)

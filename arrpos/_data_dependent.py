"""Data-dependent position encodings, as reference implementations on the Array API: the
positions or biases depend on the tokens, not only on their indices.

* :func:`content_relative_bias`: Inkling's content-conditioned relative bias (transformers
  ``inkling2`` ``Inkling2RelativePositionBias``; x-transformers ``RelativeProjPositionalBias``).
* :func:`forgetting_bias`, :func:`forgetting_bias_per_row`: the Forgetting Transformer's
  forget-gate bias (Lin et al. 2025, "data-dependent ALiBi"; its official reference, fla's
  ``naive_forgetting_attn``, x-transformers ``DataDependentAlibi`` / ``PerRowDataDependentAlibi``).
* :func:`cope_positions`, :func:`cope_bias`: CoPE, contextual positions (Golovneva et al.
  2024; x-transformers ``CoPE``).
* :func:`pope_cos_sin`, :func:`apply_pope`: PoPE, polar positions (Gopalakrishnan et al. 2025;
  x-transformers ``PolarEmbedding``).

Each computes in float64 where the backend has it (float32 otherwise) and rounds once to the
inputs' dtype; gradients flow on autograd backends. Tensors are laid out as
:func:`arrpos.attention`'s: ``(..., heads, seq, features)``, biases ``(..., heads, q, k)``.
"""
from __future__ import annotations

import math

import numpy as np

from ._lib import (
    array_namespace,
    as_index,
    broadcast_leads,
    check_array,
    check_bool,
    check_int,
    check_real_scalar,
    check_size,
    device_of,
    has_float64,
    round_once,
)
from .typing import Array, DType, Device, Namespace

__all__ = ["apply_pope", "content_relative_bias", "cope_bias", "cope_positions",
           "forgetting_bias", "forgetting_bias_per_row", "pope_cos_sin"]

# Inkling2L2Clip's epsilon: x * min(threshold / (|x| + 1e-6), 1)
_CLIP_EPS = 1e-6


def _work(xp, *arrays):
    """``(work, out)``: float64 where the device has it (else float32), and the arrays'
    promoted floating dtype."""
    out = arrays[0].dtype
    for a in arrays[1:]:
        if a.dtype != out:
            out = xp.result_type(out, a.dtype)
    work = xp.float64 if has_float64(xp, device_of(arrays[0])) else xp.float32
    return work, out


def _take_rows(xp, values, index):
    """``out[..., i, j] = values[..., i, index[..., i, j]]``: leading axes broadcast, one
    ``take`` on the flattened values."""
    lead = broadcast_leads({"values": values, "index": index}, keep=2)
    rows, width = values.shape[-2], values.shape[-1]
    values = xp.broadcast_to(values, lead + (rows, width))
    index = xp.broadcast_to(index, lead + (rows, index.shape[-1]))
    n = math.prod(lead) * rows
    start = xp.reshape(xp.arange(n, dtype=index.dtype, device=device_of(index)) * width,
                       lead + (rows, 1))
    flat = xp.take(xp.reshape(values, (n * width,)), xp.reshape(index + start, (-1,)))
    return xp.reshape(flat, tuple(index.shape))


def _where0(xp, keep, x):
    """``x`` where ``keep``, 0 elsewhere (``keep`` broadcasts against ``x``)."""
    return xp.where(keep, x, xp.zeros_like(x))


def _sigmoid(xp, x):
    """``1 / (1 + exp(-x))`` without overflow (a masked ``-finfo.max`` gives 0)."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(xp, x):
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    return xp.clip(x, min=0.0) + xp.log1p(xp.exp(-xp.abs(x)))


# --------------------------------------------------------------------- Inkling

def content_relative_bias(states: Array, profiles: Array, relative: Array,
                          query_scale: Array | None = None, /, *,
                          clip: float | None = None) -> Array:
    """Inkling's content-conditioned relative bias: each query mixes a bank of learned
    bias-versus-distance profiles with its own per-head weights.

    ``bias[..., h, i, j] = (s @ profiles)[..., h, i, d]`` at the backward distance
    ``d = -relative[i, j]`` (query minus key) where ``0 <= d < extent``, 0 elsewhere (keys
    after the query, or too far back), with ``s`` the states, L2-clipped to ``clip`` and
    multiplied by ``query_scale`` when given.

    Parameters
    ----------
    states : array
        Floating ``(..., heads, q, d_rel)``: each query's mixing weights per head (Inkling's
        ``linear(hidden_states)`` times its learned ``scale``, heads before queries).
    profiles : array
        Floating ``(d_rel, extent)``: the bank of profiles (Inkling's ``proj``,
        x-transformers' ``distance_bank``); ``extent`` is ``rel_extent``.
    relative : array
        Integer ``(q, k)``, ``key - query`` (:func:`relative_positions`: queries aligned to
        the end of the keys with ``query_offset = k - q``).
    query_scale : array, optional
        Real ``(..., q)`` multiplier of each query's states after the clip (Inkling's log
        scaling: ``position_scale(position_ids, kind="log_floor", alpha=..., floor_scale=...)``).
    clip : float, optional
        Inkling's ``rel_l2_clip_threshold``: each head's vector is scaled by
        ``min(clip / (|s| + 1e-6), 1)`` (``Inkling2L2Clip``).

    Returns
    -------
    array
        ``(..., heads, q, k)`` in the promoted dtype of ``states`` and ``profiles``.

    Raises
    ------
    TypeError
        ``states`` / ``profiles`` not floating, ``relative`` not integer, ``query_scale``
        not real.
    ValueError
        Shapes that do not match (``d_rel``, ``q``, leading axes), ``clip`` <= 0.

    Notes
    -----
    transformers' ``Inkling2RelativePositionBias.forward`` is
    ``content_relative_bias(norm_input, proj, relative, scale, clip=threshold)`` with
    ``norm_input = (linear(h).view(b, q, heads, d) * norm.scale).transpose(1, 2)`` and
    ``relative = -relative_distance``; x-transformers' ``RelativeProjPositionalBias`` is the
    same without clip and scale. Backend support: generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> states = np.ones((1, 3, 1))                       # 1 head, 3 queries, d_rel = 1
    >>> profiles = np.array([[0.0, -1.0]])                # distance 0 -> 0, distance 1 -> -1
    >>> rel = arrpos.relative_positions(3, 3)
    >>> arrpos.content_relative_bias(states, profiles, rel)[0].tolist()
    [[0.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]]
    """
    xp = array_namespace(states, profiles, relative, query_scale,
                         name="states, profiles, relative and query_scale")
    check_array(xp, states, "states", kind="floating", min_ndim=3,
                shape_hint="(..., heads, q, d_rel)")
    check_array(xp, profiles, "profiles", kind="floating", ndim=2, shape_hint="(d_rel, extent)")
    check_array(xp, relative, "relative", kind="integer", ndim=2, shape_hint="(q, k)")
    heads, q, d_rel = states.shape[-3:]
    if profiles.shape[0] != d_rel:
        raise ValueError(f"profiles must have d_rel = {d_rel} rows (the last axis of states "
                         f"{tuple(states.shape)}), got shape {tuple(profiles.shape)}")
    if relative.shape[0] != q:
        raise ValueError(f"relative must have one row per query ({q}: states "
                         f"{tuple(states.shape)}), got shape {tuple(relative.shape)}")
    extent, k = profiles.shape[1], relative.shape[1]
    if extent < 1:
        raise ValueError("profiles must have at least one distance column, got shape "
                         f"{tuple(profiles.shape)}")
    if query_scale is not None:
        check_array(xp, query_scale, "query_scale", kind="real", min_ndim=1,
                    shape_hint="(..., q)")
        if query_scale.shape[-1] != q:
            raise ValueError(f"query_scale must have shape (..., {q}), got "
                             f"{tuple(query_scale.shape)}")
        broadcast_leads({"states": states[..., 0, :, 0], "query_scale": query_scale}, keep=1)
    if clip is not None:
        clip = check_real_scalar(clip, "clip", positive=True)
    check_size(math.prod(states.shape[:-3]) * heads * q * k, "the bias")
    work, out = _work(xp, states, profiles)
    s = xp.astype(states, work)
    if clip is not None:
        norm = xp.sqrt(xp.sum(s * s, axis=-1, keepdims=True))
        s = s * xp.clip(clip / (norm + _CLIP_EPS), max=1.0)
    if query_scale is not None:
        s = s * xp.astype(query_scale, work)[..., None, :, None]
    curves = xp.matmul(s, xp.astype(profiles, work))          # (..., heads, q, extent)
    distance = 0 - as_index(xp, relative, "relative")
    inside = (distance >= 0) & (distance < extent)
    bias = _take_rows(xp, curves, _where0(xp, inside, distance))
    return round_once(xp, _where0(xp, inside, bias), out)


# --------------------------------------------------------------------- Forgetting Transformer

def forgetting_bias(log_forget: Array, log_forget_reverse: Array | None = None, /,
                    query_len: int | None = None) -> Array:
    """The Forgetting Transformer's forget-gate bias ("data-dependent ALiBi").

    With ``L = cumsum(log_forget)`` along the sequence, the bias of query ``i`` (the last
    ``q`` of the ``n`` positions) on key ``j <= i`` is ``L[i] - L[j] = sum_{l=j+1}^{i}
    log f_l``: the log of the product of the forget gates between them. Keys after the query
    get 0 (mask them yourself), or, with ``log_forget_reverse`` (x-transformers'
    bidirectional form), ``L'[j] - L'[i]`` of the reverse gates' cumulative sum.

    Parameters
    ----------
    log_forget : array
        Floating ``(..., n)``: the log of each position's forget gate (``<= 0``; FoX's
        ``log_fgate``: ``logsigmoid(x @ w + b)``, per head: heads on a leading axis).
    log_forget_reverse : array, optional
        Floating ``(..., n)``: the gates of the backward direction (bidirectional).
    query_len : int, optional
        Queries: the last ``query_len`` positions (decoding with a cache; FoX's
        ``seqlen_q <= seqlen_k``). Default ``n``.

    Returns
    -------
    array
        ``(..., q, n)`` in the promoted dtype of the gates.

    Raises
    ------
    TypeError
        Gates not floating; ``query_len`` not an int.
    ValueError
        Gates 0-d or of shapes that do not broadcast; ``query_len`` outside ``[0, n]`` or
        given with ``log_forget_reverse``.

    Notes
    -----
    Equal to the official reference of Lin et al. (``forgetting_attention.py``'s test:
    ``log_lambda[..., -M:, None] - log_lambda[..., None, :]`` under the causal mask), fla's
    ``naive_forgetting_attn`` and x-transformers' ``DataDependentAlibi`` (whose gates are
    ``logsigmoid(linear(x)) * post_log_scale``). The cumulative sum and the differences are
    formed in float64 where the backend has it, then rounded once. Backend support: generic
    Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> g = np.log(np.array([1.0, 0.5, 0.5, 1.0]))
    >>> np.exp(arrpos.forgetting_bias(g)).round(3).tolist()[3]   # query 3 on keys 0..3
    [0.25, 0.5, 1.0, 1.0]
    """
    xp = array_namespace(log_forget, log_forget_reverse,
                         name="log_forget and log_forget_reverse")
    check_array(xp, log_forget, "log_forget", kind="floating", min_ndim=1, shape_hint="(..., n)")
    n = log_forget.shape[-1]
    q = n if query_len is None else check_int(query_len, "query_len", minimum=0, maximum=n)
    lead = tuple(log_forget.shape[:-1])
    if log_forget_reverse is not None:
        check_array(xp, log_forget_reverse, "log_forget_reverse", kind="floating", min_ndim=1,
                    shape_hint="(..., n)")
        if log_forget_reverse.shape[-1] != n:
            raise ValueError(f"log_forget_reverse must have n = {n} positions like log_forget, "
                             f"got shape {tuple(log_forget_reverse.shape)}")
        if q != n:
            raise ValueError(f"query_len must be n = {n} with log_forget_reverse (every "
                             f"position is a query), got {q}")
        lead = broadcast_leads({"log_forget": log_forget,
                                "log_forget_reverse": log_forget_reverse}, keep=1)
    check_size(math.prod(lead) * q * n, "the bias")
    arrays = (log_forget,) if log_forget_reverse is None else (log_forget, log_forget_reverse)
    work, out = _work(xp, *arrays)
    dev = device_of(log_forget)
    c = xp.cumulative_sum(xp.astype(log_forget, work), axis=-1)
    below = (xp.arange(n - q, n, device=dev)[:, None] >= xp.arange(n, device=dev)[None, :])
    bias = _where0(xp, below, c[..., n - q:, None] - c[..., None, :])
    if log_forget_reverse is not None:
        r = xp.cumulative_sum(xp.astype(log_forget_reverse, work), axis=-1)
        bias = bias + _where0(xp, ~below, r[..., None, :] - r[..., :, None])
    return round_once(xp, bias, out)


def forgetting_bias_per_row(log_forget: Array, /) -> Array:
    """The per-query forget-gate bias of x-transformers' ``PerRowDataDependentAlibi``: each
    query has its own gate on every earlier key.

    ``bias[..., i, j] = sum_{j <= t < i} log_forget[..., i, t]`` for ``j < i``, 0 for
    ``j >= i`` (the gates of ``t >= i`` are dropped, the diagonal included).

    Parameters
    ----------
    log_forget : array
        Floating ``(..., n, n)``: the log gates of query ``i`` on key ``t``
        (x-transformers: ``logsigmoid(q_f @ k_f.T * dim_head ** -0.5) * post_log_scale`` of
        small gate queries and keys).

    Returns
    -------
    array
        ``(..., n, n)`` in ``log_forget``'s dtype.

    Raises
    ------
    TypeError
        ``log_forget`` not floating.
    ValueError
        ``log_forget`` not a square ``(..., n, n)``.

    Notes
    -----
    A reverse cumulative sum along the keys, in float64 where the backend has it, rounded
    once. Backend support: generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> g = np.full((3, 3), np.log(0.5))
    >>> np.exp(arrpos.forgetting_bias_per_row(g)).tolist()
    [[1.0, 1.0, 1.0], [0.5, 1.0, 1.0], [0.25, 0.5, 1.0]]
    """
    xp = array_namespace(log_forget, name="log_forget")
    check_array(xp, log_forget, "log_forget", kind="floating", min_ndim=2,
                shape_hint="(..., n, n)")
    n = log_forget.shape[-1]
    if log_forget.shape[-2] != n:
        raise ValueError(f"log_forget must be square (..., n, n), got shape "
                         f"{tuple(log_forget.shape)}")
    work, out = _work(xp, log_forget)
    dev = device_of(log_forget)
    below = xp.arange(n, device=dev)[None, :] < xp.arange(n, device=dev)[:, None]  # t < i
    g = _where0(xp, below, xp.astype(log_forget, work))
    return round_once(xp, _where0(xp, below, _reverse_cumsum(xp, g)), out)


# --------------------------------------------------------------------- CoPE

def _cope_gates(xp, scores, mask, causal, work):
    q, k = scores.shape[-2:]
    dev = device_of(scores)
    gates = _sigmoid(xp, xp.astype(scores, work))
    keep = None
    if causal:
        keep = xp.arange(k, device=dev)[None, :] <= xp.arange(k - q, k, device=dev)[:, None]
    if mask is not None:
        keep = mask if keep is None else (keep & mask)
    return gates if keep is None else _where0(xp, keep, gates)


def _check_scores(xp, scores, mask, causal):
    check_array(xp, scores, "scores", kind="floating", min_ndim=2, shape_hint="(..., q, k)")
    causal = check_bool(causal, "causal")
    if causal and scores.shape[-2] > scores.shape[-1]:
        raise ValueError(f"scores must have q <= k with causal=True (queries are the last q "
                         f"keys), got shape {tuple(scores.shape)}")
    if mask is not None:
        check_array(xp, mask, "mask", kind="bool", min_ndim=2, shape_hint="(..., q, k)")
        if broadcast_leads({"scores": scores, "mask": mask}, keep=0) != tuple(scores.shape):
            raise ValueError(f"mask {tuple(mask.shape)} must broadcast to the shape of scores "
                             f"{tuple(scores.shape)}")
    return causal


def cope_positions(scores: Array, mask: Array | None = None, /, *, causal: bool = True,
                   max_position: float | None = None) -> Array:
    """CoPE's contextual positions: how many gated keys lie between each key and the query.

    ``g = sigmoid(scores)`` where the key is attended (``mask`` True, and not after the query
    when ``causal``), 0 elsewhere; the position of key ``j`` for query ``i`` is
    ``p[i, j] = sum_{t >= j} g[i, t]``, clipped to ``max_position``.

    Parameters
    ----------
    scores : array
        Floating ``(..., q, k)``: the gating logits, CoPE's ``q . k`` (x-transformers gates
        with the attention logits ``sim``: scaled, with biases).
    mask : array, optional
        Boolean, broadcasting against ``scores``: True where the query may attend.
    causal : bool, optional
        Queries are the last ``q`` keys and see no key after them (CoPE is causal).
    max_position : float, optional
        Upper clip of the positions (the table's last row: ``max_pos - 1``).

    Returns
    -------
    array
        ``(..., q, k)`` real positions, in ``scores``' dtype.

    Raises
    ------
    TypeError
        ``scores`` not floating, ``mask`` not boolean.
    ValueError
        ``q > k`` with ``causal``; shapes that do not broadcast; ``max_position < 0``.

    Notes
    -----
    A reverse cumulative sum of the gates along the keys, in float64 where the backend has
    it, rounded once. Backend support: generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.cope_positions(np.zeros((2, 2))).tolist()      # gates of 0.5
    [[0.5, 0.0], [1.0, 0.5]]
    """
    xp = array_namespace(scores, mask, name="scores and mask")
    causal = _check_scores(xp, scores, mask, causal)
    if max_position is not None:
        max_position = check_real_scalar(max_position, "max_position", minimum=0.0)
    work, out = _work(xp, scores)
    pos = _reverse_cumsum(xp, _cope_gates(xp, scores, mask, causal, work))
    if max_position is not None:
        pos = xp.clip(pos, max=max_position)
    return round_once(xp, pos, out)


def _reverse_cumsum(xp, g):
    """``out[..., j] = sum_{t >= j} g[..., t]``."""
    return xp.sum(g, axis=-1, keepdims=True) - xp.cumulative_sum(g, axis=-1) + g


def cope_bias(q: Array, scores: Array, table: Array, mask: Array | None = None, /, *,
              causal: bool = True, temperature: float | None = None) -> Array:
    """CoPE, contextual position encoding (Golovneva et al. 2024): a bias from a learned table
    of position vectors at each key's contextual (real) position.

    With ``p = cope_positions(scores, mask, causal=causal, max_position=P - 1)`` and
    ``z[..., i, m] = q[..., i, :] . table[m]``, the bias is ``z`` interpolated at ``p``:
    ``z[ceil p] w + z[floor p] (1 - w)``, ``w = p - floor p``; with ``temperature`` the
    soft one-hot form ``sum_m softmax_m(-|p - m| / temperature) z[m]``.

    Parameters
    ----------
    q : array
        Floating ``(..., q, d)`` queries.
    scores : array
        Floating ``(..., q, k)`` gating logits (see :func:`cope_positions`).
    table : array
        Floating ``(P, d)``: the position vectors (x-transformers' ``pos_emb``, ``max_pos``
        rows).
    mask : array, optional
        Boolean mask broadcasting against ``scores`` (True: attend).
    causal : bool, optional
        As :func:`cope_positions`.
    temperature : float, optional
        x-transformers' ``soft_onehot`` form with ``soft_onehot_temp`` (0.05 there).

    Returns
    -------
    array
        ``(..., q, k)``, to be added to the attention logits, in the promoted dtype.

    Raises
    ------
    TypeError
        Arrays not floating (``mask`` not boolean).
    ValueError
        ``d`` or ``q`` that do not match, leading axes that do not broadcast, an empty
        ``table``, ``temperature <= 0``.

    Notes
    -----
    x-transformers ``CoPE.forward(query, attn_logits)`` is ``cope_bias(query, attn_logits,
    pos_emb)`` on the causally masked logits (its masked entries gate 0, as here); without
    ``talking_heads``. Backend support: generic Array API code (the interpolation is one
    gather; the soft one-hot form builds ``(..., q, k, P)``).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> table = np.array([[0.0], [10.0]])                  # positions 0 and 1
    >>> arrpos.cope_bias(np.ones((2, 1)), np.zeros((2, 2)), table).tolist()
    [[5.0, 0.0], [10.0, 5.0]]
    """
    xp = array_namespace(q, scores, table, mask, name="q, scores, table and mask")
    check_array(xp, q, "q", kind="floating", min_ndim=2, shape_hint="(..., q, d)")
    causal = _check_scores(xp, scores, mask, causal)
    check_array(xp, table, "table", kind="floating", ndim=2, shape_hint="(P, d)")
    if table.shape[0] < 1 or table.shape[1] != q.shape[-1]:
        raise ValueError(f"table must have shape (P >= 1, d = {q.shape[-1]}) (d of q "
                         f"{tuple(q.shape)}), got {tuple(table.shape)}")
    if q.shape[-2] != scores.shape[-2]:
        raise ValueError(f"q {tuple(q.shape)} and scores {tuple(scores.shape)} must have the "
                         "same number of queries")
    lead = broadcast_leads({"q": q, "scores": scores}, keep=2)
    if temperature is not None:
        temperature = check_real_scalar(temperature, "temperature", positive=True)
    n_pos = table.shape[0]
    check_size(math.prod(lead) * scores.shape[-2] * scores.shape[-1]
               * (n_pos if temperature is not None else 1), "the bias")
    work, out = _work(xp, q, scores, table)
    pos = _reverse_cumsum(xp, _cope_gates(xp, scores, mask, causal, work))
    pos = xp.clip(pos, max=float(n_pos - 1))
    z = xp.matmul(xp.astype(q, work), xp.matrix_transpose(xp.astype(table, work)))
    if temperature is not None:
        grid = xp.astype(xp.arange(n_pos, device=device_of(pos)), work)
        logits = -xp.abs(pos[..., None] - grid) / temperature
        logits = logits - xp.max(logits, axis=-1, keepdims=True)
        weights = xp.exp(logits)
        weights = weights / xp.sum(weights, axis=-1, keepdims=True)
        return round_once(xp, xp.sum(weights * z[..., :, None, :], axis=-1), out)
    floor = xp.floor(pos)
    w = pos - floor
    low = xp.astype(floor, xp.int64 if has_float64(xp, device_of(pos)) else xp.int32)
    high = xp.astype(xp.ceil(pos), low.dtype)
    bias = _take_rows(xp, z, high) * w + _take_rows(xp, z, low) * (1.0 - w)
    return round_once(xp, bias, out)


# --------------------------------------------------------------------- PoPE

def pope_cos_sin(positions: Array | int, /, dim: int, *, base: float = 10000.0,
                 dtype: DType | None = None, device: Device | None = None,
                 xp: Namespace | None = None) -> tuple[Array, Array]:
    """PoPE's angles: ``cos`` and ``sin`` of ``p * base ** (-j / dim)`` for ``j < dim``.

    PoPE (polar position embedding, Gopalakrishnan et al. 2025) gives each of the ``dim``
    features of a head its own frequency (RoPE pairs them: ``dim / 2``), so these are the
    angles of ``sinusoidal(positions, 2 * dim, base=base, layout="split")``.

    Parameters
    ----------
    positions : int or array
        An int ``n`` for ``0 .. n-1``, or integer or real positions of any shape ``P``.
    dim : int
        Features per head (x-transformers' ``dim_head``).
    base : float, optional
        The frequency base (x-transformers ``PolarEmbedding(base=10000)``).
    dtype, device, xp : optional
        As :func:`sinusoidal`.

    Returns
    -------
    cos, sin : array
        Each ``P + (dim,)``.

    Raises
    ------
    TypeError, ValueError
        As :func:`sinusoidal` (with ``2 * dim``).

    Notes
    -----
    Exact angles (``sinusoidal``'s contract: within 2e-7 in float32 at every accepted
    position); x-transformers forms ``t * inv_freq`` in float32. Backend support: as
    :func:`sinusoidal`.

    Examples
    --------
    >>> import arrpos
    >>> cos, sin = arrpos.pope_cos_sin(3, 4, base=100.0)
    >>> cos.shape, sin[1].round(4).tolist()
    ((3, 4), [0.8415, 0.311, 0.0998, 0.0316])
    """
    from ._absolute import sinusoidal

    dim = check_int(dim, "dim", minimum=1, maximum=2**16)
    table = sinusoidal(positions, 2 * dim, base=base, layout="split", dtype=dtype,
                       device=device, xp=xp)
    return table[..., dim:], table[..., :dim]


def apply_pope(x: Array, cos: Array, sin: Array, phase: Array | None = None, /) -> Array:
    """PoPE: ``softplus(x)`` as magnitudes at the positions' angles, ``[m cos(a), m sin(a)]``.

    ``out = concat(softplus(x) * cos(t + phase), softplus(x) * sin(t + phase))`` along the
    features, with ``cos(t)``, ``sin(t)`` from :func:`pope_cos_sin`: queries and keys turn
    into ``2 d`` features whose dot product is
    ``sum_j softplus(q_j) softplus(k_j) cos(t_q - t_k - phase_j)``.

    Parameters
    ----------
    x : array
        Floating ``(..., d)`` queries or keys.
    cos, sin : array
        Floating, broadcasting against ``x`` (e.g. ``(seq, d)`` for ``x``
        ``(batch, heads, seq, d)``).
    phase : array, optional
        Real, broadcasting against ``x``: the keys' learned per-head phase (x-transformers'
        ``learned_bias`` ``(heads, 1, d)``, clamped by it to ``[-2 pi, 0]``; clamp it
        yourself). Queries take none.

    Returns
    -------
    array
        ``broadcast(x, cos).shape[:-1] + (2 d,)`` in the promoted dtype.

    Raises
    ------
    TypeError
        Arrays not floating (``phase`` not real).
    ValueError
        Shapes that do not broadcast.

    Notes
    -----
    x-transformers ``apply_polar_pos_emb(q, freqs)`` / ``(k, freqs + bias)``: equal up to
    its float32 angles; the phase is added through the angle-sum identity in float64 where
    the backend has it, the result rounded once. Backend support: generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> cos, sin = arrpos.pope_cos_sin(np.array([0.0]), 2)
    >>> arrpos.apply_pope(np.zeros((1, 2)), cos, sin).round(4).tolist()
    [[0.6931, 0.6931, 0.0, 0.0]]
    """
    xp = array_namespace(x, cos, sin, phase, name="x, cos, sin and phase")
    check_array(xp, x, "x", kind="floating", min_ndim=1, shape_hint="(..., d)")
    check_array(xp, cos, "cos", kind="floating", min_ndim=1, shape_hint="(..., d)")
    check_array(xp, sin, "sin", kind="floating", min_ndim=1, shape_hint="(..., d)")
    arrays = {"x": x, "cos": cos, "sin": sin}
    if phase is not None:
        check_array(xp, phase, "phase", kind="real", min_ndim=1, shape_hint="(..., d)")
        arrays["phase"] = phase
    try:
        shape = tuple(np.broadcast_shapes(*(tuple(a.shape) for a in arrays.values())))
    except ValueError:
        shape = None
    if shape is None or shape[-1:] != tuple(x.shape[-1:]):
        got = ", ".join(f"{n} {tuple(a.shape)}" for n, a in arrays.items())
        raise ValueError(f"cos, sin and phase must broadcast against x and its "
                         f"{x.shape[-1]} features, got {got}") from None
    check_size(2 * math.prod(shape), "the output")
    work, out = _work(xp, x, cos, sin)
    c, s = xp.astype(cos, work), xp.astype(sin, work)
    if phase is not None:
        ph = xp.astype(phase, work)
        c, s = c * xp.cos(ph) - s * xp.sin(ph), s * xp.cos(ph) + c * xp.sin(ph)
    m = _softplus(xp, xp.astype(x, work))
    parts = [xp.broadcast_to(m * c, shape), xp.broadcast_to(m * s, shape)]
    return round_once(xp, xp.concat(parts, axis=-1), out)

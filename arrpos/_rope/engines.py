"""RoPE forms of the serving engines (vLLM, SGLang) that are not a frequency scaling:
:func:`dual_chunk_positions` (Dual Chunk Attention's position remap, Qwen2.5-1M) and
:func:`fope_cos_sin` (FoPE's learned Fourier tables, InternS1-Pro). The scalings (vLLM's
``"ntk"``) are classes of :mod:`.scaling`; the M-RoPE arrangements presets of
:func:`~arrpos.mrope_axes`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from .._lib import (
    array_namespace,
    as_positions,
    check_array,
    check_even_dim,
    check_positive_int,
    device_of,
    has_float64,
    is_lazy,
)
from .tables import rope_cos_sin
from ..typing import Array, DType, Namespace

__all__ = ["DualChunkPositions", "dual_chunk_positions", "fope_cos_sin"]


class DualChunkPositions(NamedTuple):
    """The positions Dual Chunk Attention rotates with (each of the positions' shape)."""

    query: Any  # intra-chunk queries: p % chunk_len
    query_succ: Any  # successive-chunk queries: min(p % chunk_len + chunk_len, chunk_size)
    query_inter: Any  # inter-chunk queries: min(2 chunk_len - 1, chunk_size) everywhere
    query_succ_critical: Any  # p % chunk_len + chunk_len (not clamped)
    query_inter_critical: Any  # p % chunk_len + chunk_size
    key: Any  # keys: p % chunk_len


def dual_chunk_positions(positions: Array | int, /, chunk_size: int, local_size: int, *,
                         xp: Namespace | None = None) -> DualChunkPositions:
    """The positions of Dual Chunk Attention (Qwen2.5-1M; vLLM ``DualChunkRotaryEmbedding``).

    With ``chunk_len = chunk_size - local_size``, keys turn with ``p % chunk_len`` and each
    query is rotated five ways, for the attention to its own chunk, to the previous chunk and
    to the earlier ones, and the two "critical" variants vLLM's dual-chunk attention uses
    (:class:`DualChunkPositions` lists the formulas). vLLM concatenates the five rotated
    queries along the features; here each set of positions feeds :meth:`RoPE.apply`,
    :meth:`RoPE.cos_sin` or :func:`rope_cos_sin` as any positions do.

    Parameters
    ----------
    positions : int or array
        Integer token positions ``>= 0`` of any shape (an int ``n``: ``0 .. n-1``), offsets
        already added (vLLM's ``positions + offsets``).
    chunk_size, local_size : int
        ``dual_chunk_attention_config``'s ``chunk_size`` and ``local_size``
        (``0 <= local_size < chunk_size``).
    xp : namespace, optional
        For an int ``positions``: the namespace of the result (default NumPy).

    Returns
    -------
    DualChunkPositions
        ``(query, query_succ, query_inter, query_succ_critical, query_inter_critical, key)``,
        integer arrays of the positions' shape, namespace and device.

    Raises
    ------
    TypeError
        ``positions`` not an int or an integer array; sizes not ints.
    ValueError
        ``chunk_size < 1``, ``local_size`` outside ``[0, chunk_size)``, negative positions
        (eager arrays).

    Notes
    -----
    Backend support: generic Array API code on every backend (a remainder, a minimum).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> p = arrpos.dual_chunk_positions(np.array([0, 5, 6, 13]), chunk_size=8, local_size=2)
    >>> p.key.tolist(), p.query_succ.tolist(), p.query_inter.tolist()
    ([0, 5, 0, 1], [6, 8, 6, 7], [8, 8, 8, 8])
    """
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    local_size = check_positive_int(local_size, "local_size", minimum=0)
    if local_size >= chunk_size:
        raise ValueError(f"local_size must be < chunk_size (chunk_len = chunk_size - local_size "
                         f"> 0), got local_size={local_size}, chunk_size={chunk_size}")
    if isinstance(positions, int) and not isinstance(positions, bool):
        if xp is None:
            import numpy
            xp = numpy  # assigned: mypy does not narrow xp on "import numpy as xp"
        pos = as_positions(array_namespace(xp.asarray(0), name="xp"), positions, "positions")
        xp = array_namespace(pos, name="positions")
    else:
        xp = array_namespace(positions, name="positions") if xp is None else xp
        pos = check_array(xp, positions, "positions", kind="integer")
    if not is_lazy(pos) and pos.size != 0 and int(xp.min(pos)) < 0:
        raise ValueError(f"positions must be >= 0, got {int(xp.min(pos))}")
    chunk_len = chunk_size - local_size
    intra = pos % chunk_len
    succ = intra + chunk_len
    return DualChunkPositions(
        query=intra,
        query_succ=xp.minimum(succ, xp.full_like(succ, chunk_size)),
        query_inter=xp.full_like(intra, min(2 * chunk_len - 1, chunk_size)),
        query_succ_critical=succ,
        query_inter_critical=intra + chunk_size,
        key=intra,
    )


def fope_cos_sin(positions: Array | int, inv_freq: Array, cos_coef: Array, sin_coef: Array, /,
                 head_dim: int, *, dtype: DType | None = None) -> tuple[Array, Array]:
    """FoPE's cos/sin tables (Fourier Position Embedding; InternS1-Pro; vLLM
    ``FourierRotaryEmbedding``): each frequency of the head a learned mix of the RoPE
    frequencies' cosines and sines.

    ``cos[..., j] = sum_i cos(p * inv_freq[i]) * cos_coef[i, j]`` and likewise ``sin`` with
    ``sin_coef`` (per key-value head ``h`` with 3-D coefficients: ``cos_coef[h, i, j]``), then
    padded with ones to ``head_dim // 2`` frequencies and laid out half-wise, ``[c | c]``, as
    vLLM's ``_compute_cos_sin_cache`` does (its padding sets sin to 1 as well as cos). Rotate
    with :func:`apply_rope` (half layout, the whole head): per key-value head tables broadcast
    over that head's group of query heads.

    Parameters
    ----------
    positions : int or array
        Positions of any shape ``P`` (an int ``n``: ``0 .. n-1``).
    inv_freq : array
        ``(F,)``: the RoPE frequencies FoPE keeps (vLLM: the first ``num_inv_freq`` of
        ``rope_frequencies(rotary_dim, base=...)``, or those above ``2 pi /
        max_position_embeddings``).
    cos_coef, sin_coef : array
        The checkpoint's ``cos_coef`` and ``sin_coef``: ``(F, d)``, or ``(kv_heads, F, d)``
        (``fope_sep_head``), real floating, ``d <= head_dim // 2``.
    head_dim : int
        Features per head (even).
    dtype : dtype, optional
        Of the tables (default: ``cos_coef``'s).

    Returns
    -------
    (cos, sin)
        Each ``P + (head_dim,)``, or ``P + (kv_heads, head_dim)`` with 3-D coefficients.

    Raises
    ------
    TypeError
        Non-arrays, arrays of different libraries, non-floating coefficients.
    ValueError
        ``inv_freq`` not 1-D, coefficients of different shapes, not 2-D or 3-D, whose
        frequency axis is not ``len(inv_freq)`` or wider than ``head_dim // 2``; an odd
        ``head_dim``.

    Notes
    -----
    The angles are exact (:func:`rope_cos_sin`) and the mix is summed in float64 where the
    device has it, then rounded once. Backend support: the table kernels of
    :func:`rope_cos_sin`, then generic Array API code (a matmul).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(8)
    >>> eye = np.eye(4)[:2, :3]                          # 2 kept frequencies, 3 mixed outputs
    >>> cos, sin = arrpos.fope_cos_sin(np.arange(3), inv[:2], eye, eye, 8)
    >>> cos.shape, cos[1, :4].round(4).tolist()
    ((3, 8), [0.5403, 0.995, 0.0, 1.0])
    """
    head_dim = check_even_dim(head_dim, "head_dim")
    arrays = (inv_freq, cos_coef, sin_coef) + (() if isinstance(positions, int) else (positions,))
    xp = array_namespace(*arrays, name="positions, inv_freq, cos_coef and sin_coef")
    check_array(xp, inv_freq, "inv_freq", ndim=1, shape_hint="(F,)")
    for name, coef in (("cos_coef", cos_coef), ("sin_coef", sin_coef)):
        check_array(xp, coef, name, kind="floating")
    if tuple(cos_coef.shape) != tuple(sin_coef.shape):
        raise ValueError(f"cos_coef and sin_coef must have the same shape, got "
                         f"{tuple(cos_coef.shape)} and {tuple(sin_coef.shape)}")
    shape = tuple(cos_coef.shape)
    n_freq = inv_freq.shape[0]
    if len(shape) not in (2, 3) or shape[-2] != n_freq or not 1 <= shape[-1] <= head_dim // 2:
        raise ValueError(f"cos_coef must have shape (F, d) or (kv_heads, F, d) with F = "
                         f"len(inv_freq) = {n_freq} and 1 <= d <= head_dim // 2 = "
                         f"{head_dim // 2}, got {shape}")
    dtype = cos_coef.dtype if dtype is None else dtype
    wide = xp.float64 if has_float64(xp, device_of(cos_coef)) else dtype
    c, s = rope_cos_sin(positions, xp.astype(inv_freq, wide), dtype=wide)
    out = []
    for table, coef in ((c[..., :n_freq], cos_coef), (s[..., :n_freq], sin_coef)):
        coef = xp.astype(coef, wide)
        if len(shape) == 2:
            mixed = xp.matmul(table, coef)
        else:  # one mix per key-value head: (..., 1, 1, F) @ (h, F, d) -> (..., h, 1, d)
            mixed = xp.matmul(table[..., None, None, :], coef)
            mixed = xp.reshape(mixed, tuple(mixed.shape[:-2]) + (shape[-1],))
        pad = head_dim // 2 - shape[-1]
        if pad:
            ones = xp.ones(tuple(mixed.shape[:-1]) + (pad,), dtype=wide,
                           device=device_of(mixed))
            mixed = xp.concat([mixed, ones], axis=-1)
        out.append(xp.astype(xp.concat([mixed, mixed], axis=-1), dtype))
    return out[0], out[1]

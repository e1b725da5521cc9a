"""Packed sequences: several documents in one row (flash-attn varlen ``cu_seqlens``, OLMo
``doc_lens``), as positions that restart at each document and a same-document attention mask.

Both functions take the document lengths; from flash-attn's ``cu_seqlens`` pass
``diff(cu_seqlens)``. Zero-length documents are allowed (they hold no token), so OLMo's
zero-padded ``doc_lens`` of shape ``(batch, max_docs)`` can be passed flattened. Lengths are
sizes, like a shape: a sequence of ints is accepted here (arrays of any integer dtype too),
where array arguments elsewhere refuse lists.
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence

from ._lib import (
    MAX_ELEMENTS,
    array_namespace,
    as_index,
    check_array,
    check_bool,
    check_int,
    check_size,
    default_float,
    device_of,
    index_dtype,
)
from .typing import Array, Namespace

__all__ = ["packed_mask", "packed_positions"]


def _lengths(lengths, xp):
    """``(lengths as a 1-D default-integer array, total)``; names ``lengths`` in every error."""
    if isinstance(lengths, (bool, str, bytes, numbers.Number)) or lengths is None:
        raise TypeError(
            "lengths must be a 1-D integer array or a sequence of ints (document lengths), got "
            f"{type(lengths).__name__} {lengths!r}"
        )
    if hasattr(lengths, "shape") and hasattr(lengths, "dtype"):
        arr = lengths
    else:  # a sequence of ints is part of the contract here (sizes, like a shape)
        values = list(lengths)
        if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in values):
            raise TypeError(f"lengths must hold ints, got {values!r}")
        values = [check_int(v, f"lengths[{i}]", minimum=-MAX_ELEMENTS, maximum=MAX_ELEMENTS)
                  for i, v in enumerate(values)]  # a Python int past int64: not an OverflowError
        arr = xp.asarray(values, dtype=index_dtype(xp, None))
    check_array(xp, arr, "lengths", kind="integer", ndim=1,
                shape_hint="(one length per document; flatten a batch of padded doc_lens)")
    lens = as_index(xp, arr, "lengths")  # unsigned lengths past the index dtype: refused
    idx = lens.dtype
    if lens.shape[0] == 0:
        return lens, 0
    try:  # the output shape depends on the values: read them (a Dask array is computed)
        low = int(xp.min(lens))
        total = int(xp.sum(lens))
        rough = float(xp.sum(xp.astype(lens, default_float(xp, device_of(lens)))))
    except Exception as exc:  # a traced (jit), meta or fake array has no values
        raise ValueError("lengths must be concrete values that can be read (not traced under "
                         "jit, not a meta or fake tensor): the output shape sum(lengths) "
                         f"depends on them ({type(exc).__name__})") from None
    if low < 0:
        raise ValueError(f"lengths must be >= 0, got a length of {low}")
    limit = xp.iinfo(idx).max
    if total > limit or rough > limit:  # the float sum catches a wrapped integer sum
        raise ValueError(f"sum(lengths) = {rough:.0f} does not fit the index dtype {idx} "
                         f"(max {limit})")
    check_size(total, "the packed row of sum(lengths) tokens")
    return lens, total


def _document_ids(xp, lens, total):
    """Document of every token ``(total,)`` and each document's first token."""
    ends = xp.cumulative_sum(lens)
    tokens = xp.arange(total, dtype=lens.dtype, device=device_of(lens))
    # documents ending at or before a token lie wholly before it (empty ones included)
    doc = xp.astype(xp.searchsorted(ends, tokens, side="right"), lens.dtype)
    return doc, tokens, ends - lens


def packed_positions(lengths: Array | Sequence[int], /, *, xp: Namespace | None = None) -> Array:
    """Positions that restart at 0 for every document of a packed row.

    Parameters
    ----------
    lengths : array or sequence of int
        Document lengths ``(num_docs,)``, integers >= 0 (an empty document holds no token).
        From flash-attn's ``cu_seqlens``: ``diff(cu_seqlens)``.
    xp : namespace, optional
        Array namespace when ``lengths`` is a Python sequence (default NumPy).

    Returns
    -------
    array
        ``[0 .. l0-1, 0 .. l1-1, ...]``, shape ``(sum(lengths),)``, the namespace's default
        integer dtype, on the device of ``lengths``. Feed it to :func:`rope_cos_sin`,
        :func:`apply_rope_cached` (as ``position_ids``) or :func:`alibi_bias_from_positions`.

    Raises
    ------
    TypeError
        ``lengths`` not a sequence of ints or an integer array.
    ValueError
        ``lengths`` not 1-D, a negative length, a total beyond the index dtype or 2**34, or an
        array whose values, and so the output shape, cannot be read (traced under jit, a meta
        or fake tensor).

    Notes
    -----
    The values of ``lengths`` are read on the host (the output shape depends on them; a Dask
    array is computed). Backend support: generic Array API code on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.packed_positions([3, 0, 2]).tolist()
    [0, 1, 2, 0, 1]
    >>> cu_seqlens = np.array([0, 2, 5])
    >>> arrpos.packed_positions(np.diff(cu_seqlens)).tolist()
    [0, 1, 0, 1, 2]
    """
    xp = array_namespace(lengths, xp=xp, name="lengths")
    lens, total = _lengths(lengths, xp)
    doc, tokens, starts = _document_ids(xp, lens, total)
    if total == 0:
        return tokens
    return tokens - xp.take(starts, doc, axis=0)


def packed_mask(lengths: Array | Sequence[int], /, *, causal: bool = False,
                xp: Namespace | None = None) -> Array:
    """Same-document attention mask of a packed row.

    Parameters
    ----------
    lengths : array or sequence of int
        Document lengths ``(num_docs,)``, integers >= 0, as for :func:`packed_positions`.
    causal : bool, optional
        Also require key <= query (decoder self-attention).
    xp : namespace, optional
        Array namespace when ``lengths`` is a Python sequence (default NumPy).

    Returns
    -------
    array
        Boolean ``(N, N)``, ``N = sum(lengths)``: True where query and key belong to the same
        document (and, with ``causal``, the key is not after the query). ``True`` means "may
        attend", as in :func:`attention` and torch's ``scaled_dot_product_attention``.

    Raises
    ------
    TypeError
        As :func:`packed_positions`; ``causal`` not a bool.
    ValueError
        As :func:`packed_positions`; a mask of more than 2**34 elements.

    Notes
    -----
    Attention with this mask equals attention run on each document alone (flash-attn's varlen
    kernels compute the same thing without forming the ``N x N`` matrix). Every token attends
    at least to itself, so no row is empty. Backend support: generic Array API code.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.packed_mask([2, 1]).astype(int).tolist()
    [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    >>> arrpos.packed_mask([2, 1], causal=True).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    """
    causal = check_bool(causal, "causal")
    xp = array_namespace(lengths, xp=xp, name="lengths")
    lens, total = _lengths(lengths, xp)
    check_size(total * total, "the mask")
    doc, tokens, _ = _document_ids(xp, lens, total)
    mask = xp.reshape(doc, (total, 1)) == xp.reshape(doc, (1, total))
    if causal:
        mask = mask & (xp.reshape(tokens, (1, total)) <= xp.reshape(tokens, (total, 1)))
    return mask

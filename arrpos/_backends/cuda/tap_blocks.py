"""Resampling taps as the CUDA kernel's by-value parameter blocks (the driver's packing for
``resample_grid``): the host taps travel in the launch parameters, as the sinusoid
frequencies do, so no launch copies host data and every launch is legal inside CUDA graph
capture. Imports NumPy only.
"""
from __future__ import annotations

import numpy as np

__all__ = ["TAPS_BLOCK", "TAPS_DTYPE", "axis_taps", "blocks", "resample_shape", "spans"]

# ARRPOS_TAPS_BLOCK (weight, index) pairs of both grid axes: struct taps_block of kernels.cu
TAPS_BLOCK = 256
TAPS_DTYPE = np.dtype([("w", "<f8", (TAPS_BLOCK,)), ("idx", "<i4", (TAPS_BLOCK,))])


def resample_shape(shape, taps, prefix_rows: int) -> tuple:
    """The shape ``resample_grid`` gives a grid of ``shape`` with ``taps`` (one per grid axis,
    just before the last) after ``prefix_rows`` rows: ``(..., P + prod(new), C)``."""
    k = len(taps)
    rows = 1
    for n, t in zip(shape[-k - 1:-1], taps):
        rows *= n if t is None else t[0].shape[0]
    return tuple(shape[:-k - 1]) + (prefix_rows + rows, shape[-1])


def axis_taps(tap, n_in: int):
    """``(index as int32, weight as float64, taps per output)`` of one axis (None: the axis
    keeps its length: ``(None, None, 0)``); None for taps that do not index ``n_in`` rows."""
    if tap is None:
        return None, None, 0
    index, weight = np.asarray(tap[0]), np.asarray(tap[1], dtype=np.float64)
    if index.ndim != 2 or weight.shape != index.shape or index.shape[1] == 0 or (
            index.size and (index.min() < 0 or index.max() >= n_in)):
        return None
    return index.astype(np.int32), weight, index.shape[1]


def spans(ho: int, th: int, wo: int, tw: int):
    """``(rows, columns)``: runs ``(first, count)`` of the output rows and columns, one launch
    per pair, such that a launch's taps (``count * th`` and ``count * tw``) fit one block,
    shared in proportion to the two axes' taps (``th + tw <= TAPS_BLOCK``)."""
    cap = TAPS_BLOCK
    if ho * th + wo * tw <= cap:
        nh, nw = ho, wo
    elif th == 0:
        nh, nw = ho, cap // tw
    elif tw == 0:
        nh, nw = cap // th, wo
    else:
        nh = max(1, min(ho, cap * ho * th // (ho * th + wo * tw) // th, (cap - tw) // th))
        nw = max(1, min(wo, (cap - nh * th) // tw))
        nh = min(ho, (cap - nw * tw) // th)
    return ([(a, min(nh, ho - a)) for a in range(0, ho, nh)],
            [(b, min(nw, wo - b)) for b in range(0, wo, nw)])


def blocks(rows, cols, first, second):
    """``(h0, nh, w0, nw, block)`` per launch: each axis's ``(index, weight, taps per output)``
    of :func:`axis_taps` for output rows ``h0 .. h0 + nh`` (then columns ``w0 .. w0 + nw``) in
    one ``TAPS_DTYPE`` block, the first axis's first."""
    hidx, hw, th = first
    widx, ww, tw = second
    for h0, nh in rows:
        for w0, nw in cols:
            block = np.zeros(1, dtype=TAPS_DTYPE)
            if th:
                block["w"][0, :nh * th] = hw[h0:h0 + nh].reshape(-1)
                block["idx"][0, :nh * th] = hidx[h0:h0 + nh].reshape(-1)
            if tw:
                at = nh * th
                block["w"][0, at:at + nw * tw] = ww[w0:w0 + nw].reshape(-1)
                block["idx"][0, at:at + nw * tw] = widx[w0:w0 + nw].reshape(-1)
            yield h0, nh, w0, nw, block

"""Convolutional position encodings: depthwise 1-D (wav2vec2, DeBERTa's ConvLayer) and 2-D
(CPVT's PEG), written as shifted multiply-adds so they run on any Array API namespace.

The exact (erf) GELU needs ``erfc``, which the Array API standard does not have. It is computed
as ``erfc(z) = t exp(-z^2 + f(t))`` with ``t = 2 / (2 + z)`` for ``z >= 0`` (the form of
Numerical Recipes' ``erfccheb``), where ``f`` is a 30-term Chebyshev series in ``2t - 1`` whose
coefficients were computed for this module with mpmath at 50 digits (``c_k = 2/N sum_j
f(y_j) T_k(y_j)`` on N = 80 Chebyshev nodes; the terms dropped are below 1e-18). The series is
accurate to ~1e-16 relative; ``exp(-z^2)`` is formed with an exact split of ``z^2``, so the GELU
is within a few ulps in float32 and float64 (measured against mpmath: 4.2e-7 relative in
float32 and 1e-13 in float64 over [-12, 12]).
"""
from __future__ import annotations

import math
from typing import Literal

from ._lib import (
    array_namespace,
    check_array,
    check_bool,
    check_choice,
    check_int,
    device_of,
    work_float,
)
from .typing import Array

__all__ = ["conv_positional", "conv_positional_2d"]

_ACTIVATIONS = ("gelu", "tanh", None)

_ERFC_CHEB = (
    -0.6513268598908547, 0.6419697923564902, 0.019476473204185836, -0.009561514786808632,
    -0.0009465953444820369, 0.00036683949785276145, 4.252332480690777e-05,
    -2.0278578112534242e-05, -1.6242900046470256e-06, 1.3036558355805232e-06,
    1.5626441722066142e-08, -8.523809591492654e-08, 6.5290544390988515e-09,
    5.059343495551469e-09, -9.91364156493033e-10, -2.273651222931836e-10,
    9.646791102015527e-11, 2.3940380830391146e-12, -6.886027526497553e-12,
    8.944879273090725e-13, 3.130921399342958e-13, -1.1270822361367252e-13,
    3.810905255189232e-16, 7.106097613609237e-15, -1.5230282014571043e-15,
    -9.457494571291233e-17, 1.210237189224279e-16, -2.816663087747177e-17,
    5.003005559445902e-20, 2.3281042579529253e-18,
)


def _erfc_abs(xp, ax, split):
    """``erfc(ax / sqrt 2)`` for ``ax >= 0`` (Chebyshev form, see the module notes).

    ``exp(-ax^2 / 2)`` is formed from a Veltkamp split ``ax = hi + lo`` (``split = 2**(p/2)+1``)
    so that the large part ``hi^2 / 2`` of the exponent is exact: rounding ``z^2`` would cost
    ``z^2`` ulps of relative error in the result.
    """
    z = ax * (1.0 / math.sqrt(2.0))
    t = 2.0 / (2.0 + z)
    y2 = 2.0 * (2.0 * t - 1.0)  # Clenshaw on 2y
    d = xp.zeros_like(z)
    dd = xp.zeros_like(z)
    for c in _ERFC_CHEB[:0:-1]:
        d, dd = y2 * d - dd + c, d
    f = 0.5 * y2 * d - dd + _ERFC_CHEB[0]
    s = split * ax
    hi = s - (s - ax)
    lo = ax - hi
    big = hi * hi * 0.5  # exact
    small = lo * (ax + hi) * 0.5  # ax^2/2 - big, tiny against big
    return t * xp.exp(f - small) * xp.exp(-big)


def _gelu(xp, x):
    """Exact GELU ``x Phi(x) = x erfc(-x / sqrt 2) / 2``; the negative side has no cancellation."""
    dtype = x.dtype
    if dtype != xp.float64 and dtype != xp.float32:
        x = xp.astype(x, xp.float32)  # half precisions: work in float32, round once
    split = 134217729.0 if x.dtype == xp.float64 else 4097.0
    ax = xp.clip(xp.abs(x), max=64.0)  # erfc is 0 beyond; keeps the split finite
    e = _erfc_abs(xp, ax, split)
    erfc = xp.where(x <= 0, e, 2.0 - e)
    out = 0.5 * xp.clip(x, min=-64.0) * erfc  # GELU(-inf) = 0, not NaN
    return out if out.dtype == dtype else xp.astype(out, dtype)


def _activate(xp, x, activation):
    if activation == "gelu":
        return _gelu(xp, x)
    if activation == "tanh":
        return xp.tanh(x)
    return x


def _check_common(xp, x, weight, bias, activation, residual, *, kernel_axes):
    for name, a in (("x", x), ("weight", weight)):
        check_array(xp, a, name, kind="floating")
    if bias is not None:
        check_array(xp, bias, "bias", kind="floating")
    if activation is not None:
        check_choice(activation, "activation", tuple(a for a in _ACTIVATIONS if a))
    check_bool(residual, "residual")
    channels = x.shape[-1] if x.ndim else None
    if weight.ndim != kernel_axes + 1 or weight.shape[-1] != channels or 0 in weight.shape:
        want = "(kernel, channels)" if kernel_axes == 1 else "(kh, kw, channels)"
        raise ValueError(
            f"weight must have shape {want} with channels = x.shape[-1] = {channels}, "
            f"got {tuple(weight.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (channels,):
        raise ValueError(f"bias must have shape ({channels},), got {tuple(bias.shape)}")


def _pad_axis(xp, x, axis, left, right):
    """Zero padding of axis ``axis`` (negative) by ``left`` and ``right``."""
    parts = []
    dev = device_of(x)
    for n in (left, right):
        shape = list(x.shape)
        shape[axis] = n
        parts.append(xp.zeros(tuple(shape), dtype=x.dtype, device=dev))
    return xp.concat([parts[0], x, parts[1]], axis=axis)


def _slice_axis(x, axis, start, length):
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(start, start + length)
    return x[tuple(idx)]


def conv_positional(x: Array, weight: Array, bias: Array | None = None, /, *, axis: int = -2,
                    activation: Literal["gelu", "tanh"] | None = "gelu",
                    residual: bool = True) -> Array:
    """Convolutional position encoding: a depthwise 1-D convolution along the sequence.

    ``y[t, c] = sum_m weight[m, c] x[t + m - (kernel-1)//2, c] + bias[c]`` with zeros outside
    the sequence (torch's ``padding="same"``: left ``(kernel-1)//2``, right the rest), then the
    activation, then ``+ x`` if ``residual``. Like ``torch.nn.Conv1d(C, C, kernel,
    groups=C)`` (a cross-correlation) applied to channels-last data.

    Parameters
    ----------
    x : array
        Floating, channels last: ``(..., L, C)`` with the sequence on ``axis``.
    weight : array
        ``(kernel, C)``: torch's ``conv.weight[:, 0, :].T``. Odd or even kernels.
    bias : array, optional
        ``(C,)``.
    axis : int, optional
        The sequence axis (not the channel axis), default ``-2``.
    activation : {"gelu", "tanh", None}, optional
        ``"gelu"`` is the exact (erf) GELU (wav2vec2); ``"tanh"`` DeBERTa's ConvLayer.
    residual : bool, optional
        Add ``x`` to the result.

    Returns
    -------
    array
        Same shape and dtype as ``x``.

    Raises
    ------
    TypeError
        Non-floating arrays, a non-int ``axis``, a non-bool ``residual``.
    ValueError
        ``weight`` / ``bias`` shapes, ``axis`` out of range or the channel axis, unknown
        ``activation``.

    Notes
    -----
    16-bit ``x`` is summed in float32 and rounded once (a bfloat16 running sum keeps 8 bits).
    wav2vec2 pads ``kernel // 2`` on both sides and drops the last output for an even kernel,
    i.e. its window starts one step earlier than this one: shift ``weight`` by one row
    (prepend a zero row) to reproduce it. The GELU uses the module's erfc series (~1e-16
    relative in float64, a few ulps in float32).
    Backend support: generic Array API code (``kernel`` multiply-adds, no convolution op).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> x = np.arange(5.0).reshape(5, 1)
    >>> w = np.ones((3, 1))
    >>> arrpos.conv_positional(x, w, activation=None, residual=False)[:, 0].tolist()
    [1.0, 3.0, 6.0, 9.0, 7.0]
    """
    xp = array_namespace(x, weight, bias, name="x, weight and bias")
    _check_common(xp, x, weight, bias, activation, residual, kernel_axes=1)
    axis = check_int(axis, "axis")
    if x.ndim < 2 or not -x.ndim <= axis < x.ndim or axis % x.ndim == x.ndim - 1:
        raise ValueError(
            f"axis must name a sequence axis of x (not the channel axis -1), got axis={axis} "
            f"for x.shape {tuple(x.shape)}"
        )
    ax = axis % x.ndim - x.ndim  # negative
    kernel = weight.shape[0]
    left = (kernel - 1) // 2
    length = x.shape[ax]
    work, dtype = _work(xp, x)
    xw = xp.astype(x, work)
    xpad = _pad_axis(xp, xw, ax, left, kernel - 1 - left)
    w = xp.astype(weight, work)
    out = None
    for m in range(kernel):
        term = _slice_axis(xpad, ax, m, length) * w[m, :]
        out = term if out is None else out + term
    return _finish(xp, out, xw, bias, activation, residual, dtype)


def _work(xp, x):
    """``(work, dtype)``: the taps are summed in float32 for 16-bit ``x`` (a bfloat16 sum keeps
    8 bits) and the result is rounded once to ``x.dtype``."""
    work, _ = work_float(xp, x.dtype)
    return work, x.dtype


def _finish(xp, out, xw, bias, activation, residual, dtype):
    """``+ bias``, the activation, ``+ x`` (all in the working dtype), one rounding."""
    if bias is not None:
        out = out + xp.astype(bias, out.dtype)
    out = _activate(xp, out, activation)
    out = out + xw if residual else out
    return out if out.dtype == dtype else xp.astype(out, dtype)


def conv_positional_2d(x: Array, weight: Array, bias: Array | None = None, /, *,
                       activation: Literal["gelu", "tanh"] | None = None,
                       residual: bool = True) -> Array:
    """CPVT's position encoding generator (PEG): a depthwise 2-D convolution of the token grid.

    ``y[h, w, c] = sum_{a, b} weight[a, b, c] x[h + a - (kh-1)//2, w + b - (kw-1)//2, c]
    + bias[c]`` with zero padding, then the activation, then ``+ x`` if ``residual``. Equal to
    ``torch.nn.Conv2d(C, C, (kh, kw), padding="same", groups=C)`` on channels-last data.

    Parameters
    ----------
    x : array
        Floating ``(..., H, W, C)``.
    weight : array
        ``(kh, kw, C)``: torch's ``conv.weight[:, 0].permute(1, 2, 0)``.
    bias : array, optional
        ``(C,)``.
    activation : {None, "gelu", "tanh"}, optional
        Applied after the convolution (PEG uses none).
    residual : bool, optional
        Add ``x`` (PEG does).

    Returns
    -------
    array
        Same shape and dtype as ``x``.

    Raises
    ------
    TypeError
        Non-floating arrays, a non-bool ``residual``.
    ValueError
        ``x`` with fewer than three axes, ``weight`` / ``bias`` shapes, unknown ``activation``.

    Notes
    -----
    Backend support: generic Array API code (``kh * kw`` multiply-adds, no convolution op).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> x = np.ones((3, 3, 1)); w = np.ones((3, 3, 1))
    >>> arrpos.conv_positional_2d(x, w, residual=False)[..., 0].tolist()
    [[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]]
    """
    xp = array_namespace(x, weight, bias, name="x, weight and bias")
    _check_common(xp, x, weight, bias, activation, residual, kernel_axes=2)
    if x.ndim < 3:
        raise ValueError(f"x must have shape (..., H, W, C), got {tuple(x.shape)}")
    kh, kw = weight.shape[0], weight.shape[1]
    h, w_len = x.shape[-3], x.shape[-2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    work, dtype = _work(xp, x)
    xw = xp.astype(x, work)
    xpad = _pad_axis(xp, _pad_axis(xp, xw, -3, top, kh - 1 - top), -2, left, kw - 1 - left)
    wt = xp.astype(weight, work)
    out = None
    for a in range(kh):
        rows = _slice_axis(xpad, -3, a, h)
        for b in range(kw):
            term = _slice_axis(rows, -2, b, w_len) * wt[a, b, :]
            out = term if out is None else out + term
    return _finish(xp, out, xw, bias, activation, residual, dtype)

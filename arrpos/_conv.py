"""Convolutional position encodings: depthwise 1-D (wav2vec2, DeBERTa's ConvLayer) and 2-D
(CPVT's PEG). Validation and documentation; the sums (shifted multiply-adds on any Array API
namespace, and the exact GELU's erfc series) are ``_backends._xp.conv_positional``'s, the
compiled kernels' in ``csrc/conv.inc`` and the CUDA kernel's in
``_backends/cuda/kernels.cu``.
"""
from __future__ import annotations

from typing import Literal

from . import _dispatch
from ._lib import (
    array_namespace,
    check_array,
    check_bool,
    check_choice,
    check_int,
)
from .typing import Array

__all__ = ["conv_positional", "conv_positional_2d"]

_ACTIVATIONS = ("gelu", "tanh", None)


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
    Backend support: every Array API namespace (``kernel`` multiply-adds, no convolution
    op); NumPy arrays and torch CPU tensors without autograd take a compiled kernel, CuPy
    arrays and torch CUDA tensors without autograd a CUDA one, with the same sums (the
    GELU's exp within a few ulps; another ``axis`` than -2 costs a copy); Dask arrays one
    task per chunk, a chunked sequence read with the kernel's reach of its neighbours
    (``overlap``).

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
    ax = axis % x.ndim  # the sequence axis moves next to the channels: a grid of one column
    perm = tuple(k for k in range(x.ndim - 1) if k != ax) + (ax, x.ndim - 1)
    grid = xp.permute_dims(x, perm) if ax != x.ndim - 2 else x
    kernel, channels = weight.shape
    grid = xp.reshape(grid, tuple(grid.shape[:-1]) + (1, channels))
    out = _dispatch.call("conv_positional", xp, grid, xp.reshape(weight, (kernel, 1, channels)),
                         bias, activation=activation, residual=residual, dtype=x.dtype)
    out = xp.reshape(out, tuple(out.shape[:-2]) + (channels,))
    if ax == x.ndim - 2:
        return out
    return xp.permute_dims(out, tuple(perm.index(k) for k in range(x.ndim)))


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
    Backend support: every Array API namespace (``kh * kw`` multiply-adds, no convolution
    op); NumPy arrays and torch CPU tensors without autograd take a compiled kernel, CuPy
    arrays and torch CUDA tensors without autograd a CUDA one, with the same sums (the
    GELU's exp within a few ulps); Dask arrays one task per chunk, chunked grid axes read
    with the kernel's reach of their neighbours (``overlap``).

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
    return _dispatch.call("conv_positional", xp, x, weight, bias, activation=activation,
                          residual=residual, dtype=x.dtype)

"""Torch CPU tensors to the compiled NumPy kernels, zero-copy through DLPack.

Used by ``_dispatch`` only for CPU tensors that do not require grad (autograd needs the generic
path's ordinary expressions). Same function names and signatures as ``_xp``; every function
views the tensors as NumPy arrays (no copy), runs the ``_numpy`` twin and views the result back
as a tensor (no copy).
"""
from __future__ import annotations

import numpy as np
import torch

from . import _numpy

__all__ = ["apply_rope", "rope_cos_sin", "sinusoid_table", "supports"]

_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


def supports(op, arrays, **kwargs) -> bool:
    """CPU tensors without autograd, of a kernel dtype, that the NumPy adapter serves as views."""
    if not hasattr(_numpy, op) or not arrays:
        return False
    for a in arrays:
        if isinstance(a, torch.Tensor) and (a.device.type != "cpu" or a.requires_grad
                                            or a.layout != torch.strided
                                            or a.is_neg() or a.is_conj()):
            return False  # neg/conj bit views: their memory holds the other sign (generic path)
    dtype = kwargs.get("dtype", arrays[0].dtype)
    if dtype not in _DTYPES:
        return False
    try:
        if op == "apply_rope":
            x, cos, sin, out = arrays
            if cos.dtype != sin.dtype or cos.dtype not in (x.dtype, torch.float64):
                return False  # promotion rules: the generic path
            xn = _np(x)
            return _numpy.supports(op, (xn, _np(cos), _np(sin), xn if out is x else _np(out)))
        return _numpy.supports(op, (_np(arrays[0]),), **{**kwargs, "dtype": _DTYPES[dtype]})
    except (BufferError, RuntimeError, TypeError):  # no NumPy view of it (e.g. bfloat16)
        return False


def _np(t):
    return None if t is None else np.from_dlpack(t.detach() if t.requires_grad else t)


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    res = _numpy.sinusoid_table(_np(positions), hi, lo, layout=layout, dtype=_DTYPES[dtype],
                                width=width, xp=None, out=_np(out))
    return out if out is not None else torch.from_numpy(res)


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    np_out = None if out is None else (_np(out[0]), _np(out[1]))
    cos, sin = _numpy.rope_cos_sin(_np(positions), _np(inv_freq), layout=layout,
                                   attention_factor=attention_factor, axes=None,
                                   dtype=_DTYPES[dtype], xp=None, out=np_out)
    return out if out is not None else (torch.from_numpy(cos), torch.from_numpy(sin))


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    xn = _np(x)
    on = xn if out is x else _np(out)
    res = _numpy.apply_rope(xn, _np(cos), _np(sin), layout=layout, inverse=inverse, xp=None,
                            out=on)
    return out if out is not None else torch.from_numpy(res)

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


def supports(op, dtype, arrays) -> bool:
    """CPU tensors without autograd, of a kernel dtype, for an op the NumPy adapter has."""
    if dtype not in _DTYPES or not hasattr(_numpy, op):
        return False
    for a in arrays:
        if isinstance(a, torch.Tensor) and (a.device.type != "cpu" or a.requires_grad):
            return False
    return True


def _np(t):
    return None if t is None else np.from_dlpack(t.detach() if t.requires_grad else t)


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    res = _numpy.sinusoid_table(_np(positions), hi, lo, layout=layout, dtype=_DTYPES[dtype],
                                width=width, xp=None, out=_np(out))
    return out if out is not None else torch.from_numpy(res)


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    if axes is not None:  # multimodal: the generic path
        from . import _xp

        return _xp.rope_cos_sin(positions, inv_freq, layout=layout,
                                attention_factor=attention_factor, axes=axes, dtype=dtype, xp=xp,
                                out=out)
    np_out = None if out is None else (_np(out[0]), _np(out[1]))
    cos, sin = _numpy.rope_cos_sin(_np(positions), _np(inv_freq), layout=layout,
                                   attention_factor=attention_factor, axes=None,
                                   dtype=_DTYPES[dtype], xp=None, out=np_out)
    return out if out is not None else (torch.from_numpy(cos), torch.from_numpy(sin))


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    if x.dtype != cos.dtype or x.dtype != sin.dtype:  # promotion rules: the generic path
        from . import _xp

        return _xp.apply_rope(x, cos, sin, layout=layout, inverse=inverse, xp=xp, out=out)
    xn = _np(x)
    on = xn if out is x else _np(out)
    res = _numpy.apply_rope(xn, _np(cos), _np(sin), layout=layout, inverse=inverse, xp=None,
                            out=on)
    return out if out is not None else torch.from_numpy(res)

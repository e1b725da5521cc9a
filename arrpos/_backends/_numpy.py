"""NumPy adapter around the compiled CPU kernels (``arrpos._backends._cpu``).

Same function names and signatures as ``_xp``; this module allocates outputs, makes the small
inputs contiguous, caches per-frequency tables and picks the thread count. It is imported only
when the extension could be built.
"""
from __future__ import annotations

import functools

import numpy as np

from . import _cpu, _xp

__all__ = ["max_threads", "sinusoid_table", "thread_count"]

_BLOCK = 64  # rows per block of the sinusoid kernel: R table of 64 rows stays in L2
_PARALLEL_MIN = 1 << 16  # output elements below which one thread runs (thread start-up ~ µs)
_LAYOUT_CODE = {"interleaved": 0, "split": 1, "split_cos": 2}
_NP_XP = None


def max_threads() -> int:
    """Threads OpenMP would use (OMP_NUM_THREADS respected); 1 when built without OpenMP."""
    return _cpu.max_threads()


def thread_count(work: int) -> int:
    return 1 if work < _PARALLEL_MIN else max(1, _cpu.max_threads())


def _np_xp():
    global _NP_XP
    if _NP_XP is None:
        from .._lib import namespace_for

        _NP_XP = namespace_for(np)
    return _NP_XP


@functools.lru_cache(maxsize=32)
def _rotation_tables(hi_bytes: bytes, lo_bytes: bytes):
    """Exact rot(r w) for r < B and rot(2**k B w) for 2**k B < 2**53, from the generic exact path."""
    hi = np.frombuffer(hi_bytes, dtype=np.float64)
    lo = np.frombuffer(lo_bytes, dtype=np.float64)
    xp = _np_xp()
    rs, rc = _xp.sincos(np.arange(_BLOCK, dtype=np.float64), hi, lo, xp=xp)
    npow = 53 - (_BLOCK.bit_length() - 1)
    powers = np.ldexp(float(_BLOCK), np.arange(npow))  # exact powers of two
    ps, pc = _xp.sincos(powers, hi, lo, xp=xp)
    tables = tuple(np.ascontiguousarray(a) for a in (rc, rs, pc, ps))
    for a in tables:
        a.flags.writeable = False
    return tables


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for NumPy float32/float64 output.

    ``out``: an optional preallocated C-contiguous ``P + (width,)`` array of ``dtype``.
    """
    pos = np.ascontiguousarray(positions, dtype=np.float64).reshape(-1)
    shape = tuple(np.shape(positions))
    hi = np.ascontiguousarray(hi, dtype=np.float64)
    lo = np.ascontiguousarray(lo, dtype=np.float64)
    rc, rs, pc, ps = _rotation_tables(hi.tobytes(), lo.tobytes())
    nf = hi.shape[0]
    if out is None:
        out = np.empty((pos.shape[0], width), dtype=dtype)
    elif out.shape != shape + (width,) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"out must be a C-contiguous {np.dtype(dtype).name} array of shape "
            f"{shape + (width,)}, got {out.dtype} {out.shape}"
        )
    out = out.reshape(pos.shape[0], width)
    nthreads = thread_count(out.size)
    work = np.empty((nthreads, 4 * nf), dtype=np.float64)
    _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, out, _LAYOUT_CODE[layout], nthreads)
    if width > 2 * nf:
        out[:, 2 * nf :] = 0
    return out.reshape(shape + (width,))

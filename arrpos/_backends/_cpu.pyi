"""Type stub of the compiled CPU kernels (``csrc/_cpu.pyx``), for type checkers.

The kernels take C buffers (typed memoryviews): NumPy arrays of the dtype and contiguity that
``arrpos._backends._numpy`` prepares. ``floating`` arrays are float32 or float64, all alike.
"""
from typing import Any

from numpy.typing import NDArray

_F64 = NDArray[Any]  # float64, C-contiguous
_Floating = NDArray[Any]  # float32 or float64

def have_openmp() -> bool: ...
def max_threads() -> int: ...
def sinusoid_table(
    pos: _F64, rc: _F64, rs: _F64, pc: _F64, ps: _F64, w_hi: _F64, w_lo: _F64, work: _F64,
    out: _Floating, layout: int, nthreads: int, stream: bool = ...,
) -> None: ...
def rope_table(
    pos: _F64, rc: _F64, rs: _F64, pc: _F64, ps: _F64, w_hi: _F64, w_lo: _F64, work: _F64,
    cos_out: _Floating, sin_out: _Floating, interleaved: bool, scale: float, nthreads: int,
    stream: bool = ...,
) -> None: ...
def apply_rope(
    x: _Floating, cos: _Floating, sin: _Floating, out: _Floating, work: _Floating,
    interleaved: bool, inverse: bool, inplace: bool, nthreads: int, stream: bool = ...,
) -> None: ...

# Kernels added to _cpu.pyx after this stub was written type as Any until they are listed above.
def __getattr__(name: str) -> Any: ...

"""Type stub of the compiled CPU kernels (``csrc/_cpu.pyx``), for type checkers.

The kernels take C buffers (typed memoryviews): NumPy arrays of the dtype and contiguity that
``arrpos._backends._numpy`` prepares. Kernels over ``floating`` (float32 or float64, all such
arguments alike) are Cython fused functions: callable, and indexable by ``"float"`` or
``"double"`` for the specialisation (looked up once to skip per-call type dispatch).
"""
from typing import Any

from numpy.typing import NDArray

_F64 = NDArray[Any]  # float64, C-contiguous
_Floating = NDArray[Any]  # float32 or float64

def have_openmp() -> bool: ...
def max_threads() -> int: ...

class _SinusoidTable:
    def __call__(
        self, pos: _F64, rc: _F64, rs: _F64, pc: _F64, ps: _F64, w_hi: _F64, w_lo: _F64,
        work: _F64, out: _Floating, layout: int, nthreads: int, stream: bool = ...,
    ) -> None: ...
    def __getitem__(self, key: str) -> _SinusoidTable: ...

class _RopeTable:
    def __call__(
        self, pos: _F64, rc: _F64, rs: _F64, pc: _F64, ps: _F64, w_hi: _F64, w_lo: _F64,
        work: _F64, cos_out: _Floating, sin_out: _Floating, interleaved: bool, scale: float,
        nthreads: int, stream: bool = ...,
    ) -> None: ...
    def __getitem__(self, key: str) -> _RopeTable: ...

class _ApplyRope:
    def __call__(
        self, x: _Floating, cos: _Floating, sin: _Floating, out: _Floating, work: _Floating,
        interleaved: bool, inverse: bool, inplace: bool, nthreads: int, stream: bool = ...,
    ) -> None: ...
    def __getitem__(self, key: str) -> _ApplyRope: ...

sinusoid_table: _SinusoidTable
rope_table: _RopeTable
apply_rope: _ApplyRope

# Kernels added to _cpu.pyx after this stub was written type as Any until they are listed above.
def __getattr__(name: str) -> Any: ...

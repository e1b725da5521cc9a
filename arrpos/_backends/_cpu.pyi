"""Type stub of the compiled CPU kernels (``csrc/_cpu.pyx``), for type checkers.

The kernels take NumPy arrays plus the storage type code of their elements (``F32``, ``F64``,
``F16``, ``BF16``; a torch bfloat16 tensor arrives as int16 bits). What a kernel cannot serve
raises ``arrpos._backends.Unsupported`` before anything is written.
"""
from typing import Any

from numpy.typing import NDArray

_F64 = NDArray[Any]  # float64, C-contiguous
_Array = NDArray[Any]

F32: int
F64: int
F16: int
BF16: int
APPLY_TYPES: frozenset[tuple[int, int]]

def have_threads() -> bool: ...
def max_threads() -> int: ...
def instruction_set() -> int: ...
def instruction_set_name() -> str: ...
def set_instruction_set(level: int) -> int: ...
def bounds_meeting(out: object, arrays: tuple) -> int: ...
def apply_rope(
    x: _Array, cos: _Array, sin: _Array, out: _Array, tx: int, tc: int, interleaved: bool,
    inverse: bool, nthreads: int = ..., stream: bool = ..., chunk_bytes: int = ...,
    check_only: bool = ...,
) -> None: ...
def apply_rope_cached(
    x: _Array, cos_cache: _Array, sin_cache: _Array, position_ids: _Array, out: _Array,
    tx: int, tc: int, interleaved: bool, inverse: bool, nthreads: int = ...,
    stream: bool = ..., chunk_bytes: int = ...,
) -> None: ...
def sinusoid_table(
    pos: _F64, rc: _F64, rs: _F64, pc: _F64, ps: _F64, w_hi: _F64, w_lo: _F64, out: _Array,
    code: int, layout: int, nthreads: int = ..., stream: bool = ..., chunk_bytes: int = ...,
) -> None: ...
def rope_table(
    pos: _F64, rc: _F64, rs: _F64, pc: _F64, ps: _F64, w_hi: _F64, w_lo: _F64,
    cos_out: _Array, sin_out: _Array, code: int, interleaved: bool, scale: float,
    nthreads: int = ..., stream: bool = ..., chunk_bytes: int = ...,
) -> None: ...
def stream_copy(src: _Array, dst: _Array, nthreads: int = ...) -> None: ...
def stream_fill(dst: _Array, byte: int, nthreads: int = ...) -> None: ...
def trim_output_blocks() -> None: ...

class OutputBlock:
    """Memory of one large output (a writable buffer); returns to a free list when released."""
    def __init__(self, nbytes: int) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
def alibi_bias_into(
    slopes: _Array, out: _Array, code: int, q: int, k: int, qoff: int, mode: int,
    nthreads: int = ..., stream: bool = ...,
) -> None: ...
def alibi_positions_into(
    slopes: _F64, qp: _Array, kp: _Array, out: _Array, code: int, mode: int,
    nthreads: int = ..., stream: bool = ...,
) -> None: ...
def alibi_mask_into(
    slopes: _Array, mask: _Array, out: _Array, code: int, nthreads: int = ...,
    stream: bool = ...,
) -> None: ...
def conv_grid_into(
    x: _Array, w: _Array, bias: _Array | None, out: _Array, code: int, act: int,
    residual: bool, nthreads: int = ...,
) -> None: ...
def resample_into(
    x: _Array, hidx: _Array | None, hw: _Array | None, widx: _Array | None,
    ww: _Array | None, out: _Array, code: int, nthreads: int = ...,
) -> None: ...
def relative_gather(
    table_t: _Array, index: _Array, out: _Array, nthreads: int = ..., stream: bool = ...,
    rows: int = ...,
) -> None: ...
def toeplitz_rows(
    lines: _Array, out: _Array, q: int, k: int, nthreads: int = ..., stream: bool = ...,
) -> None: ...
def clip_shift_into(
    x: _Array, out: _Array, lo: int, hi: int, shift: int, nthreads: int = ...,
    stream: bool = ...,
) -> None: ...

"""The CUDA driver: the kernels of ``kernels.cu``, built by NVRTC through CuPy, for the
front-ends that hand them CuPy arrays (``cupy``, and ``torch_cuda`` through DLPack views).

Package-public names only, each one of four jobs:

* the build: the instantiation list (every kernel template of the op table, ``ops``, for each
  of its element types and offset types), the ``cupy.RawModule`` arguments, one module per
  device compiled on first use, a build failure remembered per device with one warning (the
  front-ends then decline, and the generic code runs);
* launch geometry: leading axes merged to the four the kernels index, the offset type, the
  two-pairs-per-thread path, the grid;
* packing: parameters passed by value (frequency blocks, strides), so no launch copies host
  data or synchronises and every launch is legal inside CUDA graph capture;
* launches and their memory-safety guards: every array a CuPy array on one device, element
  types, shapes, strides and outputs checked before a launch; what would read or write memory
  the call does not own raises ``Unsupported`` (nothing launched, nothing written).

User-facing validation is the public layer's: nothing here names an argument to a user. The
launches run on CuPy's current device and stream. CuPy is imported lazily, inside the
functions: this module (and the list of kernel instantiations that ``.ci/check_nvrtc.sh`` and
``.ci/check_nvcc.sh`` compile) imports without CuPy or a GPU.
"""
from __future__ import annotations

import math
import pathlib
import threading
import warnings
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np

from .. import Unsupported, memory, ops
from . import tap_blocks

__all__ = [
    "ALIBI_MODES", "CXX_TYPES", "FREQ_BLOCK", "FREQ_DTYPE", "INT_OFFSETS_BELOW", "OPTIONS",
    "ROPE_LAYOUTS", "SOURCE_PATH", "STRIDES_DTYPE", "STRIDES_FIELDS", "TABLE_LAYOUTS",
    "VECTOR_PAIRS", "alibi_bias", "alibi_bias_from_mask", "alibi_bias_from_positions",
    "apply_pair", "apply_rope", "apply_rope_cached", "conv_positional", "cp", "cuda_source",
    "forget",
    "instantiation_source", "kernel", "kernel_name", "kernel_names", "launch", "launch_shape",
    "module_failure", "module_spec", "plan_apply", "relative_bias", "resample_grid",
    "rope_cos_sin", "sinusoid_table",
]

SOURCE_PATH = pathlib.Path(__file__).with_name("kernels.cu")
# NVRTC options (CuPy appends -ftz=true and the architecture). No fast math: the exact angle
# reduction relies on IEEE double arithmetic.
OPTIONS = ("--std=c++17",)
# element type name -> C++ storage type of the kernel templates
CXX_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "arrpos::half",
    "bfloat16": "arrpos::bfloat16",
}
_OFFSET_TYPES = ("int", "long long")  # of the templates instantiated per offset type too
# CuPy has no bfloat16: such data (from torch) is handed over as int16 bits of the same width.
_HOLDER_DTYPE = {"bfloat16": "int16"}

TABLE_LAYOUTS = {"interleaved": 0, "split": 1, "split_cos": 2}
ROPE_LAYOUTS = {"half": 0, "interleaved": 1}
ALIBI_MODES = {"causal": 0, "symmetric": 1, "key": 2}
_MAX_ROWS_DIMS = 4  # leading axes the apply kernels index (after merging contiguous ones)
_THREADS = 256  # per block; kernels.cu declares __launch_bounds__(256)
_MAX_GRID_Y = 65535
INT_OFFSETS_BELOW = 2**31  # offsets below this take the kernels' 32-bit (int) instantiation
VECTOR_PAIRS = True  # the kernels' two-pairs-per-thread path where alignment allows

# Kernel parameters passed by value (CuPy passes a size-1 structured NumPy array as its bytes).
FREQ_BLOCK = 192  # ARRPOS_FREQ_BLOCK of kernels.cu
FREQ_DTYPE = np.dtype([("hi", "<f8", (FREQ_BLOCK,)), ("lo", "<f8", (FREQ_BLOCK,))])
STRIDES_FIELDS = ("s0", "s1", "s2", "s3", "f")  # struct strides4 of kernels.cu
STRIDES_DTYPE = np.dtype([(n, "<i8") for n in STRIDES_FIELDS])


# ------------------------------------------------------------------------------------------
# The instantiation list and the module


def kernel_name(kernel: str, dtype_name: str, index: str | None = None) -> str:
    """The C++ name expression of one instantiation, e.g. ``arrpos::apply_rope<float, int>``."""
    args = CXX_TYPES[dtype_name] + ("" if index is None else f", {index}")
    return f"arrpos::{kernel}<{args}>"


def kernel_names() -> list[str]:
    """Every instantiation the driver can launch (``name_expressions`` of the RawModule): each
    kernel template of the op table for each element type, and offset type where it has one."""
    return [kernel_name(k, d, i) for k, (dtypes, offsets) in ops.cuda_kernels().items()
            for d in dtypes for i in (_OFFSET_TYPES if offsets else (None,))]


def cuda_source() -> str:
    return SOURCE_PATH.read_text()


def module_spec() -> dict:
    """The ``cupy.RawModule`` arguments: source, NVRTC options and name expressions (the CI
    compile in ``.ci/check_nvrtc.sh`` uses exactly these)."""
    return {"code": cuda_source(), "options": OPTIONS, "name_expressions": kernel_names()}


def instantiation_source(source_path=None) -> str:
    """A translation unit for nvcc that includes ``kernels.cu`` and instantiates every kernel of
    :func:`kernel_names` (taking a kernel's address instantiates it, as NVRTC does for a name
    expression), so a template error fails at build time rather than on a user's GPU."""
    path = pathlib.Path(source_path or SOURCE_PATH).resolve()
    lines = [
        "// generated by arrpos._backends.cuda.driver.instantiation_source(); do not edit",
        f'#include "{path}"',
        "",
        "extern const void *const arrpos_instances[];",
        "const void *const arrpos_instances[] = {",
    ]
    lines += [f"    (const void *)&{name}," for name in kernel_names()]
    lines += ["};", ""]
    return "\n".join(lines)


def cp():
    """The ``cupy`` module (imported on first use)."""
    import cupy

    return cupy


_LOCK = threading.Lock()
_MODULES: dict[int, Any] = {}  # device id -> cupy.RawModule
_FUNCTIONS: dict[tuple[int, str], Any] = {}  # (device id, name expression) -> RawKernel
_FAILED: dict[int, str] = {}  # device id -> why its module could not be built
_SM_COUNT: dict[int, int] = {}


def module_failure(device_id: int) -> str | None:
    """Why the kernels could not be built on GPU ``device_id``, or None (not failed so far)."""
    return _FAILED.get(device_id)


def forget() -> None:
    """Forget every built module, kernel, device property and build failure."""
    with _LOCK:
        _MODULES.clear()
        _FUNCTIONS.clear()
        _SM_COUNT.clear()
        _FAILED.clear()


def _build(cupy, dev: int):
    """The module of ``dev``; on any failure remember it, warn once and decline the call."""
    try:
        return cupy.RawModule(**module_spec())
    except Exception as exc:  # NVRTC missing (DynamicLibNotFoundError), CompileException, ...
        _fail(dev, exc)


def _fail(dev: int, exc: BaseException):
    why = f"{type(exc).__name__}: {exc}"
    first = dev not in _FAILED
    _FAILED[dev] = why
    if first:
        warnings.warn(f"arrpos: the CUDA kernels could not be built for GPU {dev} ({why}); "
                      "the generic Array API code runs instead", RuntimeWarning, stacklevel=4)
    raise Unsupported(why)


def kernel(name: str):
    """The compiled kernel ``name`` for the current device (compiled once per device)."""
    cupy = cp()
    dev = cupy.cuda.Device().id
    fn = _FUNCTIONS.get((dev, name))
    if fn is not None:
        return fn
    if dev in _FAILED:
        raise Unsupported(_FAILED[dev])
    with _LOCK:
        mod = _MODULES.get(dev)
        if mod is None:
            mod = _MODULES[dev] = _build(cupy, dev)
        try:  # RawModule may compile and load lazily, on the first get_function
            fn = _FUNCTIONS[(dev, name)] = mod.get_function(name)
        except Exception as exc:
            _MODULES.pop(dev, None)
            _fail(dev, exc)
    return fn


# ------------------------------------------------------------------------------------------
# Geometry and packing


def _sm_count() -> int:
    cupy = cp()
    dev = cupy.cuda.Device().id
    n = _SM_COUNT.get(dev)
    if n is None:
        n = _SM_COUNT[dev] = int(cupy.cuda.Device(dev).attributes["MultiProcessorCount"])
    return n


def launch_shape(rows: int, items: int, sm_count: int):
    """``(grid, block, chunk)`` for ``rows`` rows of ``items`` work items each.

    ``blockDim.x`` threads walk a row's items (consecutive addresses: coalesced), ``blockDim.y``
    rows per block; the grid's x axis covers the rows (at most 32 blocks per SM, striding over
    the rest); when that gives fewer than 4 blocks per SM, its y axis splits each row into
    chunks (a multiple of ``blockDim.x`` items each) so that wide, short work fills the GPU.
    """
    bx = min(32, 1 << max(0, int(items) - 1).bit_length())
    by = _THREADS // bx
    row_blocks = -(-rows // by)
    gy = 1
    if row_blocks < 4 * sm_count and items > bx:
        gy = min(-(-items // bx), -(-4 * sm_count // row_blocks), _MAX_GRID_Y)
    chunk = -(-(-(-items // gy)) // bx) * bx
    gy = -(-items // chunk)
    return (min(row_blocks, 32 * sm_count), gy), (bx, by), chunk


def launch(name, rows: int, items: int, args) -> None:
    """One launch of kernel ``name`` (a name expression, or the kernel itself); ``chunk`` is
    the last argument."""
    fn = kernel(name) if isinstance(name, str) else name
    grid, block, chunk = launch_shape(rows, items, _sm_count())
    fn(grid, block, tuple(args) + (np.int32(chunk),))


def _frequency_blocks(hi, lo):
    """Host frequencies as kernel-parameter blocks: ``(first, count, block)`` each."""
    for first in range(0, hi.shape[0], FREQ_BLOCK):
        count = min(FREQ_BLOCK, hi.shape[0] - first)
        block = np.zeros(1, dtype=FREQ_DTYPE)
        block["hi"][0, :count] = hi[first:first + count]
        block["lo"][0, :count] = lo[first:first + count]
        yield first, count, block


def _strides(values) -> np.ndarray:
    """Four row strides and the feature stride as the kernels' ``strides4`` (by value)."""
    s = np.zeros(1, dtype=STRIDES_DTYPE)
    for name, v in zip(STRIDES_FIELDS, values):
        s[name] = v
    return s


def _element_strides(a, lead_rank: int, features: bool = True):
    """Element strides of ``a``'s leading axes, aligned right with ``lead_rank`` axes and 0
    where ``a`` is broadcast, plus the stride of its last (feature) axis; without
    ``features`` (position ids) every axis of ``a`` is leading and the feature stride is 0."""
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise Unsupported(f"strides {a.strides} that are not multiples of the item size {item}")
    strides = [s // item for s in a.strides]
    own = a.ndim - 1 if features else a.ndim
    out = []
    for k in range(lead_rank):
        ak = k - (lead_rank - own)
        out.append(0 if ak < 0 or a.shape[ak] == 1 else strides[ak])
    return out, (strides[-1] if features else 0)


def _merge_rows(sizes, stride_sets):
    """Drop size-1 axes and merge neighbours that every array walks contiguously."""
    dims = [(n, [s[k] for s in stride_sets]) for k, n in enumerate(sizes) if n != 1]
    merged = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(p == q * n for p, q in zip(pst, st)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    return merged


def _row_geometry(lead, arrays, feature_extent, ids=None):
    """Leading axes merged to four: ``(n1, n2, n3)``, a ``strides4`` per array, and the offset
    type: ``"int"`` when every element offset of every array is below 2**31.

    ``feature_extent`` is the features each array is indexed over (its feature stride times
    that bounds the in-row offsets); the array at index ``ids`` (position ids) has no feature
    axis."""
    rank = len(lead)
    sets, feat = [], []
    for k, a in enumerate(arrays):
        st, f = _element_strides(a, rank, features=k != ids)
        sets.append(st)
        feat.append(f)
    dims = _merge_rows(lead, sets)
    if len(dims) > _MAX_ROWS_DIMS:
        raise Unsupported(f"the leading axes {lead} of the arrays merge to {len(dims)} "
                          f"strided axes; the kernels index at most {_MAX_ROWS_DIMS}")
    dims = [(1, [0] * len(arrays))] * (_MAX_ROWS_DIMS - len(dims)) + dims
    n = [int(size) for size, _ in dims]
    strides, widest = [], 0
    for k in range(len(arrays)):
        row = [int(st[k]) for _, st in dims]
        strides.append(_strides(row + [int(feat[k])]))
        reach = sum((m - 1) * abs(s) for m, s in zip(n, row))
        widest = max(widest, reach + max(feature_extent - 1, 0) * abs(int(feat[k])))
    index = "int" if max(widest, math.prod(n)) < INT_OFFSETS_BELOW else "long long"
    return n, strides, index


def _vector_pairs(arrays, strides, half_rot: int, layout_code: int) -> bool:
    """Whether ``apply_rope`` may take two pairs per thread with aligned vector loads: every
    feature stride 1, an even number of pairs, and every pack start (base pointer plus any
    row offset, plus ``half_rot`` in the half layout) aligned to the pack's load width."""
    if not VECTOR_PAIRS or half_rot % 2:
        return False
    item = arrays[0].dtype.itemsize
    per_pack = 2 if layout_code == 0 else 4
    align = min(per_pack * item, 16)
    step = align // item  # elements
    for a, st in zip(arrays, strides):
        row = [int(st[f][0]) for f in STRIDES_FIELDS[:4]]
        if int(st["f"][0]) != 1 or a.data.ptr % align or any(r % step for r in row):
            return False
    return True


def _cache_strides(cos_cache, sin_cache, index):
    """Row and column element strides of both caches, and the offset type widened to
    ``long long`` when a cache offset may reach 2**31."""
    item = cos_cache.dtype.itemsize
    if any(s % item for a in (cos_cache, sin_cache) for s in a.strides):
        raise Unsupported("cache strides are not multiples of the item size")
    strides = [s // item for a in (cos_cache, sin_cache) for s in a.strides]
    rows, cols = cos_cache.shape
    reach = max(abs(strides[0]), abs(strides[2])) * (rows - 1) \
        + max(abs(strides[1]), abs(strides[3])) * (cols - 1)
    return [np.int64(s) for s in strides], (index if reach < INT_OFFSETS_BELOW else "long long")


def _cache_packs(cos_cache, sin_cache, strides) -> bool:
    """Whether the caches can be read two columns at a time: column strides 1, every row
    start aligned to two elements (``strides``: row and column strides of both caches)."""
    align = 2 * cos_cache.dtype.itemsize
    cr, cc, sr, sc = (int(v) for v in strides)
    return (cc == 1 and sc == 1 and cr % 2 == 0 and sr % 2 == 0
            and cos_cache.data.ptr % align == 0 and sin_cache.data.ptr % align == 0)


# ------------------------------------------------------------------------------------------
# Memory-safety guards: a "no" is ``Unsupported``, before any launch


def _refuse(why: str) -> NoReturn:
    raise Unsupported(why)


def _device(*arrays):
    """The device of the arrays (None entries skipped): CuPy arrays on one device, or refused
    (a launch would read host memory or another GPU's as its own)."""
    ndarray = cp().ndarray
    dev = None
    for a in arrays:
        if a is None:
            continue
        if not isinstance(a, ndarray):
            _refuse(f"{type(a).__name__} is not a CuPy array")
        if dev is None:
            dev = a.device
        elif a.device.id != dev.id:
            _refuse("arrays on more than one GPU")
    return dev


def _storage(op: str, storage, dtype) -> str:
    """The element type a kernel of ``op`` reads: ``storage`` where the arrays hold raw bits
    (bfloat16 from torch arrives as int16 views), else ``dtype``'s; refused where the kernel
    has no instantiation or the arrays' items are not its width."""
    name = storage or np.dtype(dtype).name
    if name not in (ops.OPS[op].dtypes["cuda"] or ()) or np.dtype(dtype).name != _holder(name):
        _refuse(f"no {op} kernel reads {np.dtype(dtype).name} as {name}")
    return name


def _holder(dtype_name: str) -> str:
    return _HOLDER_DTYPE.get(dtype_name, dtype_name)


def _code(table: Mapping[Any, int], value) -> int:
    code = table.get(value)
    if code is None:
        _refuse(f"no kernel layout or mode {value!r}")
    return code


def _table_out(out, shape, dtype_name: str):
    """``out`` (allocated when None) for a table kernel: refused unless it is a C-contiguous
    array of ``shape`` holding ``dtype_name`` (the kernels write whole rows)."""
    if out is None:
        return cp().empty(shape, dtype=_holder(dtype_name))
    if (out.shape != tuple(shape) or out.dtype.name != _holder(dtype_name)
            or not out.flags.c_contiguous):
        _refuse("a table output that is not a C-contiguous array of the table's shape and type")
    return out


def _same_view(a, b) -> bool:
    return (a.data.ptr == b.data.ptr and a.shape == b.shape and a.strides == b.strides
            and a.dtype == b.dtype)


def _rotation_out(x, out, shape, inputs):
    """``out`` (allocated when None) and whether it is ``x`` itself; refused unless it is an
    array of ``shape`` and ``x``'s type with no zero stride that meets no input but ``x`` in
    place (a launch would read what other threads wrote)."""
    if out is None:
        return cp().empty(shape, dtype=x.dtype), False
    if out.shape != shape or out.dtype != x.dtype:
        _refuse(f"out {out.dtype} {out.shape} for a result {x.dtype} {shape}")
    if any(s == 0 and n > 1 for s, n in zip(out.strides, out.shape)):
        _refuse(f"out is broadcast (zero strides {out.strides})")
    in_place = _same_view(out, x)
    others = inputs if in_place else (x,) + tuple(inputs)
    if any(memory.overlap(out, a) != "none" for a in others):
        _refuse("out overlaps an input other than x itself")
    return out, in_place


def _broadcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        _refuse(f"shapes {shapes} do not broadcast")


# ------------------------------------------------------------------------------------------
# Launches


def sinusoid_table(positions, hi, lo, out, layout: str, width: int, storage: str):
    """The sinusoid rows ``P + (width,)`` of ``positions`` (real, any shape) into ``out``
    (allocated when None), of element type ``storage`` (float32/float64). The host frequencies
    ``hi``/``lo`` travel in the kernel parameters (blocks of ``FREQ_BLOCK``, one launch each);
    an odd interleaved width ``2 F - 1`` drops the last cosine (keras-hub). Returns ``out``."""
    device = _device(positions, out)
    _storage("sinusoid_table", storage, _holder(storage))
    code = _code(TABLE_LAYOUTS, layout)
    hi = np.ascontiguousarray(hi, dtype=np.float64).reshape(-1)
    lo = np.zeros_like(hi) if lo is None else np.ascontiguousarray(lo, dtype=np.float64)
    nf = hi.shape[0]
    width = int(width)
    if lo.shape != hi.shape or width < 2 * nf - (code == TABLE_LAYOUTS["interleaved"]):
        _refuse("frequencies that do not fit the table's rows")
    shape = tuple(positions.shape) + (width,)
    with device:
        out = _table_out(out, shape, storage)
        rows = math.prod(shape[:-1])
        if rows == 0 or width == 0:
            return out
        pos = cp().ascontiguousarray(positions, dtype=np.float64).reshape(-1)
        name = kernel_name("sinusoid_table", storage)
        blocks = list(_frequency_blocks(hi, lo)) or [(0, 0, np.zeros(1, dtype=FREQ_DTYPE))]
        for first, count, block in blocks:
            tail = first + count == nf  # the last launch also writes the zero padding
            items = count + (max(width - 2 * nf, 0) if tail else 0)
            if items:
                launch(name, rows, items,
                       (out, pos, block, np.int64(rows), np.int32(first), np.int32(count),
                        np.int32(nf), np.int64(width), np.int32(tail), np.int32(code)))
    return out


def rope_cos_sin(positions, inv_freq, cos, sin, layout: str, scale: float, storage: str):
    """RoPE's cos/sin rows ``P + (2F,)`` of ``positions`` and the device frequencies
    ``inv_freq`` (1-D), times ``scale``, into ``cos`` and ``sin`` (each allocated when None),
    of element type ``storage`` (float32/float64). Returns ``(cos, sin)``."""
    device = _device(positions, inv_freq, cos, sin)
    _storage("rope_cos_sin", storage, _holder(storage))
    code = _code(ROPE_LAYOUTS, layout)
    if inv_freq.ndim != 1:
        _refuse("frequencies that are not 1-D")
    nf = inv_freq.shape[0]
    shape = tuple(positions.shape) + (2 * nf,)
    with device:
        cos, sin = _table_out(cos, shape, storage), _table_out(sin, shape, storage)
        rows = math.prod(shape[:-1])
        if rows == 0 or nf == 0:
            return cos, sin
        cupy = cp()
        freq = cupy.ascontiguousarray(inv_freq, dtype=cupy.float64)
        pos = cupy.ascontiguousarray(positions, dtype=cupy.float64).reshape(-1)
        launch(kernel_name("rope_cos_sin", storage), rows, nf,
               (cos, sin, pos, freq, np.int64(rows), np.int32(nf), np.float64(scale),
                np.int32(code)))
    return cos, sin


def apply_rope(x, cos, sin, out, layout: str, inverse: bool, storage: str | None = None):
    """Rotate the first ``R = cos.shape[-1]`` features of ``x``'s last axis into ``out``
    (allocated when None; ``x`` itself: in place) and copy the rest; ``cos``/``sin`` of
    ``x``'s type broadcast against ``x[..., :R]`` through zero strides (nothing is
    materialised). ``storage`` names the element type when the arrays hold raw bits. Leading
    axes that do not merge to four strided axes are refused (``Unsupported``). Returns
    ``out``."""
    with _device(x, cos, sin, out):
        out, go = plan_apply(x, cos, sin, out, layout, inverse, storage)
        if go is not None:
            go()
    return out


def plan_apply(x, cos, sin, out, layout: str, inverse: bool, storage: str | None = None):
    """``(out, launch)``: every guard of an ``apply_rope`` launch passed and its kernel built,
    ``launch()`` (None: nothing to do) left to run, so that a pair of launches refuses before
    either writes anything. Under ``x``'s device."""
    _device(x, cos, sin, out)
    dname = _storage("apply_rope", storage, x.dtype)
    code = _code(ROPE_LAYOUTS, layout)
    if min(x.ndim, cos.ndim, sin.ndim) < 1 or cos.dtype != x.dtype or sin.dtype != x.dtype:
        _refuse("tables of another type than x, or 0-d arrays")
    d, r = x.shape[-1], cos.shape[-1]
    if r % 2 or r > d or sin.shape[-1] != r:
        _refuse(f"a rotary width {r} that is odd, wider than x ({d}) or not sin's")
    lead = _broadcast(x.shape[:-1], cos.shape[:-1], sin.shape[:-1])
    out, in_place = _rotation_out(x, out, lead + (d,), (cos, sin))
    rows, half_rot = math.prod(lead), r // 2
    copy_cols = 0 if in_place else d - r
    if rows == 0 or half_rot + copy_cols == 0:
        return out, None
    arrays = (x, out, cos, sin)
    n, strides, index = _row_geometry(lead, arrays, d)
    vec = _vector_pairs(arrays, strides, half_rot, code)
    args = [x, out, cos, sin, np.int64(rows), np.int64(n[1]), np.int64(n[2]),
            np.int64(n[3]), *strides, np.int32(half_rot), np.int32(copy_cols),
            np.int32(code), np.int32(1 if inverse else 0), np.int32(vec)]
    rotated = half_rot // 2 if vec else half_rot
    fn = kernel(kernel_name("apply_rope", dname, index))
    return out, lambda: launch(fn, rows, rotated + copy_cols, args)


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, out, layout: str, inverse: bool,
                      storage: str | None = None):
    """ONNX's RotaryEmbedding: half-width caches ``(max_positions, R/2)`` of ``x``'s type
    gathered at integer ``position_ids`` (broadcasting against ``x.shape[:-1]``) inside the
    kernel, into ``out`` (allocated when None); features ``R:`` pass through. Ids outside
    ``[0, max_positions)`` are clamped in the kernel (the public function has rejected them);
    float16/bfloat16 compute in float32 and round once. Returns ``out``."""
    device = _device(x, cos_cache, sin_cache, position_ids, out)
    dname = _storage("apply_rope_cached", storage, x.dtype)
    code = _code(ROPE_LAYOUTS, layout)
    if (x.ndim < 1 or cos_cache.dtype != x.dtype or sin_cache.dtype != x.dtype
            or cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape
            or 0 in cos_cache.shape or position_ids.dtype.kind not in "iu"):
        _refuse("caches or ids of another type or shape than the kernel reads")
    d, half_rot = x.shape[-1], cos_cache.shape[1]
    lead = tuple(x.shape[:-1])
    if 2 * half_rot > d or _broadcast(position_ids.shape, lead) != lead:
        _refuse("caches wider than x, or ids that do not broadcast to its rows")
    with device:
        out, in_place = _rotation_out(x, out, tuple(x.shape),
                                      (cos_cache, sin_cache, position_ids))
        rows = math.prod(lead)
        copy_cols = 0 if in_place else d - 2 * half_rot
        if rows == 0 or half_rot + copy_cols == 0:
            return out
        ids = cp().asarray(position_ids, dtype=np.int64)  # a device cast where needed
        n, strides, index = _row_geometry(lead, (x, out, ids), d, ids=2)
        cache, index = _cache_strides(cos_cache, sin_cache, index)
        vec = (_vector_pairs((x, out), strides[:2], half_rot, code)
               and _cache_packs(cos_cache, sin_cache, cache))
        args = [x, out, cos_cache, sin_cache, ids, np.int64(rows), np.int64(n[1]),
                np.int64(n[2]), np.int64(n[3]), *strides, *cache,
                np.int64(cos_cache.shape[0]), np.int32(half_rot), np.int32(copy_cols),
                np.int32(code), np.int32(1 if inverse else 0), np.int32(vec)]
        rotated = half_rot // 2 if vec else half_rot
        launch(kernel_name("apply_rope_cached", dname, index), rows, rotated + copy_cols,
               args)
    return out


def apply_pair(q, k, cq, sq, ck, sk, q_out, k_out, layout: str, inverse: bool,
               storage=(None, None)):
    """``apply_rope_qk``'s two launches (tables ``cq, sq`` for ``q``, ``ck, sk`` for ``k``,
    ``storage`` a pair), both planned before either runs: a refusal (``Unsupported``) comes
    before anything is written, so the generic code that then serves the call reads ``q`` as
    it was. Outputs that meet the other tensor or each other are refused (each launch sees its
    own arrays only). Returns ``(q_out, k_out)``."""
    device = _device(q, k, cq, sq, ck, sk, q_out, k_out)
    if (q_out is not None and memory.meets(q_out, (k, k_out))) or (
            k_out is not None and memory.meets(k_out, (q,))):
        _refuse("an output of apply_rope_qk meets the other tensor or output")
    with device:
        q_out, launch_q = plan_apply(q, cq, sq, q_out, layout, inverse, storage[0])
        k_out, launch_k = plan_apply(k, ck, sk, k_out, layout, inverse, storage[1])
        for go in (launch_q, launch_k):
            if go is not None:
                go()
    return q_out, k_out


def alibi_bias(slopes, query_len: int, key_len: int, out, mode: str, query_offset,
               storage: str):
    """ALiBi biases ``(heads, query_len, key_len)`` of the slopes (real, 1-D) into ``out``
    (allocated when None), computed in float64 and rounded once to ``storage``; ``query_offset``
    None: ``key_len - query_len``. Returns ``out``."""
    device = _device(slopes, out)
    _storage("alibi_bias", storage, _holder(storage))
    code = _code(ALIBI_MODES, mode)
    if slopes.ndim != 1:
        _refuse("slopes that are not 1-D")
    offset = key_len - query_len if query_offset is None else query_offset
    heads = slopes.shape[0]
    with device:
        out = _table_out(out, (heads, query_len, key_len), storage)
        rows = heads * query_len
        if rows == 0 or key_len == 0:
            return out
        s64 = cp().ascontiguousarray(slopes, dtype=np.float64)
        launch(kernel_name("alibi_bias", storage), rows, key_len,
               (out, s64, np.int64(heads), np.int64(query_len), np.int64(key_len),
                np.int64(offset), np.int32(code)))
    return out


_MASK_MODE = 3  # alibi_bias_from_positions's mode reading a mask's cumulative sum
_F32_EXACT = 2**24  # integers up to this are exact in float32


def alibi_bias_from_positions(slopes, query_positions, key_positions, out, mode: str,
                              lead: tuple, storage: str):
    """ALiBi ``lead + (heads, q, k)`` of positions ``(..., q)`` and ``(..., k)`` (real, their
    leading axes broadcasting to ``lead``; both integer: an exact int64 distance, else a
    float64 one) into ``out`` (allocated when None), the float64 product rounded once to
    ``storage``. The positions are broadcast and converted on the device (``lead`` times
    smaller than the bias). Returns ``out``."""
    device = _device(slopes, query_positions, key_positions, out)
    _storage("alibi_bias_from_positions", storage, _holder(storage))
    code = _code(ALIBI_MODES, mode)
    qp, kp = query_positions, key_positions
    if slopes.ndim != 1 or min(qp.ndim, kp.ndim) < 1 or any(
            a.dtype.kind not in "iuf" for a in (qp, kp)):
        _refuse("slopes that are not 1-D, or positions that are not real arrays")
    ints = qp.dtype.kind in "iu" and kp.dtype.kind in "iu"
    lead = tuple(int(n) for n in lead)
    heads, q, k = slopes.shape[0], qp.shape[-1], kp.shape[-1]
    if _broadcast(qp.shape[:-1], kp.shape[:-1], lead) != lead:
        _refuse("positions whose leading axes do not broadcast to the bias's")
    with device:
        out = _table_out(out, lead + (heads, q, k), storage)
        planes = math.prod(lead)
        if planes * heads * q == 0 or k == 0:
            return out
        cupy = cp()
        pos = np.int64 if ints else np.float64
        qd = cupy.ascontiguousarray(cupy.broadcast_to(qp, lead + (q,)), dtype=pos)
        kd = cupy.ascontiguousarray(cupy.broadcast_to(kp, lead + (k,)), dtype=pos)
        s64 = cupy.ascontiguousarray(slopes, dtype=np.float64)
        launch(kernel_name("alibi_bias_from_positions", storage), planes * heads * q, k,
               (out, s64, qd, kd, np.int64(planes), np.int64(heads), np.int64(q), np.int64(k),
                np.int32(ints), np.int32(code)))
    return out


def alibi_bias_from_mask(slopes, counts, out, storage: str):
    """BLOOM's ALiBi ``(batch, heads, 1, k)`` from ``counts``, the inclusive cumulative sum
    along the keys of a 0/1 ``(batch, k)`` mask (the front-end forms it on the device; the
    caller has checked the mask), into ``out`` (allocated when None): ``slope * (count - 1)``
    where the mask is 1, else 0, rounded once to ``storage``. float32 keys past ``2**24 + 1``
    are refused (the generic code rounds such positions to float32 first). Returns ``out``."""
    device = _device(slopes, counts, out)
    _storage("alibi_bias_from_mask", storage, _holder(storage))
    if slopes.ndim != 1 or counts.ndim != 2 or counts.dtype.kind not in "iu":
        _refuse("slopes that are not 1-D, or counts that are not a 2-D integer array")
    b, k = counts.shape
    heads = slopes.shape[0]
    if storage == "float32" and k - 1 > _F32_EXACT:
        _refuse("float32 positions beyond 2**24, which the generic code rounds first")
    with device:
        out = _table_out(out, (b, heads, 1, k), storage)
        if b * heads == 0 or k == 0:
            return out
        cupy = cp()
        c64 = cupy.ascontiguousarray(counts, dtype=np.int64)
        s64 = cupy.ascontiguousarray(slopes, dtype=np.float64)
        launch(kernel_name("alibi_bias_from_positions", storage), b * heads, k,
               (out, s64, c64, c64, np.int64(b), np.int64(heads), np.int64(1), np.int64(k),
                np.int32(1), np.int32(_MASK_MODE)))
    return out


def relative_bias(table, index, out, storage: str):
    """``out[h, ...] = table[index[...], h]``: ``(heads,) + index.shape`` (allocated when
    None) of the 2-D ``table``'s type (its bits copied; ``storage`` its element type), read
    through its strides, at integer ``index`` of any shape. Ids are clamped into the table in
    the kernel (the public function has rejected those outside). Returns ``out``."""
    device = _device(table, index, out)
    _storage("relative_bias", storage, table.dtype)
    if table.ndim != 2 or index.dtype.kind not in "iu":
        _refuse("a table that is not 2-D, or ids that are not integers")
    buckets, heads = table.shape
    item = table.dtype.itemsize
    if any(s % item for s in table.strides):
        _refuse(f"table strides {table.strides} that are not multiples of the item size")
    tr, tc = (s // item for s in table.strides)
    with device:
        out = _table_out(out, (heads,) + tuple(index.shape), storage)
        n = math.prod(index.shape)
        if heads == 0 or n == 0:
            return out
        if buckets == 0:
            _refuse("an empty table")
        ids = cp().ascontiguousarray(index, dtype=np.int64).reshape(-1)
        launch(kernel_name("relative_bias", storage), heads, n,
               (out, table, ids, np.int64(heads), np.int64(n), np.int64(buckets),
                np.int64(tr), np.int64(tc)))
    return out


_ACTIVATIONS = {None: 0, "gelu": 1, "tanh": 2}


def conv_positional(x, weight, bias, out, activation, residual: bool, storage: str):
    """The depthwise convolution of ``x (..., H, W, C)`` with ``weight (kh, kw, C)`` (zero
    padding ``(k - 1) // 2`` before), ``+ bias (C,)`` (None: none), the activation (None,
    "gelu", "tanh"), ``+ x`` if ``residual``, summed in the working type (float64 for float64
    ``x``, else float32; weight and bias converted to it on the device) and rounded once to
    ``storage``, into ``out`` (allocated when None; C-contiguous, ``x``'s shape). A ``x`` that
    is not C-contiguous is copied on the device first. Returns ``out``."""
    device = _device(x, weight, bias, out)
    _storage("conv_positional", storage, x.dtype)
    act = _code(_ACTIVATIONS, activation)
    if x.ndim < 3 or weight.ndim != 3 or weight.shape[2] != x.shape[-1] or (
            bias is not None and tuple(bias.shape) != (x.shape[-1],)):
        _refuse("x, weight or bias of shapes the convolution kernel does not read")
    kh, kw = int(weight.shape[0]), int(weight.shape[1])
    h, w, c = (int(n) for n in x.shape[-3:])
    if min(kh, kw) < 1 or max(kh, kw) >= INT_OFFSETS_BELOW:
        _refuse("an empty or oversized kernel")
    work = np.float64 if storage == "float64" else np.float32
    with device:
        out = _table_out(out, tuple(x.shape), storage)
        outer = math.prod(x.shape[:-3])
        if outer * h * w == 0 or c == 0:
            return out
        cupy = cp()
        xc = cupy.ascontiguousarray(x)
        wc = cupy.ascontiguousarray(weight, dtype=work)
        bc = wc if bias is None else cupy.ascontiguousarray(bias, dtype=work)
        launch(kernel_name("conv_positional", storage), outer * h * w, c,
               (out, xc, wc, bc, np.int64(outer), np.int64(h), np.int64(w), np.int64(c),
                np.int32(kh), np.int32(kw), np.int32((kh - 1) // 2), np.int32((kw - 1) // 2),
                np.int32(bias is not None), np.int32(act), np.int32(bool(residual))))
    return out



def resample_grid(grid, prefix, taps, out, storage: str):
    """``grid (..., *old, C)`` (one or two grid axes, any strides) resampled with host ``taps``
    (``(index, weight)``, each ``(n_out, T)``, or None: the axis kept) into ``out`` (``(...,
    P + prod(new), C)``, C-contiguous; allocated when None) after a device copy of the
    ``prefix`` rows ``(..., P, C)`` (None: none), each output summed in float64 as the host
    kernel sums it and rounded once to ``storage``. The taps travel by value (``tap_blocks``:
    a launch per block of outputs whose taps fit; else refused). Returns ``out``."""
    device = _device(grid, prefix, out)
    _storage("resample_grid", storage, grid.dtype)
    k = len(taps)
    if not 1 <= k <= 2 or grid.ndim < k + 1:
        _refuse("resample: one or two grid axes only")
    lead, c = tuple(grid.shape[:-k - 1]), int(grid.shape[-1])
    h, w = (int(grid.shape[-2]), 1) if k == 1 else (int(n) for n in grid.shape[-3:-1])
    p = 0 if prefix is None else int(prefix.shape[-2])
    if prefix is not None and (prefix.ndim != len(lead) + 2 or prefix.dtype != grid.dtype
                               or tuple(prefix.shape[:-2]) != lead or prefix.shape[-1] != c):
        _refuse("resample: prefix rows of another shape or type than the grid's")
    first = tap_blocks.axis_taps(taps[0], h)
    second = tap_blocks.axis_taps(taps[1] if k == 2 else None, w)
    if first is None or second is None or max(h, w) >= INT_OFFSETS_BELOW:
        _refuse("resample: taps that do not index the grid")
    (ho, th), (wo, tw) = ((n if t[0] is None else t[0].shape[0], t[2])
                          for n, t in ((h, first), (w, second)))
    if th + tw > tap_blocks.TAPS_BLOCK:
        _refuse(f"resample: {th} + {tw} taps per output, more than one block's")
    outer, rows = math.prod(lead), p + ho * wo
    with device:
        out = _table_out(out, lead + (rows, c), storage)
        if outer * rows * c == 0:
            return out
        if p:  # a device copy
            out.reshape(outer, rows, c)[:, :p, :] = prefix.reshape(outer, p, c)
        if ho * wo == 0:
            return out
        x = grid.reshape(outer, h, w, c)  # a view where the strides allow, else a device copy
        if any(s % x.dtype.itemsize for s in x.strides):
            x = cp().ascontiguousarray(x)
        xs = [np.int64(s // x.dtype.itemsize) for s in x.strides]
        fn = kernel(kernel_name("resample_grid", storage))
        row_spans, col_spans = tap_blocks.spans(ho, th, wo, tw)
        for h0, nh, w0, nw, block in tap_blocks.blocks(row_spans, col_spans, first, second):
            launch(fn, outer * nh * nw, c,
                   (out, x, block, np.int64(outer), np.int64(h0), np.int64(nh), np.int64(w0),
                    np.int64(nw), np.int64(wo), np.int64(c), np.int64(rows * c),
                    np.int64(p * c), *xs, np.int32(th), np.int32(tw)))
    return out

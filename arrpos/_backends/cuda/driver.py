"""CuPy adapter around the CUDA kernels of ``kernels.cu``.

Same function names and signatures as ``_xp`` (``sinusoid_table``, ``rope_cos_sin``,
``apply_rope``, ``apply_rope_cached``, ``apply_rope_qk``, ``alibi_bias``): this module checks
shapes, dtypes, devices and strides, allocates outputs, and launches the kernels on CuPy's
current stream (``RawKernel`` launches there). The kernels are C++ templates compiled on first
use by ``cupy.RawModule`` from :func:`module_spec` and memoised per device id. A module that
cannot be built (NVRTC missing on a driver-only machine, a compiler error) is remembered per
device with one warning: :func:`supports` then declines, and the dispatcher runs ``_xp``.

No call copies host data to the device or synchronises: sinusoid frequencies travel by value
in the kernel parameters, so every launch is legal inside CUDA graph capture.

CuPy itself is imported lazily, inside the functions: this module (and the list of kernel
instantiations that ``.ci/check_nvrtc.sh`` and ``.ci/check_nvcc.sh`` compile) imports without
CuPy or a GPU. ``arrpos._dispatch`` imports it only when a CuPy array (or a CUDA tensor) arrives.
"""
from __future__ import annotations

import math
import operator
import pathlib
import threading
import warnings
from typing import Any

import numpy as np

from . import Unsupported, _memory

__all__ = [
    "FREQ_BLOCK",
    "KERNEL_DTYPES",
    "OP_DTYPES",
    "OPTIONS",
    "Unsupported",
    "alibi_bias",
    "apply_rope",
    "apply_rope_cached",
    "apply_rope_qk",
    "cuda_source",
    "instantiation_source",
    "kernel_name",
    "kernel_names",
    "module_failure",
    "module_spec",
    "rope_cos_sin",
    "sinusoid_table",
    "supports",
]

SOURCE_PATH = pathlib.Path(__file__).with_name("kernels.cu")
# NVRTC options (CuPy appends -ftz=true and the architecture). No fast math: the exact angle
# reduction relies on IEEE double arithmetic.
OPTIONS = ("--std=c++17",)

# The one list of instantiations: dtype name -> C++ storage type, and the dtypes each kernel
# template is compiled for. cupy.RawModule's name_expressions and both CI compiles use it.
_CXX_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "arrpos::half",
    "bfloat16": "arrpos::bfloat16",
}
_ALL = ("float32", "float64", "float16", "bfloat16")
KERNEL_DTYPES = {
    "sinusoid_table": ("float32", "float64"),
    "rope_cos_sin": ("float32", "float64"),
    "apply_rope": _ALL,
    "apply_rope_cached": _ALL,
    "alibi_bias": _ALL,
}
# kernels templated on their offset type as well: int where every offset fits, else long long
_INDEXED = {"apply_rope": ("int", "long long"), "apply_rope_cached": ("int", "long long")}
# ops this adapter serves -> dtypes (apply_rope_qk is two apply_rope launches)
OP_DTYPES = dict(KERNEL_DTYPES, apply_rope_qk=_ALL)
# CuPy has no bfloat16: such data (from torch) is handed over as int16 bits of the same width.
_HOLDER_DTYPE = {"bfloat16": "int16"}

# ops that refuse (``Unsupported``, nothing written) outputs meeting an input other than their
# own x in place, or each other (``_prepare_out``, ``_apply_pair``): see ``_memory``
GUARDS = frozenset({"apply_rope", "apply_rope_cached", "apply_rope_qk"})

_TABLE_LAYOUTS = {"interleaved": 0, "split": 1, "split_cos": 2}
_ROPE_LAYOUTS = {"half": 0, "interleaved": 1}
_ALIBI_MODES = {"causal": 0, "symmetric": 1, "key": 2}
_MAX_ROWS_DIMS = 4  # leading axes the apply kernels index (after merging contiguous ones)
_THREADS = 256  # per block; kernels.cu declares __launch_bounds__(256)
_MAX_GRID_Y = 65535
_INT_OFFSETS_BELOW = 2**31  # offsets below this take the kernels' 32-bit (int) instantiation

# Kernel parameters passed by value (CuPy passes a size-1 structured NumPy array as its bytes).
FREQ_BLOCK = 192  # ARRPOS_FREQ_BLOCK of kernels.cu
_FREQ_DTYPE = np.dtype([("hi", "<f8", (FREQ_BLOCK,)), ("lo", "<f8", (FREQ_BLOCK,))])
_STRIDES_FIELDS = ("s0", "s1", "s2", "s3", "f")  # struct strides4 of kernels.cu
_STRIDES_DTYPE = np.dtype([(n, "<i8") for n in _STRIDES_FIELDS])


def kernel_name(kernel: str, dtype_name: str, index: str | None = None) -> str:
    """The C++ name expression of one instantiation, e.g. ``arrpos::apply_rope<float, int>``."""
    args = _CXX_TYPES[dtype_name] + ("" if index is None else f", {index}")
    return f"arrpos::{kernel}<{args}>"


def kernel_names() -> list[str]:
    """Every instantiation the adapter can launch (``name_expressions`` of the RawModule)."""
    return [kernel_name(k, d, i) for k, dtypes in KERNEL_DTYPES.items() for d in dtypes
            for i in _INDEXED.get(k, (None,))]


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
        "// generated by arrpos._backends._cupy.instantiation_source(); do not edit",
        f'#include "{path}"',
        "",
        "extern const void *const arrpos_instances[];",
        "const void *const arrpos_instances[] = {",
    ]
    lines += [f"    (const void *)&{name}," for name in kernel_names()]
    lines += ["};", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# Compilation and launch


def _cp():
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


def _build(cp, dev: int):
    """The module of ``dev``; on any failure remember it, warn once and decline the call."""
    try:
        return cp.RawModule(**module_spec())
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


def _kernel(name: str):
    """The compiled kernel ``name`` for the current device (compiled once per device)."""
    cp = _cp()
    dev = cp.cuda.Device().id
    fn = _FUNCTIONS.get((dev, name))
    if fn is not None:
        return fn
    if dev in _FAILED:
        raise Unsupported(_FAILED[dev])
    with _LOCK:
        mod = _MODULES.get(dev)
        if mod is None:
            mod = _MODULES[dev] = _build(cp, dev)
        try:  # RawModule may compile and load lazily, on the first get_function
            fn = _FUNCTIONS[(dev, name)] = mod.get_function(name)
        except Exception as exc:
            _MODULES.pop(dev, None)
            _fail(dev, exc)
    return fn


def _sm_count() -> int:
    cp = _cp()
    dev = cp.cuda.Device().id
    n = _SM_COUNT.get(dev)
    if n is None:
        n = _SM_COUNT[dev] = int(cp.cuda.Device(dev).attributes["MultiProcessorCount"])
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


def _launch(name, rows: int, items: int, args) -> None:
    """One launch of kernel ``name`` (a name expression, or the kernel itself); ``chunk`` is
    the last argument."""
    fn = _kernel(name) if isinstance(name, str) else name
    grid, block, chunk = launch_shape(rows, items, _sm_count())
    fn(grid, block, tuple(args) + (np.int32(chunk),))


def _frequency_blocks(hi, lo):
    """Host frequencies as kernel-parameter blocks: ``(first, count, block)`` each."""
    for first in range(0, hi.shape[0], FREQ_BLOCK):
        count = min(FREQ_BLOCK, hi.shape[0] - first)
        block = np.zeros(1, dtype=_FREQ_DTYPE)
        block["hi"][0, :count] = hi[first:first + count]
        block["lo"][0, :count] = lo[first:first + count]
        yield first, count, block


def _strides(values) -> np.ndarray:
    """Four row strides and the feature stride as the kernels' ``strides4`` (by value)."""
    s = np.zeros(1, dtype=_STRIDES_DTYPE)
    for name, v in zip(_STRIDES_FIELDS, values):
        s[name] = v
    return s


# ------------------------------------------------------------------------------------------
# Checks


def _dtype_name(dtype) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:  # torch dtypes: torch.bfloat16 -> bfloat16
        return str(dtype).rsplit(".", 1)[-1]


def _check_dtype(op: str, dtype, name: str = "dtype") -> str:
    dname = _dtype_name(dtype)
    if dname not in KERNEL_DTYPES[op]:
        raise TypeError(f"{name} must be one of {', '.join(KERNEL_DTYPES[op])} for the CUDA "
                        f"{op} kernel, got {dname}")
    return dname


def _holder(dtype_name: str) -> str:
    return _HOLDER_DTYPE.get(dtype_name, dtype_name)


def _check_array(a, name: str):
    cp = _cp()
    if not isinstance(a, cp.ndarray):
        raise TypeError(f"{name} must be a cupy.ndarray, got {type(a).__module__}."
                        f"{type(a).__name__}")
    return a


def _check_device(a, name: str, device) -> None:
    if a.device.id != device.id:
        raise ValueError(f"{name} is on GPU {a.device.id}, the other inputs on GPU {device.id}")


def _check_out(out, name: str, shape, dtype_name: str, device):
    _check_array(out, name)
    want = _holder(dtype_name)
    if out.shape != tuple(shape) or out.dtype.name != want or not out.flags.c_contiguous:
        raise ValueError(f"{name} must be a C-contiguous {want} array of shape {tuple(shape)}, "
                         f"got {out.dtype.name} {out.shape}"
                         f"{'' if out.flags.c_contiguous else ' (not C-contiguous)'}")
    _check_device(out, name, device)
    return out


def _choice(value, name: str, table: dict) -> int:
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, table))}, got {value!r}")
    return table[value]


def _nonneg_int(value, name: str) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def _positions64(positions):
    """Positions as a flat C-contiguous float64 device array (a device cast, no host trip)."""
    cp = _cp()
    if positions.dtype.kind not in "biuf":
        raise TypeError(f"positions must be an integer or real array, got {positions.dtype}")
    return cp.ascontiguousarray(positions, dtype=cp.float64).reshape(-1)


# leading arrays of an op that share the kernel's dtype, and the position of integer ids
_SAME_DTYPE = {"apply_rope": 3, "apply_rope_cached": 3, "apply_rope_qk": 4}
_IDS_AT = {"apply_rope_cached": 3}


def supports(op: str, arrays=(), **kwargs) -> bool:
    """Whether the CUDA kernel of ``op`` serves these inputs (else ``_dispatch`` tries the next)."""
    arrs = [a for a in arrays if a is not None]
    if op not in OP_DTYPES or not arrs or kwargs.get("axes") is not None:
        return False
    dtype = kwargs.get("dtype", arrs[0].dtype)
    if dtype is None or _dtype_name(dtype) not in OP_DTYPES[op]:
        return False
    cp = _cp()
    if not all(isinstance(a, cp.ndarray) for a in arrs):
        return False
    if len({a.device.id for a in arrs}) > 1 or arrs[0].device.id in _FAILED:
        return False
    return dtypes_match(op, arrays)


def dtypes_match(op: str, arrays) -> bool:
    """The dtype rules of the kernels: the leading arrays of one dtype, ids integer."""
    lead = arrays[:_SAME_DTYPE.get(op, 0)]
    if any(a is None or a.dtype != lead[0].dtype for a in lead):
        return False
    at = _IDS_AT.get(op)
    return at is None or (len(arrays) > at and getattr(arrays[at], "dtype", None) is not None
                          and _dtype_name(arrays[at].dtype).startswith(("int", "uint")))


# ------------------------------------------------------------------------------------------
# Tables


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for CuPy positions, float32/float64 output.

    The host frequencies ``hi``/``lo`` travel in the kernel parameters (blocks of
    ``FREQ_BLOCK``, one launch each): no device copy, no synchronisation. An odd interleaved
    ``width = 2 F - 1`` drops the last cosine (keras-hub). ``out``: an optional preallocated
    C-contiguous ``P + (width,)`` array of ``dtype`` on the device of ``positions``.
    """
    _check_array(positions, "positions")
    dname = _check_dtype("sinusoid_table", dtype)
    code = _choice(layout, "layout", _TABLE_LAYOUTS)
    hi = np.ascontiguousarray(hi, dtype=np.float64).reshape(-1)
    lo = np.zeros_like(hi) if lo is None else np.ascontiguousarray(lo, dtype=np.float64)
    if lo.shape != hi.shape:
        raise ValueError(f"lo must have the shape of hi {hi.shape}, got {lo.shape}")
    nf = hi.shape[0]
    width = _nonneg_int(width, "width")
    if width < 2 * nf - (code == _TABLE_LAYOUTS["interleaved"]):  # odd: the last cos dropped
        raise ValueError(f"width must be >= 2 * len(hi) = {2 * nf}, got {width}")
    shape = tuple(positions.shape) + (width,)
    with positions.device as device:
        if out is None:
            out = _cp().empty(shape, dtype=dname)
        else:
            _check_out(out, "out", shape, dname, device)
        rows = math.prod(shape[:-1])
        if rows == 0 or width == 0:
            return out
        pos = _positions64(positions)
        name = kernel_name("sinusoid_table", dname)
        blocks = list(_frequency_blocks(hi, lo)) or [(0, 0, np.zeros(1, dtype=_FREQ_DTYPE))]
        for first, count, block in blocks:
            tail = first + count == nf  # the last launch also writes the zero padding
            items = count + (max(width - 2 * nf, 0) if tail else 0)
            if items:
                _launch(name, rows, items,
                        (out, pos, block, np.int64(rows), np.int32(first), np.int32(count),
                         np.int32(nf), np.int64(width), np.int32(tail), np.int32(code)))
    return out


def _frequencies64(inv_freq, device):
    cp = _cp()
    _check_array(inv_freq, "inv_freq")  # a host array would need a device copy: caller's job
    _check_device(inv_freq, "inv_freq", device)
    if inv_freq.dtype.kind not in "iuf":
        raise TypeError(f"inv_freq must be a real array, got {inv_freq.dtype}")
    freq = cp.ascontiguousarray(inv_freq, dtype=cp.float64)
    if freq.ndim != 1:
        raise ValueError(f"inv_freq must be 1-D, got shape {freq.shape}")
    return freq


def _pair(out, names):
    try:
        a, b = out
    except (TypeError, ValueError):
        raise TypeError(f"out must be a ({names[0]}, {names[1]}) pair of arrays") from None
    return a, b


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin`` for CuPy positions and frequencies: ``(cos, sin)``, each
    ``P + (2F,)``. ``out``: an optional ``(cos, sin)`` pair of C-contiguous arrays to fill.
    Multimodal ``axes`` are declined by :func:`supports` (the generic code serves them)."""
    cp = _cp()
    _check_array(positions, "positions")
    dname = _check_dtype("rope_cos_sin", dtype)
    code = _choice(layout, "layout", _ROPE_LAYOUTS)
    scale = float(attention_factor)
    with positions.device as device:
        freq = _frequencies64(inv_freq, device)
        nf = freq.shape[0]
        shape = tuple(positions.shape) + (2 * nf,)
        if out is None:
            cos, sin = cp.empty(shape, dtype=dname), cp.empty(shape, dtype=dname)
        else:
            cos, sin = _pair(out, ("cos", "sin"))
            _check_out(cos, "out[0] (cos)", shape, dname, device)
            _check_out(sin, "out[1] (sin)", shape, dname, device)
        rows = math.prod(shape[:-1])
        if rows == 0 or nf == 0:
            return cos, sin
        _launch(kernel_name("rope_cos_sin", dname), rows, nf,
                (cos, sin, _positions64(positions), freq, np.int64(rows), np.int32(nf),
                 np.float64(scale), np.int32(code)))
    return cos, sin


# ------------------------------------------------------------------------------------------
# Fused application


def _same_view(a, b) -> bool:
    return (a.data.ptr == b.data.ptr and a.shape == b.shape and a.strides == b.strides
            and a.dtype == b.dtype)


def _element_strides(a, lead_rank: int, name: str, features: bool = True):
    """Element strides of ``a``'s leading axes, aligned right with ``lead_rank`` axes and 0
    where ``a`` is broadcast, plus the stride of its last (feature) axis; without
    ``features`` (position ids) every axis of ``a`` is leading and the feature stride is 0."""
    item = a.dtype.itemsize
    if any(s % item for s in a.strides):
        raise Unsupported(f"{name} has strides {a.strides} that are not multiples of its "
                          f"item size {item}")
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


def _row_geometry(lead, arrays, feature_extent):
    """Leading axes merged to four: ``(n1, n2, n3)``, a ``strides4`` per array, and the offset
    type: ``"int"`` when every element offset of every array is below 2**31.

    ``arrays`` are ``(name, array)``; ``feature_extent`` the features each array is indexed
    over (its feature stride times that bounds the in-row offsets). An array named
    ``position_ids`` has no feature axis."""
    rank = len(lead)
    sets, feat = [], []
    for name, a in arrays:
        st, f = _element_strides(a, rank, name, features=name != "position_ids")
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
    index = "int" if max(widest, math.prod(n)) < _INT_OFFSETS_BELOW else "long long"
    return n, strides, index


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope`` for CuPy arrays of one dtype (float16/32/64).

    Rotates the first ``R = cos.shape[-1]`` features of ``x``'s last axis and copies the rest;
    ``cos``/``sin`` broadcast against ``x[..., :R]`` through zero strides (nothing is
    materialised). ``out`` may be ``x`` (in place) or any array of the result's shape that
    meets no input's memory (``_dispatch`` sends other outputs through a temporary,
    ``_memory``'s rule; this adapter declines them). Inputs whose leading axes do not merge to
    at most four strided axes are declined (``Unsupported``).
    """
    return _apply_rope(x, cos, sin, layout=layout, inverse=inverse, out=out, storage=None)


def _check_rotary(x, cos, sin, storage, op, names=("cos", "sin")):
    """Kinds, dtypes and widths shared by the apply kernels; the kernel's dtype name."""
    for name, a in (("x", x), (names[0], cos), (names[1], sin)):
        _check_array(a, name)
        if a.ndim < 1:
            raise ValueError(f"{name} must have at least one axis, got a 0-d array")
    dname = storage or _check_dtype(op, x.dtype, "x.dtype")
    if cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise TypeError(f"{names[0]} and {names[1]} must have x's dtype {x.dtype} for the CUDA "
                        f"kernel, got {cos.dtype} and {sin.dtype}")
    if sin.shape[-1] != cos.shape[-1]:
        raise ValueError(f"{names[1]}'s last axis must equal {names[0]}'s ({cos.shape[-1]}), "
                         f"got {sin.shape[-1]}")
    for name, a in ((names[0], cos), (names[1], sin)):
        _check_device(a, name, x.device)
    return dname


def _prepare_out(x, out, shape, inputs):
    """``out`` checked (or allocated) and whether it is ``x`` itself. An ``out`` that meets an
    input otherwise is declined (a launch would read what other threads wrote)."""
    cp = _cp()
    if out is None:
        return cp.empty(shape, dtype=x.dtype), False
    _check_array(out, "out")
    _check_device(out, "out", x.device)
    if out.shape != shape or out.dtype != x.dtype:
        raise ValueError(f"out must be a {x.dtype} array of shape {shape}, got "
                         f"{out.dtype} {out.shape}")
    if any(s == 0 and n > 1 for s, n in zip(out.strides, out.shape)):
        raise ValueError(f"out must not be broadcast (zero strides {out.strides})")
    in_place = _same_view(out, x)
    others = inputs if in_place else (x,) + tuple(inputs)
    if any(_memory.overlap(out, a) != "none" for a in others):
        raise Unsupported("out overlaps an input other than x itself")
    return out, in_place


def _apply_rope(x, cos, sin, *, layout, inverse, out, storage):
    """The kernel launch; ``storage`` names the element type when the arrays hold raw bits
    (bfloat16 from torch arrives as int16 views)."""
    with x.device:
        out, launch = _apply_plan(x, cos, sin, layout=layout, inverse=inverse, out=out,
                                  storage=storage)
        if launch is not None:
            launch()
    return out


def _apply_plan(x, cos, sin, *, layout, inverse, out, storage):
    """``(out, launch)``: every check of an ``apply_rope`` launch made and its kernel built,
    ``launch()`` (None: nothing to do) left to run, so that ``apply_rope_qk`` declines before
    either of its launches writes anything. Under ``x``'s device."""
    dname = _check_rotary(x, cos, sin, storage, "apply_rope")
    code = _choice(layout, "layout", _ROPE_LAYOUTS)
    d, r = x.shape[-1], cos.shape[-1]
    if r % 2 or r > d:
        raise ValueError(f"the rotary width cos.shape[-1] must be even and <= x.shape[-1] = {d},"
                         f" got {r}")
    try:
        lead = tuple(np.broadcast_shapes(x.shape[:-1], cos.shape[:-1], sin.shape[:-1]))
    except ValueError:
        raise ValueError(f"cos {cos.shape} and sin {sin.shape} do not broadcast against "
                         f"x[..., :{r}] {x.shape[:-1] + (r,)}") from None
    out, in_place = _prepare_out(x, out, lead + (d,), (cos, sin))
    rows, half_rot = math.prod(lead), r // 2
    copy_cols = 0 if in_place else d - r
    if rows == 0 or half_rot + copy_cols == 0:
        return out, None
    arrays = (x, out, cos, sin)
    n, strides, index = _row_geometry(lead, tuple(zip(("x", "out", "cos", "sin"), arrays)), d)
    vec = _vector_pairs(arrays, strides, half_rot, code)
    args = [x, out, cos, sin, np.int64(rows), np.int64(n[1]), np.int64(n[2]),
            np.int64(n[3]), *strides, np.int32(half_rot), np.int32(copy_cols),
            np.int32(code), np.int32(1 if inverse else 0), np.int32(vec)]
    rotated = half_rot // 2 if vec else half_rot
    fn = _kernel(kernel_name("apply_rope", dname, index))
    return out, lambda: _launch(fn, rows, rotated + copy_cols, args)


_VECTOR_PAIRS = True  # the kernels' two-pairs-per-thread path where alignment allows


def _vector_pairs(arrays, strides, half_rot: int, layout_code: int) -> bool:
    """Whether ``apply_rope`` may take two pairs per thread with aligned vector loads: every
    feature stride 1, an even number of pairs, and every pack start (base pointer plus any
    row offset, plus ``half_rot`` in the half layout) aligned to the pack's load width."""
    if not _VECTOR_PAIRS or half_rot % 2:
        return False
    item = arrays[0].dtype.itemsize
    per_pack = 2 if layout_code == 0 else 4
    align = min(per_pack * item, 16)
    step = align // item  # elements
    for a, st in zip(arrays, strides):
        row = [int(st[f][0]) for f in _STRIDES_FIELDS[:4]]
        if int(st["f"][0]) != 1 or a.data.ptr % align or any(r % step for r in row):
            return False
    return True


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_cached`` (ONNX RotaryEmbedding) for CuPy arrays: half-width
    caches ``(max_positions, R/2)`` of ``x``'s dtype gathered at integer ``position_ids``
    (broadcasting against ``x.shape[:-1]``) inside the kernel; features ``R:`` pass through.
    Ids outside ``[0, max_positions)`` are clamped in the kernel (the public function has
    rejected them); float16/bfloat16 compute in float32 and round once."""
    return _apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout=layout,
                              inverse=inverse, out=out, storage=None)


def _apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, out, storage):
    cp = _cp()
    dname = _check_rotary(x, cos_cache, sin_cache, storage, "apply_rope_cached",
                          ("cos_cache", "sin_cache"))
    _check_array(position_ids, "position_ids")
    _check_device(position_ids, "position_ids", x.device)
    if position_ids.dtype.kind not in "iu":
        raise TypeError(f"position_ids must be an integer array, got {position_ids.dtype}")
    code = _choice(layout, "layout", _ROPE_LAYOUTS)
    if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape or 0 in cos_cache.shape:
        raise ValueError(f"cos_cache and sin_cache must have one shape (max_positions, R/2), "
                         f"both > 0, got {cos_cache.shape} and {sin_cache.shape}")
    d, half_rot = x.shape[-1], cos_cache.shape[1]
    if 2 * half_rot > d:
        raise ValueError(f"2 * cos_cache.shape[1] = {2 * half_rot} is wider than x "
                         f"(x.shape[-1] = {d})")
    lead = tuple(x.shape[:-1])
    if tuple(np.broadcast_shapes(position_ids.shape, lead)) != lead:
        raise ValueError(f"position_ids of shape {position_ids.shape} do not broadcast to "
                         f"x.shape[:-1] = {lead}")
    with x.device:
        out, in_place = _prepare_out(x, out, tuple(x.shape),
                                     (cos_cache, sin_cache, position_ids))
        rows = math.prod(lead)
        copy_cols = 0 if in_place else d - 2 * half_rot
        if rows == 0 or half_rot + copy_cols == 0:
            return out
        ids = cp.asarray(position_ids, dtype=cp.int64)  # a device cast where needed
        n, strides, index = _row_geometry(
            lead, (("x", x), ("out", out), ("position_ids", ids)), d)
        cache, index = _cache_strides(cos_cache, sin_cache, index)
        vec = (_vector_pairs((x, out), strides[:2], half_rot, code)
               and _cache_packs(cos_cache, sin_cache, cache))
        args = [x, out, cos_cache, sin_cache, ids, np.int64(rows), np.int64(n[1]),
                np.int64(n[2]), np.int64(n[3]), *strides, *cache,
                np.int64(cos_cache.shape[0]), np.int32(half_rot), np.int32(copy_cols),
                np.int32(code), np.int32(1 if inverse else 0), np.int32(vec)]
        rotated = half_rot // 2 if vec else half_rot
        _launch(kernel_name("apply_rope_cached", dname, index), rows, rotated + copy_cols,
                args)
    return out


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
    return [np.int64(s) for s in strides], (index if reach < _INT_OFFSETS_BELOW else "long long")


def _cache_packs(cos_cache, sin_cache, strides) -> bool:
    """Whether the caches can be read two columns at a time: column strides 1, every row
    start aligned to two elements (``strides``: row and column strides of both caches)."""
    align = 2 * cos_cache.dtype.itemsize
    cr, cc, sr, sc = (int(v) for v in strides)
    return (cc == 1 and sc == 1 and cr % 2 == 0 and sr % 2 == 0
            and cos_cache.data.ptr % align == 0 and sin_cache.data.ptr % align == 0)


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_qk``: ``(apply_rope(q, cos, sin), apply_rope(k, cos, sin))``,
    two launches on the current stream; ``k`` may have fewer heads (``cos``/``sin`` broadcast
    to both); ``out`` None or a ``(q_out, k_out)`` pair (each may be None)."""
    q_out, k_out = (None, None) if out is None else _pair(out, ("q_out", "k_out"))
    return _apply_pair(q, k, cos, sin, cos, sin, layout=layout, inverse=inverse, q_out=q_out,
                      k_out=k_out, storage=(None, None))


def _apply_pair(q, k, cq, sq, ck, sk, *, layout, inverse, q_out, k_out, storage):
    """Both launches of ``apply_rope_qk`` (tables ``cq, sq`` for ``q``, ``ck, sk`` for ``k``),
    both planned before either runs: a refusal (``Unsupported``) comes before anything is
    written, so the generic code that then serves the call reads ``q`` as it was. Outputs that
    meet the other tensor or each other are refused (each launch sees its own arrays only)."""
    if (q_out is not None and _memory.meets(q_out, (k, k_out))) or (
            k_out is not None and _memory.meets(k_out, (q,))):
        raise Unsupported("an output of apply_rope_qk meets the other tensor or output")
    with q.device:
        q_out, launch_q = _apply_plan(q, cq, sq, layout=layout, inverse=inverse, out=q_out,
                                      storage=storage[0])
        k_out, launch_k = _apply_plan(k, ck, sk, layout=layout, inverse=inverse, out=k_out,
                                      storage=storage[1])
        for launch in (launch_q, launch_k):
            if launch is not None:
                launch()
    return q_out, k_out


# ------------------------------------------------------------------------------------------
# ALiBi


def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    """Twin of ``_xp.alibi_bias`` for CuPy slopes: ``(heads, query_len, key_len)``.

    Computed in float64 from the slopes and rounded once to ``dtype`` (float16/32/64).
    """
    _check_array(slopes, "slopes")
    dname = _check_dtype("alibi_bias", dtype)
    if slopes.ndim != 1:
        raise ValueError(f"slopes must be 1-D (heads,), got shape {slopes.shape}")
    q = _nonneg_int(query_len, "query_len")
    k = _nonneg_int(key_len, "key_len")
    with slopes.device:
        out = _cp().empty((slopes.shape[0], q, k), dtype=dname)
    return _alibi_into(slopes, q, k, mode=mode, query_offset=query_offset, out=out,
                       storage=dname)


def _alibi_into(slopes, query_len, key_len, *, mode, query_offset, out, storage):
    cp = _cp()
    code = _choice(mode, "mode", _ALIBI_MODES)
    if query_offset is None:
        query_offset = key_len - query_len
    try:
        offset = operator.index(query_offset)
    except TypeError:
        raise TypeError(f"query_offset must be an int, got {type(query_offset).__name__}") \
            from None
    if slopes.dtype.kind not in "iuf":
        raise TypeError(f"slopes must be a real array, got {slopes.dtype}")
    heads = slopes.shape[0]
    with slopes.device as device:
        _check_out(out, "out", (heads, query_len, key_len), storage, device)
        rows = heads * query_len
        if rows == 0 or key_len == 0:
            return out
        s64 = cp.ascontiguousarray(slopes, dtype=cp.float64)
        _launch(kernel_name("alibi_bias", storage), rows, key_len,
                (out, s64, np.int64(heads), np.int64(query_len), np.int64(key_len),
                 np.int64(offset), np.int32(code)))
    return out

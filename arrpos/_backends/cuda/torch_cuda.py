"""Torch CUDA front-end of the CUDA driver: CUDA tensors on the kernels of ``kernels.cu``,
zero-copy through DLPack.

Same function names and signatures as ``_xp``. ``arrpos._dispatch`` sends a torch call here
only when every array argument is a CUDA tensor on one device and CuPy is installed, and
either no tensor requires grad and their memory is really there
(``memory.tensor_memory_known``: not under ``torch.compile``, ``vmap`` or ``grad``, not fake or
a subclass), or the call is a rotation without ``out`` whose tensors require grad or that
torch traces or transforms: that one goes through the custom ops of ``torch_ops``, whose
bodies run these kernels on the real tensors (autograd, fake tensors and vmap are theirs).
Each kernel call:

* allocates outputs with torch (torch's caching allocator, on the tensors' device),
* views every tensor as a CuPy array with ``cupy.from_dlpack`` (no copy) and hands the views
  to the driver (which guards memory and launches),
* launches on torch's *current* stream, wrapped as a ``cupy.cuda.ExternalStream`` (one
  wrapper per device and stream, kept), so the kernels are ordered with the surrounding torch
  work and no synchronisation is added,
* returns torch tensors.

Exports are kept few: an ``out`` that is ``x`` (in place) is exported once, and the tables of
``apply_rope_qk`` once for both launches. No call copies host data or synchronises, so the
calls are legal inside ``torch.cuda.graph`` capture (see docs/gpu.md for the rules).

bfloat16 tensors cannot become CuPy arrays (CuPy has no bfloat16): they are reinterpreted as
int16 with ``Tensor.view(torch.int16)`` (same bits, same strides, still no copy) and the
kernel is told that the storage is bfloat16. Small inputs (positions, frequencies, slopes) are
converted to float64 by torch on the device first.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys

from .. import Unsupported, ops
from ..memory import tensor_has_storage, torch_tracing
from . import driver, tap_blocks

try:
    from .. import torch_ops
except (ImportError, AttributeError):  # a torch without torch.library.custom_op and its kin
    torch_ops = None  # type: ignore[assignment]

__all__ = ["DRIVER", "PER_SIGNATURE", "alibi_bias", "alibi_bias_from_mask",
           "alibi_bias_from_positions", "apply_rope", "apply_rope_cached", "apply_rope_qk",
           "bind", "cache_clear", "conv_positional", "cupy_available", "relative_bias",
           "resample_grid", "rope_cos_sin", "sinusoid_table", "supports", "toeplitz_bias"]

DRIVER = "cuda"
# ``supports`` reads each call's autograd state, trace, devices and build state
PER_SIGNATURE = False
_OPS = {name: ops.OPS[name] for name in ops.served_by(DRIVER)}
_CUPY_FOUND: bool | None = None


def cupy_available() -> bool:
    """Whether CuPy is installed (found without importing it)."""
    global _CUPY_FOUND
    if _CUPY_FOUND is None:
        _CUPY_FOUND = importlib.util.find_spec("cupy") is not None
    return _CUPY_FOUND


def _torch():
    return sys.modules["torch"]  # a torch tensor is here, so torch is imported


def _name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]  # torch.bfloat16 -> "bfloat16"


def _kernel_dtypes(row):
    names = frozenset(row.dtypes[DRIVER])
    return lambda dtype: dtype if _name(dtype) in names else None


_CODES = {name: _kernel_dtypes(row) for name, row in _OPS.items()}


def _integer(dtype) -> bool:
    return _name(dtype).startswith(("int", "uint"))


def _through_op(*tensors) -> bool:
    """Whether a rotation of these tensors (without ``out``) takes the custom op: autograd
    records it, or torch traces or transforms it."""
    return torch_tracing() or any(t.requires_grad for t in tensors)


def supports(op: str, arrays=(), **options) -> bool:
    """CUDA tensors on one device of the op table's dtypes for the CUDA kernels, on a device
    whose kernels did not fail to build: none requiring grad, or, for a rotation without
    ``out``, through its custom op."""
    row = _OPS.get(op)
    arrs = [a for a in arrays if a is not None]
    if row is None or not arrs or options.get("axes") is not None:
        return False  # without the arrays, device and autograd are unknown: generic path
    torch = _torch()
    if not all(isinstance(t, torch.Tensor) and t.is_cuda for t in arrs):
        return False
    if _through_op(*arrs):
        if (torch_ops is None or op not in torch_ops.ROTATIONS
                or options.get("out") is not None):
            return False
        if not torch_tracing() and not all(tensor_has_storage(t) for t in arrs):
            return False  # subclasses: the generic path
    elif not all(_servable(t) for t in arrs):
        return False  # neg/conj bit views (memory holds the other sign), fakes
    if len({t.device for t in arrs}) > 1 or not row.fits(arrays, options, _CODES[op],
                                                         _integer, False):
        return False
    return cupy_available() and driver.module_failure(arrs[0].device.index) is None


def _servable(t) -> bool:
    return not t.is_neg() and not t.is_conj() and tensor_has_storage(t)


def bind(op, arrays, **options):
    """None: every call is decided afresh (autograd state, traces, devices)."""
    return None


def cache_clear() -> None:
    """Nothing to free: compiled kernels and stream wrappers stay for the process."""


_STREAMS: dict[tuple[int, int], object] = {}  # (device index, stream pointer) -> ExternalStream


@contextlib.contextmanager
def _on_torch_stream(device):
    """CuPy's current device and stream set to torch's current ones for ``device``."""
    cp = driver.cp()
    torch = _torch()
    ptr = torch.cuda.current_stream(device).cuda_stream
    stream = _STREAMS.get((device.index, ptr))
    if stream is None:
        try:
            stream = cp.cuda.ExternalStream(ptr, device.index)
        except TypeError:  # CuPy < 13: no device_id argument
            stream = cp.cuda.ExternalStream(ptr)
        if len(_STREAMS) > 64:  # streams come and go; keep the table small
            _STREAMS.clear()
        _STREAMS[(device.index, ptr)] = stream
    with cp.cuda.Device(device.index), stream:
        yield


def _as_cupy(t):
    """A zero-copy CuPy view of a CUDA tensor; bfloat16 as its int16 bits."""
    torch = _torch()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return driver.cp().from_dlpack(t)


def _float64(t):
    """Positions, frequencies or slopes as float64 on their device (a device cast)."""
    return t.to(dtype=_torch().float64).contiguous()


def _mark_written(t) -> None:
    """Tell autograd that a tensor's memory was written outside torch (in-place semantics)."""
    bump = getattr(getattr(_torch().autograd, "graph", None), "increment_version", None)
    if bump is not None:
        bump(t)


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table`` for a CUDA ``positions`` tensor (float32/float64)."""
    torch = _torch()
    device = positions.device
    given = out is not None
    if out is None:
        out = torch.empty(tuple(positions.shape) + (int(width),), dtype=dtype, device=device)
    with _on_torch_stream(device):
        driver.sinusoid_table(_as_cupy(_float64(positions)), hi, lo, _as_cupy(out), layout,
                              width, _name(dtype))
    if given:
        _mark_written(out)
    return out


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin`` for CUDA tensors; multimodal ``axes`` take ``_xp``."""
    torch = _torch()
    device = positions.device
    freq = _float64(inv_freq)
    shape = tuple(positions.shape) + (2 * int(freq.shape[0]),)
    given = out is not None
    if out is None:
        out = (torch.empty(shape, dtype=dtype, device=device),
               torch.empty(shape, dtype=dtype, device=device))
    cos, sin = out
    with _on_torch_stream(device):
        driver.rope_cos_sin(_as_cupy(_float64(positions)), _as_cupy(freq), _as_cupy(cos),
                            _as_cupy(sin), layout, float(attention_factor), _name(dtype))
    if given:
        _mark_written(cos)
        _mark_written(sin)
    return cos, sin


def _rotation_out(x, lead, out):
    """``(out, whether it was given)``: a new tensor of ``lead + x.shape[-1:]`` when None."""
    torch = _torch()
    given = out is not None
    if out is None:
        out = torch.empty(lead + (x.shape[-1],), dtype=x.dtype, device=x.device)
    return out, given


def _export_pair(x, out):
    """CuPy views of ``x`` and ``out``: one export when they are the same tensor."""
    cx = _as_cupy(x)
    return cx, (cx if out is x else _as_cupy(out))


def _lead(x, *tables):
    """The result's leading axes: ``x``'s broadcast with the tables' (refused when they do
    not broadcast: nothing is allocated)."""
    try:
        return tuple(_torch().broadcast_shapes(x.shape[:-1], *(t.shape[:-1] for t in tables)))
    except RuntimeError:
        raise Unsupported("tables that do not broadcast against x") from None


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope`` for CUDA tensors of one dtype (bfloat16 included)."""
    if out is None and _through_op(x, cos, sin):
        return torch_ops.apply_rope(x, cos, sin, layout, inverse)
    return _apply_rope(x, cos, sin, layout, inverse, out)


def _apply_rope(x, cos, sin, layout, inverse, out=None):
    out, given = _rotation_out(x, _lead(x, cos, sin), out)
    with _on_torch_stream(x.device):
        cx, cout = _export_pair(x, out)
        driver.apply_rope(cx, _as_cupy(cos), _as_cupy(sin), cout, layout, inverse,
                          _name(x.dtype))
    if given:
        _mark_written(out)
    return out


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_cached`` for CUDA tensors: caches of ``x``'s dtype (bfloat16
    included), integer ids; the gather happens inside the kernel."""
    if out is None and _through_op(x, cos_cache, sin_cache, position_ids):
        return torch_ops.apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout, inverse)
    return _apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout, inverse, out)


def _apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout, inverse, out=None):
    out, given = _rotation_out(x, tuple(x.shape[:-1]), out)
    with _on_torch_stream(x.device):
        cx, cout = _export_pair(x, out)
        driver.apply_rope_cached(cx, _as_cupy(cos_cache), _as_cupy(sin_cache),
                                 _as_cupy(position_ids), cout, layout, inverse, _name(x.dtype))
    if given:
        _mark_written(out)
    return out


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_qk`` for CUDA tensors: two launches sharing one export of the
    tables, both checked before either runs; ``out`` None or a ``(q_out, k_out)`` pair (each
    may be None)."""
    if out is None and _through_op(q, k, cos, sin):
        return torch_ops.apply_rope_qk(q, k, cos, sin, layout, inverse)
    return _apply_rope_qk(q, k, cos, sin, layout, inverse, out)


def _apply_rope_qk(q, k, cos, sin, layout, inverse, out=None):
    q_out, k_out = (None, None) if out is None else out
    q_out, q_given = _rotation_out(q, _lead(q, cos, sin), q_out)
    k_out, k_given = _rotation_out(k, _lead(k, cos, sin), k_out)
    with _on_torch_stream(q.device):
        ccos, csin = _as_cupy(cos), _as_cupy(sin)
        cq, cq_out = _export_pair(q, q_out)
        ck, ck_out = _export_pair(k, k_out)
        driver.apply_pair(cq, ck, ccos, csin, ccos, csin, cq_out, ck_out, layout, inverse,
                          (_name(q.dtype), _name(k.dtype)))
    for t, given in ((q_out, q_given), (k_out, k_given)):
        if given:
            _mark_written(t)
    return q_out, k_out


_KERNELS = {"apply_rope": _apply_rope, "apply_rope_qk": _apply_rope_qk,
            "apply_rope_cached": _apply_rope_cached}


def _op_kernel(op, args, layout, inverse):
    """The body of ``torch_ops``' op ``op`` for real CUDA tensors (detached): the kernel, or
    ``Unsupported`` for tensors it does not take. The ids are checked here (a device read), as
    ``_dispatch`` does before this driver's kernels, since a traced call is not read there."""
    row = ops.OPS[op]
    arrays = args + (None,) * (len(row.arrays) - len(args))
    if (not all(_servable(a) for a in args) or len({a.device for a in args}) > 1
            or not row.fits(arrays, {}, _CODES[op], _integer, False)
            or driver.module_failure(args[0].device.index) is not None):
        raise Unsupported("tensors the CUDA kernels do not take")
    if op == "apply_rope_cached":
        ids, rows = args[3], args[1].shape[0]
        if ids.numel() and bool(((ids < 0) | (ids >= rows)).any()):
            raise ValueError(f"position_ids must be in [0, {rows})")
    return _KERNELS[op](*args, layout, inverse)


if torch_ops is not None:
    torch_ops.serve("cuda", _op_kernel)


def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    """Twin of ``_xp.alibi_bias`` for a CUDA ``slopes`` tensor (float16/32/64, bfloat16)."""
    torch = _torch()
    device = slopes.device
    out = torch.empty((slopes.shape[0], query_len, key_len), dtype=dtype, device=device)
    with _on_torch_stream(device):
        driver.alibi_bias(_as_cupy(_float64(slopes)), query_len, key_len, _as_cupy(out), mode,
                          query_offset, _name(dtype))
    return out


def alibi_bias_from_positions(slopes, query_positions, key_positions, *, mode, lead, dtype,
                              xp):
    """Twin of ``_xp.alibi_bias_from_positions`` for CUDA tensors (bfloat16 included)."""
    torch = _torch()
    qp, kp = query_positions, key_positions
    ints = not qp.dtype.is_floating_point and not kp.dtype.is_floating_point
    pos = torch.int64 if ints else torch.float64
    lead = tuple(lead)
    out = torch.empty(lead + (slopes.shape[0], qp.shape[-1], kp.shape[-1]), dtype=dtype,
                      device=slopes.device)
    with _on_torch_stream(slopes.device):
        # (converted by torch: CuPy cannot view every integer and float type torch has)
        driver.alibi_bias_from_positions(_as_cupy(_float64(slopes)), _as_cupy(qp.to(pos)),
                                         _as_cupy(kp.to(pos)), _as_cupy(out), mode, lead,
                                         _name(dtype))
    return out


def alibi_bias_from_mask(slopes, attention_mask, *, dtype, xp):
    """Twin of ``_xp.alibi_bias_from_mask`` for CUDA tensors: the mask's cumulative sum by
    torch on the device (its 0/1 values were checked before), the bias by the kernel."""
    torch = _torch()
    b, k = attention_mask.shape
    out = torch.empty((b, slopes.shape[0], 1, k), dtype=dtype, device=slopes.device)
    counts = torch.cumsum(attention_mask, dim=-1, dtype=torch.int64)
    with _on_torch_stream(slopes.device):
        driver.alibi_bias_from_mask(_as_cupy(_float64(slopes)), _as_cupy(counts),
                                    _as_cupy(out), _name(dtype))
    return out


def relative_bias(table, index, *, dtype, xp):
    """Twin of ``_xp.relative_bias`` for CUDA tensors that need no gradient (those take the
    generic code, whose ``take`` autograd records): the table's bits gathered."""
    torch = _torch()
    out = torch.empty((table.shape[1],) + tuple(index.shape), dtype=table.dtype,
                      device=table.device)
    with _on_torch_stream(table.device):
        driver.relative_bias(_as_cupy(table), _as_cupy(index.to(torch.int64)), _as_cupy(out),
                             _name(table.dtype))
    return out


def toeplitz_bias(lines, *, q, k, dtype, xp):
    """Twin of ``_xp.toeplitz_bias`` for CUDA tensors that need no gradient: the gather of its
    ids (made on the device, in range by construction)."""
    torch = _torch()
    dev = lines.device
    ids = (torch.arange(k, dtype=torch.int64, device=dev)[None, :]
           - (torch.arange(q, dtype=torch.int64, device=dev) - (q - 1))[:, None])
    return relative_bias(lines, ids, dtype=dtype, xp=xp)


def conv_positional(x, weight, bias, *, activation, residual, dtype, xp):
    """Twin of ``_xp.conv_positional`` for CUDA tensors that need no gradient (bfloat16
    included): weight and bias converted by torch to the working type (float64 for float64
    ``x``, else float32), ``x`` made contiguous by torch."""
    torch = _torch()
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    w = weight.to(work).contiguous()
    b = None if bias is None else bias.to(work).contiguous()
    with _on_torch_stream(x.device):
        driver.conv_positional(_as_cupy(x.contiguous()), _as_cupy(w),
                               None if b is None else _as_cupy(b), _as_cupy(out), activation,
                               residual, _name(x.dtype))
    return out


def resample_grid(grid, prefix, *, taps, dtype, xp):
    """Twin of ``_xp.resample_grid`` for CUDA tensors that need no gradient (bfloat16
    included): the output allocated by torch, the prefix rows copied and the grid read
    through its strides by the driver on the CuPy views."""
    torch = _torch()
    p = 0 if prefix is None else prefix.shape[-2]
    out = torch.empty(tap_blocks.resample_shape(tuple(grid.shape), taps, p), dtype=grid.dtype,
                      device=grid.device)
    with _on_torch_stream(grid.device):
        driver.resample_grid(_as_cupy(grid), None if prefix is None else _as_cupy(prefix),
                             taps, _as_cupy(out), _name(grid.dtype))
    return out

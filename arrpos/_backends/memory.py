"""What the dispatcher and the front-ends know about an array's memory.

* :func:`tensor_memory_known` (:func:`torch_tracing` once per call, then
  :func:`tensor_has_storage` per tensor): a torch tensor whose memory is really there to be
  read, outside any trace or transform (``torch.compile``, ``torch.func``, dispatch modes):
  not a fake, meta, functorch-wrapped or functionalised tensor, not a tensor subclass. Only
  such tensors may reach a kernel (DLPack) or have their addresses compared.
* :func:`overlap`: whether two arrays' elements share memory, exactly (bounds first, then
  NumPy's solver, also for torch and CuPy arrays, whose addresses it reads without touching
  the memory); :func:`meets`, the same question of one array against several.
* :func:`temporaries` and :func:`through_temporaries`: THE rule for outputs that overlap the
  inputs or each other, applied by ``arrpos._dispatch`` to every call with ``out`` whichever
  implementation serves it (compiled, CUDA or generic), so they all give one answer:

  - an output that is exactly its own input (``out=x``, or the same view of its memory) is
    written in place: every kernel rotates rows in place;
  - an output that meets any other input (the tables, the caches, the ids, the other tensor
    of ``apply_rope_qk``, ``x`` at an offset) is computed into a new array and copied in
    after every result of the call is made: the answer is what it would be had ``out`` been
    memory of its own;
  - two outputs that meet each other are a ``ValueError`` naming ``out``: they cannot both
    hold their results.

The kernels of the drivers an op names in ``guarded_by`` (``ops``) refuse (``Unsupported``,
nothing written) any call of it whose outputs meet an input other than their own ``x`` in
place, or each other; the dispatcher then asks the rule only after such a refusal, so a
call with ``out`` pays no Python-level overlap check on the kernels' path (a decode step).
Other implementations get the rule before they run.
"""
from __future__ import annotations

import sys

import numpy as np

from .ops import OPS

__all__ = ["meets", "overlap", "temporaries", "tensor_has_storage", "tensor_memory_known",
           "through_temporaries", "torch_tracing", "use_bounds"]

# the exact solver's budget per pair; a pair it cannot settle within it counts as overlapping
_MAX_WORK = 1 << 12
# NumPy arrays' byte bounds against several arrays at once, in C (the compiled kernels'
# bounds_meeting, once the host driver is loaded); None: NumPy's may_share_memory per pair
_BOUNDS = None


def use_bounds(fn) -> None:
    """Take ``fn(out, arrays) -> bits`` (bit k: ``arrays[k]`` may meet ``out``) for NumPy
    arrays' bounds."""
    global _BOUNDS
    _BOUNDS = fn


_TORCH = None  # (Tensor, Parameter, strided, is_compiling, functorch level, dispatch modes)


def _torch_probes():
    global _TORCH
    if _TORCH is None:
        torch = sys.modules["torch"]
        functorch = getattr(torch._C, "_functorch", None)
        _TORCH = (torch.Tensor, torch.nn.Parameter, torch.strided,
                  getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False),
                  getattr(functorch, "maybe_current_level", lambda: None),
                  getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0))
    return _TORCH


def torch_tracing() -> bool:
    """Whether torch is tracing or transforming the call: ``torch.compile`` (fake tensors,
    and asking them anything is traced too), a ``torch.func`` transform (``vmap``, ``grad``,
    ``jacrev``, ``functionalize``: wrapped tensors) or a dispatch mode (``FakeTensorMode``,
    ``make_fx``, a FLOP counter) that must see every operation. A kernel reached through
    DLPack would be invisible to each. Callers ask once per call, first."""
    _, _, _, compiling, level, modes = _TORCH or _torch_probes()
    return compiling() or level() is not None or modes() > 0


def tensor_has_storage(t) -> bool:
    """Whether torch tensor ``t`` (outside a trace: ``torch_tracing``) holds memory that may be
    read at its address: a plain strided tensor (``Parameter`` included, no subclass, not on
    the meta device) whose data pointer exists (a fake or functorch-wrapped tensor's raises; a
    functionalised one's is null, also once it has left ``functionalize``)."""
    tensor, parameter, strided = (_TORCH or _torch_probes())[:3]
    cls = type(t)
    if (cls is not tensor and cls is not parameter) or t.layout is not strided or t.is_meta:
        return False
    try:
        return t.data_ptr() != 0
    except RuntimeError:
        return False


def tensor_memory_known(t) -> bool:
    """``tensor_has_storage`` outside a trace."""
    return not torch_tracing() and tensor_has_storage(t)


class _Ghost:
    """An array interface at another library's address (a torch tensor, a CuPy array) for
    NumPy's overlap solver, which reads the addresses and never the memory."""

    __slots__ = ("__array_interface__",)

    def __init__(self, ptr, shape, strides, itemsize):
        self.__array_interface__ = {"data": (ptr, False), "shape": tuple(shape),
                                    "strides": tuple(strides), "typestr": f"|V{itemsize}",
                                    "version": 3}


def _layout(a):
    """``(where, address, shape, byte strides, itemsize)`` of a torch or CuPy array's elements
    (``where``: the memory space, a device), or None: no inspectable memory (Dask, JAX, fake or
    traced tensors) or no elements."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if not tensor_memory_known(a) or a.numel() == 0:
            return None
        item = a.element_size()
        return ("torch", a.device), a.data_ptr(), tuple(a.shape), \
            tuple(s * item for s in a.stride()), item
    ptr = getattr(getattr(a, "data", None), "ptr", None)  # CuPy
    if isinstance(ptr, int) and getattr(a, "size", 0):
        dev = getattr(getattr(a, "device", None), "id", None)
        return ("cupy", dev), ptr, tuple(a.shape), tuple(a.strides), a.itemsize
    return None


def _span(lay):
    lo = hi = lay[1]
    for n, s in zip(lay[2], lay[3]):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + lay[4]


def _same_view(a, b) -> bool:
    if a.dtype.itemsize != b.dtype.itemsize or a.shape != b.shape:
        return False
    if a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
        return False
    return all(n <= 1 or s == t for n, s, t in zip(a.shape, a.strides, b.strides))


def overlap(a, b) -> str:
    """``"same"``: ``a`` and ``b`` are one view of one memory; ``"partial"``: some element of
    one shares memory with the other otherwise (or the solver could not rule it out);
    ``"none"``: no element does, or the arrays have no memory to compare (lazy, traced)."""
    if a is b:
        return "same"
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if not np.may_share_memory(a, b):  # bounds, decided in C
            return "none"
    else:
        la, lb = _layout(a), _layout(b)
        if la is None or lb is None or la[0] != lb[0]:
            return "none"
        (alo, ahi), (blo, bhi) = _span(la), _span(lb)
        if ahi <= blo or bhi <= alo:
            return "none"
        a, b = (np.asarray(_Ghost(*lay[1:])) for lay in (la, lb))
    if _same_view(a, b):
        return "same"
    try:
        meet = np.shares_memory(a, b, max_work=_MAX_WORK)  # type: ignore[arg-type]
        return "partial" if meet else "none"
    except np.exceptions.TooHardError:
        return "partial"


def meets(a, arrays) -> bool:
    """Whether ``a`` shares memory with any of ``arrays`` (None entries: never), exactly; ``a``
    itself among them counts. NumPy arrays are screened by their bounds in one call."""
    if _BOUNDS is not None and type(a) is np.ndarray:
        bits = _BOUNDS(a, arrays)
        if not bits:
            return False
        return any(bits >> k & 1 and overlap(a, b) != "none" for k, b in enumerate(arrays))
    return any(b is not None and overlap(a, b) != "none" for b in arrays)


def _needs_memory_of_its_own(o, inputs, own) -> bool:
    """Whether output ``o`` meets an input other than ``inputs[own]`` being ``o`` exactly."""
    if _BOUNDS is not None and type(o) is np.ndarray:
        bits = _BOUNDS(o, inputs)
        if not bits:
            return False
    else:
        bits = -1
    for j, a in enumerate(inputs):
        if a is None or not bits >> j & 1 or (j == own and a is o):
            continue
        rel = overlap(o, a)
        if rel == "partial" or (rel == "same" and j != own):
            return True
    return False


def temporaries(op, args, out):
    """For a call ``op(*args, out=out)``: None when every output may be written directly, else
    one bool per output, whether it must be made in a temporary (see the module docstring).
    Raises ValueError when two outputs overlap."""
    row = OPS.get(op)  # its inputs (``args``) and the input each output may replace
    if row is None or out is None or not row.outputs:
        return None
    own = row.owns
    inputs = args[:len(row.args)]
    if len(own) == 1:
        return (True,) if _needs_memory_of_its_own(out, inputs, own[0]) else None
    o0, o1 = out
    if o0 is not None and o1 is not None and meets(o0, (o1,)):
        raise ValueError("out[0] and out[1] share memory; each output needs memory of its "
                         "own (pass None for one of them to get a new array)")
    need = (o0 is not None and _needs_memory_of_its_own(o0, inputs, own[0]),
            o1 is not None and _needs_memory_of_its_own(o1, inputs, own[1]))
    if not (need[0] or need[1]):
        return None
    return (True, True) if own[0] is None else need  # tables: twins take both outputs or none


def through_temporaries(need, arrays, kwargs, call):
    """``call(arrays, kwargs)`` with each output that ``need`` marks replaced by None (a new
    array), then those results copied into the given outputs, once every result is made (so no
    copy overwrites an input a later rotation reads). Returns what the op returns with the
    given outputs in place of the new arrays."""
    out = kwargs["out"]
    pair = len(need) == 2
    outs = tuple(out) if pair else (out,)
    fresh = tuple(None if n else o for o, n in zip(outs, need))
    k = len(outs)
    if len(arrays) >= k and all(a is o for a, o in zip(arrays[-k:], outs)):  # outputs listed last
        arrays = tuple(arrays[:-k]) + fresh
    new_out = (None if all(need) else fresh) if pair else None
    got = call(arrays, dict(kwargs, out=new_out))
    got = tuple(got) if pair else (got,)
    for o, r, n in zip(outs, got, need):
        if n:
            o[...] = r
    res = tuple(r if o is None else o for o, r in zip(outs, got))
    return res if pair else res[0]

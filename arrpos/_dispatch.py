"""The one place that knows which implementations exist and chooses between them.

A table maps each array library (its namespace kind) to the front-end modules that may serve
its arrays, in the order they are tried; the generic Array API code (``_backends._xp``) serves
everything they decline. A front-end sits on a kernel driver (``host``: the compiled CPU
kernels, ``cuda``: the CUDA kernels, ``dask``: graphs whose tasks dispatch per chunk), and the
op table (``_backends.ops``) says which ops each driver has, which arrays a call decides on,
which drivers guard an op's outputs and which validate its ids. Every front-end has the same
interface (:class:`FrontEnd`): its driver, whether its answers hold per signature, the op
functions with ``_xp``'s names and signatures, ``supports``, ``bind`` and ``cache_clear``. A
front-end that discovers a "no" only while preparing a call raises ``Unsupported``; the
dispatcher then tries the next one. Front-ends never fall back by themselves.

Two ways in: :func:`plan` decides how every call of one op with one signature (the types,
shapes, dtypes and devices of its arrays, and its options) is served, as a :class:`Plan` for
the caller to memoise; :func:`call` makes a call, along such a plan or deciding now.

``ARRPOS_NO_EXTENSIONS=1`` (read once, at import) forces ``_xp`` everywhere; graph front-ends,
which compile nothing (Dask: one task per chunk), stay, and their tasks then run ``_xp`` on
each chunk. No device copy is ever hidden here: a GPU array is never routed through NumPy.

Outputs (``out``) that overlap the inputs or each other follow one rule for every
implementation (``_backends.memory``), applied here: before an implementation runs, or, for a
driver that guards the op (the op table's ``guarded_by``: it refuses such outputs, writing
nothing), after it refuses.

Adding a front-end onto existing kernels: one module in ``_backends/<driver>/`` plus one row
in ``FRONT_ENDS``. Adding an op: one row in ``_backends.ops`` plus its functions.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from . import _backends
from ._backends import Unsupported, _xp, memory
from ._backends.ops import OPS
from ._lib import backend_name, trace_constant

__all__ = ["FRONT_ENDS", "FrontEnd", "Plan", "Unsupported", "call", "candidates",
           "clear_caches", "compiled_available", "compiled_threads", "driver",
           "extensions_disabled", "front_end", "front_end_status", "plan"]

# namespace kind (``_lib.backend_name``) -> front-ends (modules of ``arrpos._backends``), in order
FRONT_ENDS: dict[str, tuple[str, ...]] = {
    "numpy": ("host.numpy",),
    "torch": ("cuda.torch_cuda", "host.torch_cpu"),
    "cupy": ("cuda.cupy",),
    "dask": ("dask.graph",),
}
# the kernel drivers whose state the package reports (``compiled_*``, ``arrpos info``)
_DRIVERS = {"host": "host.driver", "cuda": "cuda.driver"}
_ALL = tuple(n for names in FRONT_ENDS.values() for n in names)
# front-ends that only build task graphs dispatching per chunk: ARRPOS_NO_EXTENSIONS leaves them
_GRAPHS = frozenset({"dask.graph"})

# the choice must not change between two calls of one program
_DISABLED = os.environ.get("ARRPOS_NO_EXTENSIONS", "") not in ("", "0")
_LOADED: dict[str, Any] = {}  # module name -> module, or the ImportError text
_BY_KIND: dict[int, tuple] = {}  # id(xp) -> front-ends that imported


class FrontEnd(Protocol):
    """What every front-end module defines (besides its ops, with ``_xp``'s signatures)."""

    DRIVER: str  # "host", "cuda" or "dask": its row of the op table
    PER_SIGNATURE: bool  # ``supports`` reads types, dtypes and options only

    def supports(self, op: str, arrays: tuple, **options: Any) -> bool: ...

    def bind(self, op: str, arrays: tuple, **options: Any) -> Callable | None: ...

    def cache_clear(self) -> None: ...


class Plan(NamedTuple):
    """How every call of one op with one signature is served (:func:`plan`)."""

    fn: Callable | None  # the implementation; None: a front-end tried decides on each call
    validates: bool  # ``fn`` checks the op's values itself (ids: a kernel reads them)
    bound: Callable | None  # the op for this signature alone: f(*args, out), or None
    guards: bool  # ``fn`` refuses outputs that meet its inputs (``memory``'s rule after)
    module: Any  # the module that serves these arguments now (tests, benchmarks, docs)


def extensions_disabled() -> bool:
    """Whether ``ARRPOS_NO_EXTENSIONS`` was set (to anything but 0) when arrpos was imported."""
    return _DISABLED


@trace_constant  # a front-end first met under torch.compile is imported, not traced
def _import(name: str) -> str:
    """Import ``arrpos._backends.<name>`` once: "" when it imported, else why not
    (remembered)."""
    if name not in _LOADED:
        try:
            _LOADED[name] = importlib.import_module(f"arrpos._backends.{name}")
        except ImportError as exc:  # not built, or its library is missing: the generic path
            _LOADED[name] = f"{type(exc).__name__}: {exc}"
    mod = _LOADED[name]
    return mod if isinstance(mod, str) else ""


def _load(name: str):
    """The module ``arrpos._backends.<name>``, or None when it cannot be imported (remembered
    why)."""
    if _import(name):
        return None
    mod = _backends  # (attributes: what torch.compile reads live, unlike sys.modules)
    for part in name.split("."):
        mod = getattr(mod, part)
    return mod


def front_end(name: str):
    """The front-end ``name`` (e.g. ``"host.numpy"``) if it imports and is enabled, else None."""
    return None if _DISABLED and name not in _GRAPHS else _load(name)


def driver(name: str):
    """The kernel driver ``name`` (``"host"`` or ``"cuda"``) if it imports and is enabled,
    else None."""
    return None if _DISABLED else _load(_DRIVERS[name])


def candidates(xp) -> tuple:
    """The front-ends that may serve arrays of namespace ``xp``, in the order tried."""
    mods = _BY_KIND.get(id(xp))
    if mods is None:
        names = FRONT_ENDS.get(backend_name(xp), ())
        if _DISABLED:
            names = tuple(n for n in names if n in _GRAPHS)
        mods = _BY_KIND[id(xp)] = tuple(m for m in map(_load, names) if m is not None)
    return mods


def plan(op: str, xp, /, arrays=(), **options) -> Plan:
    """How every call of ``op`` with this signature (the types, shapes, dtypes and devices of
    ``arrays``, and ``options``) is served, for callers that memoise it per signature: the
    first front-end whose ``supports`` says yes, else ``_xp``. Where a front-end tried decides
    on each call (``PER_SIGNATURE`` false: autograd state, devices), ``fn`` is None and
    :func:`call` decides each time; ``module`` is then the choice for these arguments now."""
    row = OPS[op]
    per_call = False
    for mod in candidates(xp):
        per_call = per_call or not mod.PER_SIGNATURE
        if mod.supports(op, arrays, **options):
            if per_call:
                return Plan(None, False, None, False, mod)
            validates = mod.DRIVER in row.validated_by
            return Plan(getattr(mod, op), validates,
                        mod.bind(op, arrays, **options) if validates else None,
                        mod.DRIVER in row.guarded_by, mod)
    if per_call:
        return Plan(None, False, None, False, _xp)
    return Plan(getattr(_xp, op), False, None, False, _xp)


def call(op: str, xp, /, *args, arrays=None, plan: Plan | None = None, check=None,
         **options):
    """``op(*args, xp=xp, **options)`` on the first front-end that serves it, else on ``_xp``.

    ``arrays``: the call's array arguments as the op table lists them (``None`` entries for
    absent outputs); by default read from ``args`` and ``out``. ``plan``: a memoised
    :func:`plan` of this signature (None: decide now). ``check``: a function that validates
    the op's values (ids in range), run unless the implementation that serves the call
    validates them itself (a kernel that rejects ids outside the cache while it gathers), so
    a decode step reads its ids once, not twice. A front-end's late ``Unsupported`` falls back
    to the next, then to ``_xp``.
    """
    if plan is None or plan[0] is None or options.get("out") is not None:
        return _along(plan, op, xp, check, args, arrays, options)
    fn, validates = plan[0], plan[1]  # a decode step's path: the plan's function, at once
    if check is not None and not validates:
        check()
    try:
        return fn(*args, xp=xp, **options)
    except Unsupported:  # a late "no" (strides): the generic code
        if check is not None and validates:
            check()
        return getattr(_xp, op)(*args, xp=xp, **options)


def _along(plan, op, xp, check, args, arrays, options):
    """:func:`call`, its arguments packed: deciding now, or along a plan with outputs."""
    if plan is None or plan[0] is None:  # decide now
        return _serve(candidates(xp), op, xp, check or _nothing, args,
                      OPS[op].arrays_of(args, options.get("out")) if arrays is None else arrays,
                      options)
    fn, validates, _, guards, _ = plan
    out = options.get("out")
    if out is not None and not guards and memory.temporaries(op, args, out) is not None:
        return _along(None, op, xp, check, args, arrays, options)  # through temporaries
    if check is not None and not validates:
        check()
    try:
        return fn(*args, xp=xp, **options)
    except Unsupported:
        if out is not None and guards and memory.temporaries(op, args, out) is not None:
            return _along(None, op, xp, check, args, arrays, options)
        if check is not None and validates:
            check()
        return getattr(_xp, op)(*args, xp=xp, **options)


def _serve(mods, op, xp, check, args, arrays, kwargs):
    """The first of ``mods`` that serves the call, else ``_xp``; the ids checked (``check``)
    and the outputs' rule (``memory``) applied before any module that needs them."""
    row = OPS[op]
    apart = kwargs.get("out") is None  # no output that could meet the inputs
    checked = False
    for mod in mods:
        if mod.supports(op, arrays, **kwargs):
            if not apart and mod.DRIVER not in row.guarded_by:
                if (res := _apart(mods, op, xp, check, args, arrays, kwargs)) is not None:
                    return res[0]
                apart = True
            if not checked and mod.DRIVER not in row.validated_by:
                check()
                checked = True
            try:
                return getattr(mod, op)(*args, xp=xp, **kwargs)
            except Unsupported:  # after a guard's refusal, the rule says what the call gets
                if not apart and (res := _apart(mods, op, xp, check, args, arrays,
                                                kwargs)) is not None:
                    return res[0]
                apart = True
                continue
    if not apart and (res := _apart(mods, op, xp, check, args, arrays, kwargs)) is not None:
        return res[0]
    if not checked:
        check()
    return getattr(_xp, op)(*args, xp=xp, **kwargs)


def _apart(mods, op, xp, check, args, arrays, kwargs):
    """None when the call's outputs may be written as given (``memory.temporaries``), else
    ``(result,)`` of the call made through temporaries."""
    need = memory.temporaries(op, args, kwargs["out"])
    if need is None:
        return None
    return (memory.through_temporaries(
        need, arrays, kwargs, lambda arrs, kw: _serve(mods, op, xp, check, args, arrs, kw)),)


def _nothing():
    pass


def clear_caches() -> None:
    """Empty what the loaded front-ends and the host driver keep between calls (their
    ``cache_clear()``: tables of frequencies; compiled-kernel state stays)."""
    for name in (*_ALL, _DRIVERS["host"]):
        mod = _LOADED.get(name)
        if mod is not None and not isinstance(mod, str):
            mod.cache_clear()


def front_end_status() -> dict[str, dict[str, str]]:
    """For ``arrpos info`` and the tests: each kind's front-ends and whether they import.

    Importing a front-end imports its library, so only those already imported, or compiled
    (``host.numpy``), are tried; the others are reported as ``"not loaded"``.
    """
    status: dict[str, dict[str, str]] = {}
    for kind, names in FRONT_ENDS.items():
        row = status[kind] = {}
        for name in names:
            if _DISABLED and name not in _GRAPHS:
                row[name] = "disabled by ARRPOS_NO_EXTENSIONS"
            elif name in _LOADED or name == "host.numpy":
                row[name] = "available" if _load(name) is not None else str(_LOADED[name])
            else:
                row[name] = "not loaded"
    return status


def compiled_available(*, ignore_switch: bool = False) -> tuple[bool, str | None]:
    """Whether the compiled CPU kernels can be used, and why not when they cannot.

    ``ignore_switch``: whether they were built, even if ``ARRPOS_NO_EXTENSIONS`` disables them.
    """
    if _DISABLED and not ignore_switch:
        return False, "disabled by ARRPOS_NO_EXTENSIONS"
    mod = _load(_DRIVERS["host"])
    return mod is not None, (None if mod is not None else str(_LOADED[_DRIVERS["host"]]))


def compiled_threads() -> dict[str, object]:
    """The CPU kernels' threading: built with their thread pool, and the threads a large call
    uses."""
    mod = _load(_DRIVERS["host"])
    if mod is None:
        return {"thread_pool": False, "threads": 1}
    return {"thread_pool": mod.have_threads(), "threads": mod.max_threads()}

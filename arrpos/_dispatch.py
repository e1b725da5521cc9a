"""The one place that knows which implementations exist and chooses between them.

A table maps each array library (its namespace kind) to the adapter modules that may serve its
arrays, in the order they are tried; the generic Array API code (``_backends._xp``) serves
everything the adapters decline. Every adapter exposes the same op functions as ``_xp`` (same
names, same signatures) plus ``supports(op, arrays, **kwargs)``: whether it serves this call.
An adapter that discovers a "no" only while preparing a call raises ``Unsupported``; the
dispatcher then tries the next one. Adapters never fall back by themselves.

``ARRPOS_NO_EXTENSIONS=1`` (read once, at import) forces ``_xp`` everywhere; graph adapters,
which compile nothing (Dask: one task per chunk), stay, and their tasks then run ``_xp`` on each
chunk. No device copy is ever hidden here: a GPU array is never routed through NumPy.

Outputs (``out``) that overlap the inputs or each other follow one rule for every
implementation (``_backends._memory``), applied here: before an implementation runs, or, for
an adapter that guards the op (``GUARDS``: it refuses such outputs, writing nothing), after it
refuses.

An adapter whose ``supports`` answers from the arguments' types, dtypes and options alone sets
``SIGNATURE_SUPPORTS = True``: callers may then memoise its choice per signature (``route``) and
skip the question on later calls (a decode step's microseconds).

Adding a backend: one adapter module in ``_backends/`` plus one row in ``ADAPTERS``.
"""
from __future__ import annotations

import importlib
import os

from ._backends import Unsupported, _memory, _xp
from ._lib import backend_name

__all__ = ["ADAPTERS", "Unsupported", "adapter", "adapter_status", "call",
           "call_checked", "candidates", "clear_caches", "route", "run",
           "choose", "compiled_available", "compiled_threads", "extensions_disabled"]

# namespace kind (``_lib.backend_name``) -> adapter modules of ``arrpos._backends``, tried in order
ADAPTERS: dict[str, tuple[str, ...]] = {
    "numpy": ("_numpy",),
    "torch": ("_torch_cuda", "_torch_cpu"),
    "cupy": ("_cupy",),
    "dask": ("_dask",),
}

# adapters that only build task graphs dispatching per chunk: ARRPOS_NO_EXTENSIONS leaves them on
_GRAPH_ADAPTERS = frozenset({"_dask"})

# the choice must not change between two calls of one program
_DISABLED = os.environ.get("ARRPOS_NO_EXTENSIONS", "") not in ("", "0")
_LOADED: dict[str, object] = {}  # adapter name -> module, or the ImportError text
_BY_KIND: dict[int, tuple] = {}  # id(xp) -> adapter modules that imported


def extensions_disabled() -> bool:
    """Whether ``ARRPOS_NO_EXTENSIONS`` was set (to anything but 0) when arrpos was imported."""
    return _DISABLED


def adapter(name: str):
    """The adapter module ``name`` (e.g. ``"_numpy"``) if it imports and is enabled, else None."""
    return None if _DISABLED and name not in _GRAPH_ADAPTERS else _load(name)


def _load(name: str):
    """The adapter module ``name``, or None when it cannot be imported (remembered why)."""
    if name not in _LOADED:
        try:
            _LOADED[name] = importlib.import_module(f"arrpos._backends.{name}")
        except ImportError as exc:  # not built, or its library is missing: the generic path
            _LOADED[name] = f"{type(exc).__name__}: {exc}"
    mod = _LOADED[name]
    return None if isinstance(mod, str) else mod


def candidates(xp) -> tuple:
    """The adapter modules that may serve arrays of namespace ``xp``, in the order tried."""
    mods = _BY_KIND.get(id(xp))
    if mods is None:
        names = ADAPTERS.get(backend_name(xp), ())
        if _DISABLED:
            names = tuple(n for n in names if n in _GRAPH_ADAPTERS)
        mods = _BY_KIND[id(xp)] = tuple(m for m in map(_load, names) if m is not None)
    return mods


def call(op: str, xp, /, *args, arrays=(), **kwargs):
    """``op(*args, xp=xp, **kwargs)`` on the first adapter that serves it, else on ``_xp``.

    ``arrays`` are the call's array arguments (``None`` allowed, e.g. no ``out``): adapters
    decide on their types, devices, dtypes and memory layouts, and on ``kwargs``.
    """
    return _serve(candidates(xp), op, xp, _nothing, args, arrays, kwargs)


def call_checked(op: str, xp, check, /, *args, arrays=(), **kwargs):
    """``call``, running ``check()`` first unless the module that serves the call validates
    ``op``'s values itself (``op`` in its ``VALIDATES``: a kernel that rejects ids outside
    the cache while it gathers), so a decode step reads its ids once, not twice."""
    return _serve(_BY_KIND.get(id(xp)) or candidates(xp), op, xp, check, args, arrays, kwargs)


def _serve(mods, op, xp, check, args, arrays, kwargs):
    """The first of ``mods`` that serves the call, else ``_xp``; the ids checked (``check``)
    and the outputs' rule (``_memory``) applied before any module that needs them."""
    apart = kwargs.get("out") is None  # no output that could meet the inputs
    checked = False
    for mod in mods:
        if mod.supports(op, arrays, **kwargs):
            if not apart and op not in getattr(mod, "GUARDS", ()):
                if (res := _apart(mods, op, xp, check, args, arrays, kwargs)) is not None:
                    return res[0]
                apart = True
            if not checked and op not in getattr(mod, "VALIDATES", ()):
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
    """None when the call's outputs may be written as given (``_memory.temporaries``), else
    ``(result,)`` of the call made through temporaries."""
    need = _memory.temporaries(op, args, kwargs["out"])
    if need is None:
        return None
    return (_memory.through_temporaries(
        need, arrays, kwargs, lambda arrs, kw: _serve(mods, op, xp, check, args, arrs, kw)),)


def route(op: str, xp, /, arrays=(), **kwargs):
    """How every call of ``op`` with this signature (the types, shapes, dtypes and devices of
    ``arrays``, and ``kwargs``) is served, for callers that memoise it per signature:
    ``(function, validates, bound, guards)``, or None when an adapter tried decides per call
    (e.g. on autograd state) and ``call_checked`` must decide each time. ``validates``: the
    function checks ``op``'s values itself (see ``call_checked``). ``bound``: None, or the
    adapter's ``bind(op, arrays, **kwargs)``, the op for this signature alone as a function of
    its arrays and ``out``, positionally; it validates the values too, and may raise
    ``Unsupported`` late as the function does (the caller then goes on with ``run``).
    ``guards``: the function refuses outputs that meet its inputs (``GUARDS``, ``_memory``)."""
    for mod in candidates(xp):
        if not getattr(mod, "SIGNATURE_SUPPORTS", False):
            return None
        if mod.supports(op, arrays, **kwargs):
            validates = op in getattr(mod, "VALIDATES", ())
            bind = getattr(mod, "bind", None) if validates else None
            return (getattr(mod, op), validates, bind and bind(op, arrays, **kwargs),
                    op in getattr(mod, "GUARDS", ()))
    return getattr(_xp, op), False, None, False


def run(served, op: str, xp, check, /, *args, arrays=(), **kwargs):
    """``call_checked(op, xp, check, ...)`` along ``served``, a memoised ``route`` (None:
    decide now). An adapter's late ``Unsupported`` falls back to ``_xp``; ``check`` may be
    None (nothing to check)."""
    out = kwargs.get("out")
    if served is None or (out is not None and not served[3]
                          and _memory.temporaries(op, args, out) is not None):
        return call_checked(op, xp, check or _nothing, *args, arrays=arrays, **kwargs)
    fn, validates, _, guards = served
    if check is not None and not validates:
        check()
    try:
        return fn(*args, xp=xp, **kwargs)
    except Unsupported:
        if out is not None and guards and _memory.temporaries(op, args, out) is not None:
            return call_checked(op, xp, check or _nothing, *args, arrays=arrays, **kwargs)
        if check is not None and validates:
            check()
        return getattr(_xp, op)(*args, xp=xp, **kwargs)


def _nothing():
    pass


def clear_caches() -> None:
    """Empty what the loaded adapters keep between calls (each adapter's ``cache_clear()``,
    where it has one: tables of frequencies, compiled-kernel state stays)."""
    for mod in list(_LOADED.values()):
        clear = getattr(mod, "cache_clear", None)
        if callable(clear):
            clear()


def choose(op: str, xp, /, arrays=(), **kwargs):
    """The module that ``call`` would try first for these arguments (tests, benchmarks, docs)."""
    for mod in candidates(xp):
        if mod.supports(op, arrays, **kwargs):
            return mod
    return _xp


def adapter_status() -> dict[str, dict[str, str]]:
    """For ``arrpos info`` and the tests: each kind's adapters and whether they import.

    Importing an adapter imports its library, so only those already imported, or compiled
    (``_numpy``), are tried; the others are reported as ``"not loaded"``.
    """
    status: dict[str, dict[str, str]] = {}
    for kind, names in ADAPTERS.items():
        row = status[kind] = {}
        for name in names:
            if _DISABLED and name not in _GRAPH_ADAPTERS:
                row[name] = "disabled by ARRPOS_NO_EXTENSIONS"
            elif name in _LOADED or name == "_numpy":
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
    mod = _load("_numpy")
    return mod is not None, (None if mod is not None else str(_LOADED["_numpy"]))


def compiled_threads() -> dict[str, object]:
    """The CPU kernels' threading: built with their thread pool, and the threads a large call
    uses."""
    mod = _load("_numpy")
    if mod is None:
        return {"thread_pool": False, "threads": 1}
    return {"thread_pool": mod.have_threads(), "threads": mod.max_threads()}

"""Per-signature memos: what argument checks and the dispatcher decide from the arguments'
types, shapes, dtypes, devices and options alone is decided once per signature. A decoder
repeats a handful of signatures on every layer and step; deciding again costs microseconds a
decode-sized kernel call (about one) cannot hide.

An entry point keeps one memo (:func:`new_memo`) and asks it with :func:`recall`: a function
giving the signature of the arguments (``key``) and one making the plan, which validates them
(``make``). Host-side memos of pure functions (tables of frequencies) are
``functools.lru_cache``s made by :func:`host_memo`. :func:`clear_memos` empties both kinds.

Threads (free-threaded Python included): a lookup is one ``dict.get``, safe beside any writer;
every write goes through ``remember`` or ``clear_memos`` under one lock, and nothing here
iterates a memo, so no reader can meet a dictionary changing size under it.
"""
from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = ["LIMIT", "array_key", "clear_memos", "host_memo", "new_memo", "recall", "remember",
           "trace_constant"]

LIMIT = 4096  # signatures kept per memo; past it, plans are made per call

_LOCK = threading.Lock()  # held only to store or clear: a hit takes no lock
_MEMOS: list = []  # every memo made by new_memo, for clear_memos
_HOST_MEMOS: list = []  # the cache_clear of every host_memo, for clear_memos
_NDARRAY = np.ndarray
_F = TypeVar("_F", bound=Callable[..., Any])


def new_memo() -> dict:
    """An empty memo (a dict: look up with ``.get``, store with :func:`remember`) that
    :func:`clear_memos` empties."""
    memo: dict = {}
    with _LOCK:
        _MEMOS.append(memo)
    return memo


def host_memo(maxsize: int) -> Callable[[_F], _F]:
    """``functools.lru_cache(maxsize)`` whose entries :func:`clear_memos` frees too (a memo of
    host values: frequencies, exponents)."""
    def wrap(fn: _F) -> _F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        with _LOCK:
            _HOST_MEMOS.append(cached.cache_clear)
        return cached  # type: ignore[return-value]

    return wrap


def trace_constant(fn: _F) -> _F:
    """Mark ``fn``, a host function whose result depends only on its arguments (numbers and
    immutable option objects), as a constant to ``torch.compile``: the tracer calls it with
    the traced call's arguments and keeps its result instead of tracing its NumPy and Decimal
    arithmetic (which would break the graph, or compute in another library). The mark is
    the attribute ``torch.compiler.assume_constant_result`` sets; torch is not imported."""
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


def clear_memos() -> None:
    """Empty every memo made by :func:`new_memo` and :func:`host_memo` (their entries are made
    again on next use)."""
    with _LOCK:
        for memo in _MEMOS:
            memo.clear()
        clears = list(_HOST_MEMOS)
    for clear in clears:  # (an lru_cache has a lock of its own)
        clear()


def array_key(a):
    """An array's part of a signature (None stays None). Raises AttributeError for objects
    that are not arrays: their call is then checked in full and names them. A NumPy ndarray's
    (not a subclass's) is ``(shape, dtype)``: its type and device go without saying, and a
    decode step builds several keys."""
    if a is None:
        return None
    if type(a) is _NDARRAY:
        return (a.shape, a.dtype)
    return (type(a), a.shape, a.dtype, getattr(a, "device", None))


def recall(plans: dict, key: Callable[..., Any], make: Callable[..., Any], *args: Any) -> Any:
    """The plan of ``args``' signature: the one ``plans`` holds under ``key(*args)``, else
    ``make(*args)``, stored (:func:`remember`). ``make`` validates the arguments (it raises for
    bad ones, and nothing is stored). ``key`` builds the signature from what the checks and the
    dispatch read (``array_key`` of each array, the options, ``type()`` of options where
    ``1 == True`` would alias them); arguments without one (``array_key`` of a non-array raises
    AttributeError, an unhashable option TypeError) get ``make(*args)`` on every call::

        PLANS = new_memo()

        def f(x, /, *, option=...):
            plan = recall(PLANS, _key, _plan, x, option)  # _key(x, option), _plan(x, option)
    """
    try:
        k = key(*args)
        plan = plans.get(k)
    except (AttributeError, TypeError):  # not arrays, or unhashable options: made in full
        k = plan = None
    if plan is None:
        plan = remember(plans, k, make(*args))
    return plan


def _torch_compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def remember(plans: dict, key, plan):
    """Store ``plan`` under ``key`` (None: arguments without a signature, e.g. not arrays or
    unhashable options; nothing stored) while ``plans`` holds fewer than ``LIMIT``; returns
    ``plan`` (:func:`recall` looks up first and calls this on a miss). Two threads missing one
    signature at once each make an equal plan; the last one stays. Nothing is stored while
    ``torch.compile`` traces the call (the compiled graph holds no lookup, and the lock would
    break the graph).
    """
    if key is not None and not _torch_compiling():
        with _LOCK:
            if len(plans) < LIMIT:
                plans[key] = plan
    return plan

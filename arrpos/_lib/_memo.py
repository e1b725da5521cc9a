"""Per-signature memos: what argument checks and the dispatcher decide from the arguments'
types, shapes, dtypes, devices and options alone is decided once per signature. A decoder
repeats a handful of signatures on every layer and step; deciding again costs microseconds a
decode-sized kernel call (about one) cannot hide.

Threads (free-threaded Python included): a lookup is one ``dict.get``, safe beside any writer;
every write goes through ``remember`` or ``clear_memos`` under one lock, and nothing here
iterates a memo, so no reader can meet a dictionary changing size under it.
"""
from __future__ import annotations

import threading

__all__ = ["LIMIT", "array_key", "clear_memos", "new_memo", "remember"]

LIMIT = 4096  # signatures kept per memo; past it, plans are made per call

_LOCK = threading.Lock()  # held only to store or clear: a hit takes no lock
_MEMOS: list = []  # every memo made by new_memo, for clear_memos


def new_memo() -> dict:
    """An empty memo (a dict: look up with ``.get``, store with :func:`remember`) that
    :func:`clear_memos` empties."""
    memo: dict = {}
    with _LOCK:
        _MEMOS.append(memo)
    return memo


def clear_memos() -> None:
    """Empty every memo made by :func:`new_memo` (their plans are made again on next use)."""
    with _LOCK:
        for memo in _MEMOS:
            memo.clear()


def array_key(a):
    """An array's part of a signature (None stays None). Raises AttributeError for objects
    that are not arrays: their call is then checked in full and names them."""
    if a is None:
        return None
    return (type(a), a.shape, a.dtype, getattr(a, "device", None))


def remember(plans: dict, key, plan):
    """Store ``plan`` under ``key`` (None: arguments without a signature, e.g. not arrays or
    unhashable options; nothing stored) while ``plans`` holds fewer than ``LIMIT``; returns
    ``plan``. Callers look a signature up first (inline: a decode step's microseconds) and
    make the plan, validating the arguments, only when it is missing::

        try:
            plan = PLANS.get(key := (array_key(x), ..., options))
        except (AttributeError, TypeError):
            plan = key = None
        if plan is None:
            plan = remember(PLANS, key, make_plan(x, ...))  # raises for bad arguments

    Two threads missing one signature at once each make an equal plan; the last one stays.
    """
    if key is not None:
        with _LOCK:
            if len(plans) < LIMIT:
                plans[key] = plan
    return plan

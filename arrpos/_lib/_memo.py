"""Per-signature memos: what argument checks and the dispatcher decide from the arguments'
types, shapes, dtypes, devices and options alone is decided once per signature. A decoder
repeats a handful of signatures on every layer and step; deciding again costs microseconds a
decode-sized kernel call (about one) cannot hide."""
from __future__ import annotations

__all__ = ["LIMIT", "array_key", "remember"]

LIMIT = 4096  # signatures kept per memo; past it, plans are made per call


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
    """
    if key is not None and len(plans) < LIMIT:
        plans[key] = plan
    return plan

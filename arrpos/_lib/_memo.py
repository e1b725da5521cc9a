"""Per-signature memos: what argument checks and the dispatcher decide from the arguments'
types, shapes, dtypes, devices and options alone is decided once per signature. A decoder
repeats a handful of signatures on every layer and step; deciding again costs microseconds a
decode-sized kernel call (about one) cannot hide."""
from __future__ import annotations

__all__ = ["LIMIT", "array_key", "memoised"]

LIMIT = 4096  # signatures kept per memo; past it, plans are made per call


def array_key(a):
    """An array's part of a signature (None stays None). Raises AttributeError for objects
    that are not arrays: their call is then checked in full and names them."""
    if a is None:
        return None
    return (type(a), a.shape, a.dtype, getattr(a, "device", None))


def memoised(plans: dict, key, make):
    """``plans[key()]``, made by ``make()`` the first time; ``make`` validates (it raises for
    bad arguments, and nothing is stored). ``key()`` raising AttributeError or TypeError (not
    arrays, unhashable options) means no memo: ``make()`` runs on every such call."""
    try:
        k = key()
        plan = plans.get(k)
    except (AttributeError, TypeError):
        return make()
    if plan is None:
        plan = make()
        if len(plans) < LIMIT:
            plans[k] = plan
    return plan

"""RoPE's decode caches: :meth:`RoPE.apply` of integer positions as one fused gather-and-rotate
(:func:`~arrpos._rope.apply.gather_rotate`) from half-width cos/sin tables kept between calls,
and :func:`clear_caches`, which frees every cache arrpos keeps.

A cache (``_Tables``) holds rows 0 .. rows-1 of the exact tables of ``RoPE.cos_sin`` (the very
code of the table path), cut to their first R/2 columns, for one namespace, device, dtype and
(seq-dependent scalings) frequency set. ``rows`` is a power of two >= _MIN_ROWS that grows by
doubling to cover the largest position seen; a cache is never written after it is made (growth
makes a new one).

Ownership: each RoPE holds its caches in its own :class:`DecodeTables` (the decode step's one
lookup), so a dropped RoPE frees them. _SHARED finds, by the RoPE's fields, a cache an equal
RoPE built (layers that each make their own RoPE share one) through weak references, and bounds
memory: at most _MAX_ENTRIES caches live, each at most _MAX_CACHE_BYTES (farther positions take
the table path); the oldest is taken from every RoPE holding it.

Threads (free-threaded Python included): a hit is one dict.get and takes no lock; a build runs
unlocked (threads racing on a miss may each build one: the first stored is used); every write
to _SHARED, _SEEN, a cache's holders or a RoPE's DecodeTables happens under _LOCK, and only
code holding _LOCK iterates them. No weakref callbacks (they run inside any allocation, even one
made under the lock): dead references are pruned under the lock.
"""
from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from .. import _dispatch
from .._lib import (
    array_key,
    array_namespace,
    check_array,
    check_out_memory,
    clear_memos,
    device_of,
    dtype_kind,
    is_lazy,
    new_memo,
    recall,
)
from .apply import gather_rotate, serving
from .checks import check_fit, check_out, heads_axis_from_end
from .frequencies import frequency_key

__all__ = ["DecodePlan", "DecodeTables", "clear_caches", "clear_tables", "decode_step"]

_MIN_ROWS = 1024
_MAX_CACHE_BYTES = 64 << 20
_MAX_ENTRIES = 16
_LOCK = threading.Lock()
_SHARED: dict = {}  # (RoPE fields, sub key) -> weakref to its _Tables, oldest first
_SEEN: set = set()  # seq-dependent frequency keys met once (a cache is built on the second)
_DECODE_PLANS = new_memo()  # signature -> DecodePlan, or False (the table path serves)


class DecodeTables(dict):
    """The caches one RoPE holds (``sub`` key -> ``_Tables``; never pickled, copied or
    compared), and ``fields``, what that RoPE is (the key under which equal RoPEs share)."""

    __slots__ = ("fields", "__weakref__")

    def __init__(self, fields):
        super().__init__()
        self.fields = fields


class _Tables:
    """One half-width cache: ``rows``, ``cos`` and ``sin`` (never written once made), ``sub``
    (its key in the holders' DecodeTables: namespace id, device, dtype, frequency key) and
    ``holders`` (weak references to the DecodeTables holding it)."""

    __slots__ = ("rows", "cos", "sin", "sub", "holders", "__weakref__")

    def __init__(self, rows, cos, sin, sub):
        self.rows, self.cos, self.sin, self.sub, self.holders = rows, cos, sin, sub, []


class DecodePlan:
    """Why :meth:`RoPE.apply` may take the cache path for a signature, and how: the namespace,
    the ``index`` that inserts the heads axis into the ids (None: no heads axis), the device,
    ``sub`` (the cache's key for a scaling that does not read ``seq_len``), ``id_range`` (a
    function giving the smallest and largest id), ``cast`` (None, or the index dtype for
    integer types a kernel or ``min`` may not take) and ``served`` (how the gather-and-rotate
    is served: found on first use, once the tables' types are known)."""

    __slots__ = ("xp", "index", "device", "sub", "id_range", "cast", "served")

    def __init__(self, xp, index, device, sub, id_range, cast):
        self.xp, self.index, self.device, self.sub = xp, index, device, sub
        self.id_range, self.cast, self.served = id_range, cast, None


def _decode_key(rope, x, positions, heads_axis, inverse, out):
    return (array_key(x), array_key(positions), heads_axis, type(heads_axis), array_key(out),
            rope.layout, inverse, rope.rotary_dim)


def _decode_plan(rope, x, positions, heads_axis, inverse, out):
    """:class:`DecodePlan` of a signature, else False (the table path decides, and raises).
    Reads of ``rope`` only its rotary width and layout (part of the memo's key)."""
    try:
        xp = array_namespace(x, positions, out, name="x, positions and out")
        check_array(xp, x, "x", kind="floating")
        check_array(xp, positions, "positions", kind="real")
        check_out(xp, x, out)
        ax = heads_axis_from_end(heads_axis, x)
        if dtype_kind(xp, positions.dtype) != "integral":
            return False
        if check_fit(rope, x, positions, heads_axis, ax):  # leading axes to add: tables
            return False
    except (TypeError, ValueError):
        return False
    dev = device_of(x)
    if (is_lazy(x) or is_lazy(positions) or not math.prod(positions.shape)
            or device_of(positions) != dev):
        return False
    index = None if ax is None else (...,) + (None,) + (slice(None),) * (-ax - 2)
    cast = None
    if positions.dtype not in (xp.int32, xp.int64):  # e.g. torch's uint16..64: no min/max
        cast = xp.__array_namespace_info__().default_dtypes(device=dev)["indexing"]
    return DecodePlan(xp, index, dev, (id(xp), dev, x.dtype, None), _id_range_of(xp, positions),
                      cast)


def decode_step(rope, tables, x, positions, heads_axis, inverse, out, seq_len):
    """:meth:`RoPE.apply` as one gather-and-rotate from the caches ``tables`` of ``rope``, or
    None where the table path serves (and raises): multimodal axes, non-integer, lazy, empty or
    negative positions, anything :meth:`RoPE.apply` would reject, caches past the size limit.
    What depends only on the types, shapes and dtypes is decided once per signature."""
    if rope.axes is not None or type(inverse) is not bool or (
            seq_len is not None and (type(seq_len) is not int or seq_len < 1)):
        return None
    plan = recall(_DECODE_PLANS, _decode_key, _decode_plan, rope, x, positions, heads_axis,
                  inverse, out)
    if not plan:
        return None
    xp = plan.xp
    if plan.cast is not None:
        positions = xp.astype(positions, plan.cast)
    ids = positions if plan.index is None else positions[plan.index]
    if out is not None:
        check_out_memory(out)
    served = plan.served
    seq_dependent = rope.scaling is not None and rope.scaling.seq_dependent
    if served is not None and served.validates and not seq_dependent:
        # a kernel that checks the ids: try the cache as it is before reading the ids here
        hit = tables.get(plan.sub)
        if hit is not None:
            try:
                return gather_rotate(served, xp, None, x, hit.cos, hit.sin, ids, rope.layout,
                                     inverse, out)
            except ValueError:
                pass  # an id past the cache (grown below) or negative (the table path)
    lo, hi = plan.id_range(positions)
    if lo < 0:
        return None
    cache = _cache_for(rope, tables, xp, plan.device, x.dtype, hi, seq_len)
    if cache is None:
        return None
    if served is None:  # the tables' types follow from the signature: served the same from now
        served = plan.served = serving("apply_rope_cached", xp, (x, cache.cos, cache.sin, ids,
                                                                 out),
                                       layout=rope.layout, inverse=inverse, out=out)
    return gather_rotate(served, xp, None, x, cache.cos, cache.sin, ids, rope.layout, inverse,
                         out)


def _id_range_of(xp, pos):
    """A function giving the smallest and largest id of eager, non-empty integer arrays shaped
    like ``pos`` (one element read as is; the arrays' own reductions where they have them,
    cheaper than the namespace's wrappers)."""
    if math.prod(pos.shape) == 1:
        first = (0,) * pos.ndim

        def one(p):
            v = int(p[first])
            return v, v

        return one
    if pos.dtype != xp.int64 and pos.dtype != xp.int32 and not isinstance(pos, np.ndarray):
        wide = xp.int64  # torch reduces few unsigned dtypes (past int64: negative, table path)
        return lambda p: (int(xp.min(xp.astype(p, wide))), int(xp.max(xp.astype(p, wide))))
    if callable(getattr(pos, "min", None)) and callable(getattr(pos, "max", None)):
        return lambda p: (int(p.min()), int(p.max()))
    return lambda p: (int(xp.min(p)), int(xp.max(p)))


def _cache_for(rope, tables, xp, dev, dtype, hi, seq_len):
    """The cache (``_Tables``) of ``rope`` covering ids ``0 .. hi``, or None (table path)."""
    fkey = None
    if rope.scaling is not None and rope.scaling.seq_dependent:
        fkey = frequency_key(rope.rotary_dim, rope.base, rope.scaling,
                             hi + 1 if seq_len is None else seq_len)
    sub = (id(xp), dev, dtype, fkey)
    hit = tables.get(sub)
    if hit is None or hi >= hit.rows:
        hit = _cache_miss(rope, tables, xp, dev, dtype, hi, seq_len, sub)
    return hit


def _cache_miss(rope, tables, xp, dev, dtype, hi, seq_len, sub):
    """An equal RoPE's cache covering ``hi``, else a new one (stored), else None."""
    key = (tables.fields, sub)
    with _LOCK:
        hit = _shared_hit(tables, key, hi)
        if hit is not None:
            return hit
        if sub[3] is not None and key not in _SEEN:  # dynamic NTK: new frequencies every step
            if len(_SEEN) >= 4096:
                _SEEN.clear()
            _SEEN.add(key)
            return None
    made = _build_cache(rope, xp, dev, dtype, hi, seq_len, sub)
    if made is None:
        return None
    with _LOCK:
        hit = _shared_hit(tables, key, hi)  # another thread stored one meanwhile: use it
        if hit is not None:
            return hit
        old = _SHARED.pop(key, None)
        old = None if old is None else old()
        for k in [k for k, ref in _SHARED.items() if ref() is None]:  # died with their RoPEs
            del _SHARED[k]
        while len(_SHARED) >= _MAX_ENTRIES:
            _evict(_SHARED.pop(next(iter(_SHARED)))())
        _SHARED[key] = weakref.ref(made)
        _hold(tables, made)
        if old is not None:  # grown: the equal RoPEs holding the smaller cache take this one
            for ref in old.holders:
                other = ref()
                if other is not None and other.get(sub) is old:
                    _hold(other, made)
    return made


def _shared_hit(tables, key, hi):
    """Under _LOCK: the live cache stored under ``key`` if it covers ``hi`` (``tables`` then
    holds it too), else None."""
    ref = _SHARED.get(key)
    hit = None if ref is None else ref()
    if hit is None or hi >= hit.rows:
        return None
    if tables.get(hit.sub) is not hit:
        _hold(tables, hit)
    return hit


def _hold(tables, cache):
    """Under _LOCK: a RoPE's ``tables`` hold ``cache`` (and the dead holders are forgotten)."""
    cache.holders = [r for r in cache.holders if r() is not None and r() is not tables]
    cache.holders.append(weakref.ref(tables))
    tables[cache.sub] = cache


def _evict(cache):
    """Under _LOCK: every RoPE holding ``cache`` lets it go (its memory is then freed)."""
    if cache is None:
        return
    for ref in cache.holders:
        tables = ref()
        if tables is not None and tables.get(cache.sub) is cache:
            del tables[cache.sub]
    cache.holders = []


def _build_cache(rope, xp, dev, dtype, hi, seq_len, sub):
    """A new ``_Tables`` from the table path, or None when too large."""
    rows = max(_MIN_ROWS, 1 << hi.bit_length())  # a power of two > hi
    half = rope.rotary_dim // 2
    if 2 * rows * half * _itemsize(xp, dtype) > _MAX_CACHE_BYTES:
        return None
    if sub[3] is not None and seq_len is None:
        seq_len = hi + 1  # the seq_len whose frequencies the frequency key holds
    # Rows in an order where no block of 64 follows the one before it: a table kernel may
    # step from one block of consecutive rows to the next, and each row must be the one a
    # lone position gets (the decode step's table path), bit for bit.
    blocks = np.arange(rows).reshape(-1, 64)
    order = np.concatenate([blocks[0::2], blocks[1::2]]).reshape(-1)
    cos, sin = rope.cos_sin(xp.asarray(order, device=dev), dtype=dtype, seq_len=seq_len)
    cut = slice(0, half) if rope.layout == "half" else slice(0, 2 * half, 2)
    back = xp.asarray(np.argsort(order), device=dev)
    return _Tables(rows, xp.take(cos[:, cut], back, axis=0), xp.take(sin[:, cut], back, axis=0),
                   sub)


def _itemsize(xp, dtype):
    """Bytes per element of a floating ``dtype`` (ml_dtypes' bfloat16 included, which the
    namespace's ``finfo`` does not know)."""
    try:
        return xp.finfo(dtype).bits // 8
    except (AttributeError, TypeError, ValueError):
        return np.dtype(dtype).itemsize


def clear_tables(tables):
    """Let go of every cache a RoPE's ``tables`` hold (:meth:`RoPE.clear_cache`)."""
    with _LOCK:
        tables.clear()


def clear_caches() -> None:
    """Free every cache arrpos keeps between calls.

    The decode caches of every :class:`RoPE` (:meth:`RoPE.clear_cache` frees one RoPE's), the
    per-signature plans of :func:`apply_rope`, :func:`apply_rope_qk`,
    :func:`apply_rope_cached` and :meth:`RoPE.apply`, and the host-side frequency memos. All
    are rebuilt on next use; results do not change. Safe to call from any thread at any time.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> rope = arrpos.RoPE(8)
    >>> y = rope.apply(np.ones((1, 2, 8)), np.arange(2), heads_axis=None)  # caches made
    >>> arrpos.clear_caches()
    """
    with _LOCK:
        for ref in list(_SHARED.values()):
            _evict(ref())
        _SHARED.clear()
        _SEEN.clear()
    clear_memos()
    _dispatch.clear_caches()

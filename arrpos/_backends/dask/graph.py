"""The Dask driver and front-end: the ops of the op table as ``blockwise`` graphs whose tasks
dispatch per chunk.

Same function names and signatures as ``_xp``. Each op builds one graph layer (plus explicit
rechunks) with one task per output chunk; a task calls the same op through ``_dispatch.call`` on
its chunks, in the chunks' own namespace, so the compiled kernels run chunk by chunk (and the
generic code where a chunk's kernel declines). Nothing is computed while the graph is built.
``rope_cos_sin`` builds its two layers (cos, sin) task by task; ``conv_positional`` reads the
rows (columns) next to its chunk of a chunked grid axis through Dask's ``overlap``;
``resample_grid`` takes its grid axes whole (an output row reads rows all along them).

Chunking: positions and the leading (row) axes of ``x`` keep their chunks; tables that broadcast
against ``x`` are rechunked to ``x``'s chunks along their non-broadcast axes; axes an op needs
whole (the feature axis, frequencies, caches) are rechunked to one chunk, explicitly, first.
Task functions live at module level, so graphs pickle for ``dask.distributed`` workers.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import warnings

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from dask._task_spec import DataNode, Task, TaskRef
from dask.base import tokenize
from dask.array.core import PerformanceWarning
from dask.highlevelgraph import HighLevelGraph
from dask.layers import ArraySliceDep

from ... import _dispatch
from ..._lib import array_namespace, backend_name, check_index, device_of
from .. import Unsupported, _xp, one_thread_per_call, ops, writing_part_of
from . import canvas as _canvas

__all__ = ["DRIVER", "PER_SIGNATURE", "alibi_bias", "alibi_bias_from_mask",
           "alibi_bias_from_positions", "apply_rope", "apply_rope_cached", "apply_rope_qk", "bind",
           "cache_clear", "conv_positional", "relative_bias", "resample_grid", "rope_cos_sin",
           "sinusoid_table", "supports", "toeplitz_bias"]

DRIVER = "dask"
# ``supports`` reads chunk sizes, which are not in a signature
PER_SIGNATURE = False
_OPS = {name: ops.OPS[name] for name in ops.served_by(DRIVER)}
# chunk libraries served: the task's dispatch finds their kernels. CuPy chunks need only
# "cupy" here once a GPU run has checked them.
_CHUNK_KINDS = ("numpy",)
# blockwise indices (ints, as dask sorts them): 0..ndim-1 are the axes of the reference array
# (positions, x, q); these name the other axes, which are taken whole
_FEATURE, _TABLE, _COORDS, _FREQ, _CACHE_ROW, _K_AXIS = 1000, 1001, 1002, 1003, 1004, 2000
_HEADS, _ROWS, _KH, _KW = 1005, 1006, 1007, 1008
_PREFIX_ROWS, _OUT_ROWS = 1011, 1012
_GRID = 3000  # resample's grid axes: _GRID, _GRID + 1, ... (any number of them)


def _served(a, unknown_ok=False) -> bool:
    """A Dask array whose chunks are of a served library, of known sizes unless ``unknown_ok``."""
    if not isinstance(a, da.Array):
        return False
    if not unknown_ok and any(math.isnan(c) for cs in a.chunks for c in cs):
        return False  # unknown sizes (after boolean indexing) cannot be aligned or rechunked
    return backend_name(array_namespace(a._meta)) in _CHUNK_KINDS


def supports(op, arrays, **options) -> bool:
    """Whether every array argument is a served Dask array (None for an absent ``out``).

    Positions of unknown chunk sizes are served where nothing is aligned to them: tables
    without ``axes`` are computed chunk by chunk, whatever the sizes turn out to be.
    """
    row = _OPS.get(op)
    if row is None or not arrays or arrays[0] is None:
        return False
    unknown_ok = op == "sinusoid_table" or (op == "rope_cos_sin" and options.get("axes") is None)
    if not _served(arrays[0], unknown_ok):
        return False
    for a in arrays[1:]:
        if isinstance(a, tuple):  # an ``out`` pair
            if not all(b is None or _served(b) for b in a):
                return False
        elif a is not None and not _served(a):
            return False
    return _fits(row, arrays)


def bind(op, arrays, **options):
    """None: graphs are built afresh on every call."""
    return None


def cache_clear() -> None:
    """Nothing kept between calls (each chunk's front-end frees its own)."""


def _fits(row, arrays) -> bool:
    """Tables (and position ids) broadcast into the rows of each rotated array, never widen
    them: the outputs keep the rotated arrays' shapes and chunks."""
    rows = [arrays[k].shape[:-1] for k in row.rotated_at]
    if row.ids_at is not None:
        return all(_broadcasts_into(arrays[row.ids_at].shape, r) for r in rows)
    return all(_broadcasts_into(arrays[t].shape[:-1], r) for t in row.tables_at for r in rows)


def _broadcasts_into(small, big) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(small, big[len(big) - len(small):]))


# --- task functions (module level: they pickle by reference) ----------------------------------


def _only(block):
    """The single block of an axis taken whole (blockwise hands contracted blocks in lists)."""
    while isinstance(block, list):
        if len(block) != 1:
            raise AssertionError("an axis taken whole arrived in several chunks")
        block = block[0]
    return block


def _chunk_call(op, args, arrays, opts, out=None, check=None):
    """``op`` on one chunk's arrays, dispatched in their own namespace (kernel or generic),
    into ``out`` (the chunk's canvas regions) when given; ``check(xp)`` validates the chunk's
    values unless the kernel that serves it does (the public layer cannot read lazy values).
    Dask runs one task per core, so the kernel of each runs on one thread."""
    xp = array_namespace(*(a for a in arrays if a is not None))
    with one_thread_per_call():
        if out is None:
            return _dispatch.call(op, xp, *args, arrays=arrays,
                                  check=None if check is None else lambda: check(xp), **opts)
        with writing_part_of(sum(_memory_of(o).nbytes for o in _as_tuple(out))):
            _dispatch.call(op, xp, *args, arrays=arrays, out=out, **opts)
    return out


def _memory_of(view):
    """The array whose memory ``view`` is part of (a canvas region's: the whole canvas)."""
    while isinstance(view.base, np.ndarray):
        view = view.base
    return view


def _regions(canvases, region):
    """The chunk's views of its output canvases (None without canvases, or where they are off:
    the kernel then allocates the chunk)."""
    if canvases is None or not all(c.enabled for c in _as_tuple(canvases)):
        return None
    if isinstance(canvases, tuple):
        return tuple(c.region(r) for c, r in zip(canvases, region))
    return canvases.region(region)


def _as_tuple(a):
    return a if isinstance(a, tuple) else (a,)


def _sinusoid_block(positions, hi, lo, opts, canvas=None, region=None):
    return _chunk_call("sinusoid_table", (positions, hi, lo), (positions,), opts,
                       _regions(canvas, region))


def _rope_table_block(positions, inv_freq, opts, cos_canvas=None, sin_canvas=None,
                      cos_region=None, sin_region=None):
    """Both tables of a chunk; with canvases, returns cos and keeps sin on its canvas for the
    chunk's ``_rope_sin_block`` (one task fewer per chunk than splitting a pair)."""
    positions, inv_freq = _only(positions), _only(inv_freq)
    out = _regions(None if cos_canvas is None else (cos_canvas, sin_canvas),
                   (cos_region, sin_region))
    cos, sin = _chunk_call("rope_cos_sin", (positions, inv_freq), (positions, inv_freq), opts,
                           out)
    if cos_canvas is None:
        return cos, sin
    sin_canvas.keep(sin_region, sin)
    return cos


def _rope_sin_block(cos_block, positions, inv_freq, opts, sin_canvas, region):
    """A chunk of sin: the one its cos task kept when that ran in this process (always, on
    the local schedulers), else computed here (``positions`` may then be the task that makes
    the chunk, run only here)."""
    sin = sin_canvas.take(region)
    if sin is None:
        if isinstance(positions, Task):
            positions = positions()
        positions, inv_freq = _only(positions), _only(inv_freq)
        out = _regions(sin_canvas, region)
        out = None if out is None else (np.empty_like(cos_block), out)
        sin = _chunk_call("rope_cos_sin", (positions, inv_freq), (positions, inv_freq), opts,
                          out)[1]
    return sin


def _apply_block(x, cos, sin, opts, canvas=None, region=None):
    cos, sin = _only(cos), _only(sin)
    out = _regions(canvas, region)
    return _chunk_call("apply_rope", (x, cos, sin), (x, cos, sin, out), opts, out)


def _cached_block(x, cos_cache, sin_cache, position_ids, opts, canvas=None, region=None):
    cos_cache, sin_cache = _only(cos_cache), _only(sin_cache)
    args = (x, cos_cache, sin_cache, position_ids)
    out = _regions(canvas, region)
    return _chunk_call("apply_rope_cached", args, args + (out,), opts, out)


def _qk_block(q, k, cos, sin, opts, q_canvas=None, k_canvas=None, q_region=None,
              k_region=None):
    k, cos, sin = _only(k), _only(cos), _only(sin)
    out = None if q_canvas is None else _regions((q_canvas, k_canvas), (q_region, k_region))
    pair = (None, None) if out is None else out
    return _chunk_call("apply_rope_qk", (q, k, cos, sin), (q, k, cos, sin) + pair, opts, out)


def _alibi_block(slopes, query_rows, key_len, opts):
    n = query_rows.shape[0]
    first = int(query_rows[0]) if n else 0  # the chunk's first query row
    return _chunk_call("alibi_bias", (slopes, n, key_len), (slopes,),
                       dict(opts, query_offset=opts["query_offset"] + first))


def _mask_block(slopes, mask, opts):
    check = None if mask.dtype == np.bool_ else lambda xp: _zero_one(xp, mask)
    return _chunk_call("alibi_bias_from_mask", (slopes, mask), (slopes, mask), opts,
                       check=check)


def _zero_one(xp, mask):
    """The public layer's check of a 0/1 mask, on one chunk (it cannot read a lazy mask)."""
    if mask.size and not bool(xp.all((mask == 0) | (mask == 1))):
        raise ValueError("attention_mask must hold only 0 and 1")


def _positions_block(slopes, query_positions, key_positions, opts):
    qp, kp = query_positions, key_positions
    lead = tuple(np.broadcast_shapes(qp.shape[:-1], kp.shape[:-1]))  # this chunk's
    return _chunk_call("alibi_bias_from_positions", (slopes, qp, kp), (slopes, qp, kp),
                       dict(opts, lead=lead))


def _relative_block(table, index, opts):
    table = _only(table)
    return _chunk_call("relative_bias", (table, index), (table, index), opts,
                       check=lambda xp: check_index(xp, index, table.shape[0], "index",
                                                    "the rows of table"))


def _conv_block(x, weight, bias, opts, place):
    """The convolution of a chunk grown by its halo (``place``: where the chunk sits in the
    unpadded ``x``), the halo's rows and columns then dropped: the rows kept read only the
    halo and the chunk, as they read the whole ``x``."""
    weight, bias = _only(weight), _only(bias)
    y = _chunk_call("conv_positional", (x, weight, bias), (x, weight, bias), opts["conv"])
    trim = [slice(None)] * y.ndim
    for ax, (before, after), size in opts["halo"]:
        s = place[ax]
        lo = before if s.start > 0 else 0
        hi = after if s.stop < size else 0
        trim[ax] = slice(lo, y.shape[ax] - hi)
    return y[tuple(trim)] if opts["halo"] else y


def _resample_block(grid, prefix, opts):
    """A chunk of leading rows and channels, its grid axes (and prefix rows) whole."""
    grid = _only(grid)
    prefix = None if prefix is None else _only(prefix)
    arrays = (grid, prefix)
    return _chunk_call("resample_grid", arrays, arrays, opts)


# --- graph helpers ------------------------------------------------------------------------------


def _whole(a, axes):
    """``a`` with each of ``axes`` in one chunk (a no-op where it already is)."""
    want = {ax % a.ndim: -1 for ax in axes if a.numblocks[ax % a.ndim] > 1}
    return a.rechunk(want) if want else a


def _fit(t, x, skip_last=True):
    """Table ``t``, broadcast from the right against ``x``'s leading axes, rechunked to ``x``'s
    chunks on its full-size axes (size-1 axes broadcast) and, with ``skip_last``, its last axis
    whole. Returns ``(t, blockwise index)``."""
    lead = t.ndim - 1 if skip_last else t.ndim
    first = x.ndim - 1 - lead  # x axis of t's axis 0
    chunks = tuple(x.chunks[first + j] if t.shape[j] != 1 else (1,) for j in range(lead))
    index = tuple(range(first, first + lead))
    if skip_last:
        chunks += ((t.shape[-1],),)
        index += (_FEATURE,)
    return (t.rechunk(chunks) if chunks != t.chunks else t), index


@contextlib.contextmanager
def _outer_product():
    """Dask's warning that a graph has many more chunks than its inputs, silenced where that
    is the op (heads x queries x keys: the chunks the inputs' chunks imply)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerformanceWarning)
        yield


def _meta(like, ndim, dtype):
    return meta_from_array(like._meta, ndim=ndim, dtype=dtype)


def _item(pair, i):
    return pair[i]


def _split_pair(pairs, metas, chunkss, name):
    """Two arrays from a blockwise array whose blocks are pairs (one task computes both)."""
    ind = tuple(range(pairs.ndim))
    return tuple(
        da.blockwise(_item, ind, pairs, ind, i, None, adjust_chunks=dict(zip(ind, chunks)),
                     align_arrays=False, meta=meta, token=f"{name}-{i}")
        for i, (meta, chunks) in enumerate(zip(metas, chunkss)))


def _blockwise(func, out_ind, pairs, opts, outputs, **kwargs):
    """``da.blockwise(func, out_ind, *pairs, opts, None, **kwargs)`` (``pairs``: array, index)
    whose tasks also get canvases and regions for their outputs (see ``canvas``):
    ``outputs(first)`` gives ``((chunks, dtype), ...)`` of the op's outputs, from the first
    array once aligned. No canvases where a chunk would not be one C-contiguous region of
    its output. Returns ``(array, the extra arguments: canvases, then regions, or ())``."""
    _, arrays = da.core.unify_chunks(*pairs)  # aligned as blockwise would, here so the
    pairs = tuple(v for a, ind in zip(arrays, pairs[1::2]) for v in (a, ind))  # regions match
    outs = outputs(pairs[0])
    lead = tuple(i for i in out_ind if i not in kwargs.get("new_axes", {}))
    # one hash of everything that makes the output names both the layer and its canvases
    # (tokenizing the inputs is most of the cost of building the graph)
    token = tokenize(func.__name__, out_ind, pairs, opts, kwargs)
    extra = ()
    if all(_canvas.fits(chunks) for chunks, _ in outs):
        canvases = [_canvas.canvas_task(chunks, dtype, f"{i}-{token}")
                    for i, (chunks, dtype) in enumerate(outs)]
        regions = [ArraySliceDep(chunks[:len(lead)]) for chunks, _ in outs]
        extra = tuple(v for c in canvases for v in (c, None)) + tuple(
            v for r in regions for v in (r, lead))
    res = da.blockwise(func, out_ind, *pairs, opts, None, *extra, align_arrays=False,
                       name=f"{kwargs.pop('token')}-{token}", **kwargs)
    return res, extra


def _canvas_array(arr, has_canvas):
    """``arr`` finalised through its canvas when its tasks write into one."""
    return _canvas.wrap(arr) if has_canvas else arr


def _store(out, result):
    """``out`` made to hold ``result`` (Dask's item assignment rebinds its graph), or ``result``."""
    if out is None:
        return result
    out[...] = result
    return out


# --- ops ----------------------------------------------------------------------------------------


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """Twin of ``_xp.sinusoid_table``: one task per chunk of ``positions``; rows whole."""
    ind = tuple(range(positions.ndim))
    opts = dict(layout=layout, dtype=dtype, width=width)
    table, canvas = _blockwise(
        _sinusoid_block, ind + (_FEATURE,), (positions, ind, hi, None, lo, None), opts,
        lambda p: ((p.chunks + ((width,),), dtype),), new_axes={_FEATURE: width},
        dtype=dtype, meta=_meta(positions, positions.ndim + 1, dtype),
        token="arrpos-sinusoid_table")
    return _store(out, _canvas_array(table, canvas))


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """Twin of ``_xp.rope_cos_sin``: one task per chunk of ``positions`` makes both tables;
    ``inv_freq`` (and with ``axes`` the coordinate axis) whole."""
    lead = positions.ndim - (axes is not None)
    if axes is not None:
        positions = _whole(positions, [-1])
    ind = tuple(range(lead))
    pos_ind = ind + ((_COORDS,) if axes is not None else ())
    inv_freq = _whole(inv_freq, [0])
    width = 2 * inv_freq.shape[0]
    meta = _meta(positions, lead + 1, dtype)
    opts = dict(layout=layout, attention_factor=attention_factor, axes=axes, dtype=dtype)
    chunks = positions.chunks[:lead] + ((width,),)
    if _canvas.fits(chunks):
        cos, sin = _rope_canvas_graph(positions, inv_freq, opts, chunks, meta)
    else:
        res, _ = _blockwise(
            _rope_table_block, ind + (_TABLE,), (positions, pos_ind, inv_freq, (_FREQ,)), opts,
            lambda p: ((chunks, dtype),) * 2, new_axes={_TABLE: width}, concatenate=False,
            meta=meta, token="arrpos-rope_cos_sin")
        cos, sin = _split_pair(res, (meta, meta), (chunks, chunks), "arrpos-rope")
    if out is not None:
        return _store(out[0], cos), _store(out[1], sin)
    return cos, sin


def _rope_canvas_graph(positions, inv_freq, opts, chunks, meta):
    """cos and sin written into their canvases, their layers built task by task: one cos task
    per chunk makes both tables (keeping sin's for the chunk's sin task). Built here rather
    than by ``blockwise``, whose general machinery (index algebra, argument substitution,
    two layers to materialise at compute) cost rope_cos_sin twice the sinusoid's graph.

    The threaded scheduler's cost is per task (a hand-over to a pool thread and back), so the
    graph has no task it can do without: both canvases come from one task, and a chunk of
    positions made by a task that reads nothing (``arange``'s) is made inside its cos task
    (the sin task only runs it where it computes its chunk itself). Every layer costs at
    compute too (Dask culls the graph layer by layer), so the canvases' task sits in cos's
    layer and ``inv_freq`` held as data in the graph goes into the tasks as it is."""
    token = tokenize("arrpos-rope_cos_sin", positions, inv_freq, opts, chunks)
    cos_name, sin_name = f"arrpos-rope_cos_sin-{token}", f"arrpos-rope-sin-{token}"
    pair_key = f"arrpos-canvas-{token}"
    pair = Task(pair_key, _canvas.new_canvases, tuple(sum(c) for c in chunks),
                np.dtype(opts["dtype"]), 2)
    # each task takes its canvases out of the pair itself (no task of their own)
    cos_canvas, sin_canvas = (Task(None, _item, TaskRef(pair_key), i) for i in range(2))
    inv = _data(inv_freq, (inv_freq.name,) + (0,) * inv_freq.ndim)  # one chunk
    opts_node = DataNode(None, opts)
    whole = positions.ndim - (len(chunks) - 1)  # the coordinate axis of ``axes``, whole
    pos_keys = positions.__dask_keys__()
    roots = _roots(positions)
    starts = [tuple(itertools.accumulate(c, initial=0)) for c in chunks[:-1]]
    cos_layer, sin_layer = {}, {}
    read_positions = False
    for idx in itertools.product(*(range(len(c)) for c in chunks[:-1])):
        key = pos_keys
        for i in idx + (0,) * whole:
            key = key[i]
        root = roots.get(key)
        if root is None:
            pos = sin_pos = TaskRef(key)
            read_positions = True
        else:
            pos, sin_pos = root, DataNode(None, root)
        region = DataNode(None, tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, idx)))
        c_key, s_key = (cos_name, *idx, 0), (sin_name, *idx, 0)
        cos_layer[c_key] = Task(c_key, _rope_table_block, pos, inv, opts_node, cos_canvas,
                                sin_canvas, region, region)
        sin_layer[s_key] = Task(s_key, _rope_sin_block, TaskRef(c_key), sin_pos, inv,
                                opts_node, sin_canvas, region)
    reads = [a for a, read in ((positions, read_positions), (inv_freq, isinstance(inv, TaskRef)))
             if read]
    cos_layer[pair_key] = pair
    cos = _canvas.CanvasArray(HighLevelGraph.from_collections(cos_name, cos_layer, reads),
                              cos_name, chunks, meta=meta)
    sin_graph = HighLevelGraph.from_collections(sin_name, sin_layer, [cos] + reads)
    return cos, _canvas.CanvasArray(sin_graph, sin_name, chunks, meta=meta)


def _data(a, key):
    """A reference to chunk ``key`` of ``a``, or the chunk itself where the graph holds it as
    data (``from_array``'s small arrays)."""
    layer = a.dask.layers.get(a.name)
    if layer is not None and layer.is_materialized():
        value = layer.get(key)
        if isinstance(value, DataNode):
            value = value.value
        if isinstance(value, np.ndarray):
            return DataNode(None, value)
    return TaskRef(key)


def _roots(a):
    """``a``'s chunk tasks that read no other task (``arange``'s), by key, as tasks to run
    inside another (where its layer is built already: nothing is materialised to find out)."""
    layer = a.dask.layers.get(a.name)
    if layer is None or not layer.is_materialized():
        return {}
    return {k: Task(None, t.func, *t.args, _data_producer=t.data_producer, **t.kwargs)
            for k, t in layer.items() if type(t) is Task and not t.dependencies}


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope``: one task per chunk of ``x``'s rows; features whole."""
    x = _whole(x, [-1])
    cos, tind = _fit(cos, x)
    sin, _ = _fit(sin, x)
    ind = tuple(range(x.ndim))
    opts = dict(layout=layout, inverse=inverse)
    res, canvas = _blockwise(
        _apply_block, ind, (x, ind, cos, tind, sin, tind), opts,
        lambda a: ((a.chunks, a.dtype),), concatenate=False, dtype=x.dtype,
        meta=_meta(x, x.ndim, x.dtype), token="arrpos-apply_rope")
    return _store(out, _canvas_array(res, canvas))


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_cached``: one task per chunk of ``x``'s rows; the caches (and
    the features) whole; ``position_ids`` chunked like the rows it broadcasts against."""
    x = _whole(x, [-1])
    cos_cache, sin_cache = _whole(cos_cache, [0, 1]), _whole(sin_cache, [0, 1])
    ids, iind = _fit(position_ids, x, skip_last=False)
    ind = tuple(range(x.ndim))
    cind = (_CACHE_ROW, _FEATURE)
    opts = dict(layout=layout, inverse=inverse)
    res, canvas = _blockwise(
        _cached_block, ind, (x, ind, cos_cache, cind, sin_cache, cind, ids, iind), opts,
        lambda a: ((a.chunks, a.dtype),), concatenate=False, dtype=x.dtype,
        meta=_meta(x, x.ndim, x.dtype), token="arrpos-apply_rope_cached")
    return _store(out, _canvas_array(res, canvas))


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """Twin of ``_xp.apply_rope_qk``: one task per chunk of the rows ``q`` and ``k`` share
    rotates both; axes where they differ (grouped-query heads) and the features whole."""
    if q.ndim != k.ndim:
        raise Unsupported("q and k of different ranks")
    nd = q.ndim
    differ = [j for j in range(nd) if q.shape[j] != k.shape[j]] + [nd - 1]
    q, k = _whole(q, differ), _whole(k, differ)
    k = k.rechunk(tuple(kc if j in differ else qc
                        for j, (qc, kc) in enumerate(zip(q.chunks, k.chunks))))
    ind = tuple(range(nd))
    kind = tuple(_K_AXIS + j if j in differ else j for j in ind)
    cos, tind = _fit(cos, q)
    sin, _ = _fit(sin, q)
    metas = (_meta(q, nd, q.dtype), _meta(k, nd, k.dtype))
    opts = dict(layout=layout, inverse=inverse)
    # the axes where q and k differ are whole in both: k's regions follow q's block index
    k_chunks = tuple(kc if j in differ else qc for j, (qc, kc) in enumerate(zip(q.chunks,
                                                                                k.chunks)))
    pairs, canvas = _blockwise(
        _qk_block, ind, (q, ind, k, kind, cos, tind, sin, tind), opts,
        lambda a: ((a.chunks, q.dtype), (k_chunks, k.dtype)), concatenate=False,
        meta=metas[0], token="arrpos-apply_rope_qk")
    qr, kr = _split_pair(pairs, metas, (q.chunks, k.chunks), "arrpos-rope_qk")
    qr, kr = _canvas_array(qr, canvas), _canvas_array(kr, canvas)
    q_out, k_out = (None, None) if out is None else out
    return _store(q_out, qr), _store(k_out, kr)


def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    """Twin of ``_xp.alibi_bias``: tasks over chunks of heads x query rows; keys whole."""
    chunks = da.core.normalize_chunks((slopes.chunks[0], "auto", -1),
                                      (slopes.shape[0], query_len, key_len), dtype=dtype)
    rows = da.arange(query_len, chunks=chunks[1])
    return da.blockwise(
        _alibi_block, (0, 1, 2), slopes, (0,), rows, (1,), key_len, None,
        dict(mode=mode, query_offset=query_offset, dtype=dtype), None,
        new_axes={2: key_len}, dtype=dtype, meta=_meta(slopes, 3, dtype),
        token="arrpos-alibi_bias")



def alibi_bias_from_mask(slopes, attention_mask, *, dtype, xp):
    """Twin of ``_xp.alibi_bias_from_mask``: tasks over chunks of batch rows x heads; the keys
    whole (a key's position counts the real tokens before it: a running sum along them)."""
    mask = _whole(attention_mask, [1])
    return da.blockwise(
        _mask_block, (0, 1, 2, 3), slopes, (1,), mask, (0, 3), dict(dtype=dtype), None,
        new_axes={2: 1}, concatenate=False, dtype=dtype, meta=_meta(slopes, 4, dtype),
        token="arrpos-alibi_bias_from_mask")


def alibi_bias_from_positions(slopes, query_positions, key_positions, *, mode, lead, dtype,
                              xp):
    """Twin of ``_xp.alibi_bias_from_positions``: one task per chunk of ``lead`` x heads x
    queries x keys, each an element-wise function of its positions (size-1 leading axes of
    the positions broadcast)."""
    n = len(lead)
    qp, kp = query_positions, key_positions
    qind = tuple(range(n - (qp.ndim - 1), n)) + (n + 1,)
    kind = tuple(range(n - (kp.ndim - 1), n)) + (n + 2,)
    with _outer_product():
        return da.blockwise(
            _positions_block, tuple(range(n + 3)), slopes, (n,), qp, qind, kp, kind,
            dict(mode=mode, dtype=dtype), None, dtype=dtype, meta=_meta(slopes, n + 3, dtype),
            token="arrpos-alibi_bias_from_positions")


def relative_bias(table, index, *, dtype, xp):
    """Twin of ``_xp.relative_bias``: one task per chunk of heads x ``index``; the table's
    rows whole (any id may point anywhere). The ids are checked chunk by chunk, where they
    are read."""
    table = _whole(table, [0])
    ind = tuple(range(index.ndim))
    with _outer_product():
        return da.blockwise(
            _relative_block, (_HEADS,) + ind, table, (_ROWS, _HEADS), index, ind,
            dict(dtype=dtype), None, concatenate=False, dtype=table.dtype,
            meta=_meta(table, index.ndim + 1, table.dtype), token="arrpos-relative_bias")


def toeplitz_bias(lines, *, q, k, dtype, xp):
    """Twin of ``_xp.toeplitz_bias``: the gather graph of its ids (``_xp.toeplitz_ids``)."""
    return relative_bias(lines, _xp.toeplitz_ids(xp, q, k, device_of(lines)), dtype=dtype, xp=xp)


def conv_positional(x, weight, bias, *, activation, residual, dtype, xp):
    """Twin of ``_xp.conv_positional``: one task per chunk of ``x``. Leading axes and channels
    keep their chunks (the convolution is depthwise); a chunked H or W axis is convolved with
    a halo of the kernel's reach taken from the neighbouring chunks (``overlap``), no halo
    past the array's edges (the zero padding), so each kept row reads what it reads in the
    whole ``x``."""
    nd = x.ndim
    kh, kw = weight.shape[0], weight.shape[1]
    c_ind = (nd - 1,)
    pairs = [x, tuple(range(nd)), _whole(weight, [0, 1]), (_KH, _KW) + c_ind]
    if bias is not None:
        pairs += [bias, c_ind]
    _, arrays = da.core.unify_chunks(*pairs)  # channels alike in x, weight and bias
    x, weight = arrays[0], arrays[1]
    bias = arrays[2] if bias is not None else None
    halo = []
    for ax, k in ((nd - 3, kh), (nd - 2, kw)):
        reach = ((k - 1) // 2, k - 1 - (k - 1) // 2)
        if x.numblocks[ax] == 1 or k == 1:
            continue
        if min(x.chunks[ax]) < max(reach):
            try:  # a halo comes from the next chunk alone: chunks at least as long as it
                x = x.rechunk({ax: da.overlap.ensure_minimum_chunksize(max(reach),
                                                                       x.chunks[ax])})
            except ValueError:  # the axis is shorter than the reach: whole
                x = x.rechunk({ax: -1})
        if x.numblocks[ax] > 1:
            halo.append((ax, reach, x.shape[ax]))
    grown = x
    if halo:
        grown = da.overlap.overlap(x, depth={ax: r for ax, r, _ in halo}, boundary="none")
    ind = tuple(range(nd))
    opts = dict(conv=dict(activation=activation, residual=residual, dtype=dtype),
                halo=tuple(halo))
    return da.blockwise(
        _conv_block, ind, grown, ind, weight, (_KH, _KW) + c_ind, bias,
        None if bias is None else c_ind, opts, None, ArraySliceDep(x.chunks), ind,
        adjust_chunks={ax: x.chunks[ax] for ax, _, _ in halo}, align_arrays=False,
        concatenate=False, dtype=x.dtype, meta=_meta(x, nd, x.dtype),
        token="arrpos-conv_positional")


def _no_single_channel(chunks):
    """Channel chunks with no chunk of one channel unless there is one channel in all: the
    generic code sums 8 taps and more of a one-channel grid pairwise (NumPy's contiguous
    reduction), of a wider one in order, so such a chunk would differ from the whole table in
    the last bits; it is merged with its neighbour."""
    out: list[int] = []
    for n in chunks:
        if out and (n == 1 or out[-1] == 1):
            out[-1] += n
        else:
            out.append(n)
    return tuple(out)


def resample_grid(grid, prefix, *, taps, dtype, xp):
    """Twin of ``_xp.resample_grid``: one task per chunk of the leading axes x channels (no
    chunk of one channel in a wider grid: ``_no_single_channel``). The grid axes (and the
    prefix rows) are taken whole, rechunked to one chunk first where they are chunked: an
    output row mixes input rows from all along them. The host taps travel in the graph (each
    task's dispatch applies them to its chunk)."""
    k = len(taps)
    nd = grid.ndim
    lead = tuple(range(nd - k - 1))
    c_ind = (nd - 1,)
    grid = _whole(grid, range(nd - k - 1, nd - 1))
    channels = _no_single_channel(grid.chunks[-1])
    grid = grid.rechunk({nd - 1: channels}) if channels != grid.chunks[-1] else grid
    grid_ind = tuple(range(_GRID, _GRID + k))
    pairs = [grid, lead + grid_ind + c_ind]
    p = 0
    if prefix is not None:
        prefix = _whole(prefix, [-2]).rechunk({prefix.ndim - 1: channels})
        p = prefix.shape[-2]
        pairs += [prefix, lead + (_PREFIX_ROWS,) + c_ind]
    _, arrays = da.core.unify_chunks(*pairs)  # leading axes and channels alike
    grid = arrays[0]
    prefix = arrays[1] if prefix is not None else None
    rows = p + math.prod(n if t is None else t[0].shape[0]
                         for n, t in zip(grid.shape[nd - k - 1:nd - 1], taps))
    return da.blockwise(
        _resample_block, lead + (_OUT_ROWS,) + c_ind, grid, lead + grid_ind + c_ind, prefix,
        None if prefix is None else lead + (_PREFIX_ROWS,) + c_ind,
        dict(taps=taps, dtype=dtype), None, new_axes={_OUT_ROWS: rows}, concatenate=False,
        align_arrays=False, dtype=grid.dtype, meta=_meta(grid, nd - k + 1, grid.dtype),
        token="arrpos-resample_grid")

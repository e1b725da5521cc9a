"""One result buffer per computed Dask array, so ``compute()`` need not join the chunks.

Dask's ``compute()`` of a chunked array ends by concatenating the chunks into a new NumPy array:
a copy of the whole result into fresh memory, costing as much as these memory-bound kernels
themselves. Here the graph gets one more task, run once per execution, that makes a
:class:`Canvas` (a handle; nothing allocated yet). Each chunk task writes its chunk into its
region of the canvas, allocated whole by the first task that needs it in its process, and
returns that region as a view. :class:`CanvasArray` (the op's result) then finalises a compute
by returning the canvas itself when the computed chunks are exactly its regions, and by Dask's
own join otherwise (chunks that crossed processes, graphs rebuilt after ``persist``).

Why the result is never shared: every execution of a graph makes a new canvas (the task is not
cached between computes, and ``persist`` rebuilds a plain ``dask.array.Array``, whose chunks are
then joined as usual); each canvas is handed out whole at most once, and never once its chunks
were handed out through ``to_delayed``; only its own tasks write into it.

Where a canvas is off (``Canvas.enabled``: on ``dask.distributed`` workers, whose memory
manager frees and spills chunk by chunk, and for outputs too large to hold whole) the tasks
allocate their chunks as without it and ``compute()`` joins them.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import uuid
import weakref

import numpy as np
import dask
import dask.array as da
from dask.array.core import finalize as _dask_finalize

from ... import _dispatch

__all__ = ["Canvas", "CanvasArray", "canvas_task", "fits", "wrap"]

_LOCK = threading.Lock()
_CANVASES: "weakref.WeakValueDictionary[str, Canvas]" = weakref.WeakValueDictionary()


class Canvas:
    """The whole output of one execution of a graph: ``shape`` of ``dtype``, allocated on first
    use in each process (a pickled canvas arrives in a worker process as that process's own
    canvas of the same key). Exposes its bytes through ``__array_interface__``, so every view
    of it has a base whose base is this canvas."""

    __slots__ = ("key", "shape", "dtype", "enabled", "_block", "_adopted", "_shared", "_kept",
                 "_lock", "__weakref__")

    def __init__(self, key, shape, dtype):
        self.key, self.shape, self.dtype = key, tuple(shape), np.dtype(dtype)
        self._block = None
        # off on dask.distributed workers (whose memory manager frees and spills chunk by
        # chunk, which a canvas would defeat) and for outputs too large to hold whole
        self.enabled = not _in_worker() and self.dtype.itemsize * _size(self.shape) <= _cap()
        self._adopted = self._shared = False  # handed out whole / as chunks
        self._kept = {}  # chunks a task made for another task of this process (``keep``)
        self._lock = threading.Lock()

    def __reduce__(self):
        return _canvas, (self.key, self.shape, self.dtype)

    @property
    def __array_interface__(self):
        return {"shape": (self._block.nbytes,), "typestr": "|u1", "version": 3,
                "data": (self._block.ctypes.data, False)}

    def _whole(self):
        with self._lock:
            if self._block is None:
                self._block = _empty_bytes(self.dtype.itemsize * _size(self.shape))
        return np.asarray(self).view(self.dtype).reshape(self.shape)

    def region(self, slices):
        """The writable view of the canvas at ``slices`` (one chunk's place)."""
        return self._whole()[slices]

    def keep(self, slices, chunk):
        """Keeps ``chunk`` (the chunk at ``slices``, made by a task for another) for ``take``;
        a region of this canvas by its place only (the canvas holds no view of itself)."""
        with self._lock:
            self._kept[_region_key(slices)] = None if _owner(chunk) is self else chunk

    def take(self, slices):
        """The chunk at ``slices`` kept in this process (once), or None."""
        with self._lock:
            key = _region_key(slices)
            if key not in self._kept:
                return None
            chunk = self._kept.pop(key)
        return self.region(slices) if chunk is None else chunk

    def address(self):
        return None if self._block is None else self._block.ctypes.data

    def adopt(self):
        """The whole canvas as one array, the first time only and never once its chunks were
        handed out (else None)."""
        with self._lock:
            if self._adopted or self._shared or self._block is None:
                return None
            self._adopted = True
        return self._whole()

    def share(self) -> bool:
        """Marks the chunks as handed out as they are (the canvas is then never adopted);
        False if it was adopted already (the caller copies its chunk)."""
        with self._lock:
            self._shared = not self._adopted
            return self._shared


def _region_key(slices):
    return tuple((s.start, s.stop) for s in slices)  # (slices hash from Python 3.12 only)


def _cap() -> int:
    """The largest output given a canvas: an eighth of physical memory (a canvas stays mapped
    while any of its chunks lives, so Dask consuming it chunk by chunk frees nothing)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8
    except (AttributeError, OSError, ValueError):
        return 1 << 30


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _empty_bytes(nbytes):
    """Bytes for a canvas: the host driver's reusable huge-page blocks where it is built (a
    repeated compute then finds its pages mapped, as a repeated NumPy call does)."""
    host = _dispatch.driver("host")
    return np.empty(nbytes, np.uint8) if host is None else host.empty_bytes(nbytes)


def _canvas(key, shape, dtype):
    """This process's canvas ``key`` (tasks unpickled in one process share one)."""
    with _LOCK:
        c = _CANVASES.get(key)
        if c is None:
            c = _CANVASES[key] = Canvas(key, shape, dtype)
        return c


def new_canvas(shape, dtype):
    """The graph's canvas task: a new canvas (a new key) on every execution."""
    return _canvas(uuid.uuid4().hex, shape, dtype)


def new_canvases(shape, dtype, count):
    """The canvas task of ``count`` outputs of one ``shape`` and ``dtype``: new canvases on
    every execution (one task for them all)."""
    return tuple(new_canvas(shape, dtype) for _ in range(count))


def fits(chunks) -> bool:
    """Whether every chunk is one C-contiguous region of the whole (known, non-zero sizes; the
    axes after the last split axis whole, the axes before it in chunks of 1)."""
    if any(c != c for cs in chunks for c in cs) or not all(sum(cs) for cs in chunks):
        return False
    split = [i for i, cs in enumerate(chunks) if len(cs) > 1]
    return not split or all(set(cs) == {1} for cs in chunks[:split[-1]])


def canvas_task(chunks, dtype, token):
    """The canvas task (a ``Delayed``) for an output of ``chunks`` and ``dtype``, keyed by
    ``token`` (a hash of the op and its inputs: equal graphs share it, different ones never
    do)."""
    shape = tuple(sum(c) for c in chunks)
    return dask.delayed(new_canvas, pure=True)(shape, np.dtype(dtype),
                                               dask_key_name=f"arrpos-canvas-{token}")


def _owner(block):
    """The canvas that ``block`` is a view of, or None."""
    if type(block) is not np.ndarray or type(block.base) is not np.ndarray:
        return None
    owner = block.base.base
    return owner if isinstance(owner, Canvas) else None


def _in_worker() -> bool:
    """Whether this task runs on a ``dask.distributed`` worker."""
    mod = sys.modules.get("distributed")
    if mod is None:
        return False
    try:
        mod.get_worker()
    except ValueError:
        return False
    return True


def _adopt(results, chunks):
    """The canvas whose regions the computed blocks are, exactly and all, else None."""
    if _in_worker():
        return None
    first = results
    while isinstance(first, list) and first:
        first = first[0]
    canvas = _owner(first)
    if canvas is None or canvas.shape != tuple(map(sum, chunks)) or first.dtype != canvas.dtype:
        return None
    # byte offset of each block along each axis
    step = [canvas.dtype.itemsize * _size(canvas.shape[i + 1:]) for i in range(len(chunks))]
    offsets = [[s * o for o in itertools.accumulate(cs, initial=0)] for s, cs in zip(step, chunks)]
    base = canvas.address()
    for idx in itertools.product(*(range(len(cs)) for cs in chunks)):
        block = results
        for i in idx:
            if not isinstance(block, list) or i >= len(block):
                return None
            block = block[i]
        if (_owner(block) is not canvas or not block.flags.c_contiguous
                or block.ctypes.data != base + sum(o[i] for o, i in zip(offsets, idx))
                or block.shape != tuple(cs[i] for cs, i in zip(chunks, idx))):
            return None
    return canvas.adopt()


def assemble(results, chunks):
    """``compute()``'s last step for a :class:`CanvasArray`: the canvas when the blocks tile it
    and it was not handed out before, else Dask's own join."""
    whole = _adopt(results, chunks)
    return whole if whole is not None else _dask_finalize(results)


class CanvasArray(da.Array):
    """A Dask array whose tasks write into one canvas per execution (see the module)."""

    def __dask_postcompute__(self):
        return assemble, (self.chunks,)

    def to_delayed(self, optimize_graph=True):
        """As Dask's, but a chunk handed out as a ``Delayed`` result is never also part of a
        canvas that a ``compute()`` in the same call returns whole (it is copied instead)."""
        plain = da.Array(self.dask, self.name, self.chunks, meta=self._meta)
        return plain.map_blocks(_handed_out, dtype=self.dtype, meta=self._meta).to_delayed(
            optimize_graph=optimize_graph)


def _handed_out(block):
    canvas = _owner(block)
    return block if canvas is None or canvas.share() else block.copy()


def wrap(arr):
    """``arr`` as a :class:`CanvasArray` (same graph, name and chunks)."""
    return CanvasArray(arr.dask, arr.name, arr.chunks, meta=arr._meta)

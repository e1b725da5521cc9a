"""Dask arrays: graphs whose tasks run the per-chunk dispatch (compiled kernels chunk by chunk).

References are the NumPy results on the same data: with the kernels built, the NumPy kernel's;
with ``ARRPOS_NO_EXTENSIONS=1``, the NumPy generic path's. Equality is bit for bit.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import _xp

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from dask.callbacks import Callback  # noqa: E402

NO_EXT = _dispatch.extensions_disabled()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(7)


class TaskCounter(Callback):
    """Counts the tasks the local schedulers run while it is active."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def _pretask(self, key, dsk, state):
        self.count += 1


def _exploding(a, chunks):
    """A Dask array of ``a``'s shape whose every chunk raises when computed."""
    return da.from_array(a, chunks=chunks).map_blocks(_explode, dtype=a.dtype)


def _explode(block):
    raise AssertionError("a chunk was computed while the graph was only being built")


def _compute(*arrays):
    return dask.compute(*arrays, scheduler="threads")


# --- the table kernels: a row depends on its position alone -----------------------------------


def test_table_rows_do_not_depend_on_where_the_rows_begin():
    """Chunked tables can equal whole ones only if a row is a function of its position: the
    rows of a slice equal the same rows of the whole table, at odd offsets and any threads."""
    inv, _ = arrpos.rope_frequencies(64)
    whole = arrpos.sinusoidal(np.arange(70000), 64)
    cos, sin = arrpos.rope_cos_sin(np.arange(70000), inv, dtype=np.float32)
    for a, b in [(1, 5000), (4097, 9000), (33333, 70000), (65, 66)]:
        np.testing.assert_array_equal(arrpos.sinusoidal(np.arange(a, b), 64), whole[a:b])
        c, s = arrpos.rope_cos_sin(np.arange(a, b), inv, dtype=np.float32)
        np.testing.assert_array_equal(c, cos[a:b])
        np.testing.assert_array_equal(s, sin[a:b])


# --- dispatch --------------------------------------------------------------------------------


def _chosen(op, arrays, **kwargs):
    xp = arrpos._lib.array_namespace(*[a for a in arrays if a is not None])
    return _dispatch.plan(op, xp, arrays, **kwargs).module.__name__.rsplit(".", 1)[-1]


def test_numpy_chunked_dask_takes_the_dask_front_end():
    pos = da.arange(10, chunks=4)
    x = da.ones((2, 10, 3, 8), chunks=(1, 5, 3, 8))
    c = da.ones((10, 1, 8), chunks=(5, 1, 8))
    # also under ARRPOS_NO_EXTENSIONS: the graphs compile nothing, their tasks then run _xp
    assert _chosen("sinusoid_table", (pos,), dtype=np.float64) == "graph"
    assert _chosen("apply_rope", (x, c, c, None), layout="half") == "graph"
    assert _chosen("apply_rope", (x, c, c, x), layout="half") == "graph"


def test_unknown_chunk_sizes():
    """Positions of unknown chunk sizes (after boolean indexing) still make tables chunk by
    chunk; arrays that must be aligned to others need known sizes (the generic path)."""
    pos = da.arange(10, chunks=4)
    pos = pos[pos > 3]
    assert _chosen("sinusoid_table", (pos,), dtype=np.float64) == "graph"
    assert _chosen("rope_cos_sin", (pos, da.ones(2)), dtype=np.float64, axes=None) == "graph"
    x = da.ones((2, 10, 8), chunks=(1, 4, 8))
    x = x[:, x[0, :, 0] > 0]
    assert _chosen("apply_rope", (x, da.ones((8,)), da.ones((8,)), None)) == "_xp"
    np.testing.assert_array_equal(arrpos.sinusoidal(pos, 8).compute(),
                                  arrpos.sinusoidal(np.arange(4, 10), 8))
    inv = np.array([1.0, 0.25])
    for g, r in zip(arrpos.rope_cos_sin(pos, da.from_array(inv)),
                    arrpos.rope_cos_sin(np.arange(4, 10), inv)):
        np.testing.assert_array_equal(g.compute(), r)


def test_dask_with_numpy_mixed_in_is_not_served():
    from arrpos._backends.dask import graph as _dask

    assert not _dask.supports("apply_rope", (da.ones((4, 8)), np.ones((4, 8)),
                                             np.ones((4, 8)), None))
    assert not _dask.supports("rope_cos_sin", (np.arange(3), None))
    assert not _dask.supports("frequency_arrays", (da.ones(3),))


# --- values: bit for bit against NumPy on the same data ---------------------------------------


@pytest.mark.parametrize("chunks", [8192, 1000, 65536])
@pytest.mark.parametrize("layout", ["interleaved", "split"])
def test_sinusoidal_equals_numpy_bit_for_bit(chunks, layout):
    n = 65536 if chunks != 1000 else 5000
    got = arrpos.sinusoidal(da.arange(n, chunks=chunks), 64, layout=layout)
    assert got.chunks[-1] == (64,)
    ref = arrpos.sinusoidal(np.arange(n), 64, layout=layout)
    np.testing.assert_array_equal(_compute(got)[0], ref)


def test_sinusoidal_nd_positions_and_float32():
    pos = RNG.integers(0, 100000, size=(6, 50))
    got = arrpos.sinusoidal(da.from_array(pos, chunks=(4, 17)), 32, dtype=np.float32)
    np.testing.assert_array_equal(got.compute(), arrpos.sinusoidal(pos, 32, dtype=np.float32))
    pos0 = np.asarray(12345)
    np.testing.assert_array_equal(arrpos.sinusoidal(da.from_array(pos0), 8).compute(),
                                  arrpos.sinusoidal(pos0, 8))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rope_cos_sin_equals_numpy_bit_for_bit(layout, dtype):
    scaling = arrpos.YarnScaling(factor=4.0, original_max_positions=4096)
    inv, att = arrpos.rope_frequencies(128, scaling=scaling)
    pos = np.arange(20000).reshape(4, 5000)
    dpos = da.from_array(pos, chunks=(1, 1300))
    dinv = da.from_array(inv, chunks=16)  # frequencies chunked: taken whole per task
    got = arrpos.rope_cos_sin(dpos, dinv, layout=layout, attention_factor=att, dtype=dtype)
    ref = arrpos.rope_cos_sin(pos, inv, layout=layout, attention_factor=att, dtype=dtype)
    for g, r in zip(_compute(*got), ref):
        np.testing.assert_array_equal(g, r)
    assert got[0].chunks == ((1,) * 4, (1300, 1300, 1300, 1100), (128,))


def test_rope_cos_sin_multimodal_axes():
    inv, _ = arrpos.rope_frequencies(16)
    axes = arrpos.mrope_axes([4, 2, 2])
    pos = RNG.integers(0, 500, size=(3, 40, 3))
    got = arrpos.rope_cos_sin(da.from_array(pos, chunks=(2, 9, 1)), da.from_array(inv),
                              axes=axes)
    for g, r in zip(_compute(*got), arrpos.rope_cos_sin(pos, inv, axes=axes)):
        np.testing.assert_array_equal(g, r)


def _rope_case(shape, chunks, table_shape, table_chunks, r, dtype, layout="half"):
    inv, _ = arrpos.rope_frequencies(r)
    x = RNG.standard_normal(shape).astype(dtype)
    seq = int(np.prod(table_shape[:-1]))  # the one table axis longer than 1
    cos, sin = arrpos.rope_cos_sin(np.arange(seq), inv, layout=layout, dtype=dtype)
    cos, sin = cos.reshape(table_shape), sin.reshape(table_shape)
    dx = da.from_array(x, chunks=chunks)
    dc = da.from_array(cos, chunks=table_chunks)
    ds = da.from_array(sin, chunks=table_chunks)
    return x, cos, sin, dx, dc, ds


@pytest.mark.parametrize("case", [
    # (x shape, x chunks, table shape, table chunks, rotary width, dtype)
    ((4, 256, 8, 64), (1, 64, 8, 64), (256, 1, 64), (64, 1, 64), 64, np.float32),
    ((2, 300, 3, 32), (1, 77, 2, 16), (300, 1, 32), (100, 1, 8), 32, np.float64),  # features
    ((2, 300, 3, 40), (2, 50, 3, 40), (1, 300, 1, 16), (1, 300, 1, 16), 16, np.float32),
    ((2, 3, 300, 32), (1, 3, 128, 32), (300, 32), (300, 32), 32, np.float32),  # (b, h, s, d)
])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("inverse", [False, True])
def test_apply_rope_equals_numpy_bit_for_bit(case, layout, inverse):
    shape, chunks, tshape, tchunks, r, dtype = case
    x, cos, sin, dx, dc, ds = _rope_case(shape, chunks, tshape, tchunks, r, dtype, layout)
    got = arrpos.apply_rope(dx, dc, ds, layout=layout, inverse=inverse)
    ref = arrpos.apply_rope(x, cos, sin, layout=layout, inverse=inverse)
    np.testing.assert_array_equal(_compute(got)[0], ref)
    # rows keep x's chunks; features are whole
    assert got.chunks[:-1] == dx.chunks[:-1] and got.chunks[-1] == (shape[-1],)


def test_apply_rope_tables_straight_from_rope_cos_sin():
    """The usual pipeline, all lazy: positions -> tables -> rotation, chunks aligned."""
    x = RNG.standard_normal((2, 1024, 4, 64)).astype(np.float32)
    inv, _ = arrpos.rope_frequencies(64)
    c, s = arrpos.rope_cos_sin(da.arange(1024, chunks=256), da.from_array(inv),
                               dtype=np.float32)
    got = arrpos.apply_rope(da.from_array(x, chunks=(1, 512, 4, 64)), c[:, None, :],
                            s[:, None, :])
    rc, rs = arrpos.rope_cos_sin(np.arange(1024), inv, dtype=np.float32)
    np.testing.assert_array_equal(got.compute(),
                                  arrpos.apply_rope(x, rc[:, None, :], rs[:, None, :]))


def test_alibi_bias_chunked_over_heads_and_queries():
    slopes = arrpos.alibi_slopes(12)
    for mode in ("causal", "symmetric", "key"):
        got = arrpos.alibi_bias(da.from_array(slopes, chunks=5), 300, 301, mode=mode)
        np.testing.assert_array_equal(got.compute(),
                                      arrpos.alibi_bias(slopes, 300, 301, mode=mode))
    empty = arrpos.alibi_bias(da.from_array(slopes, chunks=5), 0, 4)
    assert empty.compute().shape == (12, 0, 4)


# --- out= ------------------------------------------------------------------------------------


def test_out_rebinds_the_dask_array_lazily():
    """Dask arrays cannot be written in place; ``out=`` makes ``out`` hold the result (Dask's
    item assignment replaces its graph), still lazily."""
    x, cos, sin, dx, dc, ds = _rope_case((2, 64, 2, 16), (1, 16, 2, 16), (64, 1, 16),
                                         (64, 1, 16), 16, np.float32)
    ref = arrpos.apply_rope(x, cos, sin)
    target = da.zeros_like(dx)
    with TaskCounter() as counted:
        got = arrpos.apply_rope(dx, dc, ds, out=target)
        same = arrpos.apply_rope(dx, dc, ds, out=dx)  # "in place": dx now holds the rotation
    assert counted.count == 0
    assert got is target and same is dx
    np.testing.assert_array_equal(target.compute(), ref)
    np.testing.assert_array_equal(dx.compute(), ref)


def test_table_ops_fill_an_out_pair_too():
    """The Dask table twins honour ``out`` like ``_xp``'s (the public table functions pass
    none today): the given Dask arrays come to hold the tables."""
    from arrpos._backends.dask import graph as _dask
    import array_api_compat.dask.array as dxp

    hi, lo = np.array([1.0, 0.01]), np.zeros(2)
    pos = da.arange(10, chunks=4)
    target = da.zeros((10, 4), chunks=(5, 4))
    got = _dask.sinusoid_table(pos, hi, lo, layout="split", dtype=np.float64, width=4, xp=dxp,
                               out=target)
    assert got is target
    np.testing.assert_array_equal(target.compute(), _xp_table(hi, lo))
    cos_t, sin_t = da.zeros((10, 4)), da.zeros((10, 4))
    pair = _dask.rope_cos_sin(pos, da.from_array(hi), layout="half", attention_factor=1.0,
                              axes=None, dtype=np.float64, xp=dxp, out=(cos_t, sin_t))
    assert pair[0] is cos_t and pair[1] is sin_t
    rc, rs = arrpos.rope_cos_sin(np.arange(10), hi)
    np.testing.assert_array_equal(cos_t.compute(), rc)
    np.testing.assert_array_equal(sin_t.compute(), rs)


def _xp_table(hi, lo):
    """The NumPy path's table for these frequencies (kernel when built, else generic)."""
    import array_api_compat.numpy as npx

    return _dispatch.call("sinusoid_table", npx, np.arange(10), hi, lo, arrays=(np.arange(10),),
                          layout="split", dtype=np.float64, width=4)


# --- laziness, graph size, pickling -----------------------------------------------------------


def test_building_graphs_computes_nothing():
    """Chunks that raise when computed, and a task counter: building every graph is free."""
    inv, _ = arrpos.rope_frequencies(32)
    pos = _exploding(np.arange(4096), 512)
    x = _exploding(np.ones((2, 4096, 2, 32), np.float32), (1, 512, 2, 32))
    slopes = _exploding(arrpos.alibi_slopes(8), 4)
    with TaskCounter() as counted:
        t = arrpos.sinusoidal(pos, 32)
        c, s = arrpos.rope_cos_sin(pos, da.from_array(inv), dtype=np.float32)
        y = arrpos.apply_rope(x, c[:, None, :], s[:, None, :])
        y2 = arrpos.RoPE(32).apply(x, pos, heads_axis=-2)
        b = arrpos.alibi_bias(slopes, 64, 64)
        lazy = [t, c, y, y2, b]
        if hasattr(arrpos, "apply_rope_cached"):  # the value checks of the ids skip lazy ids
            ids = _exploding(np.arange(4096).reshape(1, 4096, 1), (1, 512, 1))
            cache = da.from_array(np.ones((4096, 16), np.float32))
            lazy.append(arrpos.apply_rope_cached(x, cache, cache, ids))
        if hasattr(arrpos, "apply_rope_qk"):
            lazy += list(arrpos.apply_rope_qk(x, x, c[:, None, :], s[:, None, :]))
    assert counted.count == 0
    for a in lazy:
        with pytest.raises(AssertionError, match="graph was only being built"):
            a.compute(scheduler="sync")
    with TaskCounter() as counted:  # the counter does count computations
        arrpos.sinusoidal(da.arange(8, chunks=4), 4).compute(scheduler="sync")
    assert counted.count > 0


def test_graph_size_is_linear_in_chunks():
    def tasks(n_chunks):
        pos = da.arange(512 * n_chunks, chunks=512)
        x = da.ones((1, 512 * n_chunks, 4, 64), chunks=(1, 512, 4, 64), dtype=np.float32)
        c, s = arrpos.rope_cos_sin(pos, da.ones(32), dtype=np.float32)
        graphs = [arrpos.sinusoidal(pos, 64), c, arrpos.apply_rope(x, c[:, None], s[:, None])]
        return [len(g.__dask_graph__()) for g in graphs]

    small, large = tasks(8), tasks(16)
    for a, b in zip(small, large):
        assert b <= 2 * a + 4 and b < 12 * 16  # a few tasks per chunk, no per-element tasks


def test_rope_cos_sin_runs_no_task_it_can_do_without():
    """Each task is a round trip through the scheduler: over ``arange`` positions, one task
    per chunk of each table computed plus one for the canvases (positions made inside the
    cos tasks), whichever tables are computed, with the NumPy values."""
    inv, _ = arrpos.rope_frequencies(16)
    rc, rs = arrpos.rope_cos_sin(np.arange(700), inv, dtype=np.float32)
    for which in ([0, 1], [0], [1]):
        pair = arrpos.rope_cos_sin(da.arange(700, chunks=100), da.from_array(inv),
                                   dtype=np.float32)
        with TaskCounter() as counted:
            got = dask.compute(*(pair[i] for i in which), scheduler="threads")
        for g, i in zip(got, which):
            np.testing.assert_array_equal(g, (rc, rs)[i])
        tables = 2 if 1 in which else 1  # sin's tasks hand out what cos's tasks made
        finals = len(which)  # Dask's own last step per computed array
        assert counted.count == tables * 7 + 1 + finals, which
    # positions made by tasks that read other tasks keep their own tasks
    pos = da.arange(700, chunks=100) + 0
    with TaskCounter() as counted:
        got = _compute(*arrpos.rope_cos_sin(pos, da.from_array(inv), dtype=np.float32))
    np.testing.assert_array_equal(got[0], rc)
    np.testing.assert_array_equal(got[1], rs)
    assert counted.count > 2 * 7 + 3


def test_chunks_written_into_a_canvas_choose_stores_by_the_whole(monkeypatch):
    """A chunk's kernel writes one part of the canvas: streaming stores (no read of lines it
    overwrites) follow the canvas's size, not the chunk's, since the whole output is what
    cannot stay in the cache; the values are the NumPy ones either way."""
    from arrpos._backends import whole_output_bytes, writing_part_of
    from arrpos._backends.dask import graph
    from arrpos._backends.host import driver

    small = driver.PARALLEL_MIN_BYTES
    assert not driver.streams(small) and whole_output_bytes() == 0
    with writing_part_of(driver.STREAM_MIN_BYTES):
        assert driver.streams(small) and driver.threads_and_stores(16)[1]
    assert not driver.streams(small)
    seen = []

    def record(nbytes):
        seen.append(nbytes)
        return writing_part_of(nbytes)

    monkeypatch.setattr(graph, "writing_part_of", record)
    inv, _ = arrpos.rope_frequencies(16)
    rc, rs = arrpos.rope_cos_sin(np.arange(700), inv, dtype=np.float32)
    got = dask.compute(*arrpos.rope_cos_sin(da.arange(700, chunks=100), da.from_array(inv),
                                            dtype=np.float32), scheduler="threads")
    np.testing.assert_array_equal(got[0], rc)
    np.testing.assert_array_equal(got[1], rs)
    assert seen and set(seen) == {rc.nbytes + rs.nbytes}  # each chunk: both whole tables


def test_graph_pickles_and_runs_unpickled():
    """Workers receive tasks pickled: every task function is a module-level function."""
    from dask.local import get_sync

    x, cos, sin, dx, dc, ds = _rope_case((2, 64, 2, 16), (1, 32, 2, 16), (64, 1, 16),
                                         (32, 1, 16), 16, np.float64)
    y = arrpos.apply_rope(dx, dc, ds)
    t = arrpos.sinusoidal(da.arange(100, chunks=30), 8)
    c, _ = arrpos.rope_cos_sin(da.arange(100, chunks=30), da.ones(4))
    for arr, ref in [(y, arrpos.apply_rope(x, cos, sin)),
                     (t, arrpos.sinusoidal(np.arange(100), 8)),
                     (c, arrpos.rope_cos_sin(np.arange(100), np.ones(4))[0])]:
        graph = pickle.loads(pickle.dumps(dict(arr.__dask_graph__())))
        blocks = get_sync(graph, arr.__dask_keys__())
        np.testing.assert_array_equal(da.core.concatenate3(blocks), ref)


# --- apply_rope_cached / apply_rope_qk (their generic twins may land from another branch) ------


def _need(op):
    if not hasattr(_xp, op):
        pytest.skip(f"_xp.{op} is not on this branch")


def test_apply_rope_cached_equals_numpy():
    _need("apply_rope_cached")
    inv, _ = arrpos.rope_frequencies(32)
    cc, sc = arrpos.rope_cos_sin(np.arange(512), inv, dtype=np.float32)
    cc, sc = np.ascontiguousarray(cc[:, :16]), np.ascontiguousarray(sc[:, :16])
    x = RNG.standard_normal((2, 200, 3, 48)).astype(np.float32)
    ids = RNG.integers(0, 512, size=(2, 200, 1))
    ref = arrpos.apply_rope_cached(x, cc, sc, ids)
    got = arrpos.apply_rope_cached(da.from_array(x, chunks=(1, 64, 3, 24)),
                                   da.from_array(cc, chunks=100), da.from_array(sc, chunks=100),
                                   da.from_array(ids, chunks=(2, 50, 1)))
    np.testing.assert_array_equal(got.compute(), ref)


def test_apply_rope_qk_grouped_heads_equals_numpy():
    _need("apply_rope_qk")
    inv, _ = arrpos.rope_frequencies(32)
    c, s = arrpos.rope_cos_sin(np.arange(100), inv, dtype=np.float32)
    q = RNG.standard_normal((2, 100, 8, 32)).astype(np.float32)
    k = RNG.standard_normal((2, 100, 2, 32)).astype(np.float32)
    ref = arrpos.apply_rope_qk(q, k, c[:, None], s[:, None])
    got = arrpos.apply_rope_qk(da.from_array(q, chunks=(1, 30, 4, 32)),
                               da.from_array(k, chunks=(2, 50, 1, 32)),
                               da.from_array(c[:, None], chunks=(25, 1, 32)),
                               da.from_array(s[:, None], chunks=(25, 1, 32)))
    assert got[0].chunks[1] == (30, 30, 30, 10) and got[1].chunks[1] == (30, 30, 30, 10)
    for g, r in zip(_compute(*got), ref):
        np.testing.assert_array_equal(g, r)


# --- the families' ops: ALiBi from a mask or positions, relative_bias, conv_positional --------


def _op_layer(arr):
    """The layer of ``arr``'s graph that computes its chunks (arrpos's op)."""
    return arr.dask.layers[arr.name]


def _one_task_per_chunk(arr, op):
    """The op's own layer: blockwise, one task per output chunk, none computed yet."""
    from dask.blockwise import Blockwise

    layer = _op_layer(arr)
    assert arr.name.startswith(f"arrpos-{op}-"), arr.name
    assert isinstance(layer, Blockwise), type(layer)
    assert len(layer) == int(np.prod(arr.numblocks)), (len(layer), arr.numblocks)


def test_the_families_take_the_dask_front_end():
    s = da.ones(4, chunks=2)
    assert _chosen("alibi_bias_from_mask", (s, da.ones((2, 9), chunks=(1, 4), dtype=bool)),
                   dtype=np.float64) == "graph"
    q = da.arange(6, chunks=4)
    assert _chosen("alibi_bias_from_positions", (s, q, q), mode="causal", lead=(),
                   dtype=np.float64) == "graph"
    assert _chosen("relative_bias", (da.ones((8, 4)), da.zeros((5, 5), dtype=np.int64)),
                   dtype=np.float64) == "graph"
    x = da.ones((2, 9, 1, 4), chunks=(1, 4, 1, 2))
    assert _chosen("conv_positional", (x, da.ones((3, 1, 4)), None), activation=None,
                   residual=True, dtype=np.float64) == "graph"


_DTYPES = [np.float32, np.float64, np.float16]


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("chunks, head_chunks", [((2, 10), 5), ((5, 37), 12), ((1, 7), 1)])
@pytest.mark.parametrize("kind", [bool, np.int64, np.uint8])
def test_alibi_bias_from_mask_equals_numpy(dtype, chunks, head_chunks, kind):
    slopes = arrpos.alibi_slopes(12).astype(dtype)
    mask = (RNG.random((5, 37)) > 0.3).astype(kind)
    mask[1, :9] = 0  # left padding
    got = arrpos.alibi_bias_from_mask(da.from_array(slopes, chunks=head_chunks),
                                      da.from_array(mask, chunks=chunks))
    _one_task_per_chunk(got, "alibi_bias_from_mask")
    # batch rows and heads keep their chunks; the keys are whole (a running count)
    assert got.chunks[:3] == (da.core.normalize_chunks(chunks[0], (5,))[0],
                              da.core.normalize_chunks(head_chunks, (12,))[0], (1,))
    assert got.chunks[3] == (37,) and got.dtype == dtype
    ref = arrpos.alibi_bias_from_mask(slopes, mask)
    np.testing.assert_array_equal(_compute(got)[0], ref)


def test_alibi_bias_from_mask_values_are_checked_per_chunk():
    """A lazy 0/1 mask cannot be read when the graph is built: a chunk holding another value
    raises when computed (the kernel or, without it, the task's own check)."""
    mask = np.ones((4, 20), np.int64)
    mask[3, 17] = 2
    got = arrpos.alibi_bias_from_mask(da.from_array(arrpos.alibi_slopes(4), chunks=2),
                                      da.from_array(mask, chunks=(2, 5)))
    with pytest.raises(ValueError, match="attention_mask"):
        got.compute(scheduler="sync")


@pytest.mark.parametrize("mode", ["symmetric", "causal", "key"])
@pytest.mark.parametrize("dtype", _DTYPES)
def test_alibi_bias_from_positions_equals_numpy(mode, dtype):
    slopes = arrpos.alibi_slopes(6).astype(dtype)
    q = RNG.integers(-3000, 3000, size=(3, 1, 20))
    k = RNG.integers(-3000, 3000, size=(1, 4, 23))
    got = arrpos.alibi_bias_from_positions(
        da.from_array(slopes, chunks=4), da.from_array(q, chunks=(2, 1, 7)),
        da.from_array(k, chunks=(1, 3, 10)), mode=mode)
    _one_task_per_chunk(got, "alibi_bias_from_positions")
    assert got.chunks == ((2, 1), (3, 1), (4, 2), (7, 7, 6), (10, 10, 3))
    ref = arrpos.alibi_bias_from_positions(slopes, q, k, mode=mode)
    np.testing.assert_array_equal(_compute(got)[0], ref)


def test_alibi_bias_from_positions_1d_and_float_positions():
    slopes = arrpos.alibi_slopes(4)
    q, k = np.arange(5, 35) * 0.5, RNG.standard_normal(17) * 100
    for mode in ("symmetric", "causal", "key"):
        got = arrpos.alibi_bias_from_positions(da.from_array(slopes), da.from_array(q, chunks=8),
                                               da.from_array(k, chunks=5), mode=mode)
        _one_task_per_chunk(got, "alibi_bias_from_positions")
        np.testing.assert_array_equal(
            got.compute(), arrpos.alibi_bias_from_positions(slopes, q, k, mode=mode))


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("table_chunks, index_chunks", [
    ((10, 5), (13, 20)), ((32, 12), (40, 41)), ((7, 1), (1, 9)),
])
def test_relative_bias_equals_numpy(dtype, table_chunks, index_chunks):
    table = RNG.standard_normal((32, 12)).astype(dtype)
    index = RNG.integers(0, 32, size=(40, 41)).astype(np.int32)
    got = arrpos.relative_bias(da.from_array(table, chunks=table_chunks),
                               da.from_array(index, chunks=index_chunks))
    _one_task_per_chunk(got, "relative_bias")
    dindex = da.from_array(index, chunks=index_chunks)
    # heads keep the table's chunks, the index its own; the table's rows are whole
    assert got.chunks == (da.from_array(table, chunks=table_chunks).chunks[1],) + dindex.chunks
    np.testing.assert_array_equal(_compute(got)[0], arrpos.relative_bias(table, index))


def test_relative_bias_3d_index_from_a_dask_bucket():
    """Swin-style indices straight from Dask arithmetic (relative_positions on Dask)."""
    table = RNG.standard_normal((49, 3))
    index = RNG.integers(0, 49, size=(2, 16, 16))
    got = arrpos.relative_bias(da.from_array(table), da.from_array(index, chunks=(1, 5, 16)))
    _one_task_per_chunk(got, "relative_bias")
    np.testing.assert_array_equal(got.compute(), arrpos.relative_bias(table, index))


@pytest.mark.parametrize("bad", [-1, 32])
def test_relative_bias_ids_are_checked_where_read(bad):
    """Lazy ids are not read when the graph is built; an id outside the table raises when its
    chunk is computed (never a wrapped, silently different row)."""
    index = RNG.integers(0, 32, size=(10, 10))
    index[7, 3] = bad
    got = arrpos.relative_bias(da.from_array(np.ones((32, 2))), da.from_array(index, chunks=5))
    with pytest.raises(ValueError, match="index"):
        got.compute(scheduler="sync")


@pytest.mark.parametrize("case", [
    # x shape, x chunks, kernel
    ((2, 50, 16), (1, 7, 5), 5),  # sequence and channels chunked, a last chunk of 1
    ((3, 40, 8), (2, 40, 8), 4),  # even kernel; sequence whole
    ((2, 30, 6), (2, 1, 6), 5),  # chunks shorter than the reach: merged to it
    ((1, 3, 4), (1, 1, 2), 7),  # a sequence shorter than the reach: taken whole
])
@pytest.mark.parametrize("activation", [None, "gelu", "tanh"])
@pytest.mark.parametrize("dtype", _DTYPES)
def test_conv_positional_equals_numpy(case, activation, dtype):
    shape, chunks, k = case
    x = RNG.standard_normal(shape).astype(dtype)
    w = RNG.standard_normal((k, shape[-1])).astype(dtype)
    b = RNG.standard_normal(shape[-1]).astype(dtype)
    for bias, residual in ((b, True), (None, False)):
        got = arrpos.conv_positional(da.from_array(x, chunks=chunks), da.from_array(w),
                                     None if bias is None else da.from_array(bias),
                                     activation=activation, residual=residual)
        ref = arrpos.conv_positional(x, w, bias, activation=activation, residual=residual)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(_compute(got)[0], ref)


@pytest.mark.parametrize("x_chunks, w_chunks", [
    ((1, 4, 3, 4), (3, 4, 2)), ((2, 9, 11, 6), (3, 4, 6)), ((1, 2, 2, 1), (1, 1, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_positional_2d_equals_numpy(x_chunks, w_chunks, dtype):
    """The halo along both grid axes (an asymmetric 3x4 kernel), channels chunked unlike the
    weight's: each chunk reads its neighbours' rows and columns as the whole grid does."""
    x = RNG.standard_normal((2, 9, 11, 6)).astype(dtype)
    w = RNG.standard_normal((3, 4, 6)).astype(dtype)
    b = RNG.standard_normal(6).astype(dtype)
    dx = da.from_array(x, chunks=x_chunks)
    for activation in (None, "gelu"):
        got = arrpos.conv_positional_2d(dx, da.from_array(w, chunks=w_chunks),
                                        da.from_array(b, chunks=w_chunks[-1]),
                                        activation=activation)
        _one_task_per_chunk(got, "conv_positional")
        # batch and grid axes keep x's chunks (merged where shorter than the halo)
        assert got.chunks[0] == dx.chunks[0]
        np.testing.assert_array_equal(
            _compute(got)[0], arrpos.conv_positional_2d(x, w, b, activation=activation))


def test_conv_positional_graph_one_task_per_chunk_and_halo_only_where_chunked():
    x = da.ones((4, 64, 1, 32), chunks=(1, 16, 1, 32))
    w = da.ones((5, 1, 32))
    y = arrpos.conv_positional_2d(x, w)
    _one_task_per_chunk(y, "conv_positional")
    assert y.chunks == x.chunks
    assert any(name.startswith("overlap") for name in y.dask.layers)
    whole = arrpos.conv_positional_2d(da.ones((4, 64, 1, 32), chunks=(1, 64, 1, 16)), w)
    _one_task_per_chunk(whole, "conv_positional")
    assert not any(name.startswith("overlap") for name in whole.dask.layers)
    assert len(whole.__dask_graph__()) <= 3 * 8 + 4  # inputs, the op, nothing per element


def test_family_graphs_compute_nothing_while_built_and_pickle():
    from dask.local import get_sync

    slopes = _exploding(arrpos.alibi_slopes(4), 2)
    mask = _exploding(np.ones((3, 10), bool), (1, 5))
    pos = _exploding(np.arange(12), 5)
    table = _exploding(np.ones((8, 4)), (4, 2))
    index = _exploding(np.zeros((6, 6), np.int64), 3)
    x = _exploding(np.ones((2, 12, 8)), (1, 5, 4))
    with TaskCounter() as counted:
        lazy = [arrpos.alibi_bias_from_mask(slopes, mask),
                arrpos.alibi_bias_from_positions(slopes, pos, pos),
                arrpos.relative_bias(table, index),
                arrpos.conv_positional(x, da.ones((3, 8)), activation="gelu")]
    assert counted.count == 0
    for a in lazy:
        with pytest.raises(AssertionError, match="graph was only being built"):
            a.compute(scheduler="sync")
    xs = RNG.standard_normal((2, 12, 8))
    arr = arrpos.conv_positional(da.from_array(xs, chunks=(1, 5, 4)), da.ones((3, 8)))
    graph = pickle.loads(pickle.dumps(dict(arr.__dask_graph__())))
    blocks = get_sync(graph, arr.__dask_keys__())
    np.testing.assert_array_equal(da.core.concatenate3(blocks),
                                  arrpos.conv_positional(xs, np.ones((3, 8))))


# --- resample: the grid axes whole, one task per chunk of the leading axes and channels ------


def _resample_case(dtype, lead=(3,), old=(6, 5), c=10, prefix=1):
    return (RNG.standard_normal(lead + (prefix + int(np.prod(old)), c)) * 3).astype(dtype)


def test_resample_takes_the_dask_front_end():
    from arrpos import _taps

    grid = da.ones((2, 4, 4, 8), chunks=(1, 4, 4, 4))
    taps = (_taps.host_taps(4, 6, "cubic", True, False, False),) * 2
    assert _chosen("resample_grid", (grid, None), taps=taps, dtype=np.float64) == "graph"
    prefix = da.ones((2, 1, 8), chunks=(1, 1, 4))
    assert _chosen("resample_grid", (grid, prefix), taps=taps, dtype=np.float64) == "graph"


@pytest.mark.parametrize("chunks", [(1, 31, 4), (2, 7, 10), (3, 31, 3)])
@pytest.mark.parametrize("options", [dict(method="cubic", antialias=True),
                                     dict(method="linear", align_corners=True),
                                     dict(method="cubic", antialias=False)])
@pytest.mark.parametrize("dtype", _DTYPES)
def test_resample_equals_numpy_bit_for_bit(chunks, options, dtype):
    """Batch and channel chunks kept, one task each; rows chunked across the grid (and the
    class token) are merged first: an output row reads input rows all along both axes. A
    chunk of one channel (10 in chunks of 3) is merged with its neighbour: the generic code
    sums a one-channel grid's 9 taps of a shrink pairwise, not in order."""
    table = _resample_case(dtype)
    dt = da.from_array(table, chunks=chunks)
    channels = (3, 3, 4) if chunks[2] == 3 else dt.chunks[2]
    for new in ((9, 4), (3, 3)):
        got = arrpos.resample(dt, new, old_size=(6, 5), prefix_tokens=1, **options)
        _one_task_per_chunk(got, "resample_grid")
        assert got.chunks[0] == dt.chunks[0] and got.chunks[2] == channels
        assert got.numblocks[1] == 1
        ref = arrpos.resample(table, new, old_size=(6, 5), prefix_tokens=1, **options)
        out = _compute(got)[0]
        assert out.dtype == ref.dtype and out.tobytes() == ref.tobytes()


def test_resample_1d_and_no_prefix():
    table = _resample_case(np.float32, lead=(), old=(12,), c=6, prefix=0)
    got = arrpos.resample(da.from_array(table, chunks=(5, 2)), 20, method="linear")
    _one_task_per_chunk(got, "resample_grid")
    assert got.numblocks == (1, 3)
    ref = arrpos.resample(table, 20, method="linear")
    assert _compute(got)[0].tobytes() == ref.tobytes()


def test_resample_grids_and_relative_table_on_dask():
    table = _resample_case(np.float64, lead=(), old=(4, 4), c=6, prefix=0)
    grids = [(2, 3), (3, 3)]
    got = arrpos.resample_grids(da.from_array(table, chunks=(4, 3)), grids, old_size=(4, 4))
    ref = arrpos.resample_grids(table, grids, old_size=(4, 4))
    assert np.asarray(_compute(got)[0]).tobytes() == np.asarray(ref).tobytes()
    rel = RNG.standard_normal((13 * 13, 4))
    got = arrpos.resize_relative_table(da.from_array(rel, chunks=(50, 2)), (12, 12),
                                       method="cubic")
    ref = arrpos.resize_relative_table(rel, (12, 12), method="cubic")
    assert _compute(got)[0].tobytes() == ref.tobytes()


def test_resample_three_grid_axes_on_dask():
    # Video Swin's tables: three window axes (one blockwise index per grid axis, any number)
    rel = RNG.standard_normal((5 * 5 * 5 + 2, 4))
    got = arrpos.resize_relative_table(da.from_array(rel, chunks=(40, 2)), (4, 3, 3),
                                       extra_tokens=2)
    layers = {k[0] if isinstance(k, tuple) else k for k in got.__dask_graph__().keys()}
    assert any(str(n).startswith("arrpos-resample_grid-") for n in layers)
    ref = arrpos.resize_relative_table(rel, (4, 3, 3), extra_tokens=2)
    assert _compute(got)[0].tobytes() == np.asarray(ref).tobytes()


def test_resample_graph_computes_nothing_while_built_and_pickles():
    from dask.local import get_sync

    with TaskCounter() as counted:
        lazy = arrpos.resample(_exploding(np.ones((2, 1 + 16, 8)), (1, 5, 4)), (6, 6),
                               prefix_tokens=1, method="cubic", antialias=True)
    assert counted.count == 0
    with pytest.raises(AssertionError, match="graph was only being built"):
        lazy.compute(scheduler="sync")
    table = _resample_case(np.float32, lead=(2,), old=(4, 4), c=8)
    arr = arrpos.resample(da.from_array(table, chunks=(1, 17, 4)), (6, 6), prefix_tokens=1)
    graph = pickle.loads(pickle.dumps(dict(arr.__dask_graph__())))
    blocks = get_sync(graph, arr.__dask_keys__())
    assert da.core.concatenate3(blocks).tobytes() == \
        arrpos.resample(table, (6, 6), prefix_tokens=1).tobytes()


# --- dask.distributed: worker processes ---------------------------------------------------------

_CLUSTER_SCRIPT = textwrap.dedent("""
    import numpy as np, dask, dask.array as da, arrpos
    from dask.distributed import Client, LocalCluster

    if __name__ == "__main__":
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            inv, _ = arrpos.rope_frequencies(64)
            pos = da.arange(20000, chunks=3000)
            t = arrpos.sinusoidal(pos, 64)
            c, s = arrpos.rope_cos_sin(pos, da.from_array(inv), dtype=np.float32)
            x = np.random.default_rng(0).standard_normal((2, 20000, 2, 64)).astype(np.float32)
            y = arrpos.apply_rope(da.from_array(x, chunks=(1, 5000, 2, 64)), c[:, None],
                                  s[:, None])
            got = client.compute([t, c, s, y], sync=True)
            rc, rs = arrpos.rope_cos_sin(np.arange(20000), inv, dtype=np.float32)
            refs = [arrpos.sinusoidal(np.arange(20000), 64), rc, rs,
                    arrpos.apply_rope(x, rc[:, None], rs[:, None])]
            for g, r in zip(got, refs):
                np.testing.assert_array_equal(g, r)
            pids = set(client.run(__import__("os").getpid).values())
            assert len(pids) == 2 and __import__("os").getpid() not in pids
        # the multiprocessing scheduler: canvases pickled to worker processes, chunks back
        got = dask.compute(t, c, s, y, scheduler="processes", num_workers=2)
        for g, r in zip(got, refs):
            np.testing.assert_array_equal(g, r)
        print("cluster ok")
""")


def test_local_cluster_with_worker_processes(tmp_path):
    pytest.importorskip("distributed")
    script = tmp_path / "cluster.py"
    script.write_text(_CLUSTER_SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=240, env=env, cwd=str(tmp_path))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the LocalCluster run did not finish in 240 s: {exc.stderr}")
    assert done.returncode == 0 and "cluster ok" in done.stdout, done.stderr[-3000:]


def test_docs_distributed_code_blocks_run(tmp_path):
    """docs/distributed.md's code blocks, in order, as one script (its cluster block starts
    worker processes, hence a subprocess with a timeout)."""
    import re

    pytest.importorskip("distributed")
    text = open(os.path.join(ROOT, "docs", "distributed.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    script = tmp_path / "docs_distributed.py"
    script.write_text("\n".join(blocks) + "\nprint('docs ok')\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=240, env=env, cwd=str(tmp_path))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"docs/distributed.md did not finish in 240 s: {exc.stderr}")
    assert done.returncode == 0 and "docs ok" in done.stdout, done.stderr[-3000:]


def test_kernels_in_a_dask_task_run_on_one_thread(monkeypatch):
    from arrpos._backends import one_thread_per_call, one_thread_wanted

    assert not one_thread_wanted()
    with one_thread_per_call():
        assert one_thread_wanted()
        host = _dispatch.driver("host")
        if host is not None:
            assert host.thread_count(1 << 24) == 1
    assert not one_thread_wanted()
    seen = []
    real = _dispatch.call

    def recording(op, xp, *args, **kwargs):
        seen.append((type(args[0]).__module__.split(".")[0], one_thread_wanted()))
        return real(op, xp, *args, **kwargs)

    monkeypatch.setattr(_dispatch, "call", recording)
    arrpos.sinusoidal(da.arange(4, chunks=2), 8).compute(scheduler="threads")
    # the public call on the Dask array, then one call per chunk on one thread each
    assert seen == [("dask", False), ("numpy", True), ("numpy", True)], seen


def test_sinusoid_family_on_dask():
    coords = arrpos.grid_coords((6, 5))
    ref = arrpos.sinusoidal_nd(coords, 16)
    got = arrpos.sinusoidal_nd(da.from_array(coords, chunks=(2, 5, 2)), 16)
    np.testing.assert_array_equal(got.compute(), ref)
    t = np.array([0.0, 3.5, 999.0])
    np.testing.assert_array_equal(
        arrpos.timestep_embedding(da.from_array(t, chunks=2), 32).compute(),
        arrpos.timestep_embedding(t, 32))


# --- compute() returns the tasks' canvas instead of joining the chunks ---------------------------


def _canvas_cases():
    """(name, Dask result, NumPy reference) for the ops whose chunk tasks share a canvas."""
    inv, _ = arrpos.rope_frequencies(32)
    pos = da.arange(1000, chunks=300)
    c, s = arrpos.rope_cos_sin(pos, da.from_array(inv), dtype=np.float32)
    rc, rs = arrpos.rope_cos_sin(np.arange(1000), inv, dtype=np.float32)
    x = RNG.standard_normal((2, 1000, 3, 32)).astype(np.float32)
    y = arrpos.apply_rope(da.from_array(x, chunks=(1, 300, 3, 32)), c[:, None], s[:, None])
    return [("sinusoidal", arrpos.sinusoidal(pos, 48), arrpos.sinusoidal(np.arange(1000), 48)),
            ("cos", c, rc), ("sin", s, rs),
            ("apply_rope", y, arrpos.apply_rope(x, rc[:, None], rs[:, None]))]


def _whole_canvas(result) -> bool:
    """Whether ``result`` is a canvas handed out whole (the join was skipped)."""
    from arrpos._backends.dask.canvas import Canvas

    return isinstance(getattr(result.base, "base", None), Canvas)


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_compute_returns_one_plain_array_without_the_join(scheduler):
    for name, arr, ref in _canvas_cases():
        got = arr.compute(scheduler=scheduler)
        assert type(got) is np.ndarray and got.flags.c_contiguous and got.flags.writeable, name
        assert got.shape == ref.shape and got.dtype == ref.dtype, name
        np.testing.assert_array_equal(got, ref, err_msg=name)
        assert _whole_canvas(got), name  # the chunks were written in place, not concatenated
        got[...] = 0  # writable through and through


def test_computing_twice_gives_independent_results():
    for name, arr, ref in _canvas_cases():
        first = arr.compute(scheduler="threads")
        second = arr.compute(scheduler="threads")
        assert not np.shares_memory(first, second), name
        first[...] = -1
        third = arr.compute(scheduler="threads")  # may reuse freed memory, never live results
        np.testing.assert_array_equal(second, ref, err_msg=name)
        np.testing.assert_array_equal(third, ref, err_msg=name)
        assert (first == -1).all() and not np.shares_memory(third, first), name


def test_persisted_results_are_plain_dask_arrays_and_computes_copy():
    for name, arr, ref in _canvas_cases():
        kept = arr.persist(scheduler="threads")
        assert type(kept) is da.Array, name
        a, b = kept.compute(), kept.compute()
        assert not np.shares_memory(a, b), name
        a[...] = -1
        np.testing.assert_array_equal(kept.compute(), ref, err_msg=name)
        np.testing.assert_array_equal(b, ref, err_msg=name)
        (kept2,) = dask.persist(arr, scheduler="sync")
        np.testing.assert_array_equal((kept2 + 1).compute(), ref + 1, err_msg=name)


def test_derived_arrays_are_plain_and_correct():
    for name, arr, ref in _canvas_cases():
        for derived, expected in [(arr[1:7], ref[1:7]), (arr + 1, ref + 1), (arr[::2], ref[::2]),
                                  (arr.T, ref.T), (arr.rechunk(arr.shape), ref)]:
            assert type(derived) is da.Array, name
            got = derived.compute()
            np.testing.assert_array_equal(got, expected, err_msg=name)
            assert not _whole_canvas(got), name


def test_computed_together_with_other_collections():
    (n1, t, rt), (_, c, rc), (_, s, rs), (_, y, ry) = _canvas_cases()
    got = dask.compute(t, t + 1, t[:300], c, s, y, y.sum(), scheduler="threads")
    for g, r in zip(got, [rt, rt + 1, rt[:300], rc, rs, ry]):
        np.testing.assert_array_equal(g, r)
    np.testing.assert_allclose(got[6], ry.sum(dtype=np.float64), rtol=1e-4)
    whole = got[0]
    whole[...] = -1  # the others stay as they were
    for g, r in zip(got[1:6], [rt + 1, rt[:300], rc, rs, ry]):
        np.testing.assert_array_equal(g, r)
    # the same array twice: one result, as Dask gives for any array (values checked)
    a, b = dask.compute(y, y, scheduler="threads")
    np.testing.assert_array_equal(a, ry)
    np.testing.assert_array_equal(b, ry)


def test_chunks_handed_out_as_delayed_are_never_in_the_whole_result():
    for name, arr, ref in _canvas_cases():
        blocks = arr.to_delayed().ravel().tolist()
        got = dask.compute(arr, *blocks, scheduler="threads")
        whole, parts = got[0], got[1:]
        np.testing.assert_array_equal(whole, ref, err_msg=name)
        assert not any(np.shares_memory(whole, p) for p in parts), name
        grid = np.empty(len(parts), dtype=object)
        grid[:] = parts
        np.testing.assert_array_equal(
            da.core.concatenate3(grid.reshape(arr.numblocks).tolist()), ref, err_msg=name)
        alone = dask.compute(*blocks, scheduler="sync")  # chunks alone: still equal
        np.testing.assert_array_equal(alone[0], ref[tuple(slice(0, n[0]) for n in arr.chunks)])


def test_canvas_only_where_each_chunk_is_one_contiguous_region():
    from arrpos._backends.dask import canvas as _dask_canvas

    assert _dask_canvas.fits(((300, 300, 100), (48,)))
    assert _dask_canvas.fits(((1, 1), (300, 200), (3,), (32,)))
    assert not _dask_canvas.fits(((2, 2), (300, 200), (3,), (32,)))  # rows of a chunk apart
    assert not _dask_canvas.fits(((2,), (300,), (1, 2), (32,)))
    assert not _dask_canvas.fits(((np.nan, np.nan), (8,)))
    assert not _dask_canvas.fits(((0,), (8,)))
    # heads chunked: no canvas, Dask's join, same values
    x = RNG.standard_normal((2, 64, 4, 16)).astype(np.float32)
    c, s = arrpos.rope_cos_sin(np.arange(64), np.ones(8) / 7, dtype=np.float32)
    y = arrpos.apply_rope(da.from_array(x, chunks=(2, 32, 2, 16)), da.from_array(c[:, None]),
                          da.from_array(s[:, None]))
    assert type(y) is da.Array
    np.testing.assert_array_equal(y.compute(), arrpos.apply_rope(x, c[:, None], s[:, None]))


def test_equal_graphs_of_different_data_never_share_a_canvas():
    a = arrpos.sinusoidal(da.arange(0, 600, chunks=200), 16)
    b = arrpos.sinusoidal(da.arange(600, 1200, chunks=200), 16)
    ga, gb = dask.compute(a, b, scheduler="threads")
    np.testing.assert_array_equal(ga, arrpos.sinusoidal(np.arange(600), 16))
    np.testing.assert_array_equal(gb, arrpos.sinusoidal(np.arange(600, 1200), 16))


def test_in_process_cluster_results_are_independent():
    pytest.importorskip("distributed")
    from dask.distributed import Client, LocalCluster, futures_of

    from arrpos._backends.dask import canvas as _dask_canvas

    (_, t, rt), _, _, (_, y, ry) = _canvas_cases()
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        a, b = client.compute([y, y], sync=True)
        c = client.compute(y, sync=True)
        kept = client.persist(t)
        d, e = kept.compute(), kept.compute()
        # workers allocate chunk by chunk (their memory manager frees and spills chunks)
        blocks = client.gather(futures_of(kept))
        assert all(_dask_canvas._owner(blk) is None for blk in blocks)
    for g in (a, b, c):
        np.testing.assert_array_equal(g, ry)
    assert not np.shares_memory(a, c) and not np.shares_memory(d, e)
    d[...] = -1
    np.testing.assert_array_equal(e, rt)


def test_sin_chunks_are_computed_where_their_cos_task_did_not_write():
    """A sin chunk is the one its cos task kept in the same process, else (another worker
    process) it is computed there: never an unwritten region."""
    from dask._task_spec import Task

    from arrpos._backends.dask import canvas as _dask_canvas
    from arrpos._backends.dask import graph as _dask

    inv, _ = arrpos.rope_frequencies(16)
    ref = arrpos.rope_cos_sin(np.arange(200), inv, dtype=np.float32)[1]
    opts = dict(layout="half", attention_factor=1.0, axes=None, dtype=np.dtype(np.float32))
    region = (slice(100, 160, None),)
    cos_block = np.zeros((60, ref.shape[1]), np.float32)
    # positions as they are, or as the task that makes them (run only where computed here)
    for positions in (np.arange(100, 160), Task(None, np.arange, 100, 160)):
        for enabled in (True, False):
            canvas = _dask_canvas.new_canvas(ref.shape, np.float32)
            canvas.enabled = enabled
            got = _dask._rope_sin_block(cos_block, positions, inv, opts, canvas, region)
            np.testing.assert_array_equal(got, ref[100:160])
            assert (_dask_canvas._owner(got) is canvas) == enabled


def test_canvases_off_on_workers_and_for_outputs_too_large(monkeypatch):
    """Where a canvas is off (dask.distributed workers, outputs above the cap) each chunk is
    allocated on its own, as without canvases, and compute() joins them."""
    from arrpos._backends.dask import canvas as _dask_canvas

    monkeypatch.setattr(_dask_canvas, "_cap", lambda: 1000)
    for name, arr, ref in _canvas_cases():
        got = arr.compute(scheduler="threads")
        np.testing.assert_array_equal(got, ref, err_msg=name)
        assert not _whole_canvas(got), name
        blocks = dask.compute(*arr.to_delayed().ravel(), scheduler="sync")
        assert all(_dask_canvas._owner(b) is None for b in blocks), name

"""Dask: the kernelised ops as per-chunk task graphs, against the NumPy kernel on the same data.

Rows: the threaded scheduler (graph building and the final concatenation included: what
``.compute()`` costs), and a ``LocalCluster`` of worker processes with 1 and 2 workers, where
the result is either gathered to the client (pickled across processes) or persisted on the
workers (the usual case when the next step also runs there).
"""
from __future__ import annotations

import warnings

import numpy as np

import arrpos

from ._timing import interleaved

SIN = (65536, 8192, 512)  # positions, chunk, dim
SHAPE, CHUNKS = (4, 2048, 32, 128), (1, 512, 32, 128)
TABLE = (65536, 8192, 128)  # positions, chunk, rotary width


def _no_rows(positions, width, dtype):
    """A task that makes no table: a chunk of table shape without memory behind it."""
    return np.broadcast_to(np.zeros((), dtype), positions.shape + (width,))


def _no_rotation(x, cos, sin):
    """A task that rotates nothing: its chunk of ``x`` as it is."""
    return x


def _cases(da, place=lambda a: a):
    """name, size, NumPy call, Dask graph builder (called inside the timing), Dask's floor: a
    graph of the same inputs and output chunks whose tasks do no work, and Dask's own
    ``ones(shape, chunks) * 1`` of the output's shape, chunks and dtype (one table for
    rope_cos_sin's pair). ``place`` puts the Dask inputs where they live (``client.persist``:
    on the workers, as real data is)."""
    rng = np.random.default_rng(0)
    inv, _ = arrpos.rope_frequencies(SHAPE[-1])
    n, chunk, dim = SIN
    pos, dpos = np.arange(n), da.arange(n, chunks=chunk)
    tn, tchunk, width = TABLE
    inv_t, _ = arrpos.rope_frequencies(width)
    tpos, dtpos = np.arange(tn), da.arange(tn, chunks=tchunk)
    dinv_t = da.from_array(inv_t)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    dx = place(da.from_array(x, chunks=CHUNKS))
    cos, sin = arrpos.rope_cos_sin(np.arange(SHAPE[1]), inv, dtype=np.float32)
    cos, sin = cos[:, None, :], sin[:, None, :]
    dcos = place(da.from_array(cos, chunks=(CHUNKS[1], 1, SHAPE[3])))
    dsin = place(da.from_array(sin, chunks=(CHUNKS[1], 1, SHAPE[3])))

    def no_table(p, width, dtype):
        return p.map_blocks(_no_rows, width, dtype, new_axis=1,
                            chunks=p.chunks + ((width,),), dtype=dtype)

    return [
        ("sinusoidal", f"({n}, {dim}) f64, chunks {chunk}",
         lambda: arrpos.sinusoidal(pos, dim), lambda: arrpos.sinusoidal(dpos, dim),
         lambda: no_table(dpos, dim, np.float64),
         lambda: da.ones((n, dim), chunks=(chunk, dim), dtype=np.float64) * 1),
        ("rope_cos_sin", f"({tn}, {width}) x2 f32, chunks {tchunk}",
         lambda: arrpos.rope_cos_sin(tpos, inv_t, dtype=np.float32),
         lambda: arrpos.rope_cos_sin(dtpos, dinv_t, dtype=np.float32),
         lambda: (no_table(dtpos, width, np.float32), no_table(dtpos, width, np.float32)),
         lambda: da.ones((tn, width), chunks=(tchunk, width), dtype=np.float32) * 1),
        ("apply_rope", f"{SHAPE} f32, chunks {CHUNKS}",
         lambda: arrpos.apply_rope(x, cos, sin), lambda: arrpos.apply_rope(dx, dcos, dsin),
         lambda: da.map_blocks(_no_rotation, dx, dcos, dsin, dtype=dx.dtype),
         lambda: da.ones(SHAPE, chunks=CHUNKS, dtype=np.float32) * 1),
    ]


def _threaded_rows(dask, cases, rounds):
    """compute() on the threaded scheduler; the note gives the per-chunk tasks alone (persist:
    chunks computed, not handed over as one array) and Dask's floor: the same graph shape
    persisted with tasks that do no work, which no kernel can get under. The tasks write their
    chunks into one result buffer, which compute() returns as it is: no final join. The graph's
    cost against Dask's own: the same compute() of ``ones(shape, chunks) * 1`` over the
    output's chunks (graph built inside the timing too)."""
    rows = []
    for name, size, numpy_call, build, floor, ones in cases:
        t = interleaved({
            "numpy": numpy_call,
            "dask": lambda build=build: dask.compute(build(), scheduler="threads"),
            "chunks": lambda build=build: dask.persist(build(), scheduler="threads"),
            "floor": lambda floor=floor: dask.persist(floor(), scheduler="threads"),
            "ones": lambda ones=ones: dask.compute(ones(), scheduler="threads"),
        }, rounds=rounds)
        rows.append((f"{name}, Dask threaded", size, t["dask"] * 1e3,
                     f"{t['dask'] / t['numpy']:.2f} x NumPy kernel; "
                     f"{t['dask'] / t['ones']:.2f} x Dask ones * 1",
                     f"tasks alone {t['chunks'] / t['numpy']:.2f} x; Dask with no work "
                     f"{t['floor'] / t['numpy']:.2f} x; NumPy kernel {t['numpy'] * 1e3:.1f} ms; "
                     f"Dask ones * 1 {t['ones'] * 1e3:.1f} ms"))
    return rows


GRAPH = (4096, 512, 64)  # positions, chunk, width: a small table, the graph's cost shows


def _graph_rows(dask, da, rounds):
    """What the graph itself costs: compute() of a small table in chunks (graph built inside
    the timing), against Dask's ``ones(shape, chunks) * 1`` over the output's chunks."""
    n, chunk, width = GRAPH
    inv, _ = arrpos.rope_frequencies(width)
    dinv = da.from_array(inv)
    cases = [
        ("sinusoidal", f"({n}, {width}) f32, chunks {chunk}",
         lambda: arrpos.sinusoidal(da.arange(n, chunks=chunk), width, dtype=np.float32)),
        ("rope_cos_sin", f"({n}, {width}) x2 f32, chunks {chunk}",
         lambda: arrpos.rope_cos_sin(da.arange(n, chunks=chunk), dinv, dtype=np.float32)),
    ]
    t = interleaved({
        "ones": lambda: dask.compute(
            da.ones((n, width), chunks=(chunk, width), dtype=np.float32) * 1, scheduler="threads"),
        **{name: lambda build=build: dask.compute(build(), scheduler="threads")
           for name, _, build in cases}}, rounds=rounds)
    return [(f"{name} graph, Dask threaded", size, t[name] * 1e3,
             f"{t[name] / t['ones']:.2f} x Dask ones * 1",
             f"Dask ones * 1 over the same chunks {t['ones'] * 1e3:.2f} ms")
            for name, size, _ in cases]


def _arrays(result):
    return result if isinstance(result, tuple) else (result,)


def _cluster_rows(da, workers, rounds):
    from dask.distributed import Client, LocalCluster, wait

    rows = []
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client, \
            warnings.catch_warnings():
        # the inputs go to the workers once, in the graph, on purpose (client.persist)
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        for name, size, numpy_call, build, _, _ in _cases(da, place=client.persist):
            def gathered(build=build):
                client.compute(build(), sync=True)

            def persisted(build=build):
                wait(client.persist(build()))

            t = interleaved({"numpy": numpy_call, "gathered": gathered, "persisted": persisted},
                            rounds=rounds, warmup=1)
            rows.append((f"{name}, LocalCluster {workers} worker{'s' * (workers > 1)}", size,
                         t["persisted"] * 1e3,
                         f"{t['persisted'] / t['numpy']:.2f} x NumPy kernel (persisted)",
                         f"gathered to the client: {t['gathered'] / t['numpy']:.2f} x"))
    return rows


def run(quick=False, rounds=None):
    try:
        import dask
        import dask.array as da
    except ImportError:
        return [], "dask: not installed, nothing to compare"
    r = rounds or (3 if quick else 7)
    rows = _threaded_rows(dask, _cases(da), r) + _graph_rows(dask, da, 3 * r)
    note = None
    try:
        import distributed  # noqa: F401
    except ImportError:
        note = "dask: distributed not installed, no LocalCluster rows"
    else:
        for workers in ((2,) if quick else (1, 2)):
            rows += _cluster_rows(da, workers, max(3, r - 4))
    return rows, note


if __name__ == "__main__":
    from ._timing import format_table

    got, note = run()
    print(format_table([(a, b, f"{ms:.1f}", c, d) for a, b, ms, c, d in got],
                       ["kernel", "size", "ms", "vs NumPy", "note"]))

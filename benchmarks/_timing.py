"""Interleaved timing: candidates and baselines run in turns (A, B, A, B, ...) after a warm-up,
and each is summarised by its median, so drift on a shared machine hits all of them alike."""
from __future__ import annotations

import statistics
import time


def interleaved(funcs: dict, *, rounds: int = 15, warmup: int = 2, min_time: float = 0.02):
    """Median seconds per call of each function in ``funcs``, timed in interleaved rounds.

    Fast calls are repeated inside a round until it lasts ``min_time``.
    """
    reps = {}
    for name, fn in funcs.items():
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-7)
        reps[name] = max(1, int(min_time / one))
    samples = {name: [] for name in funcs}
    for _ in range(rounds):
        for name, fn in funcs.items():
            n = reps[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(v) for name, v in samples.items()}


def one_thread(fn):
    """``fn`` as a call whose compiled kernels use one CPU thread (``one_thread_per_call``, as a
    Dask task runs them): the one-thread rows."""
    from arrpos._backends import one_thread_per_call

    def call():
        with one_thread_per_call():
            return fn()
    return call


def fill_text(t, mine, stream):
    """A table row's time as multiples of ``fill`` of the same buffer (ordinary stores: from
    the L3 cache where the buffer fits, as a repeated fill finds it) and of the streaming fill
    (the write limit, which the table kernels' streaming stores meet)."""
    return f"{t[mine] / t['fill']:.2f} x fill, {t[mine] / t[stream]:.2f} x streaming fill"


def format_table(rows, headers) -> str:
    cols = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(headers))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                               for i, (c, w) in enumerate(zip(r, widths)))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in cols[1:]])

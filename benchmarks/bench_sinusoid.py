"""Sinusoid tables: the compiled kernel against memory-bound and user-code baselines."""
from __future__ import annotations

import numpy as np

from arrpos import _dispatch
from arrpos._exact import power_frequencies

from ._timing import fill_text, interleaved, one_thread

FULL_SIZES = [(8192, 1024), (65536, 512)]
QUICK_SIZES = [(8192, 1024)]


def numpy_formula(n, d, out):
    """The table as tutorials and model files write it (float32 angles)."""
    pos = np.arange(n, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, d, 2, dtype=np.float32) * np.float32(-np.log(10000.0) / d))
    out[:, 0::2] = np.sin(pos * div)
    out[:, 1::2] = np.cos(pos * div)


def run(quick=False, rounds=None):
    impl, host = _dispatch.front_end("host.numpy"), _dispatch.driver("host")
    if impl is None:
        return [], "sinusoid: compiled extension unavailable, nothing to compare"
    rows = []
    for n, d in (QUICK_SIZES if quick else FULL_SIZES):
        hi, lo = power_frequencies(d // 2, d, 10000.0)
        pos = np.arange(n)
        out = np.empty((n, d), np.float32)
        ref = np.empty((n, d), np.float32)
        out.fill(1.0)
        ref.fill(1.0)
        def kernel():
            impl.sinusoid_table(pos, hi, lo, layout="interleaved", dtype=np.float32, width=d,
                                xp=None, out=out)

        def stream_fill():
            host.stream_fill(out)

        t = interleaved(  # (fill is one thread too)
            {"kernel": kernel, "one thread": one_thread(kernel), "fill": lambda: out.fill(0.0),
             "stream": stream_fill, "stream 1": one_thread(stream_fill),
             "numpy": lambda: numpy_formula(n, d, ref)},
            rounds=rounds or (5 if quick else 25),
        )
        rows.append(("sinusoidal table (interleaved)", f"({n}, {d}) f32", t["kernel"] * 1e3,
                     fill_text(t, "kernel", "stream"),
                     f"{t['numpy'] / t['kernel']:.1f} x faster than numpy formula"))
        rows.append(("sinusoidal table (interleaved), 1 thread", f"({n}, {d}) f32",
                     t["one thread"] * 1e3, fill_text(t, "one thread", "stream 1"), ""))
    return rows, None

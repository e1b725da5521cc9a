"""Threads that never hurt: ``apply_rope`` into ``out=`` from 2 KiB to 128 MiB with the kernels'
threads (the default call) against the same call held to one thread, on an idle machine and
while another process keeps one core busy (a spinning Python child). The ratio default/1-thread
is the claim: above 1 the threads cost time; the pool is meant to stay at or below ~1 even when
the core a worker would use is taken."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

import arrpos
from arrpos import _dispatch

from ._timing import interleaved

SIZES_KIB = (2, 32, 512, 8 << 10, 128 << 10)  # output bytes / 1024


def _case(kib):
    dim = 128
    rows = kib * 1024 // (dim * 4)  # rows of x: 32 heads per position, fewer below 16 KiB
    heads = min(32, rows)
    seq = rows // heads
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, seq, heads, dim), dtype=np.float32)
    inv, _ = arrpos.rope_frequencies(dim)
    cos, sin = arrpos.rope_cos_sin(np.arange(seq), inv, dtype=np.float32)
    return x, cos[:, None], sin[:, None], np.empty_like(x)


def _held(one_thread, fn):
    """``fn`` run with the kernels held to one thread or not: the same switch either way
    (``one_thread_per_call``'s flag), so both calls pay the same for it."""
    from arrpos._backends import _CALLER

    def call():
        before = getattr(_CALLER, "one_thread", False)
        _CALLER.one_thread = one_thread
        try:
            fn()
        finally:
            _CALLER.one_thread = before

    return call


def _ratios(rounds, sizes):
    out = {}
    for kib in sizes:
        x, cos, sin, res = _case(kib)
        call = lambda: arrpos.apply_rope(x, cos, sin, out=res)  # noqa: E731
        t = interleaved({"default": _held(False, call), "one": _held(True, call)},
                        rounds=rounds)
        out[kib] = (t["default"], t["one"])
    return out


def run(quick=False, rounds=None):
    mod = _dispatch.driver("host")
    if mod is None or mod.max_threads() < 2:
        return [], "threads: one kernel thread here (or no compiled kernels), nothing to compare"
    r = rounds or (5 if quick else 15)
    sizes = SIZES_KIB[::2] if quick else SIZES_KIB
    idle = _ratios(r, sizes)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = _ratios(r, sizes)
    finally:
        spinner.kill()
        spinner.wait()
    rows = []
    for kib in sizes:
        (d0, o0), (d1, o1) = idle[kib], busy[kib]
        size = f"{kib} KiB" if kib < 1024 else f"{kib >> 10} MiB"
        rows.append(("apply_rope out=, default threads / 1 thread", f"{size} f32", d1 * 1e3,
                     f"idle {d0 / o0:.2f}, one core busy {d1 / o1:.2f}",
                     f"{mod.max_threads()} threads at most"))
    return rows, None

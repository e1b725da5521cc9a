"""The portable level against the vector levels (issue 28): the same kernel call at
``ARRPOS_SIMD_LEVEL=0`` (plain C++ that the compiler vectorises: every CPU without a hand-written
level) and at AVX2 (level 1), in interleaved rounds of one process, one thread. The claim is the
ratio portable / AVX2 (targets: apply_rope float32 at most 1.5, the float32 tables at most 3);
the best level of this CPU is timed too where it is above AVX2.

``python -m benchmarks.bench_simd`` prints the rows (``--quick``: smaller sizes)."""
from __future__ import annotations

import numpy as np

import arrpos
from arrpos import _dispatch
from arrpos._exact import power_frequencies

from ._timing import interleaved, one_thread

APPLY = (4, 2048, 32, 128)
APPLY_QUICK = (1, 512, 32, 128)
SINUSOID, SINUSOID_QUICK = (65536, 512), (8192, 512)
ROPE_TABLE, ROPE_TABLE_QUICK = (32768, 128), (8192, 128)  # (positions, head dim)


def _at_level(mod, level, fn):
    def call():
        mod.set_instruction_set(level)
        fn()

    return one_thread(call)


def _ratio_row(mod, name, size, fn, rounds, target):
    top = mod.instruction_set()
    levels = {"portable": 0, "avx2": 1}
    if top > 1:
        levels[mod.instruction_set_name()] = top
    try:
        t = interleaved({k: _at_level(mod, v, fn) for k, v in levels.items()}, rounds=rounds)
    finally:
        mod.set_instruction_set(top)
    ratio = t["portable"] / t["avx2"]
    best = [k for k in levels if k not in ("portable", "avx2")]
    extra = f", {t['portable'] / t[best[0]]:.2f} x {best[0]}" if best else ""
    verdict = "" if target is None else (
        f"target <= {target}: {'met' if ratio <= target else 'NOT met'}")
    return (f"{name}, portable level, 1 thread", size, t["portable"] * 1e3,
            f"{ratio:.2f} x avx2{extra}", verdict)


def run(quick=False, rounds=None):
    if _dispatch.driver("host") is None:
        return [], "simd: compiled extension unavailable, nothing to compare"
    from arrpos._backends import _cpu as mod
    if mod.instruction_set() < 1:
        return [], "simd: this CPU has no AVX2 (or not x86-64): no vector level to compare"
    r = rounds or (3 if quick else 9)
    rows = []
    shape = APPLY_QUICK if quick else APPLY
    rng = np.random.default_rng(28)
    inv, _ = arrpos.rope_frequencies(shape[3])
    cos, sin = arrpos.rope_cos_sin(np.arange(shape[1]), inv, dtype=np.float32)
    cos, sin = cos[:, None], sin[:, None]
    for dt, target in ((np.float32, 1.5), (np.float16, None)):
        x = rng.standard_normal(shape, dtype=np.float32).astype(dt)
        out = np.ones_like(x)
        tc, ts = cos.astype(dt), sin.astype(dt)
        rows.append(_ratio_row(
            mod, "apply_rope half, out=", f"{shape} f{np.dtype(dt).name[-2:]}",
            lambda x=x, out=out, tc=tc, ts=ts: arrpos.apply_rope(x, tc, ts, out=out), r, target))

    impl = _dispatch.front_end("host.numpy")
    n, d = SINUSOID_QUICK if quick else SINUSOID
    hi, lo = power_frequencies(d // 2, d, 10000.0)
    pos = np.arange(n)
    table = np.ones((n, d), np.float32)
    rows.append(_ratio_row(
        mod, "sinusoidal table (interleaved)", f"({n}, {d}) f32",
        lambda: impl.sinusoid_table(pos, hi, lo, layout="interleaved", dtype=np.float32,
                                    width=d, xp=None, out=table), r, 3.0))

    n, dim = ROPE_TABLE_QUICK if quick else ROPE_TABLE
    inv = arrpos.rope_frequencies(dim)[0]
    pos = np.arange(n)
    for layout in ("half", "interleaved"):
        c, s = np.ones((n, dim), np.float32), np.ones((n, dim), np.float32)
        rows.append(_ratio_row(
            mod, f"rope_cos_sin {layout} into out", f"({n}, {dim}) x2 f32",
            lambda c=c, s=s, layout=layout: impl.rope_cos_sin(
                pos, inv, layout=layout, attention_factor=1.0, axes=None, dtype=np.float32,
                xp=None, out=(c, s)), r, 3.0))
    return rows, None


if __name__ == "__main__":
    import sys

    from ._timing import format_results

    got, note = run(quick="--quick" in sys.argv)
    print(format_results([(a, b, f"{ms:.3f}", c, e) for a, b, ms, c, e in got]))
    if note:
        print("note:", note)

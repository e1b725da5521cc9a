"""Every path of the compiled table kernels (sinusoid and RoPE cos/sin) at every instruction
set level: streaming rows at any output alignment (row by row, staged, or runs of whole
lines), cached-store rows, one or two threads.

Each level runs in a subprocess (ARRPOS_SIMD_LEVEL caps the level, read once per process).
The values are checked against the float64 sincos of the generic path (within the rounding
to the output type) and, bit for bit, against the same positions one row per call: a row
must not depend on how rows are chunked, threaded or stored."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arrpos import _dispatch

pytestmark = pytest.mark.skipif(_dispatch.driver("host") is None,
                                reason="compiled extension disabled or absent")
pytest.importorskip("ml_dtypes")  # the subprocess checks bfloat16 NumPy arrays too

_SCRIPT = r"""
import ml_dtypes, numpy as np, array_api_compat.numpy as xp
from arrpos._backends import _cpu, _xp
from arrpos._backends.host import driver
from arrpos._exact import power_frequencies

CODES = {np.float32: _cpu.F32, np.float64: _cpu.F64, np.float16: _cpu.F16,
         ml_dtypes.bfloat16: _cpu.BF16}
TOL = {np.float32: 2.0**-24, np.float64: 1e-13, np.float16: 2.0**-11,
       ml_dtypes.bfloat16: 2.0**-8}


def at_offset(shape, dt, offset):
    n = int(np.prod(shape)) * np.dtype(dt).itemsize
    buf = np.empty(n + 128, dtype=np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    return buf[start:start + n].view(dt).reshape(shape)


def run(kind, pos, hi, lo, dt, layout, outs, stream, nthreads):
    rc, rs, pc, ps = driver.rotation_tables(hi.tobytes(), lo.tobytes())
    if kind == "sin":
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, outs[0], CODES[dt], layout, nthreads,
                            stream, 64)
    else:
        _cpu.rope_table(pos, rc, rs, pc, ps, hi, lo, outs[0], outs[1], CODES[dt], layout == 4,
                        0.75, nthreads, stream, 64)


def reference(kind, pos, hi, lo, layout):
    s, c = (np.asarray(v) for v in _xp.sincos(xp.asarray(pos), hi, lo, xp=xp))
    if kind == "rope":
        c, s = 0.75 * c, 0.75 * s
        dup = (lambda v: np.repeat(v, 2, axis=-1)) if layout == 4 else \
            (lambda v: np.concatenate([v, v], axis=-1))
        return [dup(c), dup(s)]
    if layout == 0:
        return [np.stack([s, c], axis=-1).reshape(len(pos), -1)]
    return [np.concatenate([s, c] if layout == 1 else [c, s], axis=-1)]


pos = np.concatenate([np.arange(-70.0, 530.0), [2.0**33 + 3, 0.5, -1234.25]])
for nf in (3, 8, 16, 20, 64, 72):
    hi, lo = power_frequencies(nf, 2 * nf, 10000.0)
    for kind, layouts in (("sin", (0, 1, 2)), ("rope", (3, 4))):
        for layout in layouts:
            ref = reference(kind, pos, hi, lo, layout)
            for dt in CODES:
                lone = [np.empty((len(pos), 2 * nf), dt) for _ in ref]
                for k in range(len(pos)):
                    run(kind, pos[k:k + 1], hi, lo, dt, layout, [v[k:k + 1] for v in lone],
                        False, 1)
                for r, v in zip(ref, lone):
                    err = np.abs(v.astype(np.float64) - r).max()
                    assert err <= TOL[dt], (kind, nf, layout, dt, err)
                for stream, nthreads, offsets in ((False, 1, (0,)), (True, 2, (0, 16, 32, 48))):
                    for off in offsets:
                        outs = [at_offset((len(pos), 2 * nf), dt, off) for _ in ref]
                        run(kind, pos, hi, lo, dt, layout, outs, stream, nthreads)
                        for v, w in zip(outs, lone):
                            assert np.array_equal(v.view(np.uint8), w.view(np.uint8)), \
                                (kind, nf, layout, dt, stream, off)
            if nf in (16, 64):  # thread chunks (at least 4 blocks of rows) start mid-table
                far = np.arange(-3000.0, 3000.0)
                for dt in CODES:
                    whole = [np.empty((len(far), 2 * nf), dt) for _ in ref]
                    run(kind, far, hi, lo, dt, layout, whole, False, 1)
                    for off in (0, 16, 48):
                        outs = [at_offset((len(far), 2 * nf), dt, off) for _ in ref]
                        run(kind, far, hi, lo, dt, layout, outs, True, 2)
                        for v, w in zip(outs, whole):
                            assert np.array_equal(v.view(np.uint8), w.view(np.uint8)), \
                                (kind, nf, layout, dt, off, "chunks")
print("ok")
"""


@pytest.mark.parametrize("level", ["0", "1", "2", "3"])
def test_table_paths_at_every_simd_level(level):
    """Streaming and cached rows, aligned or not, agree with lone rows and the reference."""
    env = dict(os.environ, ARRPOS_SIMD_LEVEL=level)
    res = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "ok"

"""The Python half of ``.ci/gpu``, the one-call GPU check (docs/gpu.md, "Running the GPU check").

Subcommands (``python .ci/gpu_check.py NAME --help``):

``kernels``
    Launches every CUDA kernel instantiation at least once, the program that ``.ci/gpu``
    runs under ``compute-sanitizer``: every name expression of the CUDA driver's
    ``kernel_names()`` (each op x dtype x offset type), both rotation
    layouts, the three table layouts, the three ALiBi modes, the vector and the pair-by-pair
    paths, partial rotary, in place, strided and misaligned views, broadcast tables, sliced
    caches, out-of-range ids (clamped by the kernel, never read outside the cache), a
    frequency set wider than one parameter block and a wide-short ALiBi launch split across
    blocks, ALiBi of integer and real positions and of a mask, the relative-bias gather from
    strided tables with clamped ids, the depthwise convolution (1-D, 2-D, even kernels) with
    each activation, the separable resampling (up with a class token, an antialiased shrink
    over several parameter blocks, reversed strides). Each result is compared with the generic code in float64
    on the host, so a launch that "passes" the sanitizer by doing nothing fails here. It
    exits non-zero when a case fails or a name expression was not launched. The same cases
    run without a GPU against tests/cuda_emulation.py (tests/test_gpu_script.py), so their
    calls are known to be valid before a GPU ever sees them. ``--public`` adds a pass
    through the public functions with CuPy arrays and torch CUDA tensors (bfloat16
    included), each call checked to have reached a kernel; ``--no-pool`` turns CuPy's
    memory pool off so that every array is its own allocation (compute-sanitizer then sees
    an overrun past an array's end).
``compile``
    Builds the module with NVRTC on the GPU exactly as the driver does, loads every kernel,
    prints the time taken and each kernel's registers and local memory.
``env``
    The machine: nvidia-smi, Python and package versions, CUDA runtime, driver and NVRTC
    versions, compute capability, compute-sanitizer.
``bench``
    The GPU rows of the benchmark suite (``benchmarks.bench_gpu.run``), as the runner prints
    them, plus a Markdown table for the report.
``sweep``
    pytest over the suite's CuPy rows: every test parametrised over the array libraries in its
    ``cupy`` row, and the docs' GPU examples. Golden-reference packages whose installed
    version is not the one pinned in pyproject.toml are hidden (their tests skip: they belong
    to CI, where the pins are installed). Stops cleanly at ``--deadline``.
``report``
    Writes ``gpu-report.md`` from the step table, logs, JUnit files and benchmark output.

Only the standard library and NumPy are imported at the top (arrpos, CuPy and torch inside the
subcommands that use them): ``report``, ``--help`` and the emulated tests run anywhere.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: the checkout's arrpos
    sys.path.insert(0, str(ROOT))

# ------------------------------------------------------------------------------------------
# kernels: every instantiation once, checked against the generic code

DTYPES = ("float16", "bfloat16", "float32", "float64")
# |got - exact| <= TOL * max(1, |exact|): one rounding to the storage type plus the float32
# (float64) arithmetic before it, with room; a wrong index or a missed write is far outside
TOL = {"float64": 1e-11, "float32": 4e-6, "float16": 4e-3, "bfloat16": 3e-2}


def bf16_bits(a):
    """float32 values -> bfloat16 bits (round to nearest even) as int16: CuPy has no bfloat16,
    so such data travels as int16 and the kernel is told the storage (torch's route)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).view(np.int16)


def bf16_value(bits):
    return (np.asarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


class Device:
    """Arrays on ``cp`` (CuPy, or the emulation's NumPy-backed stand-in) made from NumPy values,
    with the float64 values actually stored (after rounding to the dtype)."""

    def __init__(self, cp):
        self.cp = cp

    def put(self, values, dtype):
        values = np.asarray(values)
        if dtype == "bfloat16":
            bits = bf16_bits(values)
            return self.cp.asarray(bits), bf16_value(bits).astype(np.float64)
        stored = values.astype(dtype)
        return self.cp.asarray(stored), stored.astype(np.float64)

    def get(self, a, dtype):
        host = self.cp.asnumpy(a) if hasattr(self.cp, "asnumpy") else np.asarray(a)
        host = np.array(host)  # a plain copy (the emulation's arrays are ndarray subclasses)
        return bf16_value(host).astype(np.float64) if dtype == "bfloat16" else \
            host.astype(np.float64)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype="int16" if dtype == "bfloat16" else dtype)


def check_close(got, exact, dtype, what=""):
    got, exact = np.asarray(got, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    if got.shape != exact.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {exact.shape}")
    bound = TOL[dtype] * np.maximum(1.0, np.abs(exact))
    bad = ~(np.abs(got - exact) <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values off, first at {i}: "
                             f"{got[i]!r} vs {exact[i]!r} (tolerance {TOL[dtype]} relative)")


def _npx():
    import array_api_compat.numpy as npx

    return npx


class Cuda:
    """arrpos's CUDA code as this program drives it: the driver (the instantiation list, the
    kernel lookup every launch goes through, the offset-type threshold, one launch function per
    kernel taking CuPy arrays and the element type they store) and the CuPy front-end.

    Everything this program knows of arrpos's internals is here. Two layouts are served: the
    driver ``arrpos._backends.cuda.driver`` with its front-ends ``cuda.cupy`` and
    ``cuda.torch_cuda``, and the earlier single adapter ``arrpos._backends._cupy`` whose
    private functions did the driver's work (drop that branch once no checkout has it)."""

    def __init__(self):
        try:
            from arrpos._backends.cuda import cupy as front
            from arrpos._backends.cuda import driver
            self.layered = True
        except ImportError:
            from arrpos._backends import _cupy as front
            driver = front
            self.layered = False
        self.front, self.driver = front, driver
        self.kernel_names = driver.kernel_names
        self.module_spec = driver.module_spec
        self.module_failure = driver.module_failure
        self.source_path = driver.SOURCE_PATH
        self._lookup = "kernel" if self.layered else "_kernel"
        self._threshold = "INT_OFFSETS_BELOW" if self.layered else "_INT_OFFSETS_BELOW"

    def forget(self):
        """Every compiled module, kernel and build failure forgotten (tests)."""
        if self.layered:
            self.driver.forget()
        else:
            for cache in ("_MODULES", "_FUNCTIONS", "_FAILED", "_SM_COUNT"):
                getattr(self.driver, cache).clear()

    @contextlib.contextmanager
    def wrapped_lookup(self, wrap):
        """The driver's kernel lookup replaced by ``wrap(original)`` inside."""
        original = getattr(self.driver, self._lookup)
        setattr(self.driver, self._lookup, wrap(original))
        try:
            yield
        finally:
            setattr(self.driver, self._lookup, original)

    @contextlib.contextmanager
    def offsets(self, index):
        """The 64-bit offset instantiation (``long long``) for every launch inside, by lowering
        the threshold below which the driver picks the 32-bit one (no 2**31-element array)."""
        saved = getattr(self.driver, self._threshold)
        if index == "long long":
            setattr(self.driver, self._threshold, 0)
        try:
            yield
        finally:
            setattr(self.driver, self._threshold, saved)

    # one launch function per kernel, CuPy arrays in, ``storage`` the element type's name
    # (bfloat16 data is int16 bits: torch's route, the only one CuPy arrays have)

    def sinusoid_table(self, positions, hi, lo, *, layout, width, storage):
        if self.layered:
            return self.driver.sinusoid_table(positions, hi, lo, None, layout, width, storage)
        return self.driver.sinusoid_table(positions, hi, lo, layout=layout, width=width,
                                          dtype=np.dtype(storage), xp=None)

    def rope_cos_sin(self, positions, inv_freq, cos, sin, *, layout, scale, storage):
        if self.layered:
            return self.driver.rope_cos_sin(positions, inv_freq, cos, sin, layout, scale,
                                            storage)
        return self.driver.rope_cos_sin(positions, inv_freq, layout=layout,
                                        attention_factor=scale, axes=None,
                                        dtype=np.dtype(storage), xp=None, out=(cos, sin))

    def apply_rope(self, x, cos, sin, out, *, layout, inverse, storage):
        if self.layered:
            return self.driver.apply_rope(x, cos, sin, out, layout, inverse, storage)
        return self.driver._apply_rope(x, cos, sin, layout=layout, inverse=inverse, out=out,
                                       storage=storage)

    def apply_rope_cached(self, x, cos_cache, sin_cache, ids, out, *, layout, inverse, storage):
        if self.layered:
            return self.driver.apply_rope_cached(x, cos_cache, sin_cache, ids, out, layout,
                                                 inverse, storage)
        return self.driver._apply_rope_cached(x, cos_cache, sin_cache, ids, layout=layout,
                                              inverse=inverse, out=out, storage=storage)

    def apply_pair(self, q, k, cos, sin, q_out, k_out, *, layout, inverse, storage):
        if self.layered:
            return self.driver.apply_pair(q, k, cos, sin, cos, sin, q_out, k_out, layout,
                                          inverse, (storage, storage))
        return self.driver._apply_pair(q, k, cos, sin, cos, sin, layout=layout,
                                       inverse=inverse, q_out=q_out, k_out=k_out,
                                       storage=(storage, storage))

    def alibi_bias(self, slopes, query_len, key_len, out, *, mode, storage):
        if self.layered:
            return self.driver.alibi_bias(slopes, query_len, key_len, out, mode, None, storage)
        return self.driver._alibi_into(slopes, query_len, key_len, mode=mode,
                                       query_offset=None, out=out, storage=storage)

    # the kernels below exist in the layered driver only

    def alibi_bias_from_positions(self, slopes, qp, kp, out, *, mode, lead, storage):
        return self.driver.alibi_bias_from_positions(slopes, qp, kp, out, mode, lead, storage)

    def alibi_bias_from_mask(self, slopes, counts, out, *, storage):
        return self.driver.alibi_bias_from_mask(slopes, counts, out, storage)

    def relative_bias(self, table, index, out, *, storage):
        return self.driver.relative_bias(table, index, out, storage)

    def conv_positional(self, x, weight, bias, out, *, activation, residual, storage):
        return self.driver.conv_positional(x, weight, bias, out, activation, residual, storage)

    def resample_grid(self, grid, prefix, taps, out, *, storage):
        return self.driver.resample_grid(grid, prefix, taps, out, storage)


@functools.lru_cache(maxsize=None)
def cuda() -> Cuda:
    return Cuda()


def _sinusoid(dev, *, dtype, layout, nf, width, lead):
    from arrpos._backends import _xp
    from arrpos._exact import power_frequencies

    hi, lo = power_frequencies(nf, 2 * nf, 10000.0)
    pos = np.arange(int(np.prod(lead)), dtype=np.int64).reshape(lead) * 4099 % 70001
    got = cuda().sinusoid_table(dev.cp.asarray(pos), hi, lo, layout=layout, width=width,
                                storage=dtype)
    ext = width + (width < 2 * nf)  # an odd interleaved width drops the last cosine
    ref = _xp.sinusoid_table(pos, hi, lo, layout=layout, dtype=np.float64, width=ext,
                             xp=_npx())[..., :width]
    check_close(dev.get(got, dtype), ref, dtype, "table")


def _rope_cos_sin(dev, *, dtype, layout):
    from arrpos._backends import _xp

    pos = np.array([[0, 7, 4096, 65535, 3, 11, 1], [1, 2, 3, 5, 8, 13, 21]], dtype=np.int64)
    inv, inv64 = dev.put(1.0 / 10000.0 ** (np.arange(0, 18, 2) / 18), "float32")  # 9: odd
    outs = (dev.empty(pos.shape + (18,), dtype), dev.empty(pos.shape + (18,), dtype))
    cos, sin = cuda().rope_cos_sin(dev.cp.asarray(pos), inv, *outs, layout=layout, scale=1.1,
                                   storage=dtype)
    rc, rs = _xp.rope_cos_sin(pos, inv64, layout=layout, attention_factor=1.1, axes=None,
                              dtype=np.float64, xp=_npx())
    check_close(dev.get(cos, dtype), rc, dtype, "cos")
    check_close(dev.get(sin, dtype), rs, dtype, "sin")


def _seed(*parts):
    """A seed from the case's parameters, the same in every process (``hash`` of a str is not)."""
    import zlib

    return zlib.crc32(" ".join(parts).encode())


def _half_tables(rng, seq, rotary, layout, lead=None):
    """cos and sin values of random angles, widened to ``layout``, ``(seq,) + lead + (R,)``."""
    ang = rng.uniform(-6, 6, size=(seq,) + (lead or ()) + (rotary // 2,))
    ang = np.concatenate([ang, ang], -1) if layout == "half" else np.repeat(ang, 2, -1)
    return np.cos(ang), np.sin(ang)


def _apply_rope(dev, *, dtype, index, layout, form):
    """``form``: "vector" (aligned rows, tables broadcast over heads through zero strides,
    partial rotary), "misaligned" (rows one element past alignment: pair by pair; per-head
    tables; inverse) or "in_place" (a (b, h, s, d) transposed view, an odd number of pairs)."""
    from arrpos._backends import _xp

    rng = np.random.default_rng(_seed(dtype, index, layout, form))
    npx = _npx()
    if form == "vector":
        x, x64 = dev.put(rng.uniform(-3, 3, (2, 5, 3, 16)), dtype)
        cv, sv = _half_tables(rng, 5, 12, layout, (1,))
        inverse, out = False, None
    elif form == "misaligned":
        base, base64 = dev.put(rng.uniform(-3, 3, (2, 5, 3, 17)), dtype)
        x, x64 = base[..., 1:], base64[..., 1:]
        cv, sv = _half_tables(rng, 5, 16, layout, (3,))
        inverse, out = True, None
    else:
        base, base64 = dev.put(rng.uniform(-3, 3, (2, 6, 4, 16)), dtype)
        x, x64 = base.transpose(0, 2, 1, 3), base64.transpose(0, 2, 1, 3)  # (2, 4, 6, 16)
        cv, sv = _half_tables(rng, 6, 10, layout)
        inverse, out = False, x
    c, c64 = dev.put(cv, dtype)
    s, s64 = dev.put(sv, dtype)
    exact = _xp.apply_rope(x64, c64, s64, layout=layout, inverse=inverse, xp=npx)
    with cuda().offsets(index):
        got = cuda().apply_rope(x, c, s, out, layout=layout, inverse=inverse, storage=dtype)
    if out is not None and got is not out:
        raise AssertionError("out= was not returned")
    check_close(dev.get(got, dtype), exact, dtype, f"apply_rope {form}")


def _apply_rope_cached(dev, *, dtype, index, layout, form):
    """``form``: "sliced" (caches are column slices of wider tables, per-sequence ids),
    "clamped" (ids outside the cache, an odd number of pairs: the kernel clamps them; the
    public function would have refused them) or "in_place" (heads-first ids, x rotated in
    place, contiguous caches: the vector path)."""
    from arrpos._backends import _xp

    rng = np.random.default_rng(_seed(dtype, index, layout, form, "cached"))
    if form == "sliced":
        x, x64 = dev.put(rng.uniform(-3, 3, (2, 7, 4, 16)), dtype)
        ang = rng.uniform(-6, 6, (40, 10))
        cw, cw64 = dev.put(np.cos(ang), dtype)
        sw, sw64 = dev.put(np.sin(ang), dtype)
        cc, cc64, sc, sc64 = cw[:, :6], cw64[:, :6], sw[:, :6], sw64[:, :6]
        ids = rng.integers(0, 40, (2, 7, 1))
        ref_ids, out = ids, None
    elif form == "clamped":
        x, x64 = dev.put(rng.uniform(-3, 3, (3, 4, 16)), dtype)
        ang = rng.uniform(-6, 6, (9, 5))
        cc, cc64 = dev.put(np.cos(ang), dtype)
        sc, sc64 = dev.put(np.sin(ang), dtype)
        ids = np.array([[-3, 0, 8, 9], [100, 4, -1, 2**40], [1, 2, 3, 4]], dtype=np.int64)
        ref_ids, out = np.clip(ids, 0, 8), None
    else:
        x, x64 = dev.put(rng.uniform(-3, 3, (2, 4, 7, 16)), dtype)
        ang = rng.uniform(-6, 6, (20, 6))
        cc, cc64 = dev.put(np.cos(ang), dtype)
        sc, sc64 = dev.put(np.sin(ang), dtype)
        ids = rng.integers(0, 20, (2, 1, 7))
        ref_ids, out = ids, x
    exact = _xp.apply_rope_cached(x64, cc64, sc64, ref_ids, layout=layout, inverse=False,
                                  xp=_npx())
    with cuda().offsets(index):
        got = cuda().apply_rope_cached(x, cc, sc, dev.cp.asarray(ids), out, layout=layout,
                                       inverse=False, storage=dtype)
    check_close(dev.get(got, dtype), exact, dtype, f"apply_rope_cached {form}")


def _apply_rope_qk(dev, *, dtype):
    """q and k (fewer heads: GQA) rotated in place by the two launches of apply_rope_qk."""
    from arrpos._backends import _xp

    rng = np.random.default_rng(7)
    q, q64 = dev.put(rng.uniform(-3, 3, (2, 8, 5, 16)), dtype)
    k, k64 = dev.put(rng.uniform(-3, 3, (2, 2, 5, 16)), dtype)
    cv, sv = _half_tables(rng, 5, 16, "half")
    c, c64 = dev.put(cv, dtype)
    s, s64 = dev.put(sv, dtype)
    qe, ke = _xp.apply_rope_qk(q64, k64, c64, s64, layout="half", inverse=False, xp=_npx())
    cuda().apply_pair(q, k, c, s, q, k, layout="half", inverse=False, storage=dtype)
    check_close(dev.get(q, dtype), qe, dtype, "q")
    check_close(dev.get(k, dtype), ke, dtype, "k")


def _alibi(dev, *, dtype, mode, query_len, key_len):
    from arrpos._backends import _xp

    slopes = 2.0 ** -np.arange(1, 6, dtype=np.float64)  # exact in every dtype
    sl, sl64 = dev.put(slopes, dtype)
    if dtype == "bfloat16":  # torch's route: float64 slopes (CuPy has no bfloat16 to hold)
        sl = dev.cp.asarray(sl64)
    out = dev.empty((5, query_len, key_len), dtype)
    got = cuda().alibi_bias(sl, query_len, key_len, out, mode=mode, storage=dtype)
    exact = _xp.alibi_bias(sl64, query_len, key_len, mode=mode, query_offset=key_len - query_len,
                           dtype=np.float64, xp=_npx())
    check_close(dev.get(got, dtype), exact, dtype, "alibi")


def _alibi_positions(dev, *, dtype, mode, kind):
    from arrpos._backends import _xp

    rng = np.random.default_rng(_seed("alibi_positions", dtype, mode, kind))
    slopes = 2.0 ** -np.arange(1, 6, dtype=np.float64)
    sl, sl64 = dev.put(slopes, dtype)
    if dtype == "bfloat16":
        sl = dev.cp.asarray(sl64)
    if kind == "int":  # leading axes (3, 1) and (2,) broadcast to (3, 2)
        qp, kp = rng.integers(-500, 500, (3, 1, 7)), rng.integers(-500, 500, (2, 300))
    else:
        qp, kp = rng.uniform(-500, 500, (3, 2, 7)), rng.uniform(-500, 500, (1, 300))
    lead = (3, 2)
    out = dev.empty(lead + (5, 7, 300), dtype)
    got = cuda().alibi_bias_from_positions(sl, dev.cp.asarray(qp), dev.cp.asarray(kp), out,
                                           mode=mode, lead=lead, storage=dtype)
    exact = _xp.alibi_bias_from_positions(sl64, qp, kp, mode=mode, lead=lead, dtype=np.float64,
                                          xp=_npx())
    check_close(dev.get(got, dtype), exact, dtype, "alibi_bias_from_positions")


def _alibi_mask(dev, *, dtype):
    from arrpos._backends import _xp

    rng = np.random.default_rng(_seed("alibi_mask", dtype))
    slopes = 2.0 ** -np.arange(1, 6, dtype=np.float64)
    sl, sl64 = dev.put(slopes, dtype)
    if dtype == "bfloat16":
        sl = dev.cp.asarray(sl64)
    mask = rng.integers(0, 2, (3, 3000))
    mask[0, :100] = 0
    out = dev.empty((3, 5, 1, 3000), dtype)
    counts = dev.cp.asarray(np.cumsum(mask, axis=-1))
    got = cuda().alibi_bias_from_mask(sl, counts, out, storage=dtype)
    exact = _xp.alibi_bias_from_mask(sl64, mask, dtype=np.float64, xp=_npx())
    check_close(dev.get(got, dtype), exact, dtype, "alibi_bias_from_mask")


def _relative_bias(dev, *, dtype, form):
    rng = np.random.default_rng(_seed("relative_bias", dtype, form))
    table, t64 = dev.put(rng.uniform(-4, 4, (64, 12)), dtype)
    index = rng.integers(0, 64, (33, 70))
    want = index
    if form == "strided":  # every other row, columns reversed
        table, t64 = table[::2, ::-1], t64[::2, ::-1]
        index = want = index % 32
    elif form == "clamped":  # ids outside the table: clamped by the kernel, never read past it
        index = index.copy()
        index[0, :4] = [-1, 64, 10**9, -(10**9)]
        want = np.clip(index, 0, 63)
    got = cuda().relative_bias(table, dev.cp.asarray(index), None, storage=dtype)
    check_close(dev.get(got, dtype), np.moveaxis(t64[want], -1, 0), dtype, "relative_bias")


def _conv(dev, *, dtype, activation, kernel):
    from arrpos._backends import _xp

    rng = np.random.default_rng(_seed("conv", dtype, str(activation), str(kernel)))
    shape = (2, 33, 1, 96) if kernel[1] == 1 else (2, 14, 14, 96)
    x, x64 = dev.put(rng.uniform(-3, 3, shape), dtype)
    work = "float64" if dtype == "float64" else "float32"
    w64 = rng.uniform(-1, 1, kernel + (96,)).astype(work).astype(np.float64)
    b64 = rng.uniform(-1, 1, 96).astype(work).astype(np.float64)
    w, b = dev.cp.asarray(w64.astype(work)), dev.cp.asarray(b64.astype(work))
    got = cuda().conv_positional(x, w, b, None, activation=activation, residual=True,
                                 storage=dtype)
    exact = _xp.conv_positional(x64, w64, b64, activation=activation, residual=True,
                                dtype=np.float64, xp=_npx())
    check_close(dev.get(got, dtype), exact, dtype, "conv_positional")


def _resample(dev, *, dtype, form):
    """Separable resampling: a class token and bicubic upsampling, an antialiased shrink
    (taps in several by-value blocks: several launches), a grid read through reversed
    strides. Bit for bit the generic code's in the storage type (NumPy has no bfloat16:
    within its rounding there)."""
    from arrpos import _taps
    from arrpos._backends import _xp

    rng = np.random.default_rng(_seed("resample", dtype, form))
    single = dtype != "float64"
    if form == "up":
        table, t64 = dev.put(rng.uniform(-3, 3, (2, 1 + 14 * 14, 64)), dtype)
        grid, g64 = table[:, 1:].reshape(2, 14, 14, 64), t64[:, 1:].reshape(2, 14, 14, 64)
        prefix, p64 = table[:, :1], t64[:, :1]
        sizes, method, antialias = ((14, 32), (14, 24)), "cubic", False
    elif form == "down":
        grid, g64 = dev.put(rng.uniform(-3, 3, (1, 64, 48, 40)), dtype)
        prefix = p64 = None
        sizes, method, antialias = ((64, 9), (48, 7)), "cubic", True
    else:
        grid, g64 = dev.put(rng.uniform(-3, 3, (3, 12, 10, 16)), dtype)
        grid, g64 = grid[:, ::-1, :, ::-1], g64[:, ::-1, :, ::-1]
        prefix = p64 = None
        sizes, method, antialias = ((12, 5), (10, 10)), "linear", True
    taps = tuple(None if a == b else _taps.host_taps(a, b, method, antialias, single, False)
                 for a, b in sizes)
    got = dev.get(cuda().resample_grid(grid, prefix, taps, None, storage=dtype), dtype)
    exact = _xp.resample_grid(g64, p64, taps=taps, dtype=np.float64, xp=_npx())
    check_close(got, exact, dtype, f"resample_grid {form}")
    if dtype != "bfloat16":
        want = _xp.resample_grid(g64.astype(dtype), None if p64 is None else p64.astype(dtype),
                                 taps=taps, dtype=np.dtype(dtype), xp=_npx())
        if not np.array_equal(got, want.astype(np.float64)):
            raise AssertionError(f"resample_grid {form}: not the generic code's bits")


def driver_cases():
    """``[(label, function of a Device)]``: through the CUDA driver, valid under emulation."""
    cases = []

    def add(label, fn, **kw):
        cases.append((label, functools.partial(fn, **kw)))

    for dtype in ("float32", "float64"):
        for layout, width in (("interleaved", 14), ("interleaved", 13), ("split", 16),
                              ("split_cos", 16)):
            add(f"sinusoid_table {dtype} {layout} width {width}", _sinusoid, dtype=dtype,
                layout=layout, nf=7, width=width, lead=(3, 5))
        # more frequencies than one by-value parameter block (FREQ_BLOCK = 192): two launches
        add(f"sinusoid_table {dtype} split 200 frequencies", _sinusoid, dtype=dtype,
            layout="split", nf=200, width=402, lead=(2,))
        for layout in ("half", "interleaved"):
            add(f"rope_cos_sin {dtype} {layout}", _rope_cos_sin, dtype=dtype, layout=layout)
    for dtype in DTYPES:
        for index in ("int", "long long"):
            for layout in ("half", "interleaved"):
                for form in ("vector", "misaligned", "in_place"):
                    add(f"apply_rope {dtype} <{index}> {layout} {form}", _apply_rope,
                        dtype=dtype, index=index, layout=layout, form=form)
                for form in ("sliced", "clamped", "in_place"):
                    add(f"apply_rope_cached {dtype} <{index}> {layout} {form}",
                        _apply_rope_cached, dtype=dtype, index=index, layout=layout, form=form)
        add(f"apply_rope_qk {dtype} in place", _apply_rope_qk, dtype=dtype)
        for mode in ("causal", "symmetric", "key"):
            add(f"alibi_bias {dtype} {mode}", _alibi, dtype=dtype, mode=mode, query_len=7,
                key_len=300)
        # one query row against many keys: the launch splits the rows across blocks
        add(f"alibi_bias {dtype} decode row", _alibi, dtype=dtype, mode="causal", query_len=1,
            key_len=5000)
        for mode in ("causal", "symmetric", "key"):
            for kind in ("int", "float"):
                add(f"alibi_bias_from_positions {dtype} {mode} {kind}", _alibi_positions,
                    dtype=dtype, mode=mode, kind=kind)
        add(f"alibi_bias_from_mask {dtype}", _alibi_mask, dtype=dtype)
        for form in ("contiguous", "strided", "clamped"):
            add(f"relative_bias {dtype} {form}", _relative_bias, dtype=dtype, form=form)
        for activation, kernel in ((None, (3, 3)), ("gelu", (5, 1)), ("tanh", (4, 2))):
            add(f"conv_positional {dtype} {activation} {kernel}", _conv, dtype=dtype,
                activation=activation, kernel=kernel)
        for form in ("up", "down", "strided"):
            add(f"resample_grid {dtype} {form}", _resample, dtype=dtype, form=form)
    return cases


def public_cases(cp, torch, recorder):
    """``[(label, function of a Device)]``: the public functions on a real GPU (CuPy arrays
    and, when torch has CUDA, torch tensors), each call required to reach a kernel (else the
    generic code ran: a fallback the caller would never see) and compared with NumPy."""
    import arrpos

    rng = np.random.default_rng(3)
    cases = []

    def host(a):  # float64 NumPy copy of a CuPy array or torch tensor
        if isinstance(a, cp.ndarray):
            return cp.asnumpy(a).astype(np.float64)
        return a.detach().double().cpu().numpy()

    def gpu(call):
        before = len(recorder.launches)
        result = call()
        if len(recorder.launches) == before:
            raise AssertionError("no kernel was launched (the generic code ran)")
        return result

    def tables(dev, dtype):
        pos = np.arange(37) * 1999
        dt = getattr(cp, dtype)
        for layout in ("interleaved", "split"):
            got = gpu(lambda: arrpos.sinusoidal(cp.asarray(pos), 64, layout=layout, dtype=dt))
            check_close(host(got), arrpos.sinusoidal(pos, 64, layout=layout, dtype=np.float64),
                        dtype, f"sinusoidal {layout}")
        for flip in (False, True):  # the "split" and "split_cos" layouts
            got = gpu(lambda: arrpos.timestep_embedding(cp.asarray(pos), 32, dtype=dt,
                                                        flip_sin_to_cos=flip))
            check_close(host(got), arrpos.timestep_embedding(pos, 32, dtype=np.float64,
                                                             flip_sin_to_cos=flip),
                        dtype, "timestep_embedding")
        inv_host, _ = arrpos.rope_frequencies(64)
        inv = cp.asarray(inv_host)
        for layout in ("half", "interleaved"):
            c, s = gpu(lambda: arrpos.rope_cos_sin(cp.asarray(pos), inv, layout=layout,
                                                   dtype=dt))
            rc, rs = arrpos.rope_cos_sin(pos, inv_host, layout=layout, dtype=np.float64)
            check_close(host(c), rc, dtype, "cos")
            check_close(host(s), rs, dtype, "sin")

    def rotations(dev, dtype, make, make_ids):
        x0 = rng.uniform(-3, 3, (2, 9, 4, 32))
        ang = rng.uniform(-6, 6, (9, 16))
        cv, sv = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        x, c, s = make(x0), make(cv[:, None]), make(sv[:, None])
        for layout in ("half", "interleaved"):
            got = gpu(lambda: arrpos.apply_rope(x, c, s, layout=layout))
            check_close(host(got), arrpos.apply_rope(host(x), host(c), host(s), layout=layout),
                        dtype, f"apply_rope {layout}")
        cc, sc = make(np.cos(ang)), make(np.sin(ang))
        ids = np.arange(9)[None, :, None] * np.array([1, 0])[:, None, None]  # (2, 9, 1)
        got = gpu(lambda: arrpos.apply_rope_cached(x, cc, sc, make_ids(ids)))
        check_close(host(got), arrpos.apply_rope_cached(host(x), host(cc), host(sc), ids),
                    dtype, "apply_rope_cached")
        q, k = make(x0.transpose(0, 2, 1, 3)), make(x0[:, :, :2].transpose(0, 2, 1, 3))
        c2, s2 = make(cv), make(sv)
        qe, ke = arrpos.apply_rope_qk(host(q), host(k), host(c2), host(s2))
        qo, ko = gpu(lambda: arrpos.apply_rope_qk(q, k, c2, s2))
        check_close(host(qo), qe, dtype, "apply_rope_qk q")
        check_close(host(ko), ke, dtype, "apply_rope_qk k")
        slopes = make(2.0 ** -np.arange(1, 9))
        for mode in ("causal", "symmetric", "key"):
            got = gpu(lambda: arrpos.alibi_bias(slopes, 9, 40, mode=mode))
            check_close(host(got), arrpos.alibi_bias(host(slopes), 9, 40, mode=mode), dtype,
                        f"alibi_bias {mode}")
        qp, kp = np.array([[3, 1, 8], [0, 5, 2]]), np.arange(40)
        for mode in ("causal", "symmetric", "key"):
            got = gpu(lambda: arrpos.alibi_bias_from_positions(slopes, make_ids(qp),
                                                               make_ids(kp), mode=mode))
            check_close(host(got), arrpos.alibi_bias_from_positions(host(slopes), qp, kp,
                                                                    mode=mode),
                        dtype, f"alibi_bias_from_positions {mode}")
        mask = np.ones((3, 40), dtype=bool)
        mask[0, :7] = False
        got = gpu(lambda: arrpos.alibi_bias_from_mask(slopes, make_ids(mask)))
        check_close(host(got), arrpos.alibi_bias_from_mask(host(slopes), mask), dtype,
                    "alibi_bias_from_mask")
        table = make(rng.uniform(-1, 1, (32, 8)))
        index = np.abs(np.arange(40)[None, :] - np.arange(9)[:, None]) % 32
        got = gpu(lambda: arrpos.relative_bias(table, make_ids(index)))
        check_close(host(got), arrpos.relative_bias(host(table), index), dtype, "relative_bias")
        got = gpu(lambda: arrpos.t5_bias(table, 9, 40))
        check_close(host(got), arrpos.t5_bias(host(table), 9, 40), dtype, "t5_bias")
        grid, w2, w1 = make(x0[:, :8]), make(rng.uniform(-1, 1, (3, 3, 32))), make(
            rng.uniform(-1, 1, (5, 32)))
        got = gpu(lambda: arrpos.conv_positional_2d(grid, w2))
        check_close(host(got), arrpos.conv_positional_2d(host(grid), host(w2)), dtype,
                    "conv_positional_2d")
        seq = make(x0[:, :, 0])
        got = gpu(lambda: arrpos.conv_positional(seq, w1, activation="gelu"))
        check_close(host(got), arrpos.conv_positional(host(seq), host(w1), activation="gelu"),
                    dtype, "conv_positional")
        pe = make(rng.uniform(-1, 1, (1 + 7 * 7, 32)))
        got = gpu(lambda: arrpos.resample(pe, (12, 10), prefix_tokens=1, method="cubic",
                                          antialias=True))
        check_close(host(got), arrpos.resample(host(pe), (12, 10), prefix_tokens=1,
                                               method="cubic", antialias=True),
                    dtype, "resample")

    def add(label, fn, **kw):
        cases.append((label, functools.partial(fn, **kw)))

    for dtype in ("float32", "float64"):
        add(f"public tables, cupy {dtype}", tables, dtype=dtype)
    for dtype in ("float16", "float32", "float64"):
        add(f"public rotations and alibi, cupy {dtype}", rotations, dtype=dtype,
            make=lambda a, dtype=dtype: cp.asarray(np.asarray(a, dtype=dtype)),
            make_ids=cp.asarray)
    if torch is not None and torch.cuda.is_available():
        for dtype in ("bfloat16", "float16", "float32"):
            tdt = getattr(torch, dtype)
            add(f"public rotations and alibi, torch {dtype}", rotations, dtype=dtype,
                make=lambda a, tdt=tdt: torch.as_tensor(np.asarray(a), device="cuda").to(tdt),
                make_ids=lambda a: torch.as_tensor(a, device="cuda"))
    return cases


class Recorder:
    """The name expression of every launch, by wrapping the driver's kernel lookup (every
    launch, the torch front-end's included, fetches its kernel there)."""

    def __init__(self):
        self.launches = []

    @contextlib.contextmanager
    def installed(self):
        launches = self.launches

        def wrap(original):
            def kernel(name):
                fn = original(name)

                def launch(*args, **kwargs):
                    launches.append(name)
                    return fn(*args, **kwargs)
                return launch
            return kernel

        with cuda().wrapped_lookup(wrap):
            yield self


def run_cases(cases, dev, recorder, *, must_launch=True, log=print):
    """Runs each case; returns the labels that failed (an exception, or no launch at all)."""
    failed = []
    for label, fn in cases:
        before = len(recorder.launches)
        try:
            fn(dev)
            if must_launch and len(recorder.launches) == before:
                raise AssertionError("no kernel was launched (the generic code ran)")
            log(f"ok    {label}  [{len(recorder.launches) - before} launches]")
        except Exception as exc:
            failed.append(label)
            log(f"FAIL  {label}: {type(exc).__name__}: {exc}")
            log("".join(traceback.format_exception(exc)[-6:]).rstrip())
    return failed


def coverage(recorder):
    """Name expressions of the driver never launched."""
    return sorted(set(cuda().kernel_names()) - set(recorder.launches))


def cmd_kernels(args):
    import cupy as cp

    if args.no_pool:  # every array its own cudaMalloc: overruns past an array's end are seen
        cp.cuda.set_allocator(None)
    torch = None
    if args.public:
        try:
            import torch
        except ImportError:
            print("torch not importable: the torch rows of --public are left out")
    rec = Recorder()
    dev = Device(cp)
    t0 = time.perf_counter()
    with rec.installed():
        failed = run_cases(driver_cases(), dev, rec)
        n_driver = len(rec.launches)
        if args.public:
            failed += run_cases(public_cases(cp, torch, rec), dev, rec)
    cp.cuda.Device().synchronize()  # an asynchronous fault surfaces here at the latest
    missing = coverage(rec)
    names = cuda().kernel_names()
    print(f"kernels: {len(names) - len(missing)}/{len(names)} name expressions launched; "
          f"{n_driver} driver launches, {len(rec.launches) - n_driver} public; "
          f"{len(failed)} failed cases; {time.perf_counter() - t0:.1f} s")
    for name in missing:
        print(f"NOT LAUNCHED  {name}")
    failure = cuda().module_failure(cp.cuda.Device().id)
    if failure:
        print(f"module failure: {failure}")
        return 1
    return 1 if failed or missing else 0


# ------------------------------------------------------------------------------------------
# compile: the module built and loaded on the GPU as the driver builds it


def cmd_compile(args):
    import cupy as cp

    spec = cuda().module_spec()
    dev = cp.cuda.Device()
    t0 = time.perf_counter()
    module = cp.RawModule(**spec)
    kernels = {name: module.get_function(name) for name in spec["name_expressions"]}
    seconds = time.perf_counter() - t0
    rows = []
    for name, fn in kernels.items():
        a = fn.attributes
        rows.append({"kernel": name, "registers": a.get("num_regs"),
                     "local_bytes": a.get("local_size_bytes"),
                     "max_threads": a.get("max_threads_per_block"),
                     "binary": a.get("binary_version")})
    info = {"seconds": round(seconds, 2), "kernels": len(kernels),
            "compute_capability": dev.compute_capability,
            "nvrtc": ".".join(map(str, cp.cuda.nvrtc.getVersion())),
            "options": list(spec["options"]), "rows": rows}
    print(f"NVRTC {info['nvrtc']}: module of {len(kernels)} kernels compiled and loaded for "
          f"sm_{info['compute_capability']} in {seconds:.1f} s (CuPy cache: "
          f"{os.environ.get('CUPY_CACHE_DIR', '~/.cupy/kernel_cache')})")
    for r in rows:
        print(f"  {r['kernel']:<48} {r['registers']:>4} registers  {r['local_bytes']:>4} B local"
              f"  {r['max_threads']} threads max  sm_{r['binary']}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(info, indent=1))
    return 0


# ------------------------------------------------------------------------------------------
# env


def _version(module):
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "?")
    except Exception as exc:
        return f"not importable ({type(exc).__name__})"


def cmd_env(args):
    import platform
    import shutil

    out = [f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
           f"host: {platform.node()} {platform.machine()} {os.cpu_count()} cpus",
           f"python: {sys.version.split()[0]} ({sys.executable})"]
    for module in ("numpy", "cupy", "torch", "Cython", "setuptools", "pytest", "hypothesis",
                   "mpmath", "array_api_compat"):
        out.append(f"{module}: {_version(module)}")
    try:
        described = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        described = ""
    out.append(f"git: {described or 'no repository here (the tree travelled without .git)'}")
    # which GPU code ran, also where .git did not travel: compare with sha256sum here
    import hashlib

    paths = sorted({p for p in (ROOT / "arrpos").rglob("*") if p.suffix == ".cu"
                    or (p.suffix == ".py" and ("cuda" in p.relative_to(ROOT).as_posix()
                                               or "cupy" in p.name))})
    sums = [f"{p.relative_to(ROOT).as_posix()} {hashlib.sha256(p.read_bytes()).hexdigest()[:12]}"
            for p in paths]
    out.append("sources (sha256): " + ", ".join(sums))
    try:
        import cupy as cp

        rt = cp.cuda.runtime
        v = rt.runtimeGetVersion()
        d = rt.driverGetVersion()
        out.append(f"cuda runtime: {v // 1000}.{v % 1000 // 10}; driver API: {d // 1000}."
                   f"{d % 1000 // 10}; nvrtc: {'.'.join(map(str, cp.cuda.nvrtc.getVersion()))}")
        n = rt.getDeviceCount()
        for i in range(n):
            p = rt.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
            out.append(f"gpu {i}: {name}, compute capability {p['major']}.{p['minor']}, "
                       f"{p['multiProcessorCount']} SMs, {p['totalGlobalMem'] / 2**30:.1f} GiB")
    except Exception as exc:
        out.append(f"cupy/cuda: unavailable ({type(exc).__name__}: {exc})")
    try:
        import torch

        out.append(f"torch cuda: {torch.version.cuda}, available: {torch.cuda.is_available()}"
                   + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
    except Exception as exc:
        out.append(f"torch cuda: unavailable ({type(exc).__name__})")
    sanitizer = shutil.which(args.sanitizer or "compute-sanitizer")
    try:
        v = subprocess.run([sanitizer, "--version"], capture_output=True, text=True, timeout=30)
        line = [x for x in v.stdout.splitlines() if "ersion" in x]
        out.append(f"compute-sanitizer: {sanitizer} {line[-1].strip() if line else ''}")
    except Exception:
        out.append(f"compute-sanitizer: not found ({args.sanitizer or 'not on PATH'})")
    print("\n".join(out))
    if shutil.which("nvidia-smi"):
        print("\n$ nvidia-smi")
        sys.stdout.flush()
        subprocess.run(["nvidia-smi"], timeout=30)
        print("$ nvidia-smi --query-gpu=... --format=csv")
        sys.stdout.flush()
        subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,"
                        "memory.total,clocks.max.sm,clocks.max.mem,power.limit",
                        "--format=csv"], timeout=30)
    else:
        print("nvidia-smi: not found")
    return 0


# ------------------------------------------------------------------------------------------
# bench


def cmd_bench(args):
    from benchmarks import bench_gpu
    from benchmarks._timing import format_results

    rows, note = bench_gpu.run(quick=args.quick)
    rows = [(a, b, f"{ms:.3f}", c, d) for a, b, ms, c, d in rows]
    print(format_results(rows) if rows else "(no rows)")
    print(f"note: {note}")
    if args.markdown:
        md = ["| kernel | size | ms | vs memory | vs user code |", "|---|---|---:|---|---|"]
        md += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
        pathlib.Path(args.markdown).write_text("\n".join(md) + f"\n\n{note}\n")
    return 0 if rows else 1


# ------------------------------------------------------------------------------------------
# sweep: the suite's CuPy rows


def _pinned_peers():
    """``{module: pinned version}`` of the golden references pinned in the test extra."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    pins = {}
    for req in extra:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([^\s;]+)\s*", req)
        if m:
            pins[m.group(1).lower().replace("-", "_")] = m.group(2)
    return pins


def hide_unpinned_peers(log=print):
    """Hide each pinned golden reference whose installed version differs from the pin: its
    tests skip (tests/conftest.py turns the ModuleNotFoundError into a skip naming it)."""
    import importlib.metadata

    hidden = []
    for module, pin in sorted(_pinned_peers().items()):
        try:
            have = importlib.metadata.version(module.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            continue  # absent: its tests skip anyway
        if have != pin:
            sys.modules[module] = None  # import raises ModuleNotFoundError, find_spec is None
            hidden.append(f"{module} {have} (pinned {pin})")
    if hidden:
        log("hidden golden references (installed version is not the pin): " + ", ".join(hidden))
    return hidden


def gpu_row(item) -> bool:
    """A test that runs on the GPU here: a parametrisation whose value is "cupy" (the
    ``backend`` fixture and lists of library names), or a docs example of docs/gpu.md."""
    spec = getattr(item, "callspec", None)
    if spec is not None and any(isinstance(v, str) and v == "cupy"
                                for v in spec.params.values()):
        return True
    return "test_readme" in item.nodeid and "gpu.md" in item.nodeid


class SweepPlugin:
    def __init__(self, deadline):
        self.deadline = deadline
        self.failed = 0
        self.ran = 0
        self.total = 0
        self.stopped = False

    def pytest_collection_modifyitems(self, config, items):
        keep = [i for i in items if gpu_row(i)]
        drop = [i for i in items if not gpu_row(i)]
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.total = len(keep)

    def pytest_collectreport(self, report):
        if report.failed:
            self.failed += 1

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed += 1
        if report.when == "teardown":
            self.ran += 1

    def pytest_runtest_protocol(self, item, nextitem):
        if self.deadline and time.time() > self.deadline and not self.stopped:
            self.stopped = True
            item.session.shouldstop = "the GPU check's time budget is spent"
        return None


def cmd_sweep(args):
    import pytest

    hide_unpinned_peers()
    plugin = SweepPlugin(args.deadline)
    code = pytest.main(list(args.pytest_args), plugins=[plugin])
    print(f"sweep: {plugin.ran} of {plugin.total} GPU rows ran, {plugin.failed} failures"
          + ("; stopped at the time budget" if plugin.stopped else ""))
    if plugin.failed:
        return 1
    # interrupted by the deadline alone is not a failure (the report says how far it got)
    return 0 if code in (0, 5) or (plugin.stopped and code == 2) else int(code)


# ------------------------------------------------------------------------------------------
# report


def junit_counts(path):
    """``(tests, failures, errors, skipped, seconds, [first failures])`` of a JUnit file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    t = f = e = s = 0
    sec = 0.0
    first = []
    for suite in suites:
        t += int(suite.get("tests", 0))
        f += int(suite.get("failures", 0))
        e += int(suite.get("errors", 0))
        s += int(suite.get("skipped", 0))
        sec += float(suite.get("time", 0) or 0)
        for case in suite.iter("testcase"):
            for tag in ("failure", "error"):
                bad = case.find(tag)
                if bad is not None and len(first) < 5:
                    msg = (bad.get("message") or "").strip().splitlines()
                    first.append(f"{case.get('classname')}::{case.get('name')}: "
                                 f"{msg[0][:160] if msg else tag}")
    return t, f, e, s, sec, first


def sanitizer_summary(text):
    """``[(tool, errors or None, verdict line)]`` from the sanitizer log's sections."""
    rows = []
    for m in re.finditer(r"^=== (\w+): (.*)$", text, re.M):
        tool = m.group(1)
        body = text[m.end():]
        nxt = re.search(r"^=== \w+: ", body, re.M)
        body = body[:nxt.start()] if nxt else body
        errs = re.findall(r"ERROR SUMMARY: (\d+) error", body) or \
            re.findall(r"RACECHECK SUMMARY: .*?\((\d+) error", body)
        launched = re.findall(r"^kernels: .*$", body, re.M)
        note = launched[-1] if launched else "(no summary line: see sanitizer.log)"
        if "Device not supported" in body:  # seen on gVisor machines (KINDS.md, 2026-11-04)
            note = "compute-sanitizer refused this device (Device not supported): " + note
        rows.append((tool, int(errs[-1]) if errs else None, note))
    return rows


def _read(path):
    try:
        return pathlib.Path(path).read_text(errors="replace")
    except OSError:
        return ""


def render_report(state, out):
    """The Markdown report from ``state`` (steps.tsv, running/, env.log, compile.json,
    bench.md) and ``out`` (JUnit files, sanitizer.log)."""
    state, out = pathlib.Path(state), pathlib.Path(out)
    steps = []
    for line in _read(state / "steps.tsv").splitlines():
        parts = line.split("\t")
        if len(parts) >= 4:
            steps.append(parts[:4])
    bad = [s for s in steps if s[1] in ("FAIL", "TIMEOUT")]
    running = ", ".join(sorted(p.name for p in (state / "running").glob("*")))
    env = _read(state / "env.log").strip()
    verdict = "FAIL" if bad else ("INCOMPLETE" if running else "PASS")
    head = [line for line in env.splitlines() if line.startswith((
        "gpu 0:", "cuda runtime:", "python:", "cupy:", "torch:", "numpy:", "git:", "sources"))]
    md = [f"# arrpos GPU check: {verdict}", "",
          f"Written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by "
          "`.ci/gpu` (docs/gpu.md). "
          + (f"{len(bad)} step(s) failed: {', '.join(s[0] for s in bad)}." if bad else
             (f"Still running: {running}." if running else "Every step that ran passed.")),
          ""]
    md += [f"- {line}" for line in head] + [""]
    md += ["## Steps", "", "| step | result | seconds | what |", "|---|---|---:|---|"]
    md += [f"| {n} | {r} | {sec} | {what} |" for n, r, sec, what in steps]
    md += ["", "## Tests (JUnit)", ""]
    junits = sorted(out.glob("junit-*.xml"))
    if junits:
        md += ["| suite | tests | passed | failed | errors | skipped | seconds |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        firsts = []
        for p in junits:
            try:
                t, f, e, s, sec, first = junit_counts(p)
            except Exception as exc:
                md.append(f"| {p.name} | unreadable: {type(exc).__name__} | | | | | |")
                continue
            md.append(f"| {p.stem[6:]} | {t} | {t - f - e - s} | {f} | {e} | {s} | {sec:.1f} |")
            firsts += first
        if firsts:
            md += ["", "First failures:", ""] + [f"- `{x}`" for x in firsts]
    else:
        md.append("No JUnit file was written.")
    md += ["", "## compute-sanitizer", ""]
    san = sanitizer_summary(_read(out / "sanitizer.log"))
    if san:
        md += ["| tool | errors | kernel coverage |", "|---|---:|---|"]
        md += [f"| {tool} | {'?' if n is None else n} | {cov} |" for tool, n, cov in san]
    else:
        md.append("Not run.")
    md += ["", "## NVRTC module on this GPU", ""]
    try:
        info = json.loads(_read(state / "compile.json"))
        regs = [r["registers"] for r in info["rows"]]
        local = [r["kernel"] for r in info["rows"] if r["local_bytes"]]
        md.append(f"NVRTC {info['nvrtc']}, sm_{info['compute_capability']}: {info['kernels']} "
                  f"kernels compiled and loaded in {info['seconds']} s (cold CuPy cache); "
                  f"{min(regs)} to {max(regs)} registers; local memory: "
                  + (", ".join(local) if local else "none") + ".")
    except Exception:
        md.append("Not run, or it failed (see gpu.log).")
    md += ["", "## Benchmarks (`benchmarks.bench_gpu`)", ""]
    bench = _read(state / "bench.md").strip()
    md.append(bench or "Not run, or it failed (see bench.txt).")
    md += ["", "## Environment", "", "```text", env or "(not recorded)", "```", ""]
    return "\n".join(md)


def cmd_report(args):
    text = render_report(args.state, args.out)
    target = pathlib.Path(args.out) / "gpu-report.md"
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(target)  # atomic: a background step may render at the same time
    return 0


# ------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(prog=".ci/gpu_check.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("kernels", help="every kernel instantiation once (compute-sanitizer)")
    p.add_argument("--public", action="store_true", help="also the public functions")
    p.add_argument("--no-pool", action="store_true", help="CuPy's memory pool off")
    p = sub.add_parser("compile", help="NVRTC build and load of the module on this GPU")
    p.add_argument("--json")
    p = sub.add_parser("env", help="the machine and versions")
    p.add_argument("--sanitizer")
    p = sub.add_parser("bench", help="the GPU benchmark rows")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--markdown")
    p = sub.add_parser("sweep", help="pytest over the suite's CuPy rows")
    p.add_argument("--deadline", type=float, default=0.0, help="epoch seconds; stop after")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER)
    p = sub.add_parser("report", help="write gpu-report.md")
    p.add_argument("--state", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if getattr(args, "pytest_args", None) and args.pytest_args[0] == "--":
        args.pytest_args = args.pytest_args[1:]
    return globals()[f"cmd_{args.cmd}"](args)


if __name__ == "__main__":
    sys.exit(main())

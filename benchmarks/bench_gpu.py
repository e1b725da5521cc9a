"""CUDA kernels on a GPU: ratios against a device-to-device copy of the same bytes and against
torch eager transformers-style code, timed with CUDA events in interleaved rounds."""
from __future__ import annotations

import statistics

import numpy as np

ROPE_SHAPE = (4, 4096, 32, 128)  # (batch, seq, heads, head_dim)
TABLE_SHAPE = (65536, 128)  # positions x rotary width


def _gpu():
    """(cupy, torch-or-None), or None when there is no GPU to measure."""
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            torch = None
    except Exception:
        torch = None
    return cp, torch


def _timed(cp, funcs: dict, rounds: int, reps: int = 5, warmup: int = 2):
    """Median milliseconds per call, each function timed with CUDA events on the current
    stream, in interleaved rounds (A, B, A, B ...) after a warm-up."""
    for fn in funcs.values():
        for _ in range(warmup):
            fn()
    cp.cuda.get_current_stream().synchronize()
    samples = {name: [] for name in funcs}
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(rounds):
        for name, fn in funcs.items():
            start.record()
            for _ in range(reps):
                fn()
            stop.record()
            stop.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, stop) / reps)
    return {name: statistics.median(v) for name, v in samples.items()}


def _rotate_half(torch, x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rope_rows(cp, torch, rounds):
    from arrpos._backends.cuda import cupy as _cupy

    rows = []
    b, s, h, d = ROPE_SHAPE
    inv = 1.0 / 10000.0 ** (np.arange(0, d, 2) / d)
    ang = np.arange(s)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    x = cp.asarray(np.random.default_rng(0).standard_normal(ROPE_SHAPE, dtype=np.float32))
    cos = cp.asarray(np.cos(ang), dtype=cp.float32)[:, None, :]
    sin = cp.asarray(np.sin(ang), dtype=cp.float32)[:, None, :]
    out = cp.empty_like(x)
    funcs = {
        "kernel": lambda: _cupy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=None,
                                           out=out),
        "copy": lambda: out.__setitem__(Ellipsis, x),
    }
    if torch is not None:
        tx, tc, ts = (torch.from_dlpack(a) for a in (x, cos, sin))
        funcs["torch"] = lambda: tx * tc + _rotate_half(torch, tx) * ts
    t = _timed(cp, funcs, rounds)
    user = f"{t['torch'] / t['kernel']:.1f} x faster than torch eager" if torch else "no torch"
    rows.append(("apply_rope (half, cupy)", f"{ROPE_SHAPE} f32", t["kernel"],
                 f"{t['copy'] / t['kernel']:.2f} x copy bandwidth", user))
    funcs = {
        "kernel": lambda: _cupy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=None,
                                           out=x),
        "scale": lambda: x.__imul__(1.0),
    }
    t = _timed(cp, funcs, rounds)
    rows.append(("apply_rope in place (cupy)", f"{ROPE_SHAPE} f32", t["kernel"],
                 f"{t['scale'] / t['kernel']:.2f} x of x *= 1", ""))
    if torch is not None:
        from arrpos._backends.cuda import torch_cuda as _torch_cuda

        tx = torch.from_dlpack(x).to(torch.bfloat16)
        tc, ts = (torch.from_dlpack(a).to(torch.bfloat16) for a in (cos, sin))
        tout = torch.empty_like(tx)
        funcs = {
            "kernel": lambda: _torch_cuda.apply_rope(tx, tc, ts, layout="half", inverse=False,
                                                     xp=None, out=tout),
            "copy": lambda: tout.copy_(tx),
            "torch": lambda: tx * tc + _rotate_half(torch, tx) * ts,
        }
        t = _timed(cp, funcs, rounds)
        rows.append(("apply_rope (half, torch bf16)", f"{ROPE_SHAPE} bf16", t["kernel"],
                     f"{t['copy'] / t['kernel']:.2f} x copy bandwidth",
                     f"{t['torch'] / t['kernel']:.1f} x faster than torch eager"))
    return rows


def _table_rows(cp, torch, rounds):
    from arrpos._backends.cuda import cupy as _cupy
    from arrpos._exact import power_frequencies

    n, d = TABLE_SHAPE
    rows = []
    pos = cp.arange(n)
    inv_np = 1.0 / 10000.0 ** (np.arange(0, d, 2) / d)
    inv = cp.asarray(inv_np, dtype=cp.float32)
    cos, sin = cp.empty((n, d), cp.float32), cp.empty((n, d), cp.float32)
    src = cp.ones((2, n, d), cp.float32)
    dst = cp.empty_like(src)  # the same bytes as both tables
    funcs = {
        "kernel": lambda: _cupy.rope_cos_sin(pos, inv, layout="half", attention_factor=1.0,
                                             axes=None, dtype=cp.float32, xp=None,
                                             out=(cos, sin)),
        "copy": lambda: dst.__setitem__(Ellipsis, src),
    }
    if torch is not None:
        tinv = torch.from_dlpack(inv)
        tpos = torch.arange(n, device=tinv.device, dtype=torch.float32)

        def hf():
            freqs = torch.outer(tpos, tinv)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos(), emb.sin()

        funcs["torch"] = hf
    t = _timed(cp, funcs, rounds)
    user = f"{t['torch'] / t['kernel']:.1f} x faster than torch eager" if torch else "no torch"
    rows.append(("rope_cos_sin (cupy)", f"{TABLE_SHAPE} f32 x2", t["kernel"],
                 f"{t['copy'] / t['kernel']:.2f} x copy bandwidth", user))
    hi, lo = power_frequencies(d // 2, d, 10000.0)
    table = cp.empty((n, d), cp.float32)
    src1, dst1 = src[0], dst[0]
    funcs = {
        "kernel": lambda: _cupy.sinusoid_table(pos, hi, lo, layout="interleaved",
                                               dtype=cp.float32, width=d, xp=None, out=table),
        "copy": lambda: dst1.__setitem__(Ellipsis, src1),
    }
    t = _timed(cp, funcs, rounds)
    rows.append(("sinusoidal table (cupy)", f"{TABLE_SHAPE} f32", t["kernel"],
                 f"{t['copy'] / t['kernel']:.2f} x copy bandwidth", ""))
    return rows


def run(quick=False, rounds=None):
    """Rows ``(kernel, size, ms, vs memory baseline, vs user code)`` and a note."""
    gpu = _gpu()
    if gpu is None:
        return [], "gpu: no GPU (CuPy with a CUDA device is needed), nothing measured"
    cp, torch = gpu
    rounds = rounds or (3 if quick else 9)
    rows = _rope_rows(cp, torch, rounds) + _table_rows(cp, torch, rounds)
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    note = (f"gpu: {name}; 'x copy bandwidth' is the time of a device-to-device copy of the same "
            "bytes divided by the kernel's (1.00 = at the copy limit)")
    return rows, note

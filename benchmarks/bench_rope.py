"""RoPE on the CPU: the compiled kernels (through the public functions, dispatch included)
against the memory-bound baselines on the same buffers and the code users run today."""
from __future__ import annotations

import numpy as np

import arrpos
from arrpos import _dispatch

from ._timing import fill_text, interleaved, one_thread

SHAPE = (4, 2048, 32, 128)  # (batch, seq, heads, head_dim)
DECODE = (1, 1, 32, 128)
TABLE = (65536, 64)  # positions, frequencies: cos and sin of (65536, 128)


def numpy_rotate_half(x, cos, sin):
    """transformers' apply_rotary_pos_emb, written in NumPy."""
    h = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[..., h:], x[..., :h]), axis=-1) * sin


def numpy_rotate_every_two(x, cos, sin):
    """GPT-J's rotate_every_two, written in NumPy."""
    rot = np.stack((-x[..., 1::2], x[..., ::2]), axis=-1).reshape(x.shape)
    return x * cos + rot * sin


def _torch_reference(layout):
    try:
        import torch
    except ImportError:
        return None, None
    # at most 2 threads, as the kernels' pool, and never more than OMP_NUM_THREADS allows
    torch.set_num_threads(min(2, torch.get_num_threads()))

    def rotate_half(x, cos, sin):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def rotate_every_two(x, cos, sin):
        rot = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        return x * cos + rot * sin

    return torch, rotate_half if layout == "half" else rotate_every_two


def _tables(seq, dim, dtype, layout):
    inv, _ = arrpos.rope_frequencies(dim)
    cos, sin = arrpos.rope_cos_sin(np.arange(seq), inv, layout=layout, dtype=dtype)
    return cos[:, None, :], sin[:, None, :]  # broadcast over heads


def _buffer(a):
    """A copy of ``a`` in a 2 MiB aligned block (NumPy promises 16 bytes); kernels and
    baselines run on the same buffers, so both get whole cache lines."""
    from arrpos._backends.host.driver import empty_bytes

    b = empty_bytes(a.nbytes).view(a.dtype).reshape(a.shape)
    b[...] = a
    return b


def _apply_rows(dtype, layout, rounds, with_users):
    rng = np.random.default_rng(0)
    x = _buffer(rng.standard_normal(SHAPE, dtype=np.float32).astype(dtype))
    out = _buffer(np.ones_like(x))
    y = _buffer(x)
    cos, sin = _tables(SHAPE[1], SHAPE[3], dtype, layout)
    from arrpos._backends import _cpu

    funcs = {
        "kernel": lambda: arrpos.apply_rope(x, cos, sin, layout=layout, out=out),
        "alloc": lambda: arrpos.apply_rope(x, cos, sin, layout=layout),
        "copyto": lambda: np.copyto(out, x),
        "stream": lambda: _cpu.stream_copy(x, out, _cpu.max_threads()),
        "inplace": lambda: arrpos.apply_rope(y, cos, sin, layout=layout, out=y),
        "scale": lambda: y.__imul__(1.0),
    }
    torch = ref = None
    if with_users:
        user = numpy_rotate_half if layout == "half" else numpy_rotate_every_two
        funcs["numpy"] = lambda: user(x, cos, sin)
        torch, ref = _torch_reference(layout)
        if torch is not None:
            tx, tc, ts = (torch.from_numpy(a) for a in (x, np.ascontiguousarray(cos),
                                                         np.ascontiguousarray(sin)))
            funcs["torch"] = lambda: ref(tx, tc, ts)
    t = interleaved(funcs, rounds=rounds)
    name = np.dtype(dtype).name[-2:]
    size = f"{SHAPE} f{name}"
    users = ""
    if with_users:
        users = f"{t['numpy'] / t['kernel']:.1f} x faster than numpy formula"
        if "torch" in t:
            users += f", {t['torch'] / t['kernel']:.1f} x than torch {ref.__name__}"
    rows = [
        (f"apply_rope {layout}, out of place", size, t["kernel"] * 1e3,
         f"{t['kernel'] / t['stream']:.2f} x streaming copy, {t['kernel'] / t['copyto']:.2f} x "
         f"np.copyto", users),
        (f"apply_rope {layout}, allocating", size, t["alloc"] * 1e3,
         f"{t['alloc'] / t['kernel']:.2f} x the out= call", ""),
        (f"apply_rope {layout}, in place", size, t["inplace"] * 1e3,
         f"{t['inplace'] / t['scale']:.2f} x (x *= 1.0)", ""),
    ]
    return rows


def _table_rows(dtype, layout, rounds):
    n, nf = TABLE
    inv = arrpos.rope_frequencies(2 * nf)[0]
    impl, host = _dispatch.front_end("host.numpy"), _dispatch.driver("host")
    cos = np.empty((n, 2 * nf), dtype)
    sin = np.empty((n, 2 * nf), dtype)
    cos.fill(1.0)
    sin.fill(1.0)
    pos = np.arange(n)

    def numpy_formula():  # transformers' default rope: float32 angles, cat(freqs, freqs)
        freqs = np.outer(pos.astype(np.float32), inv.astype(np.float32))
        emb = np.concatenate((freqs, freqs), axis=-1)
        return np.cos(emb), np.sin(emb)

    def kernel():
        impl.rope_cos_sin(pos, inv, layout=layout, attention_factor=1.0, axes=None,
                          dtype=dtype, xp=None, out=(cos, sin))

    def stream_fill():
        host.stream_fill(cos)
        host.stream_fill(sin)

    t = interleaved({"kernel": kernel, "one thread": one_thread(kernel),  # (fill: one too)
                     "fill": lambda: (cos.fill(0.0), sin.fill(0.0)), "stream": stream_fill,
                     "stream 1": one_thread(stream_fill), "numpy": numpy_formula},
                    rounds=rounds)
    size = f"({n}, {2 * nf}) x2 f{np.dtype(dtype).name[-2:]}"
    return [(f"rope_cos_sin {layout} into out", size, t["kernel"] * 1e3,
             fill_text(t, "kernel", "stream"),
             f"{t['numpy'] / t['kernel']:.1f} x faster than numpy formula"),
            (f"rope_cos_sin {layout} into out, 1 thread", size, t["one thread"] * 1e3,
             fill_text(t, "one thread", "stream 1"), "")]


def _decode_row(rounds):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(DECODE, dtype=np.float32)
    out = np.empty_like(x)
    cos, sin = _tables(1, DECODE[3], np.float32, "half")
    cos, sin = cos[None], sin[None]  # (1, 1, 1, 128)
    t = interleaved(
        {
            "kernel": lambda: arrpos.apply_rope(x, cos, sin),
            "copy": lambda: np.copyto(out, x),
        },
        rounds=rounds,
        min_time=0.05,
    )
    return ("apply_rope decode step (public call)", f"{DECODE} f32", t["kernel"] * 1e3,
            f"{t['kernel'] * 1e6:.1f} us per call", f"np.copyto of the same: {t['copy'] * 1e6:.1f} us")


def _sixteen_bit_rows(rounds):
    """float16 / bfloat16 apply (NumPy; torch bfloat16 through DLPack) against float32 on the
    same shape and ONNX Runtime float16 (into a bound output) where installed."""
    rng = np.random.default_rng(5)
    shape = (1, 2048, 32, 128)
    x32 = _buffer(rng.standard_normal(shape, dtype=np.float32))
    cos, sin = _tables(shape[1], shape[3], np.float32, "half")
    out32 = _buffer(np.zeros_like(x32))
    funcs = {"f32": lambda: arrpos.apply_rope(x32, cos, sin, out=out32)}
    dts = {"f16": np.float16}
    try:
        import ml_dtypes

        dts["bf16"] = ml_dtypes.bfloat16
    except ImportError:
        pass
    for name, dt in dts.items():
        xh, oh = _buffer(x32.astype(dt)), _buffer(np.zeros(shape, dt))
        funcs[name] = lambda xh=xh, oh=oh: arrpos.apply_rope(xh, cos, sin, out=oh)
    try:
        import torch

        tx = torch.from_numpy(x32).to(torch.bfloat16)
        tout = torch.empty_like(tx)
        tc, ts = torch.from_numpy(np.ascontiguousarray(cos)), torch.from_numpy(
            np.ascontiguousarray(sin))
        funcs["torch bf16"] = lambda: arrpos.apply_rope(tx, tc, ts, out=tout)
    except ImportError:
        pass
    from .bench_peers import MAX_POS, _cache, _ort_calls, _ort_session, _threads

    sess = _ort_session("ms", shape, np.float16, False, _threads())
    if sess is not None:  # ORT into a bound (preallocated) output, like the out= rows here
        cc, sc = (c.astype(np.float16) for c in _cache())
        pos = (np.arange(shape[1]) % MAX_POS)[None].astype(np.int64)
        funcs["ort f16"] = _ort_calls(sess, x32.astype(np.float16), pos, cc, sc)[1]
    t = interleaved(funcs, rounds=rounds)
    rows = []
    for name in [n for n in funcs if n not in ("f32", "ort f16")]:
        peer = (f"{t[name] / t['ort f16']:.2f} x ORT float16 (bound output)" if "ort f16" in t
                else "")
        rows.append((f"apply_rope {name} into out", f"{shape}", t[name] * 1e3,
                     f"{t[name] / t['f32']:.2f} x arrpos float32", peer))
    return rows


def run(quick=False, rounds=None):
    if _dispatch.front_end("host.numpy") is None:
        return [], "rope: compiled extension unavailable, nothing to compare"
    r = rounds or (3 if quick else 25)
    rows = []
    layouts = ["half"] if quick else ["half", "interleaved"]
    for layout in layouts:
        rows += _apply_rows(np.float32, layout, r, with_users=True)
    if not quick:
        rows += _apply_rows(np.float64, "half", r, with_users=False)
    for layout in layouts:
        rows += _table_rows(np.float32, layout, r)
    rows.append(_decode_row(r + 4))
    rows += _sixteen_bit_rows(r)
    return rows, None

"""The calls users make, against what they would pick instead, timed in one run.

Rows (arrpos through its public functions, dispatch and validation included):

- prefill ``apply_rope`` ``(4, 2048, 32, 128)`` float32, into ``out=`` and allocating, both
  layouts, against ONNX Runtime's two ``RotaryEmbedding`` ops (into a preallocated output with
  I/O binding, and ``run()``), torch eager (transformers' ``rotate_half``), JAX ``jit``, numba;
- the decode step from positions ``(1, 1, 32, 128)``: one token at one position, and 32
  sequences each at its own position, from a half-width cos/sin cache (the ONNX form);
- a scaling sweep over the sequence length (128 .. 8192).

Every figure is a ratio to a time measured in the same process, interleaved. Peers that are not
installed are left out (their rows say so). Threads: whatever ``OMP_NUM_THREADS`` says for
arrpos; the peers are given the same count (decode rows: ORT's faster of 1 thread and that
count). ORT's thread pool does not spin between runs here: spinning, it takes the core the next
timed call needs.
"""
from __future__ import annotations

import os

import numpy as np

import arrpos

from ._timing import interleaved, one_thread

PREFILL = (4, 2048, 32, 128)
DECODE_HEADS, HEAD_DIM, MAX_POS = 32, 128, 4096


def _threads() -> int:
    from arrpos._dispatch import compiled_threads

    return int(os.environ.get("OMP_NUM_THREADS") or compiled_threads()["threads"] or 1)


def _cache(dtype=np.float32):
    """Half-width cos/sin caches ``(MAX_POS, HEAD_DIM/2)`` (the ONNX layout) from arrpos."""
    inv, _ = arrpos.rope_frequencies(HEAD_DIM)
    cos, sin = arrpos.rope_cos_sin(np.arange(MAX_POS), inv, dtype=dtype)
    half = HEAD_DIM // 2
    return np.ascontiguousarray(cos[:, :half]), np.ascontiguousarray(sin[:, :half])


# ------------------------------------------------------------------------------ ONNX Runtime


def _ort_session(domain: str, shape, dtype, interleaved: bool, threads: int):
    """An ORT session of one RotaryEmbedding node over ``x`` ``(batch, seq, heads*dim)``."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    b, s, h, d = shape
    et = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}[dtype]
    ms = "com.microsoft" if domain == "ms" else ""
    inputs = ["x", "pos", "cos", "sin"] if ms else ["x", "cos", "sin", "pos"]
    node = helper.make_node("RotaryEmbedding", inputs, ["y"], domain=ms,
                            interleaved=int(interleaved), num_heads=h)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "rope",
        [vi("x", et, [b, s, h * d]), vi("pos", TensorProto.INT64, [b, s]),
         vi("cos", et, [MAX_POS, d // 2]), vi("sin", et, [MAX_POS, d // 2])],
        [vi("y", et, [b, s, h * d])])
    opsets = [helper.make_opsetid("", 23)] + ([helper.make_opsetid(ms, 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # ORT's pool spins after each run by default, on the core the next timed call of the
    # interleaved rounds needs: measured, it slowed every other candidate's decode step 1.5-2x
    # (arrpos's and numba's alike), as it would slow the rest of a model between two calls
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception:  # an op this ORT build lacks (e.g. float16 on the CPU)
        return None


def _ort_calls(sess, x, pos, cos, sin):
    """``run()`` (ORT allocates) and an I/O-bound call into a preallocated output."""
    b, s = x.shape[:2]
    feeds = {"x": x.reshape(b, s, -1), "pos": pos, "cos": cos, "sin": sin}
    out = np.empty_like(feeds["x"])
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("y", "cpu", element_type=out.dtype, shape=out.shape,
                        buffer_ptr=out.ctypes.data)
    keep = (feeds, out)  # the binding holds raw pointers into these: keep them alive

    def bound():
        sess.run_with_iobinding(binding)
        return keep[1]

    return (lambda: sess.run(None, feeds)), bound


# ------------------------------------------------------------------------------ the rows


def _apply_cached(x, cos, sin, ids, layout="half", out=None):
    """arrpos's decode call: the fused gather when it exists, else gather + apply_rope."""
    fused = getattr(arrpos, "apply_rope_cached", None)
    if fused is not None:
        return fused(x, cos, sin, ids, layout=layout, out=out)
    c, s = cos[ids], sin[ids]
    full = (lambda t: np.concatenate([t, t], axis=-1)) if layout == "half" else (
        lambda t: np.repeat(t, 2, axis=-1))
    return arrpos.apply_rope(x, full(c), full(s), layout=layout, out=out)


def _prefill(shape, threads):
    """Per layout, ``(layout, x, cos, sin, funcs)``: the calls both prefill row kinds time, all
    into one ``out``: arrpos's ``out=`` call, ``np.copyto``, the streaming copy, and ORT's
    ``run()`` and bound calls with ``threads`` intra-op threads."""
    rng = np.random.default_rng(0)
    b, s, _, d = shape
    x = rng.standard_normal(shape, dtype=np.float32)
    cos_c, sin_c = _cache()
    pos = np.broadcast_to(np.arange(s), (b, s)).astype(np.int64)
    limit = _stream_copy()
    for layout in ("half", "interleaved"):
        inv, _ = arrpos.rope_frequencies(d)
        cos, sin = arrpos.rope_cos_sin(np.arange(s), inv, layout=layout, dtype=np.float32)
        cos, sin = cos[:, None], sin[:, None]
        out = np.empty_like(x)
        out.fill(0)
        funcs = {"out=": lambda: arrpos.apply_rope(x, cos, sin, layout=layout, out=out),
                 "copyto": lambda: np.copyto(out, x)}
        if limit is not None:  # the memory limit: the same bytes through streaming stores
            funcs["stream"] = lambda: limit(x, out)
        for domain in ("ms", "onnx"):
            sess = _ort_session(domain, shape, np.float32, layout == "interleaved", threads)
            if sess is not None:
                funcs[f"ort-{domain} run"], funcs[f"ort-{domain} out"] = _ort_calls(
                    sess, x, pos, cos_c, sin_c)
        yield layout, x, cos, sin, funcs


def prefill_rows(rounds, quick):
    shape = (1, 512, 32, 128) if quick else PREFILL
    rows = []
    for layout, x, cos, sin, funcs in _prefill(shape, _threads()):
        funcs["alloc"] = lambda: arrpos.apply_rope(x, cos, sin, layout=layout)
        calls = _framework_calls(x, cos, sin, layout)
        spinning = {k: calls.pop(k) for k in list(calls) if k.startswith("jax")}
        funcs.update(calls)
        t = interleaved(funcs, rounds=rounds)
        if spinning:  # XLA's pool spins after each call, slowing whatever is timed next: its
            # own rounds, against the same arrpos call, scaled to this run's time of that call
            own = interleaved({"alloc": funcs["alloc"], **spinning}, rounds=rounds)
            t.update({k: own[k] * t["alloc"] / own["alloc"] for k in spinning})
        rows.append((f"apply_rope {layout} f32 out=", str(shape), t["out="] * 1e3,
                     _limit_text(t, "out="), _peer_text(t, "out=", " out")))
        rows.append((f"apply_rope {layout} f32 allocating", str(shape), t["alloc"] * 1e3,
                     f"{t['alloc'] / t['out=']:.2f} x its out= call", _peer_text(t, "alloc", " run")))
    return rows


def one_thread_rows(rounds, quick):
    """The prefill ``out=`` rows with one thread each: arrpos and the streaming copy inside
    ``one_thread_per_call`` (as a Dask task runs them), ONNX Runtime sessions of one intra-op
    thread."""
    if quick or _threads() == 1:
        return []  # (with one thread anyway, the rows above are these)
    rows = []
    for layout, _, _, _, funcs in _prefill(PREFILL, 1):
        funcs = {k: (one_thread(f) if k in ("out=", "stream") else f)
                 for k, f in funcs.items() if not k.endswith(" run")}
        t = interleaved(funcs, rounds=rounds)
        rows.append((f"apply_rope {layout} f32 out=, 1 thread", str(PREFILL), t["out="] * 1e3,
                     _limit_text(t, "out="), _peer_text(t, "out=", " out")))
    return rows


def _stream_copy():
    """The kernels' streaming copy (the benchmarks' memory limit), or None without them."""
    from arrpos._dispatch import driver

    host = driver("host")
    return None if host is None else host.stream_copy


def _limit_text(t, mine):
    """arrpos and the ORT ops into preallocated output as multiples of the streaming copy: no
    memory-bound kernel beats the copy, so a peer at c x the copy is beaten by at most c."""
    if "stream" not in t:
        return f"{t[mine] / t['copyto']:.2f} x np.copyto"
    peers = "".join(f", {k.removesuffix(' out')} {t[k] / t['stream']:.2f}" for k in t
                    if k.endswith(" out"))
    return (f"{t[mine] / t['stream']:.2f} x streaming copy{peers} "
            f"({t[mine] / t['copyto']:.2f} x np.copyto)")


def _framework_calls(x, cos, sin, layout):
    """torch eager and JAX jit of transformers' formula (both allocate their result)."""
    calls = {}
    try:
        import torch

        torch.set_num_threads(_threads())
        tx, tc, ts = (torch.from_numpy(np.ascontiguousarray(a)) for a in (x, cos, sin))

        def torch_rope():
            if layout == "half":
                x1, x2 = tx.chunk(2, dim=-1)
                rot = torch.cat((-x2, x1), dim=-1)
            else:
                rot = torch.stack((-tx[..., 1::2], tx[..., ::2]), dim=-1).flatten(-2)
            return tx * tc + rot * ts

        calls["torch eager run"] = torch_rope
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp

        @jax.jit
        def jax_rope(x, c, s):
            if layout == "half":
                h = x.shape[-1] // 2
                rot = jnp.concatenate((-x[..., h:], x[..., :h]), axis=-1)
            else:
                rot = jnp.stack((-x[..., 1::2], x[..., ::2]), axis=-1).reshape(x.shape)
            return x * c + rot * s

        jx, jc, js = (jax.device_put(a) for a in (x, cos, sin))
        calls["jax jit run"] = lambda: jax_rope(jx, jc, js).block_until_ready()
    except ImportError:
        pass
    return calls


def _peer_text(t, mine, suffix):
    """Peer time / arrpos time for the peers whose key ends in ``suffix``."""
    parts = [f"{k.removesuffix(suffix)} {t[k] / t[mine]:.2f}" for k in t if k.endswith(suffix)]
    return ("peer/arrpos: " + ", ".join(parts)) if parts else "no ONNX Runtime"


def decode_rows(rounds, quick):
    """One decode step through the public calls: ``apply_rope_cached`` from half-width caches
    and ``RoPE.apply`` from positions (its own cached tables), into ``out=`` and allocating,
    against ORT gathering from its cache into a bound output and through ``run()`` (which
    allocates), numba and NumPy; microseconds per call. Each arrpos form is paired with the
    ORT form that does the same (preallocated with bound, allocating with ``run()``)."""
    rng = np.random.default_rng(1)
    cos_c, sin_c = _cache()
    rope = arrpos.RoPE(HEAD_DIM)
    rows = []
    for batch in (1, 32):
        x = rng.standard_normal((batch, 1, DECODE_HEADS, HEAD_DIM), dtype=np.float32)
        ids = rng.integers(0, MAX_POS, size=(batch, 1)).astype(np.int64)
        ids3 = ids[:, :, None]
        out = np.empty_like(x)
        funcs = {"apply_rope_cached": lambda: _apply_cached(x, cos_c, sin_c, ids3, out=out),
                 "apply_rope_cached alloc": lambda: _apply_cached(x, cos_c, sin_c, ids3),
                 "RoPE.apply": lambda: rope.apply(x, ids, heads_axis=-2, out=out),
                 "RoPE.apply alloc": lambda: rope.apply(x, ids, heads_axis=-2),
                 "numpy": lambda: _numpy_decode(x, cos_c, sin_c, ids)}
        for n in sorted({1, _threads()}):  # ORT's best: its pool may not pay at this size
            sess = _ort_session("ms", x.shape, np.float32, False, n)
            if sess is not None:
                funcs[f"ort run {n}"], funcs[f"ort bound {n}"] = _ort_calls(sess, x, ids, cos_c,
                                                                            sin_c)
        numba_fn = _numba_decode()
        if numba_fn is not None:
            funcs["numba"] = lambda: numba_fn(x, cos_c, sin_c, ids, out)
        t = interleaved(funcs, rounds=rounds, min_time=0.01)
        what = "1 token" if batch == 1 else f"{batch} sequences, own positions"
        for mine in ("apply_rope_cached", "RoPE.apply"):
            rows.append((f"decode {mine} ({what})", str(x.shape), t[mine] * 1e3,
                         f"{t[mine] * 1e6:.2f} us into out=, {t[mine + ' alloc'] * 1e6:.2f} us "
                         f"allocating", "peer/arrpos: " + _decode_peers(t, mine)))
    return rows


def _decode_peers(t, mine):
    """ORT bound vs arrpos into out=, ORT run() vs arrpos allocating (each ORT's faster thread
    count), numba/numpy vs out=."""
    def best(kind):
        k = min((k for k in t if k.startswith(f"ort {kind} ")), key=t.get)
        return t[k], k.rsplit(" ", 1)[1]

    parts = []
    if any(k.startswith("ort ") for k in t):
        (tb, nb), (tr, nr) = best("bound"), best("run")
        parts += [f"ORT bound {tb * 1e6:.2f} us ({nb} thr) {tb / t[mine]:.2f}",
                  f"ORT run() {tr * 1e6:.2f} us ({nr} thr) {tr / t[mine + ' alloc']:.2f} "
                  "(vs allocating)"]
    else:
        parts.append("no ONNX Runtime")
    parts += [f"{k} {t[k] / t[mine]:.2f}" for k in ("numba", "numpy") if k in t]
    return ", ".join(parts)


def _numpy_decode(x, cos_c, sin_c, ids):
    c = np.concatenate([cos_c[ids], cos_c[ids]], axis=-1)[:, :, None]
    s = np.concatenate([sin_c[ids], sin_c[ids]], axis=-1)[:, :, None]
    h = x.shape[-1] // 2
    return x * c + np.concatenate((-x[..., h:], x[..., :h]), axis=-1) * s


_NUMBA = []


def _numba_decode():
    """A numba gather-and-rotate (half layout), compiled once; None without numba."""
    if _NUMBA:
        return _NUMBA[0]
    try:
        import numba
    except ImportError:
        _NUMBA.append(None)
        return None

    @numba.njit(cache=False, fastmath=False)
    def rope(x, cos_c, sin_c, ids, out):
        b, s, h, d = x.shape
        half = d // 2
        for i in range(b):
            for j in range(s):
                p = ids[i, j]
                for k in range(h):
                    for m in range(half):
                        c, sn = cos_c[p, m], sin_c[p, m]
                        a, bb = x[i, j, k, m], x[i, j, k, m + half]
                        out[i, j, k, m] = a * c - bb * sn
                        out[i, j, k, m + half] = bb * c + a * sn
        return out

    _NUMBA.append(rope)
    return rope


def sweep_rows(rounds, quick):
    rng = np.random.default_rng(3)
    rows = []
    for seq in ((128, 1024) if quick else (128, 512, 2048, 8192)):
        shape = (1, seq, 32, 128)
        x = rng.standard_normal(shape, dtype=np.float32)
        inv, _ = arrpos.rope_frequencies(128)
        cos, sin = arrpos.rope_cos_sin(np.arange(seq), inv, dtype=np.float32)
        out = np.empty_like(x)
        t = interleaved({"arrpos": lambda: arrpos.apply_rope(x, cos[:, None], sin[:, None], out=out),
                         "copy": lambda: np.copyto(out, x)}, rounds=rounds)
        rows.append(("apply_rope sweep f32 out=", str(shape), t["arrpos"] * 1e3,
                     f"{t['arrpos'] / t['copy']:.2f} x np.copyto", ""))
    return rows


def run(quick=False, rounds=None):
    r = rounds or (3 if quick else 15)
    rows = []
    for part in (prefill_rows, one_thread_rows, decode_rows, sweep_rows):  # 16-bit: bench_rope
        rows += part(r, quick)
    return rows, f"peers: {_threads()} thread(s) for arrpos, ONNX Runtime and torch"

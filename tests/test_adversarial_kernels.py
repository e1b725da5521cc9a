"""Nothing silently wrong on the kernel paths (issue 25, round 3).

* Outputs that overlap inputs other than ``x`` (the tables, the caches, the ids, the other
  tensor of ``apply_rope_qk``) or each other: one rule (``_backends.memory``) for every path,
  each answer checked against the same call on memory of its own.
* Bit-identical results at every ``ARRPOS_SIMD_LEVEL`` and thread count, for every kernel and
  storage type, on inputs whose results are subnormal, tiny, huge, infinite or NaN.
* Fake, meta, functorch-wrapped and subclass torch tensors never reach DLPack: ``vmap``,
  ``jacrev`` and ``torch.compile`` over the four entry points give the eager results.
* Position ids of every integer dtype on the kernel path.
* The thread pool's names (no OpenMP left in them).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap

import array_api_compat.numpy as npx
import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import _xp
from arrpos._backends import memory as _memory

_KERNELS = _dispatch.compiled_available()[0]
needs_kernels = pytest.mark.skipif(not _KERNELS, reason="compiled kernels not built or disabled")


# ------------------------------------------------------------------------------------------
# outputs that overlap the inputs


def _fresh(a):
    return None if a is None else np.array(a, copy=True)


def _as(lib, a):
    """``a`` in library ``lib`` sharing its memory (torch.from_numpy keeps every overlap)."""
    if a is None or lib == "numpy":
        return a
    import torch

    return torch.from_numpy(a)


def _np(a):
    return np.asarray(a) if not hasattr(a, "detach") else a.detach().numpy()


def _apply_case(name, rng):
    """``(fn, inputs, out)`` of one overlap case of apply_rope: every array a view of the
    case's buffers, ``out`` overlapping an input as the name says."""
    x = rng.standard_normal((5, 8))
    if name == "out is cos":
        buf = rng.standard_normal((2, 5, 8))
        return (x, buf[0], buf[1]), buf[0]
    if name == "out is sin":
        buf = rng.standard_normal((2, 5, 8))
        return (x, buf[0], buf[1]), buf[1]
    if name == "out shifted over cos":  # row r written before cos row r + 1 is read
        big = rng.standard_normal((6, 8))
        return (x, big[:5], rng.standard_normal((5, 8))), big[1:]
    if name == "out holds broadcast cos":  # every row reads the row out writes first
        big = rng.standard_normal((5, 8))
        return (x, big[:1], rng.standard_normal((1, 8))), big
    if name == "out shifted over x":
        big = rng.standard_normal((6, 8))
        return (big[:5], rng.standard_normal((5, 8)), rng.standard_normal((5, 8))), big[1:]
    if name == "partial rotary, out shifted over x":
        big = rng.standard_normal((6, 10))
        return (big[:5], rng.standard_normal((5, 8)), rng.standard_normal((5, 8))), big[1:]
    raise AssertionError(name)


_APPLY_CASES = ["out is cos", "out is sin", "out shifted over cos", "out holds broadcast cos",
                "out shifted over x", "partial rotary, out shifted over x"]


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("case", _APPLY_CASES)
def test_apply_rope_out_overlapping_an_input_is_exact(lib, layout, case):
    """Was wrong on the kernel path (off by more than 1): the rows read tables the earlier rows
    had overwritten. Now the answer of the same call on memory of its own, bit for bit."""
    if lib == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    inputs, out = _apply_case(case, rng)
    want = arrpos.apply_rope(*(_as(lib, _fresh(a)) for a in inputs), layout=layout)
    got = arrpos.apply_rope(*(_as(lib, a) for a in inputs), layout=layout, out=_as(lib, out))
    np.testing.assert_array_equal(_np(out), _np(want))
    np.testing.assert_array_equal(_np(got), _np(want))


def _cached_case(name, rng):
    """``(inputs, out)`` for apply_rope_cached, caches of equal strides (as the kernel wants
    them); ids reversed so that the rows written first are the cache rows read last."""
    x = rng.standard_normal((4, 8))
    ids = np.array([3, 2, 1, 0])
    big, other = rng.standard_normal((2, 16, 8))
    if name == "out over cos_cache":
        return (x, big[:, :4], other[:, 4:], ids), big[:4]
    if name == "out over sin_cache":
        return (x, other[:, :4], big[:, 4:], ids), big[:4]
    if name == "out over position_ids":  # the ids in out's first row: zeros once row 0 is
        x[0] = 0.0                       # written, a valid id, so a wrong answer, not a crash
        raw = np.zeros(32)
        ids_view = raw[:4].view(np.int64)
        ids_view[...] = ids
        return (x, big[:, :4], big[:, 4:], ids_view), raw.reshape(4, 8)
    if name == "out shifted over x":
        xs = rng.standard_normal((5, 8))
        return (xs[:4], big[:, :4], big[:, 4:], ids), xs[1:]
    raise AssertionError(name)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("case", ["out over cos_cache", "out over sin_cache",
                                  "out over position_ids", "out shifted over x"])
def test_apply_rope_cached_out_overlapping_an_input_is_exact(lib, case):
    if lib == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    inputs, out = _cached_case(case, rng)
    want = arrpos.apply_rope_cached(*(_as(lib, _fresh(a)) for a in inputs))
    got = arrpos.apply_rope_cached(*(_as(lib, a) for a in inputs), out=_as(lib, out))
    np.testing.assert_array_equal(_np(out), _np(want))
    np.testing.assert_array_equal(_np(got), _np(want))


def _qk(rng, lib):
    q = rng.standard_normal((2, 4, 8))
    k = rng.standard_normal((2, 4, 8))
    cos, sin = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    want = arrpos.apply_rope_qk(*(_as(lib, _fresh(a)) for a in (q, k, cos, sin)))
    return [_as(lib, a) for a in (q, k, cos, sin)], [_np(w).copy() for w in want]


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("pair", ["k, q", "k, None", "None, q", "over cos, k"])
def test_apply_rope_qk_outputs_that_are_the_other_input(lib, pair):
    """``out=(k, q)``, ``(k, None)``: k was rotated after q's result had overwritten it, on
    every path. Now each result is that of memory of its own."""
    if lib == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    (q, k, cos, sin), (wq, wk) = _qk(rng, lib)
    if pair == "over cos, k":  # q_out holds the tables q and k are rotated by; k in place
        buf = np.empty((2, 4, 8))
        buf[0] = _np(cos)
        cos = _as(lib, buf[0])
        out = (_as(lib, buf), k)
    else:
        env = {"q": q, "k": k, "None": None}
        out = tuple(env[n.strip()] for n in pair.split(","))
    got = arrpos.apply_rope_qk(q, k, cos, sin, out=out)
    np.testing.assert_array_equal(_np(got[0]), wq)
    np.testing.assert_array_equal(_np(got[1]), wk)
    for o, w in zip(out, (wq, wk)):
        if o is not None:
            np.testing.assert_array_equal(_np(o), w)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("which", ["same array twice", "q twice", "shifted views"])
def test_apply_rope_qk_outputs_that_overlap_each_other_are_refused(lib, which):
    """``out=(o, o)`` gave k's result in both (q's silently lost): now a ValueError naming
    out."""
    if lib == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    (q, k, cos, sin), _ = _qk(rng, lib)
    if which == "same array twice":
        o = _as(lib, np.empty((2, 4, 8)))
        out = (o, o)
    elif which == "q twice":
        out = (q, q)
    else:
        buf = np.empty(2 * 4 * 8 + 8)
        out = (_as(lib, buf[:64].reshape(2, 4, 8)), _as(lib, buf[8:].reshape(2, 4, 8)))
    before = _np(q).copy()
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\]"):
        arrpos.apply_rope_qk(q, k, cos, sin, out=out)
    np.testing.assert_array_equal(_np(q), before)  # nothing written


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_apply_rope_qk_fused_qkv_in_place(lib):
    """q and k as interleaved views of one fused buffer (their bounds meet, their elements do
    not): rotated in place, no error."""
    if lib == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    qkv = rng.standard_normal((4, 3, 2, 8))  # (seq, q/k/v, heads, dim)
    cos, sin = rng.standard_normal((4, 1, 8)), rng.standard_normal((4, 1, 8))
    want = arrpos.apply_rope_qk(_fresh(qkv[:, 0]), _fresh(qkv[:, 1]), cos, sin)
    t = _as(lib, qkv)
    q, k = t[:, 0], t[:, 1]
    got = arrpos.apply_rope_qk(q, k, _as(lib, cos), _as(lib, sin), out=(q, k))
    assert got[0] is q and got[1] is k
    np.testing.assert_array_equal(qkv[:, 0], want[0])
    np.testing.assert_array_equal(qkv[:, 1], want[1])


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_apply_rope_qk_in_place_q_with_a_k_the_kernel_declines(lib):
    """q rotated in place by the kernel, then k refused by it (a strided feature axis): the
    generic path that served the call rotated q a second time. Now k is asked first."""
    if lib == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    q = rng.standard_normal((4, 8))
    k = rng.standard_normal((4, 16))[:, ::2]
    cos, sin = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    want = arrpos.apply_rope_qk(_fresh(q), _fresh(k), cos, sin)
    tq, tk = _as(lib, q), _as(lib, k)
    arrpos.apply_rope_qk(tq, tk, _as(lib, cos), _as(lib, sin), out=(tq, tk))
    np.testing.assert_array_equal(q, want[0])
    np.testing.assert_array_equal(k, want[1])


@pytest.fixture(params=["kernels", "generic"])
def path(request, monkeypatch):
    """The dispatcher with its front-ends, or with none (the generic code): the rule holds for
    both."""
    if request.param == "kernels" and not _KERNELS:
        pytest.skip("compiled kernels not built or disabled")
    if request.param == "generic":
        monkeypatch.setattr(_dispatch, "candidates", lambda xp: ())
        monkeypatch.setattr(_dispatch, "_BY_KIND", {})
    return request.param


def test_tables_into_outputs_that_overlap(path):
    """Tables into ``out`` (the kernels' and the twins' ``out=``): a table over its own
    positions is exact, cos and sin over each other a ValueError naming out."""
    pos = np.arange(6.0)
    inv = np.array([1.0, 0.25, 0.01])
    kw = dict(layout="half", attention_factor=1.0, axes=None, dtype=np.float64)
    want = _xp.rope_cos_sin(pos, inv, xp=npx, **kw)
    buf = np.zeros((2, 6, 6))
    buf[0, :, 0] = pos  # the positions live in cos' first column
    got = _dispatch.call("rope_cos_sin", npx, buf[0, :, 0], inv, arrays=(buf[0, :, 0], inv),
                         out=(buf[0], buf[1]), **kw)
    assert got[0] is buf[0] or np.shares_memory(got[0], buf[0])
    np.testing.assert_array_equal(buf[0], want[0])
    np.testing.assert_array_equal(buf[1], want[1])
    with pytest.raises(ValueError, match="out"):
        _dispatch.call("rope_cos_sin", npx, pos, inv, arrays=(pos, inv),
                       out=(buf[0], buf[0]), **kw)
    hi, lo = inv.copy(), np.zeros(3)
    skw = dict(layout="interleaved", dtype=np.float64, width=6)
    want = _xp.sinusoid_table(pos, hi, lo, xp=npx, **skw)
    table = np.zeros((6, 6))
    table[:, 5] = pos
    _dispatch.call("sinusoid_table", npx, table[:, 5], hi, lo, arrays=(table[:, 5],),
                   out=table, **skw)
    np.testing.assert_array_equal(table, want)


def test_the_rule_on_both_paths(path):
    """The dispatcher's rule, with and without the kernels: the same answers."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 8))
    buf = rng.standard_normal((2, 5, 8))
    want = _xp.apply_rope(x, _fresh(buf[0]), _fresh(buf[1]), layout="half", inverse=False,
                          xp=npx)
    _dispatch.call("apply_rope", npx, x, buf[0], buf[1], arrays=(x, buf[0], buf[1], buf[0]),
                   layout="half", inverse=False, out=buf[0])
    np.testing.assert_array_equal(buf[0], want)
    q, k = rng.standard_normal((2, 5, 8))
    cos, sin = rng.standard_normal((2, 5, 8))
    wq, wk = _xp.apply_rope_qk(_fresh(q), _fresh(k), cos, sin, layout="half", inverse=False,
                               xp=npx)
    _dispatch.call("apply_rope_qk", npx, q, k, cos, sin, arrays=(q, k, cos, sin, k, q),
                   layout="half", inverse=False, out=(k, q))
    np.testing.assert_array_equal(k, wq)
    np.testing.assert_array_equal(q, wk)


def test_overlap_is_exact_and_reads_no_memory():
    """Interleaved views meet in their bounds but share no element: "none"; the same view
    through another object: "same"; arrays without memory (a list here stands for a lazy
    array): "none"."""
    buf = np.zeros((4, 2, 8))
    assert _memory.overlap(buf[:, 0], buf[:, 1]) == "none"
    assert _memory.overlap(buf[:, 0], buf[:, 0]) == "same"
    assert _memory.overlap(buf[1:], buf[:-1]) == "partial"
    assert _memory.overlap(buf, [1, 2]) == "none"
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(buf)
    assert _memory.overlap(t[:, 0], t[:, 1]) == "none"
    assert _memory.overlap(t[:, 0], t.select(1, 0)) == "same"
    assert _memory.overlap(t[1:], t[:-1]) == "partial"
    assert _memory.overlap(t, t.to("meta")) == "none"


# the CUDA front-ends (tests/cuda_emulation.py: the kernels on the CPU, CPU tensors standing in
# for CUDA ones)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    import cuda_emulation

    try:
        return cuda_emulation.build(tmp_path_factory.mktemp("cuda_emulation_adversarial"))
    except RuntimeError as exc:
        pytest.skip(f"CUDA emulation unavailable: {exc}")


@pytest.fixture
def cp(emulator, monkeypatch):
    import cuda_emulation
    from arrpos._backends.cuda import driver

    fake = cuda_emulation.FakeCupy(emulator)
    for name in ("_MODULES", "_FUNCTIONS", "_SM_COUNT", "_FAILED"):  # compiled per fake device
        monkeypatch.setattr(driver, name, {})
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


def test_cupy_front_end_through_the_dispatcher(cp, monkeypatch):
    """The rule in front of the CuPy front-end: out over the tables, the swapped qk pair, an
    out over the caches; the driver itself declines such an out (it never writes it)."""
    from arrpos._backends.cuda import cupy as _cupy

    monkeypatch.setattr(_dispatch, "candidates", lambda xp: (_cupy,))
    rng = np.random.default_rng(8)
    x = cp.asfake(rng.standard_normal((5, 8)))
    buf = cp.asfake(rng.standard_normal((2, 5, 8)))
    cos, sin = buf[0], buf[1]
    want = _xp.apply_rope(_fresh(x), _fresh(cos), _fresh(sin), layout="half", inverse=False,
                          xp=npx)
    with pytest.raises(_dispatch.Unsupported):
        _cupy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=cp, out=cos)
    np.testing.assert_array_equal(cos, buf[0])  # declined before any launch
    launches = len(cp.launches)
    _dispatch.call("apply_rope", npx, x, cos, sin, arrays=(x, cos, sin, cos), layout="half",
                   inverse=False, out=cos)
    assert len(cp.launches) == launches + 1  # the kernel, into a temporary
    np.testing.assert_allclose(np.asarray(buf[0]), want, rtol=0, atol=1e-14)

    q, k = (cp.asfake(a) for a in rng.standard_normal((2, 2, 4, 8)))
    c2, s2 = (cp.asfake(a) for a in rng.standard_normal((2, 4, 8)))
    wq, wk = _xp.apply_rope_qk(_fresh(q), _fresh(k), _fresh(c2), _fresh(s2), layout="half",
                               inverse=False, xp=npx)
    _dispatch.call("apply_rope_qk", npx, q, k, c2, s2, arrays=(q, k, c2, s2, k, q),
                   layout="half", inverse=False, out=(k, q))
    np.testing.assert_allclose(np.asarray(k), wq, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(q), wk, rtol=0, atol=1e-14)

    big = cp.asfake(rng.standard_normal((16, 8)))
    cc, sc = big[:, :4], cp.asfake(rng.standard_normal((16, 4)))
    ids = cp.asfake(np.array([3, 2, 1, 0]))
    xc = cp.asfake(rng.standard_normal((4, 8)))
    want = _xp.apply_rope_cached(_fresh(xc), _fresh(cc), _fresh(sc), _fresh(ids), layout="half",
                                 inverse=False, xp=npx)
    _dispatch.call("apply_rope_cached", npx, xc, cc, sc, ids, arrays=(xc, cc, sc, ids, big[:4]),
                   layout="half", inverse=False, out=big[:4])
    np.testing.assert_allclose(np.asarray(big[:4]), want, rtol=0, atol=1e-14)


def test_cupy_qk_declines_before_writing(cp):
    """k's launch refused (leading axes the kernels do not index): q, in place, is untouched,
    so the generic code that then serves the call rotates it once."""
    from arrpos._backends.cuda import cupy as _cupy

    rng = np.random.default_rng(9)
    q = cp.asfake(rng.standard_normal((4, 8)))
    before = np.array(q)
    k = cp.asfake(rng.standard_normal((3, 3, 3, 3, 3, 8)))[::2, ::2, ::2, ::2, ::2]
    cos = cp.asfake(rng.standard_normal(8))
    with pytest.raises(_dispatch.Unsupported):
        _cupy.apply_rope_qk(q, k, cos, cos, layout="half", inverse=False, xp=cp, out=(q, None))
    np.testing.assert_array_equal(np.asarray(q), before)


def test_torch_cuda_bridge_overlap_and_fakes(cp, monkeypatch):
    """The torch CUDA front-end (CPU tensors standing in): the swapped qk pair is exact through
    the dispatcher; tensors without memory (meta, a subclass) are declined."""
    torch = pytest.importorskip("torch")
    from arrpos._backends.cuda import torch_cuda as _torch_cuda

    monkeypatch.setattr(_torch_cuda, "_on_torch_stream", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_torch_cuda, "cupy_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(_dispatch, "candidates", lambda xp: (_torch_cuda,))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, 4, 8, generator=g, dtype=torch.float64)
    cos, sin = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    wq, wk = _xp.apply_rope_qk(q.numpy().copy(), k.numpy().copy(), cos.numpy(), sin.numpy(),
                               layout="half", inverse=False, xp=npx)
    assert _torch_cuda.supports("apply_rope_qk", (q, k, cos, sin, None, None))
    launches = len(cp.launches)
    _dispatch.call("apply_rope_qk", npx, q, k, cos, sin, arrays=(q, k, cos, sin, k, q),
                   layout="half", inverse=False, out=(k, q))
    assert len(cp.launches) == launches + 2
    np.testing.assert_allclose(k.numpy(), wq, rtol=0, atol=1e-14)
    np.testing.assert_allclose(q.numpy(), wk, rtol=0, atol=1e-14)

    class Sub(torch.Tensor):
        pass

    for odd in (q.to("meta"), q.as_subclass(Sub)):
        assert not _torch_cuda.supports("apply_rope", (odd, cos, sin, None))


# ------------------------------------------------------------------------------------------
# every SIMD level and thread count: the same bits

_LEVEL_SCRIPT = textwrap.dedent(r'''
    import sys
    import numpy as np
    from arrpos._backends import _cpu
    from arrpos._backends.host import driver

    F32, F64, F16, BF16 = _cpu.F32, _cpu.F64, _cpu.F16, _cpu.BF16
    rng = np.random.default_rng(7)
    res = {}


    def bf16_bits(a32):
        u = np.ascontiguousarray(a32, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np.int16)


    def wild(shape, code):
        """magnitudes over the type's whole range (products: subnormal to overflowing), with
        zeros, infinities and NaNs; float32 tables carry NaNs of every payload"""
        lo_hi = {F64: (-330, 308), F32: (-46, 38), BF16: (-46, 38), F16: (-9, 4.8)}[code]
        v = rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(*lo_hi, shape)
        flat = v.reshape(-1)
        idx = rng.permutation(flat.size)
        n = flat.size
        flat[idx[: n // 20]] = 0.0
        flat[idx[n // 20: n // 10]] = np.inf
        flat[idx[n // 10: n // 7]] = -np.inf
        flat[idx[n // 7: n // 5]] = np.nan
        if code == F64:
            return v
        if code == F16:
            return v.astype(np.float16)
        if code == BF16:
            return bf16_bits(v.astype(np.float32))
        v = v.astype(np.float32)
        u = v.view(np.uint32)
        m = rng.random(shape) < 0.05
        u[m] = (0x7F800001 + rng.integers(0, 0x7FFFFF, m.sum(), dtype=np.uint32)) | (
            rng.integers(0, 2, m.sum(), dtype=np.uint32) << 31)
        return v


    RUNS = ((1, 1 << 18, False), (2, 64, False), (2, 64, True))  # threads, chunk, streaming
    for tx, tc in sorted(_cpu.APPLY_TYPES):
        for R in (40, 44, 64):  # vectors and tails of every width
            rows, D = 37, R + 6
            x, cos, sin = wild((rows, D), tx), wild((rows, R), tc), wild((rows, R), tc)
            ids = rng.integers(0, rows, rows)
            caches = cos[:, : R // 2].copy(), sin[:, : R // 2].copy()
            for inter in (False, True):
                for inv in (False, True):
                    for nth, chunk, stream in RUNS:
                        out = np.zeros_like(x)
                        _cpu.apply_rope(x, cos, sin, out, tx, tc, inter, inv, nth, stream,
                                        chunk)
                        res[f"apply_rope {tx} {tc} {R} {inter} {inv} {nth} {stream}"] = out
                        out = np.zeros_like(x)
                        _cpu.apply_rope_cached(x, *caches, ids, out, tx, tc, inter, inv, nth,
                                               stream, chunk)
                        res[f"apply_rope_cached {tx} {tc} {R} {inter} {inv} {nth} {stream}"] = out
            for nth, chunk, stream in RUNS:  # in place
                out = x.copy()
                _cpu.apply_rope(out, cos, sin, out, tx, tc, False, False, nth, stream, chunk)
                res[f"in place {tx} {tc} {R} {nth} {stream}"] = out

    store = {F32: np.float32, F64: np.float64, F16: np.float16, BF16: np.int16}
    pos = np.concatenate([np.arange(300.0), rng.uniform(-1e6, 1e6, 50)])
    for freqs in ("tiny", "plain"):  # tiny: sin(p w) subnormal in every storage type
        nf = 40
        hi = 10.0 ** rng.uniform(*((-46, -30) if freqs == "tiny" else (-4, 0)), nf)
        lo = np.zeros(nf)
        rc, rs, pc, ps = driver.rotation_tables(hi.tobytes(), lo.tobytes())
        for code in (F32, F64, F16, BF16):
            for nth, chunk, stream in ((1, 1 << 20, False), (2, 256, False), (2, 256, True)):
                for layout in (0, 1, 2):
                    out = np.zeros((pos.size, 2 * nf), store[code])
                    _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, out, code, layout, nth,
                                        stream, chunk)
                    res[f"sinusoid_table {freqs} {code} {layout} {nth} {stream}"] = out
                for inter in (False, True):
                    for scale in (1.0, 1e-40, 3e-39, 1e-310, 1e5, 1e38, 1e300):
                        a = np.zeros((pos.size, 2 * nf), store[code])
                        b = np.zeros_like(a)
                        _cpu.rope_table(pos, rc, rs, pc, ps, hi, lo, a, b, code, inter, scale,
                                        nth, stream, chunk)
                        key = f"rope_table {freqs} {code} {inter} {scale} {nth} {stream}"
                        res[key] = np.concatenate([a, b])
    np.savez(sys.argv[1], **{k: v.view(np.uint8) for k, v in res.items()})
    print(_cpu.instruction_set())
''')

_STORE = {"0": np.float32, "1": np.float64, "2": np.float16, "3": np.uint16}


def _values(raw, code):
    """The stored values as floats (bfloat16 widened exactly to float32)."""
    if code == "3":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw.view(_STORE[code])


@pytest.fixture(scope="module")
def level_results(tmp_path_factory):
    """Every kernel's outputs at each SIMD level this CPU has (0 .. its own), one subprocess
    per level with ARRPOS_SIMD_LEVEL set, as it is read once per process."""
    if not _KERNELS:
        pytest.skip("compiled kernels not built or disabled")
    from arrpos._backends import _cpu

    tmp = tmp_path_factory.mktemp("simd_levels")
    script = tmp / "levels.py"
    script.write_text(_LEVEL_SCRIPT)
    out = {}
    for level in range(_cpu.instruction_set() + 1):
        env = dict(os.environ, ARRPOS_SIMD_LEVEL=str(level))
        path = tmp / f"level{level}.npz"
        proc = subprocess.run([sys.executable, str(script), str(path)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.split()[-1] == str(level)
        with np.load(path) as data:
            out[level] = {k: data[k] for k in data.files}
    return out


def _key_code(key):
    parts = key.split()
    if parts[0] in ("apply_rope", "apply_rope_cached"):
        return parts[1]
    if parts[0] == "in":  # "in place tx ..."
        return parts[2]
    return parts[2]  # tables: kind, freqs, code


def test_every_simd_level_and_thread_count_gives_the_same_bits(level_results):
    """Every kernel x storage type, every level, one and two threads, cached and streaming
    stores: identical bits wherever the result is a number, NaN at the same places (a NaN's
    payload and sign follow the operand order the compiler picked, which IEEE leaves open).
    Failed before: AVX-512-BF16 flushed bfloat16 subnormals to zero; AVX-512 turned a NaN
    with high payload bits into -0 (bfloat16); the vector levels' row tails were fused into
    vfmaddsub (one rounding where the other levels round twice)."""
    levels = sorted(level_results)
    base = level_results[levels[0]]
    bad = []
    for key, raw0 in base.items():
        code = _key_code(key)
        v0 = _values(raw0, code)
        runs = [(lv, level_results[lv][key]) for lv in levels]
        # the same call's other thread counts and store kinds, at every level
        stem = " ".join(key.split()[:-2])
        runs += [(f"{lv}/{k}", level_results[lv][k]) for lv in levels
                 for k in level_results[lv] if k != key and k.startswith(stem + " ")]
        for where, raw in runs:
            v = _values(raw, code)
            nan0, nan = np.isnan(v0), np.isnan(v)
            same = (nan0 == nan) & (nan0 | (v0.view(f"u{v0.itemsize}") ==
                                            v.view(f"u{v.itemsize}")))
            if not same.all():
                i = np.flatnonzero(~same.reshape(-1))[0]
                bad.append(f"{key} at level {where}: {v0.reshape(-1)[i]!r} vs "
                           f"{v.reshape(-1)[i]!r}")
    assert not bad, "\n".join(bad[:20]) + f"\n({len(bad)} in all)"


_SUBNORMAL_SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import torch
    from arrpos._backends import _cpu

    g = torch.Generator().manual_seed(0)
    mag = 10.0 ** (torch.rand(64, 48, generator=g, dtype=torch.float64) * 30 - 45)
    x32 = (mag * torch.sign(torch.randn(64, 48, generator=g, dtype=torch.float64))).float()
    c32 = torch.rand(64, 48, generator=g) * 2 - 1
    s32 = torch.rand(64, 48, generator=g) * 2 - 1
    rows = {}
    for tc in ("bf16", "f32"):
        x = x32.to(torch.bfloat16)
        c = c32.to(torch.bfloat16) if tc == "bf16" else c32
        s = s32.to(torch.bfloat16) if tc == "bf16" else s32
        xf, cf, sf = x.float(), c.float(), s.float()
        h = 24
        want = torch.cat([xf[:, :h] * cf[:, :h] - xf[:, h:] * sf[:, :h],
                          xf[:, h:] * cf[:, h:] + xf[:, :h] * sf[:, h:]], -1).to(torch.bfloat16)
        out = torch.empty_like(x)
        code = _cpu.BF16 if tc == "bf16" else _cpu.F32
        _cpu.apply_rope(np.from_dlpack(x.view(torch.int16)), np.from_dlpack(c.view(torch.int16))
                        if tc == "bf16" else c.numpy(), np.from_dlpack(s.view(torch.int16))
                        if tc == "bf16" else s.numpy(), np.from_dlpack(out.view(torch.int16)),
                        _cpu.BF16, code, False, False)
        sub = (want.float().abs() < 2**-126) & (want.float() != 0)
        rows[tc] = [int(sub.sum()), bool(torch.equal(out.view(torch.int16),
                                                     want.view(torch.int16)))]
    print(json.dumps([_cpu.instruction_set(), rows]))
''')


@needs_kernels
def test_bfloat16_subnormal_results_at_every_level(tmp_path):
    """bfloat16 x (with bfloat16 or float32 tables) whose results are bfloat16 subnormals: the
    bits torch gives, at every level (AVX-512-BF16 gave zeros)."""
    pytest.importorskip("torch")
    from arrpos._backends import _cpu

    script = tmp_path / "sub.py"
    script.write_text(_SUBNORMAL_SCRIPT)
    for level in range(_cpu.instruction_set() + 1):
        env = dict(os.environ, ARRPOS_SIMD_LEVEL=str(level))
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got_level, rows = json.loads(proc.stdout.strip().splitlines()[-1])
        assert got_level == level
        for tc, (n_sub, equal) in rows.items():
            assert n_sub > 50, (level, tc, n_sub)  # the case is exercised
            assert equal, (level, tc)


# ------------------------------------------------------------------------------------------
# fake, functorch-wrapped, meta and subclass tensors


@pytest.fixture
def torch_setup():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 3, 8, generator=g)
    inv, _ = arrpos.rope_frequencies(8)
    cos, sin = arrpos.rope_cos_sin(torch.arange(5), torch.tensor(inv), dtype=torch.float32)
    cos, sin = cos[:, None, :], sin[:, None, :]
    cc, sc = cos[:, 0, :4].contiguous(), sin[:, 0, :4].contiguous()
    ids = torch.arange(5)[:, None]
    rope = arrpos.RoPE(8)
    fns = {
        "apply_rope": lambda a: arrpos.apply_rope(a, cos, sin),
        "apply_rope_qk": lambda a: torch.stack(arrpos.apply_rope_qk(a, 2 * a, cos, sin)),
        "apply_rope_cached": lambda a: arrpos.apply_rope_cached(a, cc, sc, ids),
        "RoPE.apply": lambda a: rope.apply(a, torch.arange(5), heads_axis=-2),
    }
    return torch, x, fns


_ENTRY = ["apply_rope", "apply_rope_qk", "apply_rope_cached", "RoPE.apply"]


@pytest.mark.parametrize("name", _ENTRY)
def test_vmap(torch_setup, name):
    """vmap's batched tensors have no storage: "Cannot access data pointer" before."""
    torch, x, fns = torch_setup
    fn = fns[name]
    want = torch.stack([fn(x[i]) for i in range(x.shape[0])])
    torch.testing.assert_close(torch.func.vmap(fn)(x), want)


@pytest.mark.parametrize("name", _ENTRY)
def test_jacrev(torch_setup, name):
    """The Jacobian of a rotation is the rotation of the basis: the rotation's own values."""
    torch, x, fns = torch_setup
    fn = fns[name]
    x0 = x[0]
    jac = torch.func.jacrev(fn)(x0)
    basis = torch.eye(x0.numel()).reshape((x0.numel(),) + tuple(x0.shape))
    want = torch.stack([fn(b) for b in basis], dim=-1).reshape(jac.shape)
    torch.testing.assert_close(jac, want)


@pytest.mark.parametrize("name", _ENTRY)
def test_torch_compile(torch_setup, name):
    """Dynamo traces with FakeTensors: ``from_dlpack(FakeTensor)`` failed before. Graph breaks
    are allowed (fullgraph=False); the eager backend keeps the test fast, the tracing is the
    same."""
    torch, x, fns = torch_setup
    fn = fns[name]
    want = fn(x)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=False, backend="eager")(x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", _ENTRY)
def test_functionalize(torch_setup, name):
    """functionalize's wrappers have a data pointer: the kernel wrote into the memory under
    one, out of functionalize's sight (a wrong answer)."""
    torch, x, fns = torch_setup
    fn = fns[name]
    torch.testing.assert_close(torch.func.functionalize(fn)(x), fn(x))


@pytest.mark.parametrize("name", ["apply_rope", "apply_rope_qk"])
def test_make_fx(torch_setup, name):
    """make_fx (a dispatch mode) traced no operation for the rotation: a kernel reached through
    DLPack is invisible to it. (The cached forms read their ids' values, which make_fx
    refuses to trace.)"""
    torch, x, fns = torch_setup
    fn = fns[name]
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(fn)(x)
    other = torch.randn(x.shape, generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(graph(other), fn(other))


def test_meta_and_subclass_tensors_take_the_generic_path(torch_setup):
    """Meta tensors (no memory) and tensor subclasses (their own semantics) are declined; the
    generic code serves them."""
    torch, x, fns = torch_setup

    class Sub(torch.Tensor):
        pass

    cos = torch.ones(5, 1, 8)
    y = arrpos.apply_rope(x.to("meta"), cos.to("meta"), cos.to("meta"))
    assert y.is_meta and y.shape == x.shape
    sub = arrpos.apply_rope(x.as_subclass(Sub), cos, cos)
    torch.testing.assert_close(torch.Tensor(sub), arrpos.apply_rope(x, cos, cos))
    if _dispatch.compiled_available(ignore_switch=True)[0]:
        from arrpos._backends.host import torch_cpu as _torch_cpu

        for odd in (x.to("meta"), x.as_subclass(Sub)):
            assert not _torch_cpu.supports("apply_rope", (odd, cos, cos, None))
        assert _torch_cpu.supports("apply_rope", (x, cos, cos, None))


# ------------------------------------------------------------------------------------------
# integer ids of every dtype


_TORCH_INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@pytest.mark.parametrize("dtype", _TORCH_INTS)
def test_torch_ids_of_every_integer_dtype(dtype):
    """uint16/uint32/uint64 ids raised torch's "not implemented for 'UInt16'" (the range check,
    the min/max of RoPE.apply); the kernel path now takes them all, with the int64 results."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 3, 8, generator=g)
    cc, sc = torch.randn(16, 4, generator=g), torch.randn(16, 4, generator=g)
    ids = torch.tensor([[1, 3, 0, 15, 7], [2, 2, 9, 4, 11]])[:, :, None]
    want = arrpos.apply_rope_cached(x, cc, sc, ids)
    torch.testing.assert_close(arrpos.apply_rope_cached(x, cc, sc, ids.to(dt)), want,
                               rtol=0, atol=0)
    grad = x.clone().requires_grad_()  # the generic path, for comparison
    torch.testing.assert_close(arrpos.apply_rope_cached(grad, cc, sc, ids.to(dt)).detach(),
                               want, rtol=0, atol=1e-6)
    top = 127 if dtype == "int8" else 255 if dtype == "uint8" else 16
    bad = ids.clone()
    bad[0, 0, 0] = top
    with pytest.raises(ValueError, match="position_ids"):
        arrpos.apply_rope_cached(x, cc, sc, bad.to(dt))
    rope = arrpos.RoPE(8)
    pos = torch.tensor([0, 1, 2, 5, 9])
    torch.testing.assert_close(rope.apply(x, pos.to(dt), heads_axis=-2),
                               rope.apply(x, pos, heads_axis=-2), rtol=0, atol=0)


def test_torch_uint64_ids_past_int64_are_out_of_range():
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 8)
    cc = torch.randn(16, 4)
    ids = torch.tensor([2**63 + 5], dtype=torch.uint64)
    with pytest.raises(ValueError, match="position_ids"):
        arrpos.apply_rope_cached(x, cc, cc, ids)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "uint64"])
def test_numpy_ids_of_every_integer_dtype(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)
    cc, sc = rng.standard_normal((2, 16, 4)).astype(np.float32)
    ids = np.array([[1, 3, 0, 15, 7], [2, 2, 9, 4, 11]])[:, :, None]
    want = arrpos.apply_rope_cached(x, cc, sc, ids)
    np.testing.assert_array_equal(arrpos.apply_rope_cached(x, cc, sc, ids.astype(dtype)), want)
    bad = ids.copy()
    bad[1, 4, 0] = 16
    with pytest.raises(ValueError, match="position_ids"):
        arrpos.apply_rope_cached(x, cc, sc, bad.astype(dtype))
    rope = arrpos.RoPE(8)
    pos = np.array([0, 1, 2, 5, 9])
    np.testing.assert_array_equal(rope.apply(x, pos.astype(dtype), heads_axis=-2),
                                  rope.apply(x, pos, heads_axis=-2))


# ------------------------------------------------------------------------------------------
# names


def test_thread_pool_names():
    """The kernels run on their own pool: no OpenMP in the names (``info --json`` reads
    ``compiled_threads()``)."""
    info = _dispatch.compiled_threads()
    assert set(info) == {"thread_pool", "threads"}
    if _dispatch.compiled_available(ignore_switch=True)[0]:
        from arrpos._backends import _cpu
        from arrpos._backends.host import driver

        assert not hasattr(_cpu, "have_openmp") and not hasattr(driver, "have_openmp")
        assert info["thread_pool"] == driver.have_threads()

"""Training through the kernels: the rotations as ``torch.library`` custom ops
(``arrpos/_backends/torch_ops.py``), taken by the torch front-ends for tensors that require
grad and under ``torch.compile`` and ``torch.func`` transforms.

References: the generic Array API path (``arrpos._backends._xp``, what
``ARRPOS_NO_EXTENSIONS=1`` serves: ordinary torch expressions under torch's own autograd), and
independently transformers' own code, run here: LLaMA's ``apply_rotary_pos_emb`` /
``rotate_half`` (transformers/models/llama/modeling_llama.py) for the half layout and GPT-J's
``rotate_every_two`` (transformers/models/gptj/modeling_gptj.py) for the interleaved one, with
torch's autograd, and ``torch.autograd.gradcheck`` (finite differences) in float64.
``torch.compile`` is slow on small machines: its tests are few and small, and all but one use
the ``aot_eager`` backend (fake tensors and AOT autograd, the parts that meet the ops).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import arrpos  # noqa: E402
from arrpos import _dispatch  # noqa: E402
from arrpos._backends import _xp  # noqa: E402
from arrpos._lib import array_namespace  # noqa: E402

KERNELS = _dispatch.compiled_available()[0]
needs_kernels = pytest.mark.skipif(not KERNELS, reason="compiled kernels not built or disabled")
LAYOUTS = ("half", "interleaved")
DTYPES = (torch.float32, torch.bfloat16)
# (value, gradient) tolerances against the generic path: one rounding apart at most
TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
       torch.float64: dict(rtol=1e-12, atol=1e-12)}


def _calls():
    """What the ops' bodies ran so far: ``(kernel, generic)`` counts over the three ops."""
    if not KERNELS:
        return 0, 0
    from arrpos._backends import torch_ops

    c = torch_ops.CALLS
    return (sum(v for (_, how), v in c.items() if how == "kernel"),
            sum(v for (_, how), v in c.items() if how == "generic"))


def _ran(before, kernel):
    """The ops' bodies ran the kernel ``kernel`` times since ``before``, the generic code never
    (nothing is counted where the kernels are disabled)."""
    if KERNELS:
        k, g = _calls()
        assert (k - before[0], g - before[1]) == (kernel, 0)


def _tables(rotary, layout, dtype, seq=5, offset=3):
    inv, _ = arrpos.rope_frequencies(rotary, base=100.0)
    pos = torch.arange(offset, offset + seq)
    cos, sin = arrpos.rope_cos_sin(pos, torch.as_tensor(inv), layout=layout, dtype=torch.float64)
    return cos.to(dtype), sin.to(dtype)


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _leaves(*ts):
    return [t.detach().clone().requires_grad_() for t in ts]


def _grads(fn, inputs, weights):
    """``fn(*inputs)`` and the gradients of ``sum(w * out)`` (contiguous upstream gradients:
    the backward's rotation can take the kernel) w.r.t. every input."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float() * w).sum() for o, w in zip(outs, weights))
    grads = torch.autograd.grad(loss, inputs)
    return [o.detach() for o in outs], list(grads)


def _generic(op):
    """The generic path's ``op`` (``_xp``), as ``ARRPOS_NO_EXTENSIONS=1`` serves it."""
    def fn(*args, layout):
        return getattr(_xp, op)(*args, layout=layout, inverse=False,
                                xp=array_namespace(*args))
    return fn


def _assert_all_close(got, want, dtype):
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), **TOL[dtype])


# ------------------------------------------------------------------------------------------
# gradients: the generic path's, with the kernels running forward and backward


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary", [8, 4], ids=["full", "partial"])
def test_apply_rope_grads_equal_the_generic_paths(layout, dtype, rotary):
    cos, sin = _tables(rotary, layout, dtype)
    x = _rand(2, 5, 3, 8, dtype=dtype)
    w = [_rand(2, 5, 3, 8, seed=1)]
    before = _calls()
    got = _grads(lambda x, c, s: arrpos.apply_rope(x, c, s, layout=layout),
                 _leaves(x, cos[:, None], sin[:, None]), w)
    _ran(before, 2)  # the rotation and its backward (the inverse rotation)
    want = _grads(lambda x, c, s: _generic("apply_rope")(x, c, s, layout=layout),
                  _leaves(x, cos[:, None], sin[:, None]), w)
    _assert_all_close(got[0] + got[1], want[0] + want[1], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary", [8, 6], ids=["full", "partial"])
def test_apply_rope_qk_grads_equal_the_generic_paths(layout, dtype, rotary):
    """Grouped-query shapes: q with 4 heads, k with 2, tables broadcast over both."""
    cos, sin = _tables(rotary, layout, dtype)
    q, k = _rand(2, 4, 5, 8, dtype=dtype), _rand(2, 2, 5, 8, dtype=dtype, seed=2)
    w = [_rand(2, 4, 5, 8, seed=3), _rand(2, 2, 5, 8, seed=4)]
    before = _calls()
    got = _grads(lambda q, k, c, s: arrpos.apply_rope_qk(q, k, c, s, layout=layout),
                 _leaves(q, k, cos, sin), w)
    _ran(before, 2)
    want = _grads(lambda q, k, c, s: _generic("apply_rope_qk")(q, k, c, s, layout=layout),
                  _leaves(q, k, cos, sin), w)
    _assert_all_close(got[0] + got[1], want[0] + want[1], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary", [8, 4], ids=["full", "partial"])
def test_apply_rope_cached_grads_equal_the_generic_paths(layout, dtype, rotary):
    """The caches' gradients add every id's rows (ids repeat here)."""
    full_cos, full_sin = _tables(rotary, "half", dtype, seq=16, offset=0)
    cc, sc = full_cos[:, :rotary // 2], full_sin[:, :rotary // 2]
    ids = torch.tensor([[0, 3, 3, 7, 15], [1, 1, 2, 9, 0]])[:, :, None]
    x = _rand(2, 5, 3, 8, dtype=dtype)
    w = [_rand(2, 5, 3, 8, seed=1)]
    before = _calls()
    got = _grads(lambda x, c, s: arrpos.apply_rope_cached(x, c, s, ids, layout=layout),
                 _leaves(x, cc, sc), w)
    _ran(before, 2)
    want = _grads(lambda x, c, s: _generic("apply_rope_cached")(x, c, s, ids, layout=layout),
                  _leaves(x, cc, sc), w)
    _assert_all_close(got[0] + got[1], want[0] + want[1], dtype)


def _hf(q, cos, sin, layout):
    """transformers' rotation of ``q`` (batch, seq, heads, D) by full-width tables
    (seq, 1, R), partial rotary as GPT-NeoX splits it: LLaMA's rotate_half or GPT-J's
    rotate_every_two."""
    from transformers.models.gptj.modeling_gptj import rotate_every_two
    from transformers.models.llama.modeling_llama import rotate_half

    r = cos.shape[-1]
    rot, rest = q[..., :r], q[..., r:]
    turn = rotate_half(rot) if layout == "half" else rotate_every_two(rot)
    return torch.cat([rot * cos + turn * sin, rest], dim=-1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float64_grads_equal_transformers(layout):
    """Independent of arrpos' own formulas: transformers' code under torch's autograd."""
    cos, sin = _tables(6, layout, torch.float64)
    x = _rand(2, 5, 3, 8, dtype=torch.float64)
    w = [_rand(2, 5, 3, 8, seed=1)]
    before = _calls()
    got = _grads(lambda x, c, s: arrpos.apply_rope(x, c, s, layout=layout),
                 _leaves(x, cos[:, None], sin[:, None]), w)
    _ran(before, 2)
    want = _grads(lambda x, c, s: _hf(x, c, s, layout), _leaves(x, cos[:, None], sin[:, None]),
                  w)
    _assert_all_close(got[0] + got[1], want[0] + want[1], torch.float64)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_float64(layout):
    """Finite differences against the backward of all three ops (x and tables)."""
    cos, sin = _tables(4, layout, torch.float64, seq=3)
    x, q, k = _rand(3, 2, 6, dtype=torch.float64), _rand(2, 3, 6, dtype=torch.float64), \
        _rand(1, 3, 6, dtype=torch.float64, seed=5)
    assert torch.autograd.gradcheck(
        lambda x, c, s: arrpos.apply_rope(x, c, s, layout=layout),
        _leaves(x, cos[:, None], sin[:, None]))
    assert torch.autograd.gradcheck(
        lambda q, k, c, s: arrpos.apply_rope_qk(q, k, c, s, layout=layout),
        _leaves(q, k, cos, sin))
    ids = torch.tensor([[2, 0, 2]]).T  # (seq, 1): broadcast over the heads
    assert torch.autograd.gradcheck(
        lambda x, c, s: arrpos.apply_rope_cached(x, c, s, ids, layout=layout),
        _leaves(x, cos[:, :2], sin[:, :2]))


@needs_kernels
def test_the_ops_pass_torchs_opcheck():
    """Schema, fake (meta) implementations, autograd registration and AOT dispatch, as
    ``torch.library.opcheck`` tests a custom op."""
    cos, sin = _tables(4, "half", torch.float32)
    x, k, c, s, cc = _leaves(_rand(5, 2, 6), _rand(5, 1, 6, seed=2), cos[:, None],
                             sin[:, None], cos[:, :2])
    ids = torch.tensor([4, 0, 1, 1, 2])[:, None]
    for op, args in ((torch.ops.arrpos.apply_rope, (x, c, s, "half", False)),
                     (torch.ops.arrpos.apply_rope_qk, (x, k, c, s, "interleaved", True)),
                     (torch.ops.arrpos.apply_rope_cached,
                      (x, cc, sin[:, :2], ids, "half", False))):
        torch.library.opcheck(op.default, args)


def test_out_keeps_its_path():
    """``out=`` is no custom op's: a call with tables that require grad and an output takes the
    generic path (the ops' bodies do not run) and gives its values."""
    cos, sin = _tables(8, "half", torch.float32)
    c = cos[:, None].requires_grad_()
    x = _rand(5, 3, 8)
    out = torch.empty_like(x)
    before = _calls()
    with torch.no_grad():
        got = arrpos.apply_rope(x, c, sin[:, None], out=out)
    assert got is out
    _ran(before, 0)
    want = _generic("apply_rope")(x, cos[:, None], sin[:, None], layout="half")
    torch.testing.assert_close(out, want, **TOL[torch.float32])


# ------------------------------------------------------------------------------------------
# torch.compile(fullgraph=True): no graph break, eager's results


@pytest.fixture(autouse=False)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_training_step_of_apply_rope_qk(fresh_dynamo):
    """Inductor over a forward and backward of apply_rope_qk: eager's values and gradients,
    the kernel running in both (the op is opaque to the graph)."""
    cos, sin = _tables(8, "half", torch.float32)
    q, k = _rand(1, 4, 5, 8), _rand(1, 2, 5, 8, seed=2)
    w = [_rand(1, 4, 5, 8, seed=3), _rand(1, 2, 5, 8, seed=4)]

    def step(q, k):
        qr, kr = arrpos.apply_rope_qk(q, k, cos, sin)
        return (qr * w[0]).sum() + (kr * w[1]).sum()

    compiled = torch.compile(step, fullgraph=True)
    lq, lk = _leaves(q, k)
    compiled(lq, lk).backward()
    before = _calls()
    lq, lk = _leaves(q, k)
    loss = compiled(lq, lk)
    loss.backward()
    _ran(before, 2)
    eq, ek = _leaves(q, k)
    want = step(eq, ek)
    want.backward()
    torch.testing.assert_close(loss, want, **TOL[torch.float32])
    _assert_all_close([lq.grad, lk.grad], [eq.grad, ek.grad], torch.float32)


@pytest.mark.parametrize("layout,dtype", [("interleaved", torch.float32),
                                          ("half", torch.bfloat16)], ids=str)
def test_compiled_rope_layer_and_cached(fresh_dynamo, layout, dtype):
    """RoPE.apply (partial rotary), RoPE.cos_sin and apply_rope_cached under
    torch.compile(fullgraph=True) (a graph break raises) with gradients: eager's results."""
    rope = arrpos.RoPE(16, partial_rotary_factor=0.5, layout=layout)
    x = _rand(2, 6, 3, 16, dtype=dtype)
    pos = torch.arange(6)[None].expand(2, 6) + 2
    cc, sc = (t[:, :4].to(dtype).contiguous() for t in rope.cos_sin(torch.arange(32)))
    ids = (pos * 3)[:, :, None]

    def layer(x):
        return rope.apply(x, pos, heads_axis=-2)

    def cached(x, cc):
        return arrpos.apply_rope_cached(x, cc, sc, ids, layout=layout)

    def tables(p):
        return rope.cos_sin(p)

    for fn, args in ((layer, (x,)), (cached, (x, cc))):
        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        before = _calls()
        got = _grads(compiled, _leaves(*args), [_rand(2, 6, 3, 16, seed=7)])
        _ran(before, 2)
        want = _grads(fn, _leaves(*args), [_rand(2, 6, 3, 16, seed=7)])
        _assert_all_close(got[0] + got[1], want[0] + want[1], dtype)
    got = torch.compile(tables, fullgraph=True, backend="aot_eager")(pos)
    _assert_all_close(got, tables(pos), torch.float64)


# ------------------------------------------------------------------------------------------
# torch.func: vmap and jacrev


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vmap_over_the_ops_equals_eager(layout):
    """vmap over a heads axis (tables unbatched), over the tables too, and over ids: each
    sample's eager result; the kernels serve the batched calls."""
    cos, sin = _tables(6, layout, torch.float32)
    x = _rand(5, 3, 8)  # (seq, heads, D): vmap over heads
    before = _calls()
    got = torch.func.vmap(lambda x: arrpos.apply_rope(x, cos, sin, layout=layout),
                          in_dims=1, out_dims=1)(x)
    _ran(before, 1)
    torch.testing.assert_close(got, arrpos.apply_rope(x, cos[:, None], sin[:, None],
                                                      layout=layout), **TOL[torch.float32])
    # tables batched with x: one position table per sample
    cb, sb = _rand(4, 6), _rand(4, 6, seed=3)
    xb = _rand(4, 3, 8, seed=4)
    got = torch.func.vmap(lambda x, c, s: arrpos.apply_rope(x, c, s, layout=layout))(xb, cb, sb)
    want = torch.stack([arrpos.apply_rope(xb[i], cb[i], sb[i], layout=layout) for i in range(4)])
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    q, k = _rand(5, 4, 8), _rand(5, 2, 8, seed=2)
    gq, gk = torch.func.vmap(lambda q, k: arrpos.apply_rope_qk(q, k, cos, sin, layout=layout),
                             in_dims=(1, 1), out_dims=(1, 1))(q[:, :2], k)
    wq, wk = arrpos.apply_rope_qk(q[:, :2], k, cos[:, None], sin[:, None], layout=layout)
    _assert_all_close([gq, gk], [wq, wk], torch.float32)
    cc, sc = cos[:, :3], sin[:, :3]
    ids = torch.tensor([[0, 1, 2, 3, 4], [4, 4, 0, 2, 1]])
    got = torch.func.vmap(
        lambda x, i: arrpos.apply_rope_cached(x, cc, sc, i[:, None], layout=layout))(
            torch.stack([x, 2 * x]), ids)
    want = torch.stack([arrpos.apply_rope_cached(y, cc, sc, i[:, None], layout=layout)
                        for y, i in zip((x, 2 * x), ids)])
    torch.testing.assert_close(got, want, **TOL[torch.float32])


def test_vmap_over_the_rope_layer():
    rope = arrpos.RoPE(8, partial_rotary_factor=0.5)
    x = _rand(3, 6, 2, 8)
    pos = torch.arange(6)
    got = torch.func.vmap(lambda x: rope.apply(x, pos, heads_axis=-2))(x)
    torch.testing.assert_close(got, rope.apply(x, pos, heads_axis=-2), **TOL[torch.float32])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_jacrev_equals_the_generic_paths(layout):
    """jacrev (vjp under vmap) through the ops, w.r.t. x and the tables: the generic path's
    Jacobians; the kernels run (forward, and the batched backward)."""
    cos, sin = _tables(4, layout, torch.float64, seq=3)
    x = _rand(3, 2, 6, dtype=torch.float64)
    c, s = cos[:, None], sin[:, None]
    before = _calls()
    got = torch.func.jacrev(lambda x, c: arrpos.apply_rope(x, c, s, layout=layout),
                            argnums=(0, 1))(x, c)
    assert _calls()[0] > before[0] or not KERNELS
    want = torch.func.jacrev(lambda x, c: _generic("apply_rope")(x, c, s, layout=layout),
                             argnums=(0, 1))(x, c)
    _assert_all_close(got, want, torch.float64)
    q, k = x, _rand(3, 1, 6, dtype=torch.float64, seed=2)
    got = torch.func.jacrev(lambda q, k: arrpos.apply_rope_qk(q, k, c, s, layout=layout),
                            argnums=(0, 1))(q, k)
    want = torch.func.jacrev(lambda q, k: _generic("apply_rope_qk")(q, k, c, s, layout=layout),
                             argnums=(0, 1))(q, k)
    _assert_all_close([j for row in got for j in row], [j for row in want for j in row],
                      torch.float64)
    ids = torch.tensor([2, 0, 2])[:, None]
    cc = cos[:, :2]
    got = torch.func.jacrev(
        lambda x, cc: arrpos.apply_rope_cached(x, cc, sin[:, :2], ids, layout=layout),
        argnums=(0, 1))(x, cc)
    want = torch.func.jacrev(
        lambda x, cc: _generic("apply_rope_cached")(x, cc, sin[:, :2], ids, layout=layout),
        argnums=(0, 1))(x, cc)
    _assert_all_close(got, want, torch.float64)


# ------------------------------------------------------------------------------------------
# the CUDA registration: its body emulated here (tests/cuda_emulation.py), on a GPU for real


@pytest.fixture
def emulated_cuda_body(tmp_path, monkeypatch):
    """The ops' bodies for CPU tensors routed to the CUDA front-end's body, whose kernels run
    in the emulator (CPU tensors stand in for CUDA ones; streams are not emulated)."""
    if not KERNELS:
        pytest.skip("compiled kernels not built or disabled: no op front-end loaded")
    import contextlib
    import importlib
    import sys

    import cuda_emulation
    from arrpos._backends import torch_ops
    from arrpos._backends.cuda import driver
    from arrpos._backends.cuda import torch_cuda as tc
    importlib.import_module("arrpos._backends.host.torch_cpu")  # registers "cpu" first

    try:
        lib = cuda_emulation.build(tmp_path)
    except RuntimeError as exc:
        pytest.skip(f"CUDA emulation unavailable: {exc}")
    fake = cuda_emulation.FakeCupy(lib)
    driver.forget()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(tc, "_on_torch_stream", lambda device: contextlib.nullcontext())
    monkeypatch.setitem(torch_ops._KERNELS, "cpu", tc._op_kernel)
    yield fake
    driver.forget()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_body_forward_and_backward_emulated(emulated_cuda_body, layout):
    """The CUDA body serves the forward and the backward (the inverse rotation: two launches
    each for q and k), gradients as the generic path's; the cached form's ids are checked by
    the body (a traced call is not read before it)."""
    cp = emulated_cuda_body
    cos, sin = _tables(6, layout, torch.float32)
    q, k = _rand(2, 4, 5, 8), _rand(2, 2, 5, 8, seed=2)
    w = [_rand(2, 4, 5, 8, seed=3), _rand(2, 2, 5, 8, seed=4)]
    from arrpos._backends import torch_ops

    launched = len(cp.launches)
    got = _grads(lambda q, k, c, s: torch_ops.apply_rope_qk(q, k, c, s, layout, False),
                 _leaves(q, k, cos, sin), w)
    assert [name.split("<")[0] for name, *_ in cp.launches[launched:]] == \
        ["arrpos::apply_rope"] * 4
    want = _grads(lambda q, k, c, s: _generic("apply_rope_qk")(q, k, c, s, layout=layout),
                  _leaves(q, k, cos, sin), w)
    _assert_all_close(got[0] + got[1], want[0] + want[1], torch.float32)
    x = _rand(2, 5, 3, 8)
    bad = torch.tensor([[0, 1, 2, 3, 99]])[:, :, None]
    with pytest.raises(ValueError, match="position_ids"):
        torch_ops.apply_rope_cached(x, cos[:, :3].contiguous(), sin[:, :3].contiguous(), bad,
                                    layout, False)


def _cuda():
    if not torch.cuda.is_available():
        return None
    from arrpos._backends.cuda import torch_cuda

    return torch_cuda if torch_cuda.cupy_available() else None


@pytest.mark.skipif(_cuda() is None, reason="no CUDA device with CuPy here")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_tensors_run_the_kernels(dtype):
    """On a GPU: gradients of apply_rope_qk and apply_rope_cached as the generic path's, the
    kernels counted, and torch.compile (aot_eager) over apply_rope_qk."""
    dev = "cuda"
    cos, sin = (t.to(dev) for t in _tables(8, "half", dtype))
    q, k = _rand(2, 4, 5, 8, dtype=dtype).to(dev), _rand(2, 2, 5, 8, dtype=dtype, seed=2).to(dev)
    w = [_rand(2, 4, 5, 8, seed=3).to(dev), _rand(2, 2, 5, 8, seed=4).to(dev)]
    before = _calls()
    got = _grads(lambda q, k, c, s: arrpos.apply_rope_qk(q, k, c, s), _leaves(q, k, cos, sin),
                 w)
    _ran(before, 2)
    want = _grads(lambda q, k, c, s: _generic("apply_rope_qk")(q, k, c, s, layout="half"),
                  _leaves(q, k, cos, sin), w)
    _assert_all_close(got[0] + got[1], want[0] + want[1], dtype)
    cc, sc = cos[:, :4].contiguous(), sin[:, :4].contiguous()
    ids = torch.tensor([[4, 3, 0, 1, 1]], device=dev)[:, :, None]
    x = q.transpose(1, 2).contiguous()  # (batch, seq, heads, D)
    got = _grads(lambda x, c: arrpos.apply_rope_cached(x, c, sc, ids), _leaves(x, cc),
                 [w[0].transpose(1, 2).contiguous()])
    want = _grads(lambda x, c: _generic("apply_rope_cached")(x, c, sc, ids, layout="half"),
                  _leaves(x, cc), [w[0].transpose(1, 2).contiguous()])
    _assert_all_close(got[0] + got[1], want[0] + want[1], dtype)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k: arrpos.apply_rope_qk(q, k, cos, sin), fullgraph=True,
                             backend="aot_eager")
    _assert_all_close(compiled(q, k), arrpos.apply_rope_qk(q, k, cos, sin), dtype)


# ------------------------------------------------------------------------------------------
# JAX (docs/training.md): jit, grad and vmap through the generic path


def test_jax_jit_grad_vmap_through_the_generic_path():
    """The gradient of ``sum(w * apply_rope(x))`` is the inverse rotation of ``w`` (the
    rotation is orthogonal), here from NumPy's path; vmap over heads is the unbatched call."""
    jax = pytest.importorskip("jax")
    import numpy as np

    jnp = jax.numpy
    inv, _ = arrpos.rope_frequencies(8)
    cos, sin = arrpos.rope_cos_sin(np.arange(5), inv, dtype=np.float32)
    x, w = np.asarray(_rand(5, 3, 8)), np.asarray(_rand(5, 3, 8, seed=1))
    jc, js = jnp.asarray(cos), jnp.asarray(sin)

    def loss(x):
        q, k = arrpos.apply_rope_qk(x, x[:, :1], jc[:, None], js[:, None])
        return (q * w).sum() + (k * w[:, :1]).sum()

    got = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(x)))
    want = arrpos.apply_rope(w, cos[:, None], sin[:, None], inverse=True)
    want[:, :1] += arrpos.apply_rope(w[:, :1], cos[:, None], sin[:, None], inverse=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got = jax.vmap(lambda x: arrpos.apply_rope(x, jc, js), in_axes=1, out_axes=1)(x)
    np.testing.assert_allclose(np.asarray(got), arrpos.apply_rope(x, cos[:, None], sin[:, None]),
                               rtol=1e-6, atol=1e-6)

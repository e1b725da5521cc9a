"""The rotations as ``torch.library`` custom ops (``torch.ops.arrpos.*``), so that autograd,
``torch.compile`` and ``torch.func`` transforms run the compiled kernels.

A kernel reached through DLPack is invisible to autograd and to every trace (fake tensors have
no memory), so the torch front-ends (``host.torch_cpu``, ``cuda.torch_cuda``) hand a rotation
whose tensors require grad, or that torch traces or transforms, to these ops instead. Each op
is opaque to torch: its body runs on real tensors (the front-end's kernel, or ``_xp`` where
the kernel declines them); torch learns the rest from this module:

* fake implementation: the result is a new contiguous tensor of ``x``'s shape and dtype (the
  body returns exactly that), so ``torch.compile`` traces it without running it;
* autograd: the backward of a rotation is the inverse rotation (``inverse`` flipped, the same
  op, so it runs the kernel too and is itself differentiable); ``cos``/``sin`` (or the caches)
  that require grad get the generic formula's gradient, ``sum(g * x)`` and
  ``sum(g * rotate(x))`` reduced to their shape, computed in the generic path's dtype;
* vmap: the batch axis moved to the front of each batched tensor (tables given singleton axes
  so that they still broadcast), one call of the op; batched caches of ``apply_rope_cached``
  (which must be 2-D) are served one sample at a time.

``out=`` is not expressible by a functional op: calls with outputs keep the front-ends' other
paths (``memory``'s rule applies there). The ops are defined when a torch front-end first
loads (never by ``import arrpos``); each front-end registers its kernels with :func:`serve`.
"""
from __future__ import annotations

import collections
from collections.abc import Callable

import torch

from .._lib import array_namespace
from . import Unsupported, _xp

__all__ = ["CALLS", "ROTATIONS", "apply_rope", "apply_rope_cached", "apply_rope_qk", "serve"]

ROTATIONS = frozenset({"apply_rope", "apply_rope_qk", "apply_rope_cached"})
# (op, "kernel" | "generic") -> bodies run: which served the real tensors (tests, benchmarks)
CALLS: collections.Counter = collections.Counter()
# device type -> the front-end's kernel: fn(op, args, layout, inverse), raising Unsupported
_KERNELS: dict[str, Callable] = {}
Tensor = torch.Tensor


def serve(device_type: str, kernel: Callable) -> None:
    """Run ``kernel(op, args, layout, inverse)`` in the ops' bodies for tensors on
    ``device_type``."""
    _KERNELS[device_type] = kernel


def _check_ids(ids, rows) -> None:
    """The ids' range where no kernel read them (the caller names the argument)."""
    if ids.numel() and bool(((ids < 0) | (ids >= rows)).any()):
        raise ValueError(f"position_ids must be in [0, {rows})")


def _body(op, args, layout, inverse):
    args = tuple(a.detach() for a in args)  # autograd is this module's, above the body
    kernel = _KERNELS.get(args[0].device.type)
    if kernel is not None:
        try:
            res = kernel(op, args, layout, inverse)
            CALLS[op, "kernel"] += 1
            return res
        except Unsupported:  # strides, neg/conj views, dtypes: the generic code
            pass
    CALLS[op, "generic"] += 1
    if op == "apply_rope_cached":
        _check_ids(args[3], args[1].shape[0])
    res = getattr(_xp, op)(*args, layout=layout, inverse=inverse, xp=array_namespace(*args))
    # the fake implementation promises new contiguous tensors
    if op == "apply_rope_qk":
        return tuple(_fresh(r, args) for r in res)
    return _fresh(res, args)


def _fresh(r, args):
    """``r`` as a new contiguous tensor (a copy where it is an input or strided)."""
    return r.clone() if any(r is a for a in args) else r.contiguous()


def _new_like(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("arrpos::apply_rope", mutates_args=())
def _rope_op(x: Tensor, cos: Tensor, sin: Tensor, layout: str, inverse: bool) -> Tensor:
    """``arrpos.apply_rope(x, cos, sin, layout=, inverse=)`` as one op."""
    return _body("apply_rope", (x, cos, sin), layout, inverse)


@torch.library.custom_op("arrpos::apply_rope_qk", mutates_args=())
def _qk_op(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, layout: str,
                  inverse: bool) -> tuple[Tensor, Tensor]:
    """``arrpos.apply_rope_qk(q, k, cos, sin, layout=, inverse=)`` as one op."""
    return _body("apply_rope_qk", (q, k, cos, sin), layout, inverse)


@torch.library.custom_op("arrpos::apply_rope_cached", mutates_args=())
def _cached_op(x: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor,
                      layout: str, inverse: bool) -> Tensor:
    """``arrpos.apply_rope_cached(x, cos_cache, sin_cache, position_ids, ...)`` as one op."""
    return _body("apply_rope_cached", (x, cos_cache, sin_cache, position_ids), layout, inverse)


@_rope_op.register_fake
def _apply_rope_fake(x, cos, sin, layout, inverse):
    return _new_like(x)


@_qk_op.register_fake
def _apply_rope_qk_fake(q, k, cos, sin, layout, inverse):
    return _new_like(q), _new_like(k)


@_cached_op.register_fake
def _apply_rope_cached_fake(x, cos_cache, sin_cache, position_ids, layout, inverse):
    return _new_like(x)


# ------------------------------------------------------------------------------------------
# autograd


def _rotated(x, layout):
    """``rotate(x)`` of the generic formula: ``[-x2, x1]`` (half) or ``(-x_{2i+1}, x_{2i})``
    per pair (interleaved)."""
    if layout == "half":
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _wide(a, b):
    """The generic path's arithmetic dtype: promoted, float32 when both are 16-bit."""
    dt = torch.promote_types(a, b)
    return torch.float32 if dt.itemsize == 2 and a.itemsize == 2 and b.itemsize == 2 else dt


def _products(g, x, width, table_dtype, layout, inverse):
    """``(g * x, +-g * rotate(x))`` over the first ``width`` features, in the generic path's
    dtype: the gradients of the full cos and sin tables before their reduction."""
    dt = _wide(x.dtype, table_dtype)
    gr, xr = g[..., :width].to(dt), x[..., :width].to(dt)
    gc, gs = gr * xr, gr * _rotated(xr, layout)
    return gc, (-gs if inverse else gs)


def _table_grads(g, x, cos, sin, layout, inverse, need):
    gc, gs = _products(g, x, cos.shape[-1], cos.dtype, layout, inverse)
    return (gc.sum_to_size(cos.shape).to(cos.dtype) if need[0] else None,
            gs.sum_to_size(sin.shape).to(sin.dtype) if need[1] else None)


def _setup(ctx, inputs, output, via):
    *arrays, layout, inverse = inputs
    ctx.layout, ctx.inverse, ctx.via = layout, inverse, via
    n = 1 if len(arrays) == 3 else 2  # the rotated tensors lead
    tables = arrays[n:n + 2]
    ctx.tables_grad = any(t.requires_grad for t in tables)
    # the rotated tensors are kept only for the tables' gradients
    ctx.save_for_backward(*(arrays if ctx.tables_grad else (None,) * n + tuple(arrays[n:])))


def _apply_rope_backward(ctx, g):
    x, cos, sin = ctx.saved_tensors
    need = ctx.needs_input_grad
    gx = ctx.via(g, cos, sin, ctx.layout, not ctx.inverse) if need[0] else None
    gc = gs = None
    if ctx.tables_grad:
        gc, gs = _table_grads(g, x, cos, sin, ctx.layout, ctx.inverse, need[1:3])
    return gx, gc, gs, None, None


def _apply_rope_qk_backward(ctx, gq, gk):
    q, k, cos, sin = ctx.saved_tensors
    need = ctx.needs_input_grad
    dq = dk = gc = gs = None
    if need[0] or need[1]:
        dq, dk = ctx.via(gq, gk, cos, sin, ctx.layout, not ctx.inverse)
    if ctx.tables_grad:
        cq, sq = _table_grads(gq, q, cos, sin, ctx.layout, ctx.inverse, need[2:4])
        ck, sk = _table_grads(gk, k, cos, sin, ctx.layout, ctx.inverse, need[2:4])
        gc = None if cq is None else cq + ck
        gs = None if sq is None else sq + sk
    return (dq if need[0] else None), (dk if need[1] else None), gc, gs, None, None


def _cache_grad(full, ids, cache, layout):
    """The gradient of a half-width cache from that of the widened tables gathered at
    ``ids`` (``full``: ids' shape + (R,)): each row's two copies summed, added at its id."""
    h = cache.shape[-1]
    half = full[..., :h] + full[..., h:] if layout == "half" else \
        full[..., 0::2] + full[..., 1::2]
    zero = torch.zeros(cache.shape, dtype=half.dtype, device=half.device)
    return zero.index_add(0, ids.reshape(-1).to(torch.int64), half.reshape(-1, h)) \
        .to(cache.dtype)


def _apply_rope_cached_backward(ctx, g):
    x, cos_cache, sin_cache, ids = ctx.saved_tensors
    need = ctx.needs_input_grad
    gx = (ctx.via(g, cos_cache, sin_cache, ids, ctx.layout, not ctx.inverse)
          if need[0] else None)
    gc = gs = None
    if ctx.tables_grad:
        r = 2 * cos_cache.shape[-1]
        pc, ps = _products(g, x, r, cos_cache.dtype, ctx.layout, ctx.inverse)
        shape = tuple(ids.shape) + (r,)
        if need[1]:
            gc = _cache_grad(pc.sum_to_size(shape), ids, cos_cache, ctx.layout)
        if need[2]:
            gs = _cache_grad(ps.sum_to_size(shape), ids, sin_cache, ctx.layout)
    return gx, gc, gs, None, None, None


def _setup_cached(ctx, inputs, output, via):
    x, cos_cache, sin_cache, ids, layout, inverse = inputs
    ctx.layout, ctx.inverse, ctx.via = layout, inverse, via
    ctx.tables_grad = cos_cache.requires_grad or sin_cache.requires_grad
    ctx.save_for_backward(x if ctx.tables_grad else None, cos_cache, sin_cache, ids)


_rope_op.register_autograd(_apply_rope_backward, setup_context=lambda ctx, inputs, output:
                          _setup(ctx, inputs, output, _rope_op))
_qk_op.register_autograd(_apply_rope_qk_backward, setup_context=lambda ctx, inputs, output:
                         _setup(ctx, inputs, output, _qk_op))
_cached_op.register_autograd(_apply_rope_cached_backward,
                             setup_context=lambda ctx, inputs, output:
                             _setup_cached(ctx, inputs, output, _cached_op))


def _function(name, op, backward, setup):
    """The op under an ``autograd.Function`` with ``setup_context`` (the form ``torch.func``'s
    ``grad``/``vjp``/``jacrev`` accept; ``register_autograd``'s is refused under them): the
    same formulas, the backward through the function again; vmap through the op's rule."""
    def forward(*args):
        return op(*args)

    def setup_context(ctx, inputs, output):
        setup(ctx, inputs, output, cls.apply)

    cls = type(name, (torch.autograd.Function,), {
        "generate_vmap_rule": True, "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context), "backward": staticmethod(backward)})
    return cls


_ROPE_FN = _function("RopeFunction", _rope_op, _apply_rope_backward, _setup)
_QK_FN = _function("RopeQKFunction", _qk_op, _apply_rope_qk_backward, _setup)
_CACHED_FN = _function("RopeCachedFunction", _cached_op, _apply_rope_cached_backward, _setup_cached)
_LEVEL = torch._C._functorch.maybe_current_level
_TOP = torch._C._functorch.peek_interpreter_stack
_FUNCTIONALIZE = torch._C._functorch.TransformType.Functionalize


def _under_transform() -> bool:
    """Whether a ``torch.func`` transform other than ``functionalize`` (which takes the op,
    not an ``autograd.Function``) is active."""
    if _LEVEL() is None:  # (first: what torch.compile reads without tracing the stack)
        return False
    top = _TOP()
    return top is not None and top.key() != _FUNCTIONALIZE


def apply_rope(x, cos, sin, layout, inverse):
    """``arrpos::apply_rope``; under ``torch.func`` transforms through its function."""
    if _under_transform():
        return _ROPE_FN.apply(x, cos, sin, layout, inverse)
    return _rope_op(x, cos, sin, layout, inverse)


def apply_rope_qk(q, k, cos, sin, layout, inverse):
    """``arrpos::apply_rope_qk``; under ``torch.func`` transforms through its function."""
    if _under_transform():
        return _QK_FN.apply(q, k, cos, sin, layout, inverse)
    return _qk_op(q, k, cos, sin, layout, inverse)


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, layout, inverse):
    """``arrpos::apply_rope_cached``; under ``torch.func`` transforms through its function."""
    if _under_transform():
        return _CACHED_FN.apply(x, cos_cache, sin_cache, position_ids, layout, inverse)
    return _cached_op(x, cos_cache, sin_cache, position_ids, layout, inverse)


# ------------------------------------------------------------------------------------------
# vmap


def _front(t, dim, size):
    """``t`` with its batch axis first (``dim`` None: broadcast to ``size``)."""
    if dim is None:
        return t.expand(size, *t.shape)
    return t.movedim(dim, 0)


def _table_front(t, dim, size, rank):
    """A table with its batch axis first and singleton axes after it, so that its per-sample
    shape still broadcasts from the right against a rotated tensor of per-sample rank
    ``rank``."""
    t = _front(t, dim, size)
    return t.reshape(size, *([1] * (rank - (t.ndim - 1))), *t.shape[1:])


def _apply_rope_vmap(info, in_dims, x, cos, sin, layout, inverse):
    xd, cd, sd = in_dims[:3]
    if cd is None and sd is None:  # tables broadcast from the right as they are
        return _rope_op(x.movedim(xd, 0), cos, sin, layout, inverse), 0
    n, rank = info.batch_size, x.ndim - (xd is not None)
    return _rope_op(_front(x, xd, n), _table_front(cos, cd, n, rank),
                      _table_front(sin, sd, n, rank), layout, inverse), 0


def _apply_rope_qk_vmap(info, in_dims, q, k, cos, sin, layout, inverse):
    qd, kd, cd, sd = in_dims[:4]
    n = info.batch_size
    q2, k2 = _front(q, qd, n), _front(k, kd, n)  # (one unbatched: broadcast, a view)
    if cd is not None or sd is not None:
        rank = max(q.ndim - (qd is not None), k.ndim - (kd is not None))
        cos, sin = _table_front(cos, cd, n, rank), _table_front(sin, sd, n, rank)
    return _qk_op(q2, k2, cos, sin, layout, inverse), (0, 0)


def _apply_rope_cached_vmap(info, in_dims, x, cos_cache, sin_cache, ids, layout, inverse):
    xd, cd, sd, idd = in_dims[:4]
    n = info.batch_size
    if cd is not None or sd is not None:  # the op's caches are 2-D: one sample at a time
        x2, c2, s2, i2 = (_front(a, d, n) for a, d in zip((x, cos_cache, sin_cache, ids),
                                                           in_dims))
        return torch.stack([_cached_op(x2[b], c2[b], s2[b], i2[b], layout, inverse)
                            for b in range(n)]), 0
    rank = x.ndim - (xd is not None)
    ids2 = ids if idd is None else _table_front(ids, idd, n, rank - 1)
    return _cached_op(_front(x, xd, n) if xd is not None or idd is not None else x,
                             cos_cache, sin_cache, ids2, layout, inverse), \
        (0 if xd is not None or idd is not None else None)


_rope_op.register_vmap(_apply_rope_vmap)
_qk_op.register_vmap(_apply_rope_qk_vmap)
_cached_op.register_vmap(_apply_rope_cached_vmap)

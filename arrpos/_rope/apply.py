"""Rotating queries and keys: :func:`apply_rope`, :func:`apply_rope_qk` and
:func:`apply_rope_cached` (the ONNX form: half-width caches gathered at ids, fused).

A decoder calls them with the same few signatures on every layer and step, so what the checks
and the dispatcher decide from a signature is decided once (``_lib.recall``) into a plan:
:class:`Plan` (the namespace and the dispatcher's route) or, where a kernel may be bound to the
signature, :class:`CachedPlan` with its :class:`Served` (the dispatcher's plan, the bound
kernel, whether it reads the ids itself). :func:`rotate` and :func:`gather_rotate` are the same rotations with the
namespace known, for :class:`RoPE`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from .. import _dispatch
from .._lib import (
    array_key,
    array_namespace,
    check_array,
    check_out_memory,
    is_lazy,
    new_memo,
    recall,
)
from .checks import broadcastable_into, check_layout_inverse, check_out
from ..typing import Array, RopeLayout

__all__ = ["CachedPlan", "Plan", "Served", "apply_rope", "apply_rope_cached", "apply_rope_qk",
           "gather_rotate", "rotate", "serving"]


class Plan(NamedTuple):
    """What :func:`apply_rope` and :func:`apply_rope_qk` decide from a signature."""

    xp: Any  # the namespace
    route: Any  # ``_dispatch.plan``'s answer (its ``fn`` None: decided on each call)


class Served(NamedTuple):
    """How :func:`apply_rope_cached` calls of one signature are served."""

    route: Any  # ``_dispatch.plan``'s answer (its ``fn`` None: decided on each call)
    bound: Any  # the kernel bound to the signature, a function of (x, cos, sin, ids, out)
    validates: bool  # whether the serving kernel checks the ids itself


class CachedPlan(NamedTuple):
    """What :func:`apply_rope_cached` decides from a signature."""

    xp: Any
    served: Served


def serving(op, xp, arrays, **options):
    """:class:`Served` of ``op`` for the signature of ``arrays`` and ``options``."""
    route = _dispatch.plan(op, xp, arrays, **options)
    return Served(route, route.bound, route.validates)


# signature -> plan memos (``_lib.recall``), one per entry point
_APPLY_PLANS = new_memo()
_QK_PLANS = new_memo()
_CACHED_PLANS = new_memo()


def _check_apply_args(xp, x, cos, sin, layout, inverse, out, *, x_name="x", out_name="out"):
    """The argument checks of :func:`apply_rope` (raises; returns nothing); ``x_name`` and
    ``out_name`` are the names the messages use (``q``/``k`` for :func:`apply_rope_qk`)."""
    for name, a in ((x_name, x), ("cos", cos), ("sin", sin)):
        check_array(xp, a, name, kind="floating")
    check_layout_inverse(layout, inverse)
    if x.ndim < 1:
        raise ValueError(f"{x_name} must have shape (..., dim), got a 0-d array")
    if tuple(cos.shape) != tuple(sin.shape):
        raise ValueError(f"cos and sin must have the same shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    if cos.ndim < 1:
        raise ValueError("cos must have shape (..., rotary_dim), got a 0-d array")
    r, d = cos.shape[-1], x.shape[-1]
    if r < 2 or r % 2:
        raise ValueError(f"cos.shape[-1] (the rotary width) must be even and >= 2, got {r}")
    if r > d:
        raise ValueError(f"cos.shape[-1] = {r} is wider than {x_name} ({x_name}.shape[-1] = "
                         f"{d}); the rotary width must be <= the head dim")
    if not broadcastable_into(tuple(cos.shape[:-1]), tuple(x.shape[:-1])):
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast to {x_name}[..., :{r}] of "
            f"shape {tuple(x.shape[:-1]) + (r,)}; insert the heads axis (e.g. "
            f"cos[:, :, None, :] for {x_name} of shape (batch, seq, heads, dim))"
        )
    check_out(xp, x, out, x_name, out_name)


def _apply_key(xp, x, cos, sin, layout, inverse, out):
    return (array_key(x), array_key(cos), array_key(sin), array_key(out), layout, inverse,
            type(inverse))


def _apply_plan(xp, x, cos, sin, layout, inverse, out):
    """:class:`Plan` of an :func:`apply_rope` signature (raises for bad arguments); ``xp``:
    the namespace, None to infer it."""
    if xp is None:
        xp = array_namespace(x, cos, sin, out, name="x, cos, sin and out")
    _check_apply_args(xp, x, cos, sin, layout, inverse, out)
    return Plan(xp, _dispatch.plan("apply_rope", xp, (x, cos, sin, out), layout=layout,
                                   inverse=inverse, out=out))


def apply_rope(x: Array, cos: Array, sin: Array, /, *, layout: RopeLayout = "half",
               inverse: bool = False, out: Array | None = None) -> Array:
    """Rotate queries or keys: ``x * cos + rotate(x) * sin`` on the first ``cos.shape[-1]`` features.

    Parameters
    ----------
    x : array
        Real floating, shape ``(..., D)``: e.g. ``(batch, seq, heads, D)`` or
        ``(batch, heads, seq, D)``.
    cos, sin : array
        Tables from :func:`rope_cos_sin`, shape ``(..., R)`` with ``R`` even and ``R <= D``,
        broadcastable to ``x[..., :R]`` (insert the heads axis yourself:
        ``cos[:, :, None, :]`` for ``(batch, seq, heads, D)``). ``R < D`` is partial rotary:
        features ``R:`` pass through unchanged.
    layout : {"half", "interleaved"}, optional
        ``"half"`` rotates pairs ``(x_i, x_{i+R/2})`` (GPT-NeoX, LLaMA ``rotate_half``);
        ``"interleaved"`` pairs ``(x_{2i}, x_{2i+1})`` (GPT-J ``rotate_every_two``, RoFormer).
    inverse : bool, optional
        Rotate back (the transpose: ``-sin``); also the backward pass of the rotation.
    out : array, optional
        Receives the result: ``x``'s shape and dtype; ``out=x`` rotates in place. Not for
        immutable arrays (JAX), read-only or expanded (zero-stride) arrays. An ``out`` that
        overlaps the inputs otherwise (``x`` at an offset, ``cos``, ``sin``) is filled from a
        temporary.

    Returns
    -------
    array
        The rotated ``x`` (``out`` when given), of ``x``'s dtype, namespace and device.

    Raises
    ------
    TypeError
        Non-arrays, arrays of different libraries, non-floating ``x``/``cos``/``sin``,
        ``inverse`` not a bool, ``out`` on JAX.
    ValueError
        Unknown ``layout``; ``cos`` and ``sin`` of different shapes; ``R`` odd, zero or wider
        than ``x``; tables that do not broadcast to ``x[..., :R]``; ``out`` of the wrong shape
        or dtype, read-only, or with a zero stride.

    Notes
    -----
    The arithmetic promotes ``x`` with the tables (float16 ``x`` with float32 tables computes in
    float32) and rounds once to ``x.dtype``. Without ``out`` nothing is written in place, so
    gradients flow on torch and JAX.
    Backend support: the compiled kernel for NumPy arrays and torch CPU tensors (float16,
    bfloat16, float32, float64 ``x``; tables of another float type are converted once and the
    result rounded once), CUDA kernels for CuPy arrays and CUDA torch tensors (torch tensors
    that require grad, and under ``torch.compile`` or ``torch.func``, without ``out``: through
    custom ops, docs/training.md), and Dask arrays with NumPy chunks one task per chunk of rows
    on those kernels (``out`` then names the lazy result: Dask arrays are not written in
    place). Every other namespace, and inputs the kernels decline (neg/conj views, unaligned or
    byte-swapped memory, strides that are not whole elements), take the generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(4)
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(5), inv)
    >>> q = np.ones((5, 2, 4))                      # (seq, heads, dim)
    >>> qr = arrpos.apply_rope(q, cos[:, None, :], sin[:, None, :])
    >>> np.allclose(np.linalg.norm(qr, axis=-1), 2.0)
    True
    >>> back = arrpos.apply_rope(qr, cos[:, None, :], sin[:, None, :], inverse=True)
    >>> np.allclose(back, q)
    True
    """
    # everything checked, and the kernel chosen, depend only on the signature: decided once
    return rotate(None, x, cos, sin, layout, inverse, out)


def rotate(xp, x, cos, sin, layout, inverse, out):
    """:func:`apply_rope` in namespace ``xp`` (None: inferred, once per signature)."""
    plan = recall(_APPLY_PLANS, _apply_key, _apply_plan, xp, x, cos, sin, layout, inverse, out)
    if out is not None:
        check_out_memory(out)  # (one that overlaps the inputs: _dispatch's rule)
    return _dispatch.call("apply_rope", plan.xp, x, cos, sin, arrays=(x, cos, sin, out),
                          plan=plan.route, layout=layout, inverse=inverse, out=out)


def _check_cached_args(xp, x, cos_cache, sin_cache, position_ids, layout, inverse, out):
    """The shape and kind checks of :func:`apply_rope_cached` (values are checked apart)."""
    for name, a in (("x", x), ("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        check_array(xp, a, name, kind="floating")
    check_array(xp, position_ids, "position_ids", kind="integer")
    check_layout_inverse(layout, inverse)
    if x.ndim < 1:
        raise ValueError("x must have shape (..., dim), got a 0-d array")
    if tuple(cos_cache.shape) != tuple(sin_cache.shape):
        raise ValueError(f"cos_cache and sin_cache must have the same shape, got "
                         f"{tuple(cos_cache.shape)} and {tuple(sin_cache.shape)}")
    if cos_cache.ndim != 2 or 0 in tuple(cos_cache.shape):
        raise ValueError(f"cos_cache must have shape (max_positions, rotary_dim // 2) with both "
                         f"> 0, got {tuple(cos_cache.shape)}")
    r, d = 2 * cos_cache.shape[1], x.shape[-1]
    if r > d:
        raise ValueError(f"2 * cos_cache.shape[1] = {r} (the rotary width) is wider than x "
                         f"(x.shape[-1] = {d}); the rotary width must be <= the head dim")
    if not broadcastable_into(tuple(position_ids.shape), tuple(x.shape[:-1])):
        raise ValueError(
            f"position_ids of shape {tuple(position_ids.shape)} do not broadcast to x.shape[:-1] "
            f"= {tuple(x.shape[:-1])}; insert the heads axis (e.g. ids[:, :, None] for x of "
            "shape (batch, seq, heads, dim), ids[:, None, :] for (batch, heads, seq, dim))"
        )
    check_out(xp, x, out)


def _check_ids_in_range(xp, position_ids, max_positions):
    """Eager arrays only (reading a lazy one would compute it): ``0 <= id < max_positions``."""
    if is_lazy(position_ids) or position_ids.size == 0:
        return
    ids = position_ids
    if ids.dtype != xp.int64 and ids.dtype != xp.int32:  # torch compares few unsigned dtypes
        ids = xp.astype(ids, xp.int64)  # (an unsigned id past int64 wraps: negative, refused)
    if bool(xp.all((ids >= 0) & (ids < max_positions))):
        return
    lo, hi = int(xp.min(ids)), int(xp.max(ids))
    bad = lo if lo < 0 else hi
    if bad < 0 and xp.isdtype(position_ids.dtype, "unsigned integer"):
        bad += 2**64
    raise ValueError(f"position_ids must be in [0, max_positions) = [0, {max_positions}) "
                     f"(max_positions = cos_cache.shape[0]), got {bad}")


def _cached_key(x, cos_cache, sin_cache, position_ids, layout, inverse, out):
    return (array_key(x), array_key(cos_cache), array_key(sin_cache), array_key(position_ids),
            array_key(out), layout, inverse, type(inverse))


def _cached_plan(x, cos_cache, sin_cache, position_ids, layout, inverse, out):
    """:class:`CachedPlan` of an :func:`apply_rope_cached` signature."""
    xp = array_namespace(x, cos_cache, sin_cache, position_ids, out,
                         name="x, cos_cache, sin_cache, position_ids and out")
    _check_cached_args(xp, x, cos_cache, sin_cache, position_ids, layout, inverse, out)
    return CachedPlan(xp, serving("apply_rope_cached", xp,
                                  (x, cos_cache, sin_cache, position_ids, out), layout=layout,
                                  inverse=inverse, out=out))


def apply_rope_cached(x: Array, cos_cache: Array, sin_cache: Array, position_ids: Array, /, *,
                      layout: RopeLayout = "half", inverse: bool = False,
                      out: Array | None = None) -> Array:
    """Rotate ``x`` by half-width cos/sin caches gathered at ``position_ids`` (ONNX form).

    Equal to ``apply_rope(x, full(cos_cache[position_ids]), full(sin_cache[position_ids]))``
    where ``full`` widens a half-width table to ``layout`` (``[c | c]`` or each value twice),
    without the caller gathering and widening: the form of ONNX ``RotaryEmbedding`` (opset 23)
    and ONNX Runtime's ``com.microsoft.RotaryEmbedding``, and one call per decode step.

    Parameters
    ----------
    x : array
        Real floating, shape ``(..., D)``.
    cos_cache, sin_cache : array
        Real floating, shape ``(max_positions, R/2)`` with ``R <= D``: rows of
        ``rope_cos_sin(arange(max_positions), inv_freq)[..., :R/2]`` or any caller-made cache.
        Features ``R:`` of ``x`` pass through (partial rotary, ONNX ``rotary_embedding_dim``).
    position_ids : array
        Integer, broadcasting against ``x.shape[:-1]``: insert the heads axis yourself
        (``(batch, seq, 1)`` for ``x`` ``(batch, seq, heads, D)``, ``(batch, 1, seq)`` for
        ``(batch, heads, seq, D)``).
    layout : {"half", "interleaved"}, optional
        Pairs ``(x_i, x_{i+R/2})`` or ``(x_{2i}, x_{2i+1})`` (ONNX ``interleaved=1``).
    inverse : bool, optional
        Rotate back (``-sin``).
    out : array, optional
        Receives the result: ``x``'s shape and dtype; ``out=x`` rotates in place. Not for
        immutable arrays (JAX). An ``out`` that overlaps the inputs otherwise (``x`` at an
        offset, the caches, the ids) is filled from a temporary.

    Returns
    -------
    array
        The rotated ``x`` (``out`` when given), of ``x``'s dtype, namespace and device.

    Raises
    ------
    TypeError
        Non-arrays, arrays of different libraries, non-floating ``x`` or caches, non-integer
        ``position_ids``, ``inverse`` not a bool, ``out`` on JAX.
    ValueError
        Unknown ``layout``; caches of different shapes, not 2-D or empty; ``R`` wider than
        ``x``; ``position_ids`` that do not broadcast to ``x.shape[:-1]``; ids outside
        ``[0, max_positions)`` (eager arrays); ``out`` of the wrong shape or dtype.

    Notes
    -----
    The arithmetic promotes ``x`` with the caches and rounds once to ``x.dtype``; the generic
    code does the same operations as :func:`apply_rope` on the widened tables (a compiled
    kernel may fuse multiply-adds: the last bit can differ). The shape checks run once per
    argument signature; the id range is read on every call of an eager array (Dask arrays and
    JAX tracers are not read: an id outside the cache is then clamped by the gather, as
    ``take`` does on that backend).
    Mapping from ONNX (``docs/coming-from-rope.md``): ONNX's 4-D input is
    ``(batch, heads, seq, D)`` and its ids ``(batch, seq)``, so pass ``ids[:, None, :]``.
    Backend support: one fused gather-and-rotate kernel for NumPy arrays and torch CPU tensors
    (the gathered tables are never materialised), CUDA kernels for CuPy arrays and CUDA torch
    tensors (with autograd, ``torch.compile`` and ``torch.func`` as :func:`apply_rope`), Dask
    arrays with NumPy chunks one task per chunk on those kernels; every
    other namespace the generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(8)
    >>> cos, sin = arrpos.rope_cos_sin(64, inv)            # (64, 8), half layout
    >>> cos_cache, sin_cache = cos[:, :4], sin[:, :4]      # ONNX's half-width caches
    >>> x = np.ones((2, 3, 4, 8))                           # (batch, seq, heads, dim)
    >>> ids = np.array([[0, 1, 2], [10, 11, 12]])          # (batch, seq)
    >>> y = arrpos.apply_rope_cached(x, cos_cache, sin_cache, ids[:, :, None])
    >>> ref = arrpos.apply_rope(x, cos[ids][:, :, None], sin[ids][:, :, None])
    >>> bool(np.allclose(y, ref, rtol=0, atol=1e-15))
    True
    """
    # a decode step repeats one signature: its checks and kernel choice are made once
    plan = recall(_CACHED_PLANS, _cached_key, _cached_plan, x, cos_cache, sin_cache,
                  position_ids, layout, inverse, out)
    xp = plan.xp
    check_out_memory(out)
    check = lambda: _check_ids_in_range(xp, position_ids, cos_cache.shape[0])  # noqa: E731
    try:  # the ids are read here only when the serving kernel does not check them itself
        return gather_rotate(plan.served, xp, check, x, cos_cache, sin_cache, position_ids,
                             layout, inverse, out)
    except ValueError:
        check()  # a kernel rejected an id: name it
        raise


def gather_rotate(served, xp, check, x, cos_cache, sin_cache, ids, layout, inverse, out):
    """:func:`apply_rope_cached` of valid arguments as ``served`` (:class:`Served`) says,
    through the kernel bound to the signature where there is one: nothing decided again, no
    keywords passed on. ``check``: reads the ids (None: the caller has)."""
    bound = served.bound
    if bound is not None:
        try:
            return bound(x, cos_cache, sin_cache, ids, out)
        except _dispatch.Unsupported:  # (strides its kernel does not take) the general route
            pass
    return _dispatch.call("apply_rope_cached", xp, x, cos_cache, sin_cache, ids,
                          arrays=(x, cos_cache, sin_cache, ids, out), plan=served.route,
                          check=check, layout=layout, inverse=inverse, out=out)


def _check_pair(out):
    """``out`` of :func:`apply_rope_qk`: None or a pair ``(q_out, k_out)`` (each may be None)."""
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be None or a pair (q_out, k_out), got "
                        f"{type(out).__name__}")
    return out[0], out[1]


def _qk_key(q, k, cos, sin, layout, inverse, q_out, k_out, pair):
    return (array_key(q), array_key(k), array_key(cos), array_key(sin), array_key(q_out),
            array_key(k_out), layout, inverse, type(inverse))


def _qk_plan(q, k, cos, sin, layout, inverse, q_out, k_out, pair):
    """:class:`Plan` of an :func:`apply_rope_qk` signature."""
    xp = array_namespace(q, k, cos, sin, q_out, k_out, name="q, k, cos, sin and out")
    _check_apply_args(xp, q, cos, sin, layout, inverse, q_out, out_name="out[0]", x_name="q")
    _check_apply_args(xp, k, cos, sin, layout, inverse, k_out, out_name="out[1]", x_name="k")
    return Plan(xp, _dispatch.plan("apply_rope_qk", xp, (q, k, cos, sin, q_out, k_out),
                                   layout=layout, inverse=inverse, out=pair))


def apply_rope_qk(q: Array, k: Array, cos: Array, sin: Array, /, *, layout: RopeLayout = "half",
                  inverse: bool = False,
                  out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
    """Rotate queries and keys together: ``(apply_rope(q, cos, sin), apply_rope(k, cos, sin))``.

    transformers' ``apply_rotary_pos_emb(q, k, cos, sin)`` in one call. ``q`` and ``k`` may
    differ in their heads axis (grouped-query / multi-query attention) and in dtype; ``cos``
    and ``sin`` must broadcast to both.

    Parameters
    ----------
    q, k : array
        Real floating, shape ``(..., D)`` each (e.g. ``(batch, heads, seq, D)`` and
        ``(batch, kv_heads, seq, D)``).
    cos, sin : array
        Tables from :func:`rope_cos_sin`, ``(..., R)``, ``R`` even and ``<= D``, broadcasting to
        ``q[..., :R]`` and ``k[..., :R]`` (``cos[:, None]`` for ``(batch, heads, seq, D)``).
    layout : {"half", "interleaved"}, optional
        As :func:`apply_rope`.
    inverse : bool, optional
        Rotate back.
    out : pair of arrays, optional
        ``(q_out, k_out)``, each like ``out`` of :func:`apply_rope` (``(q, k)`` rotates both in
        place) or None for a new array. Not for immutable arrays (JAX). An output over the
        other tensor (``(k, q)``, ``(k, None)``) receives its result once both are made; the two
        outputs must not overlap each other.

    Returns
    -------
    q_rot, k_rot : array
        The rotated ``q`` and ``k``, each of its own input's dtype.

    Raises
    ------
    TypeError
        As :func:`apply_rope`, naming ``q`` or ``k``; ``out`` not a pair.
    ValueError
        As :func:`apply_rope`, naming ``q`` or ``k``; ``out[0]`` and ``out[1]`` that share
        memory.

    Notes
    -----
    One validation (memoised per argument signature) and one dispatch for both tensors.
    Backend support: as :func:`apply_rope`, both tensors in one adapter call.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(8)
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(5), inv)
    >>> q = np.ones((1, 4, 5, 8))                      # (batch, heads, seq, dim)
    >>> k = np.ones((1, 2, 5, 8))                      # two kv heads (GQA)
    >>> qr, kr = arrpos.apply_rope_qk(q, k, cos[None, None], sin[None, None])
    >>> qr.shape, kr.shape
    ((1, 4, 5, 8), (1, 2, 5, 8))
    >>> bool(np.allclose(kr, arrpos.apply_rope(k, cos[None, None], sin[None, None])))
    True
    """
    q_out, k_out = _check_pair(out)
    pair = None if out is None else (q_out, k_out)
    plan = recall(_QK_PLANS, _qk_key, _qk_plan, q, k, cos, sin, layout, inverse, q_out, k_out,
                  pair)
    check_out_memory(q_out, "out[0]")
    check_out_memory(k_out, "out[1]")
    return _dispatch.call("apply_rope_qk", plan.xp, q, k, cos, sin,
                          arrays=(q, k, cos, sin, q_out, k_out), plan=plan.route, layout=layout,
                          inverse=inverse, out=pair)

"""The per-signature plans (``_lib.remember``): a call whose arguments differ from a memoised
signature in anything the checks or the dispatch read must be checked and routed afresh.

Each test first makes a valid call (its plan is stored), then a call that differs only in one
respect, and asserts the second is refused or served like the generic path would serve it.
Values come from a float64 loop over the pairs, not from the code under test.
"""
from __future__ import annotations

import numpy as np
import pytest

import arrpos
from arrpos._rope import apply as rope_apply
from reference import rope_apply_loop


def _case(seed=0, shape=(2, 3, 4, 8)):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    ang = rng.uniform(-3, 3, size=(shape[1], shape[-1] // 2))
    full = np.concatenate([ang, ang], axis=-1)
    cos = np.cos(full).astype(np.float32)[:, None, :]
    sin = np.sin(full).astype(np.float32)[:, None, :]
    return x, cos, sin


def test_an_int_inverse_is_refused_after_a_bool_one():
    x, cos, sin = _case()
    arrpos.apply_rope(x, cos, sin, inverse=True)
    with pytest.raises(TypeError, match="inverse"):
        arrpos.apply_rope(x, cos, sin, inverse=1)
    ids = np.zeros((2, 3, 1), np.int64)
    c, s = cos[:, 0, :4].copy(), sin[:, 0, :4].copy()
    arrpos.apply_rope_cached(x, c, s, ids, inverse=False)
    with pytest.raises(TypeError, match="inverse"):
        arrpos.apply_rope_cached(x, c, s, ids, inverse=0)


def test_out_memory_is_checked_on_every_call():
    x, cos, sin = _case(1)
    out = np.empty_like(x)
    arrpos.apply_rope(x, cos, sin, out=out)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        arrpos.apply_rope(x, cos, sin, out=ro)
    expanded = np.broadcast_to(np.empty((1,) + x.shape[1:], x.dtype), x.shape)
    with pytest.raises(ValueError, match="share memory|read-only"):
        arrpos.apply_rope(x, cos, sin, out=expanded)
    # the same signature through apply_rope_cached and apply_rope_qk
    ids = np.zeros((2, 3, 1), np.int64)
    c, s = cos[:, 0, :4].copy(), sin[:, 0, :4].copy()
    arrpos.apply_rope_cached(x, c, s, ids, out=out)
    with pytest.raises(ValueError, match="read-only"):
        arrpos.apply_rope_cached(x, c, s, ids, out=ro)
    arrpos.apply_rope_qk(x, x, cos, sin, out=(out, np.empty_like(x)))
    with pytest.raises(ValueError, match=r"out\[1\]"):
        arrpos.apply_rope_qk(x, x, cos, sin, out=(out, ro))


def test_overlapping_out_after_a_disjoint_one():
    x, cos, sin = _case(2)
    want = rope_apply_loop(x, cos, sin)
    arrpos.apply_rope(x, cos, sin, out=np.empty_like(x))
    buf = np.zeros((x.size + 8,), np.float32)
    xs = buf[8:].reshape(x.shape)
    xs[...] = x
    shifted = buf[:-8].reshape(x.shape)  # same signature, overlapping x at an offset
    arrpos.apply_rope(xs, cos, sin, out=shifted)
    np.testing.assert_allclose(shifted, want, rtol=0, atol=2e-6)


class _Tagged(np.ndarray):
    """An ndarray subclass: same shape and dtype as an ndarray, another type."""


def test_a_subclass_gets_its_own_plan():
    x, cos, sin = _case(3)
    arrpos.apply_rope(x, cos, sin)  # the ndarray plan
    got = arrpos.apply_rope(x.view(_Tagged), cos, sin)
    np.testing.assert_allclose(np.asarray(got), rope_apply_loop(x, cos, sin), rtol=0, atol=2e-6)
    keys = [k for k in rope_apply._APPLY_PLANS if k[0] is not None and k[0][0] is _Tagged]
    assert keys, "the subclass call was planned under its own signature"


def test_heads_axis_true_is_not_heads_axis_one():
    rope = arrpos.RoPE(8)
    x = np.random.default_rng(4).standard_normal((2, 1, 4, 8)).astype(np.float32)
    pos = np.array([[3, 4, 5, 6], [7, 8, 9, 10]])  # (batch, seq); heads at axis 1 of x
    rope.apply(x, pos, heads_axis=1)
    with pytest.raises(TypeError, match="heads_axis"):
        rope.apply(x, pos, heads_axis=True)  # True == 1 and hash(True) == hash(1)


def test_decode_cache_grows_and_negative_ids_take_the_table_path():
    """RoPE.apply tries its cache before reading the ids; an id past it or below zero must
    still be served exactly (a float64 formula of the angles is the reference)."""
    rope = arrpos.RoPE(8, base=321.0)
    x = np.random.default_rng(5).standard_normal((3, 1, 2, 8))
    inv = 1.0 / 321.0 ** (np.arange(0, 8, 2) / 8.0)

    def want(pos):
        ang = np.asarray(pos, np.float64)[..., None] * inv
        full = np.concatenate([ang, ang], axis=-1)[:, :, None, :]
        return rope_apply_loop(x, np.cos(full), np.sin(full))

    for pos in ([[5], [1], [2]], [[5000], [1], [2]], [[-4], [0], [9]], [[7], [8], [9]]):
        pos = np.array(pos, dtype=np.int64)
        got = rope.apply(x, pos, heads_axis=-2)
        np.testing.assert_allclose(got, want(pos), rtol=0, atol=1e-12)


def _cached_case(seed, shape):
    """x, half-width caches, ids (batch, seq, 1) and the widened tables the reference reads."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    ang = rng.uniform(-3, 3, size=(64, shape[-1] // 2))
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    ids = rng.integers(0, 64, size=shape[:2] + (1,)).astype(np.int64)
    full = lambda t: np.concatenate([t[ids[..., 0]], t[ids[..., 0]]], axis=-1)[:, :, None]  # noqa: E731
    return x, c, s, ids, full(c), full(s)


def test_a_signature_bound_kernel_hands_strides_it_cannot_take_to_the_general_route():
    """The kernel bound to a signature (the NumPy front-end's ``bind``) decides nothing from
    strides: a view
    of the same shape and dtype whose strides its kernel refuses is still served exactly."""
    x, c, s, ids, wc, ws = _cached_case(6, (2, 3, 4, 8))
    arrpos.apply_rope_cached(x, c, s, ids)  # the plan, bound to a contiguous x
    rec = np.zeros(x.shape, dtype=[("v", np.float32), ("pad", np.int8)])
    rec["v"] = x
    packed = rec["v"]  # float32 elements 5 bytes apart: no kernel takes them
    assert packed.shape == x.shape and packed.dtype == x.dtype
    got = arrpos.apply_rope_cached(packed, c, s, ids)
    np.testing.assert_allclose(got, rope_apply_loop(x, wc, ws), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="position_ids"):  # the ids still named when refused
        arrpos.apply_rope_cached(packed, c, s, ids + 64)


@pytest.mark.skipif(arrpos._dispatch.front_end("host.numpy") is None,
                    reason="compiled extension disabled or absent")
def test_a_bound_kernel_takes_its_threads_from_the_caller_on_every_call(monkeypatch):
    """Threads are not part of a signature: a Dask task asks for one thread per call
    (``one_thread_per_call``) with arrays whose signature another caller bound first."""
    from arrpos._backends import one_thread_per_call
    from arrpos._backends.host import driver
    from arrpos._backends.host import numpy as _numpy

    real, threads = driver._cpu, []

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def apply_rope_cached(self, *args):
            threads.append(args[-2])
            return real.apply_rope_cached(*args)

    monkeypatch.setattr(driver, "_cpu", Spy())
    x, c, s, ids, wc, ws = _cached_case(7, (2, 64, 16, 64))  # 512 KiB: a threaded size
    bound = _numpy.bind("apply_rope_cached", (x, c, s, ids, None), layout="half",
                        inverse=False)
    want = rope_apply_loop(x, wc, ws)
    np.testing.assert_allclose(bound(x, c, s, ids, None), want, rtol=0, atol=2e-6)
    with one_thread_per_call():
        np.testing.assert_allclose(bound(x, c, s, ids, None), want, rtol=0, atol=2e-6)
    assert threads == [driver.max_threads(), 1]

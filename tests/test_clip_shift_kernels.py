"""The compiled clip-and-shift (op ``clip_shift``: ``shaw_index`` and the T5 / DeBERTa table
index) against an independent reference and against the generic implementation
(``_xp.clip_shift``), on hypothesis-drawn integer dtypes, shapes (0-d and empty included),
strided views, values at the dtype's edges and ``max_distance`` from 0 to the largest the
index dtype holds, through the public functions (so the dispatcher's routing is what is
tested); NumPy arrays and torch CPU tensors.

The reference is the definition, Shaw et al. (2018) Sec. 3: ``clip(x, -K, K) + K``, each value
taken as a Python int (no overflow, no wrap-around), in the dtype shaw_index's docstring
states. Without the extension (``ARRPOS_NO_EXTENSIONS=1``) the reference tests run on the
generic path; the tests that need the kernel are skipped.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import array_api_compat.numpy as xp
import arrpos
from arrpos import _dispatch
from arrpos._backends import Unsupported, _xp

_numpy = _dispatch.front_end("host.numpy")
needs_kernel = pytest.mark.skipif(_numpy is None,
                                  reason="compiled extension disabled or absent")

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_I64_MAX = 2**63 - 1


@contextlib.contextmanager
def _kernel_only():
    """The generic twin refuses while the public call runs: a late fallback would fail."""
    generic = _xp.clip_shift

    def refuse(*args, **kwargs):
        raise AssertionError("the generic path served a call the kernel should have")
    _xp.clip_shift = refuse
    try:
        yield
    finally:
        _xp.clip_shift = generic


@contextlib.contextmanager
def _generic_only(*front_ends):
    """The kernel's front-ends refuse (late, as for strides they do not take): the dispatcher
    falls back to the generic path, which then serves the call as without extensions."""
    kept = [(f, f.clip_shift) for f in front_ends if f is not None]

    def refuse(*args, **kwargs):
        raise Unsupported("refused by the test")
    for f, _ in kept:
        f.clip_shift = refuse
    try:
        yield
    finally:
        for f, fn in kept:
            f.clip_shift = fn


def _reference(rel, k):
    """``clip(rel, -K, K) + K`` in Python ints, and its dtype by shaw_index's docstring:
    ``rel``'s when signed and holding 2K, else int64."""
    info = np.iinfo(rel.dtype)
    dtype = rel.dtype if info.min < 0 and 2 * k <= info.max else np.dtype(np.int64)
    flat = [min(max(int(v), -k), k) + k for v in np.asarray(rel).reshape(-1).tolist()]
    return np.array(flat, dtype=object).reshape(rel.shape), dtype


def _check(got, rel, k):
    want, dtype = _reference(rel, k)
    got = np.asarray(got)
    assert got.shape == rel.shape and got.dtype == dtype, (got.shape, got.dtype, dtype)
    assert (got.astype(object) == want).all()


@st.composite
def _relative(draw):
    """An integer array of any dtype: values across the dtype's whole range, its edges and
    0, +-1 mixed in; 0 to 3 axes (empty ones too); contiguous, transposed, strided, reversed
    or broadcast views."""
    dtype = np.dtype(draw(st.sampled_from(INTS)))
    info = np.iinfo(dtype)
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0 if ndim else 1, 9)) for _ in range(ndim))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = int(np.prod([2 * s for s in shape]))
    wide = rng.integers(int(info.min), int(info.max), size=n, dtype=dtype, endpoint=True)
    small = rng.integers(max(int(info.min), -40), 40, size=n, endpoint=True).astype(dtype)
    edges = np.array([info.min, info.max, info.min + 1, info.max - 1, 0, 1], dtype=dtype)
    vals = np.where(rng.random(n) < 0.5, wide, small)
    pick = rng.random(n) < 0.15
    vals[pick] = rng.choice(edges, size=int(pick.sum()))
    big = vals.reshape(tuple(2 * s for s in shape) if shape else ())
    layout = draw(st.sampled_from(["contiguous", "strided", "transposed", "reversed",
                                   "broadcast"]))
    if layout == "contiguous" or ndim == 0 or 0 in shape:
        return np.ascontiguousarray(big[tuple(slice(0, s) for s in shape)])
    if layout == "strided":
        return big[tuple(slice(None, None, 2) for _ in shape)]
    if layout == "transposed":
        return big[tuple(slice(0, s) for s in shape)].T
    if layout == "reversed":
        return big[tuple(slice(None, None, -2) for _ in shape)]
    return np.broadcast_to(big[(0,) * (ndim - 1)][:shape[-1]], shape)


_K = st.one_of(st.integers(0, 5), st.integers(0, 300), st.integers(0, _I64_MAX // 2),
               st.sampled_from([0, 63, 64, 127, 128, 2**15, 2**31 - 1, 2**31, _I64_MAX // 2]))


def _fits(rel):
    """Whether shaw_index takes ``rel`` (uint64 from 2**63 is refused)."""
    return rel.dtype != np.uint64 or rel.size == 0 or int(rel.max()) <= _I64_MAX


@settings(max_examples=300, deadline=None)
@given(rel=_relative(), k=_K)
def test_shaw_index_numpy_equals_reference(rel, k):
    if not _fits(rel):
        with pytest.raises(ValueError, match="relative"):
            arrpos.shaw_index(rel, max_distance=k)
        return
    _check(arrpos.shaw_index(rel, max_distance=k), rel, k)


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(rel=_relative(), k=_K)
def test_shaw_index_numpy_kernel_equals_generic(rel, k):
    if not _fits(rel):
        return
    with _generic_only(_numpy):
        ref = arrpos.shaw_index(rel, max_distance=k)
    with contextlib.ExitStack() as stack:
        collapsible = rel.ndim < 3 or rel.flags.c_contiguous or rel.size == 0 \
            or rel.strides[0] == rel.strides[1] * rel.shape[1] or 1 in rel.shape[:2]
        if collapsible:  # leading axes that collapse into one: no fallback
            stack.enter_context(_kernel_only())
        got = arrpos.shaw_index(rel, max_distance=k)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert np.array_equal(got, ref)
    # the generic twin called directly on the same arrays
    direct = _xp.clip_shift(rel if got.dtype == rel.dtype or rel.dtype != np.uint64
                            else rel.astype(np.int64), lo=-k, hi=k, shift=k,
                            dtype=got.dtype, xp=xp)
    assert np.array_equal(got, direct)


def test_shaw_index_served_by_the_kernel():
    rel = arrpos.relative_positions(4, 6)
    plan = _dispatch.plan("clip_shift", xp, (rel,), lo=-2, hi=2, shift=2, dtype=rel.dtype)
    assert plan.module is (_numpy if _numpy is not None else _xp)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("k", [0, 1, 100, 2**31, _I64_MAX // 2])
def test_shaw_index_large_threaded_streamed(dtype, k):
    """An output large enough for the thread pool and the streaming stores (8 MiB and more),
    with rows that are not whole cache lines, values at the dtype's edges."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    rel = rng.integers(int(info.min), min(int(info.max), _I64_MAX), size=(1031, 1037),
                       dtype=dtype, endpoint=True)
    rel[::7, ::3] = info.min
    rel[1::5, 2::4] = info.max if dtype != "uint64" else _I64_MAX
    got = arrpos.shaw_index(rel, max_distance=k)
    wide = rel.astype(object)
    want = np.minimum(np.maximum(wide, -k), k) + k
    assert (got.astype(object) == want).all()
    view = rel[::-1, 1::2]  # strided and reversed
    assert (arrpos.shaw_index(view, max_distance=k).astype(object)
            == np.minimum(np.maximum(view.astype(object), -k), k) + k).all()


def test_shaw_index_refuses_uint64_past_int64():
    for rel in (np.array([0, 2**63], dtype=np.uint64), np.full((3, 4), 2**64 - 1, np.uint64)):
        with pytest.raises(ValueError, match="relative"):
            arrpos.shaw_index(rel, max_distance=3)


# ---- torch CPU ---------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
_torch = _dispatch.front_end("host.torch_cpu")
_TORCH_INTS = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
               "int64": torch.int64, "uint8": torch.uint8, "uint16": torch.uint16,
               "uint32": torch.uint32, "uint64": torch.uint64}


def _tensor(rel):
    """The same values and strides as a torch tensor (no negative strides: those flipped)."""
    base = np.ascontiguousarray(rel)
    t = torch.from_numpy(base) if rel.ndim == 0 else torch.from_numpy(base.copy())
    if rel.ndim >= 2 and not rel.flags.c_contiguous and rel.size:  # a transposed layout
        t = torch.from_numpy(np.ascontiguousarray(rel.T).copy()).permute(
            *reversed(range(rel.ndim)))
    return t


@settings(max_examples=200, deadline=None)
@given(rel=_relative(), k=_K)
def test_shaw_index_torch_equals_reference_and_generic(rel, k):
    t = _tensor(rel)
    if not _fits(rel):
        with pytest.raises(ValueError, match="relative"):
            arrpos.shaw_index(t, max_distance=k)
        return
    got = arrpos.shaw_index(t, max_distance=k)
    assert isinstance(got, torch.Tensor)
    _check(got.numpy(), rel, k)
    with _generic_only(_torch):
        ref = arrpos.shaw_index(t, max_distance=k)
    assert got.dtype == ref.dtype and torch.equal(got, ref)


@needs_kernel
def test_shaw_index_torch_served_by_the_kernel():
    t = torch.arange(-20, 20).reshape(5, 8)[:, ::2].to(torch.uint16)
    with _kernel_only():
        got = arrpos.shaw_index(t, max_distance=3)
    assert got.dtype == torch.int64
    _check(got.numpy(), t.numpy(), 3)


# ---- the bucket tables' index ----------------------------------------------------------------

@needs_kernel
@settings(max_examples=150, deadline=None)
@given(rel=_relative(), bidirectional=st.booleans())
def test_bucket_index_kernel_equals_generic(rel, bidirectional):
    """t5_bucket and deberta_bucket (table paths: their index's clip-and-shift on the kernel)
    equal to the same calls on the generic path, every integer dtype."""
    if not _fits(rel):
        return
    calls = (lambda r: arrpos.t5_bucket(r, bidirectional=bidirectional),
             lambda r: arrpos.deberta_bucket(r, bucket_size=256, max_position=512))
    for fn in calls:
        got = fn(rel)
        with _generic_only(_numpy, _torch):
            ref = fn(rel)
        assert got.dtype == ref.dtype and np.array_equal(got, ref)
        t = _tensor(rel)
        got_t = fn(t)
        with _generic_only(_numpy, _torch):
            ref_t = fn(t)
        assert got_t.dtype == ref_t.dtype and torch.equal(got_t, ref_t)
        assert np.array_equal(got_t.numpy(), got)

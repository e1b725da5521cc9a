"""The compiled kernels against the generic implementation on hypothesis-drawn inputs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import array_api_compat.numpy as xp
from arrpos import _dispatch
from arrpos._backends import _xp
from arrpos._exact import power_frequencies, timestep_frequencies

_numpy = _dispatch.numpy_module()
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")

LAYOUTS = ["interleaved", "split", "split_cos"]
int_positions = hnp.arrays(
    np.int64,
    hnp.array_shapes(min_dims=0, max_dims=3, max_side=70),
    elements=st.integers(-(2**34), 2**34),  # |p w| < 5e10: the exact range
)
real_positions = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=0, max_dims=2, max_side=40),
    elements=st.floats(-1e7, 1e7, allow_nan=False),
)


def _check(pos, half, base, layout, dtype, extra):
    hi, lo = power_frequencies(half, 2 * half, base)
    width = 2 * half + extra
    a = _numpy.sinusoid_table(pos, hi, lo, layout=layout, dtype=dtype, width=width, xp=xp)
    b = _xp.sinusoid_table(xp.asarray(pos), hi, lo, layout=layout, dtype=dtype, width=width,
                           xp=xp)
    assert a.shape == b.shape == np.shape(pos) + (width,)
    assert a.dtype == b.dtype == dtype
    # both are within ~1e-15 of exact before rounding; float32 may round either side
    tol = 1e-13 if dtype == np.float64 else 1.2e-7
    np.testing.assert_allclose(a, b, rtol=0, atol=tol)


@settings(max_examples=60, deadline=None)
@given(pos=int_positions, half=st.integers(1, 40), base=st.sampled_from([100.0, 10000.0, 5e5]),
       layout=st.sampled_from(LAYOUTS), dtype=st.sampled_from([np.float32, np.float64]),
       extra=st.integers(0, 1))
def test_sinusoid_integer_positions(pos, half, base, layout, dtype, extra):
    _check(pos, half, base, layout, dtype, extra)


@settings(max_examples=40, deadline=None)
@given(pos=real_positions, half=st.integers(1, 24), layout=st.sampled_from(LAYOUTS),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_sinusoid_real_positions(pos, half, layout, dtype):
    _check(pos, half, 10000.0, layout, dtype, 0)


@settings(max_examples=20, deadline=None)
@given(start=st.integers(0, 2**24), n=st.integers(1, 3000))
def test_sinusoid_long_runs_cross_many_blocks(start, n):
    """Consecutive positions exercise the block-to-block recurrence and its re-anchoring."""
    _check(np.arange(start, start + n), 16, 10000.0, "interleaved", np.float64, 0)


def test_timestep_frequencies_through_kernel():
    hi, lo = timestep_frequencies(64, 10000.0, 1.0, 1.0)
    t = np.arange(1000)
    a = _numpy.sinusoid_table(t, hi, lo, layout="split", dtype=np.float32, width=129, xp=xp)
    b = _xp.sinusoid_table(xp.asarray(t), hi, lo, layout="split", dtype=np.float32, width=129,
                           xp=xp)
    np.testing.assert_allclose(a, b, rtol=0, atol=1.2e-7)


def test_kernel_checks_shapes():
    """A wrong call to the raw kernel raises before touching memory."""
    from arrpos._backends import _cpu

    hi, lo = power_frequencies(4, 8, 10000.0)
    rc, rs, pc, ps = _numpy._rotation_tables(hi.tobytes(), lo.tobytes())
    pos = np.arange(10.0)
    work = np.empty((1, 16))
    with pytest.raises(ValueError, match="out"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((9, 8), np.float32), 0, 1)
    with pytest.raises(ValueError, match="out"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((10, 6), np.float32), 0, 1)
    with pytest.raises(ValueError, match="layout"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((10, 8), np.float32), 5, 1)
    with pytest.raises(ValueError, match="work"):
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work, np.empty((10, 8), np.float32), 0, 4)
    with pytest.raises(ValueError):  # non-contiguous output is refused by the memoryview
        _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, work,
                            np.empty((10, 16), np.float32)[:, ::2], 0, 1)

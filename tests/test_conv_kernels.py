"""The compiled depthwise convolution (``conv_positional``, ``conv_positional_2d``) against the
generic implementation (``_xp.conv_positional``, the reference) on hypothesis-drawn shapes,
kernel sizes, strides, dtypes, activations, biases and residuals, through the public functions
(so the dispatcher's routing is what is tested); and against torch's own convolution.

The sums are the generic path's term for term: without an activation, equal bit for bit. The
exact GELU's series is the generic path's operation for operation, only its exp differs; tanh
is the library's in float64 and an exp-based form in float32 (2.1 ulps at most, measured over
[-12, 12]); so activated outputs agree within a few ulps of the working type (float32 for
16-bit x), plus one rounding step of a 16-bit output.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import array_api_compat.numpy as xp
import arrpos
from reference import numpy_float_dtypes
from arrpos import _dispatch
from arrpos._backends import _xp

_numpy = _dispatch.front_end("host.numpy")
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")


DTYPES = numpy_float_dtypes()
ACTIVATIONS = [None, "gelu", "tanh"]


def _eps(dtype) -> float:
    """The spacing of 1 in ``dtype`` (bfloat16: 2**-7, which NumPy's finfo does not know)."""
    if np.dtype(dtype).itemsize == 2 and np.dtype(dtype) != np.float16:
        return 2.0**-7
    return float(np.finfo(dtype).eps)


def _check(got, ref, x, activation, dtype=None):
    """``got`` equals ``ref`` bit for bit (no activation), else within the stated tolerance
    for outputs of ``dtype`` (default: got's)."""
    got, ref = np.asarray(got), np.asarray(ref)
    dtype = np.dtype(got.dtype if dtype is None else dtype)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if activation is None:
        assert got.tobytes() == ref.tobytes()
        return
    g, r = got.astype(np.float64), ref.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(r))
    work = np.float64 if dtype == np.float64 else np.float32
    scale = np.abs(r) + np.abs(np.asarray(x).astype(np.float64))
    tol = 8 * _eps(work) * scale + 1e-300
    if dtype.itemsize == 2:
        tol = tol + _eps(dtype) * np.abs(r)
    ok = np.isnan(r) | (g == r) | (np.abs(g - r) <= tol)
    assert ok.all(), (g[~ok][:5], r[~ok][:5])


def _served(x, weight, bias, activation, residual):
    plan = _dispatch.plan("conv_positional", xp, (x, weight, bias), activation=activation,
                          residual=residual, dtype=x.dtype)
    assert plan.module is _numpy


@contextlib.contextmanager
def _kernel_only():
    """The generic twin refuses while the public call runs: a late fallback would fail."""
    generic = _xp.conv_positional

    def refuse(*args, **kwargs):
        raise AssertionError("the generic path served a call the kernel should have")
    _xp.conv_positional = refuse
    try:
        yield
    finally:
        _xp.conv_positional = generic


@st.composite
def _case(draw, grid):
    dtype = draw(st.sampled_from(DTYPES))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    h = draw(st.integers(0, 24))
    w = draw(st.integers(1, 9)) if grid else 1
    c = draw(st.integers(1, 40))
    kh = draw(st.integers(1, 7))
    kw = draw(st.integers(1, 5)) if grid else 1
    seed = draw(st.integers(0, 2**32 - 1))
    step = draw(st.integers(1, 2))  # a strided view of x when 2
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(lead + (h, w, c * step)) * 3).astype(dtype)[..., ::step]
    wdt = draw(st.sampled_from([np.float32, np.float64, dtype]))
    weight = (rng.standard_normal((kh, kw, c)) / (kh * kw)).astype(wdt)
    bias = (rng.standard_normal(c) * 0.5).astype(wdt) if draw(st.booleans()) else None
    return x, weight, bias, draw(st.sampled_from(ACTIVATIONS)), draw(st.booleans())


@settings(max_examples=80, deadline=None)
@given(case=_case(grid=False))
def test_conv_positional_equals_generic(case):
    x4, w3, bias, activation, residual = case
    x = x4[..., 0, :]  # (..., L, C)
    weight = w3[:, 0, :]
    with _kernel_only():
        got = arrpos.conv_positional(x, weight, bias, activation=activation, residual=residual)
    x_grid = np.expand_dims(x, -2)
    _served(x_grid, w3, bias, activation, residual)
    ref = _xp.conv_positional(x_grid, w3, bias, activation=activation, residual=residual,
                              dtype=x.dtype, xp=xp)[..., 0, :]
    _check(got, ref, x, activation)


@settings(max_examples=80, deadline=None)
@given(case=_case(grid=True))
def test_conv_positional_2d_equals_generic(case):
    x, weight, bias, activation, residual = case
    with _kernel_only():
        got = arrpos.conv_positional_2d(x, weight, bias, activation=activation,
                                        residual=residual)
    _served(x, weight, bias, activation, residual)
    ref = _xp.conv_positional(x, weight, bias, activation=activation, residual=residual,
                              dtype=x.dtype, xp=xp)
    _check(got, ref, x, activation)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_conv_special_values_and_threads(activation):
    """NaN, infinities, huge and tiny values; an output large enough for the thread pool."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 300, 700)).astype(np.float32) * 4
    x[0, 5, :6] = [np.nan, np.inf, -np.inf, 1e38, -1e38, 1e-40]
    x[1, 7, :] = -30.0  # deep in the GELU's small tail: the exp's subnormal range
    weight = rng.standard_normal((5, 700)).astype(np.float32)
    with _kernel_only():
        got = arrpos.conv_positional(x, weight, activation=activation)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = _xp.conv_positional(x[..., None, :], weight[:, None, :], None,
                                  activation=activation, residual=True, dtype=x.dtype, xp=xp)
        _check(got, ref[..., 0, :], x, activation)


def test_conv_other_axis_and_generic_agree():
    """A sequence axis other than -2: the same numbers as moving it next to the channels."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 2, 5))
    weight = rng.standard_normal((3, 5))
    got = arrpos.conv_positional(x, weight, axis=0, activation=None)
    ref = np.moveaxis(arrpos.conv_positional(np.moveaxis(x, 0, 1), weight, activation=None),
                      1, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-15, atol=1e-15)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kernel", [1, 4, 5, 128])
def test_conv_equals_torch(kernel):
    """float64 against torch's Conv1d/Conv2d (groups = C, padding "same") + GELU + residual:
    the peer code users run today, an independent reference."""
    rng = np.random.default_rng(kernel)
    c = 24
    x = rng.standard_normal((2, 150, c))
    weight = rng.standard_normal((kernel, c)) * 0.3
    bias = rng.standard_normal(c)
    got = arrpos.conv_positional(x, weight, bias)
    conv = torch.nn.Conv1d(c, c, kernel, padding="same", groups=c, dtype=torch.float64)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(weight.T.copy())[:, None, :])
        conv.bias.copy_(torch.from_numpy(bias))
        xt = torch.from_numpy(x)
        ref = (torch.nn.functional.gelu(conv(xt.transpose(1, 2))).transpose(1, 2) + xt).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    x2 = rng.standard_normal((2, 9, 11, c))
    w2 = rng.standard_normal((3, min(kernel, 4), c))
    got = arrpos.conv_positional_2d(x2, w2, bias)
    conv2 = torch.nn.Conv2d(c, c, w2.shape[:2], padding="same", groups=c, dtype=torch.float64)
    with torch.no_grad():
        conv2.weight.copy_(torch.from_numpy(w2).permute(2, 0, 1)[:, None])
        conv2.bias.copy_(torch.from_numpy(bias))
        xt = torch.from_numpy(x2).permute(0, 3, 1, 2)
        ref = (conv2(xt) + xt).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_cpu_conv_equals_generic(dtype):
    """Torch CPU tensors reach the same kernel (bfloat16 as its bits) with the same values."""
    import array_api_compat.torch as txp

    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 10, 7, 16, generator=g).to(dtype)
    weight = torch.randn(3, 3, 16, generator=g)
    bias = torch.randn(16, generator=g)
    plan = _dispatch.plan("conv_positional", txp, (x, weight, bias), activation="gelu",
                          residual=True, dtype=dtype)
    assert plan.module.__name__.endswith("host.torch_cpu")
    for activation in ACTIVATIONS:
        with _kernel_only():
            got = arrpos.conv_positional_2d(x, weight, bias, activation=activation)
        ref = _xp.conv_positional(x, weight, bias, activation=activation, residual=True,
                                  dtype=dtype, xp=txp)
        assert got.dtype == dtype
        half = {torch.float16: np.float16, torch.bfloat16: "bfloat16"}
        _check(got.double().numpy(), ref.double().numpy(), x.double().numpy(), activation,
               half.get(dtype, np.float32 if dtype == torch.float32 else np.float64))
        if activation is None:
            assert torch.equal(got.double(), ref.double())


def test_torch_autograd_keeps_generic_path():
    x = torch.randn(5, 4, requires_grad=True)
    weight = torch.randn(3, 4)
    arrpos.conv_positional(x, weight, activation=None).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape

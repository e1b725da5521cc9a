"""The compiled resampling (``resample``, ``resample_grids``, ``resize_relative_table``: the op
``resample_grid``) against the generic implementation (``_xp.resample_grid``, the reference)
on hypothesis-drawn shapes, grids, dtypes, methods, antialias, align_corners, prefix rows and
strided tables, through the public functions (so the dispatcher's routing is what is tested);
and against torch's own ``interpolate``.

The kernel applies the generic path's host taps in float64, each sum in tap order with the
products rounded before they are added (no FMA), the first grid axis first, and rounds once:
the generic path's arithmetic step for step, so the results are equal bit for bit.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import array_api_compat.numpy as xp
import arrpos
from reference import numpy_float_dtypes
from arrpos import _dispatch, _taps
from arrpos._backends import Unsupported, _xp

_numpy = _dispatch.front_end("host.numpy")
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")


DTYPES = numpy_float_dtypes()


@contextlib.contextmanager
def _kernel_only():
    """The generic twin refuses while the public call runs: a late fallback would fail."""
    generic = _xp.resample_grid

    def refuse(*args, **kwargs):
        raise AssertionError("the generic path served a call the kernel should have")
    _xp.resample_grid = refuse
    try:
        yield
    finally:
        _xp.resample_grid = generic


@contextlib.contextmanager
def _generic_only(front_end):
    """The kernel's front-end refuses (late, as for strides it does not take): the dispatcher
    falls back to the generic path, which then serves the public call as without extensions."""
    kernel = front_end.resample_grid

    def refuse(*args, **kwargs):
        raise Unsupported("refused by the test")
    front_end.resample_grid = refuse
    try:
        yield
    finally:
        front_end.resample_grid = kernel


def _same(got, ref):
    """Equal bit for bit (the sign of zero and NaN positions included)."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert got.tobytes() == ref.tobytes(), np.abs(got.astype(np.float64)
                                                  - ref.astype(np.float64)).max()


@st.composite
def _case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    axes = draw(st.integers(1, 2))
    old = tuple(draw(st.integers(1, 12)) for _ in range(axes))
    new = tuple(draw(st.integers(1, 20)) for _ in range(axes))
    c = draw(st.integers(1, 40))
    prefix = draw(st.integers(0, 2))
    layout = draw(st.sampled_from(["contiguous", "channels", "rows", "reversed"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = prefix + math.prod(old)
    if layout == "channels":  # every other channel: the last axis strided
        table = rng.standard_normal(lead + (rows, 2 * c))[..., ::2]
    elif layout == "rows":  # every other row
        table = rng.standard_normal(lead + (2 * rows, c))[..., ::2, :]
    elif layout == "reversed":  # negative strides
        table = rng.standard_normal(lead + (rows, c))[..., ::-1, ::-1]
    else:
        table = rng.standard_normal(lead + (rows, c))
    options = dict(method=draw(st.sampled_from(["linear", "cubic"])),
                   antialias=draw(st.booleans()), align_corners=draw(st.booleans()))
    return (table * 3).astype(dtype), old, new, prefix, options


def _public(table, old, new, prefix, options):
    size = new[0] if len(new) == 1 else new
    return arrpos.resample(table, size, old_size=old[0] if len(old) == 1 else old,
                           prefix_tokens=prefix, **options)


@settings(max_examples=150, deadline=None)
@given(case=_case())
def test_resample_equals_generic(case):
    table, old, new, prefix, options = case
    with _kernel_only():
        got = _public(table, old, new, prefix, options)
    with _generic_only(_numpy):
        ref = _public(table, old, new, prefix, options)
    _same(got, ref)
    # the generic twin called directly, on the same host taps
    single = table.dtype != np.float64
    taps = tuple(None if a == b else _taps.host_taps(a, b, options["method"],
                                                     options["antialias"], single,
                                                     options["align_corners"])
                 for a, b in zip(old, new))
    lead = table.shape[:-2]
    grid = np.reshape(table[..., prefix:, :], lead + old + table.shape[-1:])
    direct = _xp.resample_grid(grid, table[..., :prefix, :] if prefix else None, taps=taps,
                               dtype=table.dtype, xp=xp)
    _same(got, direct)


def test_resample_served_by_the_kernel():
    table = np.zeros((1 + 16, 8), np.float32)
    grid = table[1:].reshape(4, 4, 8)
    taps = (_taps.host_taps(4, 6, "cubic", True, True, False),) * 2
    plan = _dispatch.plan("resample_grid", xp, (grid, table[:1]), taps=taps, dtype=grid.dtype)
    assert plan.module is _numpy


@pytest.mark.parametrize("antialias", [False, True])
def test_resample_special_values_and_threads(antialias):
    """NaN and infinities (a zero-weight tap still reads its row: NaN spreads as in the
    generic sums), and an output large enough for the thread pool, up and down."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((2, 1 + 24 * 24, 256)).astype(np.float32)
    table[0, 40, :4] = [np.nan, np.inf, -np.inf, 3e38]
    for new in ((48, 40), (9, 13)):
        with _kernel_only():
            got = arrpos.resample(table, new, prefix_tokens=1, method="cubic",
                                  antialias=antialias)
        with _generic_only(_numpy), np.errstate(invalid="ignore", over="ignore"):
            ref = arrpos.resample(table, new, prefix_tokens=1, method="cubic",
                                  antialias=antialias)
        _same(got, ref)
        assert np.isnan(got).any()


@pytest.mark.parametrize("c", [1, 2, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_resample_many_taps_few_channels(c, dtype):
    """A strong antialiased shrink (up to 2 x 40 taps per output). With two channels and more
    the generic sums run along the taps in order, as the kernel's: bit for bit. A one-channel
    grid is the exception: NumPy then sums 8 taps and more pairwise (a contiguous reduction),
    the kernel in order, so their float64 sums differ in the last bits; after the one
    rounding that is at most 1 ulp of a float32 output, and a few float64 ulps of the
    table's scale for a float64 one (the stated tolerance)."""
    rng = np.random.default_rng(8)
    table = rng.standard_normal((1 + 160 * 120, c)).astype(dtype)
    for method in ("linear", "cubic"):
        with _kernel_only():
            got = arrpos.resample(table, (4, 3), old_size=(160, 120), prefix_tokens=1,
                                  method=method, antialias=True)
        with _generic_only(_numpy):
            ref = arrpos.resample(table, (4, 3), old_size=(160, 120), prefix_tokens=1,
                                  method=method, antialias=True)
        if c > 1:
            _same(got, ref)
            continue
        if dtype == np.float32:
            tol = np.spacing(np.abs(ref))
        else:
            tol = 8 * np.finfo(np.float64).eps * np.abs(table).max()
        assert (np.abs(got - ref) <= tol).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_resample_every_instruction_set_same_bits(dtype):
    """Every vector level this CPU has (AVX-512, AVX2, portable) gives the same bits: the
    lanes run over the channels, each element's sum in the same order."""
    from arrpos._backends import _cpu

    rng = np.random.default_rng(9)
    table = (rng.standard_normal((2, 1 + 9 * 7, 37)) * 3).astype(dtype)
    top = _cpu.instruction_set()
    results = []
    try:
        for level in range(top, -1, -1):
            _cpu.set_instruction_set(level)
            with _kernel_only():
                results.append(arrpos.resample(table, (16, 5), old_size=(9, 7),
                                               prefix_tokens=1, method="cubic",
                                               antialias=True))
    finally:
        _cpu.set_instruction_set(top)
    for got in results[1:]:
        _same(got, results[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_resample_grids_equals_generic(dtype):
    rng = np.random.default_rng(4)
    table = (rng.standard_normal((36, 12)) * 2).astype(dtype)
    grids = [(1, 4, 6), (1, 8, 8), (2, 2, 10)]
    kwargs = dict(method="cubic", antialias=True, preserve_aspect=True, pad_to=70)
    with _kernel_only():
        got = arrpos.resample_grids(table, grids, **kwargs)
    with _generic_only(_numpy):
        ref = arrpos.resample_grids(table, grids, **kwargs)
    _same(got, ref)


@pytest.mark.parametrize("window", [(4, 5), (9, 9), (3, 3, 3)])
def test_resize_relative_table_equals_generic(window):
    """Two axes through the kernel; three (a 3-D window) fall back to the generic path."""
    rng = np.random.default_rng(5)
    k = len(window)
    table = rng.standard_normal((2, 5 ** k + 3, 6)).astype(np.float32)
    old = (3,) * k
    got = arrpos.resize_relative_table(table, window, old_window=old, extra_tokens=3,
                                       method="cubic")
    with _generic_only(_numpy):
        ref = arrpos.resize_relative_table(table, window, old_window=old, extra_tokens=3,
                                           method="cubic")
    _same(got, ref)


torch = pytest.importorskip("torch")
_TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _host(t):
    """A NumPy copy of a torch tensor, bfloat16 as ml_dtypes' (the same bits)."""
    if t.dtype == torch.bfloat16:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@pytest.mark.parametrize("dtype", _TORCH_DTYPES)
@pytest.mark.parametrize("antialias", [False, True])
def test_torch_cpu_resample_equals_generic(dtype, antialias):
    """Torch CPU tensors reach the same kernel (bfloat16 as its bits): bit for bit the generic
    path on NumPy (the reference's arithmetic). The generic path on torch tensors sums the
    taps in torch's reduction order, which for 8 taps and more is not the sequential one: its
    float64 sums differ by an ulp there (a float64 table shrunk with antialias)."""
    import array_api_compat.torch as txp

    g = torch.Generator().manual_seed(6)
    table = (torch.randn(2, 1 + 7 * 9, 20, generator=g) * 2).to(dtype)
    grid = table[:, 1:].reshape(2, 7, 9, 20)
    taps = (_taps.host_taps(7, 11, "cubic", antialias, True, False), None)
    plan = _dispatch.plan("resample_grid", txp, (grid, table[:, :1]), taps=taps, dtype=dtype)
    assert plan.module.__name__.endswith("host.torch_cpu")
    front = plan.module
    for new in ((11, 9), (4, 16)):
        with _kernel_only():
            got = arrpos.resample(table, new, old_size=(7, 9), prefix_tokens=1,
                                  method="cubic", antialias=antialias)
        with _generic_only(front):
            ref = arrpos.resample(table, new, old_size=(7, 9), prefix_tokens=1,
                                  method="cubic", antialias=antialias)
        assert got.dtype == dtype and got.shape == ref.shape
        with _generic_only(_numpy):
            host = arrpos.resample(_host(table), new, old_size=(7, 9), prefix_tokens=1,
                                   method="cubic", antialias=antialias)
        _same(_host(got), host)
        tol = 4 * np.finfo(np.float64).eps * float(ref.double().abs().max())
        assert float((got.double() - ref.double()).abs().max()) <= (
            tol if dtype == torch.float64 else 0.0)


@pytest.mark.parametrize("method,mode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("new", [(23, 30), (5, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_equals_torch_interpolate(method, mode, antialias, align_corners, new, dtype):
    """torch's own ``interpolate`` on the same grid (timm's call: channels first), the
    independent reference: within torch's rounding (float32: it accumulates in float32, the
    kernel in float64 rounded once; 1e-6 of the values' scale, as test_vision_peers)."""
    g = torch.Generator().manual_seed(7)
    old = (12, 10)
    table = torch.randn(1 + old[0] * old[1], 32, generator=g, dtype=dtype)
    with _kernel_only():
        got = arrpos.resample(table, new, old_size=old, prefix_tokens=1, method=method,
                              antialias=antialias, align_corners=align_corners)
    img = table[1:].reshape(1, old[0], old[1], 32).permute(0, 3, 1, 2)
    ref = torch.nn.functional.interpolate(img, size=new, mode=mode, antialias=antialias,
                                          align_corners=align_corners)
    ref = torch.cat([table[:1], ref.permute(0, 2, 3, 1).reshape(-1, 32)]).numpy()
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=tol * max(1.0, abs(ref).max()))


def test_torch_autograd_keeps_generic_path():
    table = torch.randn(1 + 16, 3, dtype=torch.float64, requires_grad=True)
    out = arrpos.resample(table, (6, 6), prefix_tokens=1, method="cubic")
    assert out.requires_grad
    out.sum().backward()
    assert table.grad is not None and table.grad.shape == table.shape

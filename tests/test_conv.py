"""Convolutional encodings on every backend, against a direct loop and torch's conv/GELU."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos


def gelu_ref(x):
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in np.ravel(x)]).reshape(
        np.shape(x))


def conv1d_loop(x, w, b, axis, activation, residual):
    """Direct loop over the sequence axis (moved to -2), zero padding left (k-1)//2."""
    xs = np.moveaxis(x, axis, -2)
    length, kernel = xs.shape[-2], w.shape[0]
    left = (kernel - 1) // 2
    out = np.zeros_like(xs, dtype=np.float64)
    for t in range(length):
        for m in range(kernel):
            s = t + m - left
            if 0 <= s < length:
                out[..., t, :] += w[m] * xs[..., s, :]
    if b is not None:
        out += b
    if activation == "gelu":
        out = gelu_ref(out)
    elif activation == "tanh":
        out = np.tanh(out)
    if residual:
        out += xs
    return np.moveaxis(out, -2, axis)


def conv2d_loop(x, w, b, activation, residual):
    h, wd = x.shape[-3], x.shape[-2]
    kh, kw = w.shape[:2]
    out = np.zeros(x.shape)
    for i in range(h):
        for j in range(wd):
            for a in range(kh):
                for c in range(kw):
                    si, sj = i + a - (kh - 1) // 2, j + c - (kw - 1) // 2
                    if 0 <= si < h and 0 <= sj < wd:
                        out[..., i, j, :] += w[a, c] * x[..., si, sj, :]
    if b is not None:
        out += b
    if activation == "gelu":
        out = gelu_ref(out)
    elif activation == "tanh":
        out = np.tanh(out)
    return out + x if residual else out


def _tol(backend):
    return 1e-12 if backend.float64 else 2e-6


@pytest.mark.parametrize("kernel", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("activation", ["gelu", "tanh", None])
def test_conv1d_loop(backend, kernel, activation):
    rng = np.random.default_rng(kernel)
    x = rng.standard_normal((2, 9, 4))
    w = rng.standard_normal((kernel, 4))
    b = rng.standard_normal(4)
    got = backend.to_numpy(arrpos.conv_positional(backend.asarray(x), backend.asarray(w),
                                                  backend.asarray(b), activation=activation))
    np.testing.assert_allclose(got, conv1d_loop(x, w, b, -2, activation, True),
                               atol=_tol(backend) * 10, rtol=_tol(backend))


def test_conv1d_axis_and_no_bias(backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 3, 5))  # sequence on axis 0
    w = rng.standard_normal((3, 5))
    got = backend.to_numpy(arrpos.conv_positional(backend.asarray(x), backend.asarray(w),
                                                  axis=0, activation=None, residual=False))
    np.testing.assert_allclose(got, conv1d_loop(x, w, None, 0, None, False), atol=1e-5)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("kernel", [3, 4, 128])
def test_conv1d_equals_torch(kernel):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(8, 8, kernel, groups=8, padding="same")
    x = torch.randn(2, 150, 8)
    with torch.no_grad():
        ref = torch.nn.functional.gelu(conv(x.transpose(1, 2))).transpose(1, 2) + x
        w = conv.weight[:, 0, :].T.contiguous()
        got = arrpos.conv_positional(x, w, conv.bias)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kh,kw", [(3, 3), (1, 5), (2, 4)])
def test_conv2d_loop(backend, kh, kw):
    rng = np.random.default_rng(kh * 10 + kw)
    x = rng.standard_normal((2, 5, 6, 3))
    w = rng.standard_normal((kh, kw, 3))
    b = rng.standard_normal(3)
    got = backend.to_numpy(arrpos.conv_positional_2d(backend.asarray(x), backend.asarray(w),
                                                     backend.asarray(b)))
    np.testing.assert_allclose(got, conv2d_loop(x, w, b, None, True), atol=_tol(backend) * 10)


def test_conv2d_equals_torch_peg():
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(6, 6, 3, padding=1, groups=6)  # CPVT's PEG
    x = torch.randn(2, 7, 5, 6)  # (B, H, W, C)
    with torch.no_grad():
        ref = conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) + x
        got = arrpos.conv_positional_2d(x, conv.weight[:, 0].permute(1, 2, 0), conv.bias)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gelu_against_torch_and_erf(backend, dtype):
    """The erf-free exact GELU against mpmath: float64 within 1e-13, float32 (its shorter
    series included) within 8 of its ulps; float32 also against torch's."""
    if dtype == np.float64 and not backend.float64:
        pytest.skip("no float64 on this backend")
    x = np.concatenate([np.linspace(-10, 10, 2001), [-30.0, 0.0, 1e-8, 30.0]]).astype(dtype)
    w = np.ones((1, 1), dtype)
    got = backend.to_numpy(arrpos.conv_positional(backend.asarray(x.reshape(-1, 1)),
                                                  backend.asarray(w), residual=False))[:, 0]
    assert got.dtype == dtype
    import mpmath as mp

    # mpmath, not math.erfc: rounding x / sqrt(2) costs ~2 z^2 ulps of erfc in the far tail
    with mp.workdps(40):
        ref = np.array([float(mp.mpf(v) * mp.erfc(-mp.mpf(v) / mp.sqrt(2)) / 2)
                        for v in x.tolist()])
    if dtype == np.float64:
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-300)
    else:
        big = np.abs(ref) > 1e-30
        rel = np.abs(got[big] - ref[big]) / np.abs(ref[big])
        assert rel.max() < 8 * np.finfo(np.float32).eps
        torch = pytest.importorskip("torch")
        theirs = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, theirs, rtol=1e-6, atol=1e-6)


def test_dask_lazy():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.ones((6, 2)), chunks=3)
    out = arrpos.conv_positional(x, da.from_array(np.ones((3, 2))), activation=None)
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute()[:, 0], [3, 4, 4, 4, 4, 3])


def test_errors():
    x, w = np.zeros((5, 3)), np.zeros((3, 3))
    with pytest.raises(ValueError, match="weight"):
        arrpos.conv_positional(x, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="weight"):
        arrpos.conv_positional(x, np.zeros((0, 3)))
    with pytest.raises(ValueError, match="bias"):
        arrpos.conv_positional(x, w, np.zeros(2))
    with pytest.raises(ValueError, match="activation"):
        arrpos.conv_positional(x, w, activation="relu")
    with pytest.raises(TypeError, match="residual"):
        arrpos.conv_positional(x, w, residual=1)
    with pytest.raises(ValueError, match="axis"):
        arrpos.conv_positional(x, w, axis=-1)
    with pytest.raises(ValueError, match="axis"):
        arrpos.conv_positional(x, w, axis=2)
    with pytest.raises(TypeError, match="axis"):
        arrpos.conv_positional(x, w, axis=0.0)
    with pytest.raises(TypeError, match="x"):
        arrpos.conv_positional(np.zeros((5, 3), dtype=np.int64), w)
    with pytest.raises(TypeError, match="weight"):
        arrpos.conv_positional(x, [[1.0]])
    with pytest.raises(ValueError, match="x"):
        arrpos.conv_positional_2d(x, np.zeros((3, 3, 3)))
    with pytest.raises(ValueError, match="weight"):
        arrpos.conv_positional_2d(np.zeros((4, 4, 3)), np.zeros((3, 3)))

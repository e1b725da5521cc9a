"""Learned tables on every backend: init, lookup, resample (against the interpolation kernel
evaluated directly and against torch's interpolate), gradients on torch and JAX."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos


# ----------------------------------------------------------------- direct kernel evaluation

def _cubic(x, a=-0.75):
    x = abs(x)
    if x <= 1:
        return (a + 2) * x**3 - (a + 3) * x**2 + 1
    if x < 2:
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
    return 0.0


def resample_1d_direct(values, n_out, method):
    """Evaluate align_corners=False interpolation sample by sample (float64)."""
    n_in = values.shape[0]
    out = np.zeros((n_out,) + values.shape[1:])
    for i in range(n_out):
        src = (i + 0.5) * n_in / n_out - 0.5
        if method == "linear":
            src = max(src, 0.0)
            i0 = int(math.floor(src))
            lam = src - i0
            out[i] = (1 - lam) * values[min(i0, n_in - 1)] + lam * values[min(i0 + 1, n_in - 1)]
        else:
            i0 = int(math.floor(src))
            for tap in range(i0 - 1, i0 + 3):
                out[i] += _cubic(src - tap) * values[min(max(tap, 0), n_in - 1)]
    return out


def resample_2d_direct(grid, size, method):
    rows = np.stack([resample_1d_direct(grid[:, w], size[0], method)
                     for w in range(grid.shape[1])], axis=1)
    return np.stack([resample_1d_direct(rows[h], size[1], method) for h in range(size[0])])


def _tol(backend):
    return 1e-12 if backend.float64 else 2e-6


# ----------------------------------------------------------------- init

@pytest.mark.parametrize("method", ["normal", "trunc_normal"])
def test_init_same_seed_same_table(backend, method):
    a = backend.to_numpy(arrpos.learned_init(50, 8, method=method, seed=3, xp=backend.module))
    ref = arrpos.learned_init(50, 8, method=method, seed=3, dtype=np.float32)
    np.testing.assert_array_equal(a.astype(np.float32), ref)
    b = arrpos.learned_init(50, 8, method=method, seed=4)
    assert not np.array_equal(ref, b.astype(np.float32))


def test_init_statistics():
    t = arrpos.learned_init(4000, 64, std=0.5, seed=0, dtype=np.float64)
    assert abs(t.std() - 0.5) < 0.01 and abs(t.mean()) < 0.01
    tn = arrpos.learned_init(4000, 64, method="trunc_normal", std=0.5, seed=0,
                             dtype=np.float64)
    assert np.abs(tn).max() <= 1.0
    # a normal cut at 2 std has std 0.8796 of the uncut one
    assert abs(tn.std() - 0.5 * 0.8796) < 0.01


def test_init_other_methods(backend):
    z = backend.to_numpy(arrpos.learned_init(5, 4, method="zeros", xp=backend.module))
    assert z.shape == (5, 4) and not z.any()
    s = backend.to_numpy(arrpos.learned_init(5, 4, method="sinusoidal", xp=backend.module))
    p = np.arange(5)[:, None] / 10000 ** (np.arange(0, 4, 2) / 4)
    ref = np.stack([np.sin(p), np.cos(p)], -1).reshape(5, 4)
    np.testing.assert_allclose(s, ref, atol=1e-6)


# ----------------------------------------------------------------- lookup

def test_lookup(backend):
    table = np.random.default_rng(0).standard_normal((10, 3))
    pos = np.array([[0, 9, 4], [4, 4, 1]])
    got = backend.to_numpy(arrpos.lookup(backend.asarray(table), backend.asarray(pos)))
    assert got.shape == (2, 3, 3)
    np.testing.assert_allclose(got, table[pos].astype(got.dtype), rtol=0)


@pytest.mark.parametrize("bad", [[[10]], [[-1]]])
def test_lookup_out_of_range(backend, bad):
    table = backend.asarray(np.zeros((10, 3)))
    if backend.name == "dask":
        # documented: lazy positions are not read at the boundary, the result stays lazy
        import dask.array as da

        assert isinstance(arrpos.lookup(table, backend.asarray(np.array(bad))), da.Array)
        return
    with pytest.raises(ValueError, match="positions"):
        arrpos.lookup(table, backend.asarray(np.array(bad)))


# ----------------------------------------------------------------- resample

@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("n_in,n_out", [(5, 11), (11, 4), (7, 7), (1, 3)])
def test_resample_1d_direct(backend, method, n_in, n_out):
    t = np.random.default_rng(1).uniform(-1, 1, (n_in, 3))
    got = backend.to_numpy(arrpos.resample(backend.asarray(t), n_out, method=method))
    np.testing.assert_allclose(got, resample_1d_direct(t, n_out, method), atol=_tol(backend))


@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("old,new,prefix", [((4, 4), (7, 9), 1), ((6, 5), (3, 2), 0),
                                            ((3, 6), (6, 6), 2)])
def test_resample_2d_direct(backend, method, old, new, prefix):
    rng = np.random.default_rng(2)
    grid = rng.uniform(-1, 1, old + (4,))
    pre = rng.uniform(-1, 1, (prefix, 4))
    table = np.concatenate([pre, grid.reshape(-1, 4)])
    got = backend.to_numpy(arrpos.resample(backend.asarray(table), new, old_size=old,
                                           prefix_tokens=prefix, method=method))
    ref = resample_2d_direct(grid, new, method).reshape(-1, 4)
    assert got.shape == (prefix + new[0] * new[1], 4)
    np.testing.assert_allclose(got[:prefix], pre.astype(got.dtype), rtol=0)
    np.testing.assert_allclose(got[prefix:], ref, atol=_tol(backend))


@pytest.mark.parametrize("method,mode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((4, 4), (7, 9)), ((5, 3), (8, 11)),
                                     ((16, 16), (10, 10)), ((7, 9), (3, 4))])
def test_resample_equals_torch_interpolate(backend, method, mode, old, new):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    grid = rng.uniform(-1, 1, old + (6,)).astype(np.float32)
    img = torch.from_numpy(grid).permute(2, 0, 1)[None]
    ref = torch.nn.functional.interpolate(img, size=new, mode=mode, align_corners=False)
    ref = ref[0].permute(1, 2, 0).reshape(-1, 6).numpy()
    table = backend.asarray(np.concatenate([np.ones((1, 6), np.float32), grid.reshape(-1, 6)]))
    got = backend.to_numpy(arrpos.resample(table, new, old_size=old, prefix_tokens=1,
                                           method=method))
    assert got.dtype == np.float32
    # torch's weights are reproduced bit for bit; what remains is its float32 accumulation
    # (about 1e-6 on border values that overshoot 1 with bicubic), so 1e-6 absolute plus
    # 1e-6 relative
    np.testing.assert_allclose(got[1:], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n_in,n_out", [(10, 23), (23, 10)])
def test_resample_1d_equals_torch_linear(backend, n_in, n_out):
    torch = pytest.importorskip("torch")
    t = np.random.default_rng(4).uniform(-1, 1, (n_in, 5)).astype(np.float32)
    ref = torch.nn.functional.interpolate(torch.from_numpy(t.T)[None], size=n_out, mode="linear",
                                          align_corners=False)[0].T.numpy()
    got = backend.to_numpy(arrpos.resample(backend.asarray(t), n_out))
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)


def aa_weights_direct(n_in, n_out, method):
    """The antialiased filter in float64, from its definition (PIL's / torch's): support and
    argument scaled by the shrink factor, taps inside the input only, rows renormalised."""
    def filt(x):
        x = abs(x)
        if method == "linear":
            return max(0.0, 1.0 - x)
        a = -0.5  # Keys
        if x < 1:
            return ((a + 2) * x - (a + 3)) * x * x + 1
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a if x < 2 else 0.0

    scale = n_in / n_out
    stretch = max(scale, 1.0)
    support = (1.0 if method == "linear" else 2.0) * stretch
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        w = np.array([filt((x - center + 0.5) / stretch) for x in range(lo, hi)])
        m[i, lo:hi] = w / w.sum()
    return m


def _torch_aa(grid, new, mode, torch):
    img = torch.from_numpy(grid).permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(img, size=new, mode=mode, align_corners=False,
                                          antialias=True)
    return out[0].permute(1, 2, 0).reshape(-1, grid.shape[-1]).numpy()


@pytest.mark.parametrize("method,mode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((24, 24), (14, 14)), ((4, 4), (7, 9)),
                                     ((16, 16), (5, 5)), ((7, 9), (3, 13)), ((37, 5), (6, 2))])
def test_resample_antialias_equals_torch_interpolate(backend, method, mode, old, new):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    grid = rng.normal(size=old + (6,))
    pre = rng.normal(size=(1, 6))
    for dt in (np.float32, np.float64):
        if dt == np.float64 and not backend.float64:
            continue
        table = backend.asarray(np.concatenate([pre, grid.reshape(-1, 6)]).astype(dt))
        got = backend.to_numpy(arrpos.resample(table, new, old_size=old, prefix_tokens=1,
                                               method=method, antialias=True))
        assert got.dtype == dt
        np.testing.assert_array_equal(got[:1], pre.astype(dt))
        ref = _torch_aa(grid.astype(dt), new, mode, torch)
        if dt == np.float64:
            np.testing.assert_allclose(got[1:], ref, rtol=0, atol=1e-10)
            direct = np.einsum("ai,bj,ijc->abc", aa_weights_direct(old[0], new[0], method),
                               aa_weights_direct(old[1], new[1], method), grid)
            np.testing.assert_allclose(got[1:], direct.reshape(-1, 6), rtol=0, atol=1e-10)
        else:
            # torch's float32 weights are reproduced bit for bit (its CPU build fuses the
            # cubic's multiply-adds); what remains is its float32 accumulation
            np.testing.assert_allclose(got[1:], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method,mode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("n_in,n_out", [(10, 23), (23, 10), (50, 7), (3, 3)])
def test_resample_1d_antialias_is_the_2d_filter_on_one_row(backend, method, mode, n_in, n_out):
    """torch has no antialiased ``linear``; a 1-D table is a (1, n) grid."""
    torch = pytest.importorskip("torch")
    t = np.random.default_rng(6).normal(size=(n_in, 5)).astype(np.float32)
    ref = _torch_aa(t[None], (1, n_out), mode, torch)
    got = backend.to_numpy(arrpos.resample(backend.asarray(t), n_out, method=method,
                                           antialias=True))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_timm_resample_abs_pos_embed_default():
    """timm's ``resample_abs_pos_embed`` (bicubic, antialias=True, in float32), written from its
    source; antialias matters both ways, as the issue measured."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    for old, new in (((14, 14), (24, 24)), ((24, 24), (14, 14))):
        posemb = rng.normal(size=(1, 1 + old[0] * old[1], 8)).astype(np.float32)
        prefix, body = posemb[:, :1], torch.from_numpy(posemb[:, 1:])
        img = body.float().reshape(1, old[0], old[1], -1).permute(0, 3, 1, 2)
        img = torch.nn.functional.interpolate(img, size=new, mode="bicubic", antialias=True)
        ref = np.concatenate([prefix, img.permute(0, 2, 3, 1).reshape(1, -1, 8).numpy()], 1)
        got = arrpos.resample(posemb, new, prefix_tokens=1, method="cubic", antialias=True)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
        plain = arrpos.resample(posemb, new, prefix_tokens=1, method="cubic")
        assert np.abs(plain - ref).max() > 0.05


def test_resample_antialias_type_error():
    with pytest.raises(TypeError, match="antialias"):
        arrpos.resample(np.zeros((4, 2)), 2, antialias=1)

def test_resample_default_square_and_batch():
    t = np.random.default_rng(5).standard_normal((2, 1 + 9, 3))
    out = arrpos.resample(t, (5, 5), prefix_tokens=1)
    assert out.shape == (2, 26, 3)
    np.testing.assert_allclose(out[1], arrpos.resample(t[1], (5, 5), old_size=(3, 3),
                                                       prefix_tokens=1))


# ----------------------------------------------------------------- gradients

def test_gradients_torch():
    torch = pytest.importorskip("torch")
    table = torch.randn(1 + 16, 3, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[0, 3], [3, 16]])
    arrpos.lookup(table, pos).sum().backward()
    expect = np.zeros(17)
    np.add.at(expect, [0, 3, 3, 16], 1)
    np.testing.assert_allclose(table.grad.numpy()[:, 0], expect)
    table.grad = None
    w = torch.randn(1 + 36, 3, dtype=torch.float64)
    (arrpos.resample(table, (6, 6), prefix_tokens=1, method="cubic") * w).sum().backward()
    # the resampling is linear: its gradient is the transposed interpolation matrix applied to w
    eye = np.eye(16)
    cols = [resample_2d_direct(eye[:, i].reshape(4, 4, 1), (6, 6), "cubic").reshape(-1)
            for i in range(16)]
    mat = np.stack(cols, axis=1)  # (36, 16)
    np.testing.assert_allclose(table.grad.numpy()[1:], mat.T @ w.numpy()[1:], atol=1e-12)
    np.testing.assert_allclose(table.grad.numpy()[0], w.numpy()[0])


def test_gradients_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    table = jnp.asarray(np.random.default_rng(6).standard_normal((8, 2)), dtype=jnp.float32)
    g = jax.grad(lambda t: arrpos.lookup(t, jnp.asarray([1, 1, 5])).sum())(table)
    expect = np.zeros(8)
    expect[[1, 5]] = [2, 1]
    np.testing.assert_allclose(np.asarray(g)[:, 1], expect)
    g2 = jax.grad(lambda t: arrpos.resample(t, 16).sum())(table)
    # each output row's weights sum to 1, so the column sums of the matrix are the gradient
    mat = np.stack([resample_1d_direct(np.eye(8)[:, i], 16, "linear") for i in range(8)], 1)
    np.testing.assert_allclose(np.asarray(g2)[:, 0], mat.sum(0), rtol=1e-6)


# ----------------------------------------------------------------- errors

def test_errors():
    with pytest.raises(ValueError, match="method"):
        arrpos.learned_init(4, 4, method="uniform")
    with pytest.raises(ValueError, match="num_positions"):
        arrpos.learned_init(0, 4)
    with pytest.raises(TypeError, match="dim"):
        arrpos.learned_init(4, 4.5)
    with pytest.raises(ValueError, match="std"):
        arrpos.learned_init(4, 4, std=-1.0)
    with pytest.raises(ValueError, match="seed"):
        arrpos.learned_init(4, 4, seed=-3)
    with pytest.raises(TypeError, match="seed"):
        arrpos.learned_init(4, 4, seed="a")
    with pytest.raises(ValueError, match="dim"):
        arrpos.learned_init(4, 3, method="sinusoidal")
    with pytest.raises(TypeError, match="dtype"):
        arrpos.learned_init(4, 4, dtype=np.int64)
    t = np.zeros((10, 3))
    with pytest.raises(TypeError, match="positions"):
        arrpos.lookup(t, np.array([1.0]))
    with pytest.raises(TypeError, match="positions"):
        arrpos.lookup(t, [1, 2])
    with pytest.raises(TypeError, match="table"):
        arrpos.lookup(np.zeros((10, 3), dtype=np.int64), np.array([1]))
    with pytest.raises(ValueError, match="table"):
        arrpos.lookup(np.zeros(10), np.array([1]))
    with pytest.raises(ValueError, match="old_size"):
        arrpos.resample(t, (4, 4))  # 10 rows are not a square
    with pytest.raises(ValueError, match="old_size"):
        arrpos.resample(t, (4, 4), old_size=(3, 4))
    with pytest.raises(ValueError, match="prefix_tokens"):
        arrpos.resample(t, 4, prefix_tokens=11)
    with pytest.raises(ValueError, match="method"):
        arrpos.resample(t, 4, method="nearest")
    with pytest.raises(ValueError, match="size"):
        arrpos.resample(t, 0)
    with pytest.raises(TypeError, match="size"):
        arrpos.resample(t, 4.0)
    with pytest.raises(ValueError, match="size"):
        arrpos.resample(t, (2, 2, 2))
    with pytest.raises(ValueError, match="same number of axes"):
        arrpos.resample(np.zeros((9, 3)), 4, old_size=(3, 3))

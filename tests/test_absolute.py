"""The fixed absolute family on every backend, against independent references."""
from __future__ import annotations

import numpy as np
import pytest

import arrpos
from reference import (
    diffusers_timestep,
    mae_2d_sincos,
    sinusoid_exact,
    sinusoid_loop,
)

LAYOUTS = ["interleaved", "split"]
FAR = [0, 1, 2, 63, 64, 65, 1000, 99_991, 1_000_000, 2**24 - 3, 2**24 - 1, 2**24]


def _tol(a):
    """The accuracy contract for an output of a's dtype."""
    return 1e-12 if a.dtype == np.float64 else 2e-7


def _float_dtype(backend, name):
    return getattr(backend.xp, name)


def test_seed_example(backend):
    pe = backend.to_numpy(arrpos.sinusoidal(50, 16, base=100.0, xp=backend.module))
    assert pe.shape == (50, 16)
    np.testing.assert_allclose(pe[1, :6], [0.84, 0.54, 0.53, 0.85, 0.31, 0.95], atol=5e-3)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_paper_loop(backend, layout):
    ref = sinusoid_loop(40, 24)
    if layout == "split":
        ref = np.concatenate([ref[:, 0::2], ref[:, 1::2]], axis=1)
    got = backend.to_numpy(arrpos.sinusoidal(40, 24, layout=layout, xp=backend.module))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(got))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_accuracy_contract_far_positions(backend, layout):
    """float32 within 2e-7 and float64 within 1e-12 of the exact table up to 2**24."""
    ref = sinusoid_exact(np.array(FAR), 64, layout=layout)
    pos = backend.asarray(np.array(FAR))
    out32 = backend.to_numpy(arrpos.sinusoidal(pos, 64, layout=layout,
                                               dtype=_float_dtype(backend, "float32")))
    assert out32.dtype == np.float32
    assert np.abs(out32.astype(np.float64) - ref).max() <= 2e-7
    if backend.float64:
        out64 = backend.to_numpy(arrpos.sinusoidal(pos, 64, layout=layout,
                                                   dtype=_float_dtype(backend, "float64")))
        assert np.abs(out64 - ref).max() <= 1e-12


def test_real_and_negative_positions(backend):
    p = np.array([[-3.5, 0.25], [7.125, 1e6 + 0.5]])
    ref = sinusoid_exact(p, 16)
    pos = backend.asarray(p) if backend.float64 else backend.asarray(p.astype(np.float32))
    out = backend.to_numpy(arrpos.sinusoidal(pos, 16))
    assert out.shape == (2, 2, 16)
    tol = _tol(out)
    exact_in = sinusoid_exact(backend.to_numpy(pos).astype(np.float64), 16)
    np.testing.assert_allclose(out, exact_in, rtol=0, atol=tol)
    np.testing.assert_allclose(out, ref, rtol=0, atol=tol if backend.float64 else 0.1)


def test_dtype_rules(backend):
    xp = backend.xp
    out = arrpos.sinusoidal(backend.asarray(np.arange(4)), 8)
    info = xp.__array_namespace_info__()
    assert out.dtype == info.default_dtypes()["real floating"]
    out = arrpos.sinusoidal(backend.asarray(np.arange(4, dtype=np.float32)), 8)
    assert out.dtype == xp.float32


def test_result_stays_in_namespace(backend):
    pos = backend.asarray(np.arange(5))
    out = arrpos.sinusoidal(pos, 8)
    import array_api_compat

    assert array_api_compat.array_namespace(out) is array_api_compat.array_namespace(pos)
    assert array_api_compat.device(out) == array_api_compat.device(pos)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sinusoidal_nd_equals_mae(backend, layout):
    coords = arrpos.grid_coords((3, 5), xp=backend.module)
    emb = arrpos.sinusoidal_nd(coords, 32, layout=layout)
    assert tuple(emb.shape) == (3, 5, 32)
    got = backend.to_numpy(emb).reshape(15, 32)
    if layout == "split":
        np.testing.assert_allclose(got, mae_2d_sincos(32, 3, 5), rtol=0, atol=_tol(got))
    else:  # chunk k is the 1-d interleaved table of coordinate k
        xs = sinusoid_exact(np.tile(np.arange(5), 3), 16)
        ys = sinusoid_exact(np.repeat(np.arange(3), 5), 16)
        np.testing.assert_allclose(got, np.concatenate([xs, ys], 1), atol=2e-7)


def test_grid_coords(backend):
    g = backend.to_numpy(arrpos.grid_coords((2, 3, 4), scale=0.5, xp=backend.module))
    assert g.shape == (2, 3, 4, 3)
    i, j, k = 1, 2, 3
    assert g[i, j, k].tolist() == [k * 0.5, j * 0.5, i * 0.5]


@pytest.mark.parametrize(
    "dim,flip,shift,scale",
    [(8, False, 1.0, 1.0), (320, True, 0.0, 1.0), (7, False, 1.0, 1.0), (33, True, 0.0, 2.0),
     (256, False, 1.0, 1000.0)],
)
def test_timestep_embedding_diffusers(backend, dim, flip, shift, scale):
    t = np.array([0, 1, 10, 250, 999])
    ref = diffusers_timestep(t, dim, flip=flip, shift=shift, scale=scale)
    out = arrpos.timestep_embedding(backend.asarray(t), dim, flip_sin_to_cos=flip,
                                    downscale_freq_shift=shift, scale=scale)
    got = backend.to_numpy(out)
    assert got.shape == (5, dim)
    if dim % 2:
        assert np.all(got[:, -1] == 0)
    # the float64 transcription itself rounds exp() once: ~1e-16 * angle
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(got) * max(1.0, scale))


def test_timestep_embedding_float_timesteps_keep_dtype(backend):
    t = backend.asarray(np.array([0.5, 3.0], dtype=np.float32))
    out = arrpos.timestep_embedding(t, 6)
    assert out.dtype == backend.xp.float32


@pytest.mark.parametrize("layout", LAYOUTS)
def test_decode_roundtrip(backend, layout):
    p = np.array([0.0, 1.0, 17.25, 999.5, 4321.0, 20000.0])
    pos = backend.asarray(p)
    enc = arrpos.sinusoidal(pos, 128, layout=layout)
    got = backend.to_numpy(arrpos.decode_sinusoidal(enc, layout=layout))
    np.testing.assert_allclose(got, p, rtol=0, atol=1e-3)


def test_decode_rejects_non_encodings(backend):
    rng = np.random.default_rng(0)
    junk = backend.asarray(rng.normal(size=(3, 32)))
    if backend.name == "dask":  # documented: lazy arrays are not read, the result stays lazy
        from arrpos._lib import is_lazy

        assert is_lazy(arrpos.decode_sinusoidal(junk))
        return
    with pytest.raises(ValueError, match="encoding"):
        arrpos.decode_sinusoidal(junk)
    # right radius but mixed-up frequencies: a shuffled real encoding
    enc = arrpos.sinusoidal(np.arange(5, 10), 32).reshape(5, 16, 2)
    enc = enc[:, rng.permutation(16)].reshape(5, 32)
    with pytest.raises(ValueError, match="disagree"):
        arrpos.decode_sinusoidal(backend.asarray(enc))


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [7, 0, -4])
def test_bad_dim_values(dim):
    with pytest.raises(ValueError, match="dim"):
        arrpos.sinusoidal(10, dim, layout="split")  # odd dims: "interleaved" only


@pytest.mark.parametrize("dim", [8.0, "8", None, True])
def test_bad_dim_types(dim):
    with pytest.raises(TypeError, match="dim"):
        arrpos.sinusoidal(10, dim)


def test_bad_layout():
    with pytest.raises(ValueError, match="layout"):
        arrpos.sinusoidal(10, 8, layout="half")
    with pytest.raises(ValueError, match="layout"):
        arrpos.sinusoidal_nd(np.zeros((2, 2)), 8, layout="x")


@pytest.mark.parametrize("bad", ["abc", 3.5, None, True, np.array(["a"]), np.array([True]),
                                 np.array([1 + 2j])])
def test_bad_positions(bad):
    with pytest.raises(TypeError, match="positions"):
        arrpos.sinusoidal(bad, 8)


def test_negative_length_and_non_finite():
    with pytest.raises(ValueError, match="positions"):
        arrpos.sinusoidal(-1, 8)
    with pytest.raises(ValueError, match="positions"):
        arrpos.sinusoidal(np.array([0.0, np.nan]), 8)
    with pytest.raises(ValueError, match="positions"):
        arrpos.sinusoidal(np.array([2**60]), 8)


def test_bad_base_and_dtype():
    with pytest.raises(ValueError, match="base"):
        arrpos.sinusoidal(4, 8, base=0.0)
    with pytest.raises(TypeError, match="base"):
        arrpos.sinusoidal(4, 8, base="big")
    with pytest.raises(TypeError, match="dtype"):
        arrpos.sinusoidal(4, 8, dtype=np.int32)


def test_mixed_namespaces():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="xp"):
        arrpos.sinusoidal(torch.arange(4), 8, xp=np)


def test_sinusoidal_nd_errors():
    with pytest.raises(ValueError, match="dim"):
        arrpos.sinusoidal_nd(np.zeros((4, 3)), 8)  # 8 not divisible by 6
    with pytest.raises(TypeError, match="coords"):
        arrpos.sinusoidal_nd([[0, 1]], 8)
    with pytest.raises(ValueError, match="coords"):
        arrpos.sinusoidal_nd(np.float64(1.0), 8)


def test_timestep_errors():
    with pytest.raises(ValueError, match="downscale_freq_shift"):
        arrpos.timestep_embedding(np.arange(3), 2, downscale_freq_shift=1.0)
    with pytest.raises(TypeError, match="timesteps"):
        arrpos.timestep_embedding([1, 2], 8)
    with pytest.raises(TypeError, match="flip_sin_to_cos"):
        arrpos.timestep_embedding(np.arange(3), 8, flip_sin_to_cos=1)
    with pytest.raises(ValueError, match="dim"):
        arrpos.timestep_embedding(np.arange(3), 0)


def test_grid_coords_errors():
    with pytest.raises(ValueError, match="shape"):
        arrpos.grid_coords(())
    with pytest.raises(ValueError, match=r"shape\[1\]"):
        arrpos.grid_coords((2, -1))
    with pytest.raises(TypeError, match="shape"):
        arrpos.grid_coords(None)


def test_decode_errors():
    with pytest.raises(ValueError, match="dim"):
        arrpos.decode_sinusoidal(np.zeros((2, 5)))
    with pytest.raises(TypeError, match="encoding"):
        arrpos.decode_sinusoidal(np.zeros((2, 4), dtype=np.int64))


# ------------------------------------------------------ odd dim (keras-hub), timm grouping, grids

def keras_hub_sine(positions, hidden_size, max_wavelength=10000.0, dtype=np.float64):
    """keras-hub ``SinePositionEncoding.call``, written from its source in ``dtype``."""
    positions = np.asarray(positions, dtype=dtype)
    min_freq = dtype(1 / max_wavelength)
    j = np.arange(hidden_size)
    timescales = np.power(min_freq, (2 * (j // 2)).astype(dtype) / dtype(hidden_size))
    angles = positions[:, None] * timescales[None, :]
    cos_mask = (j % 2).astype(dtype)
    return np.sin(angles) * (1 - cos_mask) + np.cos(angles) * cos_mask


@pytest.mark.parametrize("dim", [1, 3, 5, 17, 63])
def test_odd_dim_matches_keras_hub(backend, dim):
    pos = np.array([0, 1, 2, 7, 100, 999, 4096])
    ref = keras_hub_sine(pos, dim)
    got = backend.to_numpy(arrpos.sinusoidal(backend.asarray(pos), dim, base=10000.0))
    assert got.shape == (len(pos), dim)
    if got.dtype == np.float64:
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)
    # keras' own float32 layer: its float32 timescales and angles are off by ~p * 6e-8 rad
    ref32 = keras_hub_sine(pos, dim, dtype=np.float32).astype(np.float64)
    got32 = backend.to_numpy(arrpos.sinusoidal(backend.asarray(pos), dim,
                                               dtype=backend.xp.float32)).astype(np.float64)
    assert np.abs(got32 - ref).max() <= 2e-7  # ours: the exact values, rounded once
    assert np.abs(got32 - ref32).max() <= 2e-7 + 1.2e-7 * pos.max()


def test_odd_dim_is_the_even_table_without_its_last_cosine(backend):
    pos = backend.asarray(np.array([[0.5, 3.0], [1e5, -2.0]]))
    for dim in (3, 9):
        odd = backend.to_numpy(arrpos.sinusoidal(pos, dim))
        ref = sinusoid_exact(backend.to_numpy(pos).astype(np.float64), dim + 1)[..., :dim]
        # the even table of width dim + 1 has the wrong exponents 2i/(dim+1): build them exactly
        i = np.arange((dim + 1) // 2)
        w = 10000.0 ** (-2.0 * i / dim)
        ang = backend.to_numpy(pos).astype(np.float64)[..., None] * w
        ref = np.stack([np.sin(ang), np.cos(ang)], axis=-1).reshape(ang.shape[:-1] + (-1,))
        np.testing.assert_allclose(odd, ref[..., :dim], rtol=0, atol=_tol(odd))
    with pytest.raises(ValueError, match="split"):
        arrpos.sinusoidal(pos, 9, layout="split")


def timm_sincos2d(feat_shape, dim, temperature=10000.0, reverse_coord=False,
                  interleave_sin_cos=False, dtype=np.float64):
    """timm's ``build_sincos2d_pos_embed``, written from its source (numpy, in ``dtype``)."""
    pos_dim = dim // 4
    exp = np.arange(pos_dim).astype(dtype) / dtype(pos_dim)
    bands = dtype(1.0) / np.power(dtype(temperature), exp)
    if reverse_coord:
        feat_shape = feat_shape[::-1]
    grid = np.stack(np.meshgrid(*[np.arange(s).astype(dtype) for s in feat_shape],
                                indexing="ij")).reshape(2, -1).T
    pos2 = grid[:, :, None] * bands[None, None, :]
    stack_dim = 2 if interleave_sin_cos else 1
    return np.stack([np.sin(pos2), np.cos(pos2)], axis=stack_dim).reshape(grid.shape[0], -1)


@pytest.mark.parametrize("shape", [(4, 6), (7, 3), (14, 14)])
@pytest.mark.parametrize("reverse_coord", [False, True])
def test_sincos_group_matches_timm(backend, shape, reverse_coord):
    dim = 32
    ref = timm_sincos2d(list(shape), dim, reverse_coord=reverse_coord)
    # timm stacks its grid in the order of its (possibly reversed) feat_shape, first axis
    # first; grid_coords puts the last axis first, so swap the coordinates back
    coords = arrpos.grid_coords(shape[::-1] if reverse_coord else shape, xp=backend.module)
    coords = backend.xp.stack([coords[..., 1], coords[..., 0]], axis=-1)
    got = arrpos.sinusoidal_nd(coords, dim, group="sincos")
    got = backend.to_numpy(backend.xp.reshape(got, (shape[0] * shape[1], dim)))
    if got.dtype == np.float64:
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)
    else:
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-7)
    # timm's own float32 arithmetic: angles off by up to ~p * 1.2e-7 rad at coordinate p
    ref32 = timm_sincos2d(list(shape), dim, reverse_coord=reverse_coord, dtype=np.float32)
    assert np.abs(got - ref32).max() <= 2e-7 + 1.2e-7 * max(shape)


def test_timm_interleave_sin_cos_is_axis_grouping(backend):
    ref = timm_sincos2d([5, 3], 16, interleave_sin_cos=True)
    coords = arrpos.grid_coords((5, 3), xp=backend.module)
    coords = backend.xp.stack([coords[..., 1], coords[..., 0]], axis=-1)
    got = backend.to_numpy(arrpos.sinusoidal_nd(coords, 16, group="axis"))
    tol = 1e-10 if got.dtype == np.float64 else 2e-7
    np.testing.assert_allclose(got.reshape(15, 16), ref, rtol=0, atol=tol)


def test_sincos_group_three_axes(backend):
    """API.md's definition for n = 3: [sin a, sin b, sin c, cos a, cos b, cos c]."""
    rng = np.random.default_rng(4)
    c = backend.asarray(rng.uniform(-50, 50, size=(2, 5, 3)))
    dim, q = 36, 6
    got = backend.to_numpy(arrpos.sinusoidal_nd(c, dim, base=100.0, group="sincos"))
    c = backend.to_numpy(c).astype(np.float64)  # float32 where the backend has no float64
    w = 100.0 ** (-np.arange(q) / q)
    ang = c[..., :, None] * w  # (..., axis, frequency)
    ref = np.concatenate([np.sin(ang).reshape(2, 5, -1), np.cos(ang).reshape(2, 5, -1)], -1)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10 if got.dtype == np.float64 else 2e-7)
    with pytest.raises(ValueError, match="group"):
        arrpos.sinusoidal_nd(backend.asarray(c), dim, group="sin")


@pytest.mark.parametrize("n", [1, 2, 5, 16, 37])
def test_grid_modes_match_linspace_and_dinov3(backend, n):
    torch = pytest.importorskip("torch")
    lin = arrpos.grid_coords((n, 3), mode="linspace", dtype=backend.xp.float32,
                             xp=backend.module)
    cen = arrpos.grid_coords((2, n), mode="center", scale=0.5, dtype=backend.xp.float32,
                             xp=backend.module)
    lin, cen = backend.to_numpy(lin), backend.to_numpy(cen)
    assert lin.shape == (n, 3, 2) and cen.shape == (2, n, 2)
    exact_lin = np.linspace(-1.0, 1.0, n)
    # float32: the correctly rounded value; torch.linspace's own float32 within one ulp of it
    np.testing.assert_array_equal(lin[:, 0, 1], exact_lin.astype(np.float32))
    tl = torch.linspace(-1.0, 1.0, n, dtype=torch.float32).numpy()
    np.testing.assert_allclose(lin[:, 0, 1], tl, rtol=0, atol=1.2e-7)
    # DINOv3 "separate": coords = arange(0.5, n) / n, then 2 * coords - 1
    dino = 2.0 * (np.arange(0.5, n) / n) - 1.0
    np.testing.assert_array_equal(cen[1, :, 0], (0.5 * dino).astype(np.float32))
    dino32 = 2 * (torch.arange(0.5, n, dtype=torch.float32) / n) - 1
    np.testing.assert_allclose(cen[0, :, 0], 0.5 * dino32.numpy(), rtol=0, atol=1.2e-7)
    if backend.float64:
        lin64 = backend.to_numpy(arrpos.grid_coords((n,), mode="linspace", xp=backend.module,
                                                    dtype=backend.xp.float64))
        tl64 = torch.linspace(-1.0, 1.0, n, dtype=torch.float64).numpy()
        np.testing.assert_allclose(lin64[:, 0], tl64, rtol=0, atol=1e-15)
        cen64 = backend.to_numpy(arrpos.grid_coords((n,), mode="center", xp=backend.module,
                                                    dtype=backend.xp.float64))
        np.testing.assert_allclose(cen64[:, 0], dino, rtol=0, atol=1e-15)


def test_grid_index_mode_and_errors(backend):
    g = backend.to_numpy(arrpos.grid_coords((3, 2, 4), mode="index", scale=0.25,
                                            xp=backend.module))
    i0, i1, i2 = np.meshgrid(np.arange(3), np.arange(2), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(g, 0.25 * np.stack([i2, i1, i0], axis=-1))
    with pytest.raises(ValueError, match="mode"):
        arrpos.grid_coords((2, 2), mode="pixel", xp=backend.module)

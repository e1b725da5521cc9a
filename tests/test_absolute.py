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
        arrpos.sinusoidal(10, dim)


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

"""RoPE on every backend: scalings against the published formulas, the defining properties,
accuracy at far positions, layouts, partial rotary, multimodal axes, in-place, gradients, errors.

transformers-as-reference tests live in test_rope_hf.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos
from arrpos._backends import _xp
from conftest import get_backend
from reference import (
    rope_default_loop,
    rope_dynamic_loop,
    rope_linear_loop,
    rope_llama3_loop,
    rope_longrope_loop,
    rope_proportional_loop,
    rope_tables_exact,
    rope_yarn_loop,
    rotate_every_two_np,
    rotate_half_np,
)

LAYOUTS = ["half", "interleaved"]
FAR = [0, 1, 2, 63, 1000, 99_991, 1_000_000, 2**24 - 3, 2**24 - 1, 2**24]
SHORT = [1.0 + 0.05 * i for i in range(32)]
LONG = [1.0 + 0.9 * i for i in range(32)]


def _f64(backend):
    """The most precise float dtype of the backend (float64 unless JAX without x64)."""
    return backend.xp.float64 if backend.float64 else backend.xp.float32


def _tol(backend):
    return 2e-15 if backend.float64 else 2e-7


def _rng(seed=0):
    return np.random.default_rng(seed)


# --- frequencies: every scaling against the formula written out in reference.py --------------

SCALING_CASES = [
    ("default", None, lambda: (rope_default_loop(64, 10000.0), 1.0), None),
    ("linear", arrpos.LinearScaling(4.0), lambda: rope_linear_loop(64, 10000.0, 4.0), None),
    ("dynamic-none", arrpos.DynamicNTKScaling(2.0, 2048),
     lambda: rope_dynamic_loop(64, 10000.0, 2.0, 2048), None),
    ("dynamic-below", arrpos.DynamicNTKScaling(2.0, 2048),
     lambda: rope_dynamic_loop(64, 10000.0, 2.0, 2048, 1000), 1000),
    ("dynamic-at", arrpos.DynamicNTKScaling(2.0, 2048),
     lambda: rope_dynamic_loop(64, 10000.0, 2.0, 2048, 2048), 2048),
    ("dynamic-above", arrpos.DynamicNTKScaling(2.0, 2048),
     lambda: rope_dynamic_loop(64, 10000.0, 2.0, 2048, 5000), 5000),
    ("yarn", arrpos.YarnScaling(4.0, 4096), lambda: rope_yarn_loop(64, 10000.0, 4.0, 4096), None),
    ("yarn-deepseek", arrpos.YarnScaling(40.0, 4096, mscale=1.0, mscale_all_dim=0.707,
                                         beta_fast=32, beta_slow=1),
     lambda: rope_yarn_loop(64, 10000.0, 40.0, 4096, mscale=1.0, mscale_all_dim=0.707), None),
    ("yarn-notrunc", arrpos.YarnScaling(8.0, 2048, truncate=False, beta_fast=16.0,
                                        beta_slow=2.0, attention_factor=1.3),
     lambda: rope_yarn_loop(64, 10000.0, 8.0, 2048, beta_fast=16.0, beta_slow=2.0,
                            attention_factor=1.3, truncate=False), None),
    ("longrope-none", arrpos.LongRopeScaling(SHORT, LONG, 4096, max_positions=131072),
     lambda: rope_longrope_loop(64, 10000.0, SHORT, LONG, 4096, max_positions=131072), None),
    ("longrope-at", arrpos.LongRopeScaling(SHORT, LONG, 4096, max_positions=131072),
     lambda: rope_longrope_loop(64, 10000.0, SHORT, LONG, 4096, max_positions=131072,
                                seq_len=4096), 4096),
    ("longrope-above", arrpos.LongRopeScaling(SHORT, LONG, 4096, factor=8.0),
     lambda: rope_longrope_loop(64, 10000.0, SHORT, LONG, 4096, factor=8.0, seq_len=4097), 4097),
    ("llama3", arrpos.Llama3Scaling(8.0, 1.0, 4.0, 8192),
     lambda: rope_llama3_loop(64, 500000.0, 8.0, 1.0, 4.0, 8192), None),
    ("proportional", arrpos.ProportionalScaling(0.25, factor=2.0),
     lambda: rope_proportional_loop(64, 10000.0, 0.25, 2.0), None),
]


@pytest.mark.parametrize("case", SCALING_CASES, ids=[c[0] for c in SCALING_CASES])
def test_frequencies_match_published_formulas(backend, case):
    name, scaling, ref, seq_len = case
    base = 500000.0 if name == "llama3" else 10000.0
    want, want_att = ref()
    inv, att = arrpos.rope_frequencies(64, base=base, scaling=scaling, seq_len=seq_len,
                                       dtype=_f64(backend), xp=backend.module)
    got = backend.to_numpy(inv)
    assert got.shape == (32,)
    np.testing.assert_allclose(got, want, rtol=4 * _tol(backend), atol=0)
    assert isinstance(att, float)
    assert att == pytest.approx(want_att, rel=1e-15)


def test_frequency_defaults(backend):
    inv, att = arrpos.rope_frequencies(16, xp=backend.module)
    info = backend.xp.__array_namespace_info__()
    assert inv.dtype == info.default_dtypes()["real floating"]
    assert att == 1.0
    np.testing.assert_allclose(backend.to_numpy(inv), rope_default_loop(16, 10000.0),
                               rtol=2e-7)


def test_scalings_change_what_they_should():
    """Sanity of the formulas' shapes: interpolation slows low frequencies, keeps the highest."""
    base_inv = rope_default_loop(128, 500000.0)
    inv, _ = arrpos.rope_frequencies(128, base=500000.0, scaling=arrpos.Llama3Scaling())
    assert inv[0] == base_inv[0]
    assert inv[-1] == pytest.approx(base_inv[-1] / 8.0, rel=1e-15)
    y, att = arrpos.rope_frequencies(128, scaling=arrpos.YarnScaling(16.0, 4096))
    assert y[0] == pytest.approx(1.0) and y[-1] == pytest.approx(rope_default_loop(128, 1e4)[-1]
                                                                 / 16.0)
    assert att == pytest.approx(0.1 * math.log(16.0) + 1.0)


def test_longrope_switch_is_strict():
    s = arrpos.LongRopeScaling([1.0, 1.0], [2.0, 4.0], 100)
    at, _ = arrpos.rope_frequencies(4, scaling=s, seq_len=100)
    above, _ = arrpos.rope_frequencies(4, scaling=s, seq_len=101)
    np.testing.assert_array_equal(at, [1.0, 0.01])
    np.testing.assert_allclose(above, [0.5, 0.0025], rtol=1e-15)


def test_scaling_objects_are_values():
    a, b = arrpos.YarnScaling(4, 4096), arrpos.YarnScaling(4.0, 4096, beta_fast=32)
    assert a == b and hash(a) == hash(b)
    assert a != arrpos.YarnScaling(4.0, 4096, truncate=False)
    assert repr(arrpos.LinearScaling(2)) == "LinearScaling(factor=2.0)"
    assert "short_factor=(1.0, 2.0)" in repr(arrpos.LongRopeScaling([1, 2], [3, 4], 10))
    with pytest.raises(AttributeError):
        a.factor = 3.0
    with pytest.raises(TypeError):  # keyword-only after the required arguments
        arrpos.YarnScaling(4.0, 4096, 16.0)
    assert arrpos.Llama3Scaling() == arrpos.Llama3Scaling(8.0, 1.0, 4.0, 8192)


@pytest.mark.parametrize(
    "make, arg",
    [
        (lambda: arrpos.LinearScaling(0.5), "factor"),
        (lambda: arrpos.DynamicNTKScaling(0.9, 100), "factor"),
        (lambda: arrpos.DynamicNTKScaling(2.0, 0), "max_positions"),
        (lambda: arrpos.YarnScaling(0.5, 4096), "factor"),
        (lambda: arrpos.YarnScaling(4.0, 4096, beta_fast=1.0, beta_slow=2.0), "beta_fast"),
        (lambda: arrpos.YarnScaling(4.0, 4096, attention_factor=-1.0), "attention_factor"),
        (lambda: arrpos.YarnScaling(4.0, 0), "original_max_positions"),
        (lambda: arrpos.LongRopeScaling([1.0, 2.0], [1.0], 4096), "short_factor"),
        (lambda: arrpos.LongRopeScaling([1.0, -2.0], [1.0, 1.0], 4096), "short_factor[1]"),
        (lambda: arrpos.LongRopeScaling([], [], 4096), "short_factor"),
        (lambda: arrpos.LongRopeScaling([1.0], [1.0], 4096, factor=0.5), "factor"),
        (lambda: arrpos.Llama3Scaling(low_freq_factor=4.5, high_freq_factor=4.0),
         "low_freq_factor"),
        (lambda: arrpos.Llama3Scaling(factor=0.1), "factor"),
        (lambda: arrpos.ProportionalScaling(1.5), "partial_rotary_factor"),
        (lambda: arrpos.ProportionalScaling(0.5, factor=0.0), "factor"),
    ],
)
def test_bad_scaling_parameters(make, arg):
    with pytest.raises(ValueError, match=arg.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_bad_scaling_types():
    with pytest.raises(TypeError, match="factor"):
        arrpos.LinearScaling("2")
    with pytest.raises(TypeError, match="truncate"):
        arrpos.YarnScaling(2.0, 100, truncate="yes")
    with pytest.raises(TypeError, match="short_factor"):
        arrpos.LongRopeScaling(3.0, [1.0], 100)


def test_bad_frequency_arguments():
    with pytest.raises(ValueError, match="dim"):
        arrpos.rope_frequencies(7)
    with pytest.raises(TypeError, match="dim"):
        arrpos.rope_frequencies(8.0)
    with pytest.raises(ValueError, match="base"):
        arrpos.rope_frequencies(8, base=0.0)
    with pytest.raises(TypeError, match="scaling"):
        arrpos.rope_frequencies(8, scaling={"rope_type": "linear", "factor": 2})
    with pytest.raises(ValueError, match="seq_len"):
        arrpos.rope_frequencies(8, seq_len=0)
    with pytest.raises(ValueError, match="short_factor"):  # 2 entries, dim // 2 = 4
        arrpos.rope_frequencies(8, scaling=arrpos.LongRopeScaling([1, 1], [1, 1], 10))
    with pytest.raises(ValueError, match="dim"):
        arrpos.rope_frequencies(2, scaling=arrpos.DynamicNTKScaling(2.0, 10), seq_len=50)
    with pytest.raises(TypeError, match="dtype"):
        arrpos.rope_frequencies(8, dtype=np.int32)


def test_float64_unavailable_is_a_type_error():
    b = get_backend("jax")
    if b.float64:
        pytest.skip("JAX runs with x64 here")
    with pytest.raises(TypeError, match="float64"):
        arrpos.rope_frequencies(8, dtype=b.module.float64, xp=b.module)


# --- tables ---------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tables_accuracy_far_positions(backend, layout):
    """float32 tables within 2e-7 of the exact values up to position 2**24 (JAX no-x64 too)."""
    inv, _ = arrpos.rope_frequencies(32, base=10000.0, dtype=_f64(backend), xp=backend.module)
    held = backend.to_numpy(inv).astype(np.float64)  # exact for the frequencies as held
    rc, rs = rope_tables_exact(np.array(FAR), held, layout)
    pos = backend.asarray(np.array(FAR))
    cos, sin = arrpos.rope_cos_sin(pos, inv, layout=layout, dtype=backend.xp.float32)
    cos, sin = backend.to_numpy(cos), backend.to_numpy(sin)
    assert cos.dtype == np.float32 and cos.shape == (len(FAR), 32)
    assert np.abs(cos - rc).max() <= 2e-7 and np.abs(sin - rs).max() <= 2e-7
    if backend.float64:
        c64, s64 = arrpos.rope_cos_sin(pos, inv, layout=layout)
        assert backend.to_numpy(c64).dtype == np.float64
        assert np.abs(backend.to_numpy(c64) - rc).max() <= 1e-12
        assert np.abs(backend.to_numpy(s64) - rs).max() <= 1e-12


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_object_tables_exact_everywhere(backend, layout):
    """RoPE.cos_sin: float32 within 2e-7 of the table of the exact (float64) frequencies up to
    2**24, also where the device has no float64 (JAX without x64 carries them as a pair)."""
    rope = arrpos.RoPE(32, base=10000.0, scaling=arrpos.YarnScaling(4.0, 1024), layout=layout)
    inv64, att = rope.frequencies(dtype=np.float64)  # NumPy, host float64
    rc, rs = rope_tables_exact(np.array(FAR), inv64, layout, att)
    pos = backend.asarray(np.array(FAR))
    cos, sin = rope.cos_sin(pos, backend.xp.float32)
    assert np.abs(backend.to_numpy(cos) - rc).max() <= 2e-7
    assert np.abs(backend.to_numpy(sin) - rs).max() <= 2e-7


def test_float32_model_frequencies_are_exact(backend):
    """A float32 inv_freq (a model's buffer) is cast exactly: angles of those very values."""
    inv32 = (1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)).astype(np.float32)
    pos = np.array([3, 70_000, 2**24 - 1])
    rc, rs = rope_tables_exact(pos, inv32.astype(np.float64))
    cos, sin = arrpos.rope_cos_sin(backend.asarray(pos), backend.asarray(inv32))
    assert backend.to_numpy(cos).dtype == np.float32
    assert np.abs(backend.to_numpy(cos) - rc).max() <= 2e-7
    assert np.abs(backend.to_numpy(sin) - rs).max() <= 2e-7


def test_tables_any_shape_and_attention_factor(backend):
    pos = np.array([[[0, 5, 2], [7, 0, 1]]])  # batched, packed (restarting) position ids
    inv, _ = arrpos.rope_frequencies(8, dtype=_f64(backend), xp=backend.module)
    cos, sin = arrpos.rope_cos_sin(backend.asarray(pos), inv, attention_factor=1.25)
    assert tuple(cos.shape) == (1, 2, 3, 8)
    held = backend.to_numpy(inv).astype(np.float64)
    ang = pos[..., None] * held
    np.testing.assert_allclose(backend.to_numpy(cos)[..., :4], 1.25 * np.cos(ang), atol=1e-6)
    np.testing.assert_allclose(backend.to_numpy(sin)[..., 4:], 1.25 * np.sin(ang), atol=1e-6)
    # equal positions give equal rows, wherever they sit
    c = backend.to_numpy(cos)
    np.testing.assert_array_equal(c[0, 0, 0], c[0, 1, 1])


def test_tables_real_positions_and_int_length(backend):
    inv, _ = arrpos.rope_frequencies(8, dtype=_f64(backend), xp=backend.module)
    cos, _ = arrpos.rope_cos_sin(4, inv)
    assert tuple(cos.shape) == (4, 8)
    p = backend.asarray(np.array([0.5, 2.25]))
    cos, sin = arrpos.rope_cos_sin(p, inv)
    held = backend.to_numpy(inv).astype(np.float64)
    rc, rs = rope_tables_exact(backend.to_numpy(p).astype(np.float64), held)
    np.testing.assert_allclose(backend.to_numpy(cos), rc, atol=2e-7)
    np.testing.assert_allclose(backend.to_numpy(sin), rs, atol=2e-7)


def test_table_dtype_default(backend):
    xp = backend.xp
    inv32 = backend.asarray(np.ones(4, dtype=np.float32))
    cos, _ = arrpos.rope_cos_sin(backend.asarray(np.arange(3)), inv32)
    assert cos.dtype == xp.float32
    if backend.float64:
        cos, _ = arrpos.rope_cos_sin(backend.asarray(np.arange(3.0)), inv32)
        assert cos.dtype == xp.float64  # float64 positions * float32 inv_freq
    if hasattr(xp, "float16"):  # not an Array API dtype (array_api_strict lacks it)
        cos, _ = arrpos.rope_cos_sin(backend.asarray(np.arange(3)), inv32, dtype=xp.float16)
        assert cos.dtype == xp.float16


def test_mrope_axes_assignments():
    assert arrpos.mrope_axes([16, 24, 24]) == (0,) * 16 + (1,) * 24 + (2,) * 24
    inter = arrpos.mrope_axes([24, 20, 20], interleaved=True)
    assert len(inter) == 64
    # written out from Qwen3-VL: H at 1, 4, ..., < 60; W at 2, 5, ..., < 60; T elsewhere
    want = [0] * 64
    for i in range(1, 60, 3):
        want[i] = 1
    for i in range(2, 60, 3):
        want[i] = 2
    assert inter == tuple(want)
    assert arrpos.mrope_axes([1, 1, 1, 1]) == (0, 1, 2, 0)


def test_mrope_equal_coordinates_reduce_to_1d(backend):
    rng = _rng(1)
    pos = rng.integers(0, 5000, size=(2, 7))
    thw = np.stack([pos, pos, pos], axis=-1)
    inv, _ = arrpos.rope_frequencies(32, dtype=_f64(backend), xp=backend.module)
    c1, s1 = arrpos.rope_cos_sin(backend.asarray(pos), inv)
    for interleaved in (False, True):
        axes = arrpos.mrope_axes([4, 6, 6], interleaved=interleaved)
        cm, sm = arrpos.rope_cos_sin(backend.asarray(thw), inv, axes=axes)
        assert tuple(cm.shape) == (2, 7, 32)
        tol = 1e-15 if backend.float64 else 1e-7  # a compiled 1-D table may differ in an ulp
        np.testing.assert_allclose(backend.to_numpy(cm), backend.to_numpy(c1), rtol=0, atol=tol)
        np.testing.assert_allclose(backend.to_numpy(sm), backend.to_numpy(s1), rtol=0, atol=tol)


def test_mrope_uses_the_named_coordinate(backend):
    coords = np.array([[3, 100, 7]])
    inv, _ = arrpos.rope_frequencies(8, dtype=_f64(backend), xp=backend.module)
    axes = (2, 0, 1, 0)
    cos, sin = arrpos.rope_cos_sin(backend.asarray(coords), inv, axes=axes)
    held = backend.to_numpy(inv).astype(np.float64)
    ang = np.array([coords[0, a] for a in axes]) * held
    np.testing.assert_allclose(backend.to_numpy(sin)[0, :4], np.sin(ang), atol=2e-7)
    np.testing.assert_allclose(backend.to_numpy(cos)[0, 4:], np.cos(ang), atol=2e-7)


# --- application ------------------------------------------------------------------------------


def _qk_tables(backend, positions, dim=16, layout="half", dtype=None):
    inv, _ = arrpos.rope_frequencies(dim, dtype=_f64(backend), xp=backend.module)
    return arrpos.rope_cos_sin(backend.asarray(np.asarray(positions)), inv, layout=layout,
                               dtype=dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_matches_formula(backend, layout):
    rng = _rng(2)
    x = rng.standard_normal((2, 5, 3, 16))  # (batch, seq, heads, dim)
    cos, sin = _qk_tables(backend, np.arange(5) + 11, layout=layout)
    xb = backend.asarray(x)
    got = backend.to_numpy(arrpos.apply_rope(xb, cos[:, None, :], sin[:, None, :],
                                             layout=layout))
    c, s = backend.to_numpy(cos)[:, None, :], backend.to_numpy(sin)[:, None, :]
    xr = backend.to_numpy(xb)
    rot = rotate_half_np(xr) if layout == "half" else rotate_every_two_np(xr)
    np.testing.assert_allclose(got, xr * c + rot * s, rtol=1e-6, atol=1e-6)
    assert got.shape == x.shape


@pytest.mark.parametrize("layout", LAYOUTS)
def test_score_depends_only_on_distance(backend, layout):
    rng = _rng(3)
    q, k = rng.standard_normal(32), rng.standard_normal(32)
    pairs = np.array([[5, 2], [1003, 1000], [70_003, 70_000], [3, 0]])  # m - n = 3
    cos, sin = _qk_tables(backend, pairs, dim=32, layout=layout)
    qb = backend.asarray(np.broadcast_to(q, (4, 32)).copy())
    kb = backend.asarray(np.broadcast_to(k, (4, 32)).copy())
    rq = backend.to_numpy(arrpos.apply_rope(qb, cos[:, 0, :], sin[:, 0, :], layout=layout))
    rk = backend.to_numpy(arrpos.apply_rope(kb, cos[:, 1, :], sin[:, 1, :], layout=layout))
    scores = (rq * rk).sum(-1)
    tol = 1e-10 if backend.float64 else 2e-4
    np.testing.assert_allclose(scores, scores[0], atol=tol)
    # and a different distance gives a different score
    cos2, sin2 = _qk_tables(backend, [[9, 2]], dim=32, layout=layout)
    other = (backend.to_numpy(arrpos.apply_rope(qb[:1, :], cos2[:, 0, :], sin2[:, 0, :], layout=layout))
             * rk[:1]).sum()
    assert abs(other - scores[0]) > 1e-3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norm_preserved_and_inverse(backend, layout):
    rng = _rng(4)
    x = rng.standard_normal((3, 4, 2, 16))
    cos, sin = _qk_tables(backend, rng.integers(0, 10**6, size=(3, 4)), layout=layout)
    xb = backend.asarray(x)
    y = arrpos.apply_rope(xb, cos[:, :, None, :], sin[:, :, None, :], layout=layout)
    back = arrpos.apply_rope(y, cos[:, :, None, :], sin[:, :, None, :], layout=layout, inverse=True)
    tol = 1e-12 if backend.float64 else 1e-5
    xr = backend.to_numpy(xb)
    np.testing.assert_allclose(np.linalg.norm(backend.to_numpy(y), axis=-1),
                               np.linalg.norm(xr, axis=-1), rtol=tol)
    np.testing.assert_allclose(backend.to_numpy(back), xr, atol=tol)


def test_layouts_agree_under_channel_permutation(backend):
    rng = _rng(5)
    x = rng.standard_normal((6, 2, 16))
    perm = np.concatenate([np.arange(0, 16, 2), np.arange(1, 16, 2)])  # interleaved -> half
    pos = rng.integers(0, 1000, size=6)
    ch, sh = _qk_tables(backend, pos, layout="half")
    ci, si = _qk_tables(backend, pos, layout="interleaved")
    yi = backend.to_numpy(arrpos.apply_rope(backend.asarray(x), ci[:, None, :], si[:, None, :],
                                            layout="interleaved"))
    yh = backend.to_numpy(arrpos.apply_rope(backend.asarray(x[..., perm]), ch[:, None, :],
                                            sh[:, None, :], layout="half"))
    np.testing.assert_allclose(yh, yi[..., perm], atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_partial_rotary_passes_the_rest_through(backend, layout):
    rng = _rng(6)
    x = rng.standard_normal((2, 3, 4, 24))  # (batch, heads, seq, dim), rotary 8 of 24
    cos, sin = _qk_tables(backend, np.arange(4), dim=8, layout=layout)
    xb = backend.asarray(x)
    got = backend.to_numpy(arrpos.apply_rope(xb, cos, sin, layout=layout))
    xr = backend.to_numpy(xb)
    np.testing.assert_array_equal(got[..., 8:], xr[..., 8:])
    full = backend.to_numpy(arrpos.apply_rope(backend.asarray(x[..., :8]), cos, sin,
                                              layout=layout))
    np.testing.assert_allclose(got[..., :8], full, rtol=0, atol=1e-15)


def test_apply_dtype_follows_x(backend):
    xp = backend.xp
    x = backend.asarray(np.ones((3, 8), dtype=np.float32))
    cos, sin = _qk_tables(backend, np.arange(3), dim=8)  # float64 tables where available
    y = arrpos.apply_rope(x, cos, sin)
    assert y.dtype == xp.float32


@pytest.mark.parametrize("layout", LAYOUTS)
def test_out_and_in_place(backend, layout):
    if not backend.mutable:
        pytest.skip("immutable arrays (checked in test_out_on_jax_is_refused)")
    rng = _rng(7)
    x = rng.standard_normal((4, 2, 12))
    cos, sin = _qk_tables(backend, np.arange(4), dim=8, layout=layout)
    cos, sin = cos[:, None, :], sin[:, None, :]
    want = backend.to_numpy(arrpos.apply_rope(backend.asarray(x), cos, sin, layout=layout))
    out = backend.asarray(np.zeros_like(x))
    res = arrpos.apply_rope(backend.asarray(x), cos, sin, layout=layout, out=out)
    assert res is out
    np.testing.assert_array_equal(backend.to_numpy(out), want)
    xb = backend.asarray(x.copy())
    res = arrpos.apply_rope(xb, cos, sin, layout=layout, out=xb)
    assert res is xb
    np.testing.assert_array_equal(backend.to_numpy(xb), want)


def test_out_on_jax_is_refused():
    b = get_backend("jax")
    x = b.asarray(np.ones((2, 8), dtype=np.float32))
    cos, sin = _qk_tables(b, np.arange(2), dim=8)
    with pytest.raises(TypeError, match="out"):
        arrpos.apply_rope(x, cos, sin, out=x)


def test_generic_rope_is_jit_safe():
    b = get_backend("jax")
    import jax

    inv, _ = arrpos.rope_frequencies(16, xp=b.module)

    @jax.jit
    def f(pos, x):
        cos, sin = arrpos.rope_cos_sin(pos, inv)
        return arrpos.apply_rope(x, cos[:, None, :], sin[:, None, :])

    pos = b.asarray(np.arange(5))
    x = b.asarray(np.ones((5, 2, 16), dtype=np.float32))
    eager = arrpos.apply_rope(x, *(t[:, None, :] for t in arrpos.rope_cos_sin(pos, inv)))
    np.testing.assert_allclose(np.asarray(f(pos, x)), np.asarray(eager), atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradient_torch(layout):
    b = get_backend("torch")
    import torch

    rng = _rng(8)
    x = torch.tensor(rng.standard_normal((3, 2, 8)), requires_grad=True)
    cos, sin = _qk_tables(b, np.arange(3) * 7, dim=8, layout=layout)
    y = arrpos.apply_rope(x, cos[:, None, :], sin[:, None, :], layout=layout)
    y.sum().backward()
    ones = torch.ones_like(x)
    want = arrpos.apply_rope(ones, cos[:, None, :], sin[:, None, :], layout=layout, inverse=True)
    np.testing.assert_allclose(x.grad.numpy(), want.numpy(), atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradient_jax(layout):
    b = get_backend("jax")
    import jax

    cos, sin = _qk_tables(b, np.arange(3) * 7, dim=8, layout=layout)
    x = b.asarray(_rng(9).standard_normal((3, 2, 8)).astype(np.float32))
    w = b.asarray(_rng(10).standard_normal((3, 2, 8)).astype(np.float32))

    def loss(v):
        return (arrpos.apply_rope(v, cos[:, None, :], sin[:, None, :], layout=layout) * w).sum()

    g = np.asarray(jax.grad(loss)(x))
    want = np.asarray(arrpos.apply_rope(w, cos[:, None, :], sin[:, None, :], layout=layout,
                                        inverse=True))
    np.testing.assert_allclose(g, want, atol=1e-6)
    # and against finite differences along a random direction
    d = _rng(11).standard_normal((3, 2, 8)).astype(np.float32)
    eps = 1e-2
    fd = (float(loss(x + eps * d)) - float(loss(x - eps * d))) / (2 * eps)
    assert fd == pytest.approx(float((g * d).sum()), rel=1e-3, abs=1e-3)


def test_generic_module_directly_matches_public(numpy_backend):
    """The _xp implementation, called as a compiled twin would be, gives the same table."""
    xp = numpy_backend.xp
    inv, att = arrpos.rope_frequencies(16, scaling=arrpos.YarnScaling(4.0, 64))
    pos = np.arange(10)
    c, s = _xp.rope_cos_sin(pos, inv, layout="half", attention_factor=att, axes=None,
                            dtype=np.float64, xp=xp)
    rc, rs = rope_tables_exact(pos, inv, "half", att)
    np.testing.assert_allclose(c, rc, atol=1e-15)
    np.testing.assert_allclose(s, rs, atol=1e-15)
    outs = (np.empty((10, 16)), np.empty((10, 16)))
    res = _xp.rope_cos_sin(pos, inv, layout="half", attention_factor=att, axes=None,
                           dtype=np.float64, xp=xp, out=outs)
    assert res is outs
    np.testing.assert_array_equal(outs[0], c)


# --- the RoPE object --------------------------------------------------------------------------


def test_rope_object_apply_heads_axes(backend):
    rng = _rng(12)
    rope = arrpos.RoPE(16, base=500.0, partial_rotary_factor=0.5)
    assert rope.rotary_dim == 8
    pos = np.array([[0, 1, 2, 3], [10, 11, 12, 13]])
    x_bshd = rng.standard_normal((2, 4, 3, 16))
    inv, _ = arrpos.rope_frequencies(8, base=500.0, dtype=_f64(backend), xp=backend.module)
    cos, sin = arrpos.rope_cos_sin(backend.asarray(pos), inv, dtype=backend.xp.float64
                                   if backend.float64 else backend.xp.float32)
    want = backend.to_numpy(arrpos.apply_rope(backend.asarray(x_bshd), cos[:, :, None, :],
                                              sin[:, :, None, :]))
    got = backend.to_numpy(rope.apply(backend.asarray(x_bshd), backend.asarray(pos), heads_axis=-2))
    np.testing.assert_allclose(got, want, atol=1e-6)
    x_bhsd = np.swapaxes(x_bshd, 1, 2).copy()
    got2 = backend.to_numpy(rope.apply(backend.asarray(x_bhsd), backend.asarray(pos),
                                       heads_axis=-3))
    np.testing.assert_allclose(np.swapaxes(got2, 1, 2), want, atol=1e-6)
    got3 = backend.to_numpy(rope.apply(backend.asarray(x_bshd[0, :, 0]), 4, heads_axis=None))
    np.testing.assert_allclose(got3, want[0, :, 0], atol=1e-6)


def test_rope_object_seq_len_from_positions(numpy_backend):
    s = arrpos.LongRopeScaling(SHORT[:4], LONG[:4], 16)
    rope = arrpos.RoPE(8, scaling=s)
    for last, use_long in ((15, False), (16, True)):
        pos = np.arange(last + 1)
        inv, att = arrpos.rope_frequencies(8, scaling=s, seq_len=last + 1)
        want = rope_tables_exact(pos, inv, "half", att)[0]
        np.testing.assert_allclose(rope.cos_sin(pos)[0], want, atol=1e-15)
        ref = rope_longrope_loop(8, 10000.0, SHORT[:4], LONG[:4], 16, seq_len=last + 1)[0]
        np.testing.assert_allclose(np.asarray(inv), ref, rtol=1e-15)
        assert (ref[1] == 1.0 / (LONG[1] * 10000.0 ** 0.25)) == use_long


def test_rope_object_values_and_errors():
    a = arrpos.RoPE(64, scaling=arrpos.LinearScaling(2.0))
    assert a == arrpos.RoPE(64, scaling=arrpos.LinearScaling(2))
    assert a != arrpos.RoPE(64)
    with pytest.raises(AttributeError):
        a.base = 3.0
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        arrpos.RoPE(10, partial_rotary_factor=0.5)  # rotary width 5, odd
    with pytest.raises(ValueError, match="layout"):
        arrpos.RoPE(8, layout="neox")
    with pytest.raises(TypeError, match="head_dim"):
        arrpos.RoPE("8")
    with pytest.raises(ValueError, match="heads_axis"):
        a.apply(np.ones((2, 3, 64)), np.arange(2), heads_axis=-1)
    with pytest.raises(ValueError, match="seq_len"):
        da = get_backend("dask")
        arrpos.RoPE(8, scaling=arrpos.DynamicNTKScaling(2.0, 4)).cos_sin(
            da.asarray(np.arange(6)))


# --- errors -----------------------------------------------------------------------------------


def test_table_errors(backend):
    inv, _ = arrpos.rope_frequencies(8, xp=backend.module)
    pos = backend.asarray(np.arange(3))
    with pytest.raises(ValueError, match="layout"):
        arrpos.rope_cos_sin(pos, inv, layout="neox")
    with pytest.raises(ValueError, match="inv_freq"):
        arrpos.rope_cos_sin(pos, backend.xp.reshape(inv, (2, 2)))
    with pytest.raises(TypeError, match="inv_freq"):
        arrpos.rope_cos_sin(pos, [1.0, 0.1])
    with pytest.raises(ValueError, match="attention_factor"):
        arrpos.rope_cos_sin(pos, inv, attention_factor=0.0)
    with pytest.raises(ValueError, match="axes"):
        arrpos.rope_cos_sin(backend.asarray(np.zeros((3, 3), dtype=np.int32)), inv,
                            axes=(0, 1, 2))
    with pytest.raises(ValueError, match="axes"):
        arrpos.rope_cos_sin(backend.asarray(np.zeros((3, 3), dtype=np.int32)), inv,
                            axes=(0, 1, 2, 3))
    with pytest.raises(TypeError, match="axes"):
        arrpos.rope_cos_sin(backend.asarray(np.zeros((3, 3), dtype=np.int32)), inv, axes=3)
    with pytest.raises(TypeError, match="dtype"):
        arrpos.rope_cos_sin(pos, inv, dtype=backend.xp.int32)
    with pytest.raises(TypeError, match="positions"):
        arrpos.rope_cos_sin(backend.asarray(np.array([True, False])), inv)


def test_table_value_errors_eager():
    inv, _ = arrpos.rope_frequencies(8)
    with pytest.raises(ValueError, match="positions"):
        arrpos.rope_cos_sin(np.array([0.0, np.nan]), inv)


def test_mixed_libraries_rejected():
    t = get_backend("torch")
    inv, _ = arrpos.rope_frequencies(8)
    with pytest.raises(TypeError, match="positions and inv_freq"):
        arrpos.rope_cos_sin(t.asarray(np.arange(3)), inv)


def test_apply_errors(backend):
    xp = backend.xp
    x = backend.asarray(np.ones((2, 5, 3, 8)))
    cos, sin = _qk_tables(backend, np.arange(5), dim=8)
    c4, s4 = cos[:, None, :], sin[:, None, :]
    with pytest.raises(ValueError, match="layout"):
        arrpos.apply_rope(x, c4, s4, layout="gptj")
    with pytest.raises(ValueError, match="same shape"):
        arrpos.apply_rope(x, c4, s4[:4, ...])
    with pytest.raises(ValueError, match="broadcast"):
        arrpos.apply_rope(x, cos, sin)  # heads axis missing: (5, 8) against (.., 3, 8)
    with pytest.raises(ValueError, match="wider"):
        arrpos.apply_rope(x[..., :4], c4, s4)
    with pytest.raises(ValueError, match="even"):
        arrpos.apply_rope(x, c4[..., :3], s4[..., :3])
    with pytest.raises(TypeError, match="inverse"):
        arrpos.apply_rope(x, c4, s4, inverse=1)
    with pytest.raises(TypeError, match="x"):
        arrpos.apply_rope(backend.asarray(np.ones((5, 3, 8), dtype=np.int32)), c4[0, ...], s4[0, ...])
    with pytest.raises(TypeError, match="cos"):
        arrpos.apply_rope(x, np.ones((5, 1, 8)) if backend.name != "numpy" else [1.0], s4)
    if backend.mutable:
        with pytest.raises(ValueError, match="out"):
            arrpos.apply_rope(x, c4, s4, out=backend.asarray(np.ones((2, 5, 3, 4))))
        with pytest.raises(ValueError, match="out"):
            arrpos.apply_rope(x, c4, s4, out=xp.astype(x, xp.float32) if backend.float64
                              else backend.asarray(np.ones((2, 5, 3, 8), dtype=np.float16)))


HF_LLAMA = {
    "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 500000.0,
    "max_position_embeddings": 131072,
}


def test_from_hf_config_variants():
    r = arrpos.RoPE.from_hf_config(HF_LLAMA)
    assert r == arrpos.RoPE(128, base=500000.0)
    cfg = dict(HF_LLAMA, rope_scaling={"type": "linear", "factor": 4.0})
    assert arrpos.RoPE.from_hf_config(cfg).scaling == arrpos.LinearScaling(4.0)
    cfg = dict(HF_LLAMA, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                          "rope_theta": 1e6})
    r = arrpos.RoPE.from_hf_config(cfg)
    assert r.base == 1e6 and r.scaling == arrpos.DynamicNTKScaling(2.0, 131072)
    cfg = dict(HF_LLAMA, head_dim=64, partial_rotary_factor=0.5)
    r = arrpos.RoPE.from_hf_config(cfg)
    assert r.head_dim == 64 and r.rotary_dim == 32
    cfg = dict(HF_LLAMA, max_position_embeddings=163840, rope_scaling={
        "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
        "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1})
    assert arrpos.RoPE.from_hf_config(cfg).scaling == arrpos.YarnScaling(
        40.0, 4096, mscale=1.0, mscale_all_dim=1.0)
    phi3 = dict(HF_LLAMA, original_max_position_embeddings=4096, rope_scaling={
        "type": "longrope", "short_factor": [1.0] * 64, "long_factor": [2.0] * 64})
    s = arrpos.RoPE.from_hf_config(phi3).scaling
    assert s.original_max_positions == 4096 and s.max_positions == 131072
    qwen2vl = dict(HF_LLAMA, model_type="qwen2_vl",
                   rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})
    assert arrpos.RoPE.from_hf_config(qwen2vl).axes == arrpos.mrope_axes([16, 24, 24])
    gemma = dict(HF_LLAMA, head_dim=256, rope_parameters={
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    r = arrpos.RoPE.from_hf_config(gemma, layer_type="full_attention")
    assert r.rotary_dim == 256 and r.scaling == arrpos.ProportionalScaling(0.25)
    assert arrpos.RoPE.from_hf_config(gemma, layer_type="sliding_attention").base == 1e4
    with pytest.raises(ValueError, match="layer_type"):
        arrpos.RoPE.from_hf_config(gemma)


def test_from_hf_config_errors():
    with pytest.raises(ValueError, match="'llama3'"):  # the message lists the known types
        arrpos.RoPE.from_hf_config(dict(HF_LLAMA, rope_scaling={"type": "su", "factor": 2}))
    with pytest.raises(ValueError, match="hidden_size"):
        arrpos.RoPE.from_hf_config({"rope_theta": 1e4})
    with pytest.raises(TypeError, match="config"):
        arrpos.RoPE.from_hf_config("config.json")
    with pytest.raises(ValueError, match="factor"):
        arrpos.RoPE.from_hf_config(dict(HF_LLAMA, rope_scaling={"type": "linear"}))

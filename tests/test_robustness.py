"""Nothing silently wrong (issue 11): bad inputs, scale, memory layouts, threads, torch views.

Each test names the behaviour it keeps; the reference values come from NumPy float64 loops,
mpmath or transformers' own code, never from arrpos.
"""
from __future__ import annotations

import concurrent.futures
import math
import time
import warnings

import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import _xp
from arrpos._lib import POSITION_LIMIT, namespace_for

EAGER = ("numpy", "array_api_strict", "torch", "jax")


def _sin_cos_ref(p, dim, base=10000.0):
    """Interleaved sinusoidal rows from a float64 loop (exact enough for small positions)."""
    p = np.asarray(p, dtype=np.float64)
    w = base ** (-np.arange(0, dim, 2) / dim)
    out = np.empty(p.shape + (dim,))
    out[..., 0::2] = np.sin(p[..., None] * w)
    out[..., 1::2] = np.cos(p[..., None] * w)
    return out


def _rope_ref(x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` on the first R features, the rest passed through."""
    r = cos.shape[-1]
    xr = x[..., :r]
    rot = np.concatenate([-xr[..., r // 2:], xr[..., : r // 2]], axis=-1)
    return np.concatenate([xr * cos + rot * sin, x[..., r:]], axis=-1)


# --------------------------------------------------------------------------- positions


POSITION_FUNCS = {
    "sinusoidal": lambda p: arrpos.sinusoidal(p, 8),
    "rope_cos_sin": lambda p: arrpos.rope_cos_sin(p, arrpos.rope_frequencies(
        8, xp=_module_of(p), dtype=_f64_or_none(p))[0]),
    "timestep_embedding": lambda p: arrpos.timestep_embedding(p, 8),
    "sinusoidal_nd": lambda p: arrpos.sinusoidal_nd(p[..., None], 8),
    "RoPE.cos_sin": lambda p: arrpos.RoPE(8).cos_sin(p),
}


def _module_of(p):
    from arrpos._lib import array_namespace

    return array_namespace(p)


def _f64_or_none(p):
    from arrpos._lib import array_namespace, device_of, has_float64

    xp = array_namespace(p)
    return xp.float64 if has_float64(xp, device_of(p)) else None


@pytest.mark.parametrize("func", list(POSITION_FUNCS))
def test_int64_extremes_are_refused(backend, func):
    """-2**63 passed the old |p| < 2**53 check (np.abs overflows) and gave position 0's row."""
    if backend.name not in EAGER:
        pytest.skip("lazy arrays are not read (documented)")
    if not backend.float64:
        pytest.skip("no int64 without x64")
    for value in (-2**63, 2**63 - 1, -2**40):
        p = backend.asarray(np.array([value, 1], dtype=np.int64))
        with pytest.raises(ValueError, match="must satisfy"):
            POSITION_FUNCS[func](p)


@pytest.mark.parametrize("func", list(POSITION_FUNCS))
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e300, 1e12])
def test_non_finite_and_huge_positions_are_refused(backend, func, value):
    if backend.name not in EAGER:
        pytest.skip("lazy arrays are not read (documented)")
    p = backend.asarray(np.array([1.0, value]))
    with pytest.raises(ValueError, match="finite|must satisfy"):
        POSITION_FUNCS[func](p)


def test_nan_frequencies_are_refused():
    """rope_cos_sin(3, [nan, 1]) returned a NaN table."""
    with pytest.raises(ValueError, match="inv_freq must be finite"):
        arrpos.rope_cos_sin(3, np.array([np.nan, 1.0]))
    with pytest.raises(ValueError, match="inv_freq must be finite"):
        arrpos.rope_cos_sin(3, np.array([np.inf, 1.0]))


def test_limit_below_2_53_removes_the_power_table_gap():
    """The compiled path returned the table of p + 2**53 for -2**53 < p < -2**53 + 64 (its power
    table misses bit 47); such positions are now refused, since the limit is far below 2**53."""
    assert POSITION_LIMIT < 2**53
    for p in (-2**53 + 1, -2**53 + 63):
        with pytest.raises(ValueError, match="must satisfy"):
            arrpos.sinusoidal(np.array([p], dtype=np.int64), 4)
        with pytest.raises(ValueError, match="must satisfy"):
            arrpos.sinusoidal(np.array([float(p)]), 4)


def _mp_row(p, dim, base=10000.0):
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 200
    row = []
    for i in range(dim // 2):
        a = mpmath.mpf(float(p)) * mpmath.mpf(base) ** (mpmath.mpf(-2 * i) / dim)
        row += [float(mpmath.sin(a)), float(mpmath.cos(a))]
    return np.array(row)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-7)])
def test_accepted_positions_meet_the_contract_on_both_paths(dtype, tol):
    """Positions just below the limit: compiled and generic tables within the contract of an
    mpmath reference (the old code accepted 1e12, off by 1.8e-5)."""
    dim = 8
    ps = np.array([POSITION_LIMIT - 1, -(POSITION_LIMIT - 3), POSITION_LIMIT * 0.75 + 0.5,
                   12345678901.25])
    want = np.stack([_mp_row(p, dim) for p in ps])
    got = arrpos.sinusoidal(ps, dim, dtype=dtype)
    assert np.abs(got - want).max() <= tol
    from arrpos._exact import power_frequencies

    hi, lo = power_frequencies(dim // 2, dim, 10000.0)
    generic = _xp.sinusoid_table(ps, hi, lo, layout="interleaved", dtype=dtype, width=dim,
                                 xp=namespace_for(np))
    assert np.abs(generic - want).max() <= tol


def test_huge_sizes_are_refused_before_any_work():
    """sinusoidal(4, 2**40) ran a decimal loop for 7 minutes; alibi_slopes(10**8) took 31 s."""
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="dim"):
        arrpos.sinusoidal(4, 2**40)
    with pytest.raises(ValueError, match="elements"):
        arrpos.sinusoidal(2**31, 2**10)
    with pytest.raises(ValueError, match="num_heads"):
        arrpos.alibi_slopes(10**8)
    with pytest.raises(ValueError, match="elements"):
        arrpos.alibi_bias(np.ones(64), 2**20, 2**20)
    with pytest.raises(ValueError, match="dim"):
        arrpos.timestep_embedding(np.arange(3), 2**40)
    with pytest.raises(ValueError, match="elements"):
        arrpos.learned_init(2**30, 2**10)
    assert time.perf_counter() - t0 < 5.0  # generous: refusals, not computations


def test_timestep_shift_overflow_is_a_value_error():
    with pytest.raises(ValueError, match="downscale_freq_shift"):
        arrpos.timestep_embedding(np.array([1]), 4, downscale_freq_shift=2.0000000001)


# --------------------------------------------------------------------------- apply_rope's out


def _tables(seq, r, dtype=np.float64):
    w = 10.0 ** (-np.arange(r // 2) / (r // 2))
    ang = np.arange(seq)[:, None] * w
    return (np.concatenate([np.cos(ang)] * 2, -1).astype(dtype),
            np.concatenate([np.sin(ang)] * 2, -1).astype(dtype))


@pytest.mark.parametrize("offset", [1, 2, 3, 5])
@pytest.mark.parametrize("backward", [False, True])
def test_partial_rotary_out_overlapping_x(offset, backward):
    """out = buf[1:13] over x = buf[:12]: the pass-through columns read overwritten input."""
    cos, sin = _tables(3, 2)
    buf = np.random.default_rng(offset).standard_normal(40)
    if backward:
        x = buf[offset:offset + 12].reshape(3, 4)
        out = buf[:12].reshape(3, 4)
    else:
        x = buf[:12].reshape(3, 4)
        out = buf[offset:offset + 12].reshape(3, 4)
    want = _rope_ref(x.copy(), cos, sin)
    got = arrpos.apply_rope(x, cos, sin, out=out)
    assert got is out
    np.testing.assert_allclose(out, want, atol=1e-15)


def test_read_only_out_is_a_value_error_naming_out():
    cos, sin = _tables(3, 4)
    x = np.ones((3, 4))
    for _ in range(2):  # the second call must not skip the check (validation cache)
        ro = np.zeros((3, 4))
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="out"):
            arrpos.apply_rope(x, cos, sin, out=ro)
        arrpos.apply_rope(x, cos, sin, out=np.zeros((3, 4)))


def test_zero_stride_out_is_refused_numpy():
    cos, sin = _tables(3, 4)
    base = np.zeros(4)
    out = np.lib.stride_tricks.as_strided(base, (3, 4), (0, 8), writeable=True)
    with pytest.raises(ValueError, match="out"):
        arrpos.apply_rope(np.ones((3, 4)), cos, sin, out=out)


# --------------------------------------------------------------------------- memory layouts


def _layouts(x):
    """Views of ``x``'s values in unusual memory: negative strides, unaligned, byte-swapped,
    a packed record field (strides not a multiple of the item size), non-contiguous."""
    n, d = x.shape
    yield "negative", np.ascontiguousarray(x[::-1])[::-1]
    raw = np.zeros(x.nbytes + 1, dtype=np.uint8)
    un = raw[1:].view(x.dtype).reshape(x.shape)
    un[...] = x
    yield "unaligned", un
    yield "byteswapped", x.astype(x.dtype.newbyteorder())
    rec = np.zeros(n, dtype=[("tag", "i1"), ("v", x.dtype, (d,))])  # packed: stride 1 + 8 d
    rec["v"] = x
    yield "record", rec["v"]
    wide = np.zeros((n, 2 * d))
    wide[:, ::2] = x
    yield "strided", wide[:, ::2]


def test_apply_rope_memory_layouts():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8))
    cos, sin = _tables(5, 8)
    want = _rope_ref(x, cos, sin)
    for name, xv in _layouts(x):
        np.testing.assert_allclose(arrpos.apply_rope(xv, cos, sin), want, atol=1e-14,
                                   err_msg=name)
        for tname, cv in _layouts(cos):
            sv = np.array(sin)
            np.testing.assert_allclose(arrpos.apply_rope(x, cv, sv), want, atol=1e-14,
                                       err_msg=f"{name}/{tname}")


def test_table_positions_memory_layouts():
    p = np.arange(10.0).reshape(5, 2)
    want = _sin_cos_ref(p, 8)
    for name, pv in _layouts(p):
        np.testing.assert_allclose(arrpos.sinusoidal(pv, 8), want, atol=1e-12, err_msg=name)


def test_record_field_strides_take_the_generic_path():
    """A packed record field's strides are not a multiple of the item size: the kernel
    raised; now it declines late (``Unsupported``) and the generic path serves it."""
    rec = np.zeros(4, dtype=[("tag", "i1"), ("v", "<f8", (4,))])
    rec["v"] = np.arange(16.0).reshape(4, 4)
    x = rec["v"]
    assert x.strides[0] % 8
    cos, sin = _tables(4, 4)
    mod = _dispatch.plan("apply_rope", namespace_for(np), arrays=(x, cos, sin, None),
                         layout="half", inverse=False, out=None).module
    if mod is not _xp:  # the compiled kernels: they refuse while preparing the call
        from arrpos._backends import Unsupported

        with pytest.raises(Unsupported):
            mod.apply_rope(x, cos, sin, layout="half", inverse=False, xp=namespace_for(np))
    np.testing.assert_allclose(arrpos.apply_rope(x, cos, sin), _rope_ref(x, cos, sin),
                               atol=1e-14)


def test_float32_x_with_float64_tables_reaches_the_kernel():
    """The README's flow (float64 tables, float32 x) silently took the generic path."""
    if not _dispatch.compiled_available()[0]:
        pytest.skip("compiled kernels not built or disabled")
    x = np.random.default_rng(1).standard_normal((2, 6, 3, 8)).astype(np.float32)
    cos, sin = _tables(6, 8)
    c4, s4 = cos[:, None, :], sin[:, None, :]
    mod = _dispatch.plan("apply_rope", namespace_for(np), arrays=(x, c4, s4, None),
                         layout="half", inverse=False, out=None).module
    assert mod is not _xp
    want = _rope_ref(x.astype(np.float64), c4, s4)
    np.testing.assert_allclose(arrpos.apply_rope(x, c4, s4), want, atol=1e-6)


# --------------------------------------------------------------------------- threads


def test_concurrent_calls_give_the_same_results():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((4, 64, 2, 32)) for _ in range(8)]
    inv, _ = arrpos.rope_frequencies(32)

    def work(i):
        pos = np.arange(64) + 1000 * i
        cos, sin = arrpos.rope_cos_sin(pos, inv)
        y = arrpos.apply_rope(xs[i], cos[:, None, :], sin[:, None, :])
        return arrpos.sinusoidal(pos, 48), cos, y

    serial = [work(i) for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(work, range(8)), serial):
                for a, b in zip(got, want):
                    np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- torch specifics


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_neg_and_conj_views(torch):
    """The compiled route read the memory of _neg_view / conj().imag tensors: results negated."""
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    cos, sin = (torch.from_numpy(t)[:, None] for t in _tables(5, 8))
    want = _rope_ref(x.numpy(), cos.numpy(), sin.numpy())
    xn = (-x)._neg_view()
    assert xn.is_neg()
    np.testing.assert_allclose(arrpos.apply_rope(xn, cos, sin).numpy(), want, atol=1e-14)
    sn = torch.complex(torch.zeros_like(sin), -sin).conj().imag  # a neg view holding -sin
    assert sn.is_neg()
    np.testing.assert_allclose(arrpos.apply_rope(x, cos, sn).numpy(), want, atol=1e-14)
    cn = (-cos)._neg_view()
    np.testing.assert_allclose(arrpos.apply_rope(x, cn, sin).numpy(), want, atol=1e-14)
    out = torch.zeros_like(x)._neg_view()
    arrpos.apply_rope(x, cos, sin, out=out)
    np.testing.assert_allclose(out.resolve_neg().numpy(), want, atol=1e-14)
    p = torch.arange(6, dtype=torch.float64)
    pn = (-p)._neg_view()
    np.testing.assert_allclose(arrpos.sinusoidal(pn, 4).numpy(), _sin_cos_ref(p.numpy(), 4),
                               atol=1e-12)
    inv = torch.tensor([1.0, 0.1], dtype=torch.float64)
    c, s = arrpos.rope_cos_sin(pn, inv)
    np.testing.assert_allclose(s.numpy()[:, :2], np.sin(np.arange(6)[:, None] * [1.0, 0.1]),
                               atol=1e-12)


def test_torch_expanded_out_is_refused(torch):
    cos, sin = (torch.from_numpy(t).float() for t in _tables(5, 8))
    e = torch.zeros(1, 8).expand(5, 8)
    with pytest.raises(ValueError, match="out"):
        arrpos.apply_rope(e, cos, sin, out=e)
    with pytest.raises(ValueError, match="out"):
        arrpos.apply_rope(torch.ones(5, 8), cos, sin, out=e)


@pytest.mark.parametrize("name", ["bfloat16", "float16", "uint8", "uint16", "uint32",
                                  "uint64", "float8_e4m3fn"])
def test_torch_unusual_position_dtypes(torch, name):
    dt = getattr(torch, name)
    p = torch.arange(6).to(dt)
    want = _sin_cos_ref(np.arange(6), 8)
    for out_dtype in (torch.float32, torch.float64):
        got = arrpos.sinusoidal(p, 8, dtype=out_dtype)
        np.testing.assert_allclose(got.double().numpy(), want, atol=2e-7)
    inv = torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64)
    c, _ = arrpos.rope_cos_sin(p, inv, dtype=torch.float32)
    np.testing.assert_allclose(c.double().numpy()[:, :4], np.cos(np.arange(6)[:, None]
                                                                 * inv.numpy()), atol=2e-7)


def test_torch_sparse_positions_are_a_type_error(torch):
    with pytest.raises(TypeError, match="positions"):
        arrpos.sinusoidal(torch.arange(4.0).to_sparse(), 4)


def test_torch_requires_grad_positions_do_not_warn(torch):
    p = torch.arange(5.0, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrpos.sinusoidal(p, 8)
        arrpos.RoPE(8, scaling=arrpos.DynamicNTKScaling(2.0, 4)).cos_sin(p)
        arrpos.timestep_embedding(p, 8)


def test_no_non_writable_numpy_warning_from_torch(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pe = arrpos.sinusoidal(torch.arange(5), 16)
        arrpos.decode_sinusoidal(pe)
        arrpos.rope_frequencies(8, xp=torch)
        arrpos.alibi_slopes(4, xp=torch)


def test_dtype_objects_and_names_select_the_library(torch):
    assert isinstance(arrpos.sinusoidal(3, 4, dtype=torch.float32), torch.Tensor)
    assert arrpos.sinusoidal(3, 4, dtype="float32").dtype == np.float32
    inv, _ = arrpos.rope_frequencies(8, dtype=torch.float64)
    assert isinstance(inv, torch.Tensor) and inv.dtype == torch.float64
    assert isinstance(arrpos.alibi_slopes(4, dtype=torch.float32), torch.Tensor)
    assert isinstance(arrpos.grid_coords((2, 2), dtype=torch.float32), torch.Tensor)
    with pytest.raises(TypeError, match="dtype"):
        arrpos.sinusoidal(3, 4, dtype="int32")


# --------------------------------------------------------------------------- RoPE.apply's axis


def test_rope_apply_needs_heads_axis():
    with pytest.raises(TypeError, match="heads_axis"):
        arrpos.RoPE(8).apply(np.ones((1, 4, 4, 8)), np.arange(4))


def test_transformers_mapping_with_heads_equal_to_seq(torch):
    """README: transformers' apply_rotary_pos_emb on (batch, heads, seq, dim), heads == seq."""
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    b, h, s, d = 2, 5, 5, 8
    q = torch.randn(b, h, s, d, dtype=torch.float64)
    inv, _ = arrpos.rope_frequencies(d)
    cos_sd, sin_sd = arrpos.rope_cos_sin(s, inv)  # (seq, dim)
    cos_t = torch.from_numpy(cos_sd)[None].expand(b, s, d)  # transformers: (batch, seq, dim)
    sin_t = torch.from_numpy(sin_sd)[None].expand(b, s, d)
    want, _ = modeling_llama.apply_rotary_pos_emb(q, q, cos_t, sin_t)
    got = arrpos.apply_rope(q, torch.from_numpy(cos_sd), torch.from_numpy(sin_sd))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-14)
    got_b = arrpos.apply_rope(q, cos_t[:, None], sin_t[:, None])
    np.testing.assert_allclose(got_b.numpy(), want.numpy(), atol=1e-14)
    got_r = arrpos.RoPE(d).apply(q, torch.arange(s), heads_axis=-3)
    np.testing.assert_allclose(np.asarray(got_r), want.numpy(), atol=1e-14)
    wrong = arrpos.apply_rope(q, torch.from_numpy(cos_sd)[:, None],
                              torch.from_numpy(sin_sd)[:, None])
    assert (wrong - want).abs().max() > 1e-3  # the old README mapping, for the record


# --------------------------------------------------------------------------- bad inputs


BAD_CALLS = [
    # (call, exception, text the message must contain)
    (lambda: arrpos.sinusoidal(4, 8, layout="bogus"), ValueError, "layout"),
    (lambda: arrpos.sinusoidal("4", 8), TypeError, "positions"),
    (lambda: arrpos.sinusoidal(4, 7, layout="split"), ValueError, "dim"),  # odd: interleaved only
    (lambda: arrpos.sinusoidal(4, True), TypeError, "dim"),
    (lambda: arrpos.sinusoidal(np.array([True]), 8), TypeError, "positions"),
    (lambda: arrpos.sinusoidal_nd([[1.0, 2.0]], 8), TypeError, "coords"),
    (lambda: arrpos.sinusoidal_nd(np.ones(()), 8), ValueError, "coords"),
    (lambda: arrpos.grid_coords("ab"), TypeError, "shape"),
    (lambda: arrpos.timestep_embedding([1, 2], 8), TypeError, "timesteps"),
    (lambda: arrpos.timestep_embedding(np.ones(2), 8, flip_sin_to_cos=1), TypeError,
     "flip_sin_to_cos"),
    (lambda: arrpos.decode_sinusoidal(np.ones((2, 4), dtype=np.int64)), TypeError, "encoding"),
    (lambda: arrpos.decode_sinusoidal(np.ones(())), ValueError, "encoding"),
    (lambda: arrpos.rope_frequencies(7), ValueError, "dim"),
    (lambda: arrpos.rope_frequencies(8, seq_len=0), ValueError, "seq_len"),
    (lambda: arrpos.rope_cos_sin(3, [1.0, 0.1]), TypeError, "inv_freq"),
    (lambda: arrpos.rope_cos_sin(3, np.ones((2, 2, 2))), ValueError, "inv_freq"),  # 1-D or 2-D
    (lambda: arrpos.rope_cos_sin(3, np.ones(2), attention_factor=float("nan")), ValueError,
     "attention_factor"),
    (lambda: arrpos.apply_rope(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)),
                               inverse="no"), TypeError, "inverse"),
    (lambda: arrpos.apply_rope([1.0], np.ones((1, 2)), np.ones((1, 2))), TypeError, "x"),
    (lambda: arrpos.apply_rope(np.ones((2, 4)), np.ones((2, 4), dtype=int), np.ones((2, 4))),
     TypeError, "cos"),
    (lambda: arrpos.apply_rope(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)),
                               out=np.ones((2, 4), dtype=np.float32)), ValueError, "out"),
    (lambda: arrpos.mrope_axes([1, 1, 1], interleaved="yes"), TypeError, "interleaved"),
    (lambda: arrpos.RoPE(8).apply(np.ones((4, 2, 8)), np.arange(4), heads_axis=-1), ValueError,
     "heads_axis"),
    (lambda: arrpos.RoPE(8).apply(np.ones((4, 2, 8)), np.arange(4), heads_axis=1.0), TypeError,
     "heads_axis"),
    (lambda: arrpos.YarnScaling(2.0, 16, truncate=1), TypeError, "truncate"),
    (lambda: arrpos.alibi_slopes(0), ValueError, "num_heads"),
    (lambda: arrpos.alibi_slopes(4, max_bias="8"), TypeError, "max_bias"),
    (lambda: arrpos.alibi_bias([0.5], 2, 2), TypeError, "slopes"),
    (lambda: arrpos.alibi_bias(np.ones((2, 2)), 2, 2), ValueError, "slopes"),
    (lambda: arrpos.alibi_bias(np.ones(2), 2, 2, mode="x"), ValueError, "mode"),
    (lambda: arrpos.alibi_bias(np.ones(2), 2, 2, query_offset=2**60), ValueError,
     "query_offset"),
    (lambda: arrpos.alibi_bias_from_mask(np.ones(2), np.ones((2, 3))), TypeError,
     "attention_mask"),
    (lambda: arrpos.alibi_bias_from_mask(np.ones(2), np.ones(3, dtype=bool)), ValueError,
     "attention_mask"),
    (lambda: arrpos.relative_positions(2, 2, query_offset=1.5), TypeError, "query_offset"),
    (lambda: arrpos.relative_positions(-1, 2), ValueError, "query_len"),
    (lambda: arrpos.t5_bucket(np.ones(3)), TypeError, "relative"),
    (lambda: arrpos.t5_bucket(np.ones(3, dtype=int), bidirectional=None), TypeError,
     "bidirectional"),
    (lambda: arrpos.rel_shift(np.ones(3)), ValueError, "scores"),
    (lambda: arrpos.rel_shift("ab"), TypeError, "scores"),
    (lambda: arrpos.attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)), causal=1),
     TypeError, "causal"),
    (lambda: arrpos.attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)),
                              mask=np.ones((2, 2))), TypeError, "mask"),
    (lambda: arrpos.conv_positional(np.ones((5, 2)), np.ones((3, 2)), residual=0), TypeError,
     "residual"),
    (lambda: arrpos.conv_positional(np.ones((5, 2)), [[1.0, 1.0]]), TypeError, "weight"),
    (lambda: arrpos.conv_positional(np.ones((5, 2)), np.ones((3, 2)), activation="relu"),
     ValueError, "activation"),
    (lambda: arrpos.learned_init(4, 8, method="bogus"), ValueError, "method"),
    (lambda: arrpos.lookup(np.ones((4, 2)), np.array([0.5])), TypeError, "positions"),
    (lambda: arrpos.lookup(np.ones(4), np.array([0])), ValueError, "table"),
]


@pytest.mark.parametrize("i", range(len(BAD_CALLS)))
def test_bad_inputs_name_the_argument(i):
    call, exc, name = BAD_CALLS[i]
    with pytest.raises(exc) as info:
        call()
    assert name in str(info.value)
    assert "got" in str(info.value) or "must" in str(info.value)


def test_validator_message_style():
    from arrpos import _lib

    with pytest.raises(TypeError, match=r"^flag must be a bool \(True or False\), got int 1$"):
        _lib.check_bool(1, "flag")
    with pytest.raises(ValueError, match=r"^k must be >= -3 and <= 3, got 4$"):
        _lib.check_int(4, "k", minimum=-3, maximum=3)
    assert _lib.check_int(-2**62, "offset", minimum=-2**63) == -2**62
    with pytest.raises(ValueError, match=r"^mode must be one of 'a', 'b', got str 'c'$"):
        _lib.check_choice("c", "mode", ("a", "b"))
    with pytest.raises(ValueError, match=r"^r must be finite, got nan$"):
        _lib.check_real_scalar(math.nan, "r")
    with pytest.raises(ValueError, match=r"^x must have 2 axes \(n, d\), got shape \(3,\)$"):
        _lib.check_array(namespace_for(np), np.ones(3), "x", ndim=2, shape_hint="(n, d)")


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("kind, table, text", [
    ("similarity", np.ones((2, 3, 4)), "2-D"),
    ("t5", np.ones((32, 512)), "at most 64 heads"),
    ("t5", None, "not a .npy file"),
])
def test_cli_plot_tables_refused_clearly(tmp_path, capsys, kind, table, text):
    pytest.importorskip("matplotlib").use("Agg")
    from arrpos import _cli

    path = tmp_path / "t.npy"
    if table is None:
        path.write_text("not an array")
    else:
        np.save(path, table)
    assert _cli.main(["plot", kind, "--table", str(path), "-o", str(tmp_path / "o.png")]) != 0
    assert text in capsys.readouterr().err


def test_cli_plot_t5_uses_the_tables_bucket_count(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib").use("Agg")
    from arrpos import _cli, plot

    seen = {}
    real = plot.t5
    monkeypatch.setattr(plot, "t5", lambda tab, **kw: seen.update(kw) or real(tab, **kw))
    np.save(tmp_path / "t.npy", np.random.default_rng(0).random((16, 2)))
    assert _cli.main(["plot", "t5", "--table", str(tmp_path / "t.npy"),
                      "-o", str(tmp_path / "o.png")]) == 0
    assert seen["num_buckets"] == 16


def test_cli_help_shows_choices_defaults(capsys):
    from arrpos import _cli

    for kind, flag in (("sinusoidal", "--layout"), ("alibi", "--mode"),
                       ("similarity", "--metric")):
        with pytest.raises(SystemExit):
            _cli.main(["plot", kind, "--help"])
        text = capsys.readouterr().out
        assert "(default " in text.split(flag, 2)[-1].split("--", 1)[0], (kind, flag)


def test_frequency_table_cache_is_bounded_in_bytes_and_freed():
    """The rotation-table cache kept ~58 MB per 32,768-frequency entry (2.2 GiB after 40 bases)
    and cache_clear() did not free it. Checked through the cache's own size accounting."""
    host = _dispatch.driver("host")
    if host is None:
        pytest.skip("compiled kernels not built or disabled")
    host.rotation_tables.cache_clear()
    assert host.table_cache_bytes() == 0
    for base in range(10):
        arrpos.sinusoidal(4, 8192, base=1000.0 + base)
        assert host.table_cache_bytes() <= host.TABLE_CACHE_BYTES
    assert host.table_cache_bytes() > 0
    host.rotation_tables.cache_clear()
    assert host.table_cache_bytes() == 0


def test_bench_thread_count_honest_under_omp_num_threads_1(torch):
    """bench printed "2 OpenMP threads" under OMP_NUM_THREADS=1: torch.set_num_threads(2) in
    the torch reference raised the shared libgomp count."""
    import os
    import pathlib
    import subprocess
    import sys

    if not _dispatch.compiled_available()[0]:
        pytest.skip("compiled kernels not built or disabled")
    root = pathlib.Path(__file__).resolve().parent.parent
    code = ("from benchmarks import bench_rope; bench_rope._torch_reference('half'); "
            "from benchmarks.run import machine; print(machine())")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    res = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert " 1 kernel threads" in res.stdout, res.stdout


def test_empty_positions(backend):
    """Empty arrays pass the value checks (torch's .size is a method, not a count)."""
    p = backend.asarray(np.zeros((0,), dtype=np.float64))
    assert tuple(arrpos.sinusoidal(p, 4).shape) == (0, 4)
    assert tuple(arrpos.timestep_embedding(p, 4).shape) == (0, 4)

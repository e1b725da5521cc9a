"""Nothing silently wrong, round 3 (issue 25): the families (absolute, learned, relative, ALiBi,
packed, convolutional, attention) and the public boundary in ``arrpos._lib``.

Every test here failed on the code before the fix it names. References are independent of
arrpos: transformers' own functions, torch, or float64 NumPy loops written in the test.
"""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import arrpos

EAGER = ("numpy", "array_api_strict", "torch", "jax")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")


def _ints(backend, values, dtype):
    """``values`` as a ``dtype`` array of ``backend``; skips dtypes the backend lacks."""
    if dtype.endswith("64") and not backend.float64:
        pytest.skip("no 64-bit integers without x64")
    return backend.asarray(np.asarray(values).astype(dtype))


def _index_dtype(backend):
    return np.int64 if backend.float64 else np.int32  # JAX without x64: int32 indices


def _edges(dtype, backend):
    """The extremes of an integer dtype (unsigned: up to the index dtype's maximum, beyond is
    refused) and small values around zero, as int64."""
    info = np.iinfo(dtype)
    top = min(int(info.max), int(np.iinfo(_index_dtype(backend)).max))
    vals = [int(info.min), int(info.min) + 1, -200, -129, -128, -5, -1, 0, 1, 5, 127, 128, 200,
            top - 1, top]
    return np.array(sorted({v for v in vals if info.min <= v <= top}), dtype=np.int64)


# --------------------------------------------------------------------------- 1. integer edges


def _t5_reference(rel, **kw):
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    return t5.T5Attention._relative_position_bucket(torch.from_numpy(rel), **kw).numpy()


def _deberta_reference(rel, bucket_size, max_position):
    """transformers' make_log_bucket_position(-rel): the DeBERTa bucket of query - key."""
    torch = pytest.importorskip("torch")
    deberta = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    out = deberta.make_log_bucket_position(torch.from_numpy(-rel), bucket_size, max_position)
    return out.numpy().astype(np.int64)


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bucket_at_integer_edges(backend, dtype, bidirectional):
    """t5_bucket of an int8/16/32 minimum returned the input (abs overflowed); unsigned
    torch dtypes raised torch-internal errors. Reference: transformers on int64 values (the
    int64 minimum is compared with -(2**63 - 1): transformers' own abs wraps there)."""
    vals = _edges(dtype, backend)
    got = backend.to_numpy(arrpos.t5_bucket(_ints(backend, vals, dtype),
                                            bidirectional=bidirectional))
    ref = _t5_reference(np.maximum(vals, -(2**63 - 1)), bidirectional=bidirectional)
    np.testing.assert_array_equal(got, ref)
    assert got.dtype == (np.dtype(dtype) if dtype.startswith("int") else _index_dtype(backend))


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED)
def test_deberta_bucket_at_integer_edges(backend, dtype):
    """deberta_bucket raised a bare OverflowError for int8 with the default bucket_size,
    returned the input at int16/32 minima and wrapped unsigned values."""
    vals = _edges(dtype, backend)
    got = backend.to_numpy(arrpos.deberta_bucket(_ints(backend, vals, dtype)))
    np.testing.assert_array_equal(got, _deberta_reference(np.maximum(vals, -(2**63 - 1)),
                                                          256, 512))
    # buckets of int8 distances reach +-128, beyond int8: the index dtype holds them
    keeps = dtype in ("int16", "int32", "int64")
    assert got.dtype == (np.dtype(dtype) if keeps else _index_dtype(backend))


@pytest.mark.parametrize("bucket_size, max_position", [
    (2, 8), (3, 8), (2, 3), (4, 4), (5, 6), (256, 130), (64, 34), (6, 100000), (1000, 600)])
def test_deberta_bucket_equals_transformers_for_every_option(bucket_size, max_position):
    """bucket_size 2 or 3 gave 2 where transformers gives 1 (the first step was assumed at
    mid + 1); a max_position just above mid jumps by many buckets at once."""
    rng = np.random.default_rng(0)
    rel = np.concatenate([np.arange(-3000, 3001), rng.integers(-2**40, 2**40, 3000),
                          [2**63 - 1, -(2**63 - 1), 2**62 + 12345, 2**24 + 1]]).astype(np.int64)
    got = np.asarray(arrpos.deberta_bucket(rel, bucket_size=bucket_size,
                                           max_position=max_position))
    np.testing.assert_array_equal(got, _deberta_reference(rel, bucket_size, max_position))


def test_t5_bucket_far_distances_equal_transformers():
    rel = np.array([2**62, -2**62, 2**63 - 1, -(2**63 - 1), 2**40 + 3], dtype=np.int64)
    for md in (128, 2**40):
        got = np.asarray(arrpos.t5_bucket(rel, max_distance=md, num_buckets=64))
        np.testing.assert_array_equal(got, _t5_reference(rel, max_distance=md, num_buckets=64))


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED)
def test_shaw_index_at_integer_edges(backend, dtype):
    """clip(int8, -200, 200) overflowed its bounds; unsigned torch dtypes had no clamp."""
    vals = _edges(dtype, backend)
    for k in (2, 200):
        got = backend.to_numpy(arrpos.shaw_index(_ints(backend, vals, dtype), max_distance=k))
        ref = np.array([min(max(v, -k), k) + k for v in vals.tolist()])
        np.testing.assert_array_equal(got, ref)


def test_shaw_index_refuses_a_max_distance_beyond_the_index_dtype():
    with pytest.raises(ValueError, match="max_distance"):
        arrpos.shaw_index(np.arange(3), max_distance=10**30)  # was a bare OverflowError


def test_uint64_distances_past_int64_are_refused_by_name():
    big = np.array([2**63 + 5, 3], dtype=np.uint64)
    for call, name in ((lambda: arrpos.t5_bucket(big), "relative"),
                       (lambda: arrpos.deberta_bucket(big), "relative"),
                       (lambda: arrpos.shaw_index(big, max_distance=3), "relative"),
                       (lambda: arrpos.lookup(np.ones((4, 2)), big), "positions")):
        with pytest.raises(ValueError, match=name):
            call()


TORCH_INDEX_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "uint64")


@pytest.mark.parametrize("dtype", TORCH_INDEX_DTYPES)
def test_small_and_unsigned_indices_on_every_backend(backend, dtype):
    """torch int8/uint8 indices raised index_select errors, uint16/32/64 'not implemented'."""
    table = np.arange(12.0).reshape(6, 2)
    ids = np.array([[0, 5], [3, 1]])
    t = backend.asarray(table)
    got = backend.to_numpy(arrpos.lookup(t, _ints(backend, ids, dtype)))
    np.testing.assert_array_equal(got, table[ids])
    got = backend.to_numpy(arrpos.relative_bias(t, _ints(backend, ids, dtype)))
    np.testing.assert_array_equal(got, np.moveaxis(table[ids], -1, 0))
    if backend.name not in EAGER:
        return  # lazy ids are not read (documented)
    with pytest.raises(ValueError, match="positions"):
        arrpos.lookup(t, _ints(backend, [[6]], dtype))


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED)
def test_alibi_from_positions_forms_distances_without_wrapping(backend, dtype):
    """uint32 positions 5 and 7 gave 2.1e9 instead of -1 (the difference wrapped); torch's
    unsigned dtypes had no abs. Reference: a float64 loop over Python ints."""
    q = np.array([5, 7, 0])
    k = np.array([7, 5, 3, 0])
    slopes = np.array([0.5, 0.25])
    for mode in ("symmetric", "causal", "key"):
        got = backend.to_numpy(arrpos.alibi_bias_from_positions(
            backend.asarray(slopes), _ints(backend, q, dtype), _ints(backend, k, dtype),
            mode=mode))
        ref = np.zeros((2, 3, 4))
        for h, s in enumerate(slopes):
            for i, qp in enumerate(q.tolist()):
                for j, kp in enumerate(k.tolist()):
                    d = qp - kp
                    ref[h, i, j] = (-s * abs(d) if mode == "symmetric" else
                                    -s * d if d >= 0 and mode == "causal" else
                                    0.0 if mode == "causal" else s * kp)
        np.testing.assert_array_equal(got, ref)


def test_alibi_positions_past_2_53_are_refused():
    """Positions near 2**62 wrapped in int64 (2**62 - (-2**62)) although the docstring
    promised a ValueError from 2**53."""
    s = np.array([0.5])
    for bad in (np.array([2**62], dtype=np.int64), np.array([-2**62], dtype=np.int64),
                np.array([2.0**60])):
        with pytest.raises(ValueError, match="query_positions"):
            arrpos.alibi_bias_from_positions(s, bad, np.array([0]))
        with pytest.raises(ValueError, match="key_positions"):
            arrpos.alibi_bias_from_positions(s, np.array([0]), bad)
    below = np.array([2**53 - 1], dtype=np.int64)
    got = arrpos.alibi_bias_from_positions(s, below, np.array([2**53 - 2], dtype=np.int64))
    assert got.tolist() == [[[-0.5]]]


@pytest.mark.parametrize("dtype", ("int8", "uint8", "int16", "uint16", "int32", "uint32"))
def test_alibi_from_mask_accepts_every_integer_mask(backend, dtype):
    """A guard, not a regression: the mask already took every integer dtype; kept beside its
    kin above so that the index-dtype widening keeps it so."""
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    got = backend.to_numpy(arrpos.alibi_bias_from_mask(backend.asarray(np.array([0.5])),
                                                       _ints(backend, mask, dtype)))
    pos = (np.cumsum(mask, axis=-1) - 1) * mask
    np.testing.assert_array_equal(got[:, 0, 0], 0.5 * pos)


def test_offsets_that_overflow_int32_are_refused_without_x64():
    """JAX without x64 builds positions in int32: query_offset=2**40 was a bare
    OverflowError (relative_positions) or wrapped silently."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    if jax.config.jax_enable_x64:
        pytest.skip("int64 positions with x64")
    with pytest.raises(ValueError, match="query_offset"):
        arrpos.relative_positions(2, 3, query_offset=2**40, xp=jnp)
    with pytest.raises(ValueError, match="query_offset"):
        arrpos.alibi_bias(jnp.ones(2), 2, 3, query_offset=2**31 - 2)
    got = arrpos.relative_positions(2, 3, query_offset=2**31 - 6, xp=jnp)
    assert np.asarray(got).tolist() == [[j - (i + 2**31 - 6) for j in range(3)] for i in range(2)]


# --------------------------------------------------------------------------- 2. memory


def _peak_mib(call):
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_t5_bucket_memory_does_not_follow_max_distance():
    """max_distance=2e8 allocated np.arange(2e8) (1.5 GiB) for three distances."""
    rel = np.array([-3, 0, 150_000_000])
    assert _peak_mib(lambda: arrpos.t5_bucket(rel, max_distance=2 * 10**8)) < 16
    np.testing.assert_array_equal(arrpos.t5_bucket(rel, max_distance=2 * 10**8),
                                  _t5_reference(rel, max_distance=2 * 10**8))


def test_absurd_bucket_options_are_refused_by_name():
    rel = np.array([-3, 0, 5])
    with pytest.raises(ValueError, match="bucket_size"):
        arrpos.deberta_bucket(rel, bucket_size=10**8, max_position=2 * 10**8)
    with pytest.raises(ValueError, match="num_buckets"):
        arrpos.t5_bucket(rel, num_buckets=10**8)
    with pytest.raises(ValueError, match="max_distance"):
        arrpos.t5_bucket(rel, max_distance=10**30)
    with pytest.raises(ValueError, match="max_position"):
        arrpos.deberta_bucket(rel, max_position=10**30)  # was OverflowError in float()
    # a bucket size far past the distances of the dtype needs no log bucket at all
    small = np.array([-100, 3], dtype=np.int8)
    assert arrpos.deberta_bucket(small, bucket_size=10**8,
                                 max_position=2 * 10**8).tolist() == [100, -3]


def test_resample_memory_follows_the_output_not_n_in_times_n_out():
    """A dense (n_out, n_in) matrix per axis: 4096 -> 16384 rows took 512 MiB on the host."""
    table = np.random.default_rng(0).standard_normal((4096, 2))
    assert _peak_mib(lambda: arrpos.resample(table, 16384)) < 64
    torch = pytest.importorskip("torch")
    for antialias, n in ((False, 16384), (True, 1000)):
        got = arrpos.resample(table, n, antialias=antialias)
        x = torch.from_numpy(table.T[None, :, None, :])  # (1, dim, 1, n)
        ref = torch.nn.functional.interpolate(x, size=(1, n), mode="bilinear",
                                              align_corners=False, antialias=antialias)
        np.testing.assert_allclose(got, ref[0, :, 0].numpy().T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call, name", [
    (lambda: arrpos.relative_positions(10**6, 10**6), "matrix"),
    (lambda: arrpos.relative_index_nd((2 * 10**5,)), "index"),
    (lambda: arrpos.packed_mask([10**6]), "mask"),
    (lambda: arrpos.packed_positions(np.array([2**40])), "packed row"),
    (lambda: arrpos.resample(np.ones((4, 2)), 10**12), "resampled table"),
    (lambda: arrpos.resample(np.ones((4, 2)), (10**6, 10**6)), "resampled table"),
    (lambda: arrpos.similarity(np.ones((10**6, 1))), "similarity"),
    (lambda: arrpos.attention(np.ones((10**6, 1)), np.ones((10**6, 1)), np.ones((10**6, 1))),
     "attention scores"),
    (lambda: arrpos.alibi_bias_from_positions(np.ones(2), np.arange(10**6), np.arange(10**6)),
     "bias"),
])
def test_outputs_too_large_are_refused_before_any_work(call, name):
    """These raised MemoryError (or tried to allocate terabytes)."""
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("call, name", [
    (lambda: arrpos.grid_coords((3, 3), scale=1e308), "scale"),
    (lambda: arrpos.grid_coords((10, 3), scale=1e38, dtype=np.float32), "scale"),
    (lambda: arrpos.learned_init(3, 3, std=1e200, seed=0, dtype=np.float32), "std"),
    (lambda: arrpos.learned_init(30, 30, std=1e308, seed=0), "std"),
    (lambda: arrpos.packed_positions([10**30]), "lengths"),
])
def test_scaling_parameters_that_overflow_are_refused_by_name(call, name):
    """These gave inf tables (with a RuntimeWarning) or a bare OverflowError."""
    with pytest.raises(ValueError, match=name):
        call()


# --------------------------------------------------------------------------- 3. 16-bit


def _correct_bf16_bits(x64):
    """Correct rounding to bfloat16 by brute force: for each float64 ``x`` the nearest of a
    candidate and its two bfloat16 neighbours, ties to the even bit pattern (the distances are
    differences of nearby floats, exact in float64)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    c = x64.astype(np.float32).astype(bf)
    cands = np.stack([c, np.nextafter(c, bf(np.inf)), np.nextafter(c, bf(-np.inf))])
    bits = cands.view(np.uint16)
    dist = np.abs(cands.astype(np.float64) - x64)
    best = dist.min(axis=0)
    # among the nearest, the even pattern
    score = np.where(dist == best, (bits & 1).astype(np.int64), 2)
    return np.take_along_axis(bits, np.argmin(score, axis=0)[None], axis=0)[0]


def _bits16(x):
    """The bit patterns of a 16-bit array of any library."""
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.view(torch.int16).numpy().astype(np.uint16)
    except ImportError:
        pass
    return np.asarray(x).view(np.uint16)


def test_round_once_gives_the_correctly_rounded_16_bit_value():
    """The generic twins rounded float64 -> float32 -> bfloat16 (twice): about one element in
    2**16 landed on a tie and went to even, the wrong way (the compiled kernels round once)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from arrpos._lib import namespace_for, round_once

    rng = np.random.default_rng(1)
    # values just off the float32 ties of bfloat16, where double rounding goes wrong
    ties = ((rng.integers(0x3F00, 0x4700, 2000) << 16) | (1 << 15)).astype(np.uint32)
    x = ties.view(np.float32).astype(np.float64)
    x = np.concatenate([x * (1 + 2.0**-40), -x * (1 - 2.0**-40), rng.standard_normal(2000)])
    want = _correct_bf16_bits(x)
    got = round_once(namespace_for(np), x, ml_dtypes.bfloat16)
    np.testing.assert_array_equal(_bits16(got), want)
    torch = pytest.importorskip("torch")
    got = round_once(namespace_for(torch), torch.from_numpy(x), torch.bfloat16)
    np.testing.assert_array_equal(_bits16(got), want)
    # float16 through torch (NumPy's own float64 -> float16 cast is already correct)
    want16 = x.astype(np.float16)
    got16 = round_once(namespace_for(torch), torch.from_numpy(x), torch.float16)
    np.testing.assert_array_equal(_bits16(got16), want16.view(np.uint16))


@pytest.mark.parametrize("func", ["sinusoidal", "timestep_embedding", "sinusoidal_nd"])
def test_tables_from_bfloat16_numpy_positions(func):
    """bfloat16 (ml_dtypes) positions raised 'dtype argument must be a NumPy dtype'. The table
    is bfloat16, the float64 table rounded once."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    p = np.array([0.0, 1.0, 2.5, 100.0, 3000.0])
    make = {"sinusoidal": lambda q: arrpos.sinusoidal(q, 64),
            "timestep_embedding": lambda q: arrpos.timestep_embedding(q, 64),
            "sinusoidal_nd": lambda q: arrpos.sinusoidal_nd(q.reshape(-1, 1), 64)}[func]
    got = make(p.astype(bf))
    assert got.dtype == bf
    ref = np.asarray(make(p.astype(bf).astype(np.float64)))  # the same positions, float64
    np.testing.assert_array_equal(_bits16(got), _correct_bf16_bits(ref))


def test_generic_bfloat16_tables_are_rounded_once():
    """The generic twin (here: torch positions that require grad) rounded float64 tables to
    bfloat16 through float32: one element of 192,000 differed from the compiled kernels'."""
    torch = pytest.importorskip("torch")
    p = torch.arange(3000.0, dtype=torch.float64, requires_grad=True)
    got = arrpos.sinusoidal(p, 64, dtype=torch.bfloat16)
    ref = arrpos.sinusoidal(p, 64).detach().numpy()
    np.testing.assert_array_equal(_bits16(got.detach()), _correct_bf16_bits(ref))


def test_alibi_bfloat16_biases_are_rounded_once():
    """bfloat16 slopes times positions past 256: the position was rounded to bfloat16 first
    (alibi_bias_from_mask, the generic alibi_bias), or the float64 product went through
    float32 (alibi_bias_from_positions): two roundings."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    slopes = np.array([0.5, 0.3, 0.0078125 * 3], dtype=bf)
    s64 = slopes.astype(np.float64)
    n = 3000
    pos = np.arange(n, dtype=np.float64)
    mask = np.ones((1, n), dtype=np.int64)
    got = arrpos.alibi_bias_from_mask(slopes, mask)[0, :, 0]
    np.testing.assert_array_equal(_bits16(got), _correct_bf16_bits(s64[:, None] * pos))
    got = arrpos.alibi_bias_from_positions(slopes, np.array([n - 1]), np.arange(n))[:, 0]
    np.testing.assert_array_equal(_bits16(got),
                                  _correct_bf16_bits(0.0 - s64[:, None] * (n - 1 - pos)))
    torch = pytest.importorskip("torch")  # the generic alibi_bias: torch slopes with grad
    t = torch.from_numpy(s64).to(torch.bfloat16).requires_grad_()
    got = arrpos.alibi_bias(t, 1, n, mode="key")[:, 0].detach()
    np.testing.assert_array_equal(_bits16(got), _correct_bf16_bits(s64[:, None] * pos))


def test_decode_sinusoidal_of_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    enc = arrpos.sinusoidal(np.array([0.0, 5.0, 30.0]), 64).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(arrpos.decode_sinusoidal(enc), [0.0, 5.0, 30.0], atol=0.05)


def _attention_ref(q, k, v, scale=None):
    """float64 softmax attention, a loop over rows."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


def test_attention_keeps_bfloat16():
    """bfloat16 q, k, v (ml_dtypes) came back float32."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 5, 8)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = arrpos.attention(q, k, v)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(np.float64), _attention_ref(q, k, v), rtol=2e-2,
                               atol=2e-2)
    for f in (lambda a: arrpos.similarity(a[0]), lambda a: arrpos.rel_shift(a),
              lambda a: arrpos.conv_positional(a, a[0, :3]),
              lambda a: arrpos.shaw_key_scores(a, a[0], np.zeros((5, 5), dtype=np.int64))):
        assert f(q).dtype == ml_dtypes.bfloat16


def test_attention_float16_does_not_overflow_before_scaling():
    """float16 q k^T overflowed at 65504 before the 1/sqrt(d) scale: all NaN where torch's
    scaled_dot_product_attention is finite."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((1, 2, 6, 64)) * 100).astype(np.float16)
    k = (rng.standard_normal((1, 2, 6, 64)) * 100).astype(np.float16)
    v = rng.standard_normal((1, 2, 6, 64)).astype(np.float16)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v))).numpy()
    assert np.isfinite(ref).all()
    for make in (np.asarray, torch.from_numpy):
        got = np.asarray(arrpos.attention(make(q), make(k), make(v)))
        assert got.dtype == np.float16 and np.isfinite(got).all()
        np.testing.assert_allclose(got.astype(np.float64), _attention_ref(q, k, v), atol=2e-3)
        np.testing.assert_allclose(got, ref, atol=2e-3)


def test_conv_positional_sums_bfloat16_taps_in_float32():
    """The taps were summed in bfloat16 (8 bits per partial sum): several ulps off."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((31, 4)).astype(ml_dtypes.bfloat16)
    got = arrpos.conv_positional(x, w, activation=None, residual=False)
    xp64, w64 = x.astype(np.float64), w.astype(np.float64)
    pad = np.concatenate([np.zeros((15, 4)), xp64, np.zeros((15, 4))])
    ref = np.stack([(pad[t:t + 31] * w64).sum(axis=0) for t in range(64)])
    ulp = np.abs(ref).astype(ml_dtypes.bfloat16).astype(np.float64) * 2.0**-7
    assert (np.abs(got.astype(np.float64) - ref) <= ulp + 1e-30).all()


# --------------------------------------------------------------------------- 4-6. the boundary

_F = np.linspace(-1.0, 1.0, 24)
# every public function that takes arrays: (name, call, its array arguments by name)
ARRAY_CALLS = [
    ("sinusoidal", lambda a: arrpos.sinusoidal(a["positions"], 8),
     {"positions": np.arange(4)}),
    ("sinusoidal_nd", lambda a: arrpos.sinusoidal_nd(a["coords"], 8),
     {"coords": np.ones((3, 2))}),
    ("timestep_embedding", lambda a: arrpos.timestep_embedding(a["timesteps"], 8),
     {"timesteps": np.arange(3)}),
    ("decode_sinusoidal", lambda a: arrpos.decode_sinusoidal(a["encoding"]),
     {"encoding": np.asarray(arrpos.sinusoidal(3, 8))}),
    ("lookup", lambda a: arrpos.lookup(a["table"], a["positions"]),
     {"table": np.ones((4, 2)), "positions": np.array([[0, 3]])}),
    ("resample", lambda a: arrpos.resample(a["table"], 6), {"table": np.ones((4, 2))}),
    ("shaw_index", lambda a: arrpos.shaw_index(a["relative"], max_distance=2),
     {"relative": np.array([[-3, 0, 3]])}),
    ("t5_bucket", lambda a: arrpos.t5_bucket(a["relative"]), {"relative": np.array([[-3, 3]])}),
    ("deberta_bucket", lambda a: arrpos.deberta_bucket(a["relative"]),
     {"relative": np.array([[-3, 3]])}),
    ("relative_bias", lambda a: arrpos.relative_bias(a["table"], a["index"]),
     {"table": np.ones((4, 2)), "index": np.array([[0, 3]])}),
    ("rel_shift", lambda a: arrpos.rel_shift(a["scores"]), {"scores": np.ones((3, 3))}),
    ("shaw_key_scores", lambda a: arrpos.shaw_key_scores(a["q"], a["table"], a["index"]),
     {"q": np.ones((2, 4)), "table": np.ones((3, 4)), "index": np.zeros((2, 2), dtype=int)}),
    ("shaw_value_term", lambda a: arrpos.shaw_value_term(a["weights"], a["table"], a["index"]),
     {"weights": np.ones((2, 2)), "table": np.ones((3, 4)),
      "index": np.zeros((2, 2), dtype=int)}),
    ("transformer_xl_scores",
     lambda a: arrpos.transformer_xl_scores(a["q"], a["k"], a["r"], a["u"], a["v"]),
     {"q": np.ones((2, 4)), "k": np.ones((3, 4)), "r": np.ones((3, 4)), "u": np.ones(4),
      "v": np.ones(4)}),
    ("deberta_scores",
     lambda a: arrpos.deberta_scores(a["q"], a["k"], a["pos_key"], a["pos_query"], a["bucket"]),
     {"q": np.ones((2, 4)), "k": np.ones((2, 4)), "pos_key": np.ones((4, 4)),
      "pos_query": np.ones((4, 4)), "bucket": np.zeros((2, 2), dtype=int)}),
    ("alibi_bias", lambda a: arrpos.alibi_bias(a["slopes"], 2, 3), {"slopes": np.ones(2)}),
    ("alibi_bias_from_mask", lambda a: arrpos.alibi_bias_from_mask(a["slopes"],
                                                                   a["attention_mask"]),
     {"slopes": np.ones(2), "attention_mask": np.ones((1, 3), dtype=bool)}),
    ("alibi_bias_from_positions",
     lambda a: arrpos.alibi_bias_from_positions(a["slopes"], a["query_positions"],
                                                a["key_positions"]),
     {"slopes": np.ones(2), "query_positions": np.arange(2), "key_positions": np.arange(3)}),
    ("packed_positions", lambda a: arrpos.packed_positions(a["lengths"]),
     {"lengths": np.array([2, 1])}),
    ("packed_mask", lambda a: arrpos.packed_mask(a["lengths"]), {"lengths": np.array([2, 1])}),
    ("conv_positional", lambda a: arrpos.conv_positional(a["x"], a["weight"], a["bias"]),
     {"x": np.ones((5, 2)), "weight": np.ones((3, 2)), "bias": np.ones(2)}),
    ("conv_positional_2d", lambda a: arrpos.conv_positional_2d(a["x"], a["weight"], a["bias"]),
     {"x": np.ones((3, 3, 2)), "weight": np.ones((3, 3, 2)), "bias": np.ones(2)}),
    ("attention", lambda a: arrpos.attention(a["q"], a["k"], a["v"], bias=a["bias"],
                                             mask=a["mask"]),
     {"q": np.ones((2, 4)), "k": np.ones((3, 4)), "v": np.ones((3, 4)),
      "bias": np.zeros((2, 3)), "mask": np.ones((2, 3), dtype=bool)}),
    ("attention(relative)",
     lambda a: arrpos.attention(a["q"], a["k"], a["v"],
                                relative=(a["key_table"], a["value_table"], a["index"])),
     {"q": np.ones((2, 4)), "k": np.ones((3, 4)), "v": np.ones((3, 4)),
      "key_table": np.ones((3, 4)), "value_table": np.ones((3, 4)),
      "index": np.zeros((2, 3), dtype=int)}),
    ("similarity", lambda a: arrpos.similarity(a["table"]), {"table": np.ones((3, 4))}),
    ("properties", lambda a: arrpos.properties(a["table"]),
     {"table": np.asarray(arrpos.sinusoidal(4, 8))}),
    ("rope_cos_sin", lambda a: arrpos.rope_cos_sin(a["positions"], a["inv_freq"]),
     {"positions": np.arange(3), "inv_freq": np.ones(2)}),
    ("xpos_scale", lambda a: arrpos.xpos_scale(a["positions"], 4), {"positions": np.arange(3)}),
    ("apply_rope", lambda a: arrpos.apply_rope(a["x"], a["cos"], a["sin"]),
     {"x": np.ones((3, 4)), "cos": np.ones((3, 4)), "sin": np.zeros((3, 4))}),
    ("apply_rope_cached",
     lambda a: arrpos.apply_rope_cached(a["x"], a["cos_cache"], a["sin_cache"],
                                        a["position_ids"]),
     {"x": np.ones((3, 4)), "cos_cache": np.ones((5, 2)), "sin_cache": np.zeros((5, 2)),
      "position_ids": np.arange(3)}),
]
ARGS = [(name, call, arrays, arg) for name, call, arrays in ARRAY_CALLS for arg in arrays]
_IDS = [f"{name}-{arg}" for name, _, _, arg in ARGS]


def _with(arrays, arg, value):
    return {**arrays, arg: value}


@pytest.mark.parametrize("name, call, arrays", ARRAY_CALLS, ids=[c[0] for c in ARRAY_CALLS])
def test_table_of_calls_runs(name, call, arrays):
    """The table itself is right (a guard for the tests that use it)."""
    call(arrays)


@pytest.mark.parametrize("name, call, arrays, arg", ARGS, ids=_IDS)
def test_masked_arrays_are_refused_by_name(name, call, arrays, arg):
    """A masked NaN leaked into unmasked outputs: the mask was dropped silently."""
    bad = np.ma.array(arrays[arg], mask=np.zeros(np.shape(arrays[arg]), dtype=bool))
    with pytest.raises(TypeError, match=rf"{arg} must be a plain NumPy array.*mask"):
        call(_with(arrays, arg, bad))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix itself
@pytest.mark.parametrize("name, call, arrays, arg",
                         [a for a in ARGS if np.ndim(a[2][a[3]]) == 2],
                         ids=[i for a, i in zip(ARGS, _IDS) if np.ndim(a[2][a[3]]) == 2])
def test_np_matrix_is_refused_by_name(name, call, arrays, arg):
    """np.matrix q was multiplied as a matrix (q * scale, q @ k): wrong numbers."""
    with pytest.raises(TypeError, match=rf"{arg} must be a plain NumPy array.*matrix"):
        call(_with(arrays, arg, np.asmatrix(arrays[arg])))


def test_memmap_is_a_plain_array(tmp_path):
    """np.memmap has ndarray's own arithmetic: accepted where np.matrix is refused."""
    q = np.random.default_rng(0).standard_normal((3, 4))
    mm = np.memmap(tmp_path / "q.bin", dtype=np.float64, mode="w+", shape=q.shape)
    mm[...] = q
    np.testing.assert_allclose(arrpos.attention(mm, mm, mm), _attention_ref(q, q, q))


@pytest.mark.parametrize("name, call, arrays, arg", ARGS, ids=_IDS)
def test_array_likes_are_refused_by_every_function(name, call, arrays, arg):
    """Array-likes are accepted by every function or by none: by none (lists carry no
    library, device or dtype). sinusoidal and xpos_scale took lists, the others did not."""
    if name.startswith("packed"):
        pytest.skip("lengths: a sequence of ints is part of the contract (sizes, like a shape)")
    with pytest.raises(TypeError, match=rf"{arg} must be .*got list.*asarray"):
        call(_with(arrays, arg, np.asarray(arrays[arg]).tolist()))


@pytest.mark.parametrize("name, call, arrays, arg",
                         [a for a in ARGS if len(a[2]) > 1],
                         ids=[i for a, i in zip(ARGS, _IDS) if len(a[2]) > 1])
def test_arrays_on_another_device_are_refused_by_name(name, call, arrays, arg):
    """attention(q, k_on_meta, v) and the Shaw / Transformer-XL scores returned CPU garbage
    (meta tensors) or raised torch-internal errors."""
    torch = pytest.importorskip("torch")
    on_cpu = {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}
    moved = _with(on_cpu, arg, on_cpu[arg].to("meta"))
    with pytest.raises(ValueError, match=rf"({arg} is on device meta but \w+ is on cpu|"
                                         rf"\w+ is on device cpu but {arg} is on meta)"):
        call(moved)


@pytest.mark.parametrize("name, call, arrays", ARRAY_CALLS, ids=[c[0] for c in ARRAY_CALLS])
def test_meta_tensors_skip_value_reads(name, call, arrays):
    """Meta tensors raised '.item() cannot be called on meta tensors' in the range and value
    checks; they are not read, like lazy arrays. Functions whose result is values (properties)
    or whose output shape depends on values (packed_*) say so by name."""
    torch = pytest.importorskip("torch")
    meta = {k: torch.from_numpy(np.array(v)).to("meta") for k, v in arrays.items()}
    if name in ("properties", "packed_positions", "packed_mask"):
        with pytest.raises(ValueError, match="table|lengths"):
            call(meta)
        return
    out = call(meta)
    out = out[0] if isinstance(out, tuple) else out
    assert out.device.type == "meta"


def test_mixed_libraries_name_both_arguments_and_the_fix():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"q is a torch array but k is a numpy array; "
                                        r"convert it first, e\.g\. "
                                        r"torch\.asarray\(k, device=q\.device\)"):
        arrpos.attention(torch.ones(2, 4), np.ones((2, 4)), torch.ones(2, 4))
    with pytest.raises(TypeError, match=r"xp=numpy does not match positions \(torch arrays\)"):
        arrpos.sinusoidal(torch.arange(3), 4, xp=np)


def test_attention_bias_shape_is_named():
    """A wrong bias shape leaked NumPy's 'operands could not be broadcast'."""
    q = np.ones((2, 4))
    with pytest.raises(ValueError, match=r"bias must broadcast to the scores \(\.\.\., q, k\) = "
                                         r"\(2, 2\), got shape \(3, 2\)"):
        arrpos.attention(q, q, q, bias=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="mask must broadcast"):
        arrpos.attention(q, q, q, mask=np.ones((2, 3), dtype=bool))
    heads = arrpos.attention(q, q, q, bias=np.zeros((5, 2, 2)))  # a bias may add heads
    assert heads.shape == (5, 2, 4)


SIZES = {"dim", "num_heads", "num_positions", "query_len", "key_len", "size", "shape",
         "window", "sections", "head_dim", "chunk_size", "local_size"}


def test_sizes_by_keyword_arrays_positional_only():
    """sinusoidal(10, dim=64) was a TypeError: sizes were positional-only like arrays."""
    import inspect

    for name in arrpos.__all__:
        obj = getattr(arrpos, name)
        if not inspect.isfunction(obj):
            continue
        for p in inspect.signature(obj).parameters.values():
            if p.name in SIZES:
                assert p.kind is p.POSITIONAL_OR_KEYWORD, (name, p.name)
            elif p.kind is p.POSITIONAL_OR_KEYWORD:
                raise AssertionError(f"{name}: {p.name} is neither a size nor positional-only")
    assert arrpos.sinusoidal(10, dim=64).shape == (10, 64)
    assert arrpos.alibi_bias(np.ones(2), query_len=2, key_len=3).shape == (2, 2, 3)
    assert arrpos.learned_init(num_positions=3, dim=2, seed=0).shape == (3, 2)
    assert arrpos.rope_frequencies(dim=8)[0].shape == (4,)


def test_grid_coords_refuses_a_bare_int():
    """grid_coords(14) gave a (14, 1) grid silently where timm and Swin read 14 as 14 x 14."""
    with pytest.raises(TypeError, match=r"shape must be a sequence of ints.*\(n,\) or \(n, n\)"):
        arrpos.grid_coords(14)
    assert arrpos.grid_coords((14,)).shape == (14, 1)


def test_xpos_scale_on_torch_does_not_warn():
    torch = pytest.importorskip("torch")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrpos.xpos_scale(torch.arange(4), 8)


@pytest.mark.parametrize("call, names", [
    (lambda: arrpos.transformer_xl_scores(np.ones((2, 3, 4)), np.ones((5, 3, 4)),
                                          np.ones((5, 3, 4)), np.ones(4), np.ones(4)), "q .* k"),
    (lambda: arrpos.transformer_xl_scores(np.ones((2, 3, 4)), np.ones((2, 3, 4)),
                                          np.ones((2, 3, 4)), np.ones((5, 1, 4)), np.ones(4)),
     "u"),
    (lambda: arrpos.deberta_scores(np.ones((3, 2, 4)), np.ones((3, 2, 4)), np.ones((2, 4, 4)),
                                   None, np.zeros((2, 2), dtype=int)), "pos_key"),
    (lambda: arrpos.attention(np.ones((2, 3, 4)), np.ones((2, 3, 4)), np.ones((5, 3, 4))), "v"),
])
def test_leading_axes_that_do_not_broadcast_are_named(call, names):
    """These leaked 'operands could not be broadcast' (NumPy) or 'The size of tensor a must
    match' (torch) from inside a matmul."""
    with pytest.raises(ValueError, match=rf"leading .*{names}.* do not broadcast"):
        call()


def test_attention_without_keys_attends_to_nothing():
    """k with no rows raised 'zero-size array to reduction operation maximum'; the contract
    gives a query that may attend to no key zero weights and a zero output."""
    out, w = arrpos.attention(np.ones((2, 4)), np.ones((0, 4)), np.ones((0, 3)),
                              return_weights=True)
    assert out.tolist() == [[0.0] * 3] * 2 and w.shape == (2, 0)


def test_resample_without_position_rows_is_refused():
    """An empty table raised 'cannot do a non-empty take from an empty axes'."""
    with pytest.raises(ValueError, match="table must have at least one position row"):
        arrpos.resample(np.ones((0, 4)), 4)
    with pytest.raises(ValueError, match="table must have at least one position row"):
        arrpos.resample(np.ones((1, 4)), 4, prefix_tokens=1)


@pytest.mark.parametrize("call, name", [
    (lambda v: arrpos.sinusoidal(3, 8, base=v), "base"),
    (lambda v: arrpos.timestep_embedding(np.arange(3), 8, max_period=v), "max_period"),
    (lambda v: arrpos.timestep_embedding(np.arange(3), 8, scale=v), "scale"),
    (lambda v: arrpos.grid_coords((2, 2), scale=v), "scale"),
    (lambda v: arrpos.learned_init(2, 2, std=v), "std"),
    (lambda v: arrpos.alibi_slopes(4, max_bias=v), "max_bias"),
    (lambda v: arrpos.attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)), scale=v),
     "scale"),
    (lambda v: arrpos.deberta_scores(np.ones((2, 4)), np.ones((2, 4)), None, None,
                                     np.zeros((2, 2), dtype=int), scale_factor=v),
     "scale_factor"),
])
def test_real_options_past_float64_are_value_errors_naming_them(call, name):
    """A Python int past float64 (10**400) was a TypeError 'must be a real number': it is one,
    out of range."""
    with pytest.raises(ValueError, match=rf"^{name} must be finite"):
        call(10**400)


def test_timestep_scale_is_named_when_it_pushes_timesteps_out_of_range():
    with pytest.raises(ValueError, match="times scale"):
        arrpos.timestep_embedding(np.arange(3), 8, scale=1e300)
    with pytest.raises(ValueError, match="size="):
        arrpos.resample(np.ones((4, 2)), 10**12)


def test_a_base_below_one_shrinks_the_accuracy_range():
    """base < 1 makes frequencies above 1 (1e-300 ** (-128/129) ~ 5e297): positions were still
    checked against a frequency of 1, so |p| * w reached 1e303 and the table was noise (it
    looked finite). Reference for an allowed case: a float64 loop."""
    with pytest.raises(ValueError, match=r"positions must satisfy .*base below 1"):
        arrpos.sinusoidal(np.array([0.0, 1e6]), 129, base=1e-300)
    with pytest.raises(ValueError, match=r"coords must satisfy .*base below 1"):
        arrpos.sinusoidal_nd(np.array([[1e6]]), 8, base=1e-300)
    p = np.arange(6.0) * 1000
    got = arrpos.sinusoidal(p, 8, base=0.5)
    w = 0.5 ** (-np.arange(0, 8, 2) / 8)
    ref = np.stack([np.sin(p[:, None] * w), np.cos(p[:, None] * w)], axis=-1).reshape(6, 8)
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_attention_relative_index_of_the_wrong_key_count_is_named():
    """A (q, k') index with a key table only leaked 'operands could not be broadcast'."""
    q, k = np.ones((2, 4)), np.ones((3, 4))
    with pytest.raises(ValueError, match=r"index must have shape \(2, 3\)"):
        arrpos.attention(q, k, k, relative=(np.ones((3, 4)), None, np.zeros((2, 2), dtype=int)))

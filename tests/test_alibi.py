"""ALiBi on every backend, against the reference rule and transformers' BLOOM."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arrpos


def slopes_rule(n, max_bias=8.0):
    """Press et al.'s reference code (``get_slopes``), in float64."""

    def power_of_2(m):
        start = 2 ** (-(2 ** -(math.log2(m) - math.log2(max_bias))))
        return [start * start**i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + slopes_rule(2 * c, max_bias)[0::2][: n - c]


def test_slopes_reference_rule_1_to_96(backend):
    for n in range(1, 97):
        got = backend.to_numpy(arrpos.alibi_slopes(n, xp=backend.module))
        assert got.shape == (n,)
        tol = 1e-14 if got.dtype == np.float64 else 1e-7
        np.testing.assert_allclose(got, slopes_rule(n), rtol=tol, err_msg=f"{n} heads")


@pytest.mark.parametrize("max_bias", [4.0, 8.0, 16.0])
def test_slopes_max_bias(max_bias):
    for n in (3, 8, 12, 48):
        np.testing.assert_allclose(arrpos.alibi_slopes(n, max_bias=max_bias, dtype=np.float64),
                                   slopes_rule(n, max_bias), rtol=1e-14)


def test_slopes_equal_bloom():
    torch = pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    for n in range(1, 97):
        ref = bloom._get_alibi_slopes(n, torch.device("cpu")).numpy()
        got = arrpos.alibi_slopes(n, dtype=np.float32)
        # BLOOM raises a rounded float32 base to the k-th power: its error grows with k (a few
        # ulps at k ~ 50); ours is the correctly rounded value (see the rule test above)
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{n} heads")


def _bias_loop(slopes, q, k, mode, offset):
    out = np.zeros((len(slopes), q, k))
    for h, s in enumerate(slopes):
        for i in range(q):
            for j in range(k):
                d = (i + offset) - j
                if mode == "causal":
                    out[h, i, j] = -s * d if d >= 0 else 0.0
                elif mode == "symmetric":
                    out[h, i, j] = -s * abs(d)
                else:
                    out[h, i, j] = s * j
    return out


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
@pytest.mark.parametrize("q,k,offset", [(5, 5, None), (1, 9, None), (3, 8, 2), (4, 4, -1)])
def test_alibi_bias_modes(backend, mode, q, k, offset):
    slopes = slopes_rule(6)
    s = backend.asarray(np.array(slopes))
    got = backend.to_numpy(arrpos.alibi_bias(s, q, k, mode=mode, query_offset=offset))
    ref = _bias_loop(slopes, q, k, mode, k - q if offset is None else offset)
    assert got.shape == (6, q, k)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)


def test_causal_and_key_give_the_same_softmax(backend):
    s = backend.asarray(np.array(slopes_rule(4)))
    a = backend.to_numpy(arrpos.alibi_bias(s, 6, 6, mode="causal"))
    b = backend.to_numpy(arrpos.alibi_bias(s, 6, 6, mode="key"))
    future = np.triu(np.ones((6, 6), dtype=bool), 1)

    def softmax(x):
        x = np.where(future, -np.inf, x)
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    np.testing.assert_allclose(softmax(a), softmax(b), rtol=1e-5)


def test_bias_dtype_follows_slopes(backend):
    s32 = arrpos.alibi_slopes(4, dtype=backend.xp.float32, xp=backend.module)
    assert arrpos.alibi_bias(s32, 2, 3).dtype == backend.xp.float32


def test_from_mask_equals_bloom(backend):
    torch = pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    mask = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    for heads in (1, 4, 6, 12):
        ref = bloom.build_alibi_tensor(torch.from_numpy(mask), heads, torch.float32).numpy()
        s = arrpos.alibi_slopes(heads, dtype=backend.xp.float32, xp=backend.module)
        got = backend.to_numpy(arrpos.alibi_bias_from_mask(s, backend.asarray(mask)))
        assert got.shape == (3, heads, 1, 6)
        np.testing.assert_allclose(got.reshape(3 * heads, 1, 6), ref, rtol=1e-6, atol=0)
        boolean = backend.to_numpy(arrpos.alibi_bias_from_mask(s, backend.asarray(mask == 1)))
        np.testing.assert_array_equal(boolean, got)


def test_left_padding_matches_unpadded(backend):
    s = backend.asarray(np.array(slopes_rule(4)))
    padded = backend.to_numpy(arrpos.alibi_bias_from_mask(
        s, backend.asarray(np.array([[0, 0, 1, 1, 1]]))))
    plain = backend.to_numpy(arrpos.alibi_bias(s, 1, 3, mode="key"))
    np.testing.assert_allclose(padded[0, :, :, 2:], plain, rtol=1e-7)


def test_jit_and_lazy():
    jax = pytest.importorskip("jax")
    s = arrpos.alibi_slopes(4, xp=jax.numpy)
    out = jax.jit(lambda t: arrpos.alibi_bias(t, 3, 5))(s)
    np.testing.assert_allclose(np.asarray(out), _bias_loop(slopes_rule(4), 3, 5, "causal", 2),
                               rtol=1e-6)
    da = pytest.importorskip("dask.array")
    m = da.from_array(np.array([[0, 1, 1]]), chunks=1)
    lazy = arrpos.alibi_bias_from_mask(da.from_array(np.array(slopes_rule(2))), m)
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute()[0, :, 0], [[0, 0, 0.0625], [0, 0, 0.00390625]])


def test_errors():
    with pytest.raises(ValueError, match="num_heads"):
        arrpos.alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads"):
        arrpos.alibi_slopes(4.0)
    with pytest.raises(ValueError, match="max_bias"):
        arrpos.alibi_slopes(4, max_bias=0)
    with pytest.raises(TypeError, match="max_bias"):
        arrpos.alibi_slopes(4, max_bias="8")
    with pytest.raises(TypeError, match="dtype"):
        arrpos.alibi_slopes(4, dtype=np.int32)
    s = arrpos.alibi_slopes(4)
    with pytest.raises(ValueError, match="mode"):
        arrpos.alibi_bias(s, 2, 2, mode="future")
    with pytest.raises(ValueError, match="slopes"):
        arrpos.alibi_bias(s.reshape(2, 2), 2, 2)
    with pytest.raises(TypeError, match="slopes"):
        arrpos.alibi_bias(np.arange(4), 2, 2)
    with pytest.raises(TypeError, match="slopes"):
        arrpos.alibi_bias([0.5, 0.25], 2, 2)
    with pytest.raises(ValueError, match="key_len"):
        arrpos.alibi_bias(s, 2, -1)
    with pytest.raises(TypeError, match="query_offset"):
        arrpos.alibi_bias(s, 2, 2, query_offset=1.5)
    with pytest.raises(TypeError, match="attention_mask"):
        arrpos.alibi_bias_from_mask(s, np.ones((1, 3)))
    with pytest.raises(ValueError, match="attention_mask"):
        arrpos.alibi_bias_from_mask(s, np.ones(3, dtype=np.int64))
    with pytest.raises(ValueError, match="attention_mask"):
        arrpos.alibi_bias_from_mask(s, np.array([[0, 2, 1]]))


# ----------------------------------------------------- tensor-parallel slopes, custom positions

@pytest.mark.parametrize("total", [8, 12, 32, 40, 96])
def test_slopes_tensor_parallel_slices(backend, total):
    whole = backend.to_numpy(arrpos.alibi_slopes(total, xp=backend.module))
    for ranks in (1, 2, 4):
        if total % ranks:
            continue
        n = total // ranks
        for r in range(ranks):
            part = arrpos.alibi_slopes(n, head_offset=r * n, total_heads=total, xp=backend.module)
            np.testing.assert_array_equal(backend.to_numpy(part), whole[r * n:(r + 1) * n])
    odd = arrpos.alibi_slopes(3, head_offset=5, total_heads=total, max_bias=4.0,
                              dtype=backend.xp.float32, xp=backend.module)
    np.testing.assert_array_equal(backend.to_numpy(odd),
                                  np.float32(slopes_rule(total, 4.0)[5:8]))


def _from_positions_loop(slopes, qpos, kpos, mode):
    """``alibi_bias`` of API.md, one pair at a time, for 1-D positions."""
    out = np.zeros((len(slopes), len(qpos), len(kpos)))
    for h, s in enumerate(slopes):
        for i, qp in enumerate(qpos):
            for j, kp in enumerate(kpos):
                d = float(qp) - float(kp)
                out[h, i, j] = {"causal": -s * d if d >= 0 else 0.0,
                                "symmetric": -s * abs(d), "key": s * float(kp)}[mode]
    return out


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
def test_from_positions_equals_alibi_bias_on_aranges(backend, mode):
    s = arrpos.alibi_slopes(6, xp=backend.module)
    for q, k, off in [(4, 4, 0), (1, 7, 6), (3, 6, 1)]:
        qpos = backend.asarray(np.arange(q) + off)
        kpos = backend.asarray(np.arange(k))
        got = arrpos.alibi_bias_from_positions(s, qpos, kpos, mode=mode)
        ref = arrpos.alibi_bias(s, q, k, mode=mode, query_offset=off)
        np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(ref))


@pytest.mark.parametrize("mode", ["causal", "symmetric", "key"])
def test_from_positions_reordered_and_real(backend, mode):
    rng = np.random.default_rng(1)
    qpos = rng.permutation(9)[:5]
    kpos = np.array([7.5, -2.25, 0.0, 3.0, 1e6 + 0.5, 4.0])
    slopes = np.array(slopes_rule(3))
    got = backend.to_numpy(arrpos.alibi_bias_from_positions(
        backend.asarray(slopes), backend.asarray(qpos), backend.asarray(kpos), mode=mode))
    ref = _from_positions_loop(slopes, qpos, kpos, mode)
    tol = 1e-10 if got.dtype == np.float64 else 2e-7
    np.testing.assert_allclose(got, ref, rtol=tol, atol=0)


def test_from_positions_broadcasts_leading_axes(backend):
    s = arrpos.alibi_slopes(2, xp=backend.module)
    qpos = backend.asarray(np.array([[3, 1], [0, 2]]))  # (batch, q)
    kpos = backend.asarray(np.arange(4))  # (k,) shared by the batch
    got = backend.to_numpy(arrpos.alibi_bias_from_positions(s, qpos, kpos))
    assert got.shape == (2, 2, 2, 4)
    sl = backend.to_numpy(s)
    for b in range(2):
        np.testing.assert_allclose(got[b], _from_positions_loop(sl, [[3, 1], [0, 2]][b],
                                                                range(4), "symmetric"))


def test_from_positions_equals_x_transformers(backend):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("x_transformers.x_transformers")
    rng = np.random.default_rng(2)
    pos_i = rng.integers(0, 5000, size=(2, 7))
    pos_j = rng.integers(0, 5000, size=(2, 9))
    for heads in (4, 6, 8):
        peer = xt.AlibiPositionalBias(heads=heads, total_heads=heads)
        ref32 = peer.forward_custom_pos(torch.from_numpy(pos_i), torch.from_numpy(pos_j))
        s32 = arrpos.alibi_slopes(heads, dtype=backend.xp.float32, xp=backend.module)
        np.testing.assert_array_equal(backend.to_numpy(s32), peer.slopes.reshape(-1).numpy())
        got = arrpos.alibi_bias_from_positions(s32, backend.asarray(pos_i),
                                               backend.asarray(pos_j))
        # float32: integer distances below 2**24 make both products correctly rounded: equal
        np.testing.assert_array_equal(backend.to_numpy(got), ref32.numpy())
        if backend.float64:
            s64 = arrpos.alibi_slopes(heads, dtype=backend.xp.float64, xp=backend.module)
            peer.slopes = torch.from_numpy(backend.to_numpy(s64)).reshape(heads, 1, 1)
            real_i, real_j = pos_i + 0.25, pos_j * 0.5
            ref64 = peer.forward_custom_pos(torch.from_numpy(real_i), torch.from_numpy(real_j))
            got64 = arrpos.alibi_bias_from_positions(s64, backend.asarray(real_i),
                                                     backend.asarray(real_j))
            np.testing.assert_allclose(backend.to_numpy(got64), ref64.numpy(), rtol=1e-10,
                                       atol=0)


def test_slopes_and_positions_errors():
    with pytest.raises(ValueError, match="total_heads"):
        arrpos.alibi_slopes(4, head_offset=6, total_heads=8)
    with pytest.raises(ValueError, match="total_heads"):
        arrpos.alibi_slopes(4, head_offset=1)
    with pytest.raises(ValueError, match="head_offset"):
        arrpos.alibi_slopes(4, head_offset=-1, total_heads=8)
    with pytest.raises(TypeError, match="total_heads"):
        arrpos.alibi_slopes(4, total_heads=8.0)
    with pytest.raises(TypeError, match="head_offset"):
        arrpos.alibi_slopes(4, head_offset="1", total_heads=8)
    s = arrpos.alibi_slopes(2)
    p = np.arange(3)
    with pytest.raises(ValueError, match="mode"):
        arrpos.alibi_bias_from_positions(s, p, p, mode="key_only")
    with pytest.raises(ValueError, match="query_positions"):
        arrpos.alibi_bias_from_positions(s, np.array(3), p)
    with pytest.raises(TypeError, match="key_positions"):
        arrpos.alibi_bias_from_positions(s, p, p > 1)
    with pytest.raises(TypeError, match="query_positions"):
        arrpos.alibi_bias_from_positions(s, [0, 1], p)
    with pytest.raises(ValueError, match="broadcast"):
        arrpos.alibi_bias_from_positions(s, np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="key_positions"):
        arrpos.alibi_bias_from_positions(s, p, np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="slopes"):
        arrpos.alibi_bias_from_positions(s[None], p, p)

"""A small T5-style encoder in plain NumPy: one bucketed relative bias shared by every layer.

T5 computes the bias ``(heads, q, k)`` once, from ``t5_bucket(relative_positions(...))`` and a
learned ``(num_buckets, heads)`` table, and adds it in every layer. The script checks the
vectorised bias against a direct Python loop, and that the encoder is translation-equivariant
in the sense T5 relies on: with no absolute positions, a sequence shifted inside a longer
context of padding-free tokens sees the same relative biases.
"""
import numpy as np

import arrpos

rng = np.random.default_rng(0)
VOCAB, D, HEADS, LAYERS, BUCKETS, MAX_DIST = 40, 32, 4, 3, 32, 128
emb = rng.standard_normal((VOCAB, D)) * 0.3
bias_table = rng.standard_normal((BUCKETS, HEADS))  # relative_attention_bias.weight
layers = [{name: rng.standard_normal((D, D)) / np.sqrt(D) for name in ("q", "k", "v", "o")}
          for _ in range(LAYERS)]


def rms_norm(x):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def encoder(tokens, bias):
    n = tokens.shape[-1]
    x = emb[tokens]
    for p in layers:  # the same bias in every layer, as in T5
        h = rms_norm(x)
        q, k, v = ((h @ p[name]).reshape(n, HEADS, -1).transpose(1, 0, 2) for name in "qkv")
        a = arrpos.attention(q, k, v, bias=bias, scale=1.0)  # T5 does not scale the scores
        x = x + a.transpose(1, 0, 2).reshape(n, D) @ p["o"]
    return rms_norm(x)


n = 150  # longer than max_distance: the last bucket is reached
rel = arrpos.relative_positions(n, n)
bias = arrpos.relative_bias(bias_table, arrpos.t5_bucket(rel, num_buckets=BUCKETS,
                                                         max_distance=MAX_DIST))
assert bias.shape == (HEADS, n, n)

# the vectorised bias equals a direct loop over the (query, key) pairs with T5's rule
def bucket_loop(r):
    nb = BUCKETS // 2
    out = nb if r > 0 else 0
    r = abs(r)
    me = nb // 2
    if r < me:
        return out + r
    big = me + int(np.float32(np.log(np.float32(r) / np.float32(me)))
                   / np.float32(np.log(MAX_DIST / me)) * np.float32(nb - me))
    return out + min(big, nb - 1)


for i in range(0, n, 7):
    for j in range(0, n, 5):
        assert np.array_equal(bias[:, i, j], bias_table[bucket_loop(j - i)]), (i, j)

tokens = rng.integers(0, VOCAB, size=n)
out = encoder(tokens, bias)
assert out.shape == (n, D) and np.isfinite(out).all()

# relative positions only: the bias of a window is the top-left block of the full bias, so a
# 40-token sequence encodes the same whether its bias comes from a 40x40 or a 150x150 matrix
window = tokens[:40]
small = arrpos.relative_bias(bias_table, arrpos.t5_bucket(arrpos.relative_positions(40, 40)))
assert np.array_equal(small, bias[:, 60:100, 60:100])  # Toeplitz: any block of the diagonal
np.testing.assert_allclose(encoder(window, small), encoder(window, bias[:, :40, :40]), atol=0)
print("T5 encoder:", out.shape, "bias shared across", LAYERS, "layers; buckets used:",
      len(np.unique(np.asarray(arrpos.t5_bucket(rel)))))

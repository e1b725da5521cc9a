"""A small LLaMA-architecture decoder in pure NumPy, with arrpos doing the rotary parts.

Random weights; RMSNorm, grouped-query attention, SwiGLU MLP, Llama 3.1 RoPE scaling, a KV
cache and token-by-token decoding. The script checks that decoding with the cache gives the same
logits as one full forward pass over the whole sequence, then prints a short summary.

    python examples/numpy_llama.py
"""
from __future__ import annotations

import numpy as np

import arrpos

CONFIG = {  # the keys of a transformers LLaMA config.json
    "vocab_size": 96,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
}


def init_weights(cfg, seed=0):
    rng = np.random.default_rng(seed)
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    hd = d // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd

    def w(*shape):
        return rng.standard_normal(shape) / np.sqrt(shape[0])

    layers = [
        {
            "attn_norm": 1.0 + 0.1 * rng.standard_normal(d),
            "wq": w(d, d), "wk": w(d, kv), "wv": w(d, kv), "wo": w(d, d),
            "mlp_norm": 1.0 + 0.1 * rng.standard_normal(d),
            "w_gate": w(d, f), "w_up": w(d, f), "w_down": w(f, d),
        }
        for _ in range(cfg["num_hidden_layers"])
    ]
    return {"embed": rng.standard_normal((cfg["vocab_size"], d)), "layers": layers,
            "norm": np.ones(d), "lm_head": w(d, cfg["vocab_size"])}


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


class KVCache:
    """Per layer: keys and values of every position seen so far, (seq, kv_heads, head_dim)."""

    def __init__(self, num_layers):
        self.keys = [None] * num_layers
        self.values = [None] * num_layers

    def update(self, layer, k, v):
        if self.keys[layer] is not None:
            k = np.concatenate([self.keys[layer], k], axis=0)
            v = np.concatenate([self.values[layer], v], axis=0)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    @property
    def length(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[0]


def attention(q, k, v, q_pos, k_pos):
    """Causal grouped-query attention: q (s, H, hd), k/v (t, KV, hd), absolute positions."""
    groups = q.shape[1] // k.shape[1]
    k = np.repeat(k, groups, axis=1)  # each key/value head serves `groups` query heads
    v = np.repeat(v, groups, axis=1)
    scores = np.einsum("shd,thd->hst", q, k) / np.sqrt(q.shape[-1])
    future = k_pos[None, :] > q_pos[:, None]
    scores = np.where(future[None], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hst,thd->shd", p, v)


def forward(tokens, weights, cfg, rope, cache=None):
    """Logits (seq, vocab) for ``tokens`` following the ``cache.length`` tokens already seen."""
    h_q, h_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // h_q
    eps = cfg["rms_norm_eps"]
    start = 0 if cache is None else cache.length
    positions = np.arange(start, start + len(tokens))
    # one cos/sin table per step, shared by every layer; (seq, 1, hd) broadcasts over the heads
    cos, sin = rope.cos_sin(positions, dtype=np.float64)
    cos, sin = cos[:, None, :], sin[:, None, :]
    x = weights["embed"][tokens]
    for i, layer in enumerate(weights["layers"]):
        h = rms_norm(x, layer["attn_norm"], eps)
        q = (h @ layer["wq"]).reshape(-1, h_q, hd)
        k = (h @ layer["wk"]).reshape(-1, h_kv, hd)
        v = (h @ layer["wv"]).reshape(-1, h_kv, hd)
        q = arrpos.apply_rope(q, cos, sin, layout=rope.layout)
        k = arrpos.apply_rope(k, cos, sin, layout=rope.layout)
        if cache is not None:
            k, v = cache.update(i, k, v)
        k_pos = np.arange(k.shape[0])
        o = attention(q, k, v, positions, k_pos).reshape(len(tokens), -1)
        x = x + o @ layer["wo"]
        h = rms_norm(x, layer["mlp_norm"], eps)
        x = x + (silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"]
    return rms_norm(x, weights["norm"], eps) @ weights["lm_head"]


def main(seq_len=24, prefill=5, seed=0):
    cfg = CONFIG
    rope = arrpos.RoPE.from_hf_config(cfg)
    weights = init_weights(cfg, seed)
    tokens = np.random.default_rng(seed + 1).integers(0, cfg["vocab_size"], size=seq_len)

    full = forward(tokens, weights, cfg, rope)

    cache = KVCache(cfg["num_hidden_layers"])
    steps = [forward(tokens[:prefill], weights, cfg, rope, cache)]
    for t in range(prefill, seq_len):  # one token at a time, positions continue from the cache
        steps.append(forward(tokens[t:t + 1], weights, cfg, rope, cache))
    cached = np.concatenate(steps, axis=0)

    err = float(np.abs(cached - full).max())
    assert cached.shape == full.shape == (seq_len, cfg["vocab_size"])
    assert err < 1e-9, f"cached decoding differs from the full forward by {err}"
    # greedy continuation from the cache, as a user would generate
    nxt = int(np.argmax(cached[-1]))
    more = forward(np.array([nxt]), weights, cfg, rope, cache)
    assert more.shape == (1, cfg["vocab_size"]) and cache.length == seq_len + 1

    print(f"rope: {rope!r}")
    print(f"layers={cfg['num_hidden_layers']} heads={cfg['num_attention_heads']} "
          f"kv_heads={cfg['num_key_value_heads']} head_dim={rope.head_dim}")
    print(f"{seq_len} tokens: prefill {prefill} + {seq_len - prefill} cached steps; "
          f"max |cached - full| logits = {err:.1e}")
    print(f"next token (greedy): {nxt}")
    return err


if __name__ == "__main__":
    main()

"""Training: forward and backward of ``apply_rope_qk`` on tensors that require grad (CPU).

Rows: one training step's rotation, ``q`` and ``k`` ``(4, 2048, 32, 128)`` (batch, seq, heads,
dim) requiring grad, tables ``(1, 2048, 1, 128)`` that do not: the forward rotation and the
backward to ``q`` and ``k`` for given upstream gradients (``torch.autograd.grad``), float32 and
bfloat16, half layout. arrpos runs its kernels through its ``torch.library`` custom op (the
backward is the inverse rotation, the same kernel). Baselines, timed in the same run and
interleaved: transformers' ``apply_rotary_pos_emb`` (LLaMA's ``rotate_half``) in eager torch,
and the same function under ``torch.compile`` (Inductor, default mode; compiled before timing).
Threads: torch and arrpos's kernels use the same count (``OMP_NUM_THREADS``, else the kernels').
"""
from __future__ import annotations

import os

import arrpos

from ._timing import interleaved

SHAPE = (4, 2048, 32, 128)
QUICK = (1, 512, 32, 128)


def _threads() -> int:
    from arrpos._dispatch import compiled_threads

    return int(os.environ.get("OMP_NUM_THREADS") or compiled_threads()["threads"] or 1)


def _hf():
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError:
        return None
    return apply_rotary_pos_emb


def _step(rotate, q, k, gq, gk):
    """One forward and backward of ``rotate`` (gradients returned, none accumulated)."""
    def step():
        qr, kr = rotate(q, k)
        return __import__("torch").autograd.grad((qr, kr), (q, k), (gq, gk))
    return step


def _inputs(torch, shape, dtype):
    b, s, h, d = shape
    g = torch.Generator().manual_seed(0)
    q, k, gq, gk = (torch.randn(shape, generator=g).to(dtype) for _ in range(4))
    inv, _ = arrpos.rope_frequencies(d)
    cos, sin = arrpos.rope_cos_sin(torch.arange(s), torch.as_tensor(inv), dtype=dtype)
    return q.requires_grad_(), k.requires_grad_(), gq, gk, cos, sin


def rows_for(torch, shape, dtype, rounds):
    hf = _hf()
    q, k, gq, gk, cos, sin = _inputs(torch, shape, dtype)
    c4, s4 = cos[None, :, None, :], sin[None, :, None, :]  # (1, seq, 1, dim)
    c3, s3 = cos[None], sin[None]  # transformers' (batch, seq, dim), unsqueezed at dim 2
    funcs = {"arrpos": _step(lambda q, k: arrpos.apply_rope_qk(q, k, c4, s4), q, k, gq, gk)}
    if hf is not None:
        def eager(q, k):
            return hf(q, k, c3, s3, unsqueeze_dim=2)

        compiled = torch.compile(eager)
        funcs["eager"] = _step(eager, q, k, gq, gk)
        funcs["compiled"] = _step(compiled, q, k, gq, gk)
    t = interleaved(funcs, rounds=rounds)
    if hf is None:
        versus = "transformers not installed: no baseline"
        second = ""
    else:
        versus = f"{t['eager'] / t['arrpos']:.2f} x faster than rotate_half eager"
        second = f"{t['compiled'] / t['arrpos']:.2f} x faster than its torch.compile"
    name = str(dtype).rsplit(".", 1)[-1]
    return [(f"apply_rope_qk fwd+bwd {name} requires_grad", str(shape), t["arrpos"] * 1e3,
             versus, second)]


def run(quick=False, rounds=None):
    try:
        import torch
    except ImportError:
        return [], "train: torch not installed"
    from arrpos._dispatch import compiled_available

    if not compiled_available()[0]:
        return [], "train: the compiled kernels are not available (nothing to time)"
    torch.set_num_threads(_threads())
    r = rounds or (3 if quick else 7)
    shape = QUICK if quick else SHAPE
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        rows += rows_for(torch, shape, dtype, r)
    return rows, f"train: {_threads()} thread(s) for arrpos and torch"

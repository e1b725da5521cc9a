"""ALiBi, the relative-bias gather, the T5 / DeBERTa buckets and the convolutional encodings:
the compiled kernels (through the public functions) against the write limit of the same output
and the code users run today (BLOOM's ``build_alibi_tensor``, T5's ``compute_bias`` in
transformers, the NumPy formula, wav2vec2's and CPVT's depthwise ``conv1d`` / ``conv2d`` in
torch, timm's ``resample_abs_pos_embed``), at the kernels' threads and at one thread (torch
held to the same count), in one interleaved run."""
from __future__ import annotations

import numpy as np

import arrpos
from arrpos import _dispatch

from ._timing import interleaved, one_thread

ALIBI = (32, 2048, 2048)  # heads, queries, keys: 512 MiB of float32
ALIBI_QUICK = (32, 1024, 512)  # 64 MiB
# rows that are not whole cache lines (a prompt's 2047 keys; T5 over 1000 tokens): each row
# starts inside a line that the row before ends in
ALIBI_ODD = (16, 1024, 2047)  # 128 MiB
T5_ODD = (16, 1000, 1000)  # 61 MiB
MASK = (8, 32, 4096)  # batch, heads, keys (BLOOM)
T5 = (16, 1024, 1024)  # heads, queries, keys: 64 MiB
SWIN_WINDOW = 32  # a (1024, 1024) index: the T5 rows' output size
BUCKETS = (2048, 2048)  # queries, keys
SHAW_K = 16  # shaw_index's max_distance
CONV = (8, 1024, 768, 5)  # batch, length, channels, kernel (wav2vec2-sized)
CONV_QUICK = (2, 512, 768, 5)
CONV2D = (8, 32, 32, 384, 3)  # batch, H, W, channels, kernel (CPVT's PEG)
CONV2D_QUICK = (2, 16, 16, 384, 3)
# (old grid, new grid, width, antialias): a ViT-L table at a new resolution, timm's defaults
RESAMPLE = (((14, 14), (32, 32), 1024, True), ((14, 14), (32, 32), 1024, False),
            ((24, 24), (48, 48), 1024, True))
RESAMPLE_QUICK = (((14, 14), (32, 32), 1024, True),)


def _threads() -> int:
    return int(_dispatch.compiled_threads()["threads"] or 1)


def _limit(t, mine, stream):
    return f"{t[mine] / t[stream]:.2f} x streaming fill"


def _torch_held(torch, n, fn):
    """``fn`` with torch's intra-op threads held to ``n`` (restored after)."""
    def call():
        was = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn()
        finally:
            torch.set_num_threads(was)
    return call


def alibi_rows(rounds, quick):
    host = _dispatch.driver("host")
    h, q, k = ALIBI_QUICK if quick else ALIBI
    s = arrpos.alibi_slopes(h, dtype=np.float32)
    buf = host.empty((h, q, k), np.dtype(np.float32))
    rows = []
    for mode in ("causal", "symmetric", "key"):
        def kernel(mode=mode):
            return arrpos.alibi_bias(s, q, k, mode=mode)

        def formula():  # the bias as model files write it: distances times slopes
            d = np.arange(k)[None, :] - np.arange(q)[:, None] - (k - q)
            return s[:, None, None] * np.minimum(d, 0).astype(np.float32)

        funcs = {"kernel": kernel, "one thread": one_thread(kernel),
                 "stream": lambda: host.stream_fill(buf),
                 "stream 1": one_thread(lambda: host.stream_fill(buf))}
        if mode == "causal":
            funcs["numpy"] = formula
        t = interleaved(funcs, rounds=rounds)
        size = f"({h}, {q}, {k}) f32"
        user = (f"{t['numpy'] / t['kernel']:.1f} x faster than the numpy formula"
                if mode == "causal" else "")
        rows.append((f"alibi_bias {mode}", size, t["kernel"] * 1e3,
                     _limit(t, "kernel", "stream"), user))
        rows.append((f"alibi_bias {mode}, 1 thread", size, t["one thread"] * 1e3,
                     _limit(t, "one thread", "stream 1"), ""))
    if not quick:
        h, q, k = ALIBI_ODD
        s = arrpos.alibi_slopes(h, dtype=np.float32)
        odd = host.empty((h, q, k), np.dtype(np.float32))

        def kernel_odd():
            return arrpos.alibi_bias(s, q, k)

        t = interleaved({"kernel": kernel_odd, "one thread": one_thread(kernel_odd),
                         "stream": lambda: host.stream_fill(odd),
                         "stream 1": one_thread(lambda: host.stream_fill(odd))}, rounds=rounds)
        size = f"({h}, {q}, {k}) f32"
        rows.append(("alibi_bias causal, 2047 keys", size, t["kernel"] * 1e3,
                     _limit(t, "kernel", "stream"), ""))
        rows.append(("alibi_bias causal, 2047 keys, 1 thread", size, t["one thread"] * 1e3,
                     _limit(t, "one thread", "stream 1"), ""))
    return rows


def mask_rows(rounds, quick):
    try:
        import torch
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    except ImportError:
        return []
    b, h, k = MASK
    mask = torch.ones(b, k, dtype=torch.long)
    mask[1::2, : k // 4] = 0  # left padding on every other row
    n = _threads()

    def mine():  # the slopes and the bias, as build_alibi_tensor computes both per call
        return arrpos.alibi_bias_from_mask(arrpos.alibi_slopes(h, xp=torch), mask)

    def bloom():
        return build_alibi_tensor(mask, h, torch.float32)

    t = interleaved({"kernel": _torch_held(torch, n, mine),
                     "one thread": one_thread(_torch_held(torch, 1, mine)),
                     "bloom": _torch_held(torch, n, bloom),
                     "bloom 1": _torch_held(torch, 1, bloom)}, rounds=rounds)
    size = f"({b}, {h}, 1, {k}) f32"
    both = "slopes and bias on both sides"  # (BLOOM builds its slopes inside the call)
    return [("alibi_bias_from_mask (torch)", size, t["kernel"] * 1e3, "",
             f"{t['bloom'] / t['kernel']:.2f} x faster than transformers build_alibi_tensor"
             f" ({both})"),
            ("alibi_bias_from_mask (torch), 1 thread", size, t["one thread"] * 1e3, "",
             f"{t['bloom 1'] / t['one thread']:.2f} x faster than build_alibi_tensor, 1 thread"
             f" ({both})")]


def t5_rows(rounds, quick):
    try:
        import torch
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:
        return []
    host = _dispatch.driver("host")
    h, q, k = T5
    cfg = T5Config(num_heads=h, d_model=64, d_kv=4, relative_attention_num_buckets=32,
                   relative_attention_max_distance=128, is_decoder=False)
    att = T5Attention(cfg, has_relative_attention_bias=True).eval()
    table = att.relative_attention_bias.weight.detach()
    index = arrpos.t5_bucket(arrpos.relative_positions(q, k, xp=torch))
    buf = host.empty((h, q, k), np.dtype(np.float32))
    n = _threads()

    def gather():
        return arrpos.relative_bias(table, index)

    ho, qo, ko = T5_ODD
    index_odd = arrpos.t5_bucket(arrpos.relative_positions(qo, ko, xp=torch))
    buf_odd = host.empty((ho, qo, ko), np.dtype(np.float32))

    def gather_odd():
        return arrpos.relative_bias(table, index_odd)

    # Swin's relative_position_index of a 32 x 32 window (the same (1024, 1024) output)
    w = SWIN_WINDOW
    c = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
    rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (w - 1)
    swin_index = rel[..., 0] * (2 * w - 1) + rel[..., 1]
    swin_table = torch.randn((2 * w - 1) ** 2, h)

    def swin():
        return arrpos.relative_bias(swin_table, swin_index)

    def t5_bias():
        return arrpos.relative_bias(table, arrpos.t5_bucket(arrpos.relative_positions(
            q, k, xp=torch)))

    def t5_fused():
        return arrpos.t5_bias(table, q, k)

    def hf():
        with torch.no_grad():
            return att.compute_bias(q, k)

    # the kernels against the fill alone (torch's threads, spinning after its calls, would
    # take their cores: the pool then runs on one), then against transformers' code beside it
    t = interleaved({"kernel": gather, "one thread": one_thread(gather),
                     "swin": swin, "swin 1": one_thread(swin),
                     "fused": t5_fused, "fused 1": one_thread(t5_fused),
                     "stream": lambda: host.stream_fill(buf),
                     "stream 1": one_thread(lambda: host.stream_fill(buf))}, rounds=rounds)
    v = interleaved({"kernel": gather_odd, "one thread": one_thread(gather_odd),
                     "stream": lambda: host.stream_fill(buf_odd),
                     "stream 1": one_thread(lambda: host.stream_fill(buf_odd))}, rounds=rounds)
    u = interleaved({"t5": _torch_held(torch, n, t5_bias), "t5 1": one_thread(
                     _torch_held(torch, 1, t5_bias)),
                     "fused": _torch_held(torch, n, t5_fused),
                     "fused 1": one_thread(_torch_held(torch, 1, t5_fused)),
                     "hf": _torch_held(torch, n, hf), "hf 1": _torch_held(torch, 1, hf)},
                    rounds=rounds)
    size = f"({h}, {q}, {k}) f32"
    return [("relative_bias gather (T5 index)", size, t["kernel"] * 1e3,
             _limit(t, "kernel", "stream"), ""),
            ("relative_bias gather (T5 index), 1 thread", size, t["one thread"] * 1e3,
             _limit(t, "one thread", "stream 1"), ""),
            ("relative_bias gather (T5 index, 1000 keys)", f"({ho}, {qo}, {ko}) f32",
             v["kernel"] * 1e3, _limit(v, "kernel", "stream"), ""),
            ("relative_bias gather (T5 index, 1000 keys), 1 thread", f"({ho}, {qo}, {ko}) f32",
             v["one thread"] * 1e3, _limit(v, "one thread", "stream 1"), ""),
            ("relative_bias gather (Swin index, 32 x 32 window)", size, t["swin"] * 1e3,
             _limit(t, "swin", "stream"), ""),
            ("relative_bias gather (Swin index), 1 thread", size, t["swin 1"] * 1e3,
             _limit(t, "swin 1", "stream 1"), ""),
            ("T5 bias: t5_bucket + relative_bias", size, u["t5"] * 1e3, "",
             f"{u['hf'] / u['t5']:.2f} x faster than transformers T5Attention.compute_bias"),
            ("T5 bias, 1 thread", size, u["t5 1"] * 1e3, "",
             f"{u['hf 1'] / u['t5 1']:.2f} x faster than compute_bias, 1 thread"),
            ("T5 bias: t5_bias(table, q, k)", size, t["fused"] * 1e3,
             _limit(t, "fused", "stream"),
             f"{u['hf'] / u['fused']:.2f} x faster than transformers T5Attention.compute_bias"
             f" (timed beside it: {u['fused'] * 1e3:.2f} ms)"),
            ("T5 bias: t5_bias, 1 thread", size, t["fused 1"] * 1e3,
             _limit(t, "fused 1", "stream 1"),
             f"{u['hf 1'] / u['fused 1']:.2f} x faster than compute_bias, 1 thread"
             f" (timed beside it: {u['fused 1'] * 1e3:.2f} ms)")]


def bucket_rows(rounds, quick):
    try:
        import torch
        from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:
        return []
    q, k = BUCKETS
    rel = arrpos.relative_positions(q, k, xp=torch)
    rel_np = arrpos.relative_positions(q, k)
    n = _threads()
    funcs = {"deberta": lambda: arrpos.deberta_bucket(rel),
             "hf deberta": lambda: make_log_bucket_position(-rel, 256, 512),
             "t5": lambda: arrpos.t5_bucket(rel),
             "hf t5": lambda: T5Attention._relative_position_bucket(rel),
             # the NumPy buckets against the same transformers code (a NumPy-only model's
             # alternative is to run it through torch)
             "deberta np": lambda: arrpos.deberta_bucket(rel_np),
             "t5 np": lambda: arrpos.t5_bucket(rel_np),
             # Shaw et al.'s index against the one-line formula a user writes instead
             "shaw": lambda: arrpos.shaw_index(rel, max_distance=SHAW_K),
             "shaw formula": lambda: torch.clamp(rel, -SHAW_K, SHAW_K) + SHAW_K,
             "shaw np": lambda: arrpos.shaw_index(rel_np, max_distance=SHAW_K),
             "shaw np formula": lambda: np.clip(rel_np, -SHAW_K, SHAW_K) + SHAW_K}
    held = {f"{name} {m}": _torch_held(torch, m, fn) for name, fn in funcs.items()
            for m in sorted({1, n})}
    t = interleaved(held, rounds=rounds)
    size = f"({q}, {k}) int64"
    rows = []
    for m in sorted({1, n}):
        tail = "" if m == n else ", 1 thread"
        rows.append((f"deberta_bucket (torch){tail}", size, t[f"deberta {m}"] * 1e3, "",
                     f"{t[f'hf deberta {m}'] / t[f'deberta {m}']:.2f} x faster than "
                     "transformers make_log_bucket_position"))
        rows.append((f"t5_bucket (torch){tail}", size, t[f"t5 {m}"] * 1e3, "",
                     f"{t[f'hf t5 {m}'] / t[f't5 {m}']:.2f} x faster than transformers "
                     "_relative_position_bucket"))
        rows.append((f"deberta_bucket (numpy){tail}", size, t[f"deberta np {m}"] * 1e3, "",
                     f"{t[f'hf deberta {m}'] / t[f'deberta np {m}']:.2f} x faster than "
                     "transformers make_log_bucket_position (torch)"))
        rows.append((f"t5_bucket (numpy){tail}", size, t[f"t5 np {m}"] * 1e3, "",
                     f"{t[f'hf t5 {m}'] / t[f't5 np {m}']:.2f} x faster than transformers "
                     "_relative_position_bucket (torch)"))
        for lib, key in (("torch", "shaw"), ("numpy", "shaw np")):
            rows.append((f"shaw_index K={SHAW_K} ({lib}){tail}", size, t[f"{key} {m}"] * 1e3,
                         "", f"{t[f'{key} formula {m}'] / t[f'{key} {m}']:.2f} x faster than "
                         f"the {lib} formula clip(rel, -K, K) + K"))
    return rows


def conv_rows(rounds, quick):
    try:
        import torch
    except ImportError:
        return []
    n = _threads()
    b, length, c, k = CONV_QUICK if quick else CONV
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(b, length, c, generator=gen)
    conv = torch.nn.Conv1d(c, c, k, padding="same", groups=c).eval()
    weight = conv.weight.detach()[:, 0, :].T.contiguous()
    bias = conv.bias.detach()

    def mine():
        return arrpos.conv_positional(x, weight, bias)

    def torch_1d():  # wav2vec2's positional convolution: channels first, GELU, + x
        with torch.no_grad():
            y = torch.nn.functional.gelu(conv(x.transpose(1, 2))).transpose(1, 2)
            return x + y

    x_cf = x.transpose(1, 2).contiguous()

    def torch_1d_cf():  # torch's best case: the data already channels first, contiguous
        with torch.no_grad():
            return x_cf + torch.nn.functional.gelu(conv(x_cf))

    hb, hh, hw, hc, hk = CONV2D_QUICK if quick else CONV2D
    x2 = torch.randn(hb, hh, hw, hc, generator=gen)
    conv2 = torch.nn.Conv2d(hc, hc, hk, padding=hk // 2, groups=hc).eval()
    weight2 = conv2.weight.detach()[:, 0].permute(1, 2, 0).contiguous()
    bias2 = conv2.bias.detach()
    tokens = x2.reshape(hb, hh * hw, hc)

    def mine_2d():
        return arrpos.conv_positional_2d(x2, weight2, bias2)

    def peg():  # CPVT's PosCNN: the token grid channels first, conv + x, back to tokens
        with torch.no_grad():
            feat = tokens.transpose(1, 2).view(hb, hc, hh, hw)
            return (conv2(feat) + feat).flatten(2).transpose(1, 2)

    funcs = {}
    for m in sorted({1, n}):
        funcs[f"1d {m}"] = _torch_held(torch, m, mine) if m == n else one_thread(mine)
        funcs[f"torch 1d {m}"] = _torch_held(torch, m, torch_1d)
        funcs[f"torch 1d cf {m}"] = _torch_held(torch, m, torch_1d_cf)
        funcs[f"2d {m}"] = _torch_held(torch, m, mine_2d) if m == n else one_thread(mine_2d)
        funcs[f"torch 2d {m}"] = _torch_held(torch, m, peg)
    t = interleaved(funcs, rounds=rounds)
    rows = []
    for m in sorted({1, n}):
        tail = "" if m == n else ", 1 thread"
        rows.append((f"conv_positional gelu + x (torch){tail}", f"({b}, {length}, {c}) k={k}",
                     t[f"1d {m}"] * 1e3, "",
                     f"{t[f'torch 1d {m}'] / t[f'1d {m}']:.2f} x faster than torch conv1d("
                     f"groups=C) + gelu + x (wav2vec2's transposes), "
                     f"{t[f'torch 1d cf {m}'] / t[f'1d {m}']:.2f} x with channels-first data"))
        rows.append((f"conv_positional_2d + x (torch){tail}",
                     f"({hb}, {hh}, {hw}, {hc}) k={hk}x{hk}", t[f"2d {m}"] * 1e3, "",
                     f"{t[f'torch 2d {m}'] / t[f'2d {m}']:.2f} x faster than torch conv2d("
                     "groups=C) + x (CPVT)"))
    return rows


def _timm_resample(torch):
    """timm's ``resample_abs_pos_embed``, its own source: from timm's installed file, as
    timm's package import needs torchvision (absent beside the CPU torch here)."""
    import ast
    import importlib.util
    import math
    import pathlib
    import typing

    try:
        from timm.layers import resample_abs_pos_embed
        return resample_abs_pos_embed
    except ImportError:
        pass
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(spec.submodule_search_locations[0]) / "layers" / "pos_embed.py"
    tree = ast.parse(path.read_text())
    fn = next((node for node in tree.body if isinstance(node, ast.FunctionDef)
               and node.name == "resample_abs_pos_embed"), None)
    if fn is None:
        return None
    fn.decorator_list = []  # (torch.fx registrations)
    scope = {"torch": torch, "F": torch.nn.functional, "math": math, "List": typing.List,
             "Optional": typing.Optional, "is_exporting": lambda: False, "_logger": None}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    return scope["resample_abs_pos_embed"]


def resample_rows(rounds, quick):
    try:
        import torch
    except ImportError:
        return []
    timm_fn = _timm_resample(torch)
    if timm_fn is None:
        return []
    n = _threads()
    gen = torch.Generator().manual_seed(0)
    funcs, cases = {}, []
    for old, new, dim, aa in RESAMPLE_QUICK if quick else RESAMPLE:
        table = torch.randn(1, 1 + old[0] * old[1], dim, generator=gen)
        name = f"{old[0]}x{old[1]}->{new[0]}x{new[1]} aa={aa}"
        cases.append((name, old, new, dim, aa))

        def mine(table=table, new=new, aa=aa):
            return arrpos.resample(table, new, prefix_tokens=1, method="cubic", antialias=aa)

        def timm(table=table, new=new, aa=aa):  # timm's defaults: bicubic, one class token
            with torch.no_grad():
                return timm_fn(table, list(new), num_prefix_tokens=1, antialias=aa)

        grid_cf = table[0, 1:].T.reshape(1, dim, *old).contiguous()

        def interp_cf(grid_cf=grid_cf, new=new, aa=aa):  # torch's best case: the grid
            # already channels first and contiguous, no class token, no copies back
            return torch.nn.functional.interpolate(grid_cf, size=new, mode="bicubic",
                                                   antialias=aa)

        for m in sorted({1, n}):
            funcs[f"{name} {m}"] = _torch_held(torch, m, mine) if m == n else one_thread(mine)
            funcs[f"{name} timm {m}"] = _torch_held(torch, m, timm)
            funcs[f"{name} cf {m}"] = _torch_held(torch, m, interp_cf)
    t = interleaved(funcs, rounds=rounds)
    rows = []
    for name, old, new, dim, aa in cases:
        for m in sorted({1, n}):
            tail = "" if m == n else ", 1 thread"
            rows.append((f"resample cubic{' antialias' if aa else ''} (torch){tail}",
                         f"1+{old[0]}x{old[1]} -> 1+{new[0]}x{new[1]} x {dim}",
                         t[f"{name} {m}"] * 1e3, "",
                         f"{t[f'{name} timm {m}'] / t[f'{name} {m}']:.2f} x faster than timm "
                         "resample_abs_pos_embed (F.interpolate), "
                         f"{t[f'{name} cf {m}'] / t[f'{name} {m}']:.2f} x than interpolate "
                         "alone on channels-first data"))
    return rows


def run(quick=False, rounds=None):
    if _dispatch.front_end("host.numpy") is None:
        return [], "families: compiled extension unavailable, nothing to compare"
    from arrpos._backends import _cpu

    rounds = rounds or (5 if quick else 15)
    rows = []
    for part in (alibi_rows, mask_rows, t5_rows, bucket_rows, conv_rows, resample_rows):
        # each group starts with the output blocks the one before kept given back: 512 MiB
        # ALiBi blocks filling the reuse budget would leave the next group's 64 MiB outputs
        # freshly mapped (page faults) on every call
        _cpu.trim_output_blocks()
        rows += part(rounds, quick)
    return rows, f"families: {_threads()} kernel thread(s); torch held to the same count"

"""Video transformers of diffusers: how each builds its rotary ids and frequencies.

Sizes are token counts (the latent's frames, height and width over the patch sizes); the ids
cover the video tokens only (these models attend to text by cross-attention, or leave the text
tokens of a joint sequence unrotated). Each id function names the diffusers 0.42.1 code it
follows.
"""
from __future__ import annotations

import numpy as np

from .sincos import cogvideox_sincos
from .spec import Block, Spec, axis_blocks, grid, powers

__all__ = ["BUILDERS", "REFUSED"]


def _video(frames, height, width, first=0):
    return grid(np.arange(frames) + first, np.arange(height), np.arange(width))


def _video_ids(*, frames, height, width):
    """``arange`` per axis, frames outermost (every ``*RotaryPosEmbed`` below)."""
    return _video(frames, height, width)


def _offset_ids(*, frames, height, width, frame_offset=0):
    """As ``_video_ids`` with the frames at ``frame_offset + arange(frames)`` (the model's
    ``indices_latents`` / ``indices_hidden_states``, ``arange`` by default)."""
    return _video(frames, height, width, frame_offset)


# --- Wan and its copies: the head split t / h / w = d - 4 (d // 6), 2 (d // 6), 2 (d // 6) ----

def _wan_blocks(r, head, theta=10000.0, split=None):
    """WanRotaryPosEmbed: per-axis tables of widths ``(t, h, w)`` concatenated; ``split`` (the
    chunks the forward cuts them into, ChronoEdit's) re-assigns pairs to axes when it differs."""
    h = 2 * (head // 6)
    dims = (head - 2 * h, h, h)
    inv = sum((powers(d, theta) for d in dims), ())
    axes = sum(((a,) * (d // 2) for a, d in enumerate(dims)), ())
    if split is not None:
        if any(s % 2 for s in split):
            raise r.fail(f"the rotary chunks {list(split)} of a {head}-wide head split a pair "
                         "of features")
        axes = sum(((a,) * (s // 2) for a, s in enumerate(split)), ())
    return (Block(inv, axes),)


def _wan(r, head_key="attention_head_dim", head_default=128, split=False, ids=_video_ids,
         dim_key=None):
    if dim_key:  # WanAnimate 2: dim / num_heads (rope_params and rope_apply of its module)
        head = r.int(dim_key, 5120) // r.int("num_heads", 40)
    else:
        head = r.int(head_key, head_default)
    head = r.even(head, head_key)
    cut = (head - 2 * (head // 3), head // 3, head // 3) if split else None
    return Spec(r.name, "rope", ids, 3, _wan_blocks(r, head, split=cut), head,
                order="video tokens (frames, rows, columns)")


def _chronoedit(r):
    """transformer_chronoedit.py ``ChronoEditRotaryPosEmbed``: as Wan, but with 2 latent frames
    the frames sit at ``0`` and ``temporal_skip_len - 1``."""
    skip = r.int("rope_temporal_skip_len", 8)
    pt = r.ints("patch_size", (1, 2, 2), length=3)[0]

    def ids(*, frames, height, width):
        t = np.arange(frames)
        if frames * pt == 2:
            t = np.array([0, skip - 1][:frames])
        return grid(t, np.arange(height), np.arange(width))
    spec = _wan(r, split=True)
    return Spec(r.name, "rope", ids, 3, spec.blocks, spec.head_dim, order=spec.order)


# --- HunyuanVideo and its copies: rope_axes_dim per axis, theta 256 --------------------------

def _hunyuan(r, dims_key="rope_axes_dim", dims_default=(16, 56, 56), theta_key="rope_theta",
             theta=256.0, ids=_video_ids, order="video tokens (the text tokens after them are "
                                                 "not rotated)"):
    head = r.int("attention_head_dim", 128)
    dims = r.ints(dims_key, dims_default, length=3, even=True)
    if sum(dims) != head:
        raise r.fail(f"{dims_key} {list(dims)} must add up to attention_head_dim {head}")
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, r.real(theta_key, theta)), head,
                order=order)


# --- linspace grids over a crop of a base grid (CogVideoX 1.0, EasyAnimate) -------------------

def _crop_region(src, tgt_width, tgt_height):
    """pipeline_cogvideox.py ``get_resize_crop_region_for_grid``."""
    tw, th = tgt_width, tgt_height
    h, w = src
    if h / w > th / tw:
        rh, rw = th, int(round(th / h * w))
    else:
        rw, rh = tw, int(round(tw / w * h))
    top, left = int(round((th - rh) / 2.0)), int(round((tw - rw) / 2.0))
    return (top, left), (top + rh, left + rw)


def _linspace_crop(frames, height, width, base_w, base_h):
    """embeddings.py ``get_3d_rotary_pos_embed(grid_type="linspace")``: each axis
    ``linspace(start, stop * (n - 1) / n, n)`` of the crop, frames ``linspace(0, T - 1, T)``."""
    (top, left), (bottom, right) = _crop_region((height, width), base_w, base_h)
    rows = np.linspace(top, bottom * (height - 1) / height, height)
    cols = np.linspace(left, right * (width - 1) / width, width)
    return grid(np.linspace(0, frames - 1, frames), rows, cols)


def _cog_dims(head):
    return (head // 4, head // 8 * 3, head // 8 * 3)


def _cogvideox_rope(r, patch, head):
    """pipeline_cogvideox.py ``_prepare_rotary_positional_embeddings``: CogVideoX 1.0 crops a
    linspace grid to the base size ``sample_* // patch_size``; 1.5 (``patch_size_t``) slices an
    ``arange`` grid."""
    base_w, base_h = r.int("sample_width", 90) // patch, r.int("sample_height", 60) // patch
    sliced = r.get("patch_size_t", None) is not None

    def ids(*, frames, height, width):
        if sliced:
            return _video(frames, height, width)
        return _linspace_crop(frames, height, width, base_w, base_h)
    return Spec(r.name, "rope", ids, 3, axis_blocks(_cog_dims(head), 10000.0), head,
                order="video tokens (the text tokens before them are not rotated)")


def _cogvideox(r):
    head = r.int("attention_head_dim", 64)
    patch = r.int("patch_size", 2)
    if r.get("use_rotary_positional_embeddings", False):
        return _cogvideox_rope(r, patch, head)
    if r.get("use_learned_positional_embeddings", False):
        raise r.fail("use_learned_positional_embeddings without rotary embeddings: the table is "
                     "a learned weight of the checkpoint")
    return cogvideox_sincos(r, head * r.int("num_attention_heads", 30))


def _easyanimate(r):
    """transformer_easyanimate.py ``EasyAnimateRotaryPosEmbed``: the CogVideoX 1.0 grid on a
    base of ``90 // p`` by ``60 // p`` tokens."""
    if r.get("patch_size", None) is None:
        raise r.fail("patch_size is None: the model cannot patchify (the released checkpoints "
                     "use 2)")
    patch, head = r.int("patch_size", None), r.int("attention_head_dim", 64)

    def ids(*, frames, height, width):
        return _linspace_crop(frames, height, width, 90 // patch, 60 // patch)
    return Spec(r.name, "rope", ids, 3, axis_blocks(_cog_dims(head), 10000.0), head,
                order="video tokens (the text tokens before them are not rotated)")


def _allegro(r):
    """pipeline_allegro.py ``_prepare_rotary_positional_embeddings``: integer ids; the tables
    turn at ``id / interpolation_scale_*``; each third of the head rotates half-wise
    (embeddings.py ``apply_rotary_emb_allegro``)."""
    head = r.int("attention_head_dim", 96)
    third = r.even(head // 3, "attention_head_dim // 3")
    scales = tuple(r.real(f"interpolation_scale_{a}", d) for a, d in
                   (("t", 2.2), ("h", 2.0), ("w", 2.0)))
    return Spec(r.name, "rope", _video_ids, 3, axis_blocks((third,) * 3, 10000.0, "half"), head,
                transform=tuple((1.0 / s, 0.0) for s in scales),
                order="video tokens; angles at id / interpolation_scale")


# --- LTX: frequencies theta ** linspace(0, 1), angles w * (2 g - 1), front padding -------------

def _ltx(r):
    """transformer_ltx.py ``LTXVideoRotaryPosEmbed`` with pipeline_ltx.py's
    ``rope_interpolation_scale = (vae_temporal / frame_rate, vae_spatial, vae_spatial)``: ids
    ``g = index * scale * patch / base``; frequencies ``theta ** linspace(0, 1, d // 6) * pi / 2``
    interleaved across (t, h, w); ``d % 6`` leading features pass through."""
    head = r.int("attention_head_dim", 64)
    inner = head * r.int("num_attention_heads", 32)
    n = inner // 6
    freqs = 10000.0 ** np.linspace(0.0, 1.0, n) * np.pi / 2
    patch, patch_t = r.int("patch_size", 1), r.int("patch_size_t", 1)
    if (inner % 6) % 2:
        raise r.fail(f"the rotary width {inner} leaves {inner % 6} odd features of padding")

    def ids(*, frames, height, width, frame_rate=25.0, temporal_compression=8,
            spatial_compression=32):
        g = _video(frames, height, width)
        return g * np.array([temporal_compression / frame_rate * patch_t / 20,
                             spatial_compression * patch / 2048,
                             spatial_compression * patch / 2048])
    block = Block(tuple(float(f) for f in np.repeat(freqs, 3)), (0, 1, 2) * n)
    return Spec(r.name, "rope", ids, 3, (block,), inner, lead=inner % 6,
                transform=((2.0, -1.0),) * 3,
                order="video tokens; the whole hidden state rotates before the head split")


# --- Cosmos: per-axis NTK bases, frames scaled by base_fps / fps ---------------------------------

def _cosmos(r):
    """transformer_cosmos.py ``CosmosRotaryPosEmbed``: one rotate-half table ``[t, h, w, t, h,
    w]``; axis bases ``10000 * rope_scale ** (d / (d - 2))``; frames at ``t / fps * 24`` for a
    video (``fps``), ``t`` for an image."""
    head = r.int("attention_head_dim", 128)
    scale = tuple(float(s) for s in r.get("rope_scale", (2.0, 1.0, 1.0)))
    dh = head // 6 * 2
    dims = (head - 2 * dh, dh, dh)
    thetas = tuple(10000.0 * s ** (d / (d - 2)) for s, d in zip(scale, dims))

    def ids(*, frames, height, width, fps=None):
        g = _video(frames, height, width)
        if fps is not None:
            g[:, 0] = g[:, 0] / fps * 24
        return g
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, thetas, "half", joint=True), head,
                order="video tokens; frames scaled by 24 / fps for videos")


# --- Kandinsky 5 / 6: angles divided by a per-axis scale factor ---------------------------------

def _kandinsky(r, scale_key=None, default_dims=(16, 24, 24)):
    """transformer_kandinsky.py ``Kandinsky5RoPE3D``: ``arange`` ids (the pipeline's
    ``visual_rope_pos``), angles divided by ``scale_factor`` (a forward argument of Kandinsky 5,
    a config key of Kandinsky 6), 2x2 rotations of interleaved pairs."""
    dims = r.ints("axes_dims", default_dims, length=3, even=True)
    if scale_key:  # the config fixes the scale
        fixed = np.asarray([float(s) for s in r.get(scale_key, (1.0, 2.0, 2.0))])

        def fixed_ids(*, frames, height, width):
            return _video(frames, height, width) / fixed
        ids = fixed_ids
    else:
        def scaled_ids(*, frames, height, width, scale_factor=(1.0, 1.0, 1.0)):
            return _video(frames, height, width) / np.asarray(scale_factor, dtype=float)
        ids = scaled_ids
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, 10000.0), sum(dims),
                order="video tokens, scaled by scale_factor (the text blocks use a 1-D RoPE)")


def _ltx2(r):
    """transformer_ltx2.py ``LTX2AudioVideoRotaryPosEmbed`` (video): the ids are the centres of
    each patch's pixel bounds (``prepare_video_coords``: latent bounds times
    ``vae_scale_factors``, frames shifted by ``causal_offset - scale``, clamped at 0, over
    ``fps``); angles ``w * (2 id / max - 1)`` with ``w = theta ** linspace(0, 1, d // 6) * pi /
    2`` interleaved across (t, h, w). ``rope_type="interleaved"`` rotates the whole hidden
    state (``d % 6`` leading features pass through); ``"split"`` gives head ``h`` the ``h``-th
    slice of the front-padded frequencies, paired half-wise."""
    heads, head = r.int("num_attention_heads", 32), r.int("attention_head_dim", 128)
    inner, theta = heads * head, r.real("rope_theta", 10000.0)
    n = inner // 6
    freqs = np.repeat(theta ** np.linspace(0.0, 1.0, n) * np.pi / 2, 3)
    scale = r.ints("vae_scale_factors", (8, 32, 32), length=3)
    patch, patch_t = r.int("patch_size", 1), r.int("patch_size_t", 1)
    causal = r.int("causal_offset", 1, minimum=0)
    top = (r.real("pos_embed_max_pos", 20), r.real("base_height", 2048),
           r.real("base_width", 2048))
    split = r.choice("rope_type", "interleaved", ("interleaved", "split")) == "split"

    def ids(*, frames, height, width, fps=24.0, frame_offset=0):
        lo = _video(frames, height, width) * (patch_t, patch, patch) + (frame_offset, 0, 0)
        lo, hi = lo * scale, (lo + (patch_t, patch, patch)) * scale
        lo[:, 0], hi[:, 0] = (np.maximum(x[:, 0] + causal - scale[0], 0) / fps for x in (lo, hi))
        return (lo + hi) / 2
    transform = tuple((2.0 / t, -1.0) for t in top)
    axes = (0, 1, 2) * n
    if not split:
        if inner % 6 % 2:
            raise r.fail(f"the rotary width {inner} leaves {inner % 6} odd features of padding")
        return Spec(r.name, "rope", ids, 3, (Block(tuple(freqs), axes),), inner, lead=inner % 6,
                    transform=transform, order="video tokens; the whole hidden state rotates")
    pad = inner // 2 - 3 * n
    every = (0.0,) * pad + tuple(freqs)
    ax = (0,) * pad + axes
    half = inner // 2 // heads
    blocks = tuple(Block(every[i:i + half], ax[i:i + half], "half")
                   for i in range(0, inner // 2, half))
    return Spec(r.name, "rope", ids, 3, blocks, head, transform=transform, heads=heads,
                order="video tokens; each head its own slice of the frequencies")


def _kandinsky6_sr(r):
    """transformer_kandinsky6_sr.py: Kandinsky 6's 3-D RoPE over tokens regrouped into 8x8
    spatial blocks (``_local_patch``: frames, block rows, block columns, then the 64 tokens of
    a block), angles divided by ``scale_factor``."""
    dims = r.ints("axes_dims", (16, 24, 24), length=3, even=True)
    scale = np.asarray([float(s) for s in r.get("scale_factor", (1.0, 2.0, 2.0))])

    def ids(*, frames, height, width):
        if height % 8 or width % 8:
            raise ValueError(f"{r.name}: height and width must be multiples of 8 (its 8x8 "
                             f"attention blocks), got {height} x {width}")
        g = _video(frames, height, width).reshape(frames, height // 8, 8, width // 8, 8, 3)
        return g.transpose(0, 1, 3, 2, 4, 5).reshape(-1, 3) / scale
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, 10000.0), sum(dims),
                order="video tokens in 8x8 spatial blocks, scaled by scale_factor")


def _sana_wm(r):
    """transformer_sana_wm.py ``SanaWMRotaryPosEmbed``: Wan's split of ``linear_head_dim``,
    complex tables applied to the ``(batch, heads, dim, seq)`` features of its linear attention
    (its camera transform, UCPE, is separate)."""
    if not r.get("use_pe", True):
        raise r.fail("use_pe is False: the model adds no positional encoding")
    r.choice("pos_embed_type", "wan_rope", ("wan_rope",))
    return _wan(r, head_key="linear_head_dim", head_default=112)


BUILDERS = {
    "WanTransformer3DModel": _wan,
    "SanaWMTransformer3DModel": _sana_wm,
    "WanAnimate2Transformer3DModel": lambda r: _wan(r, head_default=None, dim_key="dim"),
    "WanVACETransformer3DModel": _wan,
    "WanAnimateTransformer3DModel": _wan,
    "SkyReelsV2Transformer3DModel": _wan,
    "AnyFlowTransformer3DModel": _wan,
    "SanaVideoTransformer3DModel": lambda r: _wan(r, head_default=112),
    "ChronoEditTransformer3DModel": _chronoedit,
    "HunyuanVideoTransformer3DModel": _hunyuan,
    "HunyuanVideo15Transformer3DModel": _hunyuan,
    "MotifVideoTransformer3DModel": _hunyuan,
    "HunyuanVideoFramepackTransformer3DModel": lambda r: _hunyuan(r, ids=_offset_ids),
    "HeliosTransformer3DModel": lambda r: _hunyuan(
        r, "rope_dim", (44, 42, 42), theta=10000.0, ids=_offset_ids,
        order="video tokens (history tokens are pooled tables: not reproduced)"),
    "CogVideoXTransformer3DModel": _cogvideox,
    "ConsisIDTransformer3DModel": _cogvideox,
    "EasyAnimateTransformer3DModel": _easyanimate,
    "AllegroTransformer3DModel": _allegro,
    "LTXVideoTransformer3DModel": _ltx,
    "CosmosTransformer3DModel": _cosmos,
    "Kandinsky5Transformer3DModel": _kandinsky,
    "Kandinsky6Transformer3DModel": lambda r: _kandinsky(r, "scale_factor", (32, 48, 48)),
    "Kandinsky6SRTransformer3DModel": _kandinsky6_sr,
    "LTX2VideoTransformer3DModel": _ltx2,
    "SanaWMLTX2RefinerTransformer3DModel": _ltx2,
}

REFUSED = {
    "AnyFlowFARTransformer3DModel": "its compressed context frames rotate by the normalised mean "
                                    "of pooled rotations (a phase flip of pi wherever "
                                    "sin(k w / 2) / sin(w / 2) < 0), not by a position",
    "MochiTransformer3DModel": "its rotary frequencies are learned weights (pos_frequencies, "
                               "one set per head), not in the config",
}

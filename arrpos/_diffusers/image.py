"""Image transformers of diffusers: how each builds its rotary ids and frequencies.

Each builder reads a ``config.json`` (through ``Reader``: the class's defaults, errors naming
the class) and returns a ``Spec``. The id functions copy the arithmetic of the pipeline or
transformer named beside them (diffusers 0.42.1); sizes are token counts: the latent's height
and width over the patch size, and the text length.
"""
from __future__ import annotations

import math

import numpy as np

from .spec import Block, Spec, axis_blocks, centred, constant, grid

__all__ = ["BUILDERS", "REFUSED"]


def _image(height, width, n_axes=3, first=0.0, h_axis=1, offset=0.0):
    """A ``height x width`` grid: coordinate ``h_axis`` the row, the next the column (plus
    ``offset``), the others ``first`` (Flux's ``_prepare_latent_image_ids``)."""
    ids = np.full((height * width, n_axes), float(first))
    ids[:, h_axis:h_axis + 2] = grid(np.arange(height), np.arange(width)) + offset
    return ids


def _head(r, key="attention_head_dim", default=128):
    return r.int(key, default)


def _axes_fit(r, dims, head_dim, key):
    if sum(dims) != head_dim:
        raise r.fail(f"{key} {list(dims)} must add up to the head dimension {head_dim} (the "
                     "model's apply function rotates the whole head)")
    return dims


# --- Flux and the models that copy its FluxPosEmbed --------------------------------------------

def _flux_ids(*, height, width, text_len):
    """pipeline_flux.py ``_prepare_latent_image_ids`` and ``text_ids = zeros(L, 3)``;
    transformer_flux.py: ``ids = cat((txt_ids, img_ids))``."""
    return np.concatenate([constant(text_len, 0, 3), _image(height, width)])


def _text_diagonal_ids(*, height, width, text_len):
    """pipeline_ovis_image.py ``_prepare_prompt_embeds``: text ``(0, i, i)``, image as Flux."""
    text = np.zeros((text_len, 3))
    text[:, 1] = text[:, 2] = np.arange(text_len)
    return np.concatenate([text, _image(height, width)])


def _longcat_ids(*, height, width, text_len, image_offset=512):
    """pipeline_longcat_image.py ``prepare_pos_ids``: text ``(0, i, i)``, image ``(1, h + 512,
    w + 512)`` (the tokenizer's max length); transformer: ``cat((txt_ids, img_ids))``."""
    text = np.zeros((text_len, 3))
    text[:, 1] = text[:, 2] = np.arange(text_len)
    return np.concatenate([text, _image(height, width, first=1.0, offset=image_offset)])


def _flux_like(ids, *, theta_key=None, theta=10000.0, dims_default=(16, 56, 56),
               head_default=128, order="text tokens, then the image rows"):
    def build(r):
        t = r.real(theta_key, theta) if theta_key else theta
        head = _head(r, default=head_default)
        dims = _axes_fit(r, r.ints("axes_dims_rope", dims_default, even=True), head,
                         "axes_dims_rope")
        n_axes = len(ids(height=1, width=1, text_len=0)[0])
        if len(dims) < n_axes:
            raise r.fail(f"axes_dims_rope {list(dims)} has fewer entries than the {n_axes} "
                         "coordinates of the model's ids")
        return Spec(r.name, "rope", ids, n_axes, axis_blocks(dims[:n_axes], t), head,
                    order=order)
    return build


def _flux2_ids(*, height, width, text_len):
    """pipeline_flux2.py ``_prepare_text_ids`` ``(0, 0, 0, l)`` and ``_prepare_latent_ids``
    ``(0, h, w, 0)``; transformer_flux2.py: text tables first. (Flux 3 has no pipeline in
    diffusers 0.42.1: its transformer documents the same ``(t, h, w, l)`` ids.)"""
    text = np.zeros((text_len, 4))
    text[:, 3] = np.arange(text_len)
    return np.concatenate([text, _image(height, width, n_axes=4)])


def _hidream(r):
    """transformer_hidream_image.py ``patchify``: image ``(0, h, w)`` first, zero-padded to
    ``max_seq`` tokens when the latent is not square; then the text (zeros)."""
    head = _head(r)
    dims = _axes_fit(r, r.ints("axes_dims_rope", (32, 32), even=True), head, "axes_dims_rope")
    if len(dims) != 3:
        raise r.fail(f"axes_dims_rope must have 3 entries (HiDream's ids are (0, row, column)), "
                     f"got {list(dims)}; the released checkpoints use [64, 32, 32]")
    if r.get("patch_size", None) is None:
        raise r.fail("patch_size is None: the model cannot patchify (the released checkpoints "
                     "use 2)")
    patch = r.int("patch_size", None)
    res = r.ints("max_resolution", (128, 128), length=2)
    max_seq = res[0] * res[1] // (patch * patch)

    def ids(*, height, width, text_len):
        img = _image(height, width)
        if height != width:  # non-square latents: padded to max_seq with zero ids
            img = np.concatenate([img, np.zeros((max_seq - len(img), 3))])
        return np.concatenate([img, constant(text_len, 0, 3)])
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, 10000.0), head,
                order="image rows (zero-padded to max_seq when not square), then text")


def _prx(r):
    """transformer_prx.py ``get_image_ids``: ``(h, w)`` of the image tokens (text not rotated)."""
    hidden, heads = r.int("hidden_size", 1792), r.int("num_heads", 28)
    head = hidden // heads
    dims = _axes_fit(r, r.ints("axes_dim", (32, 32), even=True), head, "axes_dim")

    def ids(*, height, width):
        return grid(np.arange(height), np.arange(width))
    return Spec(r.name, "rope", ids, len(dims), axis_blocks(dims, r.real("theta", 10000.0)),
                head, order="image rows only (text is not rotated)")


def _lumina_dims(r, key, default, heads_key, hidden_key, heads_default, hidden_default):
    head = r.int(hidden_key, hidden_default) // r.int(heads_key, heads_default)
    return head, _axes_fit(r, r.ints(key, default, even=True), head, key)


def _zimage(r):
    """transformer_z_image.py ``patchify_and_embed`` / ``_pad_with_ids``: the image ``(L' + 1 +
    f, h, w)`` padded with zero ids to a multiple of 32 tokens, then the caption ``(1 + i, 0,
    0)`` for its length ``L'`` padded to a multiple of 32 (basic mode: ``[x, cap]``)."""
    head, dims = _lumina_dims(r, "axes_dims", (32, 48, 48), "n_heads", "dim", 30, 3840)
    theta = r.real("rope_theta", 256.0)

    def ids(*, height, width, text_len, frames=1):
        cap = text_len + (-text_len) % 32
        img = grid(np.arange(frames) + cap + 1, np.arange(height), np.arange(width))
        img = np.concatenate([img, np.zeros(((-len(img)) % 32, 3))])
        text = np.zeros((cap, 3))
        text[:, 0] = 1 + np.arange(cap)
        return np.concatenate([img, text])
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, theta), head,
                order="image tokens (padded to 32), then caption tokens (padded to 32)")


def _gist_count(n, lo, hi, step, lo_len, hi_len):
    """transformer_bria_fibo2.py ``compute_gist_count``."""
    ratio = min(1.0, max(0.0, (float(n) - lo_len) / (hi_len - lo_len)))
    quantized = int(math.ceil((lo + ratio * (hi - lo)) / step)) * step
    return max(lo, min(hi, quantized))


def _bria_fibo2(r):
    """transformer_bria_fibo2.py ``forward``: the gist tokens ``(1 + g, 0, 0)`` (their count
    from the text length), then the image on plane ``max_num_gist_tokens + 1``."""
    head, dims = _lumina_dims(r, "axes_dims", (32, 48, 48), "n_heads", "dim", 28, 3584)
    gist = tuple(r.int(k, d) for k, d in (
        ("min_num_gist_tokens", 256), ("max_num_gist_tokens", 512), ("gist_step", 64),
        ("gist_min_text_len", 256), ("gist_max_text_len", 2048)))

    def ids(*, height, width, text_len):
        g = _gist_count(text_len, *gist)
        text = np.zeros((g, 3))
        text[:, 0] = 1 + np.arange(g)
        return np.concatenate([text, _image(height, width, first=gist[1] + 1, h_axis=1)])
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, r.real("rope_theta", 256.0)), head,
                order="gist tokens (count from text_len), then the image rows")


def _lumina2(r):
    """transformer_lumina2.py ``Lumina2RotaryPosEmbed.forward``: caption ``(i, 0, 0)``, image
    ``(L, h, w)``; the joint sequence is ``[caption, image]``."""
    head, dims = _lumina_dims(r, "axes_dim_rope", (32, 32, 32), "num_attention_heads",
                              "hidden_size", 24, 2304)

    def ids(*, height, width, text_len):
        text = np.zeros((text_len, 3))
        text[:, 0] = np.arange(text_len)
        return np.concatenate([text, _image(height, width, first=text_len)])
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, 10000.0), head,
                order="caption tokens, then the image rows")


def _ernie(r):
    """transformer_ernie_image.py ``forward``: image ``(L, h, w)`` then text ``(i, 0, 0)``.
    Its table repeats each angle twice (``[t0, t0, t1, t1, ...]``) but its apply function pairs
    ``x[i]`` with ``x[i + d/2]`` (Megatron's rotate_half): reproduced as written."""
    head = r.int("hidden_size", 4096) // r.int("num_attention_heads", 32)
    dims = _axes_fit(r, r.ints("rope_axes_dim", (32, 48, 48), length=3, even=True), head,
                     "rope_axes_dim")

    def ids(*, height, width, text_len):
        text = np.zeros((text_len, 3))
        text[:, 0] = np.arange(text_len)
        return np.concatenate([_image(height, width, first=text_len), text])
    block = axis_blocks(dims, r.real("rope_theta", 256.0), joint=True)[0]
    return Spec(r.name, "rope", ids, 3, (Block(block.inv_freq, block.axes, "interleaved",
                                               "half"),), head,
                order="image rows, then text tokens")


# --- Qwen-Image: centred grids, text after the largest image index ----------------------------

def _qwen_ids(scale_rope, text_first=True, layers=False):
    def ids(*, height, width, text_len, frames=1):
        h = centred(height) if scale_rope else np.arange(height)
        w = centred(width) if scale_rope else np.arange(width)
        img = grid(np.arange(frames), h, w)
        top = max(height // 2, width // 2) if scale_rope else max(height, width)
        text = np.repeat((top + np.arange(text_len, dtype=np.float64))[:, None], 3, axis=1)
        return np.concatenate([text, img] if text_first else [img, text])
    return ids


def _qwen(r, text_first=True):
    """transformer_qwenimage.py ``QwenEmbedRope`` (``scale_rope=True``) with the pipeline's
    ``img_shapes = [(1, h, w)]``: image ``(f, h, w)`` centred on 0, text at ``max(h//2, w//2) +
    i`` on every axis."""
    head = _head(r)
    dims = _axes_fit(r, r.ints("axes_dims_rope", (16, 56, 56), length=3, even=True), head,
                     "axes_dims_rope")
    if r.get("use_layer3d_rope", False):
        raise r.fail("use_layer3d_rope (Qwen-Image-Layered: the condition image on frame -1, "
                     "layer planes) is not reproduced; only the standard QwenEmbedRope is")
    order = ("text tokens, then the image rows" if text_first else
             "image rows, then text tokens (queries are the image rows only)")
    return Spec(r.name, "rope", _qwen_ids(True, text_first), 3, axis_blocks(dims, 10000.0),
                head, order=order)


def _qwen21(r):
    """transformer_qwenimage21.py ``QwenImage21Rope`` for one text run then one image: text
    ``(i, i, i)``, the image on frame ``L`` with a centred grid."""
    head = _head(r)
    dims = _axes_fit(r, r.ints("axes_dims_rope", (16, 56, 56), length=3, even=True), head,
                     "axes_dims_rope")

    def ids(*, height, width, text_len):
        text = np.repeat(np.arange(text_len, dtype=np.float64)[:, None], 3, axis=1)
        img = grid([text_len], centred(height), centred(width))
        return np.concatenate([text, img])
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, 10000.0), head,
                order="text tokens, then the image rows")


# --- 2-D ropes over the image tokens only ------------------------------------------------------

def _cogview4(r, stretch=True):
    """transformer_cogview4.py ``CogView4RotaryPosEmbed``: rows index a table of
    ``rope_axes_dim`` positions at ``i * rope_axes_dim[0] // height`` (GLM-Image: ``i``); one
    rotate-half table ``[h, w, h, w]``; text tokens are not rotated."""
    head = _head(r, default=40)
    if head % 4:
        raise r.fail(f"attention_head_dim {head} must be divisible by 4 (two axes of pairs)")
    size = r.ints("rope_axes_dim", (256, 256), length=2) if stretch else None

    def ids(*, height, width):
        if size is None:  # (not stretch)
            return grid(np.arange(height), np.arange(width))
        return grid(np.arange(height) * size[0] // height, np.arange(width) * size[1] // width)
    half = head // 2
    return Spec(r.name, "rope", ids, 2, axis_blocks((half, half), 10000.0, "half", joint=True),
                head, order="image rows only (text tokens are not rotated)")


def _hunyuan_image(r):
    """transformer_hunyuanimage.py ``HunyuanImageRotaryPosEmbed``: an ``arange`` grid per axis
    (2-D, or 3-D with a 3-entry patch size); the text tokens after the image are not rotated."""
    patch = r.ints("patch_size", (1, 1), length=(2, 3))
    head = _head(r)
    dims = _axes_fit(r, r.ints("rope_axes_dim", (64, 64), length=len(patch), even=True), head,
                     "rope_axes_dim")

    def ids(*, height, width, frames=1):
        return grid(*([np.arange(frames)] if len(patch) == 3 else []), np.arange(height),
                    np.arange(width))
    return Spec(r.name, "rope", ids, len(patch), axis_blocks(dims, r.real("rope_theta", 256.0)),
                head, order="image rows only (the text tokens after them are not rotated)")


BUILDERS = {
    "FluxTransformer2DModel": _flux_like(_flux_ids),
    "ChromaTransformer2DModel": _flux_like(_flux_ids),
    "BriaTransformer2DModel": _flux_like(_flux_ids, theta_key="rope_theta"),
    "BriaFiboTransformer2DModel": _flux_like(_flux_ids, theta_key="rope_theta"),
    "Krea2Transformer2DModel": _flux_like(_flux_ids, theta_key="rope_theta", theta=1000.0,
                                          dims_default=(32, 48, 48)),
    "OvisImageTransformer2DModel": _flux_like(_text_diagonal_ids),
    "LongCatImageTransformer2DModel": _flux_like(_longcat_ids),
    "Flux2Transformer2DModel": _flux_like(_flux2_ids, theta_key="rope_theta", theta=2000.0,
                                          dims_default=(32, 32, 32, 32)),
    "Flux3Transformer2DModel": _flux_like(_flux2_ids, theta_key="rope_theta",
                                          dims_default=(32, 32, 32, 32)),
    "HiDreamImageTransformer2DModel": _hidream,
    "PRXTransformer2DModel": _prx,
    "ZImageTransformer2DModel": _zimage,
    "BriaFibo2Transformer2DModel": _bria_fibo2,
    "Lumina2Transformer2DModel": _lumina2,
    "ErnieImageTransformer2DModel": _ernie,
    "QwenImageTransformer2DModel": _qwen,
    "NucleusMoEImageTransformer2DModel": lambda r: _qwen(r, text_first=False),
    "QwenImage21Transformer2DModel": _qwen21,
    "CogView4Transformer2DModel": _cogview4,
    "GlmImageTransformer2DModel": lambda r: _cogview4(r, stretch=False),
    "HunyuanImageTransformer2DModel": _hunyuan_image,
}

REFUSED: dict = {}

"""Diffusers transformers whose rotary ids are built by their pipeline: 1-D sequences (audio,
OmniGen), crops of a base grid (HunyuanDiT, Lumina-Next), and packed multimodal sequences
(Ideogram 4, JoyImage, MiniMax H3). Each id function names the diffusers 0.42.1 code it
follows.
"""
from __future__ import annotations

import numpy as np

from .._rope.layer import RoPE
from .._rope.scaling import LongRopeScaling
from .spec import Block, Reader, Spec, axis_blocks, grid, powers

__all__ = ["BUILDERS", "REFUSED"]


def _positions(*, length):
    """``arange(length)``: every 1-D model here."""
    return np.arange(length, dtype=np.float64)[:, None]


def _one_axis(r, name, rotary, head, theta, order):
    r.even(rotary, f"the rotary width of {name}")
    return Spec(r.name, "rope", _positions, 1, (Block(powers(rotary, theta), (0,) * (rotary // 2),
                                                      "half"),), head, order=order)


def _ace_step(r):
    """ace_step_transformer.py ``_ace_step_rotary_freqs``: ``arange`` over the patched sequence
    (context latents included), rotate-half over the whole head."""
    head = r.int("head_dim", 128)
    return _one_axis(r, "head_dim", head, head, r.real("rope_theta", 1000000.0),
                     "patched audio tokens (context included)")


def _longcat_audio(r):
    """transformer_longcat_audio_dit.py ``AudioDiTRotaryEmbedding(dim_head, 2048, base=1e5)``:
    audio tokens at ``arange``; the text keys of cross-attention take ``arange`` too."""
    head = r.int("dit_dim", 1536) // r.int("dit_heads", 24)
    return _one_axis(r, "dit_dim // dit_heads", head, head, 100000.0,
                     "audio tokens (cross-attention's text keys: arange over the text)")


def _minimax_music(r):
    """transformer_minimax_music3.py ``MiniMaxMusic3RotaryEmbedding``: the first ``rotary_dim``
    features of each head rotate half-wise."""
    return _one_axis(r, "rotary_dim", r.int("rotary_dim", 32), r.int("attention_head_dim", 64),
                     10000.0, "audio tokens")


def _stable_audio3(r):
    """transformer_stable_audio3.py: ``StableAudio3RotaryEmbedding(dim_heads // 2)`` on the
    first ``dim_heads // 2`` features of each head."""
    head = r.int("embed_dim", 1536) // r.int("num_heads", 24)
    return _one_axis(r, "dim_heads // 2", head // 2, head, 10000.0, "audio tokens")


def _stable_audio(r):
    """pipeline_stable_audio.py: ``get_1d_rotary_pos_embed(attention_head_dim // 2, latent
    length + 1, repeat_interleave_real=False)`` over the global token and the audio latents;
    the attention rotates the first half of each head (``apply_partial_rotary_emb``)."""
    head = r.int("attention_head_dim", 64)
    return _one_axis(r, "attention_head_dim // 2", head // 2, head, 10000.0,
                     "the prepended duration token, then the audio latents")


def _omnigen(r):
    """processor_omnigen.py ``create_position``: ``arange(text + 1 + image tokens)`` for an
    unpadded prompt; transformer_omnigen.py ``OmniGenSuScaledRotaryEmbedding``: Phi-3's
    LongRoPE (long factors past ``original_max_position_embeddings``, cos and sin times
    ``sqrt(1 + ln(max / original) / ln(original))``)."""
    scaling = r.get("rope_scaling", None)
    if not isinstance(scaling, dict) or "short_factor" not in scaling or "long_factor" not in (
            scaling):
        raise r.fail(f"rope_scaling must be a dict with short_factor and long_factor (the model "
                     f"cannot run without them), got {scaling!r}")
    head = r.int("hidden_size", 3072) // r.int("num_attention_heads", 32)
    original = r.int("original_max_position_embeddings", 4096)
    longest = r.int("max_position_embeddings", 131072)
    if longest <= original:
        raise r.fail("max_position_embeddings <= original_max_position_embeddings: the model "
                     "then scales by 1 and arrpos' LongRoPE by its own rule")
    rope = RoPE(head, base=r.real("rope_base", 10000.0), scaling=LongRopeScaling(
        tuple(scaling["short_factor"]), tuple(scaling["long_factor"]), original,
        max_positions=longest))

    def ids(*, height, width, text_len):
        return np.arange(text_len + 1 + height * width, dtype=np.float64)[:, None]
    return Spec(r.name, "rope", ids, 1, (), head, rope=rope,
                order="text tokens, the time token, then the image tokens")


# --- 2-D crops of a base grid ------------------------------------------------------------------

def _hunyuan_dit(r):
    """pipeline_hunyuandit.py: ``get_2d_rotary_pos_embed`` over a linspace crop of a
    ``512 // 8 // patch_size`` square (its ``get_resize_crop_region_for_grid``); the first half
    of each head turns with x (the column), the second with y."""
    if r.get("patch_size", None) is None:
        raise r.fail("patch_size is None: the model cannot patchify (the released checkpoints "
                     "use 2)")
    head = r.int("attention_head_dim", 88)
    if head % 4:
        raise r.fail(f"attention_head_dim {head} must be divisible by 4")
    base = 512 // 8 // r.int("patch_size", None)

    def ids(*, height, width):
        if height / width > 1:
            rh, rw = base, int(round(base / height * width))
        else:
            rw, rh = base, int(round(base / width * height))
        top, left = int(round((base - rh) / 2.0)), int(round((base - rw) / 2.0))
        rows = np.linspace(top, (top + rh) * (height - 1) / height, height)
        cols = np.linspace(left, (left + rw) * (width - 1) / width, width)
        return grid(rows, cols)[:, ::-1].copy()
    return Spec(r.name, "rope", ids, 2, axis_blocks((head // 2, head // 2), 10000.0), head,
                order="image tokens, rows outermost; ids are (x, y)")


def _lumina_next(r):
    """pipeline_lumina.py: ``get_2d_rotary_pos_embed_lumina(head_dim, 384, 384)`` cut to the
    token grid by ``LuminaPatchEmbed``: frequency ``k`` of rows and of columns alternate
    (``[h0, w0, h1, w1, ...]``); the pipeline's ``linear_factor`` divides the ids. (Its
    ``ntk_factor`` away from 1024 x 1024 changes the base: not covered.)"""
    head = r.int("hidden_size", 2304) // r.int("num_attention_heads", 32)
    if head % 4:
        raise r.fail(f"the head dimension {head} must be divisible by 4")
    f = powers(head // 2, 10000.0)

    def ids(*, height, width, linear_factor=1.0):
        return grid(np.arange(height), np.arange(width)) / linear_factor
    return Spec(r.name, "rope", ids, 2, (Block(tuple(np.repeat(f, 2)), (0, 1) * len(f)),), head,
                order="image tokens, rows outermost")


# --- packed multimodal sequences ---------------------------------------------------------------

def _ideogram4(r):
    """pipeline_ideogram4.py ``_prepare_ids``: ``pad`` left-padding tokens (ids 0), the text
    ``(i, i, i)``, the image ``65536 + (0, h, w)``; transformer_ideogram4.py ``Ideogram4MRoPE``:
    frequency ``i`` turns with h when ``i % 3 == 1``, w when ``i % 3 == 2`` (below 3x the
    sections), else t; rotate-half."""
    head = r.int("attention_head_dim", 256)
    sec = r.ints("mrope_section", (24, 20, 20), length=3)
    return _mrope(r, head, r.real("rope_theta", 5000000.0), sec, _ideogram_ids,
                  "left padding, text tokens, then the image rows")


def _mrope(r, head, theta, sec, ids, order):
    n = r.even(head, "the head dimension") // 2
    axes = tuple(1 if i % 3 == 1 and i < 3 * sec[1] else 2 if i % 3 == 2 and i < 3 * sec[2]
                 else 0 for i in range(n))
    return Spec(r.name, "rope", ids, 3, (Block(powers(head, theta), axes, "half"),), head,
                order=order)


def _ideogram_ids(*, height, width, text_len, pad=0):
    text = np.repeat(np.arange(text_len, dtype=np.float64)[:, None], 3, axis=1)
    image = grid([0], np.arange(height), np.arange(width)) + 65536
    return np.concatenate([np.zeros((pad, 3)), text, image])


def _cosmos3(r):
    """pipeline_cosmos3_omni.py ``get_3d_mrope_ids_text_tokens`` and ``_vae_tokens``: the text
    ``(i, i, i)``, then the vision tokens from ``text_len + margin`` (frames rescaled to the
    base frame rate when ``enable_fps_modulation`` and ``fps`` are given for a video; rows and
    columns restart at 0 unless ``unified_3d_mrope_reset_spatial_ids`` is False);
    transformer_cosmos3.py ``Cosmos3VLTextRotaryEmbedding``: Ideogram 4's interleaved mrope."""
    head = r.int("head_dim", 128)
    sec = r.get("rope_axes_dim", None) or (r.get("rope_scaling", None) or {}).get(
        "mrope_section", (24, 20, 20))
    sec = Reader(dict(rope_axes_dim=sec), r.name).ints("rope_axes_dim", None, length=3)
    reset = bool(r.get("unified_3d_mrope_reset_spatial_ids", True))
    margin = r.int("unified_3d_mrope_temporal_modality_margin", 15000, minimum=0)
    modulate, base = bool(r.get("enable_fps_modulation", True)), r.real("base_fps", 24)

    def ids(*, frames, height, width, text_len, fps=None, temporal_compression=4):
        text = np.repeat(np.arange(text_len, dtype=np.float64)[:, None], 3, axis=1)
        start = text_len + margin
        t = np.arange(frames, dtype=np.float64)
        t = (t / (fps / temporal_compression) * (base / temporal_compression) if modulate and fps
             is not None and frames > 1 else t) + start
        spatial = 0 if reset else int(start)
        vision = grid(t, np.arange(height) + spatial, np.arange(width) + spatial)
        return np.concatenate([text, vision])
    return _mrope(r, head, r.real("rope_theta", 5000000.0), sec, ids,
                  "text (understanding) tokens, then the vision (generation) tokens")


def _joyimage(r):
    """transformer_joyimage.py ``get_rotary_pos_embed``: the visual grid; with ``rope_type ==
    "mrope"`` the text after it at ``max + 1 + i`` on every axis (else not rotated)."""
    head = r.int("hidden_size", 3072) // r.int("num_attention_heads", 24)
    dims = (head // 3,) * 3 if r.config.get("rope_dim_list", 0) is None else r.ints(
        "rope_dim_list", (16, 56, 56), length=3, even=True)
    if sum(dims) != head:
        raise r.fail(f"rope_dim_list {list(dims)} must add up to the head dimension {head}")
    mrope = r.choice("rope_type", "rope", ("rope", "mrope")) == "mrope"

    def ids(*, frames=1, height, width, text_len=0):
        vis = grid(np.arange(frames), np.arange(height), np.arange(width))
        if not mrope:
            return vis
        top = max(frames, height, width)  # the grid's largest index + 1
        text = np.repeat((top + np.arange(text_len, dtype=np.float64))[:, None], 3, axis=1)
        return np.concatenate([vis, text])
    return Spec(r.name, "rope", ids, 3, axis_blocks(dims, float(r.real("theta", 256))), head,
                order="visual tokens" + (", then text tokens" if mrope else " (text not "
                                                                            "rotated)"))


def _joyimage_plus(r):
    """transformer_joyimage_edit_plus.py ``_get_rotary_pos_embed_for_range``: each component
    (the target, then each reference) an ``arange`` grid whose frames continue the previous
    component's (``frame_offset``: the frames before it); text not rotated."""
    spec = _joyimage(r)

    def ids(*, frames=1, height, width, frame_offset=0):
        return grid(frame_offset + np.arange(frames), np.arange(height), np.arange(width))
    return Spec(r.name, "rope", ids, 3, spec.blocks, spec.head_dim,
                order="one component's tokens; components follow each other in frames")


def _minimax_h3(r):
    """transformer_minimax_h3.py ``MiniMaxH3RotaryPosEmbed``: one ``inv_freq`` of
    ``rope_freq_dim`` frequencies for each of t, h, w, the table ``[t, h, w, t, h, w]``
    rotate-half over the first ``6 * rope_freq_dim`` features. Its ids are the caller's
    (diffusers 0.42.1 has no pipeline that packs them): ``position_ids`` gives the video grid."""
    head = r.int("attention_head_dim", 128)
    n = r.int("rope_freq_dim", 16)
    f = powers(2 * n, r.real("rope_theta", 10000.0))
    if 6 * n > head:
        raise r.fail(f"6 * rope_freq_dim = {6 * n} exceeds attention_head_dim {head}")

    def ids(*, frames, height, width):
        return grid(np.arange(frames), np.arange(height), np.arange(width))
    return Spec(r.name, "rope", ids, 3, (Block(f * 3, (0,) * n + (1,) * n + (2,) * n, "half"),),
                head, order="video tokens (t, h, w); a packed sequence is the caller's")


BUILDERS = {
    "AceStepTransformer1DModel": _ace_step,
    "LongCatAudioDiTTransformer": _longcat_audio,
    "MiniMaxMusic3Transformer1DModel": _minimax_music,
    "StableAudio3DiTModel": _stable_audio3,
    "StableAudioDiTModel": _stable_audio,
    "OmniGenTransformer2DModel": _omnigen,
    "HunyuanDiT2DModel": _hunyuan_dit,
    "LuminaNextDiT2DModel": _lumina_next,
    "Ideogram4Transformer2DModel": _ideogram4,
    "Cosmos3OmniTransformer": _cosmos3,
    "JoyImageEditTransformer3DModel": _joyimage,
    "JoyImageEditPlusTransformer3DModel": _joyimage_plus,
    "MiniMaxH3Transformer3DModel": _minimax_h3,
}

REFUSED = {
    "DreamLiteTransformer2DModel": "adds no positional encoding (its transformer blocks are "
                                   "built without positional_embeddings)",
}

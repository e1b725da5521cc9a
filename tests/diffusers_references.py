"""The reference side of ``diffusers_models.py``: per model class, diffusers' own positional
module, the ids its pipeline or transformer builds, and its own apply function.

Each reference takes the class's full default config and returns a dict: ``sizes`` (the
``position_ids`` keywords), ``ids`` (as the model builds them), ``cos``/``sin`` in the layout
the model multiplies ``x`` by (or ``table``), and ``rotate(q)`` for ``q`` of shape ``(batch,
seq, heads, head_dim)`` (``flat``: ``(batch, seq, dim)``, rotated before the head split);
``max_angle`` bounds the model's float32 angles where its frequencies exceed 1 (the tolerance
scales with it), ``rounding`` is the model's own output rounding (bfloat16).
Where a step is not a function diffusers exports (a method needing ``self``, a closure inside
an attention processor) its lines are copied here, with the file and line they come from
(diffusers 0.42.1).
"""
from __future__ import annotations

import importlib

import torch

H, W, L, F = 3, 4, 5, 2  # token grid, text length, frames: small, non-square, odd
REFERENCES = {}


def reference(*names):
    def register(fn):
        for name in names:
            REFERENCES[name] = fn
        return fn
    return register


def module(name):
    return importlib.import_module(f"diffusers.models.transformers.{name}")


def pipeline(name):
    return importlib.import_module(f"diffusers.pipelines.{name}")


def emb():
    return importlib.import_module("diffusers.models.embeddings")


def from_complex(freqs):
    """Complex ``freqs_cis`` ``(..., d/2)`` -> interleaved cos/sin tables ``(..., d)``."""
    return (freqs.real.repeat_interleave(2, dim=-1).float(),
            freqs.imag.repeat_interleave(2, dim=-1).float())


def from_matrix(rope):
    """2x2 rotation matrices ``(..., d/2, 2, 2)`` ``[[cos, -sin], [sin, cos]]`` -> interleaved
    cos/sin tables ``(..., d)``."""
    return (rope[..., 0, 0].repeat_interleave(2, dim=-1).float(),
            rope[..., 1, 0].repeat_interleave(2, dim=-1).float())


def rotate_complex(q, freqs):
    """``view_as_complex(q) * freqs`` on ``(B, S, H, D)`` with ``freqs`` ``(S, D/2)``: the
    closures of Z-Image (transformer_z_image.py:115-120) and Bria-Fibo 2
    (transformer_bria_fibo2.py:227-230), copied."""
    x = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    return torch.view_as_real(x * freqs.unsqueeze(-2)).flatten(3).type_as(q)


def rotate_real(cos, sin, **kw):
    """embeddings.py ``apply_rotary_emb(use_real=True)`` with the sequence on axis 1."""
    return lambda q: emb().apply_rotary_emb(q, (cos, sin), sequence_dim=1, **kw)


def out(sizes, ids, cos, sin, rotate, **extra):
    return dict(sizes=sizes, ids=ids, cos=cos, sin=sin, rotate=rotate, **extra)


# --- image models --------------------------------------------------------------------------

def flux_image_ids(h, w):
    flux = pipeline("flux.pipeline_flux").FluxPipeline
    return flux._prepare_latent_image_ids(1, h, w, "cpu", torch.float32)


# class -> (module, its FluxPosEmbed copy) as the transformer builds it
FLUX_EMBEDS = {
    "FluxTransformer2DModel": ("transformer_flux", "FluxPosEmbed"),
    "ChromaTransformer2DModel": ("transformer_chroma", "FluxPosEmbed"),
    "BriaTransformer2DModel": ("transformer_bria", "BriaEmbedND"),
    "BriaFiboTransformer2DModel": ("transformer_bria_fibo", "BriaFiboEmbedND"),
    "Krea2Transformer2DModel": ("transformer_krea2", "Krea2RotaryPosEmbed"),
    "OvisImageTransformer2DModel": ("transformer_ovis_image", "OvisImagePosEmbed"),
    "LongCatImageTransformer2DModel": ("transformer_longcat_image", "LongCatImagePosEmbed"),
}


@reference(*FLUX_EMBEDS)
def flux_family(cfg):
    name = cfg["_name"]
    theta = cfg.get("rope_theta", 10000)  # Flux, Chroma, Ovis, LongCat: theta=10000 hard-coded
    img = flux_image_ids(H, W)
    txt = torch.zeros(L, 3)  # pipeline_flux.py:387, pipeline_bria.py:238, pipeline_krea2.py:385
    if name == "OvisImageTransformer2DModel":  # pipeline_ovis_image.py:263-265
        txt[..., 1] = txt[..., 1] + torch.arange(L)[None, :]
        txt[..., 2] = txt[..., 2] + torch.arange(L)[None, :]
    if name == "LongCatImageTransformer2DModel":  # pipeline_longcat_image.py:352, 402-408
        prepare = pipeline("longcat_image.pipeline_longcat_image").prepare_pos_ids
        txt = prepare(modality_id=0, type="text", start=(0, 0), num_token=L)
        img = prepare(modality_id=1, type="image", start=(512, 512), height=H, width=W)
    ids = torch.cat((txt, img), dim=0)  # transformer_flux.py:749 (and the others' copies)
    mod, cls = FLUX_EMBEDS[name]
    pos_embed = getattr(module(mod), cls)(theta=theta, axes_dim=list(cfg["axes_dims_rope"]))
    cos, sin = pos_embed(ids)
    return out(dict(height=H, width=W, text_len=L), ids, cos, sin, rotate_real(cos, sin))


@reference("Flux2Transformer2DModel", "Flux3Transformer2DModel")
def flux2(cfg):
    p = pipeline("flux2.pipeline_flux2").Flux2Pipeline
    img = p._prepare_latent_ids(torch.zeros(1, 1, H, W))[0]
    txt = p._prepare_text_ids(torch.zeros(1, L, 1))[0]
    name = "2" if cfg["_name"].startswith("Flux2") else "3"
    pe = getattr(module(f"transformer_flux{name}"), f"Flux{name}PosEmbed")(
        theta=cfg["rope_theta"], axes_dim=list(cfg["axes_dims_rope"]))
    (tc, ts), (ic, is_) = pe(txt), pe(img)
    cos, sin = torch.cat([tc, ic]), torch.cat([ts, is_])  # transformer_flux2.py:1329-1332
    return out(dict(height=H, width=W, text_len=L), torch.cat([txt, img]), cos, sin,
               rotate_real(cos, sin))


@reference("HiDreamImageTransformer2DModel")
def hidream(cfg):
    m = module("transformer_hidream_image")
    model = torch.nn.Module()
    model.config = type("C", (), {"patch_size": 2})()
    model.max_seq = cfg["max_resolution"][0] * cfg["max_resolution"][1] // 4
    latent = torch.zeros(1, 1, 2 * H, 2 * W)
    img_ids = m.HiDreamImageTransformer2DModel.patchify(model, latent)[3]
    ids = torch.cat((img_ids, torch.zeros(1, L, 3)), dim=1)  # transformer_hidream_image.py:855
    rope = m.HiDreamImageEmbedND(theta=10000, axes_dim=cfg["axes_dims_rope"])(ids)
    cos, sin = from_matrix(rope[0, :, 0])

    def rotate(q):  # (B, S, H, D); the processor applies it on (B, S, H, D), rope (B, S, 1, ...)
        return m.apply_rope(q, q, rope)[0]
    return out(dict(height=H, width=W, text_len=L), ids[0], cos, sin, rotate)


@reference("PRXTransformer2DModel")
def prx(cfg):
    m = module("transformer_prx")
    p = cfg["patch_size"]
    img_ids = m.get_image_ids(1, H * p, W * p, patch_size=p, device="cpu")
    head = cfg["hidden_size"] // cfg["num_heads"]
    rope = m.PRXEmbedND(dim=head, theta=cfg["theta"], axes_dim=cfg["axes_dim"] or [32, 32])(
        img_ids)  # (B, 1, L, d/2, 2, 2)
    cos, sin = from_matrix(rope[0, 0])

    def rotate(q):  # transformer_prx.py:142 on (B, H, L, D)
        return m.apply_rope(q.transpose(1, 2), rope).transpose(1, 2)
    return out(dict(height=H, width=W), img_ids[0], cos, sin, rotate)


@reference("ZImageTransformer2DModel")
def zimage(cfg):
    m = module("transformer_z_image")
    model = m.ZImageTransformer2DModel
    stub = type("Stub", (), {"create_coordinate_grid": staticmethod(model.create_coordinate_grid),
                             "_patchify_image": model._patchify_image,
                             "_pad_with_ids": model._pad_with_ids})()
    image = torch.zeros(1, 1, 2 * H, 2 * W)
    _, _, _, img_ids, cap_ids, _, _ = model.patchify_and_embed(
        stub, [image], [torch.zeros(L, 1)], 2, 1)
    n_img, n_cap = len(img_ids[0]), L + (-L) % 32  # _prepare_sequence cuts at the features
    ids = torch.cat([img_ids[0][:n_img], cap_ids[0][:n_cap]])  # basic mode: [x, cap]
    embedder = m.RopeEmbedder(theta=cfg["rope_theta"], axes_dims=cfg["axes_dims"],
                              axes_lens=cfg["axes_lens"])
    freqs = embedder(ids)
    cos, sin = from_complex(freqs)
    return out(dict(height=H, width=W, text_len=L), ids, cos, sin,
               lambda q: rotate_complex(q, freqs))


@reference("BriaFibo2Transformer2DModel")
def bria_fibo2(cfg):
    m = module("transformer_bria_fibo2")
    grid = m.BriaFibo2Transformer2DModel.create_coordinate_grid
    text_len = 300
    gist = m.compute_gist_count([text_len], cfg["min_num_gist_tokens"], cfg["max_num_gist_tokens"],
                                cfg["gist_step"], cfg["gist_min_text_len"],
                                cfg["gist_max_text_len"])[0]
    img = grid((1, H, W), (cfg["max_num_gist_tokens"] + 1, 0, 0), "cpu").flatten(0, 2)
    gist_ids = grid((gist, 1, 1), (1, 0, 0), "cpu").flatten(0, 2)
    ids = torch.cat([gist_ids, img])  # transformer_bria_fibo2.py:605-607
    freqs = m.RopeEmbedder(theta=cfg["rope_theta"], axes_dims=cfg["axes_dims"],
                           axes_lens=cfg["axes_lens"])(ids)
    cos, sin = from_complex(freqs)
    return out(dict(height=H, width=W, text_len=text_len), ids, cos, sin,
               lambda q: rotate_complex(q, freqs))


@reference("Lumina2Transformer2DModel")
def lumina2(cfg):
    m = module("transformer_lumina2")
    p = cfg["patch_size"]
    rope = m.Lumina2RotaryPosEmbed(theta=10000, axes_dim=cfg["axes_dim_rope"],
                                   axes_lens=cfg["axes_lens"], patch_size=p)
    latent = torch.zeros(1, 1, H * p, W * p)
    *_, freqs, _, _ = rope(latent, torch.ones(1, L, dtype=torch.bool))
    freqs = freqs[0]
    # the ids of Lumina2RotaryPosEmbed.forward (transformer_lumina2.py:278-299)
    ids = torch.zeros(L + H * W, 3, dtype=torch.int32)
    ids[:L, 0] = torch.arange(L)
    ids[L:, 0] = L
    ids[L:, 1] = torch.arange(H).view(-1, 1).repeat(1, W).flatten()
    ids[L:, 2] = torch.arange(W).view(1, -1).repeat(H, 1).flatten()
    cos, sin = from_complex(freqs)
    rotate = lambda q: emb().apply_rotary_emb(q, freqs[None], use_real=False)  # noqa: E731
    return out(dict(height=H, width=W, text_len=L), ids, cos, sin, rotate)


@reference("ErnieImageTransformer2DModel")
def ernie(cfg):
    m = module("transformer_ernie_image")
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    # transformer_ernie_image.py:395-418, one prompt of L tokens
    text_ids = torch.cat([torch.arange(L, dtype=torch.float32).view(1, L, 1),
                          torch.zeros((1, L, 2))], dim=-1)
    grid_yx = torch.stack(torch.meshgrid(torch.arange(H, dtype=torch.float32),
                                         torch.arange(W, dtype=torch.float32), indexing="ij"),
                          dim=-1).reshape(-1, 2)
    image_ids = torch.cat([torch.full((1, H * W, 1), float(L)), grid_yx.view(1, H * W, 2)], -1)
    ids = torch.cat([image_ids, text_ids], dim=1)
    freqs = m.ErnieImageEmbedND3(dim=head, theta=cfg["rope_theta"],
                                 axes_dim=cfg["rope_axes_dim"])(ids)  # (1, S, 1, head_dim)

    def rotate(x_in):  # transformer_ernie_image.py:116-124, copied (a closure of the processor)
        rot_dim = freqs.shape[-1]
        x, x_pass = x_in[..., :rot_dim], x_in[..., rot_dim:]
        cos_, sin_ = torch.cos(freqs).to(x.dtype), torch.sin(freqs).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x * cos_ + torch.cat((-x2, x1), dim=-1) * sin_, x_pass), dim=-1)
    return out(dict(height=H, width=W, text_len=L), ids[0], freqs[0, :, 0].cos(),
               freqs[0, :, 0].sin(), rotate)


def _qwen_ids(h, w, text_len, text_first=True):
    """The ids QwenEmbedRope's tables are indexed by (transformer_qwenimage.py:265-322):
    frame ``idx``, a centred grid (scale_rope), text from ``max(h//2, w//2)``."""
    hh = torch.cat([torch.arange(-(h - h // 2), 0), torch.arange(h // 2)])
    ww = torch.cat([torch.arange(-(w - w // 2), 0), torch.arange(w // 2)])
    img = torch.stack(torch.meshgrid(torch.zeros(1), hh.float(), ww.float(), indexing="ij"),
                      -1).reshape(-1, 3)
    txt = (max(h // 2, w // 2) + torch.arange(text_len)).float()[:, None].repeat(1, 3)
    return torch.cat([txt, img] if text_first else [img, txt])


@reference("QwenImageTransformer2DModel", "NucleusMoEImageTransformer2DModel")
def qwen(cfg):
    nucleus = cfg["_name"].startswith("Nucleus")
    m = module("transformer_nucleusmoe_image" if nucleus else "transformer_qwenimage")
    rope_cls = m.NucleusMoEEmbedRope if nucleus else m.QwenEmbedRope
    rope = rope_cls(theta=10000, axes_dim=list(cfg["axes_dims_rope"]), scale_rope=True)
    img_freqs, txt_freqs = rope([(1, H, W)], device=torch.device("cpu"), max_txt_seq_len=L)
    freqs = torch.cat([img_freqs, txt_freqs] if nucleus else [txt_freqs, img_freqs])
    cos, sin = from_complex(freqs)
    return out(dict(height=H, width=W, text_len=L), _qwen_ids(H, W, L, not nucleus), cos, sin,
               lambda q: m.__dict__["_apply_rotary_emb_nucleus" if nucleus else
                                    "apply_rotary_emb_qwen"](q, freqs, use_real=False))


@reference("QwenImage21Transformer2DModel")
def qwen21(cfg):
    m = module("transformer_qwenimage21")
    rope = m.QwenImage21Rope(theta=10000, axes_dim=list(cfg["axes_dims_rope"]))
    mask = torch.tensor([False] * L + [True] * (H * W))
    freqs = rope([(1, H, W)], mask, torch.device("cpu"))
    hh = torch.arange(-(H - H // 2), H // 2).float()
    ww = torch.arange(-(W - W // 2), W // 2).float()
    img = torch.stack(torch.meshgrid(torch.full((1,), float(L)), hh, ww, indexing="ij"),
                      -1).reshape(-1, 3)
    ids = torch.cat([torch.arange(L).float()[:, None].repeat(1, 3), img])
    cos, sin = from_complex(freqs)
    return out(dict(height=H, width=W, text_len=L), ids, cos, sin,
               lambda q: m.apply_rotary_emb_qwen(q, freqs, use_real=False))


@reference("CogView4Transformer2DModel", "GlmImageTransformer2DModel")
def cogview4(cfg):
    cog = cfg["_name"].startswith("CogView4")
    m = module("transformer_cogview4" if cog else "transformer_glm_image")
    p = cfg["patch_size"]
    latent = torch.zeros(1, 1, H * p, W * p)
    if cog:
        rope = m.CogView4RotaryPosEmbed(cfg["attention_head_dim"], p, cfg["rope_axes_dim"],
                                        theta=10000.0)
        size = cfg["rope_axes_dim"]  # transformer_cogview4.py:560-563
        rows, cols = torch.arange(H) * size[0] // H, torch.arange(W) * size[1] // W
    else:
        rope = m.GlmImageRotaryPosEmbed(cfg["attention_head_dim"], p, theta=10000.0)
        rows, cols = torch.arange(H), torch.arange(W)
    cos, sin = rope(latent)
    ids = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), -1).reshape(-1, 2)
    return out(dict(height=H, width=W), ids, cos, sin, rotate_real(cos, sin,
                                                                  use_real_unbind_dim=-2))


@reference("HunyuanImageTransformer2DModel")
def hunyuan_image(cfg):
    m = module("transformer_hunyuanimage")
    rope = m.HunyuanImageRotaryPosEmbed(cfg["patch_size"], cfg["rope_axes_dim"],
                                        cfg["rope_theta"])
    cos, sin = rope(torch.zeros(1, 1, H, W))
    ids = torch.stack(torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij"),
                      -1).reshape(-1, 2)
    return out(dict(height=H, width=W), ids, cos, sin, rotate_real(cos, sin))


# --- video models ----------------------------------------------------------------------------

def video_ids(frames, h, w, first=0):
    return torch.stack(torch.meshgrid(torch.arange(frames) + first, torch.arange(h),
                                      torch.arange(w), indexing="ij"), -1).reshape(-1, 3)


def rotate_wan(cos, sin):
    """transformer_wan.py:104-115 (a closure of WanAttnProcessor), copied."""
    def apply_rotary_emb(hidden_states, freqs_cos, freqs_sin):
        x1, x2 = hidden_states.unflatten(-1, (-1, 2)).unbind(-1)
        cos, sin = freqs_cos[..., 0::2], freqs_sin[..., 1::2]
        out = torch.empty_like(hidden_states)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out.type_as(hidden_states)
    return lambda q: apply_rotary_emb(q, cos, sin)


WAN_ROPES = {
    "WanTransformer3DModel": ("transformer_wan", "WanRotaryPosEmbed"),
    "WanVACETransformer3DModel": ("transformer_wan", "WanRotaryPosEmbed"),  # imported there
    "WanAnimateTransformer3DModel": ("transformer_wan_animate", "WanRotaryPosEmbed"),
    "SkyReelsV2Transformer3DModel": ("transformer_skyreels_v2", "SkyReelsV2RotaryPosEmbed"),
    "SanaVideoTransformer3DModel": ("transformer_sana_video", "WanRotaryPosEmbed"),
    "ChronoEditTransformer3DModel": ("transformer_chronoedit", "ChronoEditRotaryPosEmbed"),
}


@reference(*WAN_ROPES)
def wan(cfg, frames=F):
    mod, cls = WAN_ROPES[cfg["_name"]]
    pt, ph, pw = cfg["patch_size"]
    rope = getattr(module(mod), cls)(cfg["attention_head_dim"], cfg["patch_size"],
                                     cfg["rope_max_seq_len"])
    cos4, sin4 = rope(torch.zeros(1, 1, frames * pt, H * ph, W * pw))  # (1, S, 1, D)
    ids = video_ids(frames, H, W)
    if cfg["_name"].startswith("ChronoEdit") and frames * pt == 2:  # transformer_chronoedit.py:409
        ids[:, 0] = ids[:, 0] * (cfg["rope_temporal_skip_len"] - 1)
    return out(dict(frames=frames, height=H, width=W), ids, cos4[0, :, 0], sin4[0, :, 0],
               rotate_wan(cos4, sin4))


@reference("AnyFlowTransformer3DModel")
def anyflow(cfg):
    m = module("transformer_anyflow")
    rope = m.AnyFlowRotaryPosEmbed(cfg["attention_head_dim"], cfg["patch_size"],
                                   cfg["rope_max_seq_len"])
    freqs = rope({"total_frames": F, "full_frame_shape": (H, W)}, torch.device("cpu"))["query"]
    cos, sin = from_complex(freqs[0, 0])
    # transformer_anyflow.py:43-48 works on (B, H, L, D)
    return out(dict(frames=F, height=H, width=W), video_ids(F, H, W), cos, sin,
               lambda q: m.apply_rotary_emb(q.transpose(1, 2), freqs).transpose(1, 2))


HUNYUAN_ROPES = {
    "HunyuanVideoTransformer3DModel": ("transformer_hunyuan_video", "HunyuanVideoRotaryPosEmbed"),
    "HunyuanVideo15Transformer3DModel": ("transformer_hunyuan_video15",
                                         "HunyuanVideo15RotaryPosEmbed"),
    "MotifVideoTransformer3DModel": ("transformer_motif_video", "MotifVideoRotaryPosEmbed"),
}


@reference(*HUNYUAN_ROPES)
def hunyuan_video(cfg):
    mod, cls = HUNYUAN_ROPES[cfg["_name"]]
    p, pt = cfg["patch_size"], cfg["patch_size_t"]
    rope = getattr(module(mod), cls)(p, pt, cfg["rope_axes_dim"], cfg["rope_theta"])
    cos, sin = rope(torch.zeros(1, 1, F * pt, H * p, W * p))
    return out(dict(frames=F, height=H, width=W), video_ids(F, H, W), cos, sin,
               rotate_real(cos, sin))


@reference("HunyuanVideoFramepackTransformer3DModel")
def framepack(cfg):
    m = module("transformer_hunyuan_video_framepack")
    p = cfg["patch_size"]
    rope = m.HunyuanVideoFramepackRotaryPosEmbed(p, cfg["patch_size_t"], cfg["rope_axes_dim"],
                                                 cfg["rope_theta"])
    first = 3  # indices_latents: the pipeline places the frames after the history
    cos, sin = rope(torch.arange(first, first + F), H * p, W * p, torch.device("cpu"))
    return out(dict(frames=F, height=H, width=W, frame_offset=first),
               video_ids(F, H, W, first), cos, sin, rotate_real(cos, sin))


@reference("HeliosTransformer3DModel")
def helios(cfg):
    m = module("transformer_helios")
    rope = m.HeliosRotaryPosEmbed(rope_dim=cfg["rope_dim"], theta=cfg["rope_theta"])
    first = 3
    emb = rope(torch.arange(first, first + F)[None], H, W, torch.device("cpu"))
    emb = emb.flatten(2).transpose(1, 2)  # transformer_helios.py:732
    cos, sin = emb[0].chunk(2, dim=-1)
    return out(dict(frames=F, height=H, width=W, frame_offset=first),
               video_ids(F, H, W, first), cos, sin,
               lambda q: m.apply_rotary_emb_transposed(q, emb))


def linspace_crop_ids(h, w, frames, base_w, base_h):
    """The positions get_3d_rotary_pos_embed(grid_type="linspace") turns at
    (embeddings.py:673-683)."""
    crop = pipeline("cogvideo.pipeline_cogvideox").get_resize_crop_region_for_grid
    (top, left), (bottom, right) = crop((h, w), base_w, base_h)
    rows = torch.linspace(top, bottom * (h - 1) / h, h)
    cols = torch.linspace(left, right * (w - 1) / w, w)
    t = torch.linspace(0, frames * (frames - 1) / frames, frames)
    return torch.stack(torch.meshgrid(t, rows, cols, indexing="ij"), -1).reshape(-1, 3)


@reference("EasyAnimateTransformer3DModel")
def easyanimate(cfg):
    m = module("transformer_easyanimate")
    p = cfg["patch_size"]
    rope = m.EasyAnimateRotaryPosEmbed(p, cfg["attention_head_dim"])
    cos, sin = rope(torch.zeros(1, 1, F, H * p, W * p))
    return out(dict(frames=F, height=H, width=W), linspace_crop_ids(H, W, F, 90 // p, 60 // p),
               cos, sin, rotate_real(cos, sin))


@reference("CogVideoXTransformer3DModel", "ConsisIDTransformer3DModel")
def cogvideox(cfg):
    e = emb()
    if not cfg["use_rotary_positional_embeddings"]:  # the sincos table of CogVideoXPatchEmbed
        head = cfg["attention_head_dim"] * cfg["num_attention_heads"]
        patch = e.CogVideoXPatchEmbed(patch_size=cfg["patch_size"], embed_dim=head,
                                      sample_height=H * 2, sample_width=W * 2,
                                      sample_frames=(F - 1) * 4 + 1,
                                      spatial_interpolation_scale=cfg[
                                          "spatial_interpolation_scale"],
                                      temporal_interpolation_scale=cfg[
                                          "temporal_interpolation_scale"])
        table = patch.pos_embedding[0, patch.max_text_seq_length:]
        ids = video_ids(F, H, W)[:, [0, 2, 1]].double()  # (t, x, y) / the interpolation scales
        ids[:, 0] /= cfg["temporal_interpolation_scale"]  # embeddings.py:118-128
        ids[:, 1:] /= cfg["spatial_interpolation_scale"]
        return dict(sizes=dict(frames=F, height=H, width=W), ids=ids, table=table)
    p = cfg["patch_size"]
    cos, sin = e.get_3d_rotary_pos_embed(
        embed_dim=cfg["attention_head_dim"], grid_size=(H, W), temporal_size=F,
        crops_coords=pipeline("cogvideo.pipeline_cogvideox").get_resize_crop_region_for_grid(
            (H, W), cfg["sample_width"] // p, cfg["sample_height"] // p))
    ids = linspace_crop_ids(H, W, F, cfg["sample_width"] // p, cfg["sample_height"] // p)
    return out(dict(frames=F, height=H, width=W), ids, cos, sin, rotate_real(cos, sin))


@reference("AllegroTransformer3DModel")
def allegro(cfg):
    e = emb()
    scales = (cfg["interpolation_scale_t"], cfg["interpolation_scale_h"],
              cfg["interpolation_scale_w"])
    freqs_t, freqs_h, freqs_w, grid_t, grid_h, grid_w = e.get_3d_rotary_pos_embed_allegro(
        embed_dim=cfg["attention_head_dim"], crops_coords=((0, 0), (H, W)), grid_size=(H, W),
        temporal_size=F, interpolation_scale=scales)
    # pipeline_allegro.py:578-584
    pos = torch.cartesian_prod(grid_t.long(), grid_h.long(), grid_w.long())
    positions = pos.reshape(-1, 3).transpose(0, 1).reshape(3, 1, -1)
    freqs = (freqs_t, freqs_h, freqs_w)
    cos = torch.cat([f[0][positions[i, 0]] for i, f in enumerate(freqs)], dim=-1)
    sin = torch.cat([f[1][positions[i, 0]] for i, f in enumerate(freqs)], dim=-1)

    def rotate(q):  # (B, S, H, D) -> the (B, H, S, D) the attention processor passes
        return e.apply_rotary_emb_allegro(q.transpose(1, 2), freqs, positions).transpose(1, 2)
    return out(dict(frames=F, height=H, width=W), pos, cos, sin, rotate)


@reference("LTXVideoTransformer3DModel")
def ltx(cfg):
    m = module("transformer_ltx")
    inner = cfg["attention_head_dim"] * cfg["num_attention_heads"]
    rope = m.LTXVideoRotaryPosEmbed(dim=inner, base_num_frames=20, base_height=2048,
                                    base_width=2048, patch_size=cfg["patch_size"],
                                    patch_size_t=cfg["patch_size_t"], theta=10000.0)
    scale = (8 / 25, 32, 32)  # pipeline_ltx.py:750-754 with its defaults
    grid = rope._prepare_video_coords(1, F, H, W, scale, "cpu")
    cos, sin = rope(torch.zeros(1), F, H, W, scale)
    return out(dict(frames=F, height=H, width=W), grid[0], cos[0], sin[0],
               lambda q: m.apply_rotary_emb(q, (cos, sin)), flat=True,
               max_angle=10000 * torch.pi / 2)


@reference("CosmosTransformer3DModel")
def cosmos(cfg):
    m = module("transformer_cosmos")
    rope = m.CosmosRotaryPosEmbed(hidden_size=cfg["attention_head_dim"], max_size=cfg["max_size"],
                                  patch_size=cfg["patch_size"], rope_scale=cfg["rope_scale"])
    pt, ph, pw = cfg["patch_size"]
    fps = 30
    cos, sin = rope(torch.zeros(1, 1, F * pt, H * ph, W * pw), fps=fps)
    ids = video_ids(F, H, W).double()
    ids[:, 0] = ids[:, 0] / fps * 24  # transformer_cosmos.py:509
    return out(dict(frames=F, height=H, width=W, fps=fps), ids, cos, sin,
               lambda q: emb().apply_rotary_emb(q.transpose(1, 2), (cos, sin), use_real=True,
                                                use_real_unbind_dim=-2).transpose(1, 2))


def rotate_kandinsky(rope):
    """transformer_kandinsky.py:309-312 (a closure of the attention processor), copied."""
    def apply_rotary(x, rope):
        x_ = x.reshape(*x.shape[:-1], -1, 1, 2).to(torch.float32)
        x_out = (rope * x_).sum(dim=-1)
        return x_out.reshape(*x.shape).to(torch.bfloat16)
    return lambda q: apply_rotary(q, rope).float()


@reference("Kandinsky5Transformer3DModel", "Kandinsky6Transformer3DModel")
def kandinsky(cfg):
    six = cfg["_name"].startswith("Kandinsky6")
    m = module("transformer_kandinsky6" if six else "transformer_kandinsky")
    pos = [torch.arange(F), torch.arange(H), torch.arange(W)]
    if six:
        scale = cfg["scale_factor"]
        rope = m.Kandinsky6RoPE3D(cfg["axes_dims"])(tuple(pos), tuple(scale))
        sizes = dict(frames=F, height=H, width=W)
    else:
        scale = (1.0, 2.0, 2.0)  # pipeline_kandinsky.py _get_scale_factor at 480p
        rope = m.Kandinsky5RoPE3D(cfg["axes_dims"])((1, F, H, W), pos, scale)[0]
        sizes = dict(frames=F, height=H, width=W, scale_factor=scale)
    rope = rope.reshape(F * H * W, 1, *rope.shape[-3:])  # fractal_flatten without block mask
    cos, sin = from_matrix(rope[:, 0])
    ids = video_ids(F, H, W).double() / torch.tensor(scale, dtype=torch.float64)
    return out(sizes, ids, cos, sin, rotate_kandinsky(rope[None]),
               rounding=lambda t: t.to(torch.bfloat16).float(), rotate_atol=1e-6)


# --- sincos tables ---------------------------------------------------------------------------

def xy_ids(rows, cols):
    """``(x, y)`` per token, rows outermost: the grid ``get_2d_sincos_pos_embed`` tables."""
    y, x = torch.meshgrid(rows.double(), cols.double(), indexing="ij")
    return torch.stack([x, y], -1).reshape(-1, 2)


def patch_embed_case(cfg, dim, **kw):
    """PatchEmbed as the transformer builds it; the table it adds for an H x W latent grid."""
    e = emb()
    p = cfg["patch_size"]
    patch = e.PatchEmbed(height=cfg["sample_size"], width=cfg["sample_size"], patch_size=p,
                         in_channels=1, embed_dim=dim, **kw)
    with torch.no_grad():
        for param in patch.parameters():
            param.zero_()  # the projection out of the way: what is left is the table
    table = patch(torch.zeros(1, 1, H * p, W * p))[0]
    base, interp = patch.base_size, patch.interpolation_scale
    if patch.pos_embed_max_size:  # embeddings.py:357-369
        m = patch.pos_embed_max_size
        top, left = (m - H) // 2, (m - W) // 2
        ids = xy_ids((top + torch.arange(H)) / (m / base) / interp,
                     (left + torch.arange(W)) / (m / base) / interp)
    else:  # embeddings.py:170-181
        ids = xy_ids(torch.arange(H) / (H / base) / interp, torch.arange(W) / (W / base) / interp)
    return dict(sizes=dict(height=H, width=W), ids=ids, table=table)


def inner(cfg):
    return cfg["num_attention_heads"] * cfg["attention_head_dim"]


@reference("SD3Transformer2DModel")
def sd3(cfg):
    return patch_embed_case(cfg, inner(cfg), pos_embed_max_size=cfg["pos_embed_max_size"])


@reference("DiTTransformer2DModel")
def dit(cfg):
    return patch_embed_case(cfg, inner(cfg))


@reference("PixArtTransformer2DModel", "Transformer2DModel")
def pixart(cfg):  # pixart_transformer_2d.py:138-149
    interp = cfg["interpolation_scale"] or max(cfg["sample_size"] // 64, 1)
    return patch_embed_case(cfg, inner(cfg), interpolation_scale=interp)


@reference("LatteTransformer3DModel")
def latte(cfg):  # latte_transformer_3d.py:97-105
    return patch_embed_case(cfg, inner(cfg),
                            interpolation_scale=max(cfg["sample_size"] // 64, 1))


@reference("SanaTransformer2DModel")
def sana(cfg):  # sana_transformer.py:372-380
    return patch_embed_case(cfg, inner(cfg), interpolation_scale=cfg["interpolation_scale"])


@reference("CogView3PlusTransformer2DModel")
def cogview3plus(cfg):
    e = emb()
    p = cfg["patch_size"]
    patch = e.CogView3PlusPatchEmbed(in_channels=1, hidden_size=inner(cfg), patch_size=p,
                                     text_hidden_size=1,
                                     pos_embed_max_size=cfg["pos_embed_max_size"])
    with torch.no_grad():
        for param in patch.parameters():
            param.zero_()
    table = patch(torch.zeros(1, 1, H * p, W * p), torch.zeros(1, L, 1))[0, L:]
    return dict(sizes=dict(height=H, width=W), ids=xy_ids(torch.arange(H), torch.arange(W)),
                table=table)


# --- 1-D sequences and pipeline-built grids --------------------------------------------------

S = 9  # sequence length of the 1-D models


@reference("AceStepTransformer1DModel")
def ace_step(cfg):
    m = module("ace_step_transformer")
    cos, sin = m._ace_step_rotary_freqs(S, cfg["head_dim"], cfg["rope_theta"], "cpu",
                                        torch.float32)
    return out(dict(length=S), torch.arange(S)[:, None], cos, sin,
               rotate_real(cos, sin, use_real_unbind_dim=-2))


@reference("LongCatAudioDiTTransformer")
def longcat_audio(cfg):
    m = module("transformer_longcat_audio_dit")
    rope = m.AudioDiTRotaryEmbedding(cfg["dit_dim"] // cfg["dit_heads"], 2048, base=100000.0)
    cos, sin = rope(torch.zeros(1, S, 1), S)
    return out(dict(length=S), torch.arange(S)[:, None], cos, sin,
               lambda q: m._apply_rotary_emb(q, (cos, sin)))


@reference("MiniMaxMusic3Transformer1DModel")
def minimax_music(cfg):
    m = module("transformer_minimax_music3")
    cos, sin = m.MiniMaxMusic3RotaryEmbedding(cfg["rotary_dim"])(S, torch.device("cpu"))
    return out(dict(length=S), torch.arange(S)[:, None], cos, sin,
               lambda q: m._apply_partial_rotary_emb(q, (cos, sin)))


@reference("StableAudio3DiTModel")
def stable_audio3(cfg):
    m = module("transformer_stable_audio3")
    head = cfg["embed_dim"] // cfg["num_heads"]  # transformer_stable_audio3.py:456, 503
    freqs = m.StableAudio3RotaryEmbedding(head // 2)(S, torch.device("cpu"))
    return out(dict(length=S), torch.arange(S)[:, None], freqs.cos(), freqs.sin(),
               lambda q: m._apply_rotary_partial(q, freqs))


@reference("StableAudioDiTModel")
def stable_audio(cfg):
    ap = importlib.import_module("diffusers.models.attention_processor")
    freqs = emb().get_1d_rotary_pos_embed(cfg["attention_head_dim"] // 2, S, use_real=True,
                                          repeat_interleave_real=False)  # pipeline:677-682
    processor = ap.StableAudioAttnProcessor2_0()
    return out(dict(length=S), torch.arange(S)[:, None], freqs[0], freqs[1],
               lambda q: processor.apply_partial_rotary_emb(q.transpose(1, 2), freqs)
               .transpose(1, 2))


@reference("OmniGenTransformer2DModel")
def omnigen(cfg):
    m = module("transformer_omnigen")
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    rope = m.OmniGenSuScaledRotaryEmbedding(
        head, max_position_embeddings=cfg["max_position_embeddings"],
        original_max_position_embeddings=cfg["original_max_position_embeddings"],
        base=cfg["rope_base"], rope_scaling=cfg["rope_scaling"])
    h = w = 64  # 4096 image tokens + text + time token: past 4096, the long factors
    processor = pipeline("omnigen.processor_omnigen").OmniGenCollator()
    # processor_omnigen.py:190-200, one unpadded prompt
    ids = processor.create_position(torch.ones(1, L, dtype=torch.long), [h * w])
    cos, sin = rope(torch.zeros(1), ids)
    return out(dict(height=h, width=w, text_len=L), ids[0, :, None], cos, sin,
               lambda q: emb().apply_rotary_emb(q.transpose(1, 2), (cos, sin),
                                                use_real_unbind_dim=-2).transpose(1, 2))


@reference("HunyuanDiT2DModel")
def hunyuan_dit(cfg):
    crop = pipeline("hunyuandit.pipeline_hunyuandit").get_resize_crop_region_for_grid
    base = 512 // 8 // cfg["patch_size"]  # pipeline_hunyuandit.py:792-801
    (top, left), (bottom, right) = crops = crop((H, W), base)
    head = cfg["attention_head_dim"]
    cos, sin = emb().get_2d_rotary_pos_embed(head, crops, (H, W), output_type="pt")
    ids = xy_ids(torch.linspace(top, bottom * (H - 1) / H, H),
                 torch.linspace(left, right * (W - 1) / W, W))  # embeddings.py:800-807
    return out(dict(height=H, width=W), ids, cos, sin,
               lambda q: emb().apply_rotary_emb(q.transpose(1, 2), (cos, sin)).transpose(1, 2))


@reference("LuminaNextDiT2DModel")
def lumina_next(cfg):
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    linear = 1.5  # pipeline_lumina.py:858: the linear factor early in sampling
    freqs = emb().get_2d_rotary_pos_embed_lumina(head, 384, 384, linear_factor=linear)
    freqs = freqs[:H, :W].flatten(0, 1)  # LuminaPatchEmbed.forward (embeddings.py:438)
    ids = torch.stack(torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij"),
                      -1).reshape(-1, 2) / linear
    cos, sin = from_complex(freqs)
    return out(dict(height=H, width=W, linear_factor=linear), ids, cos, sin,
               lambda q: emb().apply_rotary_emb(q, freqs[None], use_real=False))


@reference("Ideogram4Transformer2DModel")
def ideogram4(cfg):
    m = module("transformer_ideogram4")
    pad = 2
    ids = pipeline("ideogram4.pipeline_ideogram4").Ideogram4Pipeline._prepare_ids(
        [L], H, W, L + pad, "cpu")[0]
    rope = m.Ideogram4MRoPE(cfg["attention_head_dim"], cfg["rope_theta"], cfg["mrope_section"])
    cos, sin = rope(ids)
    cos, sin = cos[0], sin[0]
    return out(dict(height=H, width=W, text_len=L, pad=pad), ids[0], cos, sin,
               lambda q: q * cos[:, None] + m._rotate_half(q) * sin[:, None],  # :112-117
               max_angle=65540.0)


@reference("JoyImageEditTransformer3DModel")
def joyimage(cfg):
    m = module("transformer_joyimage")
    stub = type("Stub", (), {"hidden_size": cfg["hidden_size"], "theta": cfg["theta"],
                             "num_attention_heads": cfg["num_attention_heads"],
                             "rope_dim_list": cfg["rope_dim_list"]})()
    vis, _ = m.JoyImageEditTransformer3DModel.get_rotary_pos_embed(stub, [1, H, W], None)
    ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(H).float(),
                                     torch.arange(W).float(), indexing="ij"), -1).reshape(-1, 3)
    return out(dict(height=H, width=W), ids, vis[0], vis[1],
               lambda q: m._apply_rotary_emb(q, q, vis)[0])


@reference("MiniMaxH3Transformer3DModel")
def minimax_h3(cfg):
    m = module("transformer_minimax_h3")
    ids = video_ids(F, H, W)  # the caller's: a plain video grid
    cos, sin = m.MiniMaxH3RotaryPosEmbed(cfg["rope_freq_dim"], cfg["rope_theta"])(ids)
    return out(dict(frames=F, height=H, width=W), ids, cos, sin,
               lambda q: m._apply_rotary_emb(q, cos, sin))


@reference("WanAnimate2Transformer3DModel")
def wan_animate2(cfg):
    m = module("transformer_wan_animate_2")
    d = cfg["dim"] // cfg["num_heads"]
    # transformer_wan_animate_2.py:709-715 (_rope_freqs, a method) with the generation offsets
    freqs = torch.cat([m.rope_params(512, d - 4 * (d // 6)), m.rope_params(512, 2 * (d // 6)),
                       m.rope_params(512, 2 * (d // 6))], dim=1)
    sizes = torch.tensor([[F, H, W]])
    unit = torch.zeros(1, F * H * W, 1, d)
    unit[..., 0::2] = 1.0  # rotating (1, 0) pairs gives the tables themselves
    table = m.rope_apply(unit, sizes, freqs)[0, :, 0]
    return out(dict(frames=F, height=H, width=W), video_ids(F, H, W),
               table[:, 0::2].repeat_interleave(2, -1), table[:, 1::2].repeat_interleave(2, -1),
               lambda q: m.rope_apply(q, sizes, freqs), head_dim=d)


@reference("Kandinsky6SRTransformer3DModel")
def kandinsky6_sr(cfg):
    m = module("transformer_kandinsky6_sr")
    h = w = 8  # the 8x8 attention blocks need multiples of 8
    pos = tuple(torch.arange(n) for n in (F, h, w))
    rope = m.Kandinsky6SRRoPE3D(cfg["axes_dims"])(pos, cfg["scale_factor"])
    rope = m._local_patch(rope, (F, h, w), (1, 8, 8), dim=0).flatten(0, 1)  # forward, :535
    ids = m._local_patch(video_ids(F, h, w).reshape(F, h, w, 3).double(), (F, h, w), (1, 8, 8),
                         dim=0).flatten(0, 1) / torch.tensor(cfg["scale_factor"])
    cos, sin = from_matrix(rope[:, 0])
    return out(dict(frames=F, height=h, width=w), ids, cos, sin,
               lambda q: m.apply_rotary(q, rope[None]))


@reference("LTX2VideoTransformer3DModel", "SanaWMLTX2RefinerTransformer3DModel")
def ltx2(cfg):
    refiner = cfg["_name"].startswith("SanaWM")
    m = module("transformer_sana_wm_refiner" if refiner else "transformer_ltx2")
    rope_cls = m.SanaWMLTX2AudioVideoRotaryPosEmbed if refiner else m.LTX2AudioVideoRotaryPosEmbed
    heads = cfg["num_attention_heads"]
    rope = rope_cls(dim=heads * cfg["attention_head_dim"], patch_size=cfg["patch_size"],
                    patch_size_t=cfg["patch_size_t"], base_num_frames=cfg["pos_embed_max_pos"],
                    base_height=cfg["base_height"], base_width=cfg["base_width"],
                    scale_factors=cfg["vae_scale_factors"], theta=cfg["rope_theta"],
                    causal_offset=cfg["causal_offset"], modality="video",
                    double_precision=cfg["rope_double_precision"], rope_type=cfg["rope_type"],
                    num_attention_heads=heads)
    coords = rope.prepare_video_coords(1, F, H, W, "cpu", fps=24.0)
    cos, sin = rope(coords)
    ids = coords[0].mean(-1).T  # the patch centres the rope turns at (transformer_ltx2.py:1019)
    return out(dict(frames=F, height=H, width=W), ids, cos[0], sin[0],
               lambda q: m.apply_interleaved_rotary_emb(q, (cos, sin)), flat=True,
               max_angle=cfg["rope_theta"] * torch.pi / 2)


@reference("SanaWMTransformer3DModel")
def sana_wm(cfg):
    m = module("transformer_sana_wm")
    # transformer_sana_wm.py:2827-2829 (rope_fhw_dim is None there)
    rope = m.SanaWMRotaryPosEmbed(attention_head_dim=cfg["linear_head_dim"],
                                  patch_size=cfg["patch_size"], max_seq_len=1024, fhw_dim=None)
    freqs = rope((F, H, W), device=torch.device("cpu"))  # (1, 1, S, D/2)
    cos, sin = from_complex(freqs[0, 0])
    return out(dict(frames=F, height=H, width=W), video_ids(F, H, W), cos, sin,
               lambda q: m._apply_rotary_emb(q.permute(0, 2, 3, 1), freqs).permute(0, 3, 1, 2))


@reference("JoyImageEditPlusTransformer3DModel")
def joyimage_plus(cfg):
    m = module("transformer_joyimage_edit_plus")
    stub = type("Stub", (), {"config": type("C", (), {
        k: cfg[k] for k in ("hidden_size", "num_attention_heads", "rope_dim_list", "theta")})})()
    first = 1  # a second component, after a 1-frame first one (forward, :478-492)
    cos, sin = m.JoyImageEditPlusTransformer3DModel._get_rotary_pos_embed_for_range(
        stub, (first, 0, 0), (first + 1, H, W))
    rotate = lambda q: m._apply_rotary_emb_batched(q, q, (cos[None], sin[None]))[0]  # noqa: E731
    return out(dict(height=H, width=W, frame_offset=first), video_ids(1, H, W, first), cos, sin,
               rotate)


@reference("Cosmos3OmniTransformer")
def cosmos3(cfg):
    m = module("transformer_cosmos3")
    p = pipeline("cosmos.pipeline_cosmos3_omni")
    fps = 30.0
    # pipeline_cosmos3_omni.py:548-558 and 588-605 (a video: frame-rate modulated frames)
    text, offset = p.get_3d_mrope_ids_text_tokens(L, 0, use_float_positions=True)
    vision, _ = p.get_3d_mrope_ids_vae_tokens(
        F, H, W, offset + cfg["unified_3d_mrope_temporal_modality_margin"],
        reset_spatial_indices=cfg["unified_3d_mrope_reset_spatial_ids"], fps=fps,
        base_fps=float(cfg["base_fps"]), temporal_compression_factor=4)
    ids = torch.cat([text, vision], dim=1)  # (3, N)
    rope = m.Cosmos3VLTextRotaryEmbedding(cfg["head_dim"], cfg["rope_theta"], [24, 20, 20])
    cos, sin = rope(ids.unsqueeze(1), "cpu", torch.float32)  # transformer_cosmos3.py:798-805
    cos, sin = cos[0], sin[0]
    return out(dict(frames=F, height=H, width=W, text_len=L, fps=fps), ids.T, cos, sin,
               lambda q: q * cos[:, None] + m._rotate_half(q) * sin[:, None],  # :82-90
               max_angle=15100.0)

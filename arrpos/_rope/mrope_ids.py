"""Multimodal position ids of vision-language models, exactly as their ``get_rope_index`` builds
them in transformers 5.24 (Qwen2-VL and its descendants, GLM-4V, ERNIE-4.5-VL, HunYuan-VL,
HY-V4-VL, Qwen2.5-Omni, Qwen3-Omni), and the patch coordinates of their vision towers' rotary.

The models read the token ids, grids and timing values on the host and lay positions out piece by
piece (text runs, one grid per image or video frame, audio runs); so does this module: it reads
the config and the inputs and makes the vision items, :mod:`.mrope_layout` plans the pieces on
the host from the values read (a plan is a few numbers per piece, not per token), then every
position is formed at once on the inputs' device with Array API operations.
"""
from __future__ import annotations

import numbers

import numpy as np

from .._lib import (
    array_namespace,
    check_array,
    check_bool,
    check_int,
    check_size,
    describe,
    device_of,
    dtype_kind,
    index_dtype,
    is_lazy,
    to_numpy,
)
from .hf_config import as_dict, resolve, standard_rope_parameters
from .mrope_layout import (
    IMAGE,
    VIDEO,
    Item,
    Media,
    Plan,
    plan_counted,
    plan_hunyuan,
    plan_omni,
    plan_runs,
)
from ..typing import Array, Config, Grids, Namespace

__all__ = ["mrope_position_ids", "vision_position_ids"]

_MERGE = "vision_config.spatial_merge_size"
# the config class's defaults of the keys each model type's get_rope_index (and processor) reads;
# "vision_config.<key>" is a key of the vision sub-config (tests/test_mrope_ids.py checks every
# value against transformers' config classes)
_OMNI_IDS = {IMAGE: 151655, VIDEO: 151656, "audio_token_id": 151646,
             "audio_start_token_id": 151647, "position_id_per_seconds": 25, _MERGE: 2}
_MODELS = {
    "qwen2_vl": ("qwen2_vl", {IMAGE: 151655, VIDEO: 151656, _MERGE: 2}),
    "paddleocr_vl": ("paddleocr_vl", {IMAGE: 100295, _MERGE: 2}),
    "qwen2_5_vl": ("qwen2_5_vl", {IMAGE: 151655, VIDEO: 151656, _MERGE: 2,
                                  "vision_config.tokens_per_second": 4}),
    **{t: ("qwen3_vl", {IMAGE: image, VIDEO: image + 1, _MERGE: 2}) for t, image in (
        ("qwen3_vl", 151655), ("qwen3_vl_moe", 151655), ("cosmos3_omni", 151655),
        ("qwen3_5", 248056), ("qwen3_5_moe", 248056), ("qwen4_exp", 248056),
        ("cohere_compass", 255031))},
    "cosmos3_edge": ("qwen3_vl", {IMAGE: 19, VIDEO: 18, _MERGE: 2}),
    **{t: ("glm4v", {IMAGE: image, "video_start_token_id": start,
                     "video_end_token_id": start + 1, _MERGE: 2}) for t, image, start in (
        ("glm4v", 151343, 151341), ("glm4v_moe", 151363, 151341), ("glm46v", 151343, 151361),
        ("glm_ocr", 59280, 59258))},
    "ernie4_5_vl_moe": ("ernie4_5_vl", {IMAGE: 100295, VIDEO: 103367, _MERGE: 2,
                                        "vision_config.temporal_merge_size": 2}),
    "hy_v4_vl": ("hy_v4_vl", {IMAGE: 120120, VIDEO: 120124, _MERGE: 2}),
    "hunyuan_vl": ("hunyuan_vl", {IMAGE: 120120, _MERGE: 2}),
    "qwen2_5_omni_thinker": ("qwen2_5_omni", {**_OMNI_IDS, "seconds_per_chunk": 2}),
    "qwen2_5_omni_talker": ("qwen2_5_omni", {
        **{k: v for k, v in _OMNI_IDS.items() if k != _MERGE}, "seconds_per_chunk": 2,
        "vision_start_token_id": 151652, "spatial_merge_size": 2}),
    "qwen3_omni_moe_thinker": ("qwen3_omni", _OMNI_IDS),
}
# the model types whose sub-config holds the model that builds the positions
_COMPOSITE = {"qwen2_5_omni": "thinker_config", "qwen3_omni_moe": "thinker_config"}
# keys of Qwen2.5-Omni's config classes that config.json files store under another name
_ALIASES = {IMAGE: "image_token_index", VIDEO: "video_token_index",
            "audio_token_id": "audio_token_index"}
_OMNI_KEYS = ("audio_token_id", "audio_start_token_id", "vision_start_token_id",
              "position_id_per_seconds")
# what each rule reads besides the vision merge size
_KEYS = {
    "qwen2_vl": (IMAGE, VIDEO), "qwen3_vl": (IMAGE, VIDEO), "hy_v4_vl": (IMAGE, VIDEO),
    "qwen2_5_vl": (IMAGE, VIDEO, "vision_config.tokens_per_second"),
    "ernie4_5_vl": (IMAGE, VIDEO, "vision_config.temporal_merge_size"),
    "paddleocr_vl": (IMAGE,), "hunyuan_vl": (IMAGE,),
    "glm4v": (IMAGE, "video_start_token_id", "video_end_token_id"),
    "qwen2_5_omni": (IMAGE, VIDEO, *_OMNI_KEYS, "seconds_per_chunk"),
    "qwen3_omni": (IMAGE, VIDEO, *_OMNI_KEYS),
}
_NO_3D = "builds no multimodal positions (its get_rope_index raises: 1-D text positions)"
_UNSUPPORTED = {
    "glm_image": "its decode positions are a table of the target image grids that the model "
                 "caches (its rope deltas are zeros), and it splits grids per sample with "
                 "images_per_sample",
    "minicpmv4_7": "it lays crops out on a canvas from per-crop target_sizes and a "
                   "downsample_mode, not from grid_thw",
    "exaone4_5": _NO_3D, "lfm3_vl": _NO_3D, "video_llama_3": _NO_3D,
    "hyperclovax_vision_v2": "it has no get_rope_index (2-D vision, 1-D text positions)",
}


class _Spec:
    """What a model type's get_rope_index reads from its config (defaults filled in)."""

    def __init__(self, config):
        config = as_dict(config)
        model_type = config.get("model_type")
        if model_type in _COMPOSITE:
            config = as_dict(config.get(_COMPOSITE[model_type]) or {})
            model_type = config.get("model_type") or f"{model_type}_thinker"
        if model_type not in _MODELS:
            why = _UNSUPPORTED.get(model_type, "not a model type whose multimodal positions "
                                   "arrpos reproduces; pass the whole config.json of one of "
                                   f"{sorted(_MODELS) + sorted(_COMPOSITE)}")
            raise ValueError(f"config: model_type {model_type!r}: {why}")
        self.model_type = model_type
        self.rule, defaults = _MODELS[model_type]
        self.values = {}
        keys = _KEYS[self.rule] + (("spatial_merge_size",) if "spatial_merge_size" in defaults
                                   else (_MERGE,))
        for key in keys:
            self.values[key] = _config_value(config, key, defaults, model_type)
        self.merge = self.values.get(_MERGE) or self.values["spatial_merge_size"]
        self.rows = _hunyuan_rows(config) if self.rule == "hunyuan_vl" else 3

    def __getitem__(self, key):
        return self.values[key]


def _config_value(config, key, defaults, model_type):
    """``config[key]`` (``"vision_config.x"``: of the vision sub-config), else the class default:
    an int, as the config classes require (token ids, merge sizes, rates)."""
    where, name = ("vision_config", key[14:]) if key.startswith("vision_config.") else ("", key)
    part = as_dict(config.get(where) or {}) if where else config
    value = part.get(name, part.get(_ALIASES.get(name, name), defaults.get(key)))
    if value is None:
        raise ValueError(f"config ({model_type}) has no {key!r}, which the model reads")
    return check_int(value, f"config[{key!r}]", minimum=1 if name.endswith("merge_size") else 0)


def _hunyuan_rows(config):
    """HunYuan-VL's number of position rows: ``len(mrope_section)`` of its text rope parameters
    (``xdrope_section`` in older files), at least 3."""
    text_type, text = resolve(config)
    params = standard_rope_parameters(text_type, text).get(None) or {}
    sections = params.get("mrope_section") or params.get("xdrope_section") or ()
    if len(sections) < 3:
        raise ValueError(f"config (hunyuan_vl): HunYuan-VL needs at least 3 mrope_section axes in "
                         f"its text rope parameters, got {list(sections)}")
    return len(sections)


# --- reading the inputs --------------------------------------------------------------------


def _host(x, name):
    """The values of ``x`` on the host (NumPy): the positions' layout depends on them."""
    try:
        if is_lazy(x) and not hasattr(x, "compute"):
            raise TypeError("traced")
        return to_numpy(x)
    except Exception as exc:
        raise ValueError(f"{name} must have values that can be read (not traced under jit, not "
                         f"a meta or fake tensor): the positions depend on them "
                         f"({type(exc).__name__})") from None


def _tokens(xp, input_ids, attention_mask):
    """``(ids, keep)`` on the host and ``keep`` on the device: the token ids and which of them
    the model keeps (``attention_mask`` of 0s and 1s or booleans; None keeps every token)."""
    check_array(xp, input_ids, "input_ids", kind="integer", ndim=2, shape_hint="(batch, seq)")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids must hold at least one token per sequence, got shape "
                         f"{tuple(input_ids.shape)}")
    check_size(3 * input_ids.shape[0] * input_ids.shape[1], "the position ids")
    ids = _host(input_ids, "input_ids").astype(np.int64)
    if attention_mask is None:
        return ids, np.ones(ids.shape, bool), xp.ones(input_ids.shape, dtype=xp.bool,
                                                      device=device_of(input_ids))
    check_array(xp, attention_mask, "attention_mask", kind="bool or integer", ndim=2)
    if tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"attention_mask must have the shape of input_ids "
                         f"{tuple(input_ids.shape)}, got {tuple(attention_mask.shape)}")
    mask = _host(attention_mask, "attention_mask")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError("attention_mask must hold 0 (padding) and 1 (kept) only, got "
                         f"values {sorted(set(np.unique(mask).tolist()) - {0, 1})[:3]}")
    keep = attention_mask if dtype_kind(xp, attention_mask.dtype) == "bool" else attention_mask != 0
    return ids, mask.astype(bool), keep


def _grid(xp, grid, name, merge):
    """``(n, 3)`` (t, h, w) rows on the host; h and w multiples of the merge size."""
    if grid is None:
        return None
    check_array(xp, grid, name, kind="integer", ndim=2, shape_hint="(n, 3): (t, h, w) rows")
    if grid.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3): (t, h, w) rows, got "
                         f"{tuple(grid.shape)}")
    host = _host(grid, name).astype(np.int64)
    if host.size and host.min() < 1:
        raise ValueError(f"{name} must hold t, h, w >= 1, got a value of {host.min()}")
    if (host[:, 1:] % merge).any():
        raise ValueError(f"{name}: h and w must be multiples of spatial_merge_size {merge}, got "
                         f"{host[np.flatnonzero((host[:, 1:] % merge).any(axis=1))[0]].tolist()}")
    return host


def _seconds(xp, seconds, videos):
    """``second_per_grid_ts``: one finite duration >= 0 per video row."""
    check_array(xp, seconds, "second_per_grid_ts", kind="real", ndim=1,
                shape_hint="(one value per video)")
    count = 0 if videos is None else len(videos)
    if seconds.shape[0] != count:
        raise ValueError(f"second_per_grid_ts must hold one value per video_grid_thw row "
                         f"({count}), got shape {tuple(seconds.shape)}")
    host = _host(seconds, "second_per_grid_ts")
    if not np.all(np.isfinite(host) & (host >= 0)):
        raise ValueError("second_per_grid_ts must be finite and >= 0")
    return host


# --- the vision items each model takes --------------------------------------------------------


_OMNI = ("qwen2_5_omni", "qwen3_omni")
_SPLIT = ("qwen3_vl", "glm4v")  # timestamps between frames: one item per video frame


def _items(xp, spec, grid, kind, seconds, dev):
    """The vision items of one modality (``grid`` on the host), in the order the model takes
    them; ``seconds``: the caller's ``second_per_grid_ts`` and its host values, or None."""
    if grid is None:
        return None
    m, rule = spec.merge, spec.rule
    shape = [(int(t), int(h) // m, int(w) // m) for t, h, w in grid]
    if rule == "hunyuan_vl":  # one grid per image whatever its t, a newline column per row
        return [Item([0], h, w, newline=True) for _, h, w in shape]
    if rule == "hy_v4_vl":  # every frame starts a new block of max(h, w + 1) positions
        return [Item([f * max(h, w + 1) for f in range(t)], h, w, newline=True)
                for t, h, w in shape]
    if rule in _OMNI:
        if kind == "video" and seconds is None:
            raise ValueError(f"second_per_grid_ts is required with video_grid_thw for "
                             f"{spec.model_type}: the model reads it for every video")
        host = None if kind == "image" else seconds[1]
        return [Item(_omni_times(spec, t, None if host is None else host[i]), h, w)
                for i, (t, h, w) in enumerate(shape)]
    if kind == "image":
        return [Item(range(t), h, w) for t, h, w in shape]
    if rule in _SPLIT:
        return [Item([0], h, w) for t, h, w in shape for _ in range(t)]
    if rule == "ernie4_5_vl":
        merge_t = spec["vision_config.temporal_merge_size"]
        return [Item(range(t // merge_t), h, w) for t, h, w in shape]
    if rule == "qwen2_5_vl":
        times = _scaled_times(xp, [t for t, _, _ in shape], seconds and seconds[0],
                              spec["vision_config.tokens_per_second"], dev)
        return [Item(ts, h, w) for ts, (_, h, w) in zip(times, shape)]
    return [Item(range(t), h, w) for t, h, w in shape]


def _scaled_times(xp, counts, seconds, tps, dev):
    """Qwen2.5-VL's video frame times ``floor(f * (tokens_per_second * second_per_grid_ts[v]))``,
    multiplied on the device in the dtype the model multiplies in: the seconds' own floating
    dtype (float16 and bfloat16 included), integers for integer seconds."""
    idx = index_dtype(xp, dev)
    frames = np.concatenate([np.arange(t) for t in counts])
    owner = np.repeat(np.arange(len(counts)), counts)
    if seconds is None or dtype_kind(xp, seconds.dtype) != "real floating":
        scale = 1 if seconds is None else _host(seconds, "second_per_grid_ts").astype(np.int64)
        values = frames * (tps * np.broadcast_to(scale, (len(counts),)))[owner]
        return np.split(values, np.cumsum(counts)[:-1])
    interval = xp.asarray(tps, dtype=seconds.dtype, device=dev) * seconds
    f = xp.astype(xp.asarray(frames.tolist(), dtype=idx, device=dev), seconds.dtype)
    scaled = f * xp.take(interval, xp.asarray(owner.tolist(), dtype=idx, device=dev))
    values = _host(xp.astype(scaled, idx), "second_per_grid_ts")  # truncated, as .long()
    return np.split(values, np.cumsum(counts)[:-1])


def _omni_times(spec, t, seconds):
    """Qwen-Omni frame times: ``f * position_id_per_seconds`` for an image, ``f * seconds *
    position_id_per_seconds`` in float32 for a video (``seconds`` read as float32). Qwen2.5-Omni
    truncates them to integers, read back through float32 as its vision helper does; Qwen3-Omni
    keeps them in float32."""
    per = spec["position_id_per_seconds"]
    f = np.arange(t)
    if seconds is None:
        times = f * per  # integer arithmetic, converted afterwards
    else:
        times = f.astype(np.float32) * np.float32(seconds) * np.float32(per)
    if spec.rule == "qwen3_omni":
        return times.astype(np.float32)
    return np.trunc(times).astype(np.int64).astype(np.float32).astype(np.int64)


_RULES = {
    **dict.fromkeys(("qwen2_vl", "paddleocr_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "ernie4_5_vl",
                     "hy_v4_vl"), (plan_runs, "ids", "index", 0)),
    "hunyuan_vl": (plan_hunyuan, "ids", "ids", 0),
    "qwen2_5_omni": (plan_omni, "ids", "index", 1),
    "qwen3_omni": (plan_omni, "float32", "float32", 0),
    "qwen2_5_omni counted": (plan_counted, "index", "index", 1),
    "qwen3_omni counted": (plan_counted, "float32", "float32", 1),
}


def _dtype(xp, rule, input_ids, dev):
    return {"ids": input_ids.dtype, "index": index_dtype(xp, dev), "float32": xp.float32}[rule]


def _check_fits(xp, plan, dtype):
    """Integer positions must fit their dtype (the model's would wrap around silently)."""
    if plan.top is None or dtype_kind(xp, dtype) != "integral":
        return
    if plan.top > int(xp.iinfo(dtype).max):
        raise ValueError(f"input_ids: positions reach {plan.top}, beyond its dtype {dtype} "
                         "(the model's positions take that dtype); pass int64 input_ids")


def mrope_position_ids(config: Config, input_ids: Array, /, *, image_grid_thw: Array | None = None,
                       video_grid_thw: Array | None = None, attention_mask: Array | None = None,
                       second_per_grid_ts: Array | None = None,
                       use_audio_in_video: bool = False) -> tuple[Array, Array]:
    """Multimodal (M-RoPE) position ids of a vision-language prompt, as the model builds them.

    Each model's own ``get_rope_index`` of transformers 5.24, reproduced exactly: Qwen2-VL,
    PaddleOCR-VL, Qwen2.5-VL, Qwen3-VL (MoE), Qwen3.5 (MoE), Qwen4-exp, Cosmos3 (Edge, Omni),
    Cohere Compass, GLM-4V (GLM-4.1V), GLM-4.5V (``glm4v_moe``), GLM-4.6V, GLM-OCR,
    ERNIE-4.5-VL, HunYuan-VL, HY-V4-VL, Qwen2.5-Omni (thinker and talker) and Qwen3-Omni
    (thinker). Token types are worked out from ``input_ids`` and the config's token ids as the
    model's processor does (``mm_token_type_ids``); a placeholder run must match its grid.

    Parameters
    ----------
    config : dict or transformers PretrainedConfig
        The model's whole ``config.json`` (with its ``vision_config``; Omni models: the
        top-level file, whose ``thinker_config`` is read, or a thinker or talker config). Keys it
        omits take the config class's defaults.
    input_ids : array
        Integer token ids ``(batch, seq)``, with the model's placeholder tokens.
    image_grid_thw, video_grid_thw : array, optional
        Integer ``(n, 3)`` (t, h, w) patch grids of the images and videos, in prompt order
        across the batch, as the processor returns them.
    attention_mask : array, optional
        ``(batch, seq)`` of 0/1 or booleans; padding (0) gets the model's padding value and is
        skipped when counting (left or right padding). None keeps every token (the Omni models
        are then given an all-ones mask, which they need).
    second_per_grid_ts : array, optional
        Seconds per temporal grid step of each video ``(num_videos,)``: Qwen2.5-VL
        (``second_per_grid_ts``) and the Omni models (``video_second_per_grid``, required with
        videos there). Other models do not read it: giving it is an error.
    use_audio_in_video : bool, optional
        Omni models: videos carry their audio, interleaved with the frames.

    Returns
    -------
    position_ids : array
        ``(rows, batch, seq)``: (t, h, w) rows (HunYuan-VL: ``len(mrope_section)`` rows), in
        the model's dtype: that of ``input_ids`` for most, the widest integer dtype for the Omni
        models' text-only branch, float32 for Qwen3-Omni. Padding holds 0 (1 for Qwen2.5-Omni,
        and for both Omni models without grids).
    rope_deltas : array
        ``(batch, 1)``: ``max(position) + 1 - kept tokens`` of each sequence; while decoding,
        token ``i`` of the cache is at position ``i + delta`` on every row. The widest integer
        dtype (HunYuan-VL: that of ``input_ids``; Qwen3-Omni: float32).

    Raises
    ------
    TypeError
        Non-integer ``input_ids`` or grids, a float mask, arrays of different libraries, a
        non-bool ``use_audio_in_video``.
    ValueError
        A model type not reproduced (the message says why), wrong shapes, a grid count or size
        that does not match the placeholder runs, a mask of other values than 0 and 1 or keeping
        no token of a sequence, a token layout the model cannot read, ``second_per_grid_ts`` for
        a model that does not read it, or values that cannot be read (traced under jit).

    Notes
    -----
    The token ids, mask, grids and durations are read on the host (as the models read them);
    the positions are then formed at once on the device of ``input_ids``. The caller's arrays
    are never written. Backend support: generic Array API code (NumPy, PyTorch, JAX,
    array-api-strict).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> config = {"model_type": "qwen2_vl", "image_token_id": 151655,
    ...           "vision_config": {"spatial_merge_size": 2}}
    >>> ids = np.array([[9, 151652, 151655, 151655, 151655, 151655, 151653, 9]])
    >>> pos, delta = arrpos.mrope_position_ids(config, ids, image_grid_thw=np.array([[1, 4, 4]]))
    >>> pos[:, 0].tolist()  # t, h, w of each token: the image is a 2 x 2 grid at position 2
    [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]
    >>> delta.tolist()
    [[-2]]
    """
    spec = _Spec(config)
    xp = array_namespace(input_ids, attention_mask, image_grid_thw, video_grid_thw,
                         second_per_grid_ts, name="input_ids, attention_mask, image_grid_thw, "
                         "video_grid_thw and second_per_grid_ts")
    aiv = check_bool(use_audio_in_video, "use_audio_in_video")
    if aiv and spec.rule not in _OMNI:
        raise ValueError(f"use_audio_in_video is for the Omni models, not {spec.model_type}")
    if second_per_grid_ts is not None and spec.rule not in ("qwen2_5_vl", *_OMNI):
        raise ValueError(f"second_per_grid_ts is not read by {spec.model_type} (its video frames "
                         "step by one position)")
    ids, keep, keep_dev = _tokens(xp, input_ids, attention_mask)
    dev = device_of(input_ids)
    grids = {kind: _grid(xp, grid, f"{kind}_grid_thw", spec.merge)
             for kind, grid in (("image", image_grid_thw), ("video", video_grid_thw))}
    seconds = None if second_per_grid_ts is None else (
        second_per_grid_ts, _seconds(xp, second_per_grid_ts, grids["video"]))
    rule = spec.rule
    if rule in _OMNI and grids["image"] is None and grids["video"] is None:
        rule += " counted"  # the models' branch without vision
    planner, positions_dtype, deltas_dtype, pad = _RULES[rule]
    items = {kind: _items(xp, spec, grid, kind, seconds, dev)
             for kind, grid in grids.items() if grid is not None}
    media = Media(items, {"image": "image_grid_thw", "video": "video_grid_thw"})
    plan = Plan(spec.rows)
    deltas = planner(spec, ids, keep, media, plan, aiv)
    dtype = _dtype(xp, positions_dtype, input_ids, dev)
    _check_fits(xp, plan, dtype)
    deltas = [d.item() if isinstance(d, np.generic) else d for d in deltas]
    delta_dtype = _dtype(xp, deltas_dtype, input_ids, dev)
    return (plan.positions(xp, keep_dev, dtype, pad),
            xp.reshape(xp.asarray(deltas, dtype=delta_dtype, device=dev), (len(deltas), 1)))


# --- the vision tower's patch coordinates ------------------------------------------------------


def _grid_rows(xp, grid_thw):
    """``grid_thw`` as host ``(n, 3)`` int64 rows and an index-dtype array on its device; a
    sequence of (t, h, w) triples is accepted (sizes, like a shape)."""
    if hasattr(grid_thw, "shape") and hasattr(grid_thw, "dtype"):
        check_array(xp, grid_thw, "grid_thw", kind="integer", ndim=2,
                    shape_hint="(n, 3): (t, h, w) rows")
        host = _host(grid_thw, "grid_thw").astype(np.int64)
        dev = device_of(grid_thw)
    else:
        if isinstance(grid_thw, (str, bytes, numbers.Number)) or not hasattr(grid_thw, "__iter__"):
            raise TypeError(f"grid_thw must be an integer array or a sequence of (t, h, w) "
                            f"triples, got {describe(grid_thw)}")
        rows = [tuple(row) if hasattr(row, "__iter__") else row for row in grid_thw]
        if any(not isinstance(row, tuple) for row in rows):
            raise TypeError("grid_thw must hold (t, h, w) triples, got a non-sequence row")
        host = np.array([[check_int(v, "grid_thw") for v in row] for row in rows],
                        dtype=np.int64).reshape(len(rows), -1)
        dev = None
    if host.shape[1:] != (3,):
        raise ValueError(f"grid_thw must have shape (n, 3): (t, h, w) rows, got {host.shape}")
    if host.size and host.min() < 1:
        raise ValueError(f"grid_thw must hold t, h, w >= 1, got a value of {host.min()}")
    return host, dev


def vision_position_ids(grid_thw: Grids, /, *, spatial_merge_size: int = 1,
                        include_temporal: bool = False, xp: Namespace | None = None) -> Array:
    """Patch coordinates of a vision tower's rotary, in its merge-block order.

    transformers' ``vision_utils.get_vision_position_ids`` (the Qwen2-VL family's, GLM-4V's,
    ERNIE-4.5-VL's, PaddleOCR-VL's... vision rotary): for each image or video of grid
    ``(t, h, w)``, its ``t * h * w`` patches frame by frame, each frame in blocks of
    ``m x m`` patches (``m = spatial_merge_size``, the patches the merger joins into one
    token), blocks and their patches in row-major order.

    Parameters
    ----------
    grid_thw : array or sequence of (int, int, int)
        ``(n, 3)`` (t, h, w) patch grids, ``h`` and ``w`` multiples of the merge size.
    spatial_merge_size : int, optional
        ``vision_config["spatial_merge_size"]``.
    include_temporal : bool, optional
        Prepend the frame index as a first column (MiniMax-M3-VL's 3-axis vision rotary).
    xp : namespace, optional
        Array namespace when ``grid_thw`` is a sequence (default NumPy).

    Returns
    -------
    array
        Integer ``(sum(t * h * w), 2)`` (row, column) coordinates, ``(..., 3)`` (frame, row,
        column) with ``include_temporal``, in the widest integer dtype of the device of
        ``grid_thw``. Feed them to ``RoPE.from_hf_config(config, subconfig="vision_config")
        .cos_sin(...)`` for the tower's rotary cos/sin.

    Raises
    ------
    TypeError
        ``grid_thw`` not integer, ``spatial_merge_size`` not an int, ``include_temporal`` not
        a bool.
    ValueError
        ``grid_thw`` not ``(n, 3)``, values < 1, ``h`` or ``w`` not multiples of the merge size,
        or values that cannot be read (traced under jit).

    Notes
    -----
    The grid is read on the host (the output length depends on it); the coordinates are formed
    on its device. Backend support: generic Array API code.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.vision_position_ids([(1, 2, 4)], spatial_merge_size=2).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
    """
    merge = check_int(spatial_merge_size, "spatial_merge_size", minimum=1)
    temporal = check_bool(include_temporal, "include_temporal")
    xp = array_namespace(grid_thw, xp=xp, name="grid_thw")
    host, dev = _grid_rows(xp, grid_thw)
    if (host[:, 1:] % merge).any():
        raise ValueError(f"grid_thw: h and w must be multiples of spatial_merge_size {merge}")
    idx = index_dtype(xp, dev)
    counts = host.prod(axis=1)
    total = int(counts.sum())
    check_size(total * (2 + temporal), "the coordinates")
    if total == 0:
        return xp.zeros((0, 2 + temporal), dtype=idx, device=dev)

    def put(values):
        return xp.asarray(values.tolist(), dtype=idx, device=dev)

    tok = xp.arange(total, dtype=idx, device=dev)
    which = xp.searchsorted(put(np.cumsum(counts)), tok, side="right")
    local = tok - xp.take(put(np.cumsum(counts) - counts), which)
    frame_size = xp.take(put(host[:, 1] * host[:, 2]), which)
    blocks_wide = xp.take(put(host[:, 2] // merge), which)
    q = local % frame_size
    block, inner = q // (merge * merge), q % (merge * merge)
    coords = [(block // blocks_wide) * merge + inner // merge,
              (block % blocks_wide) * merge + inner % merge]
    if temporal:
        coords.insert(0, local // frame_size)
    return xp.stack(coords, axis=-1)

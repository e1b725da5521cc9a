"""Multimodal position ids of vision-language models, exactly as their ``get_rope_index`` builds
them in transformers 5.24 (Qwen2-VL and its descendants, GLM-4V, ERNIE-4.5-VL, HunYuan-VL,
HY-V4-VL, Qwen2.5-Omni, Qwen3-Omni), and the patch coordinates of their vision towers' rotary.

The models read the token ids, grids and timing values on the host and lay positions out piece by
piece (text runs, one grid per image or video frame, audio runs); so does this module. The pieces
are planned on the host from the values read (a plan is a few numbers per piece, not per token),
then every position is formed at once on the inputs' device with Array API operations.
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
from .hf_config import _as_dict, resolve, standard_rope_parameters

__all__ = ["mrope_position_ids", "vision_position_ids"]

# How row r of a piece's positions grows along its tokens: with the token's index in the piece
# (LINE), its grid row (ROW), its grid column (COL), or not at all (HOLD).
LINE, ROW, COL, HOLD = 0, 1, 2, 3

_IMAGE, _VIDEO = "image_token_id", "video_token_id"
_MERGE = "vision_config.spatial_merge_size"
# the config class's defaults of the keys each model type's get_rope_index (and processor) reads;
# "vision_config.<key>" is a key of the vision sub-config (tests/test_mrope_ids.py checks every
# value against transformers' config classes)
_OMNI_IDS = {_IMAGE: 151655, _VIDEO: 151656, "audio_token_id": 151646,
               "audio_start_token_id": 151647, "position_id_per_seconds": 25, _MERGE: 2}
_MODELS = {
    "qwen2_vl": ("qwen2_vl", {_IMAGE: 151655, _VIDEO: 151656, _MERGE: 2}),
    "paddleocr_vl": ("paddleocr_vl", {_IMAGE: 100295, _MERGE: 2}),
    "qwen2_5_vl": ("qwen2_5_vl", {_IMAGE: 151655, _VIDEO: 151656, _MERGE: 2,
                                  "vision_config.tokens_per_second": 4}),
    **{t: ("qwen3_vl", {_IMAGE: image, _VIDEO: image + 1, _MERGE: 2}) for t, image in (
        ("qwen3_vl", 151655), ("qwen3_vl_moe", 151655), ("cosmos3_omni", 151655),
        ("qwen3_5", 248056), ("qwen3_5_moe", 248056), ("qwen4_exp", 248056),
        ("cohere_compass", 255031))},
    "cosmos3_edge": ("qwen3_vl", {_IMAGE: 19, _VIDEO: 18, _MERGE: 2}),
    **{t: ("glm4v", {_IMAGE: image, "video_start_token_id": start,
                     "video_end_token_id": start + 1, _MERGE: 2}) for t, image, start in (
        ("glm4v", 151343, 151341), ("glm4v_moe", 151363, 151341), ("glm46v", 151343, 151361),
        ("glm_ocr", 59280, 59258))},
    "ernie4_5_vl_moe": ("ernie4_5_vl", {_IMAGE: 100295, _VIDEO: 103367, _MERGE: 2,
                                        "vision_config.temporal_merge_size": 2}),
    "hy_v4_vl": ("hy_v4_vl", {_IMAGE: 120120, _VIDEO: 120124, _MERGE: 2}),
    "hunyuan_vl": ("hunyuan_vl", {_IMAGE: 120120, _MERGE: 2}),
    "qwen2_5_omni_thinker": ("qwen2_5_omni", {**_OMNI_IDS, "seconds_per_chunk": 2}),
    "qwen2_5_omni_talker": ("qwen2_5_omni", {
        **{k: v for k, v in _OMNI_IDS.items() if k != _MERGE}, "seconds_per_chunk": 2,
        "vision_start_token_id": 151652, "spatial_merge_size": 2}),
    "qwen3_omni_moe_thinker": ("qwen3_omni", _OMNI_IDS),
}
# the model types whose sub-config holds the model that builds the positions
_COMPOSITE = {"qwen2_5_omni": "thinker_config", "qwen3_omni_moe": "thinker_config"}
# keys of Qwen2.5-Omni's config classes that config.json files store under another name
_ALIASES = {_IMAGE: "image_token_index", _VIDEO: "video_token_index",
            "audio_token_id": "audio_token_index"}
_OMNI_KEYS = ("audio_token_id", "audio_start_token_id", "vision_start_token_id",
              "position_id_per_seconds")
# what each rule reads besides the vision merge size
_KEYS = {
    "qwen2_vl": (_IMAGE, _VIDEO), "qwen3_vl": (_IMAGE, _VIDEO), "hy_v4_vl": (_IMAGE, _VIDEO),
    "qwen2_5_vl": (_IMAGE, _VIDEO, "vision_config.tokens_per_second"),
    "ernie4_5_vl": (_IMAGE, _VIDEO, "vision_config.temporal_merge_size"),
    "paddleocr_vl": (_IMAGE,), "hunyuan_vl": (_IMAGE,),
    "glm4v": (_IMAGE, "video_start_token_id", "video_end_token_id"),
    "qwen2_5_omni": (_IMAGE, _VIDEO, *_OMNI_KEYS, "seconds_per_chunk"),
    "qwen3_omni": (_IMAGE, _VIDEO, *_OMNI_KEYS),
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
        config = _as_dict(config)
        model_type = config.get("model_type")
        if model_type in _COMPOSITE:
            config = _as_dict(config.get(_COMPOSITE[model_type]) or {})
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
    part = _as_dict(config.get(where) or {}) if where else config
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


# --- the plan: positions as pieces of consecutive kept tokens --------------------------------


class _Plan:
    """Pieces of consecutive kept tokens (in batch-major order) whose row ``r`` is ``base[r]``
    plus, by ``sel[r]``, the token's index in the piece counted from ``first`` (LINE), its row
    or column in a grid of ``width`` columns (ROW, COL), or nothing (HOLD). A piece whose bases
    are float32 (Qwen3-Omni) is formed in float32, as the model forms it."""

    def __init__(self, rows):
        self.rows = rows
        self.counts, self.firsts, self.widths = [], [], []
        self.bases, self.sels, self.real = [], [], []
        self.top = None  # the largest position of all pieces

    def piece(self, count, base, sel, *, width=1, first=0):
        """Append a piece of ``count`` tokens; its largest value (None when empty)."""
        if count <= 0:
            return None
        self.counts.append(count)
        self.firsts.append(first)
        self.widths.append(width)
        self.bases.append(base)
        self.sels.append(sel)
        self.real.append(isinstance(base[0], np.float32))
        last = first + count - 1
        grow = {LINE: last, ROW: last // width, HOLD: 0,
                COL: width - 1 if first // width != last // width else last % width}
        top = max(b + grow[s] for b, s in zip(base, sel))
        self.top = top if self.top is None else max(self.top, top)
        return top

    def positions(self, xp, keep, dtype, pad):
        """``(rows, batch, seq)`` positions in ``dtype``: the pieces over the kept tokens of
        ``keep`` (the device mask), ``pad`` elsewhere."""
        dev = device_of(keep)
        idx = index_dtype(xp, dev)
        flat = xp.reshape(keep, (-1,))
        if not self.counts:
            return xp.full((self.rows,) + tuple(keep.shape), pad, dtype=dtype, device=dev)
        table = _Table(xp, self, idx, dev)
        # the kept-token index of every slot, and the piece it falls in
        g = xp.cumulative_sum(xp.astype(flat, idx)) - 1
        g = xp.maximum(g, xp.zeros_like(g))
        p = xp.searchsorted(table.starts, g, side="right") - 1
        k = g - xp.take(table.starts, p) + xp.take(table.first, p)
        width = xp.take(table.width, p)
        grows = {LINE: k, ROW: k // width, COL: k % width}
        real = xp.take(table.real, p) if table.base_f is not None else None
        rows = []
        for r in range(self.rows):
            sel = xp.take(table.sel[r], p)
            q = sum(xp.astype(sel == s, idx) * grows[s] for s in (LINE, ROW, COL))
            value = xp.take(table.base[r], p) + q
            if real is not None:
                exact = xp.astype(value, xp.float32)  # int pieces: formed exactly, then rounded
                value = xp.where(real, xp.take(table.base_f[r], p) + xp.astype(q, xp.float32),
                                 exact)
            value = xp.where(flat, xp.astype(value, dtype), xp.asarray(pad, dtype=dtype,
                                                                       device=dev))
            rows.append(xp.reshape(value, tuple(keep.shape)))
        return xp.stack(rows, axis=0)


class _Table:
    """A plan's pieces as small device arrays (one entry per piece)."""

    def __init__(self, xp, plan, idx, dev):
        def put(values, dtype=idx):
            return xp.asarray(values, dtype=dtype, device=dev)

        self.starts = put(np.cumsum([0] + plan.counts[:-1]).tolist())
        self.first = put(plan.firsts)
        self.width = put(plan.widths)
        self.sel = [put([s[r] for s in plan.sels]) for r in range(plan.rows)]
        ints = [[0 if real else int(b[r]) for b, real in zip(plan.bases, plan.real)]
                for r in range(plan.rows)]
        self.base = [put(v) for v in ints]
        self.base_f, self.real = None, None
        if any(plan.real):
            self.base_f = [put([float(b[r]) if real else 0.0 for b, real in
                                zip(plan.bases, plan.real)], xp.float32)
                           for r in range(plan.rows)]
            self.real = put(plan.real, xp.bool)


class _Blocks:
    """One sequence's blocks of positions as the model appends them (``llm_pos_ids_list``):
    ``last`` is the largest value of the last block (the model starts the next block at
    ``last + 1``), ``top`` the largest of all (the rope delta is ``top + 1 - tokens``)."""

    def __init__(self, plan):
        self.plan, self.last, self.top, self.tokens = plan, None, None, 0

    def next_start(self):
        return 0 if self.last is None else self.last + 1

    def note(self, count, top):
        """Record a block of ``count`` tokens whose largest value is ``top``."""
        if count:
            self.tokens += count
            self.last = top
            self.top = top if self.top is None else max(self.top, top)

    def line(self, count, start=None, *, first=0):
        """A block of ``count`` positions ``start + first, start + first + 1, ...`` on every row."""
        start = self.next_start() if start is None else start
        rows = self.plan.rows
        self.note(count, self.plan.piece(count, (start,) * rows, (LINE,) * rows, first=first))

    def grid(self, start, item, lo=0, hi=None):
        """Tokens ``lo .. hi-1`` of a vision item placed at ``start``, one piece per frame: row 0
        the frame's time, rows 1 and 2 the grid row and column (all three shifted by the time
        when the item says so: HY-V4-VL's blocks of frames)."""
        size = item.h * item.cols
        hi = item.tokens if hi is None else hi
        if isinstance(item.times[0], np.float32):
            start = np.float32(start)
        top = None
        for f in range(lo // size, (hi - 1) // size + 1):
            a, b = max(lo, f * size) - f * size, min(hi, (f + 1) * size) - f * size
            t = start + item.times[f]
            hw = t if item.shift else start
            m = self.plan.piece(b - a, (t, hw, hw), (HOLD, ROW, COL), width=item.cols, first=a)
            top = m if top is None else max(top, m)
        self.note(hi - lo, top)
        return top


class _Item:
    """One image or video (or one frame of a split video) as its grid of merged tokens: frame
    times (ints, or float32 for Qwen3-Omni), ``h`` rows and ``w`` columns of merged patches,
    ``cols`` tokens per row (``w + 1`` with HY-V4-VL's and HunYuan-VL's newline token, whose
    frames are also blocks shifted by their time: ``shift``)."""

    def __init__(self, times, h, w, *, newline=False):
        self.times = [t if isinstance(t, np.float32) else int(t) for t in times]
        self.h, self.w = int(h), int(w)
        self.cols = self.w + 1 if newline else self.w
        self.shift = newline
        self.tokens = len(self.times) * self.h * self.cols


class _Media:
    """The items of each modality in the order the model takes them, across the batch."""

    def __init__(self, items, names):
        self.items, self.names, self.used = items, names, {k: 0 for k in items}

    def take(self, kind):
        items, i = self.items.get(kind) or [], self.used.get(kind, 0)
        if i >= len(items):
            raise ValueError(f"input_ids holds more {kind} placeholders than {self.names[kind]} "
                             f"provides ({len(items)})")
        self.used[kind] = i + 1
        return items[i]

    def finish(self):
        for kind, items in self.items.items():
            if self.used[kind] != len(items):
                raise ValueError(f"{self.names[kind]} provides {len(items)} {kind} grids but "
                                 f"input_ids holds {self.used[kind]} {kind} placeholders")


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
        return [_Item([0], h, w, newline=True) for _, h, w in shape]
    if rule == "hy_v4_vl":  # every frame starts a new block of max(h, w + 1) positions
        return [_Item([f * max(h, w + 1) for f in range(t)], h, w, newline=True)
                for t, h, w in shape]
    if rule in _OMNI:
        if kind == "video" and seconds is None:
            raise ValueError(f"second_per_grid_ts is required with video_grid_thw for "
                             f"{spec.model_type}: the model reads it for every video")
        host = None if kind == "image" else seconds[1]
        return [_Item(_omni_times(spec, t, None if host is None else host[i]), h, w)
                for i, (t, h, w) in enumerate(shape)]
    if kind == "image":
        return [_Item(range(t), h, w) for t, h, w in shape]
    if rule in _SPLIT:
        return [_Item([0], h, w) for t, h, w in shape for _ in range(t)]
    if rule == "ernie4_5_vl":
        merge_t = spec["vision_config.temporal_merge_size"]
        return [_Item(range(t // merge_t), h, w) for t, h, w in shape]
    if rule == "qwen2_5_vl":
        times = _scaled_times(xp, [t for t, _, _ in shape], seconds and seconds[0],
                              spec["vision_config.tokens_per_second"], dev)
        return [_Item(ts, h, w) for ts, (_, h, w) in zip(times, shape)]
    return [_Item(range(t), h, w) for t, h, w in shape]


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


# --- the planners: one per get_rope_index --------------------------------------------------


def _runs(kinds):
    """``(kind, start, end)`` of each run of equal values of the 1-D ``kinds``."""
    if len(kinds) == 0:
        return []
    edges = (np.flatnonzero(np.diff(kinds)) + 1).tolist()
    return [(int(kinds[a]), a, b) for a, b in zip([0] + edges, edges + [len(kinds)])]


def _token_types(spec, ids):
    """The processor's ``mm_token_type_ids``: 1 image, 2 video, 0 text. GLM-4V's videos are
    image tokens between its video start and end tokens."""
    types = np.zeros(ids.shape, np.int8)
    image = ids == spec[_IMAGE]
    if spec.rule == "glm4v":
        inside = (np.cumsum(ids == spec["video_start_token_id"], axis=1)
                  > np.cumsum(ids == spec["video_end_token_id"], axis=1))
        types[image & ~inside] = 1
        types[image & inside] = 2
        return types
    types[image] = 1
    if _VIDEO in spec.values:
        types[ids == spec[_VIDEO]] = 2
    return types


def _delta(blocks, n, b, real=False):
    """``top + 1 - n`` of one sequence (in float32 when ``real``: Qwen3-Omni); a sequence with no
    kept token is an error, as in the model (it concatenates no blocks)."""
    if blocks.top is None:
        raise ValueError(f"attention_mask keeps no token of sequence {b}; the model needs one")
    if blocks.tokens != n:
        raise ValueError(f"input_ids: the placeholders of sequence {b} lay out {blocks.tokens} "
                         f"positions for its {n} kept tokens (a placeholder run and its grid, "
                         "or its start and end tokens, disagree)")
    return (np.float32(blocks.top) if real else blocks.top) + 1 - n


_KINDS = {1: "image", 2: "video"}


def _check_count(media, kind, item, count, b):
    """A grid and its placeholder tokens must agree (the model would misplace or fail)."""
    if item.tokens != count:
        raise ValueError(f"{media.names[kind]}: a grid of {item.tokens} tokens meets "
                         f"{count} {kind} placeholder tokens in sequence {b} of input_ids")


def _plan_runs(spec, ids, keep, media, plan, _):
    """Qwen2-VL's get_rope_index and its descendants': runs of one token type; a text run counts
    on, a vision run takes the next grid of its kind (across the batch) at the current position,
    after which text moves on by ``max(h, w)`` (HY-V4-VL: past the grid's largest position)."""
    types, deltas = _token_types(spec, ids), []
    for b in range(ids.shape[0]):
        kinds = types[b][keep[b]]
        blocks, pos = _Blocks(plan), 0
        for kind, lo, hi in _runs(kinds):
            if kind == 0:
                blocks.line(hi - lo, pos)
                pos += hi - lo
                continue
            item = media.take(_KINDS[kind])
            _check_count(media, _KINDS[kind], item, hi - lo, b)
            top = blocks.grid(pos, item)
            pos = top + 1 if item.shift else pos + max(item.h, item.w)
        deltas.append(_delta(blocks, len(kinds), b))
    media.finish()
    return deltas


def _plan_hunyuan(spec, ids, keep, media, plan, _):
    """HunYuan-VL's get_rope_index: every row counts the kept tokens, but inside an image span
    (with or without its two edge tokens) the last three rows are (column, row, image index);
    the image index runs on across the batch."""
    rows, index, deltas = spec.rows, 0, []
    lead = (LINE,) * (rows - 3)
    for b in range(ids.shape[0]):
        tok = ids[b][keep[b]]
        blocks, at = _Blocks(plan), 0
        spans = [] if "image" not in media.items else _runs((tok == spec[_IMAGE]).astype(np.int8))
        for kind, lo, hi in spans:
            if kind != 1:
                continue
            item = media.take("image")
            edges = int(hi - lo == item.tokens + 2)  # the span may hold its two edge tokens
            _check_count(media, "image", item, hi - lo - 2 * edges, b)
            lo += edges
            blocks.line(lo - at, at)
            top = plan.piece(item.tokens, (lo,) * (rows - 3) + (0, 0, index),
                             lead + (COL, ROW, HOLD), width=item.cols)
            blocks.note(item.tokens, top)
            at, index = lo + item.tokens, index + 1
        blocks.line(len(tok) - at, at)
        deltas.append(_delta(blocks, len(tok), b))
    media.finish()
    return deltas


class _Finder:
    """The kept tokens of one sequence: ``next(token, st)`` is the model's
    ``input_tokens.index(token, st)``, ``run(at, tokens)`` the length of the run of ``tokens``
    from ``at``."""

    def __init__(self, tok, b, audio=None):
        self.tok, self.b, self.audio, self.where = tok, b, audio, {}

    def has(self, token):
        return bool((self.tok == token).any())

    def next(self, token, st):
        if token not in self.where:
            self.where[token] = np.flatnonzero(self.tok == token)
        at = self.where[token]
        i = int(np.searchsorted(at, st))
        if i == len(at):
            raise ValueError(f"input_ids: sequence {self.b} has no token {token} after position "
                             f"{st}, where the model's layout expects one")
        return int(at[i])

    def count(self, at, length, token):
        """How many of the ``length`` tokens from ``at`` are ``token``."""
        return int((self.tok[at:at + length] == token).sum())

    def run(self, at, tokens):
        other = np.flatnonzero(~np.isin(self.tok[at:], tokens))
        return int(other[0]) if len(other) else len(self.tok) - at


def _omni_counts(spec, find, aiv):
    """The Omni models' counts of images, videos and audios of one sequence: vision start tokens
    followed by an image (a video; with audio in video: an audio start), audio start tokens."""
    tok = find.tok
    starts = np.flatnonzero(tok == spec["vision_start_token_id"])
    if len(starts) and starts[-1] + 1 >= len(tok):
        raise ValueError(f"input_ids: sequence {find.b} ends with a vision start token")
    after = tok[starts + 1]
    video = spec["audio_start_token_id"] if aiv else spec[_VIDEO]
    return {"image": int((after == spec[_IMAGE]).sum()), "video": int((after == video).sum()),
            "audio": int((tok == spec["audio_start_token_id"]).sum())}


def _audio_run(find, at):
    """The audio tokens from ``at`` (at least one: the model fails on an empty audio block)."""
    n = find.run(at, (find.audio,))
    if n < 1:
        raise ValueError(f"input_ids: sequence {find.b} has an audio start token with no audio "
                         f"token after it (position {at})")
    return n


def _chunks(values, size):
    """The Qwen-Omni ``get_chunked_index``: ``(start, end)`` ranges of the nondecreasing
    ``values`` (>= 0), a new chunk starting at the token where the number of chunks passed,
    ``value // size``, exceeds the chunks started so far (at most one per token)."""
    n = len(values)
    i = np.arange(n)
    need = np.asarray(values, np.int64) // size
    done = i + np.minimum(np.minimum.accumulate(need - i), 1) if n else i
    cuts = np.flatnonzero(np.diff(np.concatenate(([0], done))) > 0).tolist()
    bounds = [0] + cuts + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _interleave(spec, blocks, start, item, audio):
    """Qwen2.5-Omni's video with its audio: chunk j of the video's tokens (by frame time), then
    chunk j of the audio's (one position each), chunks of ``position_id_per_seconds *
    seconds_per_chunk`` positions."""
    size = int(spec["position_id_per_seconds"] * spec["seconds_per_chunk"])
    if size < 1:
        raise ValueError(f"config ({spec.model_type}): position_id_per_seconds * "
                         f"seconds_per_chunk must be >= 1 to chunk a video's audio, got {size}")
    video = _chunks(np.repeat(item.times, item.h * item.cols), size)
    sound = _chunks(np.arange(audio), size)
    for j in range(max(len(video), len(sound))):
        if j < len(video):
            blocks.grid(start, item, *video[j])
        if j < len(sound):
            blocks.line(sound[j][1] - sound[j][0], start, first=sound[j][0])


def _qwen2_5_pass(spec, blocks, find, media, st, remain, aiv):
    """One pass of Qwen2.5-Omni's loop: the first image, video or audio token from ``st``, the
    text before its start token(s), the item and its end token(s); returns the next ``st``."""
    n = len(find.tok)
    ends = {kind: find.next(spec[key], st) if remain[kind] > 0 and find.has(spec[key]) else n + 1
            for kind, key in (("audio", "audio_token_id"), ("image", _IMAGE), ("video", _VIDEO))}
    kind = min(ends, key=ends.get)  # the model tests audio, then image, then video
    at = ends[kind]
    if at > n:
        raise ValueError(f"input_ids: sequence {find.b} has fewer placeholders than its start "
                         "tokens announce")
    remain[kind] -= 1
    pair = kind == "video" and aiv
    text = at - st - (2 if pair else 1)
    if text < 0:
        raise ValueError(f"input_ids: the {kind} token at position {at} of sequence {find.b} "
                         "lacks its start token(s)")
    blocks.line(text)
    if kind == "audio":
        audio = _audio_run(find, at)
        for count in (1, audio, 1):
            blocks.line(count)
        return at + audio + 1
    item = media.take(kind)
    if not pair:
        token = spec[_IMAGE if kind == "image" else _VIDEO]
        _check_count(media, kind, item, find.run(at, (token,)), find.b)
        blocks.line(1)
        blocks.grid(blocks.next_start(), item)
        blocks.line(1)
        return at + item.tokens + 1
    remain["audio"] -= 1
    region = find.run(at, (spec[_VIDEO], find.audio))
    _check_count(media, kind, item, find.count(at, region, spec[_VIDEO]), find.b)
    for edge in (blocks.next_start(),) * 2:  # two start tokens at one position
        blocks.line(1, edge)
    _interleave(spec, blocks, blocks.next_start(), item, region - item.tokens)
    for edge in (blocks.next_start(),) * 2:  # and two end tokens
        blocks.line(1, edge)
    return at + region + 2


def _qwen3_pass(spec, blocks, find, media, st, remain):
    """One pass of Qwen3-Omni's loop: the text up to the next vision or audio start token, the
    start token(s) (two for a video with its audio), the item, its end token(s)."""
    n, tok = len(find.tok), find.tok
    vision = (remain["image"] > 0 or remain["video"] > 0) and (
        find.has(spec[_IMAGE]) or find.has(spec[_VIDEO]))
    ed_v = find.next(spec["vision_start_token_id"], st) if vision else n + 1
    hear = remain["audio"] > 0 and find.has(find.audio)
    ed_a = find.next(spec["audio_start_token_id"], st) if hear else n + 1
    at = min(ed_v, ed_a)
    if at > n:
        raise ValueError(f"input_ids: sequence {find.b} has fewer placeholders than its start "
                         "tokens announce")
    start = blocks.next_start()
    blocks.line(at - st, start)
    pair = at == ed_v and ed_v + 1 == ed_a
    edge = 2 if pair else 1
    blocks.line(edge, start + (at - st))
    start = start + (at - st) + edge
    if at == ed_a:
        used, kinds = _audio_run(find, at + 1), ("audio",)
        blocks.line(used, start)
    elif tok[at + 1] in (spec[_IMAGE], spec[_VIDEO]):
        kinds = ("image",) if tok[at + 1] == spec[_IMAGE] else ("video",)
        item = media.take(kinds[0])
        used = item.tokens
        _check_count(media, kinds[0], item, find.run(at + 1, (tok[at + 1],)), find.b)
        blocks.grid(start, item)
    elif pair:
        item, kinds = media.take("video"), ("video", "audio")
        used = find.run(at + 2, (spec[_VIDEO], find.audio))
        _check_count(media, "video", item, find.count(at + 2, used, spec[_VIDEO]), find.b)
        _merge(blocks, start, item, used - item.tokens)
    else:
        raise ValueError(f"input_ids: the vision start token at position {at} of sequence "
                         f"{find.b} is followed by no image, video or audio start token")
    for kind in kinds:
        remain[kind] -= 1
    blocks.line(edge)
    return st + (at - st) + 2 * edge + used


def _merge(blocks, start, item, audio):
    """Qwen3-Omni's video with its audio: the tokens in order of their time positions (float32;
    a video token first on a tie), the audio one position per token."""
    if audio < 1:
        raise ValueError("input_ids: a video with its audio holds no audio token")
    size = item.h * item.cols
    times = np.float32(start) + np.asarray(item.times, np.float32)
    if isinstance(start, np.float32):  # the model's audio positions, compared in float32
        sound = np.arange(audio, dtype=np.float32) + start
    else:
        sound = (np.arange(audio) + start).astype(np.float32)
    cuts = np.searchsorted(sound, times, side="left").tolist()
    done = 0
    for f, cut in enumerate(cuts):
        blocks.line(cut - done, start, first=done)
        blocks.grid(start, item, f * size, (f + 1) * size)
        done = cut
    blocks.line(audio - done, start, first=done)


def _plan_omni(spec, ids, keep, media, plan, aiv):
    """Qwen2.5-Omni's and Qwen3-Omni's get_rope_index with image or video grids: one pass per
    image, audio and video (a video with its audio counting once), then the trailing text."""
    deltas = []
    for b in range(ids.shape[0]):
        find = _Finder(ids[b][keep[b]], b, spec["audio_token_id"])
        remain = _omni_counts(spec, find, aiv)
        passes = remain["image"] + remain["audio"] + (0 if aiv else remain["video"])
        blocks, st = _Blocks(plan), 0
        for _ in range(passes):
            if spec.rule == "qwen2_5_omni":
                st = _qwen2_5_pass(spec, blocks, find, media, st, remain, aiv)
            else:
                st = _qwen3_pass(spec, blocks, find, media, st, remain)
        blocks.line(len(find.tok) - st)
        deltas.append(_delta(blocks, len(find.tok), b, real=spec.rule == "qwen3_omni"))
    media.finish()
    return deltas


def _plan_counted(spec, ids, keep, media, plan, _):
    """The Omni models without image and video grids: positions count the kept tokens; the
    delta comes from the largest value of the row, padding (1) included."""
    deltas = []
    for b in range(ids.shape[0]):
        n = int(keep[b].sum())
        _Blocks(plan).line(n, 0)
        top = max([n - 1] * (n > 0) + [1] * (n < ids.shape[1]))
        deltas.append(top + 1 - n)
    return deltas


# rule -> (planner, positions dtype, deltas dtype, padding): "ids" input_ids' dtype, "index" the
# widest integer dtype of the device, "float32"
_RULES = {
    **dict.fromkeys(("qwen2_vl", "paddleocr_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "ernie4_5_vl",
                     "hy_v4_vl"), (_plan_runs, "ids", "index", 0)),
    "hunyuan_vl": (_plan_hunyuan, "ids", "ids", 0),
    "qwen2_5_omni": (_plan_omni, "ids", "index", 1),
    "qwen3_omni": (_plan_omni, "float32", "float32", 0),
    "qwen2_5_omni counted": (_plan_counted, "index", "index", 1),
    "qwen3_omni counted": (_plan_counted, "float32", "float32", 1),
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


def mrope_position_ids(config, input_ids, /, *, image_grid_thw=None, video_grid_thw=None,
                       attention_mask=None, second_per_grid_ts=None, use_audio_in_video=False):
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
    media = _Media(items, {"image": "image_grid_thw", "video": "video_grid_thw"})
    plan = _Plan(spec.rows)
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


def vision_position_ids(grid_thw, /, *, spatial_merge_size=1, include_temporal=False, xp=None):
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

"""How the vision-language models of :mod:`.mrope_ids` lay their positions out: the planners
(one per ``get_rope_index``) walk each sequence's token runs on the host and record pieces of
consecutive kept tokens (:class:`Plan`: a few numbers per piece, not per token), which
:meth:`Plan.positions` then forms at once on the inputs' device with Array API operations.
"""
from __future__ import annotations

import numpy as np

from .._lib import device_of, index_dtype

__all__ = ["COL", "HOLD", "IMAGE", "Item", "LINE", "Media", "Plan", "ROW", "VIDEO",
           "plan_counted", "plan_hunyuan", "plan_omni", "plan_runs"]

# How row r of a piece's positions grows along its tokens: with the token's index in the piece
# (LINE), its grid row (ROW), its grid column (COL), or not at all (HOLD).
LINE, ROW, COL, HOLD = 0, 1, 2, 3

# the config keys of the image and video placeholder token ids
IMAGE, VIDEO = "image_token_id", "video_token_id"


# --- the plan: positions as pieces of consecutive kept tokens --------------------------------


class Plan:
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
        base_f = table.base_f
        real = xp.take(table.real, p) if base_f is not None else None
        rows = []
        for r in range(self.rows):
            sel = xp.take(table.sel[r], p)
            q = sum(xp.astype(sel == s, idx) * grows[s] for s in (LINE, ROW, COL))
            value = xp.take(table.base[r], p) + q
            if base_f is not None:
                exact = xp.astype(value, xp.float32)  # int pieces: formed exactly, then rounded
                value = xp.where(real, xp.take(base_f[r], p) + xp.astype(q, xp.float32),
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


class Item:
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


class Media:
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
    image = ids == spec[IMAGE]
    if spec.rule == "glm4v":
        inside = (np.cumsum(ids == spec["video_start_token_id"], axis=1)
                  > np.cumsum(ids == spec["video_end_token_id"], axis=1))
        types[image & ~inside] = 1
        types[image & inside] = 2
        return types
    types[image] = 1
    if VIDEO in spec.values:
        types[ids == spec[VIDEO]] = 2
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


def plan_runs(spec, ids, keep, media, plan, _):
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


def plan_hunyuan(spec, ids, keep, media, plan, _):
    """HunYuan-VL's get_rope_index: every row counts the kept tokens, but inside an image span
    (with or without its two edge tokens) the last three rows are (column, row, image index);
    the image index runs on across the batch."""
    rows, index, deltas = spec.rows, 0, []
    lead = (LINE,) * (rows - 3)
    for b in range(ids.shape[0]):
        tok = ids[b][keep[b]]
        blocks, at = _Blocks(plan), 0
        spans = [] if "image" not in media.items else _runs((tok == spec[IMAGE]).astype(np.int8))
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
    video = spec["audio_start_token_id"] if aiv else spec[VIDEO]
    return {"image": int((after == spec[IMAGE]).sum()), "video": int((after == video).sum()),
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
            for kind, key in (("audio", "audio_token_id"), ("image", IMAGE), ("video", VIDEO))}
    kind = min(ends, key=lambda k: ends[k])  # the model tests audio, then image, then video
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
        token = spec[IMAGE if kind == "image" else VIDEO]
        _check_count(media, kind, item, find.run(at, (token,)), find.b)
        blocks.line(1)
        blocks.grid(blocks.next_start(), item)
        blocks.line(1)
        return at + item.tokens + 1
    remain["audio"] -= 1
    region = find.run(at, (spec[VIDEO], find.audio))
    _check_count(media, kind, item, find.count(at, region, spec[VIDEO]), find.b)
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
        find.has(spec[IMAGE]) or find.has(spec[VIDEO]))
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
    kinds: tuple[str, ...]
    if at == ed_a:
        used, kinds = _audio_run(find, at + 1), ("audio",)
        blocks.line(used, start)
    elif tok[at + 1] in (spec[IMAGE], spec[VIDEO]):
        kinds = ("image",) if tok[at + 1] == spec[IMAGE] else ("video",)
        item = media.take(kinds[0])
        used = item.tokens
        _check_count(media, kinds[0], item, find.run(at + 1, (tok[at + 1],)), find.b)
        blocks.grid(start, item)
    elif pair:
        item, kinds = media.take("video"), ("video", "audio")
        used = find.run(at + 2, (spec[VIDEO], find.audio))
        _check_count(media, "video", item, find.count(at + 2, used, spec[VIDEO]), find.b)
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


def plan_omni(spec, ids, keep, media, plan, aiv):
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


def plan_counted(spec, ids, keep, media, plan, _):
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

"""``mrope_position_ids`` and ``vision_position_ids`` against transformers 5.24's own code.

Every expected value comes from the model's own ``get_rope_index`` (called unbound on a small
object carrying the config and the helper methods it reads; no model is built, no weight is
loaded), its processor's ``mm_token_type_ids`` and placeholder layout, and
``vision_utils.get_vision_position_ids`` with the vision towers' rotary modules. Prompts hold
several images and videos (audio for the Omni models), batches of 3 padded left or right,
random grids.
"""
from __future__ import annotations

import importlib
import inspect
import types
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402
from transformers.processing_utils import ProcessorMixin  # noqa: E402
from transformers.vision_utils import get_vision_position_ids  # noqa: E402

import arrpos  # noqa: E402
from arrpos._rope import mrope_ids as _mrope_ids  # noqa: E402
import hf_real_configs as real  # noqa: E402

PAD = 0  # a pad token id that is no model's special token
# processors that put a timestamp before each video frame (its own vision start and end)
SPLIT = {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen4_exp", "cosmos3_edge",
         "cosmos3_omni", "cohere_compass"}

RUNS = ("qwen2_vl", "paddleocr_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5",
        "qwen3_5_moe", "qwen4_exp", "cosmos3_edge", "cosmos3_omni", "cohere_compass", "glm4v",
        "glm4v_moe", "glm46v", "glm_ocr", "ernie4_5_vl_moe", "hy_v4_vl")


def _config(model_type, **changes):
    """The config class's defaults, with ``changes`` (``"vision_config.x"``: of the tower)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = CONFIG_MAPPING[model_type]()
    for key, value in changes.items():
        target = cfg
        *path, name = key.split(".")
        for part in path:
            target = getattr(target, part)
        setattr(target, name, value)
    return cfg


def _model_class(model_type, suffix=""):
    """The class of ``modeling_<model_type>`` that defines get_rope_index (one ending in
    ``suffix`` when several do)."""
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    found = [c for c in vars(module).values()
             if inspect.isclass(c) and "get_rope_index" in vars(c) and c.__name__.endswith(suffix)]
    return found[0]


def _stub(cls, config, **attributes):
    """An object carrying ``config`` and ``cls``'s methods that get_rope_index calls."""
    names = ("get_rope_index", "get_vision_position_ids", "get_llm_pos_ids_for_vision",
             "get_chunked_index")
    stub = type("Stub", (), {n: getattr(cls, n) for n in names if hasattr(cls, n)})()
    stub.config = config
    stub.__dict__.update(attributes)
    return stub


# --- prompts as the processors lay them out ----------------------------------------------------


class Prompt:
    """A batch of token rows with the grids, durations and audio lengths of their media, in
    prompt order across the batch (as the processors return them)."""

    def __init__(self, rng):
        self.rng, self.rows = rng, []
        self.images, self.videos, self.seconds, self.audio_lengths = [], [], [], []

    def text(self, lo=1, hi=4):
        return self.rng.integers(1000, 2000, int(self.rng.integers(lo, hi + 1))).tolist()

    def grid(self, merge, t=(1,), size=5):
        t = int(self.rng.choice(t))
        return [t, merge * int(self.rng.integers(1, size + 1)),
                merge * int(self.rng.integers(1, size + 1))]

    def batch(self, row, *, left, rows=3, dtype=torch.int64):
        """``rows`` rows made by ``row()``, padded with PAD on the left or right."""
        made = [row() for _ in range(rows)]
        width = max(len(r) for r in made) + 1
        ids = np.full((rows, width), PAD, np.int64)
        mask = np.zeros((rows, width), np.int64)
        for b, r in enumerate(made):
            at = width - len(r) if left else 0
            ids[b, at:at + len(r)] = r
            mask[b, at:at + len(r)] = 1
        return torch.tensor(ids, dtype=dtype), torch.tensor(mask)

    def tensors(self):
        grid = lambda g: torch.tensor(g, dtype=torch.int64).reshape(-1, 3) if g else None  # noqa
        seconds = torch.tensor(self.seconds, dtype=torch.float32) if self.seconds else None
        return grid(self.images), grid(self.videos), seconds


def _qwen_row(p, cfg, model_type):
    """Text, then images and videos between vision start/end tokens: one span per video
    (Qwen2-VL, Qwen2.5-VL, ERNIE, PaddleOCR images only), one per frame after its timestamp
    (Qwen3-VL and its descendants), GLM-4V's frames of image tokens inside video start/end."""
    merge = cfg.vision_config.spatial_merge_size
    kinds = ["image"] if model_type == "paddleocr_vl" else ["image", "video"]
    row = p.text()
    for _ in range(int(p.rng.integers(1, 4))):
        kind = str(p.rng.choice(kinds))
        t_choices = (2, 4, 8) if model_type == "ernie4_5_vl_moe" and kind == "video" else (1, 2, 5)
        t, h, w = p.grid(merge, t=t_choices if kind == "video" else (1, 2))
        per_frame = (h // merge) * (w // merge)
        if kind == "image":
            p.images.append([t, h, w])
            row += _wrap(cfg, model_type, [cfg.image_token_id] * (t * per_frame))
        else:
            p.videos.append([t, h, w])
            p.seconds.append(float(p.rng.choice([0.5, 1 / 3, 2 / 3, 1.0, 0.4, 2.0])))
            row += _video(p, cfg, model_type, t, per_frame)
        row += p.text(0, 3)
    return row


def _wrap(cfg, model_type, tokens):
    """Placeholder tokens between their start and end tokens."""
    if model_type.startswith("glm") or model_type == "ernie4_5_vl_moe":
        return [cfg.image_start_token_id] + tokens + [cfg.image_end_token_id]
    return [cfg.vision_start_token_id] + tokens + [cfg.vision_end_token_id]


def _video(p, cfg, model_type, t, per_frame):
    if model_type.startswith("glm"):
        frames = sum((_wrap(cfg, model_type, [cfg.image_token_id] * per_frame) + p.text(1, 2)
                      for _ in range(t)), [])
        return [cfg.video_start_token_id] + frames + [cfg.video_end_token_id]
    if model_type == "ernie4_5_vl_moe":
        tokens = [cfg.video_token_id] * (t // cfg.vision_config.temporal_merge_size * per_frame)
        return [cfg.video_start_token_id] + tokens + [cfg.video_end_token_id]
    if model_type in SPLIT:
        return sum((p.text(1, 2) + _wrap(cfg, model_type, [cfg.video_token_id] * per_frame)
                    for _ in range(t)), [])
    return _wrap(cfg, model_type, [cfg.video_token_id] * (t * per_frame))


def _token_types(cfg, model_type, ids):
    """The processor's mm_token_type_ids (transformers' own create_mm_token_type_ids)."""
    if model_type.startswith("glm"):
        from transformers.models.glm4v.processing_glm4v import Glm4vProcessor

        fake = types.SimpleNamespace(image_token_id=cfg.image_token_id,
                                     video_start_id=cfg.video_start_token_id,
                                     video_end_id=cfg.video_end_token_id)
        return torch.tensor(Glm4vProcessor.create_mm_token_type_ids(fake, ids.tolist()))
    video = None if model_type == "paddleocr_vl" else getattr(cfg, "video_token_id", None)
    fake = types.SimpleNamespace(image_token_ids=[cfg.image_token_id], video_token_ids=[video],
                                 audio_token_ids=[None])
    return torch.tensor(ProcessorMixin.create_mm_token_type_ids(fake, ids.tolist()))


def _assert_same(ours, theirs):
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _numpy_same(ours, theirs):
    for a, b in zip(ours, theirs):
        assert str(a.dtype) == str(b.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(a, b.numpy())


def _run_case(model_type, cfg, seed, left, *, mask=True, dtype=torch.int64):
    p = Prompt(np.random.default_rng(seed))
    hy = model_type == "hy_v4_vl"
    row = (lambda: _hy_row(p, cfg)) if hy else (lambda: _qwen_row(p, cfg, model_type))
    ids, attention = p.batch(row, left=left, dtype=dtype)
    images, videos, seconds = p.tensors()
    kwargs = {"second_per_grid_ts": seconds} if model_type == "qwen2_5_vl" else {}
    attention = attention if mask else None
    snapshot = [None if x is None else x.clone() for x in (ids, attention, images, videos, seconds)]
    stub = _stub(_model_class(model_type), cfg)
    theirs = stub.get_rope_index(ids, _token_types(cfg, model_type, ids), image_grid_thw=images,
                                 video_grid_thw=videos, attention_mask=attention, **kwargs)
    ours = arrpos.mrope_position_ids(cfg.to_dict(), ids, image_grid_thw=images,
                                     video_grid_thw=videos, attention_mask=attention, **kwargs)
    _assert_same(ours, theirs)
    for before, after in zip(snapshot, (ids, attention, images, videos, seconds)):
        assert before is None or torch.equal(before, after)  # nothing written
    as_np = lambda x: None if x is None else x.numpy()  # noqa: E731
    ours = arrpos.mrope_position_ids(cfg.to_dict(), ids.numpy(), image_grid_thw=as_np(images),
                                     video_grid_thw=as_np(videos), attention_mask=as_np(attention),
                                     **{k: as_np(v) for k, v in kwargs.items()})
    _numpy_same(ours, theirs)


def _hy_row(p, cfg):
    """HY-V4-VL: image and video placeholders with a newline token per merged row."""
    merge = cfg.vision_config.spatial_merge_size
    row = p.text()
    for _ in range(int(p.rng.integers(1, 4))):
        kind = str(p.rng.choice(["image", "video"]))
        t, h, w = p.grid(merge, t=(1, 2, 5) if kind == "video" else (1,))
        (p.images if kind == "image" else p.videos).append([t, h, w])
        token = cfg.image_token_id if kind == "image" else cfg.video_token_id
        row += [token] * (t * (h // merge) * (w // merge + 1)) + p.text(1, 3)
    return row


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("model_type", RUNS)
def test_runs_models_match_get_rope_index(model_type, left):
    cfg = _config(model_type)
    for seed in range(3):
        _run_case(model_type, cfg, seed + 10 * left, left)


@pytest.mark.parametrize("changes", [
    {"vision_config.spatial_merge_size": 1},
    {"vision_config.spatial_merge_size": 3, "vision_config.tokens_per_second": 25},
    {"vision_config.tokens_per_second": 13},
])
def test_qwen2_5_vl_merge_sizes_and_rates(changes):
    cfg = _config("qwen2_5_vl", **changes)
    for seed in range(3):
        _run_case("qwen2_5_vl", cfg, seed, bool(seed % 2))


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen3_vl", "glm4v", "ernie4_5_vl_moe",
                                        "hy_v4_vl"])
def test_merge_size_three_and_one(model_type):
    for merge in (1, 3):
        cfg = _config(model_type, **{"vision_config.spatial_merge_size": merge})
        _run_case(model_type, cfg, merge, merge == 3)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_5", "glm4v"])
def test_no_mask_and_int32_ids_keep_the_dtype(model_type):
    """Without a mask the model writes its positions into a tensor of input_ids' dtype."""
    _run_case(model_type, _config(model_type), 5, False, mask=False, dtype=torch.int32)
    _run_case(model_type, _config(model_type), 6, False, mask=False)


@pytest.mark.parametrize("seconds_dtype", [torch.float64, torch.bfloat16, torch.float16,
                                           torch.int64])
def test_qwen2_5_vl_seconds_dtypes(seconds_dtype):
    """The model multiplies frame indices in the seconds' own dtype."""
    cfg = _config("qwen2_5_vl")
    p = Prompt(np.random.default_rng(3))
    ids, mask = p.batch(lambda: _qwen_row(p, cfg, "qwen2_5_vl"), left=True)
    images, videos, _ = p.tensors()
    if videos is None:
        pytest.skip("no video drawn")
    seconds = torch.tensor([s * 3 for s in p.seconds]).to(seconds_dtype)
    stub = _stub(_model_class("qwen2_5_vl"), cfg)
    theirs = stub.get_rope_index(ids, _token_types(cfg, "qwen2_5_vl", ids), image_grid_thw=images,
                                 video_grid_thw=videos, attention_mask=mask,
                                 second_per_grid_ts=seconds)
    ours = arrpos.mrope_position_ids(cfg.to_dict(), ids, image_grid_thw=images,
                                     video_grid_thw=videos, attention_mask=mask,
                                     second_per_grid_ts=seconds)
    _assert_same(ours, theirs)


# --- HunYuan-VL --------------------------------------------------------------------------------


@pytest.mark.parametrize("sections", [[16, 16, 16, 16], [24, 20, 20]])
@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_hunyuan_vl_matches_get_rope_index(sections, left):
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = CONFIG_MAPPING["hunyuan_vl"](text_config={"rope_parameters": rope})
    merge = cfg.vision_config.spatial_merge_size
    for seed in range(3):
        p = Prompt(np.random.default_rng(seed))

        def row():
            out = p.text()
            for _ in range(int(p.rng.integers(1, 4))):
                t, h, w = p.grid(merge, t=(1, 2))
                p.images.append([t, h, w])
                tokens = [cfg.image_token_id] * ((h // merge) * (w // merge + 1))
                edge = [cfg.image_token_id] if p.rng.random() < 0.5 else p.text(1, 1)
                out += edge + tokens + edge + p.text(1, 3)
            return out

        ids, mask = p.batch(row, left=left)
        images, _, _ = p.tensors()
        stub = _stub(_model_class("hunyuan_vl"), cfg)
        theirs = stub.get_rope_index(ids, _token_types(cfg, "hunyuan_vl", ids),
                                     image_grid_thw=images, attention_mask=mask)
        ours = arrpos.mrope_position_ids(cfg.to_dict(), ids, image_grid_thw=images,
                                         attention_mask=mask)
        _assert_same(ours, theirs)


# --- Qwen2.5-Omni and Qwen3-Omni ---------------------------------------------------------------


def _omni(model_type):
    """(top-level config, the config get_rope_index reads, the stub, the processor module)."""
    top = _config(model_type)
    sub = top.thinker_config
    sub.vision_start_token_id = 151652  # as the released files set it (no class default)
    cls = _model_class(model_type, "PreTrainedModelForConditionalGeneration")
    stub = _stub(cls, sub, spatial_merge_size=sub.vision_config.spatial_merge_size)
    module = importlib.import_module(f"transformers.models.{model_type}.processing_{model_type}")
    return top, sub, stub, module


def _omni_row(p, sub, module, model_type, aiv):
    """Images, videos, audios (and videos with their audio) as the Omni processors lay them
    out: audio lengths from the processor's own feature-length function."""
    merge = sub.vision_config.spatial_merge_size
    start, end = sub.vision_start_token_id, 151653
    a_start, a_end = sub.audio_start_token_id, sub.audio_end_token_id if hasattr(
        sub, "audio_end_token_id") else 151648
    row = p.text()
    for _ in range(int(p.rng.integers(1, 4))):
        kind = str(p.rng.choice(["image", "video", "audio"]))
        row += p.text(0, 2)
        if kind == "audio":
            length = int(p.rng.integers(8, 400))
            p.audio_lengths.append(length)
            row += [a_start] + [sub.audio_token_id] * _audio_tokens(module, sub, length) + [a_end]
            continue
        t, h, w = p.grid(merge, t=(1, 2, 5) if kind == "video" else (1,))
        tokens = t * (h // merge) * (w // merge)
        if kind == "image":
            p.images.append([t, h, w])
            row += [start] + [sub.image_token_id] * tokens + [end]
            continue
        p.videos.append([t, h, w])
        p.seconds.append(float(p.rng.choice([0.5, 1 / 3, 2 / 3, 1.0, 0.4, 2.0, 4.1])))
        if not aiv:
            row += [start] + [sub.video_token_id] * tokens + [end]
            continue
        length = int(p.rng.integers(30, 900))
        p.audio_lengths.append(length)
        audio = _audio_tokens(module, sub, length)
        region = _interleaved(p, sub, module, [t, h, w], audio)
        row += [start, a_start] + region + [a_end, end]
    return row + p.text(0, 2)


def _audio_tokens(module, sub, length):
    if "n_window" in inspect.signature(module._get_feat_extract_output_lengths).parameters:
        return int(module._get_feat_extract_output_lengths(length, sub.audio_config.n_window))
    return int(module._get_feat_extract_output_lengths(length))


def _interleaved(p, sub, module, grid, audio):
    """The video-with-audio placeholder of the processor's replace_video_with_audio_token."""
    cls = next(c for c in vars(module).values() if inspect.isclass(c) and
               c.__module__ == module.__name__ and "replace_video_with_audio_token" in vars(c))
    merge = sub.vision_config.spatial_merge_size
    fake = types.SimpleNamespace(audio_bos_token="<", audio_eos_token=">", video_token="V",
                                 audio_token="A", video_processor=types.SimpleNamespace(
                                     merge_size=merge))
    if hasattr(cls, "get_chunked_index"):
        fake.get_chunked_index = lambda values, size: cls.get_chunked_index(fake, values, size)
    text = cls.replace_video_with_audio_token(
        fake, {"video_grid_thw": np.array([grid]), "video_second_per_grid": [p.seconds[-1]]}, 0,
        {"num_audio_tokens": np.array([audio])}, 0, position_id_per_seconds=25,
        seconds_per_chunk=2)
    return [sub.video_token_id if c == "V" else sub.audio_token_id for c in text[1:-1]]


def _omni_case(model_type, seed, left, aiv, mask=True):
    top, sub, stub, module = _omni(model_type)
    p = Prompt(np.random.default_rng(seed))
    ids, attention = p.batch(lambda: _omni_row(p, sub, module, model_type, aiv), left=left)
    images, videos, seconds = p.tensors()
    lengths = torch.tensor(p.audio_lengths) if p.audio_lengths else None
    if not mask:  # the models need a mask: None is the all-ones one
        attention = torch.ones_like(attention)
    theirs = stub.get_rope_index(ids, images, videos, attention, aiv, lengths, seconds)
    ours = arrpos.mrope_position_ids(
        top.to_dict() | {"thinker_config": sub.to_dict()}, ids, image_grid_thw=images,
        video_grid_thw=videos, attention_mask=attention if mask else None,
        second_per_grid_ts=seconds, use_audio_in_video=aiv)
    _assert_same(ours, theirs)


@pytest.mark.parametrize("aiv", [False, True], ids=["separate", "audio_in_video"])
@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_omni_models_match_get_rope_index(model_type, left, aiv):
    for seed in range(4):
        _omni_case(model_type, seed + 7 * left, left, aiv)


@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_omni_without_a_mask_is_an_all_ones_mask(model_type):
    _omni_case(model_type, 3, False, True, mask=False)


@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_omni_without_grids_counts_the_kept_tokens(model_type):
    """The models' branch without image or video grids (audio and text only)."""
    top, sub, stub, module = _omni(model_type)
    p = Prompt(np.random.default_rng(1))
    ids, mask = p.batch(lambda: p.text(1, 9), left=True)
    mask[0, :] = 0  # a sequence of padding only: allowed in this branch
    theirs = stub.get_rope_index(ids, None, None, mask, False, None, None)
    ours = arrpos.mrope_position_ids(top.to_dict() | {"thinker_config": sub.to_dict()}, ids,
                                     attention_mask=mask)
    _assert_same(ours, theirs)


def test_qwen2_5_omni_talker_config():
    """The talker's config carries its own token ids and merge size at the top level."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        talker = CONFIG_MAPPING["qwen2_5_omni_talker"]()
    _, sub, _, module = _omni("qwen2_5_omni")
    stub = _stub(_model_class("qwen2_5_omni", "PreTrainedModelForConditionalGeneration"), talker,
                 spatial_merge_size=talker.spatial_merge_size)
    p = Prompt(np.random.default_rng(2))
    ids, mask = p.batch(lambda: _omni_row(p, sub, module, "qwen2_5_omni", False), left=True)
    images, videos, seconds = p.tensors()
    lengths = torch.tensor(p.audio_lengths) if p.audio_lengths else None
    theirs = stub.get_rope_index(ids, images, videos, mask, False, lengths, seconds)
    ours = arrpos.mrope_position_ids(talker.to_dict(), ids, image_grid_thw=images,
                                     video_grid_thw=videos, attention_mask=mask,
                                     second_per_grid_ts=seconds)
    _assert_same(ours, theirs)


# --- config files and defaults -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["Qwen__Qwen2.5-VL-7B-Instruct.json", "Qwen__Qwen3.5-9B.json"])
def test_released_config_files(name):
    """The raw config.json of a released checkpoint, as a user passes it."""
    cfg = real.hf_config(name)
    model_type = cfg.model_type
    p = Prompt(np.random.default_rng(4))
    ids, mask = p.batch(lambda: _qwen_row(p, cfg, model_type), left=True)
    images, videos, seconds = p.tensors()
    kwargs = {"second_per_grid_ts": seconds} if model_type == "qwen2_5_vl" else {}
    theirs = _stub(_model_class(model_type), cfg).get_rope_index(
        ids, _token_types(cfg, model_type, ids), image_grid_thw=images, video_grid_thw=videos,
        attention_mask=mask, **kwargs)
    ours = arrpos.mrope_position_ids(real.raw(name), ids, image_grid_thw=images,
                                     video_grid_thw=videos, attention_mask=mask, **kwargs)
    _assert_same(ours, theirs)


@pytest.mark.parametrize("model_type", sorted(_mrope_ids._MODELS))
def test_defaults_are_the_config_classes(model_type):
    """Every default of the table is the config class's own value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = CONFIG_MAPPING[model_type]()
    for key, value in _mrope_ids._MODELS[model_type][1].items():
        target = cfg
        for part in key.split("."):
            target = getattr(target, part)
        assert target == value, key


def test_defaults_fill_what_the_file_omits():
    """A file without the token ids reads the class defaults (and the thinker of an Omni file)."""
    cfg = _config("qwen3_vl")
    p = Prompt(np.random.default_rng(8))
    ids, mask = p.batch(lambda: _qwen_row(p, cfg, "qwen3_vl"), left=False)
    images, videos, _ = p.tensors()
    full = arrpos.mrope_position_ids(cfg.to_dict(), ids, image_grid_thw=images,
                                     video_grid_thw=videos, attention_mask=mask)
    bare = arrpos.mrope_position_ids({"model_type": "qwen3_vl"}, ids, image_grid_thw=images,
                                     video_grid_thw=videos, attention_mask=mask)
    _assert_same(bare, full)


@pytest.mark.parametrize("model_type", ["glm_image", "minicpmv4_7", "exaone4_5", "lfm3_vl",
                                        "video_llama_3", "qwen2_vl_text", "llama", None])
def test_unsupported_model_types_say_why(model_type):
    with pytest.raises(ValueError, match="config: model_type"):
        arrpos.mrope_position_ids({"model_type": model_type}, np.zeros((1, 4), np.int64))


def test_every_get_rope_index_is_supported_or_refused():
    """Each model type of transformers 5.24 whose modeling file defines get_rope_index is in
    the table or refused with a reason."""
    import pathlib

    root = pathlib.Path(transformers.__file__).parent / "models"
    found = {path.parent.name for path in root.glob("*/modeling_*.py")
             if "def get_rope_index" in path.read_text()}
    known = set(_mrope_ids._MODELS) | set(_mrope_ids._COMPOSITE) | set(_mrope_ids._UNSUPPORTED)
    assert found <= known, sorted(found - known)


# --- bad inputs --------------------------------------------------------------------------------


def _qwen2_inputs():
    cfg = _config("qwen2_vl")
    ids = np.array([[7, cfg.vision_start_token_id] + [cfg.image_token_id] * 4 +
                    [cfg.vision_end_token_id, 8]])
    return cfg.to_dict(), ids, np.array([[1, 4, 4]])


@pytest.mark.parametrize("change, error, match", [
    (dict(image_grid_thw=np.array([[1, 4, 4], [1, 2, 2]])), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=np.array([[1, 2, 4]])), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=None), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=np.array([1, 4, 4])), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=np.array([[1, 4, 4, 1]])), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=np.array([[1, 3, 4]])), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=np.array([[0, 4, 4]])), ValueError, "image_grid_thw"),
    (dict(image_grid_thw=np.array([[1.0, 4, 4]])), TypeError, "image_grid_thw"),
    (dict(video_grid_thw=np.array([[1, 2, 2]])), ValueError, "video_grid_thw"),
    (dict(attention_mask=np.ones((1, 7), np.int64)), ValueError, "attention_mask"),
    (dict(attention_mask=np.full((1, 8), 2)), ValueError, "attention_mask"),
    (dict(attention_mask=np.ones((1, 8), np.float32)), TypeError, "attention_mask"),
    (dict(attention_mask=np.zeros((1, 8), np.int64)), ValueError, "attention_mask"),
    (dict(second_per_grid_ts=np.ones(0)), ValueError, "second_per_grid_ts"),
    (dict(use_audio_in_video=True), ValueError, "use_audio_in_video"),
    (dict(use_audio_in_video=1), TypeError, "use_audio_in_video"),
    (dict(image_grid_thw=torch.tensor([[1, 4, 4]])), TypeError, "image_grid_thw"),
])
def test_bad_inputs_name_the_argument(change, error, match):
    config, ids, grid = _qwen2_inputs()
    kwargs = {"image_grid_thw": grid, **change}
    with pytest.raises(error, match=match):
        arrpos.mrope_position_ids(config, ids, **kwargs)


@pytest.mark.parametrize("ids, error", [
    (np.ones((1, 8), np.float32), TypeError),
    (np.ones(8, np.int64), ValueError),
    (np.ones((1, 0), np.int64), ValueError),
    ([[1, 2, 3]], TypeError),
])
def test_bad_input_ids(ids, error):
    config, _, grid = _qwen2_inputs()
    with pytest.raises(error, match="input_ids"):
        arrpos.mrope_position_ids(config, ids, image_grid_thw=grid)


def test_positions_that_overflow_the_ids_dtype_are_refused():
    config = {"model_type": "qwen2_vl", "image_token_id": 3, "video_token_id": 4}
    with pytest.raises(ValueError, match="dtype"):
        arrpos.mrope_position_ids(config, np.full((1, 200), 9, np.int8))


def test_bad_config_values():
    _, ids, grid = _qwen2_inputs()
    for config, match in (({"model_type": "qwen2_vl", "vision_config": {"spatial_merge_size": 0}},
                           "spatial_merge_size"),
                          ({"model_type": "qwen2_vl", "image_token_id": "x"}, "image_token_id"),
                          ({"model_type": "qwen2_5_vl", "vision_config": {
                              "tokens_per_second": -1}}, "tokens_per_second"),
                          ({"model_type": "qwen2_5_omni", "thinker_config": {}},
                           "vision_start_token_id")):
        with pytest.raises((ValueError, TypeError), match=match):
            arrpos.mrope_position_ids(config, ids, image_grid_thw=grid)
    with pytest.raises(TypeError, match="config"):
        arrpos.mrope_position_ids([("model_type", "qwen2_vl")], ids)


def test_omni_layout_errors():
    top, sub, _, _ = _omni("qwen3_omni_moe")
    config = top.to_dict() | {"thinker_config": sub.to_dict()}
    ids = np.array([[5, sub.vision_start_token_id, sub.image_token_id, 151653, 6]])
    with pytest.raises(ValueError, match="video_grid_thw|second_per_grid_ts"):
        arrpos.mrope_position_ids(config, ids, video_grid_thw=np.array([[1, 2, 2]]))
    with pytest.raises(ValueError, match="image_grid_thw"):
        arrpos.mrope_position_ids(config, ids, image_grid_thw=np.array([[1, 4, 2]]))
    ends = np.array([[5, sub.image_token_id, sub.vision_start_token_id]])
    with pytest.raises(ValueError, match="input_ids"):
        arrpos.mrope_position_ids(config, ends, image_grid_thw=np.array([[1, 2, 2]]))


# --- backends ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "glm4v", "qwen3_omni_moe"])
def test_backends_agree_with_numpy(backend, model_type):
    if model_type == "qwen3_omni_moe":
        top, sub, _, module = _omni(model_type)
        config, cfg = top.to_dict() | {"thinker_config": sub.to_dict()}, sub
        p = Prompt(np.random.default_rng(0))
        ids, mask = p.batch(lambda: _omni_row(p, sub, module, model_type, False), left=True)
    else:
        cfg = _config(model_type)
        config = cfg.to_dict()
        p = Prompt(np.random.default_rng(0))
        ids, mask = p.batch(lambda: _qwen_row(p, cfg, model_type), left=True)
    images, videos, seconds = p.tensors()
    if model_type == "glm4v":
        seconds = None
    arrays = {"image_grid_thw": images, "video_grid_thw": videos, "attention_mask": mask,
              "second_per_grid_ts": seconds}
    want = arrpos.mrope_position_ids(config, ids.numpy(), **{
        k: None if v is None else v.numpy() for k, v in arrays.items()})
    got = arrpos.mrope_position_ids(config, backend.asarray(ids.numpy()), **{
        k: None if v is None else backend.asarray(v.numpy()) for k, v in arrays.items()})
    for a, b in zip(got, want):
        np.testing.assert_array_equal(backend.to_numpy(a), b)


# --- vision tower coordinates ------------------------------------------------------------------


@pytest.mark.parametrize("merge", [1, 2, 3])
@pytest.mark.parametrize("temporal", [False, True])
def test_vision_position_ids_match_transformers(merge, temporal):
    rng = np.random.default_rng(merge)
    grid = torch.tensor([[int(rng.integers(1, 4)), merge * int(rng.integers(1, 5)),
                          merge * int(rng.integers(1, 5))] for _ in range(4)])
    want = get_vision_position_ids(grid, merge, include_temporal=temporal)
    got = arrpos.vision_position_ids(grid, spatial_merge_size=merge, include_temporal=temporal)
    assert got.dtype == want.dtype
    assert torch.equal(got, want)
    on_numpy = arrpos.vision_position_ids(grid.numpy(), spatial_merge_size=merge,
                                          include_temporal=temporal)
    np.testing.assert_array_equal(on_numpy, want.numpy())
    listed = arrpos.vision_position_ids(grid.tolist(), spatial_merge_size=merge,
                                        include_temporal=temporal)
    np.testing.assert_array_equal(listed, want.numpy())


def test_vision_position_ids_backends(backend):
    grid = np.array([[2, 4, 6], [1, 2, 2]])
    want = arrpos.vision_position_ids(grid, spatial_merge_size=2)
    got = arrpos.vision_position_ids(backend.asarray(grid), spatial_merge_size=2)
    np.testing.assert_array_equal(backend.to_numpy(got), want)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"])
def test_vision_rotary_cos_sin_of_the_tower(model_type):
    """RoPE.from_hf_config(config, subconfig="vision_config") at these coordinates gives the
    vision tower's own rotary cos/sin (its module fed by get_vision_position_ids)."""
    cfg = _config(model_type)
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    rotary = next(c for n, c in vars(module).items()
                  if inspect.isclass(c) and n.endswith("VisionRotaryEmbedding"))
    merge = cfg.vision_config.spatial_merge_size
    grid = torch.tensor([[1, 4 * merge, 6 * merge], [3, 2 * merge, 2 * merge]])
    cos, sin = rotary(cfg.vision_config)(torch.zeros(1), get_vision_position_ids(grid, merge))
    coords = arrpos.vision_position_ids(grid, spatial_merge_size=merge)
    rope = arrpos.RoPE.from_hf_config(cfg.to_dict(), subconfig="vision_config")
    ours = rope.cos_sin(coords, dtype=torch.float32)
    for a, b in zip(ours, (cos, sin)):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=0)


@pytest.mark.parametrize("grid, error", [
    (np.array([[1, 2, 3]]), ValueError),
    (np.array([[1, 2]]), ValueError),
    (np.array([[0, 2, 2]]), ValueError),
    (np.array([[1.0, 2, 2]]), TypeError),
    ([(1, 2, "x")], TypeError),
    (5, TypeError),
])
def test_vision_position_ids_bad_grids(grid, error):
    with pytest.raises(error, match="grid_thw"):
        arrpos.vision_position_ids(grid, spatial_merge_size=2)


def test_values_that_cannot_be_read_are_refused():
    """The layout depends on the token values: traced (jit) or meta arrays are a ValueError."""
    config, ids, grid = _qwen2_inputs()
    meta = torch.empty(ids.shape, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match="input_ids must have values that can be read"):
        arrpos.mrope_position_ids(config, meta)
    jax = pytest.importorskip("jax")
    with pytest.raises(ValueError, match="input_ids must have values that can be read"):
        jax.jit(lambda x: arrpos.mrope_position_ids(config, x)[0])(jax.numpy.asarray(ids))

"""Every rotary model type of the installed transformers against ``RoPE.from_hf_config``.

For each model type: its default config, built offline (``AutoConfig.for_model``); the modeling
file's own ``*RotaryEmbedding`` class, run on dummy position ids; the file's own apply function
run on a random q. ``RoPE.from_hf_config`` of the same config must give the same cos/sin and the
same rotated q (at a tolerance for transformers' float32 angles), or refuse with a ValueError /
NotImplementedError. Anything else is a silent mismatch.

Run as a script for the survey (``python tests/hf_families.py [--markdown] [types...]``);
``tests/test_hf_families.py`` runs the same check per model type.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import logging
import os
import re
import sys
import warnings

import numpy as np

if __name__ == "__main__":  # run as a script: this checkout's arrpos, not an installed one
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import arrpos  # noqa: E402

N_POS = 12          # dummy positions per sequence, all < MAX_POS
MAX_POS = 64
ATOL = 2e-5         # transformers forms float32 angles: ~|p| * 2**-24 rad at p < 64
PINNED = "5.24."  # the transformers release MIN_PASSING was counted on (the test extra's pin)
MIN_PASSING = 300  # the pass count on transformers 5.24 (of 306 rotary types): no regressions
REFUSALS = (ValueError, NotImplementedError)
# Default configs transformers' own rotary cannot run, and the values the model's checkpoint
# (named in its configuration file) carries: checked with those instead. GLM-4 text models
# rotate half of each 128-wide head: mrope sections [8, 12, 12] cover 32 frequencies.
# model type -> (checkpoint, rope_parameters values, config attributes)
CHECKPOINT_VALUES = {
    "glm4v_text": ("zai-org/GLM-4.1V-9B-Thinking", {"partial_rotary_factor": 0.5}, {}),
    "glm_image_text": ("zai-org/GLM-Image", {"partial_rotary_factor": 0.5}, {}),
    "glm4v_moe_text": ("zai-org/GLM-4.5V", {"partial_rotary_factor": 0.5}, {"head_dim": 128}),
    # the configuration's docstring: sections over half of each head, 4 axes (position,
    # width, height, image index); arrpos must still refuse (not a rotation then)
    "hunyuan_vl_text": ("a documented 4-axis mrope_section",
                        {"mrope_section": [16, 16, 16, 16]}, {"head_dim": 128}),
}


@functools.lru_cache(maxsize=None)
def _transformers():
    import torch
    import transformers
    from transformers.models.auto import configuration_auto

    logging.getLogger("transformers").setLevel(logging.ERROR)
    return torch, transformers, configuration_auto


def model_types():
    """Every model type whose modeling file defines a ``*RotaryEmbedding`` class."""
    _, transformers, ca = _transformers()
    root = os.path.join(os.path.dirname(transformers.__file__), "models")
    out = []
    for mt in ca.CONFIG_MAPPING_NAMES:
        mod = ca.model_type_to_module_name(mt)
        path = os.path.join(root, mod, f"modeling_{mod}.py")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                if re.search(r"class \w*RotaryEmbedding\b", f.read()):
                    out.append(mt)
    return out


@functools.lru_cache(maxsize=None)
def _modeling(model_type):
    _, transformers, ca = _transformers()
    mod = ca.model_type_to_module_name(model_type)
    try:
        return importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")
    except ModuleNotFoundError:  # a config run by another type's modeling file (sarvam_mla)
        from transformers.models.auto import modeling_auto

        cls = getattr(transformers, modeling_auto.MODEL_MAPPING_NAMES[model_type])
        return importlib.import_module(cls.__module__)


def _configs(config):
    """The config and its sub-configs, depth first (where a rotary embedding may live)."""
    seen, out = set(), []

    def walk(c, path):
        if id(c) in seen:
            return
        seen.add(id(c))
        out.append((path, c))
        for key, value in vars(c).items():
            if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                walk(value, path + (key,))

    walk(config, ())
    # the text model first: a composite config.json means its text rotary
    out.sort(key=lambda item: (len(item[0]) > 0, item[0] != ("text_config",)))
    return out


def _rotary_classes(module):
    torch, _, _ = _transformers()
    return [obj for name, obj in vars(module).items()
            if name.endswith("RotaryEmbedding") and isinstance(obj, type)
            and issubclass(obj, torch.nn.Module)]


def _config_annotation(cls):
    ann = inspect.signature(cls.__init__).parameters["config"].annotation
    return ann if isinstance(ann, str) else getattr(ann, "__name__", "")


def _takes_config(cls):
    params = list(inspect.signature(cls.__init__).parameters)
    return len(params) >= 2 and params[1] == "config"


def _mrope_axes(cls, config):
    """How many position rows transformers' rotary takes (1 when it is not multimodal)."""
    rp = getattr(config, "rope_parameters", None) or {}
    if isinstance(rp, dict) and rp.get("mrope_section"):
        return len(rp["mrope_section"])
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return 1
    expand = re.search(r"position_ids\.expand\((\d+)", src)
    return int(expand.group(1)) if expand else 3 if "mrope" in src else 1


def _layer_types(config):
    rp = getattr(config, "rope_parameters", None) or {}
    if not isinstance(rp, dict):
        return [None]
    nested = [k for k, v in rp.items() if isinstance(v, dict)]
    return nested or [None]


def _is_axial(config):
    rp = getattr(config, "rope_parameters", None)
    return isinstance(rp, dict) and rp.get("rope_type") == "axial"


def _positions(rows, seed, n_axes=0):
    """(transformers' position ids, arrpos's positions)."""
    rng = np.random.default_rng(seed)
    if n_axes:  # axial vision: (seq, n_axes) patch coordinates
        coords = rng.integers(0, 16, size=(N_POS, n_axes))
        return coords, coords[None]
    if rows > 1:  # multimodal: one row of positions per axis
        pos = rng.integers(0, MAX_POS, size=(rows, 1, N_POS))
        return pos, np.moveaxis(pos, 0, -1)
    pos = rng.integers(0, MAX_POS, size=(1, N_POS))
    pos[0, :4] = [0, 1, 2, MAX_POS - 1]
    return pos, pos


def given_positions(positions, rows=1):
    """(transformers' position ids, arrpos's positions) for the 1-D ``positions``; with several
    rows (multimodal), row k holds ``positions // (k + 1)`` so the axes differ."""
    p = np.asarray(positions, dtype=np.int64)
    if rows > 1:
        pos = np.stack([p // (k + 1) for k in range(rows)])[:, None, :]
        return pos, np.moveaxis(pos, 0, -1)
    return p[None], p[None]


def _hf_tables(emb, pos, layer_type, width, n=N_POS):
    torch, _, _ = _transformers()
    x = torch.zeros(1, n, width, dtype=torch.float32)
    ids = torch.as_tensor(pos)
    kwargs = {}
    if layer_type is not None and "layer_type" in inspect.signature(emb.forward).parameters:
        kwargs["layer_type"] = layer_type
    with torch.no_grad():
        out = emb(x, ids, **kwargs)
    if torch.is_tensor(out) and out.is_complex():  # freqs_cis (Llama 4, DeepSeek-V2)
        return out.real, out.imag, out
    if _returns_sin_first(type(emb)):  # GPT-J, CodeGen (transformers >= 5.24)
        return out[1], out[0], None
    return out[0], out[1], None


def _returns_sin_first(cls):
    try:
        src = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    return re.search(r"return sin, cos\b", src) is not None


def _apply_function(module, config):
    if _is_axial(config):
        for name in ("apply_rotary_pos_emb_vision", "apply_rotary_pos_emb_2d",
                     "apply_rotary_pos_emb_2d_self_attn",
                     "apply_rotary_pos_emb"):
            if hasattr(module, name):
                return getattr(module, name)
    if getattr(config, "rope_interleave", False) and hasattr(module,
                                                          "apply_rotary_pos_emb_interleave"):
        return module.apply_rotary_pos_emb_interleave
    return getattr(module, "apply_rotary_pos_emb",
                   getattr(module, "apply_rotary_pos_emb_interleave", None))


def _hf_apply_complex(fn, q, freqs_cis):
    """``apply_rotary_emb(xq, xk, freqs_cis)``: heads on axis 1 or 2, as the file expects."""
    try:
        return fn(q, q, freqs_cis)[0]
    except RuntimeError:
        qt = q.transpose(1, 2)
        return fn(qt, qt, freqs_cis)[0].transpose(1, 2)


def _hf_apply(fn, q, cos, sin):
    """The modeling file's apply on q ``(1, heads, n, D)``; partial widths split as its
    attention does when the function itself does not."""
    torch, _, _ = _transformers()
    params = inspect.signature(fn).parameters
    # the rotated width: GPT-J / CodeGen's (tensor, sin, cos) widen half-width tables
    r = cos.shape[-1] * (2 if list(params)[1:3] == ["sin", "cos"] else 1)

    def call(qq):
        kwargs = {"unsqueeze_dim": 1} if "unsqueeze_dim" in params else {}
        names = list(params)
        if names[:2] == ["q", "k"] or (len(names) > 1 and names[1] == "k"):
            out = fn(qq, qq, cos, sin, **kwargs)
        elif names[1:3] == ["sin", "cos"]:  # GPT-J, CodeGen: (batch, seq, heads, D) inputs
            try:
                out = fn(qq.transpose(1, 2), sin, cos).transpose(1, 2)
            except RuntimeError:  # transformers < 5.24: (batch, heads, seq, D), tables unsqueezed
                out = fn(qq, sin.unsqueeze(1), cos.unsqueeze(1))
        else:
            out = fn(qq, cos, sin, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    def call_split(qq):
        try:
            return call(qq)
        except RuntimeError:
            if qq.shape[-1] == r:
                raise
            return torch.cat([call(qq[..., :r]), qq[..., r:]], dim=-1)

    with torch.no_grad():
        try:
            return call_split(q)
        except RuntimeError:  # vision applies take (seq, heads, dim)
            return call_split(q[0].transpose(0, 1)).transpose(0, 1)[None]


def _as_layout(rope, c, width, permuted):
    """arrpos's table ``c`` as transformers holds it: each frequency once when its table is
    half as wide; in the half layout when its apply permutes the interleaved pairs first."""
    if width * 2 == c.shape[-1]:
        return c[..., 0::2] if rope.layout == "interleaved" else c[..., :width]
    if permuted and rope.layout == "interleaved":
        return np.concatenate([c[..., 0::2], c[..., 1::2]], axis=-1)
    return c


def _compare(name, rope, cos, sin, q_hf, q, pos_ar, permuted, atol=ATOL):
    """None if arrpos reproduces transformers, else what differs (tables within ``atol``)."""
    cos = cos.double().numpy()
    sin = sin.double().numpy()
    if cos.ndim == 4 and pos_ar.ndim == 3:  # (axes, batch, seq, D): mrope's per-axis tables
        cos = sin = None
    if cos is not None:
        cos = cos.reshape((-1,) + cos.shape[-2:])[:1]
        sin = sin.reshape((-1,) + sin.shape[-2:])[:1]
        c, s = rope.cos_sin(pos_ar.astype(np.int64), dtype=np.float64)
        if rope.inverse:  # transformers holds sin and flips the sign in its rotate_half
            s = -s
        c, s = (_as_layout(rope, t, cos.shape[-1], permuted) for t in (c, s))
        if c.shape != cos.shape:
            return f"{name}: cos/sin shape {c.shape}, transformers {cos.shape}"
        err = max(np.abs(c - cos).max(), np.abs(s - sin).max())
        if err > atol and rope.layout == "interleaved":  # tables held half-wise, applied paired
            c, s = (_as_layout(rope, t, cos.shape[-1], True) for t in
                    rope.cos_sin(pos_ar.astype(np.int64), dtype=np.float64))
            err = max(np.abs(c - cos).max(), np.abs(s - sin).max())
        if err > atol:
            return f"{name}: cos/sin differ by {err:.2e}"
    got = rope.apply(q.numpy().astype(np.float64), pos_ar, heads_axis=-3)
    want = q_hf.double().numpy()
    if permuted:  # DeepSeek's *_interleave returns the pairs de-interleaved (same q.k)
        r = rope.rotary_dim
        got = np.concatenate([got[..., :r][..., 0::2], got[..., :r][..., 1::2], got[..., r:]],
                             axis=-1)
    if got.shape != want.shape:
        return f"{name}: rotated q shape {got.shape}, transformers {want.shape}"
    err = np.abs(got - want).max()
    if err > 2 * atol:
        return f"{name}: rotated q differs by {err:.2e}"
    return None


def _cases(model_type, checkpoint=False):
    """``(label, config, sub-config, rotary class, layer_type)`` for each rotary found; with
    ``checkpoint``, sub-configs in CHECKPOINT_VALUES carry their checkpoint's rope values."""
    _, transformers, _ = _transformers()
    config = transformers.AutoConfig.for_model(model_type)
    for _, sub in _configs(config) if checkpoint else ():
        if sub.model_type in CHECKPOINT_VALUES:
            _, rope_values, attributes = CHECKPOINT_VALUES[sub.model_type]
            sub.rope_parameters = {**sub.rope_parameters, **rope_values}
            for key, value in attributes.items():
                setattr(sub, key, value)
    return rotary_cases(config, model_type)


def rotary_cases(config, model_type, every_config=False):
    """``(label, config, sub-config, rotary module, layer_type)`` for the rotary of ``config``
    (a built transformers config of ``model_type``): that of the first sub-config that has one
    (the text model first); with ``every_config``, also those of the other sub-configs (vision,
    audio towers) whose rotary class is annotated with their config class."""
    module = _modeling(model_type)
    classes = [c for c in _rotary_classes(module) if _takes_config(c)]
    out = []
    for path, sub in _configs(config):
        found = False
        # the class annotated with this config's class first (a file may hold several)
        for cls in sorted(classes, key=lambda c: _config_annotation(c) != type(sub).__name__):
            if out and _config_annotation(cls) != type(sub).__name__:
                continue  # past the first rotary: only classes made for this sub-config
            for lt in _layer_types(sub):
                try:
                    with _quiet():
                        emb = cls(sub)
                except Exception:  # noqa: BLE001 - this class is not for this sub-config
                    continue
                out.append((".".join(path) or "config", config, sub, emb, lt))
                found = True
            if found and not every_config:
                return out
            if found:
                break
    return out


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _user_config(label, config, sub):
    """What a user passes for this rotary: the config.json itself for the text model, the
    sub-config for another (audio, vision) one."""
    if label == "text_config":
        return config
    if label == "config":  # the top-level rotary, not the text model's
        return {k: v for k, v in config.to_dict().items() if k != "text_config"}
    return sub


def _grid_llama4_vision(module, emb, sub, q_of):
    """Llama 4 vision: a fixed patch grid, coordinates (column + 1, row + 1), CLS last at 0."""
    torch, _, _ = _transformers()
    cis = emb(torch.zeros(1)).reshape(-1, emb.freqs_ci.shape[-1])
    idx = sub.image_size // sub.patch_size
    k = np.arange(idx * idx)
    coords = np.concatenate([np.stack([k % idx + 1, k // idx + 1], -1), [[0, 0]]])
    q = q_of(len(coords), 2 * cis.shape[-1])
    return coords, cis.real, cis.imag, q, module.vision_apply_rotary_emb(q, q, cis)[0], -2


def _grid_eomt_dinov3(module, emb, sub, q_of):
    """DINOv3 in EoMT: patch-centre coordinates (y, x) in [-1, 1]; prefix tokens unrotated."""
    torch, _, _ = _transformers()
    n = 4  # patches per side: the centres (2k + 1) / n - 1 are exact in float32
    emb.eval()  # in training the coordinates are randomly shifted, jittered and rescaled
    cos, sin = emb(torch.zeros(1, 3, n * sub.patch_size, n * sub.patch_size))
    centre = (2 * np.arange(n) + 1) / n - 1
    grid = np.stack(np.meshgrid(centre, centre, indexing="ij"), -1).reshape(-1, 2)
    coords = np.concatenate([np.zeros((1 + sub.num_register_tokens, 2)), grid])
    q = q_of(len(coords), cos.shape[-1]).transpose(1, 2)  # (1, heads, tokens, D)
    return coords, cos, sin, q, module.apply_rotary_pos_emb(q, q, cos, sin)[0], -3


def _grid_efficientloftr(module, emb, sub, q_of):
    """EfficientLoFTR: the whole hidden state turns with (row + 1, column + 1)."""
    torch, _, _ = _transformers()
    cos, sin = emb(torch.zeros(1, 1, 16, 16))
    eh, ew = cos.shape[1:3]
    cos, sin = cos.reshape(1, eh * ew, -1), sin.reshape(1, eh * ew, -1)
    coords = np.stack(np.meshgrid(np.arange(eh) + 1, np.arange(ew) + 1, indexing="ij"),
                      -1).reshape(-1, 2)
    q = q_of(len(coords), cos.shape[-1])[:, :, :1]  # (1, tokens, 1, hidden)
    out = module.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=2)[0]
    return coords, cos[0], sin[0], q, out, -2


def _grid_gemma4_vision(module, emb, sub, q_of):
    """Gemma 4 vision: (h, w) patch positions, padding patches at -1 (as the model passes
    them); each half of the head rotates half-wise on its own (apply_multidimensional_rope)."""
    torch, _, _ = _transformers()
    rng = np.random.default_rng(4)
    coords = np.concatenate([rng.integers(0, 48, size=(N_POS - 2, 2)), [[-1, -1], [-1, -1]]])
    q = q_of(len(coords), emb.inv_freq.shape[-1] * 4)
    ids = torch.as_tensor(coords)[None]
    cos, sin = emb(q, ids)
    return coords, cos[0], sin[0], q, module.apply_multidimensional_rope(q, cos, sin, ids), -2


# vision rotaries driven by the patch coordinates the model computes: the harness gives them
GRIDS = {"gemma4_vision": _grid_gemma4_vision,
         "llama4_vision_model": _grid_llama4_vision, "eomt_dinov3": _grid_eomt_dinov3,
         "efficientloftr": _grid_efficientloftr}


def _check_grid(name, rope, module, emb, sub, i):
    """None when the 2-D RoPE reproduces a patch-coordinate rotary, else what differs."""
    torch, _, _ = _transformers()
    gen = torch.Generator().manual_seed(i)

    def q_of(n, width):  # (1, tokens, heads, width)
        return torch.rand(1, n, 2, width, generator=gen, dtype=torch.float32) * 2 - 1

    with torch.no_grad():
        coords, cos, sin, q, q_hf, heads_axis = GRIDS[sub.model_type](module, emb, sub, q_of)
    c, s = rope.cos_sin(coords[None].astype(np.float64), dtype=np.float64)
    # transformers' table covers the patches (the last rows); prefix tokens turn by 0
    c, s = (_as_layout(rope, t[0, len(coords) - len(cos):], cos.shape[-1], False)
            for t in (c, s))
    if c.shape != tuple(cos.shape):
        return f"{name}: cos/sin shape {c.shape}, transformers {tuple(cos.shape)}"
    err = max(np.abs(c - cos.double().numpy()).max(), np.abs(s - sin.double().numpy()).max())
    if err > ATOL:
        return f"{name}: cos/sin differ by {err:.2e}"
    got = rope.apply(q.double().numpy(), coords[None].astype(np.float64), heads_axis=heads_axis)
    err = np.abs(got - q_hf.double().numpy()).max()
    return f"{name}: rotated q differs by {err:.2e}" if err > 2 * ATOL else None


def _check_case(i, label, config, sub, emb, lt, model_type, user_config=None, positions=None,
                atol=ATOL):
    """None when arrpos reproduces this rotary; else ``(status, detail)``. ``user_config``: what
    is given to ``from_hf_config`` (default: as ``_user_config``); ``positions``: 1-D token
    positions to check at (default: ``_positions``'s); ``atol``: the tolerance on the tables."""
    torch, _, _ = _transformers()
    name = label if lt is None else f"{label}[{lt}]"
    if user_config is None:
        user_config = _user_config(label, config, sub)
    try:
        with _quiet():
            rope = arrpos.RoPE.from_hf_config(user_config, layer_type=lt)
    except REFUSALS as e:
        # the model type as the user's config gives it (a sub-config dict may have none)
        named = (sub.model_type if isinstance(user_config, dict) is False
                 or user_config.get("model_type") else "config without model_type")
        if not str(e).startswith(f"{named}: "):
            return "mismatch", f"{name}: refusal not naming the model type: {e}"
        failure = _hf_failure(emb, sub, lt, i)
        if failure:
            return "unrunnable", (f"transformers' own rotary fails on this config "
                                  f"({failure}); arrpos: {type(e).__name__}: {e}")
        return "refuse", f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - an unclear error is a failure
        return "mismatch", f"{name}: unclear {type(e).__name__}: {e}"
    module = _modeling(model_type)
    if sub.model_type in GRIDS:
        return ("mismatch", problem) if (problem := _check_grid(name, rope, module, emb, sub,
                                                                 i)) else None
    n_axes = max(rope.axes) + 1 if _is_axial(sub) and rope.axes else 0
    rows = _mrope_axes(type(emb), sub)
    if positions is not None and not n_axes:
        pos, pos_ar = given_positions(positions, rows)
    else:
        pos, pos_ar = _positions(rows, i, n_axes)
    n = pos_ar.shape[-2] if n_axes or pos_ar.ndim == 3 else pos_ar.shape[-1]  # tokens
    try:
        with _quiet():
            try:
                cos, sin, cis = _hf_tables(emb, pos, lt, rope.head_dim, n)
            except KeyError:  # this module does not serve that layer type
                return None
            width = max(rope.head_dim, cos.shape[-1])
            gen = torch.Generator().manual_seed(i)
            q = torch.rand(1, 2, n, width, generator=gen, dtype=torch.float32) * 2 - 1
            if cis is not None:
                fn = module.apply_rotary_emb
                q_hf = _hf_apply_complex(fn, q, cis)
            else:
                fn = _apply_function(module, sub)
                if fn is None:
                    return "mismatch", f"{name}: accepted, no apply function to check it"
                q_hf = _hf_apply(fn, q, cos, sin)
    except Exception as e:  # noqa: BLE001 - arrpos answered what could not be checked
        return "mismatch", (f"{name}: accepted, but transformers' own rotary fails here: "
                            f"{type(e).__name__}: {e}")[:200]
    problem = _compare(name, rope, cos, sin, q_hf, q, pos_ar, fn.__name__.endswith("_interleave"),
                       atol)
    return ("mismatch", problem) if problem else None


def _hf_failure(emb, sub, lt, i):
    """Why transformers' own rotary module fails on this config, or None when it runs (or
    when it is not the usual ``forward(x, position_ids)``, which cannot be told here)."""
    if list(inspect.signature(emb.forward).parameters)[:2] != ["x", "position_ids"]:
        return None
    n_axes = 2 if _is_axial(sub) else 0
    pos, _ = _positions(_mrope_axes(type(emb), sub), i, n_axes)
    try:
        with _quiet():
            _hf_tables(emb, pos, lt, 64)
    except KeyError:  # this module does not serve that layer type
        return None
    except Exception as e:  # noqa: BLE001 - any failure of transformers' own code
        return f"{type(e).__name__}: {e}"[:120]
    return None


def _check_cases(model_type, checkpoint=False):
    try:
        with _quiet():
            cases = _cases(model_type, checkpoint)
    except Exception as e:  # noqa: BLE001 - the model type cannot be built offline
        return "none", f"transformers: {type(e).__name__}: {e}"[:200]
    if not cases:
        return "none", "no rotary embedding built from a config"
    for i, case in enumerate(cases):
        result = _check_case(i, *case, model_type)
        if result is not None:
            return result
    return "pass", ", ".join(sorted({c[0] for c in cases}))


@functools.lru_cache(maxsize=None)
def check(model_type):
    """``(status, detail)`` for one model type; status "pass", "refuse" (a clear refusal),
    "mismatch" (a different RoPE or an unclear error), "unrunnable" (transformers' own rotary
    fails on the default config and arrpos refuses it) or "none" (no rotary)."""
    status, detail = _check_cases(model_type)
    if status == "unrunnable" and any(_modeling(model_type) is _modeling(t)
                                      for t in CHECKPOINT_VALUES):
        name = next(v[0] for t, v in CHECKPOINT_VALUES.items()
                    if _modeling(model_type) is _modeling(t))
        status, checked = _check_cases(model_type, checkpoint=True)
        detail = f"{checked} (with {name}'s rope values; the default config: {detail})"
    return status, detail


DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "rope.md")
START, END = "<!-- hf-families:start -->", "<!-- hf-families:end -->"


def markdown(results):
    """The supported-families table of docs/rope.md."""
    _, transformers, _ = _transformers()
    rotary = {mt: r for mt, r in results.items() if r[0] != "none"}
    runnable = [mt for mt, r in rotary.items() if r[0] != "unrunnable"]
    passing = [mt for mt, r in rotary.items() if r[0] == "pass"]
    checkpoint = [mt for mt, r in rotary.items() if "rope values; the default config" in r[1]]
    unrunnable = len(rotary) - len(runnable)
    lines = [START, "",
             f"transformers {transformers.__version__}: {len(rotary)} model types use rotary "
             f"embeddings; `from_hf_config` reproduces {len(passing)} of the {len(runnable)} "
             f"that transformers' own rotary can run "
             f"({100 * len(passing) / max(len(runnable), 1):.1f} %) and refuses "
             f"{len(runnable) - len(passing)} with the reason below"
             + (f"; transformers cannot run {unrunnable} others" if unrunnable else "") + ". "
             f"On the default config of {len(checkpoint)} of them transformers' own rotary "
             "fails; those are checked with their checkpoint's rope values (noted in the row). "
             "Generated by `python tests/hf_families.py --write-docs`.", "",
             "| model type | result |", "|---|---|"]
    for mt, (status, detail) in sorted(rotary.items()):
        what = f"reproduced ({detail})" if status == "pass" else f"{status}: {detail}"
        what = what.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{mt}` | {what} |")
    return "\n".join(lines + ["", END])


def write_docs(results):
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    table = markdown(results)
    if START in text:
        text = text[:text.index(START)] + table + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Model families\n\n" + table + "\n"
    with open(DOCS, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv):
    types = [a for a in argv if not a.startswith("--")] or model_types()
    results = {}
    for mt in types:
        results[mt] = check(mt)
        print(f"{mt:40s} {results[mt][0]:8s} {results[mt][1][:150]}", flush=True)
    counts = {}
    for status, _ in results.values():
        counts[status] = counts.get(status, 0) + 1
    rotary = sum(v for k, v in counts.items() if k != "none")
    runnable = rotary - counts.get("unrunnable", 0)
    print(f"# {counts}; rotary types {rotary}, runnable by transformers {runnable}, passing "
          f"{counts.get('pass', 0)} ({100 * counts.get('pass', 0) / max(runnable, 1):.1f} %)",
          file=sys.stderr)
    if "--write-docs" in argv:
        write_docs(results)


if __name__ == "__main__":
    main(sys.argv[1:])

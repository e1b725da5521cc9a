"""Write ``arrpos/_rope/hf_models.py``: what ``RoPE.from_hf_config`` needs to know of each model type
of the installed transformers, read from transformers' own sources.

For every model type: whether its modeling file has a rotary embedding (a ``*RotaryEmbedding``
class, or one of the rotary classes named otherwise, ``OTHER_ROTARY``), the constant defaults of
its config class for the keys the reader uses (``arrpos._rope.hf_config.HF_KEYS``: a key absent
from a ``config.json`` means that default, e.g. DeepSeek-V3's ``rope_interleave=True``), its
``default_theta``, its ``attribute_map`` (``n_head`` -> ``num_attention_heads``) and the model
types of its sub-configs (``text_config``, ``vision_config``, ...).

    python tools/generate_hf_models.py      # then review and commit the diff

The generated module records the transformers version; ``tests/test_hf_models.py`` checks it
against the installed release when that is the pinned one.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pprint
import re
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from arrpos._rope.hf_config import HF_KEYS  # noqa: E402

OUT = os.path.join(ROOT, "arrpos", "_rope", "hf_models.py")
# rotary classes not named *RotaryEmbedding (found by grepping the modeling files for "rotary")
OTHER_ROTARY = re.compile(r"class \w*(RotaryPositionalEmbedding|RopePositionEmbedding|"
                          r"RopeAttention|SinusoidalPositionalEmbedding)\b")
ROTARY = re.compile(r"class \w*RotaryEmbedding\b")


def _modeling_source(ca, model_type):
    import transformers

    mod = ca.model_type_to_module_name(model_type)
    path = os.path.join(os.path.dirname(transformers.__file__), "models", mod, f"modeling_{mod}.py")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


def _modeling_type(ca, model_type):
    """The model type whose modeling file runs ``model_type``: itself, or (configs without a
    modeling file of their own, e.g. ``sarvam_mla``) the type whose model class it maps to."""
    from transformers.models.auto import modeling_auto as ma

    if _modeling_source(ca, model_type):
        return model_type
    cls_name = ma.MODEL_MAPPING_NAMES.get(model_type)
    for other, name in ma.MODEL_MAPPING_NAMES.items():
        if name == cls_name and other != model_type and _modeling_source(ca, other):
            return other
    return model_type


def _is_rotary(ca, model_type):
    src = _modeling_source(ca, _modeling_type(ca, model_type))
    if ROTARY.search(src):
        return True
    # RoFormer's sinusoidal table is applied as a rotation; other sinusoidal tables are not
    return bool(OTHER_ROTARY.search(src)) and ("rotary" in src.lower() or "rotate_half" in src)


# what a modeling file does around its rotary, told by the names it uses: model type entry key ->
# the names that must all appear in the modeling source
FEATURES = {
    # DeepSeek's softmax scale times mscale(factor, mscale_all_dim) ** 2 (yarn_get_mscale)
    "softmax_mscale": ("yarn_get_mscale", "mscale_all_dim"),
    # Ministral 3 / Mistral 4: queries times 1 + beta * log(1 + floor(p / original_max))
    "beta_query_scale": ("get_llama_4_attn_scale", "llama_4_scaling_beta"),
    # layers listed in no_rope_layers (0) apply no rotary (Llama 4, SmolLM3, Mistral Large 4)
    "nope_layers": ("no_rope_layers", "use_rope"),
    # Llama 4: NoPE layers' queries times log1p(floor((p + 1) / floor_scale)) * attn_scale + 1
    "temperature_tuning": ("attn_temperature_tuning", "floor_scale", "attn_scale"),
}


def _plain(value):
    """A JSON-like constant, or None when the default is not one."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


def _defaults(cls):
    out = {}
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.name not in HF_KEYS:
                continue
            if f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                continue
            value = _plain(value)
            if value is not None:
                out[f.name] = value
    return out


def _auto_sub_configs(cls, subs):
    """The sub-config keys whose class is AutoConfig: their dict's ``model_type`` picks the
    class; for the others the class is fixed, whatever ``model_type`` the dict says (Kimi-K2.5's
    text_config says ``kimi_k2`` and is a DeepseekV3Config)."""
    return sorted(key for key, sub_cls in subs.items() if not getattr(sub_cls, "model_type", ""))


# a config class's __post_init__ renaming a sub-config dict's model type (legacy checkpoints):
# `if isinstance(self.K, dict) and self.K.get("model_type"[, d]) == "X": self.K["model_type"] = "Y"`
# (also `self.K["model_type"] == / in [...] / != ...`)
_RENAME = re.compile(
    r'isinstance\(self\.(\w+), dict\) and self\.\1(?:\.get\("model_type"(?:, "\w+")?\)|'
    r'\["model_type"\]) (==|!=|in) (\[[^\]]*\]|"\w+")[^\n]*\n(?:\s*#[^\n]*\n)*'
    r'\s*self\.\1\["model_type"\] = "(\w+)"')


def _sub_type_renames(ca, model_type):
    """``{sub-config key: {old model type (or "*": any other): new}}`` of the config class."""
    import transformers

    mod = ca.model_type_to_module_name(model_type)
    path = os.path.join(os.path.dirname(transformers.__file__), "models", mod,
                        f"configuration_{mod}.py")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        src = f.read()
    out = {}
    for key, op, old, new in _RENAME.findall(src):
        names = re.findall(r'"(\w+)"', old) + (["None"] if "None" in old else [])
        for name in (["*"] if op == "!=" else names):
            out.setdefault(key, {})[name] = new
    return out


def _sub_types(ca, model_type, cls):
    subs = getattr(cls, "sub_configs", None) or {}
    if not subs:
        return {}
    out = {}
    default = None
    for key, sub_cls in subs.items():
        sub_type = getattr(sub_cls, "model_type", "")
        if not sub_type:  # AutoConfig: the default instance says which
            if default is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    default = ca.CONFIG_MAPPING[model_type]()
            sub = getattr(default, key, None)
            sub_type = getattr(sub, "model_type", "")
        if sub_type:
            out[key] = sub_type
    return out


def _post_init_rope_parameters(ca, model_type, cls, entry):
    """The rope parameters a config class's ``__post_init__`` sets when the file has none
    (GPT-OSS's and Mistral Large 4's YaRN), or None when they are the standard empty ones."""
    field = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    if "rope_parameters" not in field or field["rope_parameters"].default is not None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rp = ca.CONFIG_MAPPING[model_type]().rope_parameters
    except Exception:  # noqa: BLE001 - a default that cannot be built offline
        return None
    if not isinstance(rp, dict) or any(isinstance(v, dict) for v in rp.values()):
        return None
    standard = {"rope_type", "rope_theta", "partial_rotary_factor"}
    if set(rp) <= standard and rp.get("rope_type") in ("default", entry.get("default_rope_type")):
        return None
    return _plain(rp)


def collect():
    import logging

    import transformers
    from transformers.models.auto import configuration_auto as ca

    logging.getLogger("transformers").setLevel(logging.ERROR)
    models, names = {}, sorted(ca.CONFIG_MAPPING_NAMES)
    rotary = {mt for mt in names if _is_rotary(ca, mt)}
    for mt in names:
        try:
            cls = ca.CONFIG_MAPPING[mt]
        except (KeyError, ImportError, AttributeError):
            continue
        entry = {}
        defaults = _defaults(cls)
        theta = getattr(cls, "default_theta", 10_000.0)
        if theta != 10_000.0:
            entry["default_theta"] = theta
        if getattr(cls, "default_rope_type", "default") != "default":
            entry["default_rope_type"] = cls.default_rope_type
        attr = {k: v for k, v in (getattr(cls, "attribute_map", None) or {}).items()
                if v in HF_KEYS}
        try:
            subs = _sub_types(ca, mt, cls)
        except Exception:  # noqa: BLE001 - a default that cannot be built offline
            subs = {}
        if defaults:
            entry["defaults"] = defaults
        if attr:
            entry["attribute_map"] = attr
        if subs:
            entry["sub_configs"] = subs
            auto = _auto_sub_configs(cls, getattr(cls, "sub_configs", None) or {})
            if auto:
                entry["auto_sub_configs"] = auto
            renames = _sub_type_renames(ca, mt)
            if renames:
                entry["sub_config_renames"] = renames
        prf = getattr(cls, "default_partial_rotary_factor", None)
        if prf is not None and _plain(prf) is not None:
            entry["default_partial_rotary_factor"] = prf
        entry["rotary"] = mt in rotary
        modeling = _modeling_type(ca, mt)
        if modeling != mt:
            entry["modeling"] = modeling
        src = _modeling_source(ca, modeling)
        for feature, names in FEATURES.items():
            if src and all(name in src for name in names):
                entry[feature] = True
        rope_default = _post_init_rope_parameters(ca, mt, cls, entry)
        if rope_default:
            entry["rope_parameters_default"] = rope_default
        models[mt] = entry
    # a composite model is rotary through its sub-configs; keep entries that matter
    def reaches_rotary(mt, seen=()):
        e = models.get(mt)
        if e is None or mt in seen:
            return False
        return e["rotary"] or any(reaches_rotary(s, seen + (mt,))
                                  for s in e.get("sub_configs", {}).values())

    kept = {mt: e for mt, e in models.items() if reaches_rotary(mt)}
    no_rotary = sorted(set(models) - set(kept))
    return transformers.__version__, kept, no_rotary


def write(version, models, no_rotary):
    # one model type per line (keys sorted): a regenerated table's diff names the model types
    # that changed, and the module stays a few hundred lines
    rows = "".join(f"    {mt!r}: {pprint.pformat(models[mt], width=10**6, sort_dicts=True)},\n"
                   for mt in sorted(models))
    text = (
        f'"""Generated by ``python tools/generate_hf_models.py`` from transformers {version}: '
        "do not edit.\n\n"
        "``MODELS``: each model type whose modeling file (or a sub-config's) has a rotary\n"
        "embedding -> its config class's constant defaults of the keys ``RoPE.from_hf_config``\n"
        "reads, ``default_theta``, ``default_rope_type``, ``attribute_map``, the model types of\n"
        "its sub-configs and ``rotary`` (its own modeling file rotates); one model type per line.\n"
        "``NO_ROTARY``: the model types of that release with no rotary embedding anywhere.\n"
        '"""\n\n'
        "from typing import Any\n\n"
        f"TRANSFORMERS_VERSION = {version!r}\n\n"
        f"MODELS: dict[str, dict[str, Any]] = {{\n{rows}}}\n\n"
        f"NO_ROTARY = frozenset({pprint.pformat(no_rotary, width=100, compact=True)})\n"
    )
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    write(*collect())
    print(f"wrote {OUT}")

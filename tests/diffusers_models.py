"""Every diffusers transformer with a rotary or sincos position embedding, against
``arrpos.from_diffusers_config``.

For each model class in ``diffusers.models.transformers``: its default config (the class's
``__init__`` defaults, or the small documented config of ``CONFIGS`` where the defaults build
no positional encoding or cannot run), the positional module the transformer itself builds,
the ids its pipeline or transformer computes (``diffusers_references.py``: diffusers' own
functions, or their few lines copied with the file named), and the model's own apply function
on a random q. ``from_diffusers_config`` of the same config (given only ``_class_name`` and the
keys of ``CONFIGS``: the class's defaults are arrpos' to know) must give the same ids, the same
cos/sin (or sincos table) and the same rotated q, within the model's float32 rounding, or
refuse with a ValueError naming the class. Anything else is a silent mismatch.

Run as a script for the survey (``python tests/diffusers_models.py [--markdown] [classes...]``).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import pkgutil
import re
import sys
import warnings

import numpy as np

if __name__ == "__main__":  # run as a script: this checkout's arrpos, not an installed one
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import arrpos  # noqa: E402

PINNED = "0.42."   # the diffusers release the lists below were made on (the test extra's pin)
ATOL = 2e-5        # diffusers forms float32 angles: tables within a few |angle| * 2**-24
# Where a class's default config builds no positional encoding, or cannot run, the config of a
# released checkpoint (named) that has one. class -> (where the values come from, the keys)
CONFIGS = {
    "HiDreamImageTransformer2DModel": (
        "HiDream-ai/HiDream-I1-Full: its default axes_dims_rope (32, 32) has 2 entries for the "
        "3 id axes, which the model's own EmbedND cannot run, and patch_size None cannot patchify",
        {"axes_dims_rope": [64, 32, 32], "patch_size": 2}),
    "EasyAnimateTransformer3DModel": (
        "alibaba-pai/EasyAnimateV5.1-12b-zh: patch_size None cannot patchify", {"patch_size": 2}),
    "LatteTransformer3DModel": (
        "maxin-cn/Latte-1: patch_size None cannot patchify", {"patch_size": 2}),
    "Transformer2DModel": (
        "facebook/DiT-XL-2-256 (legacy): without patch_size the inputs are continuous and get no "
        "positional encoding", {"sample_size": 32, "patch_size": 2, "in_channels": 4,
                                "num_attention_heads": 16, "attention_head_dim": 72}),
    "HunyuanDiT2DModel": (
        "Tencent-Hunyuan/HunyuanDiT-Diffusers: patch_size None cannot patchify", {"patch_size": 2}),
    "OmniGenTransformer2DModel": (
        "made-up LongRoPE factors (Shitao/OmniGen-v1 ships Phi-3's 48 short and long factors): "
        "rope_scaling None cannot run", {"rope_scaling": {
            "short_factor": [1.0 + 0.01 * i for i in range(48)],
            "long_factor": [1.0 + 0.25 * i for i in range(48)]}}),
    "SanaTransformer2DModel": (
        "the PatchEmbed table Sana builds when interpolation_scale is set (its released "
        "checkpoints leave it None: position-free)", {"interpolation_scale": 1.0}),
}
# Classes whose module names a positional class (the walker's test) that the model never
# builds: no encoding to reproduce. class -> why
NO_ENCODING = {
    "DreamLiteTransformer2DModel": "its blocks are built without positional_embeddings",
}
# Classes arrpos refuses, and why: must stay accurate (a class that starts passing fails the
# test until it is taken off this list).
NOT_REPRODUCED = {
    "AuraFlowTransformer2DModel": "learned position table (AuraFlowPatchEmbed.pos_embed)",
    "MochiTransformer3DModel": "learned rotary frequencies (pos_frequencies), per head",
    "AnyFlowFARTransformer3DModel": "compressed frames rotate by the normalised mean of pooled "
                                    "rotations: not a rotation at a position",
}


@functools.lru_cache(maxsize=None)
def _diffusers():
    import diffusers
    import torch
    from diffusers.models.modeling_utils import ModelMixin

    logging.getLogger("diffusers").setLevel(logging.ERROR)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return torch, diffusers, ModelMixin


# a module whose source mentions one of these builds a rotary or sincos position embedding
_POSITIONAL = re.compile(r"rotary|Rotary|RoPE|Rope\b|Rope[A-Z(]|\brope|sincos|PatchEmbed|"
                         r"SinusoidalPositionalEmbedding")


@functools.lru_cache(maxsize=None)
def model_names() -> dict:
    """``{class name: (module, whether its module names a rotary or sincos class)}`` read from
    the sources of ``diffusers.models.transformers`` without importing them (cheap enough for
    test collection): every class deriving from a ``*ModelMixin`` and a ``*ConfigMixin``.
    ``model_classes`` is the same walk by import, and a test checks that they agree."""
    import ast
    import importlib.util

    root = os.path.join(importlib.util.find_spec("diffusers").submodule_search_locations[0],
                        "models", "transformers")
    out = {}
    for folder, _, files in sorted(os.walk(root)):
        for file in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                source = f.read()
            module = "diffusers.models.transformers." + os.path.relpath(
                os.path.join(folder, file[:-3]), root).replace(os.sep, ".")
            for node in ast.parse(source).body:
                bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(
                    node, "bases", ())]
                if (isinstance(node, ast.ClassDef) and any(b.endswith("ModelMixin") for b in bases)
                        and any(b.endswith("ConfigMixin") for b in bases)):
                    out[node.name] = (module, bool(_POSITIONAL.search(source)))
    return dict(sorted(out.items()))


def model_class(name):
    return getattr(importlib.import_module(model_names()[name][0]), name)


@functools.lru_cache(maxsize=None)
def model_classes() -> dict:
    """``{class name: (class, whether its module names a rotary or sincos class)}`` for every
    ``ModelMixin`` with a config defined in ``diffusers.models.transformers`` (by import)."""
    _, diffusers, mixin = _diffusers()
    import diffusers.models.transformers as package

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            source = inspect.getsource(module)
            for name, obj in vars(module).items():
                if (isinstance(obj, type) and issubclass(obj, mixin) and obj.__module__ ==
                        module.__name__ and hasattr(obj, "config_name")):
                    out[name] = (obj, bool(_POSITIONAL.search(source)))
    return dict(sorted(out.items()))


def default_config(name) -> dict:
    """The class's ``__init__`` defaults, updated with ``CONFIGS``' keys."""
    params = inspect.signature(model_class(name).__init__).parameters
    config = {k: p.default for k, p in params.items()
              if k != "self" and p.default is not p.empty and p.kind is p.POSITIONAL_OR_KEYWORD}
    config.update(CONFIGS.get(name, ("", {}))[1])
    return config


def _np(t):
    return np.asarray(t.detach().double().numpy()) if hasattr(t, "detach") else np.asarray(t)


def _close(name, a, b, atol):
    a, b = _np(a), _np(b)
    if a.shape != b.shape:
        return f"{name}: shape {b.shape}, diffusers {a.shape}"
    err = float(np.max(np.abs(a - b), initial=0.0))
    return None if err <= atol else f"{name}: max error {err:.2e} > {atol:.1e}"


def check(name):
    """``(status, detail)``: "reproduced", "refused" (a ValueError naming the class),
    "mismatch", "none" (no rotary or sincos embedding), "no reference"."""
    import diffusers_references as refs

    torch, _, _ = _diffusers()
    positional = model_names()[name][1]
    reference = refs.REFERENCES.get(name)
    config = {"_class_name": name, **CONFIGS.get(name, ("", {}))[1]}
    try:
        ours = arrpos.from_diffusers_config(config)
    except ValueError as e:
        if (not positional or name in NO_ENCODING) and reference is None:
            return "none", NO_ENCODING.get(name, "")
        return ("refused", str(e)) if str(e).startswith(name) else ("mismatch", f"unnamed: {e}")
    if reference is None:
        return "no reference", "arrpos builds it, but no reference checks it"
    torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Chroma builds the deprecated alias
        ref = reference({**default_config(name), "_name": name})
    ids = ours.position_ids(**ref["sizes"])
    top = max(1.0, float(np.max(np.abs(_np(ref["ids"])), initial=0)))
    if problem := _close("position_ids", ref["ids"], ids, 2**-21 * top):  # float32 ids there
        return "mismatch", problem
    # a few float32 roundings of the model's largest angle (its frequencies are <= 1 unless the
    # reference says otherwise)
    angle = ref.get("max_angle", float(np.max(np.abs(_np(ref["ids"])), initial=0)))
    atol = ATOL + 2**-21 * angle
    if "table" in ref:
        problem = _close("table", ref["table"], ours.table(ids), atol)
        return ("mismatch", problem) if problem else ("reproduced", "")
    cos, sin = ours.cos_sin(ids)
    problem = _close("cos", ref["cos"], cos, atol) or _close("sin", ref["sin"], sin, atol)
    if problem:
        return "mismatch", problem
    flat = ref.get("flat", False)  # rotated before the head split
    shape = (1, len(ids), ours.head_dim) if flat else (1, len(ids), ref.get("heads", 2),
                                                       ref.get("head_dim", ours.head_dim))
    q = torch.randn(shape, dtype=torch.float32)
    with torch.no_grad():
        want = ref["rotate"](q.clone())
    got = ours.apply(q, torch.asarray(_np(ids)), heads_axis=None if flat else -2)
    got = ref.get("rounding", lambda t: t)(got)  # the model's own output rounding (bfloat16)
    problem = _close("rotated q", want, got, ref.get("rotate_atol", 8 * atol))
    return ("mismatch", problem) if problem else ("reproduced", "")


def survey(names=None):
    rows = []
    for name in names or model_names():
        try:
            status, detail = check(name)
        except Exception as e:  # the survey reports; the test fails on it
            status, detail = "error", f"{type(e).__name__}: {e}"
        rows.append((name, status, NOT_REPRODUCED.get(name) or detail))
    return rows


def markdown(rows) -> str:
    """The survey as docs/diffusers.md's table: per class its result, the keywords of
    ``position_ids`` and the token order (reproduced), or why not."""
    lines = ["| class | result | `position_ids(...)` | tokens, or why not |", "|---|---|---|---|"]
    for name, status, detail in rows:
        if status == "none":
            continue
        sizes = note = ""
        if status == "reproduced":
            ours = arrpos.from_diffusers_config({"_class_name": name,
                                                 **CONFIGS.get(name, ("", {}))[1]})
            sizes = ", ".join(ours.size_names)
            note = f"{ours.kind}: {ours.order}"
        lines.append(f"| `{name}` | {status} | {sizes} | {(note or detail).replace('|', '/')} |")
    return "\n".join(lines)


def main(argv):
    md = "--markdown" in argv
    rows = survey([a for a in argv if not a.startswith("--")] or None)
    if md:
        print(markdown(rows))
        return
    width = max(len(r[0]) for r in rows)
    for name, status, detail in rows:
        print(f"{name:<{width}}  {status:<12} {detail[:100]}")
    counted = [s for _, s, _ in rows if s != "none"]
    print(f"\n{counted.count('reproduced')} of {len(counted)} rotary/sincos classes reproduced")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1:])

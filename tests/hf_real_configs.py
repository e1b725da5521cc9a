"""Real ``config.json`` files of released checkpoints through transformers and through arrpos.

The default-config survey (``tests/hf_families.py``) builds every config from its class defaults;
a checkpoint's file is different: it omits defaults, carries legacy keys (``rope_scaling`` with
``"type"``, top-level ``rope_theta``, ``rope_local_base_freq``), nests text and vision configs.
This module takes each file of ``tests/data/hf_configs/`` (``PROVENANCE.json`` there says where
each was found), loads it as ``AutoConfig.from_pretrained`` does, drives the modeling file's own
rotary module(s) and apply function with the driver of ``tests/hf_families.py``, and gives
``RoPE.from_hf_config`` the RAW file dict (the vision tower: the raw ``vision_config`` dict), as
a user would. Positions go past ``original_max_position_embeddings`` (or
``max_position_embeddings``) to 4x it, so the long-context regimes (dynamic NTK, LongRoPE, YaRN,
Llama 3) are exercised. A model without a rotary embedding must be refused with a ValueError.

Run as a script for a table of outcomes: ``python tests/hf_real_configs.py [files...]``.
"""
from __future__ import annotations

import functools
import json
import os
import sys

import numpy as np

if __name__ == "__main__":  # run as a script: this checkout's arrpos and driver
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arrpos  # noqa: E402
import hf_families as fam  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hf_configs")
PROVENANCE = os.path.join(DATA, "PROVENANCE.json")
SHORT = np.arange(65)  # 0..64: inside every context


def files():
    """The corpus: every ``*.json`` of the data folder but PROVENANCE.json, sorted."""
    return sorted(f for f in os.listdir(DATA)
                  if f.endswith(".json") and f != "PROVENANCE.json")


def raw(name):
    """The file as parsed JSON: what a user passes to ``from_hf_config``."""
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def hf_config(name):
    """The config transformers builds when a checkpoint with this file is loaded."""
    _, transformers, _ = fam._transformers()
    with fam._quiet():
        return transformers.AutoConfig.from_pretrained(os.path.join(DATA, name),
                                                       local_files_only=True)


def raw_sub(file_dict, label):
    """What a user passes for the rotary at ``label`` (a sub-config path): the whole file for
    the text model, the raw sub-dict (``vision_config``, ...) for a tower; None when the file
    has no such dict (transformers then uses the sub-config's defaults)."""
    if label == "text_config":
        return file_dict
    if label == "config":  # a top-level rotary that is not the text model's
        return {k: v for k, v in file_dict.items() if k != "text_config"}
    node = file_dict
    for key in label.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def context_length(sub):
    """The context the long-context scalings key on: ``original_max_position_embeddings`` (in
    the rope parameters or the config), else ``max_position_embeddings``; None if neither."""
    rp = getattr(sub, "rope_parameters", None) or {}
    if isinstance(rp, dict) and any(isinstance(v, dict) for v in rp.values()):
        rp = next(v for v in rp.values() if isinstance(v, dict))
    for value in (rp.get("original_max_position_embeddings") if isinstance(rp, dict) else None,
                  getattr(sub, "original_max_position_embeddings", None),
                  getattr(sub, "max_position_embeddings", None)):
        if isinstance(value, int) and value > 0:
            return value
    return None


def position_sets(sub):
    """1-D position sets, each checked on a fresh rotary module (the sequence-dependent ones
    read the largest position): 0..64; just inside L; just past L; up to 4L. Axial (vision)
    rotaries take patch coordinates: the survey's own."""
    sets = [SHORT]
    if fam._is_axial(sub):
        return sets
    length = context_length(sub)
    if length and length > 66:
        sets += [np.array([0, 1, length - 2, length - 1]), np.array([0, 1, length, length + 1]),
                 np.array([0, 1, 2, 4 * length - 1])]
    return sets


def tolerance(positions):
    """transformers forms float32 angles: ~|p| * 2**-23 rad; twice that, and the survey's floor."""
    return fam.ATOL + float(np.max(positions)) * 2.0 ** -22


def _refused(model_type, call):
    """None when ``call()`` raises a ValueError naming ``model_type``, else what it did."""
    try:
        with fam._quiet():
            rope = call()
    except ValueError as e:
        if str(e).startswith(f"{model_type}: "):
            return None
        return f"ValueError not naming {model_type!r}: {e}"
    except Exception as e:  # noqa: BLE001 - a refusal must be a ValueError
        return f"{type(e).__name__} instead of a ValueError: {e}"
    return f"accepted as {rope!r}, but {model_type} has no rotary embedding"


def _roformer(name, file_dict, config):
    """RoFormer: its sinusoidal table (``RoFormerSinusoidalPositionalEmbedding``, as its encoder
    builds it) and ``RoFormerSelfAttention.apply_rotary_position_embeddings``."""
    torch, _, _ = fam._transformers()
    from transformers.models.roformer import modeling_roformer as m

    try:
        with fam._quiet():
            rope = arrpos.RoPE.from_hf_config(file_dict)
    except fam.REFUSALS as e:
        return None if str(e).startswith("roformer: ") else f"refusal not naming roformer: {e}"
    except Exception as e:  # noqa: BLE001
        return f"unclear {type(e).__name__}: {e}"
    head = config.hidden_size // config.num_attention_heads
    emb = m.RoFormerSinusoidalPositionalEmbedding(config.max_position_embeddings, head)
    with torch.no_grad():
        emb.weight.copy_(emb.create_weight())
        pos = np.arange(config.max_position_embeddings)[::7]
        table = emb(None, position_ids=torch.as_tensor(pos))[None, None]  # (1, 1, n, head)
        q = torch.rand(1, 2, len(pos), head, generator=torch.Generator().manual_seed(0)) * 2 - 1
        want = m.RoFormerSelfAttention.apply_rotary_position_embeddings(table, q, q)[0]
    got = rope.apply(q.double().numpy(), pos[None], heads_axis=-3)
    err = np.abs(got - want.double().numpy()).max()
    return None if err <= 2 * tolerance(pos) else f"rotated q differs by {err:.2e}"


# model types whose rotary is not a ``*RotaryEmbedding`` class: their own driver
SPECIAL = {"roformer": _roformer}


def cases(config):
    """``(label, sub-config, rotary module, layer_type, model type of its modeling file)`` for
    every rotary of ``config``: those of its own modeling file, then those of the sub-configs
    whose model type has a modeling file of its own (Mistral 3's ``ministral3`` text model and
    ``pixtral`` vision tower)."""
    out = [(label, sub, emb, lt, config.model_type) for label, _, sub, emb, lt
           in fam.rotary_cases(config, config.model_type, every_config=True)]
    covered = {id(case[1]) for case in out}
    for path, sub in fam._configs(config):
        if not path or id(sub) in covered:
            continue
        try:
            if fam._modeling(sub.model_type) is fam._modeling(config.model_type):
                continue
            found = fam.rotary_cases(sub, sub.model_type)
        except (ImportError, KeyError):  # no modeling file of its own
            continue
        for label, _, s, emb, lt in found:
            prefix = ".".join(path)
            out.append((prefix if label == "config" else f"{prefix}.{label}", s, emb, lt,
                        sub.model_type))
            covered.add(id(s))
    return out


def _axial_as_1d(user, sub, lt):
    """What is wrong when arrpos reads an axial (vision) rotary's config as another RoPE (a 1-D
    or a text model's multimodal one): transformers' rotary then cannot even be driven alike."""
    if not fam._is_axial(sub):
        return None
    try:
        with fam._quiet():
            rope = arrpos.RoPE.from_hf_config(user, layer_type=lt)
    except Exception:  # noqa: BLE001 - refusals and errors: _check_case judges them
        return None
    if isinstance(rope.scaling, arrpos.AxialScaling):
        return None
    return (f"accepted as {rope!r}, but transformers' {sub.model_type} rotary is axial "
            f"(rope_type 'axial': it turns with patch coordinates)")


def check(name):
    """Problems with one corpus file (empty: reproduced, or refused with the model type named)
    and a one-line summary of what was checked."""
    return check_dict(name, raw(name), hf_config(name))


def config_from_dict(file_dict):
    """The config transformers builds from a ``config.json`` dict (as ``from_pretrained``)."""
    _, transformers, _ = fam._transformers()
    with fam._quiet():
        cls = transformers.AutoConfig.for_model(file_dict["model_type"]).__class__
        return cls.from_dict(json.loads(json.dumps(file_dict)))


def check_dict(name, file_dict, config):
    """``check`` of a file dict and the config transformers built from it."""
    model_type = config.model_type
    if model_type in SPECIAL:
        problem = SPECIAL[model_type](name, file_dict, config)
        return ([f"{name}: {problem}"] if problem else []), f"{model_type} (own driver)"
    with fam._quiet():
        found = cases(config)
    if not found:  # no rotary embedding: arrpos must refuse
        problem = _refused(model_type, lambda: arrpos.RoPE.from_hf_config(file_dict))
        return ([f"{name}: {problem}"] if problem else []), f"{model_type}: no rotary, refused"
    problems, seen, checked = [], set(), []
    for i, (label, sub, emb, lt, module_type) in enumerate(found):
        user = raw_sub(file_dict, label)
        where = label if lt is None else f"{label}[{lt}]"
        if user is None:
            checked.append(f"{where}: not in the file")
            continue
        axial = _axial_as_1d(user, sub, lt)
        if axial:
            problems.append(f"{name}: {where}: {axial}")
            checked.append(f"{where}: mismatch")
            continue
        outcome = "pass"
        for positions in position_sets(sub):
            with fam._quiet():
                fresh = type(emb)(sub)  # sequence-dependent modules keep state between calls
            result = fam._check_case(i, label, config, sub, fresh, lt, module_type,
                                     user_config=user, positions=positions,
                                     atol=tolerance(positions))
            if result is None:
                continue
            status, detail = result
            if status in ("refuse", "unrunnable"):
                outcome = f"{status} ({detail})"
                break
            key = (where, detail)
            if key not in seen:
                seen.add(key)
                problems.append(f"{name}: {where} at positions up to {int(np.max(positions))}: "
                                f"{detail}")
            outcome = "mismatch"
            break
        checked.append(f"{where}: {outcome}")
    return problems, f"{model_type}: " + "; ".join(checked)


def main(argv):
    names = [a for a in argv if not a.startswith("-")] or files()
    failing = 0
    for name in names:
        problems, summary = check(name)
        failing += bool(problems)
        print(f"{'FAIL' if problems else 'ok  '} {name:55s} {summary}")
        for p in problems:
            print(f"     {p[:400]}")
    print(f"# {len(names) - failing} of {len(names)} files reproduced or refused", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])

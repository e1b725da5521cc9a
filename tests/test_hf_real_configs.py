"""Real ``config.json`` files of released checkpoints: ``RoPE.from_hf_config`` given the raw file
reproduces the modeling file's own rotary module(s) and apply function, inside and beyond the
trained context, or refuses with a ValueError/NotImplementedError naming the model type; a model
without a rotary embedding is refused with a ValueError.

The corpus is ``tests/data/hf_configs/`` (``PROVENANCE.json`` says where each file was found and
which checkpoint it is the config of); the check is in ``tests/hf_real_configs.py``, which
drives transformers with ``tests/hf_families.py``. Offline: files only, rotary modules only.
"""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_real_configs as real  # noqa: E402

FILES = real.files()


@pytest.mark.parametrize("name", FILES)
def test_real_config(name):
    """Reproduced, or refused with the model type named: never a different RoPE."""
    problems, summary = real.check(name)
    assert not problems, "\n".join(problems) + f"\n(checked: {summary})"


@pytest.mark.parametrize("name", FILES)
def test_loaded_as_from_pretrained(name):
    """The harness's config is what loading the file gives, and the class's ``from_dict`` of the
    file gives the same (so either can stand for loading a checkpoint)."""
    config = real.hf_config(name)
    file_dict = real.raw(name)
    model_type = file_dict["model_type"]
    if model_type == "mistral" and "layer_types" in file_dict:  # AutoConfig's own heuristic
        model_type = "ministral"
    _, transformers, _ = real.fam._transformers()
    with real.fam._quiet():
        built = transformers.AutoConfig.for_model(model_type).__class__.from_dict(
            json.loads(json.dumps(file_dict)))
    got, want = built.to_dict(), config.to_dict()
    for d in (got, want):
        d.pop("_name_or_path", None)
    assert got == want


def test_corpus_attributed():
    """Every corpus file has its provenance (where it was found, and whose config it is), and
    every provenance entry has its file."""
    with open(real.PROVENANCE, encoding="utf-8") as f:
        provenance = json.load(f)
    assert sorted(provenance) == FILES
    for name, entry in provenance.items():
        assert {"repository", "path", "commit", "hub_id"} <= set(entry), name
        assert len(entry["commit"]) == 40, name
        assert os.path.exists(os.path.join(real.DATA, name))

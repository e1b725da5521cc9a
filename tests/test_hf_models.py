"""``arrpos/_rope/hf_models.py`` is what ``tools/generate_hf_models.py`` reads off the installed
transformers: regenerated here and compared, so a table edited by hand or left stale after a
transformers update fails (the test extra pins the release the table records)."""
from __future__ import annotations

import importlib.util
import os

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from arrpos._rope import hf_models as _hf_models  # noqa: E402

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools",
                    "generate_hf_models.py")


@pytest.mark.skipif(transformers.__version__ != _hf_models.TRANSFORMERS_VERSION,
                    reason=f"the table records transformers {_hf_models.TRANSFORMERS_VERSION}")
def test_table_is_the_generators_output():
    spec = importlib.util.spec_from_file_location("generate_hf_models", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    version, models, no_rotary = tool.collect()
    assert version == _hf_models.TRANSFORMERS_VERSION
    assert set(models) == set(_hf_models.MODELS)
    for model_type, entry in models.items():
        assert entry == _hf_models.MODELS[model_type], model_type
    assert frozenset(no_rotary) == _hf_models.NO_ROTARY


def test_every_rotary_model_type_is_known():
    """The default-config survey's rotary types are all in the table as rotary."""
    import hf_families

    for model_type in hf_families.model_types():
        assert _hf_models.MODELS.get(model_type, {}).get("rotary"), model_type

"""Every rotary model type of the installed transformers: ``RoPE.from_hf_config`` reproduces
the modeling file's own rotary embedding and apply function, or refuses clearly.

The check itself is in ``tests/hf_families.py`` (also a survey script). Default configs,
offline, no weights: the rotary modules alone, on 12 positions below 64.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hf_families  # noqa: E402

TYPES = hf_families.model_types()


@pytest.mark.parametrize("model_type", TYPES)
def test_family(model_type):
    """Pass, or a ValueError/NotImplementedError naming the model type: never a different RoPE."""
    status, detail = hf_families.check(model_type)
    assert status != "mismatch", detail


@pytest.mark.skipif(not transformers.__version__.startswith(hf_families.PINNED),
                    reason=f"the pass count is that of transformers {hf_families.PINNED}x")
def test_enough_families_pass():
    results = [hf_families.check(t) for t in TYPES]
    rotary = [s for s, _ in results if s != "none"]
    passing = rotary.count("pass")
    assert passing >= hf_families.MIN_PASSING, (passing, len(rotary))
    # the bar: 97 % of the types whose default config transformers itself can run
    runnable = len(rotary) - rotary.count("unrunnable")
    assert passing >= 0.97 * runnable, (passing, runnable)

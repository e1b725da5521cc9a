"""The README's Python examples run as written."""
from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_block_runs(i):
    code = BLOCKS[i]
    if "import torch" in code:
        pytest.importorskip("torch")
    namespace: dict = {}
    for earlier in BLOCKS[:i]:  # later blocks may use names from earlier ones
        exec(compile(earlier, f"README block {BLOCKS.index(earlier)}", "exec"), namespace)
    exec(compile(code, f"README block {i}", "exec"), namespace)

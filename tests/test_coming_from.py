"""docs/coming-from.md's Python blocks run as written (each asserts its own claim)."""
from __future__ import annotations

import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "coming-from.md"
# the rotary section (between the rope markers) runs as one script in tests/test_rope_peers.py
_TEXT = re.sub(r"<!-- rope:begin -->.*?<!-- rope:end -->", "", DOC.read_text(), flags=re.S)
BLOCKS = re.findall(r"```python\n(.*?)```", _TEXT, flags=re.S)


def test_doc_has_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_block_runs(i):
    exec(compile(BLOCKS[i], f"coming-from.md block {i}", "exec"), {})

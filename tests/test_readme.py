"""Every Python example of README.md and docs/*.md runs as written.

The documents are found by globbing, so a new docs page is tested without touching this file.
Within one document, a block may use names defined by the blocks before it. A fragment that
names another library's private objects is fenced ``py`` instead of ``python``: shown, not run.
"""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"```python\n(.*?)```", flags=re.S)


def _blocks(path):
    return _FENCE.findall(path.read_text(encoding="utf-8"))


CASES = [(doc, i) for doc in DOCUMENTS for i in range(len(_blocks(doc)))]


def test_readme_has_examples():
    assert len(_blocks(ROOT / "README.md")) >= 2
    assert len(CASES) > len(_blocks(ROOT / "README.md"))  # the docs pages are found too


def _cupy_usable() -> bool:
    try:
        import cupy

        cupy.arange(1)
        return True
    except Exception:
        return False


@pytest.mark.parametrize("doc, i", CASES, ids=[f"{d.name}-{i}" for d, i in CASES])
def test_readme_block_runs(doc, i, tmp_path, monkeypatch):
    blocks = _blocks(doc)
    code = blocks[i]
    if "import torch" in code:
        pytest.importorskip("torch")
    if "import cupy" in code and not _cupy_usable():
        pytest.skip("needs CuPy with a GPU")
    if "arrpos.plot" in code:
        pytest.importorskip("matplotlib").use("Agg")
    monkeypatch.chdir(tmp_path)  # examples may write files (plots)
    namespace: dict = {}
    for j, earlier in enumerate(blocks[:i]):  # later blocks may use names from earlier ones
        exec(compile(earlier, f"{doc.name} block {j}", "exec"), namespace)
    exec(compile(code, f"{doc.name} block {i}", "exec"), namespace)

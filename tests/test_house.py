"""The house rules of docs/design.md, checked: a reader changes one place per idea."""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "arrpos"
# public modules: validation, docs, dispatch; only these may name a backend
ALLOWED_BACKEND_NAMES = {"_dispatch.py", "_cli.py"}
BACKEND_LITERAL = re.compile(r"""["'](numpy|torch|jax|cupy|dask)["']""")


def _public_modules():
    return sorted(p for p in PACKAGE.glob("_*.py") if p.name not in ALLOWED_BACKEND_NAMES
                  and p.name != "__init__.py")


def test_public_modules_name_no_backend():
    found = []
    for path in _public_modules():
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if BACKEND_LITERAL.search(line.split("#", 1)[0]):
                found.append(f"{path.name}:{lineno}: {line.strip()}")
    assert not found, "backend names outside _dispatch/_lib/_backends:\n" + "\n".join(found)


def _body_lines(fn: ast.FunctionDef) -> int:
    body = fn.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]  # the docstring is documentation, not code
    return 0 if not body else body[-1].end_lineno - body[0].lineno + 1


def test_no_function_longer_than_60_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _body_lines(node)
                if n > 60:
                    long.append(f"{path.relative_to(ROOT)}::{node.name} ({n} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_nothing_points_outside_the_repository():
    pattern = re.compile(r"shared/|\.\./shared")
    hits = []
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *PACKAGE.rglob("*.py"),
                 *ROOT.glob("csrc/*"), *ROOT.glob("tests/*.py")]:
        if path.name == "test_house.py" or not path.is_file():
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not hits, "\n".join(hits)

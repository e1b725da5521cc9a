"""The house rules of docs/design.md, checked: a reader changes one place per idea."""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "arrpos"
# public modules: validation, docs, dispatch; only these may name a backend
ALLOWED_BACKEND_NAMES = {"_dispatch.py", "_cli.py"}
# packages whose modules may name backends: the backends themselves and the namespace helpers
ALLOWED_BACKEND_PACKAGES = {"_backends", "_lib"}
BACKEND_LITERAL = re.compile(r"""["'](numpy|torch|jax|cupy|dask)["']""")


def _public_modules():
    """The private modules of the package (``_absolute.py``, ...) and every module of its wings
    (``_rope/``, ``_diffusers/``, ...), backends and namespace helpers aside."""
    found = []
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE).parts
        if parts[0] in ALLOWED_BACKEND_PACKAGES or p.name in ALLOWED_BACKEND_NAMES:
            continue
        if len(parts) == 1 and (not p.name.startswith("_") or p.name == "__init__.py"):
            continue
        found.append(p)
    return sorted(found)


def test_public_modules_name_no_backend():
    found = []
    for path in _public_modules():
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if BACKEND_LITERAL.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(PACKAGE)}:{lineno}: {line.strip()}")
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


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: dict) -> set:
    """The modules of the package that ``path`` imports, anywhere in it (function-local imports
    included: they hide a cycle, they do not break it)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package
                for _ in range(node.level - 1):
                    up = up.rpartition(".")[0]
                base = ".".join(p for p in (up, node.module) if p)
            for a in node.names:  # a submodule, else a name of the module
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def test_no_import_cycle():
    """No module of arrpos imports, directly or through others, a module that imports it."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: _imports(p, modules) for m, p in modules.items()}
    cycles = []
    for start in sorted(graph):
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    cycles.append(" -> ".join(path + (start,)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


MAX_MODULE_LINES = 800


def test_no_module_over_800_lines():
    """A module a reader can hold: one past 800 lines becomes a wing (a subpackage whose file
    names say their jobs), as _rope/, _relative/ and _diffusers/ did."""
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"

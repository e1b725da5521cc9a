"""The wheel build configuration (issue 28): pyproject.toml's [tool.cibuildwheel] covers the
platforms docs/platforms.md names and tests each wheel with the kernel-equivalence subset that
exists here; setup.py's flags per compiler keep every platform's kernels exact (no FMA
contraction, no -march / /arch) and threaded."""
from __future__ import annotations

import ast
import pathlib
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

pytestmark = pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file()
                                or not (ROOT / "setup.py").is_file(),
                                reason="needs the checkout (pyproject.toml, setup.py)")


def _cibw():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["cibuildwheel"]


def test_wheels_for_each_platform():
    cfg = _cibw()
    assert set(cfg["linux"]["archs"]) == {"x86_64", "aarch64"}
    assert cfg["macos"]["archs"] == ["arm64"]
    assert cfg["windows"]["archs"] == ["AMD64"]
    assert cfg["environment"]["ARRPOS_REQUIRE_EXTENSION"] == "1"
    assert "*-musllinux_*" in cfg["skip"]


def test_wheel_test_command_runs_existing_kernel_tests():
    cmd = " && ".join(_cibw()["test-command"])
    files = [w for w in cmd.replace('"', " ").split() if w.startswith("tests/test_")]
    assert "tests/test_simd_levels.py" in files and "tests/test_equivalence.py" in files
    for f in files:
        assert (ROOT / f).is_file(), f
    # the tests are run from a copy, so that they import the wheel rather than the sources
    assert "copytree(r'{project}/tests', 'tests')" in cmd


def _flags(platform, env):
    """setup.py's _flags() as it runs on ``platform`` with environment ``env``."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_flags")
    ns = {"sys": types.SimpleNamespace(platform=platform, stderr=sys.stderr),
          "os": types.SimpleNamespace(environ=env)}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "setup.py", "exec"), ns)
    return ns["_flags"]()


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_flags_per_compiler(platform):
    flags = _flags(platform, {})
    joined = " ".join(flags)
    assert "march" not in joined and "/arch" not in joined  # run-time dispatch, any CPU
    assert "NO_THREADS" not in joined  # threaded everywhere (std::thread)
    if platform == "win32":  # MSVC: its options only; precise contracts no FMA
        assert {"/O2", "/std:c++17", "/fp:precise"} <= set(flags)
        assert all(f.startswith("/") for f in flags)
    else:
        assert {"-O3", "-std=c++17", "-ffp-contract=off", "-fno-trapping-math", "-pthread"} <= set(flags)
        assert all(f.startswith("-") for f in flags)


@pytest.mark.parametrize("platform, opt", [("linux", "-D"), ("win32", "/D")])
def test_switches_in_each_compilers_syntax(platform, opt):
    flags = _flags(platform, {"ARRPOS_NO_THREADS": "1", "ARRPOS_NO_SIMD": "1"})
    assert opt + "ARRPOS_NO_THREADS" in flags and opt + "ARRPOS_NO_SIMD" in flags
    assert "-pthread" not in flags

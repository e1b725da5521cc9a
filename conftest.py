"""Doctest collection for ``python -m pytest`` (testpaths = tests, arrpos; --doctest-modules).

Keeps modules out of collection that must not be imported there: the CuPy adapter (needs CuPy
and a GPU; its own tests cover it), the plot module without matplotlib, and the scripts at the
root (``setup.py`` would run a build, ``benchmarks/__main__.py`` the benchmarks) when someone
runs ``pytest .``.
"""
import importlib.util

collect_ignore = ["setup.py", "build", "dist", "benchmarks", "examples"]
collect_ignore_glob = ["arrpos/_backends/_cupy*.py"]

if importlib.util.find_spec("matplotlib") is None:
    collect_ignore.append("arrpos/plot.py")

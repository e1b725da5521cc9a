"""Doctest collection for ``python -m pytest`` (testpaths = tests, arrpos; --doctest-modules).

Keeps modules out of collection that must not be imported there: the CuPy adapter (needs CuPy
and a GPU; its own tests cover it), the adapters and the plot module whose library is not
installed (their tests skip; the docstrings need the library), and the scripts at the root
(``setup.py`` would run a build, ``benchmarks/__main__.py`` the benchmarks) when someone runs
``pytest .``.

Test modules that import an optional package that is not installed: tests/conftest.py.
"""
import importlib.util

collect_ignore = ["setup.py", "build", "dist", "benchmarks", "examples"]
collect_ignore_glob = ["arrpos/_backends/_cupy*.py"]

for _module, _needs in (("arrpos/plot.py", "matplotlib"),
                        ("arrpos/_backends/_torch_cpu.py", "torch"),
                        ("arrpos/_backends/_dask.py", "dask"),
                        ("arrpos/_backends/_dask_canvas.py", "dask")):
    if importlib.util.find_spec(_needs) is None:
        collect_ignore.append(_module)

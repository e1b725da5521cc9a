"""Doctest collection for ``python -m pytest`` (testpaths = tests, arrpos; --doctest-modules).

Keeps modules out of collection that must not be imported there: the CuPy front-end and the
CUDA driver (need CuPy and a GPU; their own tests cover them), the front-ends and the plot
module whose library is not installed (their tests skip; the docstrings need the library), and
the scripts at the root
(``setup.py`` would run a build, ``benchmarks/__main__.py`` the benchmarks) when someone runs
``pytest .``.

Test modules that import an optional package that is not installed: tests/conftest.py.
"""
import importlib.util

collect_ignore = ["setup.py", "build", "dist", "benchmarks", "examples"]
collect_ignore_glob = ["arrpos/_backends/cuda/cupy.py", "arrpos/_backends/cuda/driver.py"]

for _module, _needs in (("arrpos/plot.py", "matplotlib"),
                        ("arrpos/_backends/host/torch_cpu.py", "torch"),
                        ("arrpos/_backends/dask/graph.py", "dask"),
                        ("arrpos/_backends/dask/canvas.py", "dask")):
    if importlib.util.find_spec(_needs) is None:
        collect_ignore.append(_module)

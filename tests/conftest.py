"""Shared fixtures: a backend fixture over every array library arrpos supports.

Each backend is a small object with the namespace ``xp``, a way to make arrays from NumPy
(``asarray``) and to bring results back (``to_numpy``). Libraries that are not installed, and
CuPy without a GPU, are skipped with the reason shown. Those skips are many (every test on
every backend: about 170 for CuPy alone) and all say the same, so the summary of ``-ra`` folds
them into one line per library (``SKIPPED [171] tests/conftest.py:NN: cupy unavailable: ...``)
instead of one per test function, where they buried the failures; ``-rs -v`` still lists each
test. Nothing else is folded: any other skip, and every failure and error, is reported as usual.

Without the test extra, a test that imports a missing optional package itself (or runs a docs
block that does) is skipped naming the package; the same import failing inside arrpos stays a
failure. A test module that imports one at the top is one skip too, not a collection error
that stops the run; the same rule decides.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")


class Backend:
    def __init__(self, name, module, xp, asarray, to_numpy, float64=True, mutable=True):
        self.name = name
        self.module = module  # what a user passes as xp=
        self.xp = xp  # the compat namespace
        self._asarray = asarray
        self._to_numpy = to_numpy
        self.float64 = float64
        self.mutable = mutable

    def asarray(self, a, dtype=None):
        a = np.asarray(a)
        if dtype is not None:
            a = a.astype(dtype)
        elif a.dtype == np.float64 and not self.float64:
            a = a.astype(np.float32)
        elif a.dtype == np.int64 and not self.float64:
            a = a.astype(np.int32)
        return self._asarray(a)

    def to_numpy(self, x):
        return np.asarray(self._to_numpy(x))

    def __repr__(self):
        return self.name


def _numpy():
    import array_api_compat.numpy as xp

    return Backend("numpy", np, xp, lambda a: a, lambda x: x)


def _strict():
    s = importlib.import_module("array_api_strict")
    return Backend("array_api_strict", s, s, lambda a: s.asarray(a), lambda x: np.asarray(x))


def _torch():
    torch = importlib.import_module("torch")
    import array_api_compat.torch as xp

    return Backend("torch", torch, xp, lambda a: torch.from_numpy(np.array(a)),
                   lambda x: x.detach().cpu().numpy())


def _jax():
    jax = importlib.import_module("jax")
    jnp = importlib.import_module("jax.numpy")
    return Backend("jax", jnp, jnp, lambda a: jnp.asarray(a), lambda x: np.asarray(x),
                   float64=bool(jax.config.jax_enable_x64), mutable=False)


def _dask():
    da = importlib.import_module("dask.array")
    import array_api_compat.dask.array as xp

    return Backend("dask", da, xp, lambda a: da.from_array(a, chunks=-1) if a.ndim else
                   da.from_array(a), lambda x: x.compute() if hasattr(x, "compute") else x)


def _cupy():
    cp = importlib.import_module("cupy")
    if cp.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no GPU")
    import array_api_compat.cupy as xp

    return Backend("cupy", cp, xp, lambda a: cp.asarray(a), lambda x: cp.asnumpy(x))


_FACTORIES = {
    "numpy": _numpy,
    "array_api_strict": _strict,
    "torch": _torch,
    "jax": _jax,
    "dask": _dask,
    "cupy": _cupy,
}
BACKEND_NAMES = list(_FACTORIES)
_CACHE: dict[str, object] = {}


def get_backend(name):
    if name not in _CACHE:
        try:
            _CACHE[name] = _FACTORIES[name]()
        except Exception as exc:  # not installed, or no GPU
            _CACHE[name] = f"{name} unavailable: {type(exc).__name__}: {exc}"
    b = _CACHE[name]
    if isinstance(b, str):
        pytest.skip(b)  # _SKIP_LINE: the line the folded summary names
    return b


_UNAVAILABLE = re.compile(r"(?:%s) unavailable: " % "|".join(map(re.escape, _FACTORIES)))
_SKIP_LINE = next(i for i, line in enumerate(open(__file__, encoding="utf-8"), 1)
                  if "pytest.skip(b)  # _SKIP_LINE" in line)
_PACKAGE = Path(__file__).resolve().parent.parent / "arrpos"
# Packages the tests import that a light install may not have (the test extra and its peers).
OPTIONAL = frozenset({
    "array_api_strict", "dask", "diffusers", "distributed", "hypothesis", "jax", "jaxlib",
    "matplotlib", "ml_dtypes", "mpmath", "numba", "onnx", "onnxruntime", "PIL",
    "rotary_embedding_torch", "selenium", "timm", "torch", "transformers", "x_transformers",
    "cupy", "einops"})
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_FRAME = re.compile(r"^(\S+?\.py):\d+: in ", re.M)


def _absent_optional(text):
    """The optional package a collection error says is missing, if it really is absent and the
    import that failed is the tests' own (arrpos importing it would be a bug, not a skip)."""
    frames = _FRAME.findall(text)
    if not frames or Path(frames[-1]).resolve().is_relative_to(_PACKAGE):
        return None
    for name in _MISSING.findall(text):
        top = name.split(".")[0]
        if top in OPTIONAL and importlib.util.find_spec(top) is None:
            return top
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A test module that imports a missing optional package is one skip naming it, not a
    collection error that stops the run (the light install has no test extra)."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or not isinstance(collector, pytest.Module):
        return
    missing = _absent_optional(str(rep.longrepr))
    if missing is None:
        return
    rep.outcome = "skipped"
    rep.longrepr = (str(collector.path), 0, f"Skipped: needs {missing}, not installed (the "
                    "test extra has it: pip install -e \".[test]\")")
    rep.result = []


def _missing_optional(excinfo):
    """The optional package whose absence a test's own import raised, or None: a package that
    is installed, or an import made inside arrpos, is no reason to skip (arrpos importing an
    optional package unasked would be a bug)."""
    if excinfo is None or not isinstance(excinfo.value, ModuleNotFoundError):
        return None
    top = (excinfo.value.name or "").split(".")[0]
    if top not in OPTIONAL or importlib.util.find_spec(top) is not None:
        return None
    frames = [e for e in excinfo.traceback if not str(e.path).startswith("<frozen")]
    last = Path(str(frames[-1].path)) if frames else None
    if last is not None and last.is_absolute() and last.resolve().is_relative_to(_PACKAGE):
        return None
    return top


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip for an unavailable backend is reported at get_backend, not at each test, so that
    pytest's summary counts them on one line per library. A test whose own code (or a docs
    block it runs) imports an optional package that is not installed is a skip naming it, as
    pytest.importorskip would make it, not a failure of a light install."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        reason = str(rep.longrepr[2])
        if _UNAVAILABLE.match(reason.removeprefix("Skipped: ")):
            rep.longrepr = (__file__, _SKIP_LINE, reason)
    elif rep.failed and call.when in ("setup", "call"):
        missing = _missing_optional(call.excinfo)
        if missing is not None:
            path, line = item.reportinfo()[:2]
            rep.outcome = "skipped"
            rep.longrepr = (str(path), (line or 0) + 1, f"Skipped: needs {missing}, not "
                            "installed (the test extra has it: pip install -e \".[test]\")")


@pytest.fixture(params=BACKEND_NAMES)
def backend(request):
    """Every supported array library (skipped where absent)."""
    return get_backend(request.param)


@pytest.fixture
def numpy_backend():
    return get_backend("numpy")

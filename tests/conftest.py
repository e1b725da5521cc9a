"""Shared fixtures: a backend fixture over every array library arrpos supports.

Each backend is a small object with the namespace ``xp``, a way to make arrays from NumPy
(``asarray``) and to bring results back (``to_numpy``). Libraries that are not installed, and
CuPy without a GPU, are skipped with the reason shown.
"""
from __future__ import annotations

import importlib
import os

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
        pytest.skip(b)
    return b


@pytest.fixture(params=BACKEND_NAMES)
def backend(request):
    """Every supported array library (skipped where absent)."""
    return get_backend(request.param)


@pytest.fixture
def numpy_backend():
    return get_backend("numpy")

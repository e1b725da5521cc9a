"""The one place that knows which implementations exist and chooses between them.

Rules (DESIGN.md): choose by namespace, then by capability (dtype, layout, contiguity); any
condition that fails falls back to the generic ``_xp`` implementation, never to an error.
``ARRPOS_NO_EXTENSIONS=1`` forces ``_xp`` everywhere. No device copies are ever hidden here: a
GPU array is never routed through NumPy.
"""
from __future__ import annotations

import os

from ._backends import _xp
from ._lib import backend_name

__all__ = [
    "compiled_available",
    "extensions_disabled",
    "gpu_module",
    "numpy_module",
    "select",
    "torch_cpu_module",
]

_NUMPY_MODULE = None
_NUMPY_ERROR: str | None = None


# read once, at import: the choice must not change between two calls of one program
_DISABLED = os.environ.get("ARRPOS_NO_EXTENSIONS", "") not in ("", "0")


def extensions_disabled() -> bool:
    """Whether ``ARRPOS_NO_EXTENSIONS`` was set (to anything but 0) when arrpos was imported."""
    return _DISABLED


def numpy_module():
    """The compiled NumPy adapter, or None (not built, or disabled by ARRPOS_NO_EXTENSIONS)."""
    global _NUMPY_MODULE, _NUMPY_ERROR
    if extensions_disabled():
        return None
    if _NUMPY_MODULE is None and _NUMPY_ERROR is None:
        try:
            from ._backends import _numpy

            _NUMPY_MODULE = _numpy
        except ImportError as exc:  # the package runs without its extension, only slower
            _NUMPY_ERROR = str(exc)
    return _NUMPY_MODULE


def compiled_available() -> tuple[bool, str | None]:
    """Whether the CPU extension imports, and why not when it does not."""
    mod = numpy_module()
    return mod is not None, (None if mod is not None else _NUMPY_ERROR or "disabled")


def _is_float32_or_64(xp, dtype) -> bool:
    return dtype == xp.float32 or dtype == xp.float64


def gpu_module(name: str, arrays=()):
    """The CUDA adapter for CuPy arrays (``_cupy``) or CUDA torch tensors (``_torch_cuda``,
    through DLPack), or None; imported only when such an array arrives."""
    if extensions_disabled():
        return None
    if name == "cupy":
        from ._backends import _cupy

        return _cupy
    if name == "torch" and any(getattr(a, "is_cuda", False) for a in arrays):
        from ._backends import _torch_cuda

        return _torch_cuda
    return None


def select(op: str, xp, *, dtype=None, arrays=()):
    """The implementation module for ``op`` given the namespace and the output dtype.

    ``op`` names a function that both ``_xp`` and the compiled adapters define; ``arrays`` are
    the array arguments (a compiled twin may decline inputs it cannot serve: strides, grads).
    """
    name = backend_name(xp)
    if name == "numpy":
        if dtype is not None and _is_float32_or_64(xp, dtype):
            mod = _NUMPY_MODULE if _NUMPY_MODULE is not None else numpy_module()
            if mod is not None and hasattr(mod, op):
                return mod
    elif name in ("cupy", "torch"):
        mod = gpu_module(name, arrays)
        if mod is not None and hasattr(mod, op) and mod.supports(op, dtype, arrays):
            return mod
        if name == "torch" and mod is None:
            mod = torch_cpu_module()
            if mod is not None and hasattr(mod, op) and mod.supports(op, dtype, arrays):
                return mod
    return _xp


def torch_cpu_module():
    """Torch CPU tensors -> the compiled NumPy kernels through DLPack (None when those are off)."""
    if numpy_module() is None:
        return None
    from ._backends import _torch_cpu

    return _torch_cpu

"""Namespace inference and dtype/device defaults (the one importer of array-api-compat)."""
from __future__ import annotations

import array_api_compat as _compat

__all__ = [
    "array_namespace",
    "backend_name",
    "default_float",
    "dtype_kind",
    "device_of",
    "has_float64",
    "is_lazy",
    "is_writeable",
    "namespace_for",
    "to_numpy",
]

_NAMESPACE_CACHE: dict[int, object] = {}


def _is_array(x) -> bool:
    return _compat.is_array_api_obj(x) and not isinstance(x, (bool, int, float, complex))


def namespace_for(xp):
    """The array-api-compat namespace that wraps the user-supplied module ``xp``.

    ``numpy``, ``torch``, ``cupy``, ``dask.array`` and the compat wrappers themselves are all
    accepted; the answer is found from a 0-d array the module makes, so no library is named here.
    """
    key = id(xp)
    ns = _NAMESPACE_CACHE.get(key)
    if ns is None:
        asarray = getattr(xp, "asarray", None)
        if asarray is None:
            raise TypeError(f"xp must be an array namespace module, got {xp!r}")
        try:
            ns = _compat.array_namespace(asarray(0))
        except TypeError as exc:
            raise TypeError(f"xp={xp!r} is not a supported array namespace: {exc}") from None
        _NAMESPACE_CACHE[key] = ns
    return ns


# type(array) -> namespace, for the types whose namespace depends on the type alone; a decode
# step calls this on every layer, and array-api-compat's full inference costs microseconds.
_TYPE_NAMESPACE: dict[type, object] = {}


def _namespace_by_type(arrays):
    """The cached namespace when every non-None argument has one and the same array type."""
    t = None
    for a in arrays:
        if a is None:
            continue
        if t is None:
            t = type(a)
        elif type(a) is not t:
            return None
    return None if t is None else _TYPE_NAMESPACE.get(t)


def array_namespace(*arrays, xp=None, name="arrays"):
    """Namespace of the array arguments (None and Python scalars ignored).

    With no array, ``xp`` if given, else NumPy. A mix of libraries is a TypeError naming ``name``.
    """
    if xp is None:
        ns = _namespace_by_type(arrays)
        if ns is not None:
            return ns
    found = [a for a in arrays if a is not None and _is_array(a)]
    if xp is not None:
        ns = namespace_for(xp)
        if found:
            have = _compat.array_namespace(*found)
            if have is not ns:
                raise TypeError(
                    f"xp={getattr(xp, '__name__', xp)!r} does not match the namespace of "
                    f"{name} ({have.__name__})"
                )
        return ns
    if not found:
        return namespace_for(_numpy())
    try:
        ns = _compat.array_namespace(*found)
    except TypeError as exc:
        kinds = ", ".join(sorted({type(a).__module__ + "." + type(a).__name__ for a in found}))
        raise TypeError(f"{name} come from different array libraries ({kinds}): {exc}") from None
    t = type(found[0])
    if all(type(a) is t for a in found) and (
        _compat.is_numpy_array(found[0]) or _compat.is_torch_array(found[0])
        or _compat.is_cupy_array(found[0])
    ):
        _TYPE_NAMESPACE[t] = ns
    return ns


def _numpy():
    import numpy

    return numpy


def device_of(x):
    return _compat.device(x)


def default_float(xp, device=None):
    """The namespace's default real floating dtype on ``device``."""
    info = xp.__array_namespace_info__()
    return info.default_dtypes(device=device)["real floating"]


def has_float64(xp, device=None) -> bool:
    """Whether float64 arrays exist for ``xp`` on ``device`` (not so for JAX without x64)."""
    info = xp.__array_namespace_info__()
    try:
        return "float64" in info.dtypes(device=device, kind="real floating")
    except TypeError:  # namespaces whose info.dtypes takes no device
        return "float64" in info.dtypes(kind="real floating")


_DTYPE_KIND: dict[tuple[int, object], str] = {}


def dtype_kind(xp, dtype) -> str:
    """"bool", "integral", "real floating", "complex floating" or "other"; cached because
    ``isdtype`` is slow on some namespaces and runs on every call."""
    key = (id(xp), dtype)
    try:
        return _DTYPE_KIND[key]
    except KeyError:
        pass
    except TypeError:  # unhashable dtype object
        return _dtype_kind(xp, dtype)
    kind = _DTYPE_KIND[key] = _dtype_kind(xp, dtype)
    return kind


def _dtype_kind(xp, dtype) -> str:
    for kind in ("bool", "integral", "real floating", "complex floating"):
        if xp.isdtype(dtype, kind):
            return kind
    return "other"



def is_lazy(x) -> bool:
    """True for arrays whose values cannot be read cheaply: Dask arrays and JAX tracers.

    array-api-compat calls every JAX array lazy; a concrete one (outside jit) can be read, so
    value checks still run on it.
    """
    if not _compat.is_lazy_array(x):
        return False
    if _compat.is_jax_array(x):
        import sys

        return isinstance(x, sys.modules["jax"].core.Tracer)
    return True


_BACKEND_NAME: dict[int, str] = {}


def backend_name(xp) -> str:
    """Short name of the library behind a compat namespace: numpy, cupy, torch, jax, dask,
    array_api_strict, or the module name for anything else."""
    name = _BACKEND_NAME.get(id(xp))
    if name is None:
        name = _BACKEND_NAME[id(xp)] = _backend_name(xp)
    return name


def _backend_name(xp) -> str:
    if _compat.is_numpy_namespace(xp):
        return "numpy"
    if _compat.is_cupy_namespace(xp):
        return "cupy"
    if _compat.is_torch_namespace(xp):
        return "torch"
    if _compat.is_jax_namespace(xp):
        return "jax"
    if _compat.is_dask_namespace(xp):
        return "dask"
    if _compat.is_array_api_strict_namespace(xp):
        return "array_api_strict"
    return getattr(xp, "__name__", type(xp).__name__)


def is_writeable(x) -> bool:
    """Whether ``x``'s elements can be assigned in place (False for JAX arrays)."""
    return bool(_compat.is_writeable_array(x))


def to_numpy(x):
    """A NumPy array with ``x``'s values on the host (computes a lazy array, copies from a GPU,
    detaches from autograd; 16-bit floats NumPy lacks become float32)."""
    import numpy as np

    if _compat.is_torch_array(x):
        x = x.detach().cpu()
        if x.dtype.is_floating_point and x.element_size() < 4:
            x = x.float()  # NumPy has no bfloat16
        return x.numpy()
    if _compat.is_cupy_array(x):
        return x.get()
    if _compat.is_dask_array(x):
        return np.asarray(x.compute())
    try:
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError):
        return np.from_dlpack(x)

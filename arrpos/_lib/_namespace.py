"""Namespace inference and dtype/device defaults (the one importer of array-api-compat)."""
from __future__ import annotations

import array_api_compat as _compat
import numpy as _np  # a dependency of arrpos: exact-type checks give NumPy arrays fast paths

__all__ = [
    "array_namespace",
    "backend_name",
    "default_float",
    "computable_positions",
    "dense_array",
    "detached",
    "dtype_kind",
    "device_of",
    "has_float64",
    "has_zero_stride",
    "is_lazy",
    "is_read_only",
    "is_writeable",
    "memory_overlap",
    "namespace_for",
    "to_numpy",
]

_NAMESPACE_CACHE: dict[int, object] = {}
_NDARRAY = _np.ndarray


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


def array_namespace(*arrays, xp=None, name="arrays", dtype=None):
    """Namespace of the array arguments (None and Python scalars ignored).

    With no array, ``xp`` if given, else the library of a ``dtype`` object
    (``dtype=torch.float32`` selects torch), else NumPy. A mix of libraries is a TypeError
    naming ``name``.
    """
    if xp is None and dtype is not None and not any(_is_array(a) for a in arrays):
        xp = _library_of_dtype(dtype)
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


def _library_of_dtype(dtype):
    """The library module a dtype object belongs to (None for names and unknown objects)."""
    import sys

    if isinstance(dtype, str):
        return None
    mod = getattr(dtype, "__module__", None)
    if not isinstance(mod, str) or isinstance(dtype, type) and mod == "builtins":
        mod = type(dtype).__module__
    for candidate in (mod, mod.split(".")[0]):  # jax.numpy.float32 lives in jax.numpy
        lib = sys.modules.get(candidate)
        if lib is not None and candidate != "builtins" and hasattr(lib, "asarray"):
            return lib
    return None


def detached(x):
    """``x`` without autograd history (torch), so reading its values neither warns nor records."""
    if _compat.is_torch_array(x) and x.requires_grad:
        return x.detach()
    return x


def dense_array(x, name: str):
    """``x`` if it is a dense (strided) array; a sparse torch tensor is a TypeError."""
    if _compat.is_torch_array(x) and x.layout is not _torch_strided():
        raise TypeError(f"{name} must be a dense array, got a {x.layout} tensor; call "
                        ".to_dense() first")
    return x


def _torch_strided():
    import sys

    return sys.modules["torch"].strided


def computable_positions(x):
    """Positions in a dtype every op of their library supports: torch's unsigned 16/32-bit
    integers become int64, uint64 float64 (no wrap-around), float8 and bfloat16 float32 (all
    exact); every other array is returned as is."""
    if not _compat.is_torch_array(x):
        return x
    import sys

    torch = sys.modules["torch"]
    if x.dtype in (torch.uint16, torch.uint32):
        return x.to(torch.int64)
    if x.dtype == torch.uint64:
        return x.to(torch.float64)
    if (x.dtype.is_floating_point and x.element_size() < 2) or x.dtype == torch.bfloat16:
        return x.to(torch.float32)
    return x


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
    try:
        for kind in ("bool", "integral", "real floating", "complex floating"):
            if xp.isdtype(dtype, kind):
                return kind
    except TypeError:  # NumPy's isdtype refuses extension dtypes (ml_dtypes)
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", "")
        if name == "bfloat16":  # ml_dtypes.bfloat16 (dtype or scalar type): a real float type
            return "real floating"
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
    if type(x) is _NDARRAY:
        return True
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


def _byte_strides(x):
    """Strides in bytes of a NumPy/CuPy array or a torch tensor; None for other libraries."""
    if _compat.is_torch_array(x):
        return tuple(s * x.element_size() for s in x.stride())
    strides = getattr(x, "strides", None)
    return tuple(strides) if isinstance(strides, tuple) else None


def is_read_only(x) -> bool:
    """Whether ``x`` is a mutable library's array that is marked read-only (NumPy's flag)."""
    flags = getattr(x, "flags", None)
    return getattr(flags, "writeable", True) is False


def has_zero_stride(x) -> bool:
    """Whether several elements of ``x`` share one memory location (an expanded tensor or a
    broadcast view): writing into such an array writes some elements many times."""
    strides = x.strides if type(x) is _NDARRAY else _byte_strides(x)
    if strides is None:
        return False
    return any(st == 0 and n > 1 for st, n in zip(strides, x.shape))


def _byte_range(x):
    """``(first, last + 1)`` byte addresses an array's elements may touch."""
    if _compat.is_torch_array(x):
        start, size = x.data_ptr(), x.element_size()
    elif hasattr(x, "__array_interface__"):
        start, size = x.__array_interface__["data"][0], x.itemsize
    else:  # CuPy
        start, size = x.data.ptr, x.itemsize
    lo = hi = start
    for st, n in zip(_byte_strides(x), x.shape):
        if n == 0:
            return start, start
        if st > 0:
            hi += st * (n - 1)
        else:
            lo += st * (n - 1)
    return lo, hi + size


def memory_overlap(a, b) -> str:
    """``"same"`` when ``a`` and ``b`` are the same view, ``"partial"`` when their memory may
    overlap otherwise, ``"none"`` when it cannot (or the library has no memory addresses)."""
    if a is b:
        return "same"
    if type(a) is _NDARRAY and type(b) is _NDARRAY and not _np.may_share_memory(a, b):
        return "none"  # disjoint bounds, decided in C (a decode step's out= and x)
    if _byte_strides(a) is None or _byte_strides(b) is None or type(a) is not type(b):
        return "none"
    ra, rb = _byte_range(a), _byte_range(b)
    if ra[0] == rb[0] and _byte_strides(a) == _byte_strides(b) and a.shape == b.shape:
        return "same"
    if ra[0] < rb[1] and rb[0] < ra[1]:
        return "partial"
    return "none"

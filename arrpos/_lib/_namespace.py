"""Namespace inference and dtype/device defaults (the one importer of array-api-compat)."""
from __future__ import annotations

import re

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
    "dtype_name",
    "device_of",
    "has_float64",
    "has_zero_stride",
    "finfo",
    "float_bits",
    "index_dtype",
    "is_dtype",
    "is_lazy",
    "is_read_only",
    "is_unreadable",
    "is_writeable",
    "memory_overlap",
    "namespace_for",
    "to_numpy",
    "work_float",
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
    """Namespace of the array arguments (None and Python scalars ignored): the boundary every
    public function passes all its arrays through, in signature order.

    With no array, ``xp`` if given, else the library of a ``dtype`` object
    (``dtype=torch.float32`` selects torch), else NumPy. ``name`` lists the arguments in the
    order given (``"q, k, v and bias"``) so that errors name the one at fault:

    * a mix of libraries is a TypeError naming both arguments and the conversion to write
      (nothing is converted behind the caller's back, so no hidden device copy);
    * arrays on different devices are a ValueError naming both (a torch op would otherwise
      answer with the CPU argument's device, or with garbage for a meta tensor);
    * NumPy subclasses whose arithmetic differs from ``ndarray`` (``np.matrix``: ``*`` is a
      matrix product; masked arrays: the mask would be dropped silently) are a TypeError
      naming the argument; other subclasses (``np.memmap``) keep ndarray's arithmetic and
      pass.
    """
    if xp is None and dtype is not None and not any(_is_array(a) for a in arrays):
        xp = _library_of_dtype(dtype)
    if xp is None:
        ns = _namespace_by_type(arrays)
        if ns is not None:
            if type(arrays[0]) is not _NDARRAY:  # one device for NumPy; others: check
                _check_devices(arrays, name)
            return ns
    found = [a for a in arrays if a is not None and _is_array(a)]
    _check_subclasses(arrays, name)
    if xp is not None:
        ns = namespace_for(xp)
        if found:
            try:
                have = _compat.array_namespace(*found)
            except TypeError:
                raise TypeError(_mixed_libraries(arrays, name)) from None
            if have is not ns:
                lib = getattr(xp, "__name__", repr(xp))
                raise TypeError(
                    f"xp={lib} does not match {name} ({_library(found[0])} arrays): leave xp "
                    f"out (it is inferred from the arrays) or convert them with "
                    f"{lib}.asarray(...)"
                )
        _check_devices(arrays, name)
        return ns
    if not found:
        return namespace_for(_numpy())
    try:
        ns = _compat.array_namespace(*found)
    except TypeError:
        raise TypeError(_mixed_libraries(arrays, name)) from None
    _check_devices(arrays, name)
    t = type(found[0])
    if all(type(a) is t for a in found) and (
        _compat.is_numpy_array(found[0]) or _compat.is_torch_array(found[0])
        or _compat.is_cupy_array(found[0])
    ):
        _TYPE_NAMESPACE[t] = ns
    return ns


def _argument_names(name: str, n: int) -> list[str]:
    """The argument names in ``name`` ("q, k, v and bias"), or generic ones when it does not
    list exactly ``n``."""
    parts = [p.strip() for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", name) if p.strip()]
    if len(parts) == n:
        return parts
    return [f"{name} (argument {i + 1})" for i in range(n)]


def _library(a) -> str:
    """The library an array comes from, as a user imports it (numpy, torch, jax, ...)."""
    mod = type(a).__module__.split(".")[0]
    return {"jaxlib": "jax", "builtins": "Python"}.get(mod, mod)


def _mixed_libraries(arrays, name: str) -> str:
    names = _argument_names(name, len(arrays))
    seen = [(n, a) for n, a in zip(names, arrays) if a is not None and _is_array(a)]
    first_name, first = seen[0]
    lib = _library(first)
    other_name, other = next((n, a) for n, a in seen if _library(a) != lib)
    where = f", device={first_name}.device" if lib in ("torch", "cupy", "jax") else ""
    return (f"{name} must come from one array library (nothing is converted behind your "
            f"back): {first_name} is a {lib} array but {other_name} is a {_library(other)} "
            f"array; convert it first, e.g. {lib}.asarray({other_name}{where})")


def _check_subclasses(arrays, name: str) -> None:
    """NumPy's subclasses whose arithmetic is not ndarray's are a TypeError naming the
    argument: ``np.matrix`` (``*`` is a matrix product: wrong numbers) and masked arrays (the
    mask would be dropped: masked values in the result). Subclasses that keep ndarray's
    arithmetic (``np.memmap``, views that tag an array) pass."""
    for i, a in enumerate(arrays):
        if type(a) is _NDARRAY or not isinstance(a, (_np.matrix, _np.ma.MaskedArray)):
            continue
        arg = _argument_names(name, len(arrays))[i]
        if isinstance(a, _np.ma.MaskedArray):
            why = ("its mask would be dropped silently (masked values would enter the result); "
                   f"fill the masked entries yourself ({arg}.filled(value)) or pass a mask "
                   "argument where the function has one")
        else:
            why = f"its * and ** are matrix products; pass np.asarray({arg})"
        t = type(a)
        raise TypeError(f"{arg} must be a plain NumPy array, got a {t.__module__}.{t.__name__}: "
                        f"{why}")


def _device(a):
    """The device of an array (its ``device`` attribute where it has one: torch, CuPy, JAX,
    array-api-strict; else array-api-compat's answer), or None when it cannot be read (a
    traced value, a Python scalar)."""
    try:
        dev = getattr(a, "device", None)
        if dev is None or callable(dev):  # (JAX's old .device() method)
            dev = _compat.device(a) if _is_array(a) else None
        return dev
    except Exception:  # tracers and other values without a device
        return None


def _check_devices(arrays, name: str) -> None:
    """All array arguments on one device, else a ValueError naming two of them."""
    if sum(a is not None for a in arrays) < 2:
        return
    first = None
    for i, a in enumerate(arrays):
        if a is None or type(a) is _NDARRAY:
            continue
        dev = _device(a)
        if dev is None:
            continue
        if first is None:
            first = (i, dev)
        elif dev != first[1]:
            names = _argument_names(name, len(arrays))
            raise ValueError(
                f"{names[i]} is on device {dev} but {names[first[0]]} is on {first[1]}: the "
                f"arrays of one call must share a device (nothing is moved behind your back); "
                f"move {names[i]} yourself, e.g. {names[i]}.to({names[first[0]]}.device)"
            )


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


def index_dtype(xp, device=None):
    """The widest signed integer dtype on ``device``: int64, or int32 where there is none
    (JAX without x64). Indices, distances and buckets are formed in it: no overflow for any
    narrower input, signed or unsigned."""
    info = xp.__array_namespace_info__()
    try:
        have = info.dtypes(device=device, kind="signed integer")
    except TypeError:  # namespaces whose info.dtypes takes no device
        have = info.dtypes(kind="signed integer")
    return xp.int64 if "int64" in have else xp.int32


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


def is_dtype(xp, dtype, kind: str) -> bool:
    """``xp.isdtype(dtype, kind)`` for the kinds of :func:`dtype_kind` ("bool", "integral",
    "real floating", "complex floating"), also for extension dtypes NumPy's ``isdtype``
    refuses (``ml_dtypes.bfloat16``)."""
    return dtype_kind(xp, dtype) == kind


def dtype_name(dtype) -> str:
    """``"int64"`` for NumPy's, torch's and JAX's dtype objects alike (for messages)."""
    return getattr(dtype, "__name__", None) or str(dtype).rsplit(".", 1)[-1]


def finfo(xp, dtype):
    """``xp.finfo(dtype)``, also for ``ml_dtypes.bfloat16`` NumPy arrays (whose ``finfo`` NumPy
    does not know: ml_dtypes' own answers)."""
    try:
        return xp.finfo(dtype)
    except (TypeError, ValueError, AttributeError):
        import sys

        ml = sys.modules.get("ml_dtypes")  # loaded by whoever made such an array
        if ml is None:
            raise
        return ml.finfo(dtype)


def float_bits(xp, dtype) -> int:
    """Bits of a floating dtype (16 for float16 and every bfloat16, ml_dtypes' included)."""
    try:
        return int(finfo(xp, dtype).bits)
    except (TypeError, ValueError, AttributeError):  # extension dtypes finfo does not know
        return 8 * int(getattr(dtype, "itemsize", 4))


def work_float(xp, *dtypes):
    """``(work, out)`` for arithmetic on floating arrays of ``dtypes``: ``out`` their promoted
    dtype, ``work`` the same or float32 when it has 16 bits (float16 overflows at 65504 and
    bfloat16 keeps 8 bits: sums, products and exponentials are formed in float32 and rounded
    once to ``out``)."""
    out = dtypes[0]
    for d in dtypes[1:]:
        if d != out:
            out = xp.result_type(out, d)
    return (xp.float32 if float_bits(xp, out) < 32 else out), out


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
    """True for arrays whose values cannot be read (or not cheaply): Dask arrays, JAX tracers,
    torch meta tensors and fake tensors (``torch.compile`` / ``FakeTensorMode`` tracing), any
    torch tensor while ``torch.compile`` traces, and tensors batched by ``torch.func.vmap``.

    array-api-compat calls every JAX array lazy; a concrete one (outside jit) can be read, so
    value checks still run on it. Every value check of the package asks this first.
    """
    if type(x) is _NDARRAY:
        return False
    if _compat.is_torch_array(x):
        return x.is_meta or _is_fake_tensor(x) or _torch_traced(x)
    if not _compat.is_lazy_array(x):
        return False
    if _compat.is_jax_array(x):
        import sys

        return isinstance(x, sys.modules["jax"].core.Tracer)
    return True


def is_unreadable(x) -> bool:
    """True for arrays whose values cannot be read at all (JAX tracers, torch meta and fake
    tensors); a Dask array is lazy but can be computed, when a function must read values."""
    return is_lazy(x) and not _compat.is_dask_array(x)


def _torch_traced(x) -> bool:
    import sys

    torch = sys.modules["torch"]  # a torch tensor is here
    return torch.compiler.is_compiling() or torch._C._functorch.is_batchedtensor(x)


def _is_fake_tensor(x) -> bool:
    import sys

    fake = sys.modules.get("torch._subclasses.fake_tensor")  # loaded by whoever makes them
    return fake is not None and isinstance(x, fake.FakeTensor)


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

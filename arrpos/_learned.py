"""Learned absolute tables: initialisation, lookup and resampling to a new length or grid.

Resampling equals ``torch.nn.functional.interpolate`` (``linear`` / ``bilinear`` / ``bicubic``,
``align_corners=False``, with or without antialias). It is separable: per axis, torch's taps
(2 for linear, 4 for cubic, about twice the shrink factor with antialias) are built on the host
and applied by one gather and a weighted sum: the same numbers on every backend, memory that
follows the output, and gradients flow into the table on autograd backends.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ._lib import (
    array_namespace,
    check_array,
    check_bool,
    check_choice,
    check_dtype_arg,
    check_index,
    check_size,
    check_positive_int,
    check_real_scalar,
    default_float,
    device_of,
    dtype_name,
    finfo,
    from_host,
    has_float64,
    index_dtype,
    round_once,
)

__all__ = ["learned_init", "lookup", "resample"]

_METHODS_INIT = ("normal", "trunc_normal", "sinusoidal", "zeros")
_METHODS_RESAMPLE = ("linear", "cubic")
_CUBIC_A = -0.75  # torch's (and OpenCV's) bicubic coefficient
_AA_CUBIC_A = -0.5  # torch's antialiased bicubic uses Keys' (and PIL's) coefficient instead


def learned_init(num_positions, dim, *, method="normal", std=0.02, seed=None, dtype=None,
                 device=None, xp=None):
    """A new learned position table ``(num_positions, dim)``.

    Parameters
    ----------
    num_positions, dim : int
        Rows and features (>= 1).
    method : {"normal", "trunc_normal", "sinusoidal", "zeros"}, optional
        ``"normal"``: N(0, std^2) (BERT, GPT-2); ``"trunc_normal"``: N(0, std^2) cut at
        ``2 std`` by redrawing (ViT / timm); ``"sinusoidal"``: the fixed interleaved table
        (``dim`` even); ``"zeros"``.
    std : float, optional
        Standard deviation of the random methods (> 0).
    seed : int, optional
        Seed of NumPy's ``default_rng``: the same seed gives the same table on every backend
        and device. ``None`` draws fresh entropy.
    dtype : dtype, optional
        Real floating dtype (default: the namespace's default float).
    device, xp : optional
        Device and namespace of the table (default NumPy).

    Returns
    -------
    array
        ``(num_positions, dim)``.

    Raises
    ------
    TypeError
        Non-int sizes or seed, ``std`` not real, ``dtype`` not real floating.
    ValueError
        Sizes < 1, unknown ``method``, ``std <= 0`` or so large that the table overflows
        ``dtype``, a negative seed, an odd ``dim`` with ``"sinusoidal"``.

    Notes
    -----
    The random numbers are drawn on the host (float64) and transferred once, rounded once to
    ``dtype``, so the table does not depend on the library's own generator.
    Backend support: host generation, then one transfer, for every namespace.

    Examples
    --------
    >>> import arrpos
    >>> t = arrpos.learned_init(4, 3, seed=0)
    >>> t.shape, float(abs(t).max()) < 0.1
    ((4, 3), True)
    >>> bool((arrpos.learned_init(4, 3, seed=0) == t).all())
    True
    """
    xp = array_namespace(xp=xp, dtype=dtype)
    num_positions = check_positive_int(num_positions, "num_positions")
    dim = check_positive_int(dim, "dim")
    check_size(num_positions * dim, "the table")
    method = check_choice(method, "method", _METHODS_INIT)
    std = check_real_scalar(std, "std", positive=True)
    if seed is not None:
        seed = check_positive_int(seed, "seed", minimum=0)
    dtype = check_dtype_arg(xp, dtype, device=device)
    if dtype is None:
        dtype = default_float(xp, device)
    elif dtype == getattr(xp, "float64", None) and not has_float64(xp, device):
        raise TypeError(f"dtype=float64 is not available on this device ({xp.__name__})")
    if method == "zeros":
        return xp.zeros((num_positions, dim), dtype=dtype, device=device)
    if method == "sinusoidal":
        if dim % 2:
            raise ValueError(f"dim must be even for method='sinusoidal', got {dim}")
        from ._absolute import sinusoidal

        return sinusoidal(num_positions, dim, dtype=dtype, device=device, xp=xp)
    rng = np.random.default_rng(seed)
    host = rng.standard_normal((num_positions, dim))
    if method == "trunc_normal":
        bad = np.abs(host) > 2.0
        while bad.any():  # redraw the tails: deterministic for a given seed
            host[bad] = rng.standard_normal(int(bad.sum()))
            bad = np.abs(host) > 2.0
    top = float(np.abs(host).max()) * std
    if top > float(finfo(xp, dtype).max):  # an inf table, silently, otherwise
        raise ValueError(f"std={std} overflows a {method!r} table in {dtype_name(dtype)}: its "
                         f"largest entry would be {top:.4g} > {float(finfo(xp, dtype).max):.4g}")
    return from_host(xp, host * std, dtype, device)


def _check_table(xp, table, name="table"):
    check_array(xp, table, name, kind="floating", min_ndim=2, shape_hint="(..., rows, dim)")


def lookup(table, positions, /):
    """Rows of a learned table at the given positions.

    Parameters
    ----------
    table : array
        Floating ``(num_positions, dim)``.
    positions : array
        Integer positions of any shape ``P`` and any integer dtype (int8 to uint64), in
        ``[0, num_positions)``.

    Returns
    -------
    array
        ``P + (dim,)``; gradients flow into ``table`` on autograd backends.

    Raises
    ------
    TypeError
        ``table`` not floating or ``positions`` not an integer array.
    ValueError
        ``table`` not 2-D; (eager arrays) a position outside ``[0, num_positions)``.

    Notes
    -----
    Lazy arrays (Dask, JAX under ``jit``, torch meta and fake tensors) are not read, so their
    range is not checked here
    (JAX clamps out-of-range indices; Dask wraps negative ones and raises on compute for
    too-large ones): check lazy positions yourself.
    Backend support: generic Array API code (one ``take``) on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> t = np.arange(8.0).reshape(4, 2)
    >>> arrpos.lookup(t, np.array([[3, 0]])).tolist()
    [[[6.0, 7.0], [0.0, 1.0]]]
    """
    xp = array_namespace(table, positions, name="table and positions")
    _check_table(xp, table)
    if table.ndim != 2:
        raise ValueError(f"table must have shape (num_positions, dim), got {tuple(table.shape)}")
    check_array(xp, positions, "positions", kind="integer")
    n = table.shape[0]
    positions = check_index(xp, positions, n, "positions", f"a table of {n} rows")
    shape = tuple(positions.shape)
    rows = xp.take(table, xp.reshape(positions, (-1,)), axis=0)
    return xp.reshape(rows, shape + (table.shape[1],))


def _weights_1d(n_in, n_out, method, single):
    """Taps ``(index, weight)``, each ``(n_out, T)``, of torch's ``align_corners=False``
    resampling: output ``i`` is ``sum_t weight[i, t] * input[index[i, t]]``.

    torch forms the source coordinates and the weights in the input's precision (float for a
    float32 input, double for float64); ``single`` repeats its float32 operations step by step
    so that the weights are torch's own, then they are applied in the working precision.
    Taps past the border are clamped onto it, as torch does (their weights add up there).
    """
    f = np.float32 if single else np.float64
    scale = f(f(n_in) / f(n_out))
    src = scale * (np.arange(n_out).astype(f) + f(0.5)) - f(0.5)
    if method == "linear":
        src = np.maximum(src, f(0.0))  # torch clamps negative sources for linear modes
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        lam = np.clip(src - i0.astype(f), f(0.0), f(1.0))
        return np.stack([i0, i1], axis=1), np.stack([f(1.0) - lam, lam], axis=1).astype(np.float64)
    a = f(_CUBIC_A)
    i0 = np.floor(src).astype(np.int64)
    t = src - i0.astype(f)

    def near(x):  # |x| <= 1
        return ((a + f(2)) * x - (a + f(3))) * x * x + f(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a

    t2 = f(1.0) - t
    taps = ((-1, far(t + f(1.0))), (0, near(t)), (1, near(t2)), (2, far(t2 + f(1.0))))
    index = np.stack([np.clip(i0 + k, 0, n_in - 1) for k, _ in taps], axis=1)  # clamp
    return index, np.stack([w for _, w in taps], axis=1).astype(np.float64)


def _fma32(a, b, c):
    """float32 ``a * b + c`` rounded once, as a fused multiply-add (the product is exact in
    float64)."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


def _aa_filter(x, method, f):
    """PyTorch's antialias filters of ``|x|``: the triangle, or Keys' cubic with ``a = -0.5``.

    torch's CPU kernels are built with FMA contraction: in float32 the cubic's Horner steps are
    fused multiply-adds, reproduced here so that the weights are torch's own bit for bit.
    """
    if method == "linear":
        return np.where(x < f(1.0), f(1.0) - x, f(0.0)).astype(f)
    a = f(_AA_CUBIC_A)
    if f is np.float32:
        near = _fma32(_fma32(a + f(2), x, -(a + f(3))) * x, x, f(1))
        far = _fma32(_fma32(_fma32(a, x, -(f(5) * a)), x, f(8) * a), x, -(f(4) * a))
    else:
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < f(1.0), near, np.where(x < f(2.0), far, f(0.0))).astype(f)


def _weights_1d_aa(n_in, n_out, method, single):
    """Taps ``(index, weight)`` ``(n_out, T)`` of torch's ``antialias=True`` resampling.

    As torch's ``_compute_indices_min_size_weights_aa``: when downsampling the filter's
    support widens by the factor ``n_in / n_out`` (a low-pass before sampling); taps outside
    the input are dropped and each row is renormalised (no border clamping). The mixed
    float/double steps of torch's float32 path are repeated when ``single``.
    """
    f, d = (np.float32 if single else np.float64), np.float64
    scale = f(f(n_in) / f(n_out))
    down = scale >= 1.0
    half = 1.0 if method == "linear" else 2.0  # half the filter's support at scale 1
    support = f(half * d(scale)) if down else f(half)
    invscale = f(1.0 / d(scale)) if down else f(1.0)
    width = int(math.ceil(support)) * 2 + 1
    center = (d(scale) * (np.arange(n_out) + 0.5)).astype(f)
    # C++ casts to int64 truncate toward zero
    xmin = np.maximum(np.trunc((center - support).astype(d) + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc((center + support).astype(d) + 0.5).astype(np.int64), n_in)
    xsize = np.clip(xmax - xmin, 0, width)
    taps = xmin[:, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < xsize[:, None]
    x = ((taps.astype(f) - center[:, None]).astype(d) + 0.5) * d(invscale)
    w = np.where(valid, _aa_filter(np.abs(x.astype(f)), method, f), f(0.0)).astype(f)
    total = np.zeros(n_out, dtype=f)
    for k in range(width):  # torch sums the taps in order
        total = (total + w[:, k]).astype(f)
    w = np.where(total[:, None] != 0, w / np.where(total == 0, f(1), total)[:, None], w)
    # taps past xsize carry no weight; they point at row 0 (any row would do)
    return np.where(valid, taps, 0), np.where(valid, w, f(0.0)).astype(np.float64)


def _apply_taps(xp, grid, index, weight, axis):
    """Resample axis ``axis`` (negative) of ``grid`` with taps ``(n_out, T)``: one gather of
    ``n_out * T`` rows and a weighted sum, so memory follows the output (``T`` is 2 or 4, or
    about twice the shrink factor with antialias), not ``n_out * n_in`` as a dense matrix."""
    n_out, taps = index.shape
    ax = grid.ndim + axis
    rows = xp.take(grid, xp.reshape(index, (n_out * taps,)), axis=ax)
    rows = xp.reshape(rows, tuple(grid.shape[:ax]) + (n_out, taps) + tuple(grid.shape[ax + 1:]))
    w = xp.reshape(weight, (n_out, taps) + (1,) * (grid.ndim - ax - 1))
    return xp.sum(rows * w, axis=ax + 1)


def _size_tuple(size, name):
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return (check_positive_int(size, name),), True
    try:
        sizes = tuple(size)
    except TypeError:
        raise TypeError(
            f"{name} must be an int or a tuple of two ints, got {type(size).__name__}"
        ) from None
    if len(sizes) not in (1, 2):
        raise ValueError(f"{name} must have one or two entries, got {sizes!r}")
    return tuple(check_positive_int(s, f"{name}[{i}]") for i, s in enumerate(sizes)), False


def resample(table, /, size, *, old_size=None, prefix_tokens=0, method="linear",
             antialias=False):
    """Resize a learned position table to a new length or grid (timm's
    ``resample_abs_pos_embed``), equal to ``torch.nn.functional.interpolate`` with
    ``align_corners=False`` and the same ``antialias``.

    Parameters
    ----------
    table : array
        Floating ``(..., prefix_tokens + N, dim)``: rows are the prefix tokens (class,
        register) followed by the positions, a flattened row-major grid for 2-D.
    size : int or tuple of int
        New length (1-D) or grid ``(H, W)`` (2-D).
    old_size : int or tuple of int, optional
        The current length or grid; default ``N`` (1-D) or the square grid of ``N`` rows (2-D).
    prefix_tokens : int, optional
        Leading rows passed through unchanged.
    method : {"linear", "cubic"}, optional
        ``"linear"`` (torch ``linear`` / ``bilinear``) or ``"cubic"`` (torch ``bicubic``,
        ``A = -0.75``, taps clamped at the border; applied along the one axis for 1-D).
    antialias : bool, optional
        torch's ``antialias=True`` (timm's default): when shrinking an axis the filter widens
        by the shrink factor (a low-pass, as PIL); taps past the border are dropped and the
        rest renormalised; the antialiased cubic uses ``A = -0.5``, so even enlarging differs
        from ``antialias=False``. For a 1-D table it is torch's 2-D antialiased filter on a
        ``(1, n)`` grid (torch's own ``linear`` mode has no antialias).

    Returns
    -------
    array
        ``(..., prefix_tokens + prod(size), dim)`` in ``table``'s dtype; gradients flow.

    Raises
    ------
    TypeError
        ``table`` not floating; sizes not ints; ``antialias`` not a bool.
    ValueError
        Bad shapes: ``table`` with fewer than two axes, ``old_size`` not matching the rows, a
        non-square row count without ``old_size``, mixed 1-D/2-D sizes, unknown ``method``;
        an output of more than 2**34 elements.

    Notes
    -----
    Each axis is one gather of torch's taps (``(n_out, T)`` rows and weights built on the
    host, ``T`` = 2, 4, or about twice the shrink factor with antialias) and a weighted sum:
    torch's weights, repeated step by step in float32 for tables that are not float64 (bit for
    bit torch's own) and in float64 otherwise, then applied in float64 where the device has it
    and rounded once. Memory follows the output, not ``n_out * n_in``. The result is within
    torch's own float32 rounding of its output (~1e-7 relative; checked to 1e-6) and within
    1e-10 in float64. timm casts tables to float32
    before interpolating; a float64 table here is resampled in float64.
    Backend support: generic Array API code on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.resample(np.array([[0.0], [1.0]]), 4)[:, 0].tolist()
    [0.0, 0.25, 0.75, 1.0]
    >>> grid = np.arange(17 * 3, dtype=np.float64).reshape(17, 3)  # class token + 4x4 grid
    >>> arrpos.resample(grid, (6, 8), prefix_tokens=1, method="cubic").shape
    (49, 3)
    >>> np.round(arrpos.resample(np.arange(4.0)[:, None], 2, antialias=True)[:, 0], 4).tolist()
    [0.7143, 2.2857]
    """
    xp = array_namespace(table, name="table")
    _check_table(xp, table)
    new, one_d = _size_tuple(size, "size")
    prefix = check_positive_int(prefix_tokens, "prefix_tokens", minimum=0)
    method = check_choice(method, "method", _METHODS_RESAMPLE)
    antialias = check_bool(antialias, "antialias")
    rows = table.shape[-2]
    if prefix > rows:
        raise ValueError(f"prefix_tokens must be <= the {rows} rows of table, got {prefix}")
    n = rows - prefix
    if n < 1:
        raise ValueError(f"table must have at least one position row after the {prefix} "
                         f"prefix_tokens, got {rows} rows")
    if old_size is None:
        if len(new) == 1:
            old = (n,)
        else:
            side = math.isqrt(n)
            if side * side != n:
                raise ValueError(
                    f"old_size is needed: {n} position rows are not a square grid"
                )
            old = (side, side)
    else:
        old, _ = _size_tuple(old_size, "old_size")
    if len(old) != len(new):
        raise ValueError(f"old_size {old} and size {new} must have the same number of axes")
    if math.prod(old) != n:
        raise ValueError(
            f"old_size {old} holds {math.prod(old)} rows but table has {n} position rows "
            f"({rows} rows minus prefix_tokens={prefix})"
        )
    lead = tuple(table.shape[:-2])
    dim = table.shape[-1]
    check_size(math.prod(lead) * (prefix + math.prod(new)) * dim,
               f"the resampled table (size={size!r})")
    dev = device_of(table)
    body = table[..., prefix:, :]
    # work in float64 where the device has it and round once: closer to the exact kernel
    # than any float32 accumulation order (torch's included)
    work = xp.float64 if has_float64(xp, dev) else xp.float32
    single = table.dtype != getattr(xp, "float64", None)
    grid = xp.reshape(xp.astype(body, work), lead + old + (dim,))
    for axis, (n_in, n_out) in enumerate(zip(old, new)):
        if n_in == n_out:
            continue  # torch's weights are the identity then
        index, weight = (_weights_1d_aa if antialias else _weights_1d)(n_in, n_out, method,
                                                                       single)
        index = xp.asarray(index, dtype=index_dtype(xp, dev), device=dev)
        weight = from_host(xp, weight, work, dev)
        grid = _apply_taps(xp, grid, index, weight, axis - len(old) - 1)
    out = round_once(xp, xp.reshape(grid, lead + (math.prod(new), dim)), table.dtype)
    if prefix:
        out = xp.concat([table[..., :prefix, :], out], axis=-2)
    return out

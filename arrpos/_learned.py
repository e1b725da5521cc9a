"""Learned absolute tables: initialisation, lookup and resampling to a new length or grid.

Resampling equals ``torch.nn.functional.interpolate`` (``linear`` / ``bilinear`` / ``bicubic``,
``align_corners=False``, with or without antialias). It is separable: per axis, torch's taps
(2 for linear, 4 for cubic, about twice the shrink factor with antialias) are built on the host
and applied by one gather and a weighted sum (``_taps``): the same numbers on every backend,
memory that follows the output, and gradients flow into the table on autograd backends.
"""
from __future__ import annotations

import math
import numbers
from typing import Literal

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
    check_shape,
    default_float,
    device_of,
    dtype_name,
    finfo,
    from_host,
    has_float64,
    index_dtype,
    round_once,
)
from ._taps import apply_taps, work_dtype
from ._taps import resample_grid as _resample_grid  # (its op: the docstrings' notes)
from .typing import Array, DType, Device, Grids, Namespace, Shape, Size

__all__ = ["learned_init", "lookup", "resample", "resample_grids", "resize_relative_table"]

_METHODS_INIT = ("normal", "trunc_normal", "sinusoidal", "zeros")
_METHODS_RESAMPLE = ("linear", "cubic")
def learned_init(num_positions: int, dim: int, *,
                 method: Literal["normal", "trunc_normal", "sinusoidal", "zeros"] = "normal",
                 std: float = 0.02, seed: int | None = None, dtype: DType | None = None,
                 device: Device | None = None, xp: Namespace | None = None) -> Array:
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


def lookup(table: Array, positions: Array, /) -> Array:
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


def resample(table: Array, /, size: Size, *, old_size: Size | None = None, prefix_tokens: int = 0,
             method: Literal["linear", "cubic"] = "linear", antialias: bool = False,
             align_corners: bool = False) -> Array:
    """Resize a learned position table to a new length or grid (timm's
    ``resample_abs_pos_embed``), equal to ``torch.nn.functional.interpolate`` with the same
    ``align_corners`` and ``antialias``.

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
    align_corners : bool, optional
        torch's ``align_corners``: False (the default, timm) samples output ``i`` at
        ``(i + 0.5) * n_in / n_out - 0.5``; True at ``i * (n_in - 1) / (n_out - 1)``, so the
        corner rows of the old and new grids coincide (Qwen3-VL / Qwen3.5's vision towers,
        NaFlex's ``pos_embed_align_corners``). With ``antialias`` torch changes only the scale
        to ``(n_in - 1) / (n_out - 1)``, and so does this.

    Returns
    -------
    array
        ``(..., prefix_tokens + prod(size), dim)`` in ``table``'s dtype; gradients flow.

    Raises
    ------
    TypeError
        ``table`` not floating; sizes not ints; ``antialias`` or ``align_corners`` not a bool.
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
    Backend support: compiled CPU kernels for NumPy and torch CPU tensors without autograd
    (float32, float64, float16, bfloat16; both grid axes in one pass with the generic
    arithmetic: equal bit for bit, except one-channel tables with 8 taps or more, which NumPy
    sums pairwise: within an ulp); a CUDA kernel for CuPy arrays and torch CUDA tensors
    without autograd, with the same sums (the taps in its launch parameters: a shrink whose
    taps for one output exceed 256, more than about 30 times on both axes, takes the
    generic code); Dask arrays one task per chunk of the leading axes and channels, the grid
    axes whole; generic Array API code on every namespace.

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
    >>> arrpos.resample(np.array([[0.0], [1.0]]), 3, align_corners=True)[:, 0].tolist()
    [0.0, 0.5, 1.0]
    """
    xp = array_namespace(table, name="table")
    _check_table(xp, table)
    new, one_d = _size_tuple(size, "size")
    prefix = check_positive_int(prefix_tokens, "prefix_tokens", minimum=0)
    method = check_choice(method, "method", _METHODS_RESAMPLE)
    antialias = check_bool(antialias, "antialias")
    align_corners = check_bool(align_corners, "align_corners")
    rows = table.shape[-2]
    if prefix > rows:
        raise ValueError(f"prefix_tokens must be <= the {rows} rows of table, got {prefix}")
    n = rows - prefix
    if n < 1:
        raise ValueError(f"table must have at least one position row after the {prefix} "
                         f"prefix_tokens, got {rows} rows")
    if old_size is None:
        if len(new) == 1:
            old: tuple[int, ...] = (n,)
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
    _, single = work_dtype(xp, table)
    grid = xp.reshape(table[..., prefix:, :], lead + old + (dim,))
    return _resample_grid(xp, grid, old, new, method=method, antialias=antialias,
                          align_corners=align_corners, single=single,
                          prefix=table[..., :prefix, :] if prefix else None)


def _grid_order(h, w, merge):
    """Row-major indices of an ``h x w`` grid listed in merge-block order: blocks of
    ``merge x merge`` patches, blocks and their patches row-major (transformers'
    ``get_vision_interpolation_indices_and_weights`` with ``spatial_merge_size``)."""
    rows, cols = np.arange(h).reshape(h, 1), np.arange(w).reshape(1, w)
    flat = (rows * w + cols).reshape(h // merge, merge, w // merge, merge)
    return flat.transpose(0, 2, 1, 3).reshape(-1)


def resample_grids(table: Array, grids: Grids, /, *, old_size: Shape | None = None,
                   method: Literal["linear", "cubic"] = "linear", align_corners: bool = False,
                   antialias: bool = False, merge_size: int = 1, preserve_aspect: bool = False,
                   pad_to: int | None = None) -> Array:
    """Resample one learned grid table to the grid of every image of a batch (per-image
    interpolation: Qwen2-VL-style packed sequences, timm NaFlex padded batches).

    Image ``b`` of grid ``(h, w)`` (or ``(t, h, w)``: ``t`` frames of the same grid) gets
    ``resample(table, (h, w), old_size=old_size, ...)``, its rows listed row-major (or in
    merge-block order) and repeated for each frame. The images' rows are packed one after
    the other, or padded per image to ``pad_to`` rows.

    Parameters
    ----------
    table : array
        Floating ``(rows, dim)``: the flattened row-major grid of the learned embedding.
    grids : array or sequence of tuples
        ``(n, 2)`` integer ``(h, w)`` or ``(n, 3)`` ``(t, h, w)`` grids (Qwen's
        ``grid_thw``), sizes >= 1.
    old_size : tuple of int, optional
        The table's grid; default the square of ``rows``.
    method : {"linear", "cubic"}, optional
        torch ``bilinear`` or ``bicubic`` (see :func:`resample`).
    align_corners : bool, optional
        torch's ``align_corners`` (True for Qwen3-VL / Qwen3.5's towers).
    antialias : bool, optional
        torch's ``antialias``.
    merge_size : int, optional
        Lists each image's patches in blocks of ``merge_size x merge_size`` (the vision
        towers' ``spatial_merge_size``: the order of :func:`vision_position_ids`); ``h`` and
        ``w`` must be multiples of it. 1 (the default) keeps row-major order.
    preserve_aspect : bool, optional
        Resample to the square ``(m, m)``, ``m = max(h, w)``, and keep its top-left
        ``(h, w)`` block (timm NaFlex's ``pos_embed_ar_preserving``).
    pad_to : int, optional
        Output ``(n, pad_to, dim)``, rows past each image's ``t * h * w`` zero (NaFlex adds
        nothing to its padding patches); default the packed ``(sum(t * h * w), dim)``. A
        value below an image's row count is refused (never truncated).

    Returns
    -------
    array
        ``(sum(t * h * w), dim)`` packed, or ``(n, pad_to, dim)``, in ``table``'s dtype and
        namespace; gradients flow into ``table``.

    Raises
    ------
    TypeError
        ``table`` not floating, ``grids`` not integer, options of the wrong kind.
    ValueError
        ``table`` not 2-D, ``old_size`` not matching its rows (or rows not square without
        it), a grid size < 1 or not a multiple of ``merge_size``, ``pad_to`` too small,
        unknown ``method``; an output of more than 2**34 elements.

    Notes
    -----
    Each distinct grid is resampled once (torch's taps, as :func:`resample`, applied in
    float64 where the device has it); one gather then lays the rows out and the result is
    rounded once. transformers' ``get_vision_interpolation_indices_and_weights`` (Qwen3-VL,
    Qwen3.5: ``align_corners=True``, ``spatial_merge_size``) forms the same bilinear
    weights with one rounding fewer in float32 (within 1e-7 of torch's); timm's NaFlex
    ``_apply_learned_naflex_pos_embed`` calls ``F.interpolate`` per grid. The grids are read
    on the host (the output shape depends on them). Backend support: the resampling as
    :func:`resample` (compiled CPU kernels for NumPy and torch CPU, CUDA kernels for CuPy and
    torch CUDA, Dask graphs), the rest generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> table = np.arange(4.0 * 4).reshape(16, 1)          # a 4 x 4 grid of one feature
    >>> out = arrpos.resample_grids(table, np.array([[1, 2, 2], [2, 2, 4]]), align_corners=True)
    >>> out.shape                                        # 4 rows, then 2 frames of 8
    (20, 1)
    >>> out[:4, 0].tolist()                              # the corners of the 4 x 4 grid
    [0.0, 3.0, 12.0, 15.0]
    >>> padded = arrpos.resample_grids(table, [(2, 2), (1, 3)], align_corners=True, pad_to=5)
    >>> padded[1, :, 0].tolist()
    [0.0, 1.5, 3.0, 0.0, 0.0]
    """
    from ._vision import host_grids

    is_array = hasattr(grids, "shape") and hasattr(grids, "dtype")
    xp = array_namespace(table, grids if is_array else None, name="table and grids")
    _check_table(xp, table)
    if table.ndim != 2:
        raise ValueError(f"table must have shape (rows, dim), got {tuple(table.shape)}")
    host, _ = host_grids(xp, grids, "grids", widths=(2, 3))
    if host.shape[1] == 2:
        host = np.concatenate([np.ones((len(host), 1), dtype=np.int64), host], axis=1)
    method = check_choice(method, "method", _METHODS_RESAMPLE)
    antialias = check_bool(antialias, "antialias")
    align_corners = check_bool(align_corners, "align_corners")
    preserve = check_bool(preserve_aspect, "preserve_aspect")
    merge = check_positive_int(merge_size, "merge_size")
    bad = (host[:, 1:] % merge).any(axis=1)
    if bad.any():
        b = int(np.argmax(bad))
        raise ValueError(f"grids: h and w must be multiples of merge_size={merge}, got image {b} "
                         f"of grid {tuple(int(v) for v in host[b])}")
    rows, dim = table.shape
    old = _table_grid(old_size, rows)
    length = _grids_length(host, pad_to, dim)
    _, single = work_dtype(xp, table)
    dev = device_of(table)
    grid = xp.reshape(table, old + (dim,))  # each size resampled and rounded once
    parts, offsets, start = [], {}, 0
    for h, w in dict.fromkeys(map(tuple, host[:, 1:].tolist())):
        size = (max(h, w),) * 2 if preserve else (h, w)
        check_size(math.prod(size) * dim, f"the grid {size}")
        out = _resample_grid(xp, grid, old, size, method=method, antialias=antialias,
                              align_corners=align_corners, single=single)
        parts.append(xp.reshape(xp.reshape(out, size + (dim,))[:h, :w, :], (h * w, dim)))
        offsets[(h, w)] = start
        start += h * w
    if pad_to is not None:  # one zero row at the end serves every padding row
        parts.append(xp.zeros((1, dim), dtype=table.dtype, device=dev))
    if not parts:
        return xp.zeros((0, dim), dtype=table.dtype, device=dev)
    index = _grids_index(host, merge, offsets, length, pad=start)
    flat = xp.take(xp.concat(parts, axis=0),
                   xp.asarray(index, dtype=index_dtype(xp, dev), device=dev), axis=0)
    if length is not None:
        flat = xp.reshape(flat, (len(host), length, dim))
    return flat


def _table_grid(old_size, rows):
    """The table's grid ``(h, w)``: ``old_size`` checked against ``rows``, else its square."""
    if old_size is None:
        side = math.isqrt(rows)
        if side * side != rows:
            raise ValueError(f"old_size is needed: the {rows} rows of table are not a square grid")
        return (side, side)
    old, _ = _size_tuple(old_size, "old_size")
    if len(old) != 2:
        raise ValueError(f"old_size must be a grid (h, w), got {old}")
    if math.prod(old) != rows:
        raise ValueError(f"old_size {old} holds {math.prod(old)} rows but table has {rows}")
    return old


def _grids_length(host, pad_to, dim):
    """Rows per image of the padded output (None: packed), its size checked."""
    counts = host.prod(axis=1)
    if pad_to is None:
        check_size(int(counts.sum()) * dim, "the resampled tables")
        return None
    length = check_positive_int(pad_to, "pad_to", minimum=0)
    if len(counts) and length < int(counts.max()):
        b = int(np.argmax(counts))
        raise ValueError(f"pad_to must be >= every image's rows: image {b} of grid "
                         f"{tuple(int(v) for v in host[b])} has {int(counts[b])}, got "
                         f"pad_to={length}")
    check_size(len(host) * length * dim, "the padded tables")
    return length


def _grids_index(host, merge, offsets, length, pad):
    """Host rows of the output into the concatenated per-grid tables: each image's rows in
    merge-block order, frames repeated, padded with ``pad`` (the zero row) to ``length``."""
    pieces = [np.tile(_grid_order(h, w, merge) + offsets[(h, w)], t)
              for t, h, w in host.tolist()]
    if length is not None:
        pieces = [np.concatenate([p, np.full(length - len(p), pad)]) for p in pieces]
    return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)


_METHODS_RELATIVE = ("linear", "cubic", "geometric")


def _geometric_positions(src, dst):
    """timm's ``resize_rel_pos_bias_table`` (BEiT's ``_calc``): ``src`` source offsets spaced
    in a geometric progression whose ratio ``q`` (bisection in ``[1.01, 1.5]``) makes the
    half-width reach ``dst // 2``; Python floats, as timm builds them."""
    def progression(a, r, n):
        return a * (1.0 - r ** n) / (1.0 - r)

    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if progression(1, q, src // 2) > dst // 2:
            right = q
        else:
            left = q
    dis: list[float] = []
    cur: float = 1
    for i in range(src // 2):
        dis.append(cur)
        cur += q ** (i + 1)
    return [-v for v in reversed(dis)] + [0] + dis


def _weights_geometric(src, dst, single):
    """Taps ``(dst, 2)`` of timm's linear ``RegularGridInterpolator`` from the geometric
    source offsets to the integer offsets ``-(dst // 2) .. dst // 2``, clamped at the border;
    offsets and distances in float32 when ``single`` (timm's ``torch.tensor`` of floats)."""
    f = np.float32 if single else np.float64
    p = np.array(_geometric_positions(src, dst), dtype=f)
    half = dst // 2
    x = np.arange(-half, half + 1).astype(f)
    right = np.minimum(np.searchsorted(p, x, side="left"), len(p) - 1)
    left = np.clip(right - 1, 0, len(p) - 1)
    d_left = np.maximum(x - p[left], f(0))
    d_right = np.maximum(p[right] - x, f(0))
    both = (d_left == 0) & (d_right == 0)
    d_left = np.where(both, f(1), d_left)
    d_right = np.where(both, f(1), d_right)
    total = (d_left + d_right).astype(np.float64)
    weight = np.stack([d_right / total, d_left / total], axis=1)
    return np.stack([left, right], axis=1), weight


def resize_relative_table(table: Array, /, window: Shape, *, old_window: Shape | None = None,
                          extra_tokens: int = 0,
                          method: Literal["linear", "cubic", "geometric"] = "cubic",
                          antialias: bool = False) -> Array:
    """Resize a Swin / BEiT relative-position bias table to another window size.

    The table's rows are the ``prod(2 w - 1)`` relative offsets of a window ``w`` (the rows
    :func:`relative_index_nd` indexes), row-major, followed by ``extra_tokens`` rows that pass
    through unchanged (BEiT's three class-token rows). The offsets are resampled as a grid of
    shape ``2 w - 1`` to ``2 window - 1``.

    Parameters
    ----------
    table : array
        Floating ``(..., rows, heads)``.
    window : tuple of int
        The new window, e.g. ``(12, 12)``; a bare int is refused.
    old_window : tuple of int, optional
        The table's window; default the square (cube, ...) window its rows hold.
    extra_tokens : int, optional
        Trailing rows passed through (3 for BEiT / Data2Vec-vision tables).
    method : {"cubic", "linear", "geometric"}, optional
        ``"cubic"``: torch ``bicubic`` (timm's ``resize_rel_pos_bias_table_simple``);
        ``"linear"``: torch ``bilinear`` (transformers ``BeitRelativePositionBias`` with
        ``interpolate_pos_encoding``); both ``align_corners=False``. ``"geometric"``: BEiT's
        checkpoint interpolation (timm's ``resize_rel_pos_bias_table``, the default of its
        checkpoint filters): the old offsets are placed on a geometric progression that
        spans the new half-width, then interpolated linearly (timm's
        ``RegularGridInterpolator``), clamped at the border. As timm, when any axis changes,
        every axis is placed on its progression.
    antialias : bool, optional
        torch's ``antialias`` for ``"linear"`` / ``"cubic"`` (timm's levit variant uses
        ``"cubic"`` with antialias on a square table: :func:`resample`).

    Returns
    -------
    array
        ``(..., prod(2 window - 1) + extra_tokens, heads)`` in ``table``'s dtype; gradients
        flow.

    Raises
    ------
    TypeError
        ``table`` not floating; windows not sequences of ints; ``antialias`` not a bool.
    ValueError
        ``table`` with fewer than two axes; rows that do not hold ``old_window`` (or no
        square window without it); windows of different lengths; unknown ``method``;
        ``antialias`` with ``"geometric"``.

    Notes
    -----
    Any number of window axes (each resampled in turn); for one and two axes ``"linear"``
    and ``"cubic"`` equal ``torch.nn.functional.interpolate``. The taps are built on the
    host (in float32 for tables that are not float64, as timm and torch form them) and
    applied in float64 where the device has it, rounded once. timm's scipy path
    (``TIMM_USE_SCIPY_INTERP``: ``interp2d`` cubic) is not reproduced. transformers'
    BEiT reads the old rows as a ``(2 w1 - 1, 2 w0 - 1)`` grid, the same for square windows.
    Backend support: one and two window axes as :func:`resample` (compiled CPU kernels for
    NumPy and torch CPU, CUDA kernels for CuPy and torch CUDA, Dask graphs), more axes and
    ``"geometric"`` generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> table = np.zeros((13 * 13 + 3, 2)); table[-3:] = 1.0        # BEiT, window (7, 7)
    >>> new = arrpos.resize_relative_table(table, (12, 12), extra_tokens=3, method="geometric")
    >>> new.shape, new[-3:].tolist()
    ((532, 2), [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    >>> arrpos.resize_relative_table(np.ones((9, 1)), (3, 3)).shape
    (25, 1)
    """
    xp = array_namespace(table, name="table")
    check_array(xp, table, "table", kind="floating", min_ndim=2, shape_hint="(..., rows, heads)")
    window = check_shape(window, "window")
    extra = check_positive_int(extra_tokens, "extra_tokens", minimum=0)
    method = check_choice(method, "method", _METHODS_RELATIVE)
    antialias = check_bool(antialias, "antialias")
    if antialias and method == "geometric":
        raise ValueError("antialias=True needs method='linear' or 'cubic': the geometric "
                         "interpolation has no antialiased form")
    rows = table.shape[-2]
    n = rows - extra
    if n < 1:
        raise ValueError(f"table must have offset rows before its {extra} extra_tokens, got "
                         f"{rows} rows")
    k = len(window)
    if old_window is None:
        side = round(n ** (1.0 / k))
        side = next((s for s in (side - 1, side, side + 1) if s > 0 and s ** k == n), None)
        if side is None or side % 2 == 0:
            raise ValueError(f"old_window is needed: the {n} offset rows of table are not a "
                             f"{k}-d cube of odd side (2 w - 1)")
        old_window = ((side + 1) // 2,) * k
    else:
        old_window = check_shape(old_window, "old_window")
        if len(old_window) != k:
            raise ValueError(f"old_window {old_window} and window {window} must have the same "
                             "number of axes")
    old = tuple(2 * w - 1 for w in old_window)
    new = tuple(2 * w - 1 for w in window)
    if math.prod(old) != n:
        raise ValueError(f"old_window {old_window} has {math.prod(old)} offsets but table has "
                         f"{n} offset rows ({rows} rows minus extra_tokens={extra})")
    lead = tuple(table.shape[:-2])
    heads = table.shape[-1]
    check_size(math.prod(lead) * (math.prod(new) + extra) * heads,
               f"the resized table (window={window!r})")
    work, single = work_dtype(xp, table)
    grid = xp.reshape(table[..., :n, :], lead + old + (heads,))
    if method != "geometric":
        grid = xp.reshape(_resample_grid(xp, grid, old, new, method=method,
                                         antialias=antialias, align_corners=False,
                                         single=single), lead + new + (heads,))
    elif old != new:  # timm maps every axis once any axis changes
        dev = device_of(table)
        grid = xp.astype(grid, work)
        for axis, (n_in, n_out) in enumerate(zip(old, new)):
            index, weight = _weights_geometric(n_in, n_out, single)
            index = xp.asarray(index, dtype=index_dtype(xp, dev), device=dev)
            grid = apply_taps(xp, grid, index, from_host(xp, weight, work, dev), axis - k - 1)
        grid = round_once(xp, grid, table.dtype)
    out = xp.reshape(grid, lead + (math.prod(new), heads))
    if extra:
        out = xp.concat([out, table[..., n:, :]], axis=-2)
    return out

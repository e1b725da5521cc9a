"""Fixed absolute encodings: sinusoids (Vaswani et al.), their N-d and diffusion-timestep forms.

Every table here is built from frequencies known to ~1e-32 (``arrpos._exact``) and angles formed
exactly (``arrpos._backends._xp``): float32 tables are within 2e-7 and float64 tables within 1e-12
of the exact values for every accepted position (finite, ``|p| < 2**35``; ``2**28`` where the
device has no float64), on every backend; other positions are refused (``_lib.check_positions``).
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np

from . import _dispatch
from ._exact import power_frequencies, timestep_frequencies
from ._lib import (
    array_namespace,
    MAX_DIM,
    as_positions,
    check_shape,
    check_size,
    check_array,
    check_bool,
    check_choice,
    check_dtype_arg,
    check_int,
    check_positions,
    check_positive_int,
    check_real_scalar,
    default_float,
    device_of,
    dtype_name,
    finfo,
    float_bits,
    from_host,
    has_float64,
    is_lazy,
    output_dtype,
)
from .typing import Array, DType, Device, GridMode, Namespace, Shape, SinusoidLayout

__all__ = ["decode_sinusoidal", "grid_coords", "sinusoidal", "sinusoidal_nd", "timestep_embedding"]

_LAYOUTS = ("interleaved", "split")
_GROUPS = ("axis", "sincos")
_GRID_MODES = ("index", "linspace", "center")


_BASE_SOURCE = "the largest frequency, above 1 for a base below 1"


def _largest(hi: np.ndarray) -> float:
    """The largest of the host frequencies (1.0 for none)."""
    return float(np.max(hi)) if len(hi) else 1.0


def _table(xp, positions, hi, lo, *, layout, dtype, width):
    return _dispatch.call("sinusoid_table", xp, positions, hi, lo, arrays=(positions,),
                          layout=layout, dtype=dtype, width=width)


def sinusoidal(positions: Array | int, /, dim: int, *, base: float = 10000.0,
               layout: SinusoidLayout = "interleaved", dtype: DType | None = None,
               device: Device | None = None, xp: Namespace | None = None) -> Array:
    """Fixed sinusoidal position encoding (Vaswani et al., 2017).

    ``w_i = base ** (-2 i / dim)`` for ``i < dim / 2``; a row at position ``p`` holds
    ``sin(p w_i)`` and ``cos(p w_i)``. An odd ``dim`` (``"interleaved"`` only, keras-hub's
    ``SinePositionEncoding``): column ``j`` uses ``w_{j//2}``, even columns sin, odd cos, so
    the last column is the sine of the ``(dim + 1) / 2``-th frequency.

    Parameters
    ----------
    positions : int or array
        An int ``n`` for positions ``0 .. n-1``, or an integer (any width, signed or unsigned)
        or real array of any shape ``P``; lists are not arrays (see Raises).
    dim : int
        Number of features (>= 1); even for ``"split"``.
    base : float, optional
        The wavelength base (10000 in the paper; keras-hub's ``max_wavelength``).
    layout : {"interleaved", "split"}, optional
        ``"interleaved"``: ``out[..., 2i] = sin``, ``out[..., 2i+1] = cos`` (the paper).
        ``"split"``: ``out[..., i] = sin``, ``out[..., dim/2 + i] = cos`` (tensor2tensor,
        diffusers, Transformer-XL).
    dtype : dtype, optional
        Real floating output dtype. Default: the dtype of real ``positions``, else the
        namespace's default float.
    device : device, optional
        Where to create the table when ``positions`` is an int (default: the namespace default).
    xp : namespace, optional
        Array namespace when ``positions`` is an int (default NumPy).

    Returns
    -------
    array
        Shape ``P + (dim,)`` (``(n, dim)`` for an int), in the namespace and on the device of
        ``positions``.

    Raises
    ------
    TypeError
        ``dim`` not an int, ``positions`` not an int or a real array (a list or tuple included:
        arrays are never made behind the caller's back), ``dtype`` not real floating.
    ValueError
        ``dim`` < 1 or > 2**17, an odd ``dim`` with ``"split"``; unknown ``layout``;
        ``base <= 0``; positions not finite or ``|p| >= 2**35`` (2**28 without float64); an
        output of more than 2**34 elements.

    Notes
    -----
    Backend support: compiled kernels (one complex multiply per element, multithreaded) for
    NumPy arrays and torch CPU tensors without grad (float16/32/64 and bfloat16 output), CUDA
    kernels for CuPy arrays and CUDA torch tensors, Dask arrays with NumPy chunks one task per
    chunk on those kernels; every other namespace the generic Array API code.
    Accuracy: within 2e-7 (float32) and 1e-12 (float64) of exact for every accepted position,
    ``|p| < 2**35`` (``2**28`` on devices without float64, e.g. JAX without x64); larger or
    non-finite positions are refused. Lazy positions (Dask, JAX under jit) are not read, so
    they are not checked: out-of-range values there give inaccurate tables.
    keras-hub forms ``timescales`` and angles in the layer's compute dtype (float32 by
    default), so its float32 values drift from these by up to ``~p * 6e-8`` rad at position
    ``p``; the formula is the same.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> pe = arrpos.sinusoidal(50, 16, base=100.0)
    >>> pe.shape
    (50, 16)
    >>> np.round(pe[1, :6], 2)
    array([0.84, 0.54, 0.53, 0.85, 0.31, 0.95])
    >>> arrpos.sinusoidal(np.array([[0, 3], [1, 2]]), 4, layout="split").shape
    (2, 2, 4)
    >>> np.round(arrpos.sinusoidal(2, 5)[1], 3)  # odd dim: columns use w0, w0, w1, w1, w2
    array([0.841, 0.54 , 0.025, 1.   , 0.001])
    """
    xp = array_namespace(positions, xp=xp, name="positions", dtype=dtype)
    dim = check_positive_int(dim, "dim", maximum=MAX_DIM)
    base = check_real_scalar(base, "base", positive=True)
    layout = check_choice(layout, "layout", _LAYOUTS)
    if dim % 2 and layout != "interleaved":
        raise ValueError(f"dim must be even with layout={layout!r}, got {dim}; an odd dim is "
                         "allowed with layout='interleaved' only (keras-hub)")
    pos = as_positions(xp, positions, "positions", device=device, width=dim)
    dtype = output_dtype(xp, None if isinstance(positions, int) else pos, dtype,
                         device=device_of(pos))
    hi, lo = power_frequencies((dim + 1) // 2, dim, base)
    # a base below 1 makes frequencies above 1: the accuracy range shrinks with them
    pos = check_positions(xp, pos, "positions", frequency=_largest(hi), source=_BASE_SOURCE)
    return _table(xp, pos, hi, lo, layout=layout, dtype=dtype, width=dim)


def sinusoidal_nd(coords: Array, /, dim: int, *, base: float = 10000.0,
                  layout: SinusoidLayout = "split", group: Literal["axis", "sincos"] = "axis",
                  dtype: DType | None = None) -> Array:
    """Sinusoidal encoding of N-d coordinates: equal chunks of features per axis.

    ``group="axis"``: chunk ``k`` (features ``k*dim/n`` to ``(k+1)*dim/n``) is
    ``sinusoidal(coords[..., k], dim/n, layout=layout)``. With ``coords = grid_coords((H, W))``
    the rows reshaped to ``(H*W, dim)`` equal MAE's / diffusers' ``get_2d_sincos_pos_embed``.
    ``group="sincos"`` (timm's ``build_sincos2d_pos_embed``): all sines, then all cosines, each
    as ``n`` chunks of ``dim/(2n)`` features in ``coords`` order, with frequencies
    ``base ** (-j / (dim/(2n)))`` (the frequencies of ``"axis"``, regrouped).

    Parameters
    ----------
    coords : array
        Shape ``(..., n)``: one coordinate per spatial axis, integer or real.
    dim : int
        Total features, divisible by ``2 n``.
    base : float, optional
        Wavelength base (timm's ``temperature``).
    layout : {"split", "interleaved"}, optional
        Layout inside each chunk with ``group="axis"`` (``"split"``: ``[sin | cos]``, MAE's
        convention); ignored with ``group="sincos"``.
    group : {"axis", "sincos"}, optional
        Features grouped by axis (MAE, diffusers) or by function (timm).
    dtype : dtype, optional
        Real floating output dtype (default: the dtype of real ``coords``, else the default float).

    Returns
    -------
    array
        Shape ``coords.shape[:-1] + (dim,)``.

    Raises
    ------
    TypeError
        ``coords`` not a real array.
    ValueError
        ``coords`` 0-d, ``dim`` not divisible by ``2 n``, unknown ``layout`` or ``group``.

    Notes
    -----
    timm stacks its grid first axis first, ``(h, w)``, while :func:`grid_coords` puts the last
    axis (x = w) first: timm's ``build_sincos2d_pos_embed((H, W), dim)`` is
    ``sinusoidal_nd(grid_coords((H, W))[..., ::-1], dim, group="sincos")`` flattened to
    ``(H*W, dim)``; its ``reverse_coord=True`` reverses ``feat_shape`` (tokens and
    coordinates alike: ``grid_coords((W, H))[..., ::-1]``; no change for square grids).
    timm's ``interleave_sin_cos=True`` is ``group="axis"`` with ``"split"`` on the same
    coordinates. timm forms angles in float32; these are exact (timm's float32 values differ
    by up to ``~p * 1.2e-7`` rad at coordinate ``p``).
    Backend support: as :func:`sinusoidal` (one table call over all coordinates).

    Examples
    --------
    >>> import arrpos
    >>> emb = arrpos.sinusoidal_nd(arrpos.grid_coords((4, 6)), 32)
    >>> emb.shape
    (4, 6, 32)
    >>> bool(abs(emb[2, 5, :8] - arrpos.sinusoidal(6, 16, layout="split")[5, :8]).max() < 1e-12)
    True
    >>> t = arrpos.sinusoidal_nd(arrpos.grid_coords((4, 6)), 32, group="sincos")
    >>> bool((t[2, 5, :8] == emb[2, 5, :8]).all() and (t[2, 5, 16:24] == emb[2, 5, 8:16]).all())
    True
    """
    xp = array_namespace(coords, name="coords")
    check_array(xp, coords, "coords", kind="real", min_ndim=1, shape_hint="(..., n)")
    if coords.shape[-1] < 1:
        raise ValueError(f"coords must have shape (..., n) with n >= 1, got shape "
                         f"{tuple(coords.shape)}")
    n = coords.shape[-1]
    dim = check_int(dim, "dim", minimum=1, maximum=MAX_DIM)
    if dim % (2 * n):
        raise ValueError(f"dim must be divisible by 2 * n = {2 * n} for {n}-d coords, got {dim}")
    base = check_real_scalar(base, "base", positive=True)
    layout = check_choice(layout, "layout", _LAYOUTS)
    group = check_choice(group, "group", _GROUPS)
    dtype = output_dtype(xp, coords, dtype, device=device_of(coords))
    as_positions(xp, coords, "coords", width=dim // n)  # the output size
    sub = dim // n
    hi, lo = power_frequencies(sub // 2, sub, base)
    coords = check_positions(xp, coords, "coords", frequency=_largest(hi), source=_BASE_SOURCE)
    lead = tuple(coords.shape[:-1])
    if group == "axis":
        table = _table(xp, coords, hi, lo, layout=layout, dtype=dtype, width=sub)
        return xp.reshape(table, lead + (dim,))
    table = _table(xp, coords, hi, lo, layout="split", dtype=dtype, width=sub)
    table = xp.reshape(table, lead + (n, 2, sub // 2))  # (axis, sin/cos, frequency)
    k = len(lead)
    table = xp.permute_dims(table, tuple(range(k)) + (k + 1, k, k + 2))
    return xp.reshape(table, lead + (dim,))


def _axis_coords(xp, n, mode, scale, dtype, device):
    """Coordinates along one axis of length ``n``, formed on the host in float64 (an exact
    integer numerator, one division, one product by ``scale``) and rounded once to ``dtype``:
    device division by a constant may be a reciprocal product (XLA), one ulp off."""
    i = np.arange(n, dtype=np.float64)
    if mode == "linspace":
        i = (2.0 * i - (n - 1)) / (n - 1) if n > 1 else i - 1.0  # linspace(-1, 1, 1) is [-1]
    elif mode == "center":
        i = (2.0 * i + (1 - n)) / n
    if scale != 1.0:
        i = i * scale
    return from_host(xp, i, dtype, device)


def grid_coords(shape: Shape, *, scale: float = 1.0, mode: GridMode = "index",
                dtype: DType | None = None, device: Device | None = None,
                xp: Namespace | None = None) -> Array:
    """Coordinates of a grid, last grid axis first (x, y, ...), times ``scale``.

    Along an axis of length ``n``: ``mode="index"`` gives ``0 .. n-1``; ``"linspace"`` gives
    ``linspace(-1, 1, n)`` (timm's and rotary-embedding-torch's pixel grids); ``"center"``
    gives the cell centres ``2 (i + 0.5) / n - 1`` (DINOv3's normalised grid).

    Parameters
    ----------
    shape : tuple of int
        Grid shape, one int per axis, e.g. ``(H, W)``; a 1-D grid is ``(n,)``. A bare int is
        refused: peers read ``14`` as ``(14, 14)`` (timm's ``to_2tuple``, Swin), so either
        reading would be silently wrong for someone.
    scale : float, optional
        Multiplies every coordinate (diffusers' ``1 / (n / base_size) / interpolation_scale``).
    mode : {"index", "linspace", "center"}, optional
        Integer indices, or coordinates normalised to ``[-1, 1]`` (see above).
    dtype : dtype, optional
        Real floating dtype (default: the namespace default float).
    device, xp : optional
        Device and namespace of the result (default NumPy, default device).

    Returns
    -------
    array
        Shape ``shape + (len(shape),)`` with ``out[i0, ..., ik, j] = c(i_{k-j}) * scale``,
        ``c`` the coordinate of ``mode`` along axis ``k - j``.

    Raises
    ------
    TypeError
        ``shape`` not a sequence of ints (a bare int included), ``dtype`` not real floating.
    ValueError
        An empty or negative ``shape``, unknown ``mode``, a ``scale`` whose coordinates overflow
        ``dtype``.

    Notes
    -----
    Coordinates are formed on the host in float64 and rounded once to ``dtype``: float32 and
    16-bit values are the correctly rounded ones (``torch.linspace`` in float32 may differ
    by one ulp). The peers index their grids ``(h, w)``; here x (w) comes first, so reverse
    the last axis (``[..., ::-1]``) for their order. DINOv3's ``normalize_coords="max"`` /
    ``"min"`` grids (centres divided by the longest or shortest side ``m``) are
    ``grid_coords(shape, scale=2 / m) + (1 / m - 1)``.

    Examples
    --------
    >>> import arrpos
    >>> g = arrpos.grid_coords((2, 3))
    >>> g.shape
    (2, 3, 2)
    >>> g[1, 2].tolist()
    [2.0, 1.0]
    >>> arrpos.grid_coords((1, 5), mode="linspace")[0, :, 0].tolist()
    [-1.0, -0.5, 0.0, 0.5, 1.0]
    >>> arrpos.grid_coords((1, 4), mode="center")[0, :, 0].tolist()
    [-0.75, -0.25, 0.25, 0.75]
    """
    xp = array_namespace(xp=xp, dtype=dtype)
    shape = check_shape(shape, "shape", minimum=0, example="(H, W)")
    check_size(math.prod(shape) * len(shape), "the grid")
    scale = check_real_scalar(scale, "scale")
    mode = check_choice(mode, "mode", _GRID_MODES)
    dtype = check_dtype_arg(xp, dtype, device=device)
    dtype = dtype if dtype is not None else default_float(xp, device)
    # the largest |coordinate| is max(n - 1, 1) * |scale| (index) or |scale| (normalised)
    reach = max([n - 1 for n in shape] + [1]) if mode == "index" else 1.0
    if reach * abs(scale) > float(finfo(xp, dtype).max):
        raise ValueError(f"scale must keep the coordinates finite in {dtype_name(dtype)}: "
                         f"|scale| * {reach} <= {float(finfo(xp, dtype).max):.4g}, got "
                         f"scale={scale}")
    axes = [_axis_coords(xp, n, mode, scale, dtype, device) for n in shape]
    grids = xp.meshgrid(*axes, indexing="ij")
    return xp.stack(grids[::-1], axis=-1)


def timestep_embedding(timesteps: Array, /, dim: int, *, max_period: float = 10000.0,
                       flip_sin_to_cos: bool = False, downscale_freq_shift: float = 1.0,
                       scale: float = 1.0, dtype: DType | None = None) -> Array:
    """Diffusion timestep embedding, as diffusers' ``get_timestep_embedding``.

    ``half = dim // 2``, ``w_i = exp(-ln(max_period) * i / (half - downscale_freq_shift))``,
    ``e = scale * t * w``; the output is ``[sin e, cos e]`` (``[cos e, sin e]`` when
    ``flip_sin_to_cos``) with one zero column appended when ``dim`` is odd.

    Parameters
    ----------
    timesteps : array
        Integer or real timesteps of any shape ``P`` (diffusers takes 1-D).
    dim : int
        Output features (odd allowed).
    max_period : float, optional
        Longest period.
    flip_sin_to_cos : bool, optional
        ``True`` puts cos first (Stable Diffusion, with ``downscale_freq_shift=0``).
    downscale_freq_shift : float, optional
        1 for DDPM / tensor2tensor, 0 for Stable Diffusion.
    scale : float, optional
        Multiplies the angles.
    dtype : dtype, optional
        Real floating output dtype (default: that of real ``timesteps``, else the default float;
        diffusers always returns float32).

    Returns
    -------
    array
        Shape ``P + (dim,)``.

    Raises
    ------
    TypeError
        ``timesteps`` not a real array, ``dim`` not an int.
    ValueError
        ``dim < 1``, ``max_period <= 0``, ``dim // 2 == downscale_freq_shift`` (division by zero
        in the formula) or so close to it that the frequencies overflow; timesteps not finite
        or ``|t| * max(1, largest frequency) >= 2**35``.

    Notes
    -----
    Backend support: as :func:`sinusoidal`. The angles are exact, so the values agree with
    diffusers' float32 computation to its own rounding (~1e-6 relative at t = 1000).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> e = arrpos.timestep_embedding(np.array([0, 10, 999]), 8)
    >>> e.shape
    (3, 8)
    >>> e[0].tolist()
    [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    """
    xp = array_namespace(timesteps, name="timesteps")
    check_array(xp, timesteps, "timesteps", kind="real")
    dim = check_int(dim, "dim", minimum=1, maximum=MAX_DIM)
    max_period = check_real_scalar(max_period, "max_period", positive=True)
    shift = check_real_scalar(downscale_freq_shift, "downscale_freq_shift")
    scale = check_real_scalar(scale, "scale")
    flip_sin_to_cos = check_bool(flip_sin_to_cos, "flip_sin_to_cos")
    as_positions(xp, timesteps, "timesteps", width=dim)  # the output size
    half = dim // 2
    if half and half - shift == 0:
        raise ValueError(
            f"downscale_freq_shift={shift} equals dim // 2 = {half}: the frequency formula "
            "divides by zero; use a larger dim or another shift"
        )
    dtype = output_dtype(xp, timesteps, dtype, device=device_of(timesteps))
    # a shift just above dim // 2 makes exp(-ln(max_period) i / (half - shift)) explode
    exponent = -math.log(max_period) * (half - 1) / (half - shift) if half > 1 else 0.0
    if exponent > 600:
        raise ValueError(
            f"downscale_freq_shift must keep the frequencies within float64: with dim // 2 = "
            f"{half} and max_period={max_period}, got downscale_freq_shift={shift} (largest "
            f"frequency exp({exponent:.3g})); use a shift further above or below dim // 2"
        )
    hi, lo = timestep_frequencies(half, max_period, shift, scale)
    top = float(abs(hi).max()) if half else 0.0
    timesteps = check_positions(xp, timesteps, "timesteps", frequency=top,
                                source="the largest frequency times scale")
    layout = "split_cos" if flip_sin_to_cos else "split"
    return _table(xp, timesteps, hi, lo, layout=layout, dtype=dtype, width=dim)


def decode_sinusoidal(encoding: Array, /, *, base: float = 10000.0,
                      layout: SinusoidLayout = "interleaved") -> Array:
    """Recover positions from sinusoidal encodings (the inverse of :func:`sinusoidal`).

    The lowest frequency gives a coarse position (unique below its period
    ``2 pi base ** ((dim - 2) / dim)``); each higher frequency then refines it.

    Parameters
    ----------
    encoding : array
        Shape ``(..., dim)``, rows made by :func:`sinusoidal` with the same ``base`` and
        ``layout``.
    base : float, optional
        The base the encoding was made with.
    layout : {"interleaved", "split"}, optional
        The layout it was made with.

    Returns
    -------
    array
        Real positions, shape ``encoding.shape[:-1]``, in float64 where the device has it
        (else float32); within 1e-3 of the true position below the lowest frequency's period.

    Raises
    ------
    TypeError
        ``encoding`` not a real floating array.
    ValueError
        ``dim`` odd or < 2, unknown ``layout``, or rows that are not sinusoidal encodings
        (sin/cos pairs off the unit circle, or frequencies that disagree on the position).

    Notes
    -----
    Backend support: generic Array API code on every namespace; the consistency check reads the
    values, so lazy arrays (Dask) are computed for it.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> pe = arrpos.sinusoidal(np.array([0.0, 5.0, 1234.5]), 64)
    >>> np.round(arrpos.decode_sinusoidal(pe), 6).tolist()
    [0.0, 5.0, 1234.5]
    """
    xp = array_namespace(encoding, name="encoding")
    check_array(xp, encoding, "encoding", kind="floating", min_ndim=1, shape_hint="(..., dim)")
    dim = encoding.shape[-1]
    if dim < 2 or dim % 2:
        raise ValueError(f"encoding's last axis (dim) must be even and >= 2, got {dim}")
    base = check_real_scalar(base, "base", positive=True)
    layout = check_choice(layout, "layout", _LAYOUTS)
    dev = device_of(encoding)
    work = xp.float64 if has_float64(xp, dev) else xp.float32
    enc = xp.astype(encoding, work)
    half = dim // 2
    if layout == "interleaved":
        pairs = xp.reshape(enc, tuple(enc.shape[:-1]) + (half, 2))
        s, c = pairs[..., 0], pairs[..., 1]
    else:
        s, c = enc[..., :half], enc[..., half:]
    hi, _ = power_frequencies(half, dim, base)
    w = xp.asarray(np.array(hi), dtype=work, device=dev)  # a writable copy: torch warns otherwise
    angle = xp.atan2(s, c)
    two_pi = 2 * math.pi
    # Coarse estimate from the lowest frequency, then refine through frequencies at most 8x apart
    # so that each step's error stays far below half a turn.
    last = half - 1
    pos = xp.remainder(angle[..., last], two_pi) / float(hi[last])
    chain, cur = [], last
    while cur > 0:
        nxt = cur - 1
        while nxt > 0 and hi[nxt - 1] / hi[cur] <= 8.0:
            nxt -= 1
        chain.append(nxt)
        cur = nxt
    for i in chain:
        wi = float(hi[i])
        turns = xp.round((pos * wi - angle[..., i]) / two_pi)
        pos = (angle[..., i] + two_pi * turns) / wi
    # Consistency: every pair on the unit circle and every frequency agreeing on the position.
    tol = 1e-2 if float_bits(xp, encoding.dtype) <= 16 else 1e-3
    radius = xp.abs(s * s + c * c - 1.0)
    resid = xp.remainder(pos[..., None] * w - angle + math.pi, two_pi) - math.pi
    if encoding.size and not is_lazy(encoding):
        bad_r = float(xp.max(radius))
        bad_a = float(xp.max(xp.abs(resid)))
        if not (bad_r <= tol and bad_a <= 50 * tol):
            raise ValueError(
                "encoding does not hold sinusoidal encodings for this base and layout: sin/cos "
                f"pairs are off the unit circle by up to {bad_r:.3g} and the frequencies "
                f"disagree on the position by up to {bad_a:.3g} rad"
            )
    return pos

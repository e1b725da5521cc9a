"""Fixed absolute encodings: sinusoids (Vaswani et al.), their N-d and diffusion-timestep forms.

Every table here is built from frequencies known to ~1e-32 (``arrpos._exact``) and angles formed
exactly (``arrpos._backends._xp``): float32 tables are within 2e-7 and float64 tables within 1e-12
of the exact values up to position 2**24, on every backend.
"""
from __future__ import annotations

import math

from . import _dispatch
from ._exact import power_frequencies, timestep_frequencies
from ._lib import (
    array_namespace,
    as_positions,
    check_choice,
    check_dtype_arg,
    check_even_dim,
    check_finite_range,
    check_positive_int,
    check_real_array,
    check_real_scalar,
    default_float,
    device_of,
    has_float64,
    is_lazy,
    output_dtype,
)

__all__ = ["decode_sinusoidal", "grid_coords", "sinusoidal", "sinusoidal_nd", "timestep_embedding"]

_LAYOUTS = ("interleaved", "split")


def _table(xp, positions, hi, lo, *, layout, dtype, width):
    return _dispatch.call("sinusoid_table", xp, positions, hi, lo, arrays=(positions,),
                          layout=layout, dtype=dtype, width=width)


def sinusoidal(positions, dim, /, *, base=10000.0, layout="interleaved", dtype=None, device=None,
               xp=None):
    """Fixed sinusoidal position encoding (Vaswani et al., 2017).

    ``w_i = base ** (-2 i / dim)`` for ``i < dim / 2``; a row at position ``p`` holds
    ``sin(p w_i)`` and ``cos(p w_i)``.

    Parameters
    ----------
    positions : int or array
        An int ``n`` for positions ``0 .. n-1``, or an integer or real array of any shape ``P``.
    dim : int
        Number of features, even.
    base : float, optional
        The wavelength base (10000 in the paper).
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
        ``dim`` not an int, ``positions`` not an int or a real array, ``dtype`` not real floating.
    ValueError
        ``dim`` odd or < 2, unknown ``layout``, ``base <= 0``, non-finite positions.

    Notes
    -----
    Backend support: NumPy float32/float64 output takes the compiled kernel (one complex
    multiply per element, multithreaded); Dask arrays with NumPy chunks one task per chunk,
    each taking that path; every other namespace the generic Array API code.
    Accuracy: within 2e-7 (float32) and 1e-12 (float64) of exact up to position 2**24.

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
    """
    xp = array_namespace(positions, xp=xp, name="positions")
    dim = check_even_dim(dim, "dim")
    base = check_real_scalar(base, "base", positive=True)
    layout = check_choice(layout, "layout", _LAYOUTS)
    pos = as_positions(xp, positions, "positions", device=device)
    dtype = output_dtype(xp, None if isinstance(positions, int) else pos, dtype,
                         device=device_of(pos))
    check_finite_range(xp, pos, "positions")
    hi, lo = power_frequencies(dim // 2, dim, base)
    return _table(xp, pos, hi, lo, layout=layout, dtype=dtype, width=dim)


def sinusoidal_nd(coords, dim, /, *, base=10000.0, layout="split", dtype=None):
    """Sinusoidal encoding of N-d coordinates: one equal chunk of features per axis.

    Chunk ``k`` (features ``k*dim/n`` to ``(k+1)*dim/n``) is
    ``sinusoidal(coords[..., k], dim/n, layout=layout)``. With ``coords = grid_coords((H, W))``
    the rows reshaped to ``(H*W, dim)`` equal MAE's / diffusers' ``get_2d_sincos_pos_embed``.

    Parameters
    ----------
    coords : array
        Shape ``(..., n)``: one coordinate per spatial axis, integer or real.
    dim : int
        Total features, divisible by ``2 n``.
    base : float, optional
        Wavelength base.
    layout : {"split", "interleaved"}, optional
        Layout inside each chunk (``"split"``: ``[sin | cos]``, MAE's convention).
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
        ``coords`` 0-d, ``dim`` not divisible by ``2 n``, unknown ``layout``.

    Notes
    -----
    Backend support: as :func:`sinusoidal` (one table call over all coordinates).

    Examples
    --------
    >>> import arrpos
    >>> emb = arrpos.sinusoidal_nd(arrpos.grid_coords((4, 6)), 32)
    >>> emb.shape
    (4, 6, 32)
    >>> bool(abs(emb[2, 5, :8] - arrpos.sinusoidal(6, 16, layout="split")[5, :8]).max() < 1e-12)
    True
    """
    xp = array_namespace(coords, name="coords")
    if not hasattr(coords, "shape"):
        raise TypeError(f"coords must be an array of shape (..., n), got {type(coords).__name__}")
    check_real_array(xp, coords, "coords")
    if coords.ndim < 1 or coords.shape[-1] < 1:
        raise ValueError(f"coords must have shape (..., n) with n >= 1, got shape {coords.shape}")
    n = coords.shape[-1]
    dim = check_positive_int(dim, "dim")
    if dim % (2 * n):
        raise ValueError(f"dim must be divisible by 2 * n = {2 * n} for {n}-d coords, got {dim}")
    base = check_real_scalar(base, "base", positive=True)
    layout = check_choice(layout, "layout", _LAYOUTS)
    dtype = output_dtype(xp, coords, dtype, device=device_of(coords))
    check_finite_range(xp, coords, "coords")
    sub = dim // n
    hi, lo = power_frequencies(sub // 2, sub, base)
    table = _table(xp, coords, hi, lo, layout=layout, dtype=dtype, width=sub)
    return xp.reshape(table, tuple(coords.shape[:-1]) + (dim,))


def grid_coords(shape, /, *, scale=1.0, dtype=None, device=None, xp=None):
    """Coordinates of an integer grid, last grid axis first (x, y, ...), times ``scale``.

    Parameters
    ----------
    shape : tuple of int
        Grid shape, e.g. ``(H, W)``.
    scale : float, optional
        Multiplies every coordinate (diffusers' ``1 / (n / base_size) / interpolation_scale``).
    dtype : dtype, optional
        Real floating dtype (default: the namespace default float).
    device, xp : optional
        Device and namespace of the result (default NumPy, default device).

    Returns
    -------
    array
        Shape ``shape + (len(shape),)`` with ``out[i0, ..., ik, j] = i_{k-j} * scale``.

    Raises
    ------
    TypeError
        ``shape`` not a sequence of ints, ``dtype`` not real floating.
    ValueError
        An empty or negative ``shape``.

    Examples
    --------
    >>> import arrpos
    >>> g = arrpos.grid_coords((2, 3))
    >>> g.shape
    (2, 3, 2)
    >>> g[1, 2].tolist()
    [2.0, 1.0]
    """
    xp = array_namespace(xp=xp)
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple of ints, got {type(shape).__name__}") from None
    if not shape:
        raise ValueError("shape must have at least one axis, got ()")
    shape = tuple(check_positive_int(s, f"shape[{i}]", minimum=0) for i, s in enumerate(shape))
    scale = check_real_scalar(scale, "scale")
    check_dtype_arg(xp, dtype, device=device)
    dtype = dtype if dtype is not None else default_float(xp, device)
    axes = [xp.arange(s, dtype=dtype, device=device) for s in shape]
    grids = xp.meshgrid(*axes, indexing="ij")
    out = xp.stack(grids[::-1], axis=-1)
    return out * scale if scale != 1.0 else out


def timestep_embedding(timesteps, dim, /, *, max_period=10000.0, flip_sin_to_cos=False,
                       downscale_freq_shift=1.0, scale=1.0, dtype=None):
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
        in the formula), non-finite timesteps.

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
    if not hasattr(timesteps, "dtype"):
        raise TypeError(f"timesteps must be an array, got {type(timesteps).__name__}")
    check_real_array(xp, timesteps, "timesteps")
    dim = check_positive_int(dim, "dim")
    max_period = check_real_scalar(max_period, "max_period", positive=True)
    shift = check_real_scalar(downscale_freq_shift, "downscale_freq_shift")
    scale = check_real_scalar(scale, "scale")
    if not isinstance(flip_sin_to_cos, bool):
        raise TypeError(f"flip_sin_to_cos must be a bool, got {flip_sin_to_cos!r}")
    half = dim // 2
    if half and half - shift == 0:
        raise ValueError(
            f"downscale_freq_shift={shift} equals dim // 2 = {half}: the frequency formula "
            "divides by zero; use a larger dim or another shift"
        )
    dtype = output_dtype(xp, timesteps, dtype, device=device_of(timesteps))
    check_finite_range(xp, timesteps, "timesteps")
    hi, lo = timestep_frequencies(half, max_period, shift, scale)
    layout = "split_cos" if flip_sin_to_cos else "split"
    return _table(xp, timesteps, hi, lo, layout=layout, dtype=dtype, width=dim)


def decode_sinusoidal(encoding, /, *, base=10000.0, layout="interleaved"):
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
    if not hasattr(encoding, "dtype"):
        raise TypeError(f"encoding must be an array, got {type(encoding).__name__}")
    check_real_array(xp, encoding, "encoding", integer_ok=False)
    if encoding.ndim < 1:
        raise ValueError("encoding must have shape (..., dim), got a 0-d array")
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
    w = xp.asarray(hi, dtype=work, device=dev)
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
    tol = 1e-2 if xp.finfo(encoding.dtype).eps > 1e-4 else 1e-3
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

"""Rotary position embedding (RoPE; Su et al. 2021) with every transformers 5 scaling.

``rope_frequencies`` gives the (scaled) inverse frequencies and the attention factor,
``rope_cos_sin`` the cos/sin tables with angles formed exactly, ``apply_rope`` rotates queries
and keys, ``mrope_axes`` assigns frequencies to (t, h, w) for Qwen2-VL / Qwen3-VL, and ``RoPE``
bundles all of it, built by hand or from a transformers ``config.json``.
"""
from __future__ import annotations

import functools
import math
import threading
import weakref
from decimal import Decimal, localcontext

import numpy as np

from .. import _dispatch
from .._lib import (
    MAX_DIM,
    array_key,
    array_namespace,
    as_positions,
    check_array,
    check_bool,
    check_choice,
    check_dtype_arg,
    check_even_dim,
    check_finite_values,
    check_int,
    check_out_memory,
    check_positions,
    check_positive_int,
    check_real_scalar,
    detached,
    device_of,
    dtype_kind,
    finfo,
    has_float64,
    is_lazy,
    remember,
    output_dtype,
)
from .._lib import clear_memos, new_memo
from .position_scales import PositionScale
from .scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    RopeScaling,
    YarnScaling,
    _default_inv_freq,
)

__all__ = [
    "DynamicNTKScaling",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "NTKScaling",
    "ProportionalScaling",
    "RoPE",
    "YarnScaling",
    "apply_rope",
    "apply_rope_cached",
    "apply_rope_qk",
    "clear_caches",
    "mrope_axes",
    "period_frequencies",
    "pixel_frequencies",
    "rope_cos_sin",
    "rope_frequencies",
    "xpos_scale",
]

_LAYOUTS = ("half", "interleaved")


def _check_scaling(scaling):
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise TypeError(
            "scaling must be None or one of LinearScaling, DynamicNTKScaling, NTKScaling, "
            "YarnScaling, LongRopeScaling, Llama3Scaling, ProportionalScaling, AxialScaling; got "
            f"{type(scaling).__name__}"
        )
    return scaling


def rope_frequencies(dim, *, base=10000.0, scaling=None, seq_len=None, dtype=None,
                     device=None, xp=None):
    """Inverse frequencies of a rotary width ``dim`` and the attention factor.

    Identical to transformers 5's rope initialisation (``ROPE_INIT_FUNCTIONS``) for every
    scaling, computed in float64 on the host (transformers computes in float32) and rounded once
    to ``dtype``.

    Parameters
    ----------
    dim : int
        Rotary width, even: ``int(head_dim * partial_rotary_factor)`` (``head_dim`` itself for
        :class:`ProportionalScaling`).
    base : float, optional
        ``rope_theta``.
    scaling : RopeScaling, optional
        :class:`LinearScaling`, :class:`DynamicNTKScaling`, :class:`NTKScaling`,
        :class:`YarnScaling`, :class:`LongRopeScaling`, :class:`Llama3Scaling` or
        :class:`ProportionalScaling`; None for the original RoPE.
    seq_len : int, optional
        Current sequence length (largest position + 1); only the dynamic NTK and LongRoPE
        scalings read it. None behaves as transformers at initialisation.
    dtype : dtype, optional
        Real floating dtype (default: the namespace's default float on ``device``). Pass
        float64 to keep the frequencies exact.
    device : device, optional
        Where to create the array (default: the namespace default).
    xp : namespace, optional
        Array namespace of the result (default NumPy).

    Returns
    -------
    inv_freq : array
        Shape ``(dim // 2,)``.
    attention_factor : float
        Multiplies cos and sin (1 except for YaRN and LongRoPE).

    Raises
    ------
    TypeError
        ``dim`` or ``seq_len`` not an int, ``scaling`` not a scaling object, ``dtype`` not
        real floating.
    ValueError
        ``dim`` odd or < 2, ``base <= 0``, ``seq_len < 1``, a LongRoPE factor list whose length
        is not ``dim // 2``.

    Notes
    -----
    Backend support: computed on the host (NumPy float64) and placed with
    ``xp.asarray(..., device=device)``; the same numbers on every backend.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, att = arrpos.rope_frequencies(8, base=100.0)
    >>> inv.tolist(), att
    ([1.0, 0.31622776601683794, 0.1, 0.03162277660168379], 1.0)
    >>> yarn = arrpos.YarnScaling(4.0, 4096)
    >>> inv, att = arrpos.rope_frequencies(128, base=10000.0, scaling=yarn)
    >>> inv.shape, round(att, 6)
    ((64,), 1.138629)
    """
    xp = array_namespace(xp=xp, dtype=dtype)
    dim = check_even_dim(dim, "dim")
    base = check_real_scalar(base, "base", positive=True)
    scaling = _check_scaling(scaling)
    if seq_len is not None:
        seq_len = check_positive_int(seq_len, "seq_len")
    dtype = output_dtype(xp, None, dtype, device=device)
    inv, attention_factor = _host_frequencies(dim, base, scaling, seq_len)
    return xp.asarray(inv, dtype=dtype, device=device), float(attention_factor)


def _host_frequencies(dim, base, scaling, seq_len):
    """float64 NumPy frequencies and the attention factor (validated arguments)."""
    if scaling is None:
        return _default_inv_freq(dim, base), 1.0
    inv, att = scaling._inv_freq(dim, base, seq_len)
    return np.array(inv, dtype=np.float64), att


def pixel_frequencies(dim, *, max_freq=10.0, dtype=None, device=None, xp=None):
    """Rotary frequencies for coordinates in ``[-1, 1]`` (rotary-embedding-torch ``"pixel"``).

    ``linspace(1, max_freq / 2, dim // 2) * pi``: the lowest frequency turns half a circle over
    the unit coordinate, the highest ``max_freq / 4`` circles. Pass the result to
    :func:`rope_cos_sin` with coordinates from ``grid_coords(..., mode="linspace")``.

    Parameters
    ----------
    dim : int
        Rotary width (even) of one coordinate axis.
    max_freq : float, optional
        rotary-embedding-torch's ``max_freq`` (> 0).
    dtype : dtype, optional
        Real floating dtype (default: the namespace's default float on ``device``).
    device : device, optional
        Where to create the array (default: the namespace default).
    xp : namespace, optional
        Array namespace of the result (default NumPy).

    Returns
    -------
    array
        Shape ``(dim // 2,)``.

    Raises
    ------
    TypeError
        ``dim`` not an int, ``dtype`` not real floating.
    ValueError
        ``dim`` odd or < 2, ``max_freq`` not finite and positive.

    Notes
    -----
    rotary-embedding-torch builds the same numbers with ``torch.linspace`` in the default
    float dtype (float32); here they are formed in float64 and rounded once to ``dtype``.
    Backend support: computed on the host, placed with ``xp.asarray``.

    Examples
    --------
    >>> import arrpos
    >>> (arrpos.pixel_frequencies(6, max_freq=10.0) / 3.141592653589793).tolist()
    [1.0, 3.0, 5.0]
    """
    xp = array_namespace(xp=xp)
    dim = check_even_dim(dim, "dim")
    max_freq = check_real_scalar(max_freq, "max_freq", positive=True)
    dtype = output_dtype(xp, None, dtype, device=device)
    freqs = np.linspace(1.0, max_freq / 2, dim // 2, dtype=np.float64) * np.pi
    return xp.asarray(freqs, dtype=dtype, device=device)


def period_frequencies(dim, *, min_period, max_period, dtype=None, device=None, xp=None):
    """Rotary frequencies ``2 pi / period`` with periods geometric from ``min_period`` to
    ``max_period`` (DINOv3's ``min_period``/``max_period`` schedule).

    ``period_j = min_period * (max_period / min_period) ** (j / (n - 1))`` for
    ``j = 0 .. n - 1``, ``n = dim // 2``, both ends included (``n = 1``: ``min_period``).

    Parameters
    ----------
    dim : int
        Rotary width (even) of one coordinate axis. DINOv3 gives each of its two axes half
        the head: ``period_frequencies(head_dim // 2, ...)`` has its ``head_dim // 4`` periods.
    min_period, max_period : float
        Shortest and longest period, in coordinate units (``0 < min_period <= max_period``).
    dtype : dtype, optional
        Real floating dtype (default: the namespace's default float on ``device``).
    device : device, optional
        Where to create the array (default: the namespace default).
    xp : namespace, optional
        Array namespace of the result (default NumPy).

    Returns
    -------
    array
        Shape ``(dim // 2,)``, decreasing from ``2 pi / min_period``.

    Raises
    ------
    TypeError
        ``dim`` not an int, a period not a real number, ``dtype`` not real floating.
    ValueError
        ``dim`` odd or < 2, a period not finite and positive, ``min_period > max_period``.

    Notes
    -----
    DINOv3 forms the angle as ``2 pi * coord / period``; with these frequencies
    :func:`rope_cos_sin` forms ``coord * (2 pi / period)`` exactly, the same angle to float64
    rounding. Its ``base`` schedule (transformers' ``DINOv3ViTRopePositionEmbedding``) is
    ``min_period=1``, ``max_period=base ** (2 * (n - 1) / dim)``.
    Backend support: computed on the host in float64, placed with ``xp.asarray``.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> w = arrpos.period_frequencies(6, min_period=1.0, max_period=100.0)
    >>> np.round(2 * np.pi / w, 10).tolist()
    [1.0, 10.0, 100.0]
    """
    xp = array_namespace(xp=xp)
    dim = check_even_dim(dim, "dim")
    lo = check_real_scalar(min_period, "min_period", positive=True)
    hi = check_real_scalar(max_period, "max_period", positive=True)
    if lo > hi:
        raise ValueError(f"min_period must be <= max_period, got min_period={lo}, "
                         f"max_period={hi}")
    dtype = output_dtype(xp, None, dtype, device=device)
    n = dim // 2
    exponents = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    periods = lo * (hi / lo) ** exponents
    return xp.asarray(2 * np.pi / periods, dtype=dtype, device=device)


def _check_axes(axes, n_freq, n_coords):
    if axes is None:
        return None
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__len__"):
        raise TypeError(f"axes must be a sequence of ints (one per frequency), got "
                        f"{type(axes).__name__}")
    axes = tuple(check_int(a, f"axes[{i}]", minimum=0) for i, a in enumerate(axes))
    if len(axes) != n_freq:
        raise ValueError(f"axes must have one entry per frequency (len(inv_freq) = {n_freq}), "
                         f"got {len(axes)}")
    if n_coords is None:
        raise ValueError("with axes, positions must have a trailing axis of coordinates, got a "
                         "0-d array")
    bad = [a for a in axes if a >= n_coords]
    if bad:
        raise ValueError(f"axes must be < positions.shape[-1] = {n_coords} (the number of "
                         f"coordinates), got {bad[0]}")
    return axes


def _check_mixed(inv_freq, pos, axes):
    """RoPE-Mixed: one row of ``inv_freq`` per coordinate of the positions' trailing axis."""
    if axes is not None:
        raise ValueError("axes cannot be combined with a 2-D inv_freq (RoPE-Mixed mixes every "
                         "coordinate into every frequency)")
    n = inv_freq.shape[0]
    if pos.ndim < 1 or pos.shape[-1] != n:
        raise ValueError(f"with inv_freq of shape {tuple(inv_freq.shape)} (RoPE-Mixed), "
                         f"positions must have a trailing axis of {n} coordinates, got shape "
                         f"{tuple(pos.shape)}")


def rope_cos_sin(positions, inv_freq, /, *, layout="half", attention_factor=1.0, axes=None,
                 dtype=None):
    """The cos and sin tables of RoPE at ``positions``, full width in the layout of ``x``.

    ``theta = p * inv_freq``; ``"half"``: ``cos = attention_factor * cos([theta, theta])``
    (GPT-NeoX, LLaMA); ``"interleaved"``: each frequency repeated twice (GPT-J, RoFormer).

    Parameters
    ----------
    positions : int or array
        An int ``n`` (positions ``0 .. n-1``) or an integer or real array of any shape ``P``:
        batched position ids, offsets after a cache, packed sequences whose positions restart.
        With ``axes``: shape ``P + (n_coords,)``, one coordinate per axis (t, h, w, ...).
    inv_freq : array
        Inverse frequencies, shape ``(F,)`` (:func:`rope_frequencies`, or a model's buffer).
        A 2-D ``inv_freq`` of shape ``(n, F)`` is RoPE-Mixed (Heo et al. 2024; timm
        ``RotaryEmbeddingMixed``, one head's frequencies): ``positions`` then has a trailing
        axis of ``n`` coordinates and frequency ``i`` turns by
        ``sum_a positions[..., a] * inv_freq[a, i]``.
    layout : {"half", "interleaved"}, optional
        Layout of the table (and of the ``x`` it will rotate).
    attention_factor : float, optional
        Multiplies cos and sin (YaRN, LongRoPE; returned by :func:`rope_frequencies`).
    axes : sequence of int, optional
        ``axes[i]`` is the coordinate that frequency ``i`` turns with (multimodal / axial RoPE;
        :func:`mrope_axes` gives Qwen2-VL's and Qwen3-VL's).
    dtype : dtype, optional
        Real floating output dtype. Default: the dtype ``positions * inv_freq`` would have
        (integer positions take ``inv_freq``'s).

    Returns
    -------
    cos, sin : array
        Each of shape ``P + (2F,)``, in the namespace and on the device of the inputs.

    Raises
    ------
    TypeError
        Non-array ``inv_freq``, non-real arrays, arrays of different libraries, ``dtype`` not
        real floating, ``axes`` not a sequence of ints, an int ``positions`` with a 2-D
        ``inv_freq``.
    ValueError
        ``inv_freq`` not 1-D or 2-D or empty, unknown ``layout``, ``attention_factor <= 0``,
        non-finite positions, ``axes`` of the wrong length or naming a coordinate that does not
        exist, ``axes`` with a 2-D ``inv_freq``, positions whose trailing axis is not
        ``inv_freq.shape[0]`` long with a 2-D ``inv_freq``.

    Notes
    -----
    Angles are formed exactly (float64 where the device has it, else an exact float32 split),
    so a float32 table is within 2e-7 of the exact one for the given ``inv_freq`` for every
    accepted position, on every backend (JAX without x64 included). Accepted: finite
    ``|p| * max(1, max|inv_freq|) < 2**35`` (``2**28`` without float64); others raise.
    RoPE-Mixed reduces each product ``positions[..., a] * inv_freq[a, i]`` exactly before
    adding them.
    Backend support: compiled kernels for NumPy arrays and torch CPU tensors
    without grad (float16/32/64 and bfloat16 output; tensors zero-copy through DLPack), CUDA
    kernels for CuPy arrays and CUDA torch tensors, Dask arrays with NumPy chunks one task per
    chunk on those kernels; multimodal ``axes``, RoPE-Mixed, other namespaces and any input a
    kernel declines take the generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(4, base=100.0)
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(3), inv)
    >>> cos.shape
    (3, 4)
    >>> np.round(sin[1], 4).tolist()
    [0.8415, 0.0998, 0.8415, 0.0998]
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(3), inv, layout="interleaved")
    >>> np.round(sin[1], 4).tolist()
    [0.8415, 0.8415, 0.0998, 0.0998]

    RoPE-Mixed: two coordinates, each mixed into both frequencies.

    >>> mixed = np.array([[1.0, 0.5], [0.25, 2.0]])       # (n_coords, F)
    >>> xy = np.array([[2.0, 4.0]])                       # one token at (2, 4)
    >>> cos, sin = arrpos.rope_cos_sin(xy, mixed, layout="interleaved")
    >>> np.allclose(sin[0], np.sin(np.repeat([2 * 1.0 + 4 * 0.25, 2 * 0.5 + 4 * 2.0], 2)))
    True
    """
    xp, pos, inv_freq, layout, attention_factor, axes, dtype = _table_args(
        positions, inv_freq, layout, attention_factor, axes, dtype)
    if inv_freq.ndim == 2:  # RoPE-Mixed
        return _dispatch.call("rope_cos_sin_mixed", xp, pos, inv_freq, arrays=(pos, inv_freq),
                              layout=layout, attention_factor=attention_factor, dtype=dtype)
    return _dispatch.call("rope_cos_sin", xp, pos, inv_freq, arrays=(pos, inv_freq),
                          layout=layout, attention_factor=attention_factor, axes=axes,
                          dtype=dtype)


def _table_args(positions, inv_freq, layout, attention_factor, axes, dtype):
    """rope_cos_sin's arguments validated and normalised (the namespace, positions, dtype)."""
    xp = array_namespace(positions, inv_freq, name="positions and inv_freq")
    check_array(xp, inv_freq, "inv_freq", kind="real")
    if inv_freq.ndim not in (1, 2) or 0 in tuple(inv_freq.shape):
        raise ValueError(f"inv_freq must have shape (F,) or (n_coords, F) (RoPE-Mixed) with "
                         f"F >= 1, got shape {tuple(inv_freq.shape)}")
    top = check_finite_values(xp, inv_freq, "inv_freq")
    # an int length is made beside inv_freq; an array's device is its own (None under jit)
    pos = as_positions(xp, positions, "positions", width=2 * inv_freq.shape[0],
                       device=device_of(inv_freq) if isinstance(positions, int) else None)
    layout = check_choice(layout, "layout", _LAYOUTS)
    attention_factor = check_real_scalar(attention_factor, "attention_factor", positive=True)
    if inv_freq.ndim == 2:
        if not hasattr(positions, "shape"):
            raise TypeError("with a 2-D inv_freq (RoPE-Mixed), positions must be an array of "
                            f"coordinates, got {type(positions).__name__}")
        _check_mixed(inv_freq, pos, axes)
    else:
        axes = _check_axes(axes, inv_freq.shape[0], pos.shape[-1] if pos.ndim else None)
    dtype = check_dtype_arg(xp, dtype, device=device_of(pos))
    if dtype is None:
        ref = inv_freq
        if dtype_kind(xp, pos.dtype) == "real floating":  # (NumPy's isdtype: no ml_dtypes)
            ref = xp.empty((), dtype=xp.result_type(pos.dtype, inv_freq.dtype),
                           device=device_of(pos))
        dtype = output_dtype(xp, ref, None, device=device_of(pos))
    else:
        dtype = output_dtype(xp, None, dtype, device=device_of(pos))
    pos = check_positions(xp, pos, "positions", frequency=top)
    return xp, pos, inv_freq, layout, attention_factor, axes, dtype


def mrope_axes(sections, *, interleaved=False):
    """Which coordinate (0 = t, 1 = h, 2 = w) each frequency of multimodal RoPE turns with.

    Qwen2-VL (``interleaved=False``): ``sections[k]`` consecutive frequencies per chunk, chunk
    ``k`` taking coordinate ``k % 3`` (T then H then W). Qwen3-VL (``interleaved=True``):
    T, H, W, T, H, W, ... — frequency ``i`` takes H when ``i % 3 == 1`` and
    ``i < 3 * sections[1]``, W when ``i % 3 == 2`` and ``i < 3 * sections[2]``, T otherwise.

    Parameters
    ----------
    sections : sequence of int
        ``mrope_section`` of the config (e.g. ``[16, 24, 24]``), summing to ``head_dim // 2``.
    interleaved : bool, optional
        Qwen3-VL's interleaved assignment (needs exactly three sections).

    Returns
    -------
    tuple of int
        ``sum(sections)`` entries, to pass as ``axes=`` to :func:`rope_cos_sin`.

    Raises
    ------
    TypeError
        ``sections`` not a sequence of ints, ``interleaved`` not a bool.
    ValueError
        An empty ``sections``, a negative entry, a sum of more than ``2**16`` frequencies (no
        rotary width is wider than ``2**17``); ``interleaved`` with other than three sections.

    Notes
    -----
    Backend support: pure Python.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.mrope_axes([2, 1, 1])
    (0, 0, 1, 2)
    >>> arrpos.mrope_axes([2, 2, 2], interleaved=True)
    (0, 1, 2, 0, 1, 2)
    """
    if isinstance(sections, (str, bytes)) or not hasattr(sections, "__len__"):
        raise TypeError(f"sections must be a sequence of ints, got {type(sections).__name__}")
    # one entry per frequency is made: sections no rotary width (<= MAX_DIM) has are refused
    # before any is made, not after allocating memory for them
    if len(sections) > MAX_DIM // 2:
        raise ValueError(f"sections must have at most {MAX_DIM // 2} entries (rotary widths "
                         f"are <= {MAX_DIM}), got {len(sections)}")
    sections = [check_positive_int(s, f"sections[{i}]", minimum=0, maximum=MAX_DIM // 2)
                for i, s in enumerate(sections)]
    if not sections or sum(sections) == 0:
        raise ValueError(f"sections must be non-empty with a positive sum, got {sections}")
    if sum(sections) > MAX_DIM // 2:
        raise ValueError(f"sections must sum to at most {MAX_DIM // 2} frequencies (rotary widths "
                         f"are <= {MAX_DIM}), got a sum of {sum(sections)}")
    interleaved = check_bool(interleaved, "interleaved")
    total = sum(sections)
    if not interleaved:
        return tuple(k % 3 for k, s in enumerate(sections) for _ in range(s))
    if len(sections) != 3:
        raise ValueError(f"interleaved=True needs three sections (t, h, w), got {sections}")
    axes = [0] * total
    for coord in (1, 2):  # transformers' Qwen3-VL: slice(coord, 3 * sections[coord], 3)
        for i in range(coord, min(3 * sections[coord], total), 3):
            axes[i] = coord
    return tuple(axes)


def _broadcastable_into(small, big):
    """Whether ``small`` broadcasts to exactly ``big`` (never enlarges it)."""
    n = len(small)
    if n > len(big):
        return False
    for s, b in zip(small, big[len(big) - n:]):
        if s != 1 and s != b:
            return False
    return True


# signature -> plan memos (``_lib.remember``), one per public entry point
_APPLY_PLANS = new_memo()
_QK_PLANS = new_memo()
_CACHED_PLANS = new_memo()
_DECODE_PLANS = new_memo()


def _check_apply_args(xp, x, cos, sin, layout, inverse, out, *, x_name="x", out_name="out"):
    """The argument checks of :func:`apply_rope` (raises; returns nothing); ``x_name`` and
    ``out_name`` are the names the messages use (``q``/``k`` for :func:`apply_rope_qk`)."""
    for name, a in ((x_name, x), ("cos", cos), ("sin", sin)):
        check_array(xp, a, name, kind="floating")
    _check_layout_inverse(layout, inverse)
    if x.ndim < 1:
        raise ValueError(f"{x_name} must have shape (..., dim), got a 0-d array")
    if tuple(cos.shape) != tuple(sin.shape):
        raise ValueError(f"cos and sin must have the same shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    if cos.ndim < 1:
        raise ValueError("cos must have shape (..., rotary_dim), got a 0-d array")
    r, d = cos.shape[-1], x.shape[-1]
    if r < 2 or r % 2:
        raise ValueError(f"cos.shape[-1] (the rotary width) must be even and >= 2, got {r}")
    if r > d:
        raise ValueError(f"cos.shape[-1] = {r} is wider than {x_name} ({x_name}.shape[-1] = "
                         f"{d}); the rotary width must be <= the head dim")
    if not _broadcastable_into(tuple(cos.shape[:-1]), tuple(x.shape[:-1])):
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast to {x_name}[..., :{r}] of "
            f"shape {tuple(x.shape[:-1]) + (r,)}; insert the heads axis (e.g. "
            f"cos[:, :, None, :] for {x_name} of shape (batch, seq, heads, dim))"
        )
    _check_out(xp, x, out, x_name, out_name)


def _check_layout_inverse(layout, inverse):
    check_choice(layout, "layout", _LAYOUTS)
    check_bool(inverse, "inverse")


def _check_out(xp, x, out, x_name="x", out_name="out"):
    """``out``: None, or an array of ``x``'s shape and dtype (its memory: check_out_memory)."""
    if out is None:
        return
    check_array(xp, out, out_name, kind="any")
    if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype:
        raise ValueError(f"{out_name} must have {x_name}'s shape {tuple(x.shape)} and dtype "
                         f"{x.dtype}, got shape {tuple(out.shape)} and dtype {out.dtype}")


def _apply_plan(x, cos, sin, layout, inverse, out):
    """What :func:`apply_rope` decides from its signature: ``(xp, route)`` (raises for bad
    arguments)."""
    xp = array_namespace(x, cos, sin, out, name="x, cos, sin and out")
    _check_apply_args(xp, x, cos, sin, layout, inverse, out)
    return xp, _dispatch.route("apply_rope", xp, (x, cos, sin, out), layout=layout,
                               inverse=inverse, out=out)


def apply_rope(x, cos, sin, /, *, layout="half", inverse=False, out=None):
    """Rotate queries or keys: ``x * cos + rotate(x) * sin`` on the first ``cos.shape[-1]`` features.

    Parameters
    ----------
    x : array
        Real floating, shape ``(..., D)``: e.g. ``(batch, seq, heads, D)`` or
        ``(batch, heads, seq, D)``.
    cos, sin : array
        Tables from :func:`rope_cos_sin`, shape ``(..., R)`` with ``R`` even and ``R <= D``,
        broadcastable to ``x[..., :R]`` (insert the heads axis yourself:
        ``cos[:, :, None, :]`` for ``(batch, seq, heads, D)``). ``R < D`` is partial rotary:
        features ``R:`` pass through unchanged.
    layout : {"half", "interleaved"}, optional
        ``"half"`` rotates pairs ``(x_i, x_{i+R/2})`` (GPT-NeoX, LLaMA ``rotate_half``);
        ``"interleaved"`` pairs ``(x_{2i}, x_{2i+1})`` (GPT-J ``rotate_every_two``, RoFormer).
    inverse : bool, optional
        Rotate back (the transpose: ``-sin``); also the backward pass of the rotation.
    out : array, optional
        Receives the result: ``x``'s shape and dtype; ``out=x`` rotates in place. Not for
        immutable arrays (JAX), read-only or expanded (zero-stride) arrays. An ``out`` that
        overlaps the inputs otherwise (``x`` at an offset, ``cos``, ``sin``) is filled from a
        temporary.

    Returns
    -------
    array
        The rotated ``x`` (``out`` when given), of ``x``'s dtype, namespace and device.

    Raises
    ------
    TypeError
        Non-arrays, arrays of different libraries, non-floating ``x``/``cos``/``sin``,
        ``inverse`` not a bool, ``out`` on JAX.
    ValueError
        Unknown ``layout``; ``cos`` and ``sin`` of different shapes; ``R`` odd, zero or wider
        than ``x``; tables that do not broadcast to ``x[..., :R]``; ``out`` of the wrong shape
        or dtype, read-only, or with a zero stride.

    Notes
    -----
    The arithmetic promotes ``x`` with the tables (float16 ``x`` with float32 tables computes in
    float32) and rounds once to ``x.dtype``. Without ``out`` nothing is written in place, so
    gradients flow on torch and JAX.
    Backend support: the compiled kernel for NumPy arrays and torch CPU tensors without grad
    (float16, bfloat16, float32, float64 ``x``; tables of another float type are converted once
    and the result rounded once), CUDA kernels for CuPy arrays and CUDA torch tensors, and Dask
    arrays with NumPy chunks one task per chunk of rows on those kernels (``out`` then names the
    lazy result: Dask arrays are not written in place). Every other namespace, and inputs the
    kernels decline (neg/conj views, unaligned or byte-swapped memory, strides that are not
    whole elements), take the generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(4)
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(5), inv)
    >>> q = np.ones((5, 2, 4))                      # (seq, heads, dim)
    >>> qr = arrpos.apply_rope(q, cos[:, None, :], sin[:, None, :])
    >>> np.allclose(np.linalg.norm(qr, axis=-1), 2.0)
    True
    >>> back = arrpos.apply_rope(qr, cos[:, None, :], sin[:, None, :], inverse=True)
    >>> np.allclose(back, q)
    True
    """
    # everything checked, and the kernel chosen, depend only on the signature: decided once
    try:
        plan = _APPLY_PLANS.get(key := (array_key(x), array_key(cos), array_key(sin),
                                        array_key(out), layout, inverse, type(inverse)))
    except (AttributeError, TypeError):  # not arrays, or unhashable options: checked in full
        plan = key = None
    if plan is None:
        plan = remember(_APPLY_PLANS, key, _apply_plan(x, cos, sin, layout, inverse, out))
    xp, served = plan
    if out is not None:
        check_out_memory(out)  # (one that overlaps the inputs: _dispatch's rule)
    return _dispatch.run(served, "apply_rope", xp, None, x, cos, sin, arrays=(x, cos, sin, out),
                         layout=layout, inverse=inverse, out=out)


def _check_cached_args(xp, x, cos_cache, sin_cache, position_ids, layout, inverse, out):
    """The shape and kind checks of :func:`apply_rope_cached` (values are checked apart)."""
    for name, a in (("x", x), ("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        check_array(xp, a, name, kind="floating")
    check_array(xp, position_ids, "position_ids", kind="integer")
    _check_layout_inverse(layout, inverse)
    if x.ndim < 1:
        raise ValueError("x must have shape (..., dim), got a 0-d array")
    if tuple(cos_cache.shape) != tuple(sin_cache.shape):
        raise ValueError(f"cos_cache and sin_cache must have the same shape, got "
                         f"{tuple(cos_cache.shape)} and {tuple(sin_cache.shape)}")
    if cos_cache.ndim != 2 or 0 in tuple(cos_cache.shape):
        raise ValueError(f"cos_cache must have shape (max_positions, rotary_dim // 2) with both "
                         f"> 0, got {tuple(cos_cache.shape)}")
    r, d = 2 * cos_cache.shape[1], x.shape[-1]
    if r > d:
        raise ValueError(f"2 * cos_cache.shape[1] = {r} (the rotary width) is wider than x "
                         f"(x.shape[-1] = {d}); the rotary width must be <= the head dim")
    if not _broadcastable_into(tuple(position_ids.shape), tuple(x.shape[:-1])):
        raise ValueError(
            f"position_ids of shape {tuple(position_ids.shape)} do not broadcast to x.shape[:-1] "
            f"= {tuple(x.shape[:-1])}; insert the heads axis (e.g. ids[:, :, None] for x of "
            "shape (batch, seq, heads, dim), ids[:, None, :] for (batch, heads, seq, dim))"
        )
    _check_out(xp, x, out)


def _check_ids_in_range(xp, position_ids, max_positions):
    """Eager arrays only (reading a lazy one would compute it): ``0 <= id < max_positions``."""
    if is_lazy(position_ids) or position_ids.size == 0:
        return
    ids = position_ids
    if ids.dtype != xp.int64 and ids.dtype != xp.int32:  # torch compares few unsigned dtypes
        ids = xp.astype(ids, xp.int64)  # (an unsigned id past int64 wraps: negative, refused)
    if bool(xp.all((ids >= 0) & (ids < max_positions))):
        return
    lo, hi = int(xp.min(ids)), int(xp.max(ids))
    bad = lo if lo < 0 else hi
    if bad < 0 and xp.isdtype(position_ids.dtype, "unsigned integer"):
        bad += 2**64
    raise ValueError(f"position_ids must be in [0, max_positions) = [0, {max_positions}) "
                     f"(max_positions = cos_cache.shape[0]), got {bad}")


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, /, *, layout="half", inverse=False,
                      out=None):
    """Rotate ``x`` by half-width cos/sin caches gathered at ``position_ids`` (ONNX form).

    Equal to ``apply_rope(x, full(cos_cache[position_ids]), full(sin_cache[position_ids]))``
    where ``full`` widens a half-width table to ``layout`` (``[c | c]`` or each value twice),
    without the caller gathering and widening: the form of ONNX ``RotaryEmbedding`` (opset 23)
    and ONNX Runtime's ``com.microsoft.RotaryEmbedding``, and one call per decode step.

    Parameters
    ----------
    x : array
        Real floating, shape ``(..., D)``.
    cos_cache, sin_cache : array
        Real floating, shape ``(max_positions, R/2)`` with ``R <= D``: rows of
        ``rope_cos_sin(arange(max_positions), inv_freq)[..., :R/2]`` or any caller-made cache.
        Features ``R:`` of ``x`` pass through (partial rotary, ONNX ``rotary_embedding_dim``).
    position_ids : array
        Integer, broadcasting against ``x.shape[:-1]``: insert the heads axis yourself
        (``(batch, seq, 1)`` for ``x`` ``(batch, seq, heads, D)``, ``(batch, 1, seq)`` for
        ``(batch, heads, seq, D)``).
    layout : {"half", "interleaved"}, optional
        Pairs ``(x_i, x_{i+R/2})`` or ``(x_{2i}, x_{2i+1})`` (ONNX ``interleaved=1``).
    inverse : bool, optional
        Rotate back (``-sin``).
    out : array, optional
        Receives the result: ``x``'s shape and dtype; ``out=x`` rotates in place. Not for
        immutable arrays (JAX). An ``out`` that overlaps the inputs otherwise (``x`` at an
        offset, the caches, the ids) is filled from a temporary.

    Returns
    -------
    array
        The rotated ``x`` (``out`` when given), of ``x``'s dtype, namespace and device.

    Raises
    ------
    TypeError
        Non-arrays, arrays of different libraries, non-floating ``x`` or caches, non-integer
        ``position_ids``, ``inverse`` not a bool, ``out`` on JAX.
    ValueError
        Unknown ``layout``; caches of different shapes, not 2-D or empty; ``R`` wider than
        ``x``; ``position_ids`` that do not broadcast to ``x.shape[:-1]``; ids outside
        ``[0, max_positions)`` (eager arrays); ``out`` of the wrong shape or dtype.

    Notes
    -----
    The arithmetic promotes ``x`` with the caches and rounds once to ``x.dtype``; the generic
    code does the same operations as :func:`apply_rope` on the widened tables (a compiled
    kernel may fuse multiply-adds: the last bit can differ). The shape checks run once per
    argument signature; the id range is read on every call of an eager array (Dask arrays and
    JAX tracers are not read: an id outside the cache is then clamped by the gather, as
    ``take`` does on that backend).
    Mapping from ONNX (``docs/coming-from-rope.md``): ONNX's 4-D input is
    ``(batch, heads, seq, D)`` and its ids ``(batch, seq)``, so pass ``ids[:, None, :]``.
    Backend support: one fused gather-and-rotate kernel for NumPy arrays and torch CPU tensors
    without grad (the gathered tables are never materialised), CUDA kernels for CuPy arrays and
    CUDA torch tensors, Dask arrays with NumPy chunks one task per chunk on those kernels; every
    other namespace the generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(8)
    >>> cos, sin = arrpos.rope_cos_sin(64, inv)            # (64, 8), half layout
    >>> cos_cache, sin_cache = cos[:, :4], sin[:, :4]      # ONNX's half-width caches
    >>> x = np.ones((2, 3, 4, 8))                           # (batch, seq, heads, dim)
    >>> ids = np.array([[0, 1, 2], [10, 11, 12]])          # (batch, seq)
    >>> y = arrpos.apply_rope_cached(x, cos_cache, sin_cache, ids[:, :, None])
    >>> ref = arrpos.apply_rope(x, cos[ids][:, :, None], sin[ids][:, :, None])
    >>> bool(np.allclose(y, ref, rtol=0, atol=1e-15))
    True
    """
    # a decode step repeats one signature: its checks and kernel choice are made once
    try:
        plan = _CACHED_PLANS.get(key := (array_key(x), array_key(cos_cache),
                                         array_key(sin_cache), array_key(position_ids),
                                         array_key(out), layout, inverse, type(inverse)))
    except (AttributeError, TypeError):  # not arrays, or unhashable options: checked in full
        plan = key = None
    if plan is None:
        plan = remember(_CACHED_PLANS, key, _cached_plan(x, cos_cache, sin_cache, position_ids,
                                                         layout, inverse, out))
    xp, served = plan
    check_out_memory(out)
    check = lambda: _check_ids_in_range(xp, position_ids, cos_cache.shape[0])  # noqa: E731
    try:  # the ids are read here only when the serving kernel does not check them itself
        return _gather_rotate(served, xp, check, x, cos_cache, sin_cache, position_ids, layout,
                              inverse, out)
    except ValueError:
        check()  # a kernel rejected an id: name it
        raise


def _gather_rotate(served, xp, check, x, cos_cache, sin_cache, ids, layout, inverse, out):
    """``apply_rope_cached`` along a memoised route (``_dispatch.route``), through the kernel
    bound to the signature where there is one: nothing decided again, no keywords passed on."""
    if served is not None and served[2] is not None:
        try:
            return served[2](x, cos_cache, sin_cache, ids, out)
        except _dispatch.Unsupported:  # (strides its kernel does not take) the general route
            pass
    return _dispatch.run(served, "apply_rope_cached", xp, check, x, cos_cache, sin_cache, ids,
                         arrays=(x, cos_cache, sin_cache, ids, out), layout=layout,
                         inverse=inverse, out=out)


def _cached_plan(x, cos_cache, sin_cache, position_ids, layout, inverse, out):
    """What :func:`apply_rope_cached` decides from its signature: ``(xp, route)``."""
    xp = array_namespace(x, cos_cache, sin_cache, position_ids, out,
                         name="x, cos_cache, sin_cache, position_ids and out")
    _check_cached_args(xp, x, cos_cache, sin_cache, position_ids, layout, inverse, out)
    return xp, _dispatch.route("apply_rope_cached", xp,
                               (x, cos_cache, sin_cache, position_ids, out), layout=layout,
                               inverse=inverse, out=out)


def _check_pair(out):
    """``out`` of :func:`apply_rope_qk`: None or a pair ``(q_out, k_out)`` (each may be None)."""
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be None or a pair (q_out, k_out), got "
                        f"{type(out).__name__}")
    return out[0], out[1]


def apply_rope_qk(q, k, cos, sin, /, *, layout="half", inverse=False, out=None):
    """Rotate queries and keys together: ``(apply_rope(q, cos, sin), apply_rope(k, cos, sin))``.

    transformers' ``apply_rotary_pos_emb(q, k, cos, sin)`` in one call. ``q`` and ``k`` may
    differ in their heads axis (grouped-query / multi-query attention) and in dtype; ``cos``
    and ``sin`` must broadcast to both.

    Parameters
    ----------
    q, k : array
        Real floating, shape ``(..., D)`` each (e.g. ``(batch, heads, seq, D)`` and
        ``(batch, kv_heads, seq, D)``).
    cos, sin : array
        Tables from :func:`rope_cos_sin`, ``(..., R)``, ``R`` even and ``<= D``, broadcasting to
        ``q[..., :R]`` and ``k[..., :R]`` (``cos[:, None]`` for ``(batch, heads, seq, D)``).
    layout : {"half", "interleaved"}, optional
        As :func:`apply_rope`.
    inverse : bool, optional
        Rotate back.
    out : pair of arrays, optional
        ``(q_out, k_out)``, each like ``out`` of :func:`apply_rope` (``(q, k)`` rotates both in
        place) or None for a new array. Not for immutable arrays (JAX). An output over the
        other tensor (``(k, q)``, ``(k, None)``) receives its result once both are made; the two
        outputs must not overlap each other.

    Returns
    -------
    q_rot, k_rot : array
        The rotated ``q`` and ``k``, each of its own input's dtype.

    Raises
    ------
    TypeError
        As :func:`apply_rope`, naming ``q`` or ``k``; ``out`` not a pair.
    ValueError
        As :func:`apply_rope`, naming ``q`` or ``k``; ``out[0]`` and ``out[1]`` that share
        memory.

    Notes
    -----
    One validation (memoised per argument signature) and one dispatch for both tensors.
    Backend support: as :func:`apply_rope`, both tensors in one adapter call.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv, _ = arrpos.rope_frequencies(8)
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(5), inv)
    >>> q = np.ones((1, 4, 5, 8))                      # (batch, heads, seq, dim)
    >>> k = np.ones((1, 2, 5, 8))                      # two kv heads (GQA)
    >>> qr, kr = arrpos.apply_rope_qk(q, k, cos[None, None], sin[None, None])
    >>> qr.shape, kr.shape
    ((1, 4, 5, 8), (1, 2, 5, 8))
    >>> bool(np.allclose(kr, arrpos.apply_rope(k, cos[None, None], sin[None, None])))
    True
    """
    q_out, k_out = _check_pair(out)
    pair = None if out is None else (q_out, k_out)
    try:
        plan = _QK_PLANS.get(key := (array_key(q), array_key(k), array_key(cos), array_key(sin),
                                     array_key(q_out), array_key(k_out), layout, inverse,
                                     type(inverse)))
    except (AttributeError, TypeError):  # not arrays, or unhashable options: checked in full
        plan = key = None
    if plan is None:
        plan = remember(_QK_PLANS, key, _qk_plan(q, k, cos, sin, layout, inverse, q_out, k_out,
                                                 pair))
    xp, served = plan
    check_out_memory(q_out, "out[0]")
    check_out_memory(k_out, "out[1]")
    return _dispatch.run(served, "apply_rope_qk", xp, None, q, k, cos, sin,
                         arrays=(q, k, cos, sin, q_out, k_out), layout=layout,
                         inverse=inverse, out=pair)


def _qk_plan(q, k, cos, sin, layout, inverse, q_out, k_out, pair):
    """What :func:`apply_rope_qk` decides from its signature: ``(xp, route)``."""
    xp = array_namespace(q, k, cos, sin, q_out, k_out, name="q, k, cos, sin and out")
    _check_apply_args(xp, q, cos, sin, layout, inverse, q_out, out_name="out[0]", x_name="q")
    _check_apply_args(xp, k, cos, sin, layout, inverse, k_out, out_name="out[1]", x_name="k")
    return xp, _dispatch.route("apply_rope_qk", xp, (q, k, cos, sin, q_out, k_out),
                               layout=layout, inverse=inverse, out=pair)


@functools.lru_cache(maxsize=64)
def _xpos_rates(dim: int, scale_base: float) -> np.ndarray:
    """``ln(zeta_i) / scale_base``, ``zeta_i = (2i/dim + 0.4) / 1.4``, correctly rounded."""
    with localcontext() as ctx:
        ctx.prec = 40
        rates = [((Decimal(2 * i) / dim + Decimal("0.4")) / Decimal("1.4")).ln()
                 / Decimal(scale_base) for i in range(dim // 2)]
    out = np.array([float(r) for r in rates], dtype=np.float64)
    out.flags.writeable = False
    return out


def xpos_scale(positions, /, dim, *, scale_base=512.0, layout="half", dtype=None):
    """The xPos scale (Sun et al. 2022): ``zeta_i ** (p / scale_base)``, full width.

    ``zeta_i = (2i/dim + 0.4) / 1.4`` for ``i < dim/2``, laid out like the cos/sin tables
    (``"half"``: ``[s | s]``, ``"interleaved"``: each twice). Queries use
    ``apply_rope(q, cos * s, sin * s)`` and keys ``apply_rope(k, cos / s, sin / s)``, so the
    score of a query at ``m`` and a key at ``n`` decays as ``zeta ** ((m - n) / scale_base)``.

    Parameters
    ----------
    positions : int or array
        An int ``n`` (positions ``0 .. n-1``) or an integer or real array of any shape ``P``,
        used as given: centre them yourself (see Notes).
    dim : int
        Rotary width (even).
    scale_base : float, optional
        ``xpos_scale_base`` (rotary-embedding-torch), ``scale_base`` (x-transformers); > 0.
    layout : {"half", "interleaved"}, optional
        Layout of the table (rotary-embedding-torch and x-transformers use "interleaved").
    dtype : dtype, optional
        Real floating output dtype (default: that of real positions, else the namespace's
        default float).

    Returns
    -------
    array
        Shape ``P + (dim,)``, in the namespace and on the device of ``positions``.

    Raises
    ------
    TypeError
        ``positions`` not an int or a real array, ``dim`` not an int, ``dtype`` not real
        floating.
    ValueError
        ``dim`` odd or < 2, ``scale_base`` not finite and positive, unknown ``layout``,
        non-finite positions, or (eager arrays) a position so far from 0 that the scale or its
        reciprocal overflows ``dtype``: ``|p| * ln(1.4 / 0.4) / scale_base`` must stay below
        ``ln(finfo(dtype).max)`` (``|p| < 36,000`` for float32 with ``scale_base=512``).

    Notes
    -----
    The exponent ``p * ln(zeta_i) / scale_base`` is formed exactly (float64, or a float32 pair
    where the device lacks float64), so the scale carries the error of one ``exp``.
    Centring: rotary-embedding-torch's ``get_scale`` uses ``p - len(p) // 2`` and
    x-transformers ``p - (max(p) + 1) // 2``: the same for ``p = arange(n)``; pass
    ``positions - n // 2`` to reproduce them. rotary-embedding-torch's
    ``rotate_queries_with_cached_keys`` centres the queries by their own length and the keys by
    theirs, so a query and a key at the same position get different scales when
    ``q_len != k_len``; centre both with the same offset instead.
    Backend support: the generic Array API code on every namespace.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> s = arrpos.xpos_scale(np.array([-512.0, 0.0, 512.0]), 4)
    >>> np.round(s, 6).tolist()                    # zeta = (0.4/1.4, 0.9/1.4), each twice
    [[3.5, 1.555556, 3.5, 1.555556], [1.0, 1.0, 1.0, 1.0], [0.285714, 0.642857, 0.285714, 0.642857]]
    """
    xp = array_namespace(positions, name="positions")
    pos = as_positions(xp, positions, "positions")
    dim = check_even_dim(dim, "dim")
    scale_base = check_real_scalar(scale_base, "scale_base", positive=True)
    layout = check_choice(layout, "layout", _LAYOUTS)
    dev = device_of(pos)
    dtype = output_dtype(xp, pos, dtype, device=dev)
    pos = check_positions(xp, pos, "positions")
    rates = _xpos_rates(dim, scale_base)
    if not is_lazy(pos) and pos.size:
        limit = math.log(float(finfo(xp, dtype).max)) / abs(float(rates[0]))
        big = float(xp.max(xp.abs(pos)))
        if big >= limit:
            raise ValueError(f"positions must satisfy |positions| < {limit:.6g} for xpos_scale "
                             f"in {dtype} with scale_base={scale_base} (the scale or its "
                             f"reciprocal overflows past it), got {big}; centre the positions")
    return _dispatch.call("xpos_scale", xp, pos, rates, arrays=(pos,), layout=layout,
                          dtype=dtype)


# ---- RoPE.apply's half-width cos/sin caches (decode from positions: one fused call) ------
#
# A cache (_Tables) holds rows 0 .. rows-1 of the exact tables of ``RoPE.cos_sin`` (the very
# code of the table path), cut to their first R/2 columns, for one namespace, device, dtype and
# (seq-dependent scalings) frequency set. ``rows`` is a power of two >= _MIN_ROWS that grows by
# doubling to cover the largest position seen; a cache is never written after it is made
# (growth makes a new one).
# Ownership: each RoPE holds its caches in its own ``_tables`` dict (the decode step's one
# lookup), so a dropped RoPE frees them. _SHARED finds, by the RoPE's fields, a cache an equal
# RoPE built (layers that each make their own RoPE share one) through weak references, and
# bounds memory: at most _MAX_ENTRIES caches live, each at most _MAX_CACHE_BYTES (farther
# positions take the table path); the oldest is taken from every RoPE holding it.
# Threads (free-threaded Python included): a hit is one dict.get and takes no lock; a build
# runs unlocked (threads racing on a miss may each build one: the first stored is used); every
# write to _SHARED, _SEEN, a cache's holders or a RoPE's _tables happens under _LOCK, and only
# code holding _LOCK iterates them. No weakref callbacks (they run inside any allocation, even
# one made under the lock): dead references are pruned under the lock.
_MIN_ROWS = 1024
_MAX_CACHE_BYTES = 64 << 20
_MAX_ENTRIES = 16
_LOCK = threading.Lock()
_SHARED: dict = {}  # (RoPE fields, sub key) -> weakref to its _Tables, oldest first
_SEEN: set = set()  # seq-dependent frequency keys met once (a cache is built on the second)


class _Tables:
    """One half-width cache: ``rows``, ``cos`` and ``sin`` (never written once made), ``sub``
    (its key in the holders' ``_tables``: namespace id, device, dtype, frequency key) and
    ``holders`` (weak references to the RoPEs holding it)."""

    __slots__ = ("rows", "cos", "sin", "sub", "holders", "__weakref__")

    def __init__(self, rows, cos, sin, sub):
        self.rows, self.cos, self.sin, self.sub, self.holders = rows, cos, sin, sub, []


@functools.lru_cache(maxsize=256)
def _frequency_key(rotary_dim, base, scaling, seq_len):
    """What a seq-dependent scaling's tables depend on: its frequencies at ``seq_len`` (keyed by
    the RoPE's fields, not the RoPE, so that the memo keeps no dropped RoPE alive)."""
    inv, att = _host_frequencies(rotary_dim, base, scaling, seq_len)
    return inv.tobytes(), float(att)


def _id_range_of(xp, pos):
    """A function giving the smallest and largest id of eager, non-empty integer arrays shaped
    like ``pos`` (one element read as is; the arrays' own reductions where they have them,
    cheaper than the namespace's wrappers)."""
    if math.prod(pos.shape) == 1:
        first = (0,) * pos.ndim

        def one(p):
            v = int(p[first])
            return v, v

        return one
    if pos.dtype != xp.int64 and pos.dtype != xp.int32 and not isinstance(pos, np.ndarray):
        wide = xp.int64  # torch reduces few unsigned dtypes (past int64: negative, table path)
        return lambda p: (int(xp.min(xp.astype(p, wide))), int(xp.max(xp.astype(p, wide))))
    if callable(getattr(pos, "min", None)) and callable(getattr(pos, "max", None)):
        return lambda p: (int(p.min()), int(p.max()))
    return lambda p: (int(xp.min(p)), int(xp.max(p)))


def _cached_entry(rope, xp, dev, dtype, fkey=None):
    """The cache (``_Tables``) ``rope`` holds now for these, or None."""
    return rope._tables.get((id(xp), dev, dtype, fkey))


def _cache_for(rope, xp, dev, dtype, hi, seq_len):
    """``(cos_cache, sin_cache)`` of ``rope`` covering ids ``0 .. hi``, or None (table path)."""
    fkey = None
    if rope.scaling is not None and rope.scaling.seq_dependent:
        fkey = _frequency_key(rope.rotary_dim, rope.base, rope.scaling,
                              hi + 1 if seq_len is None else seq_len)
    sub = (id(xp), dev, dtype, fkey)
    hit = rope._tables.get(sub)
    if hit is None or hi >= hit.rows:
        hit = _cache_miss(rope, xp, dev, dtype, hi, seq_len, sub)
        if hit is None:
            return None
    return hit.cos, hit.sin


def _cache_miss(rope, xp, dev, dtype, hi, seq_len, sub):
    """An equal RoPE's cache covering ``hi``, else a new one (stored), else None."""
    key = (rope._fields(), sub)
    with _LOCK:
        hit = _shared_hit(rope, key, hi)
        if hit is not None:
            return hit
        if sub[3] is not None and key not in _SEEN:  # dynamic NTK: new frequencies every step
            if len(_SEEN) >= 4096:
                _SEEN.clear()
            _SEEN.add(key)
            return None
    made = _build_cache(rope, xp, dev, dtype, hi, seq_len, sub)
    if made is None:
        return None
    with _LOCK:
        hit = _shared_hit(rope, key, hi)  # another thread stored one meanwhile: use it
        if hit is not None:
            return hit
        old = _SHARED.pop(key, None)
        old = None if old is None else old()
        for k in [k for k, ref in _SHARED.items() if ref() is None]:  # died with their RoPEs
            del _SHARED[k]
        while len(_SHARED) >= _MAX_ENTRIES:
            _evict(_SHARED.pop(next(iter(_SHARED)))())
        _SHARED[key] = weakref.ref(made)
        _hold(rope, made)
        if old is not None:  # grown: the equal RoPEs holding the smaller cache take this one
            for ref in old.holders:
                other = ref()
                if other is not None and other._tables.get(sub) is old:
                    _hold(other, made)
    return made


def _shared_hit(rope, key, hi):
    """Under _LOCK: the live cache stored under ``key`` if it covers ``hi`` (``rope`` then
    holds it too), else None."""
    ref = _SHARED.get(key)
    hit = None if ref is None else ref()
    if hit is None or hi >= hit.rows:
        return None
    if rope._tables.get(hit.sub) is not hit:
        _hold(rope, hit)
    return hit


def _hold(rope, tables):
    """Under _LOCK: ``rope`` holds ``tables`` (and the dead holders are forgotten)."""
    tables.holders = [r for r in tables.holders if r() is not None and r() is not rope]
    tables.holders.append(weakref.ref(rope))
    rope._tables[tables.sub] = tables


def _evict(tables):
    """Under _LOCK: every RoPE holding ``tables`` lets it go (its memory is then freed)."""
    if tables is None:
        return
    for ref in tables.holders:
        rope = ref()
        if rope is not None and rope._tables.get(tables.sub) is tables:
            del rope._tables[tables.sub]
    tables.holders = []


def _build_cache(rope, xp, dev, dtype, hi, seq_len, sub):
    """A new ``_Tables`` from the table path, or None when too large."""
    rows = max(_MIN_ROWS, 1 << hi.bit_length())  # a power of two > hi
    half = rope.rotary_dim // 2
    if 2 * rows * half * _itemsize(xp, dtype) > _MAX_CACHE_BYTES:
        return None
    if sub[3] is not None and seq_len is None:
        seq_len = hi + 1  # the seq_len whose frequencies the frequency key holds
    # Rows in an order where no block of 64 follows the one before it: a table kernel may
    # step from one block of consecutive rows to the next, and each row must be the one a
    # lone position gets (the decode step's table path), bit for bit.
    order = np.arange(rows).reshape(-1, 64)
    order = np.concatenate([order[0::2], order[1::2]]).reshape(-1)
    cos, sin = rope.cos_sin(xp.asarray(order, device=dev), dtype=dtype, seq_len=seq_len)
    cut = slice(0, half) if rope.layout == "half" else slice(0, 2 * half, 2)
    back = xp.asarray(np.argsort(order), device=dev)
    return _Tables(rows, xp.take(cos[:, cut], back, axis=0), xp.take(sin[:, cut], back, axis=0),
                   sub)


def _itemsize(xp, dtype):
    """Bytes per element of a floating ``dtype`` (ml_dtypes' bfloat16 included, which the
    namespace's ``finfo`` does not know)."""
    try:
        return xp.finfo(dtype).bits // 8
    except (AttributeError, TypeError, ValueError):
        return np.dtype(dtype).itemsize


def clear_caches():
    """Free every cache arrpos keeps between calls.

    The decode caches of every :class:`RoPE` (:meth:`RoPE.clear_cache` frees one RoPE's), the
    per-signature plans of :func:`apply_rope`, :func:`apply_rope_qk`,
    :func:`apply_rope_cached` and :meth:`RoPE.apply`, and the host-side frequency memos. All
    are rebuilt on next use; results do not change. Safe to call from any thread at any time.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> rope = arrpos.RoPE(8)
    >>> y = rope.apply(np.ones((1, 2, 8)), np.arange(2), heads_axis=None)  # caches made
    >>> arrpos.clear_caches()
    """
    with _LOCK:
        for ref in list(_SHARED.values()):
            _evict(ref())
        _SHARED.clear()
        _SEEN.clear()
    clear_memos()
    for memo in (_frequency_key, _xpos_rates):
        memo.cache_clear()
    _dispatch.clear_caches()


def _heads_axis(heads_axis, x):
    """:meth:`RoPE.apply`'s ``heads_axis`` counted from the end of ``x`` (None stays None), the
    one rule both paths use: an int naming an axis of ``x`` other than the last."""
    if heads_axis is None:
        return None
    value = check_int(heads_axis, "heads_axis")
    ax = value - x.ndim if value >= 0 else value
    if not -x.ndim <= ax <= -2:
        allowed = (f"an int in [{-x.ndim}, {x.ndim - 2}]" if x.ndim >= 2 else
                   "None: it has no axis but the features")
        raise ValueError(f"heads_axis must name an axis of x other than the last ({allowed} "
                         f"for x of shape {tuple(x.shape)}), got {heads_axis}")
    return ax


def _check_fit(rope, x, positions, heads_axis, ax):
    """:meth:`RoPE.apply`'s shape checks, in the caller's terms (``x``, ``positions``,
    ``heads_axis``): the rotary width fits ``x``, and ``positions`` (its coordinate axis aside)
    broadcast to ``x``'s shape without the heads and feature axes. Returns how many leading
    length-1 axes ``positions`` needs for the heads axis to be inserted into it (positions with
    fewer axes than ``x`` has after its heads axis, e.g. a 0-d one)."""
    if x.ndim < 1 or x.shape[-1] < rope.rotary_dim:
        raise ValueError(f"x must have shape (..., head_dim) with head_dim >= the rotary width "
                         f"{rope.rotary_dim} of {rope!r}, got x of shape {tuple(x.shape)}")
    shape = tuple(positions.shape)
    if rope.axes is not None:
        shape, what = shape[:-1], " (its trailing coordinate axis aside)"
    else:
        what = ""
    want = tuple(x.shape[:-1])
    after = 0 if ax is None else -ax - 2  # axes of x between its heads and feature axes
    if ax is not None:
        want = want[:x.ndim + ax] + want[x.ndim + ax + 1:]
    pad = max(after - len(shape), 0)
    shape = (1,) * pad + shape
    ids = shape if ax is None else shape[:len(shape) - after] + (1,) + shape[len(shape) - after:]
    if not _broadcastable_into(ids, tuple(x.shape[:-1])):
        raise ValueError(
            f"positions of shape {tuple(positions.shape)}{what} do not fit x of shape "
            f"{tuple(x.shape)} with heads_axis={heads_axis}: they must broadcast to x's shape "
            f"without its heads and feature axes, {want}")
    return pad


def _decode_plan(rope, x, positions, heads_axis, out):
    """Whether RoPE.apply may take the cache path for this signature: ``[xp, index that
    inserts the heads axis into the ids, device, id range function, route, id dtype]`` (the
    route is found on first use; the id dtype: None, or the namespace's index dtype for other
    integer types, which a kernel or ``min`` may not take), else False (the table path decides,
    and raises). Reads of ``rope`` only its rotary width (part of the memo's key)."""
    try:
        xp = array_namespace(x, positions, out, name="x, positions and out")
        check_array(xp, x, "x", kind="floating")
        check_array(xp, positions, "positions", kind="real")
        _check_out(xp, x, out)
        ax = _heads_axis(heads_axis, x)
        if dtype_kind(xp, positions.dtype) != "integral":
            return False
        if _check_fit(rope, x, positions, heads_axis, ax):  # leading axes to add: tables
            return False
    except (TypeError, ValueError):
        return False
    if (is_lazy(x) or is_lazy(positions) or not math.prod(positions.shape)
            or device_of(positions) != device_of(x)):
        return False
    index = None if ax is None else (...,) + (None,) + (slice(None),) * (-ax - 2)
    cast = None
    if positions.dtype not in (xp.int32, xp.int64):  # e.g. torch's uint16..64: no min/max
        cast = xp.__array_namespace_info__().default_dtypes(device=device_of(x))["indexing"]
    return [xp, index, device_of(x), _id_range_of(xp, positions), None, cast]


class RoPE:
    """Rotary embedding of one attention layer: frequencies, tables and application together.

    Parameters
    ----------
    head_dim : int
        Features per head.
    base : float, optional
        ``rope_theta``.
    scaling : RopeScaling, optional
        One of the scaling classes (None: the original RoPE).
    partial_rotary_factor : float, optional
        Rotate the first ``int(head_dim * partial_rotary_factor)`` features (even); the rest
        pass through.
    layout : {"half", "interleaved"}, optional
        ``"half"`` for LLaMA-family checkpoints, ``"interleaved"`` for GPT-J / RoFormer.
    axes : sequence of int, optional
        Multimodal RoPE: the coordinate each frequency turns with (:func:`mrope_axes`);
        positions then carry a trailing coordinate axis.
    inverse : bool, optional
        Rotate by ``-theta`` instead (``cos_sin`` gives ``-sin``): checkpoints trained with a
        ``rotate_half`` of flipped signs (NanoChat). ``apply(..., inverse=True)`` undoes it.
    attention_scale : float, optional
        A constant factor on the layer's softmax scale (DeepSeek's ``mscale_all_dim``:
        ``mscale(factor, mscale_all_dim) ** 2``); recorded for the caller, not applied by
        :meth:`apply`.
    position_scale : PositionScale, optional
        The per-position scale of the layer's queries (:meth:`query_scale`); recorded for the
        caller, not applied by :meth:`apply`.

    Notes
    -----
    Immutable and hashable (equal RoPEs share their decode caches); pickles and copies
    (``pickle``, ``copy``, ``deepcopy``: multiprocessing, dask.distributed) without its
    caches, which the copy rebuilds on use. Safe to share between threads.

    Attributes
    ----------
    rotary_dim : int
        Width of the rotated part, ``int(head_dim * partial_rotary_factor)``.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> rope = arrpos.RoPE(8, scaling=arrpos.LinearScaling(2.0))
    >>> rope
    RoPE(8, base=10000.0, scaling=LinearScaling(factor=2.0), partial_rotary_factor=1.0, layout='half')
    >>> q = np.ones((1, 3, 2, 8))                       # (batch, seq, heads, dim)
    >>> rope.apply(q, np.arange(3), heads_axis=-2).shape
    (1, 3, 2, 8)
    >>> cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
    ...        "rope_theta": 500000.0,
    ...        "max_position_embeddings": 131072,
    ...        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    >>> arrpos.RoPE.from_hf_config(cfg).scaling
    Llama3Scaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=8192)
    """

    # _tables: this RoPE's decode caches (never pickled, copied or compared); __weakref__: the
    # caches' holders lists refer to it weakly
    __slots__ = ("head_dim", "base", "scaling", "partial_rotary_factor", "layout", "axes",
                 "rotary_dim", "inverse", "attention_scale", "position_scale", "_tables",
                 "__weakref__")

    def __init__(self, head_dim, *, base=10000.0, scaling=None, partial_rotary_factor=1.0,
                 layout="half", axes=None, inverse=False, attention_scale=1.0,
                 position_scale=None):
        head_dim = check_positive_int(head_dim, "head_dim")
        attention_scale = check_real_scalar(attention_scale, "attention_scale", positive=True)
        if position_scale is not None and not isinstance(position_scale, PositionScale):
            raise TypeError(f"position_scale must be an arrpos.PositionScale or None, got "
                            f"{type(position_scale).__name__}")
        if not isinstance(inverse, bool):
            raise TypeError(f"inverse must be a bool, got {type(inverse).__name__} {inverse!r}")
        base = check_real_scalar(base, "base", positive=True)
        scaling = _check_scaling(scaling)
        prf = check_real_scalar(partial_rotary_factor, "partial_rotary_factor", positive=True)
        if prf > 1.0:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {prf}")
        rotary_dim = int(head_dim * prf)
        if rotary_dim < 2 or rotary_dim % 2 or rotary_dim > MAX_DIM:
            raise ValueError(
                f"int(head_dim * partial_rotary_factor) = int({head_dim} * {prf}) = {rotary_dim} "
                f"must be even, >= 2 and <= {MAX_DIM}"
            )
        layout = check_choice(layout, "layout", _LAYOUTS)
        if axes is not None:
            # the number of coordinates is known only with the positions (checked in cos_sin)
            axes = _check_axes(axes, rotary_dim // 2, float("inf"))
        for name, value in (("head_dim", head_dim), ("base", base), ("scaling", scaling),
                            ("partial_rotary_factor", prf), ("layout", layout), ("axes", axes),
                            ("rotary_dim", rotary_dim), ("inverse", inverse),
                            ("attention_scale", attention_scale),
                            ("position_scale", position_scale)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_tables", {})

    def __setattr__(self, name, value):
        raise AttributeError(f"RoPE is immutable; make a new one (cannot set {name})")

    def __repr__(self):
        extra = "" if self.axes is None else f", axes={self.axes}"
        extra += ", inverse=True" if self.inverse else ""
        extra += "" if self.attention_scale == 1.0 else f", attention_scale={self.attention_scale}"
        extra += "" if self.position_scale is None else f", position_scale={self.position_scale!r}"
        return (f"RoPE({self.head_dim}, base={self.base}, scaling={self.scaling!r}, "
                f"partial_rotary_factor={self.partial_rotary_factor}, layout={self.layout!r}"
                f"{extra})")

    def _fields(self):
        """What this RoPE is (every field but its caches): equality, hash, pickling."""
        return tuple(getattr(self, k) for k in _FIELDS)

    def __eq__(self, other):
        if not isinstance(other, RoPE):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self):
        return hash(self._fields())

    # pickle, copy.copy and copy.deepcopy (dask.distributed, multiprocessing, deepcopy of a
    # model): the fields travel, the device caches do not; the copy rebuilds them on use
    def __getstate__(self):
        return dict(zip(_FIELDS, self._fields()))

    def __setstate__(self, state):
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_tables", {})

    def query_scale(self, positions, /, *, dtype=None):
        """The per-position scale this layer's queries get (multiply the queries, or the
        attention logits, by it), or None when the model has none: what the config given to
        :meth:`from_hf_config` asks for (Ministral 3 / Mistral 4 ``llama_4_scaling_beta``;
        :func:`arrpos.position_scale` has the formulas). Shape ``positions.shape``.
        :attr:`attention_scale` is the constant factor on the softmax scale (DeepSeek's
        ``mscale_all_dim``)."""
        if self.position_scale is None:
            return None
        return self.position_scale(positions, dtype=dtype)

    def clear_cache(self):
        """Free this RoPE's decode caches (the half-width cos/sin tables :meth:`apply` keeps
        per namespace, device and dtype); they are rebuilt on next use. A dropped RoPE frees
        them by itself; :func:`arrpos.clear_caches` frees every RoPE's."""
        with _LOCK:
            self._tables.clear()

    def frequencies(self, seq_len=None, xp=None, *, dtype=None, device=None):
        """``(inv_freq, attention_factor)`` of :func:`rope_frequencies` for this layer."""
        return rope_frequencies(self.rotary_dim, base=self.base, scaling=self.scaling,
                                seq_len=seq_len, dtype=dtype, device=device, xp=xp)

    def cos_sin(self, positions, dtype=None, *, seq_len=None):
        """``(cos, sin)`` of :func:`rope_cos_sin` at ``positions``, shape ``P + (rotary_dim,)``.

        ``seq_len`` feeds the dynamic NTK and LongRoPE scalings; by default it is the largest
        position + 1 (read from the array: pass it explicitly for lazy arrays and under jit).
        The dtype defaults to that of real positions, else the namespace's default float.
        """
        xp = array_namespace(positions, name="positions")
        pos = as_positions(xp, positions, "positions")
        dev = device_of(pos)
        dtype = check_dtype_arg(xp, dtype, device=dev)
        if dtype is None:
            real = dtype_kind(xp, pos.dtype) == "real floating"  # bfloat16 of ml_dtypes too
            dtype = pos.dtype if real else output_dtype(xp, None, None, device=dev)
        if self.scaling is not None and self.scaling.seq_dependent and seq_len is None:
            seq_len = self._seq_len_from(xp, pos)
        cos, sin = self._cos_sin(xp, pos, dev, dtype, seq_len)
        return (cos, -sin) if self.inverse else (cos, sin)

    def _cos_sin(self, xp, pos, dev, dtype, seq_len):
        if has_float64(xp, dev):  # float64 frequencies: the angles are exact
            inv, att = self.frequencies(seq_len, xp, dtype=xp.float64, device=dev)
            return rope_cos_sin(pos, inv, layout=self.layout, attention_factor=att,
                                axes=self.axes, dtype=dtype)
        # No float64 here (JAX without x64): carry the host float64 frequencies as a float32
        # pair hi + lo, or the angles would be those of float32-rounded frequencies (1e-4 rad
        # off at position 3000).
        inv64, att = _host_frequencies(self.rotary_dim, self.base, self.scaling, seq_len)
        w_hi, w_lo = _dispatch.call("frequency_arrays", xp, inv64, None, device=dev)
        xp, pos, _, layout, att, axes, dtype = _table_args(pos, w_hi, self.layout, att,
                                                           self.axes, dtype)
        return _dispatch.call("rope_cos_sin_pair", xp, pos, w_hi, w_lo, arrays=(pos,),
                              layout=layout, attention_factor=att, axes=axes, dtype=dtype)

    @staticmethod
    def _seq_len_from(xp, pos):
        if is_lazy(pos):
            raise ValueError(
                "seq_len is needed for a sequence-dependent scaling (dynamic NTK, LongRoPE) with "
                "lazy positions (Dask, or JAX under jit): pass seq_len=max position + 1"
            )
        if not math.prod(pos.shape):  # (torch's .size is a method)
            return 1
        pos = detached(pos)
        if dtype_kind(xp, pos.dtype) == "integral" and pos.dtype not in (xp.int32, xp.int64):
            # torch has no max for uint16/32/64: read it in the index dtype (values past it
            # are refused by the positions' range check all the same)
            index = xp.__array_namespace_info__().default_dtypes(device=device_of(pos))
            pos = xp.astype(pos, index["indexing"])
        return max(int(xp.max(pos)) + 1, 1)

    def apply(self, x, positions, *, heads_axis, inverse=False, out=None, seq_len=None):
        """Rotate ``x`` at ``positions``.

        Parameters
        ----------
        x : array
            ``(..., seq, heads, head_dim)`` with ``heads_axis=-2`` (``(batch, seq, heads,
            dim)``), ``(..., heads, seq, head_dim)`` with ``heads_axis=-3`` (transformers'
            ``(batch, heads, seq, dim)``), or no heads axis with ``heads_axis=None``.
        positions : int or array
            Positions of the tokens of ``x``: shape ``x.shape`` without the heads and feature
            axes, or any shape broadcasting to it (e.g. ``(seq,)``); multimodal: plus a
            trailing coordinate axis.
        heads_axis : int or None
            Required: the axis of ``x`` holding the heads (negative, counted from the end, or
            positive), or None. There is no default because a guessed layout is silently
            wrong when ``heads == seq``.
        inverse, out : optional
            As :func:`apply_rope`.
        seq_len : int, optional
            As :meth:`cos_sin`.

        Returns
        -------
        array
            The rotated ``x`` (``out`` when given), of ``x``'s dtype, namespace and device.

        Raises
        ------
        TypeError
            ``x`` not a floating array (16-bit included), ``positions`` not an int or a real
            array of ``x``'s library, ``heads_axis`` not an int or None.
        ValueError
            ``heads_axis`` naming no axis of ``x`` but the last; ``x`` narrower than the rotary
            width; ``positions`` that do not broadcast to ``x``'s shape without its heads and
            feature axes; positions past the accuracy range; ``out`` as in
            :func:`apply_rope`. Messages name ``x``, ``positions``, ``heads_axis`` and shapes.

        Notes
        -----
        Integer positions (eager arrays) are served from half-width cos/sin caches kept per
        namespace, device and dtype (and per frequency set for the dynamic NTK and LongRoPE
        scalings), made by :meth:`cos_sin` itself so each row is what the table path gives a
        lone position; a step is then one :func:`apply_rope_cached` call. A cache holds a
        power of two >= 1024 rows covering the largest position seen, doubling as positions
        grow, at most 64 MiB (farther positions take the table path); at most 16 caches live
        in the process (the oldest is dropped). The caches belong to the RoPE, shared with
        equal RoPEs, and are freed with the last of them, by :meth:`clear_cache` or by
        :func:`arrpos.clear_caches`; threads may share a RoPE. Real, negative, lazy positions
        and multimodal ``axes`` take the table path.
        """
        y = self._decode(x, positions, heads_axis, inverse, out, seq_len)
        if y is not None:  # integer positions: one gather-and-rotate from the cached tables
            return y
        xp = array_namespace(x, name="x")
        check_array(xp, x, "x", kind="floating")
        ax = _heads_axis(heads_axis, x)
        if not hasattr(positions, "shape"):
            positions = as_positions(xp, positions, "positions", device=device_of(x))
        else:  # tables made from positions of another library could not rotate x
            array_namespace(x, positions, name="x and positions")
        pad = _check_fit(self, x, positions, heads_axis, ax)  # named in the caller's terms
        if pad:
            positions = xp.reshape(positions, (1,) * pad + tuple(positions.shape))
        cos, sin = self.cos_sin(positions, dtype=x.dtype, seq_len=seq_len)
        if ax is not None:
            # a length-1 heads axis at the same place counted from the end
            cos = xp.expand_dims(cos, axis=cos.ndim + ax + 1)
            sin = xp.expand_dims(sin, axis=sin.ndim + ax + 1)
        return apply_rope(x, cos, sin, layout=self.layout, inverse=inverse, out=out)

    def _decode(self, x, positions, heads_axis, inverse, out, seq_len):
        """:meth:`apply` as one gather-and-rotate from this RoPE's cache (``_cache_for``), or
        None where the table path serves (and raises): multimodal axes, non-integer, lazy,
        empty or negative positions, anything :meth:`apply` would reject, caches past the size
        limit. What depends only on the types, shapes and dtypes is decided once per
        signature (``_decode_plan``)."""
        if self.axes is not None or type(inverse) is not bool or (
                seq_len is not None and (type(seq_len) is not int or seq_len < 1)):
            return None
        try:
            plan = _DECODE_PLANS.get(key := (array_key(x), array_key(positions), heads_axis,
                                             type(heads_axis), array_key(out), self.layout,
                                             inverse, self.rotary_dim))
        except (AttributeError, TypeError):  # not arrays, or unhashable: the table path says
            return None
        if plan is None:
            plan = remember(_DECODE_PLANS, key, _decode_plan(self, x, positions, heads_axis,
                                                             out))
        if not plan:
            return None
        xp, index, dev, id_range, served, cast = plan
        if cast is not None:
            positions = xp.astype(positions, cast)
        ids = positions if index is None else positions[index]
        check_out_memory(out)
        if served is not None and served[1] and (self.scaling is None
                                                 or not self.scaling.seq_dependent):
            # a kernel that checks the ids: try the cache as it is before reading the ids here
            hit = _cached_entry(self, xp, dev, x.dtype)
            if hit is not None:
                try:
                    return _gather_rotate(served, xp, None, x, hit.cos, hit.sin, ids,
                                          self.layout, inverse, out)
                except ValueError:
                    pass  # an id past the cache (grown below) or negative (the table path)
        lo, hi = id_range(positions)
        if lo < 0:
            return None
        tables = _cache_for(self, xp, dev, x.dtype, hi, seq_len)
        if tables is None:
            return None
        arrays = (x, tables[0], tables[1], ids, out)
        if served is None:  # the tables' types follow from the signature: route once
            served = plan[4] = _dispatch.route("apply_rope_cached", xp, arrays,
                                               layout=self.layout, inverse=inverse, out=out)
        return _gather_rotate(served, xp, None, x, tables[0], tables[1], ids, self.layout,
                              inverse, out)

    @classmethod
    def from_hf_config(cls, config, *, layer_type=None, subconfig=None):
        """The rotary embedding of a transformers model from its ``config.json``, read as
        transformers reads it.

        ``config`` is the parsed ``config.json`` (a dict) or a transformers
        ``PretrainedConfig``. Keys absent from the file take the defaults of the model type's
        config class (DeepSeek-V3's ``rope_interleave=True``, Cohere's ``rope_theta``, ...);
        legacy keys are read as the config class reads them (``rope_scaling`` and its ``type``,
        Gemma 3's ``rope_local_base_freq`` for sliding layers, GPT-NeoX's ``rotary_pct``,
        Phi-3's ``"su"``, ``"deepseek_yarn"``); the rotary width, layout, direction and
        multimodal sections follow the model type's modeling file. The per-model-type table
        comes from transformers' own sources (``arrpos._rope.hf_models``, generated from the
        release named in the error messages). A composite config's text model is used;
        ``subconfig="vision_config"`` (or another sub-config's key) picks another part.
        ``layer_type`` picks one entry of per-layer ``rope_parameters`` (Gemma 3:
        ``"full_attention"``, ``"sliding_attention"``); :func:`arrpos.hf_layer_ropes` gives
        every layer's. The result's :attr:`attention_scale` and :meth:`query_scale` are the
        layer's softmax factor and position scale (DeepSeek, Ministral 3 / Mistral 4).

        Raises
        ------
        TypeError
            ``config`` not a mapping.
        ValueError
            A model type with no rotary embedding ("bert does not use rotary embeddings"); a
            model type the table does not know whose rope is not a plain 1-D rope (a plain one
            is built with a warning naming the assumed layout); an unknown ``rope_type`` (the
            message lists the known ones); missing or malformed keys; nested
            ``rope_parameters`` without ``layer_type``; widths that are not a valid RoPE.
        NotImplementedError
            A rotary the model type computes in a way a RoPE cannot reproduce exactly
            (Gemma 4 vision's half-wise tables, HunyuanVL's sections of the doubled table,
            timestamp-modulated ropes, V-JEPA 2's 3-D rope, conformer rotaries).
            Messages start with the model type. Vision towers (``rope_type: "axial"`` and
            the patch-coordinate rotaries of Llama 4 vision, DINOv3, EfficientLoFTR) give a
            2-D RoPE whose ``apply`` takes coordinates; NanoChat's flipped rotation gives
            ``inverse=True``.
        """
        from .hf_config import rope_from_config  # it imports mrope_axes from here

        return rope_from_config(cls, config, layer_type, subconfig)


# the fields that make a RoPE what it is: every slot but its caches (and __weakref__)
_FIELDS = tuple(k for k in RoPE.__slots__ if k not in ("_tables", "__weakref__"))


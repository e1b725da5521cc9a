"""RoPE's tables: :func:`rope_cos_sin` (cos and sin at positions, angles formed exactly; axial,
multimodal and RoPE-Mixed frequencies), :func:`xpos_scale`, and :func:`mrope_axes` (which
coordinate each frequency of Qwen2-VL / Qwen3-VL turns with). :func:`table_args` and
:func:`cos_sin_tables` are the validation and the computation of :func:`rope_cos_sin` with the
namespace known, for :class:`RoPE`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal, localcontext
from typing import Literal

import numpy as np

from .. import _dispatch
from .._lib import (
    MAX_DIM,
    array_namespace,
    as_positions,
    check_array,
    check_bool,
    check_choice,
    check_dtype_arg,
    check_even_dim,
    check_finite_values,
    check_int,
    check_positions,
    check_positive_int,
    check_real_scalar,
    device_of,
    dtype_kind,
    finfo,
    host_memo,
    is_lazy,
    output_dtype,
)
from .checks import LAYOUTS
from ..typing import Array, DType, RopeLayout

__all__ = ["check_axes", "cos_sin_tables", "mrope_axes", "rope_cos_sin", "table_args",
           "xpos_scale"]


def check_axes(axes, n_freq, n_coords):
    """``axes`` of :func:`rope_cos_sin` (None passes): one coordinate index per frequency,
    each below ``n_coords`` (None: positions without a coordinate axis)."""
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


def rope_cos_sin(positions: Array | int, inv_freq: Array, /, *, layout: RopeLayout = "half",
                 attention_factor: float = 1.0, axes: Sequence[int] | None = None,
                 dtype: DType | None = None) -> tuple[Array, Array]:
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
    xp = array_namespace(positions, inv_freq, name="positions and inv_freq")
    return cos_sin_tables(xp, *table_args(xp, positions, inv_freq, layout, attention_factor,
                                          axes, dtype))


def cos_sin_tables(xp, pos, inv_freq, layout, attention_factor, axes, dtype):
    """:func:`rope_cos_sin` of arguments :func:`table_args` made valid, in namespace ``xp``."""
    if inv_freq.ndim == 2:  # RoPE-Mixed
        return _dispatch.call("rope_cos_sin_mixed", xp, pos, inv_freq, arrays=(pos, inv_freq),
                              layout=layout, attention_factor=attention_factor, dtype=dtype)
    return _dispatch.call("rope_cos_sin", xp, pos, inv_freq, arrays=(pos, inv_freq),
                          layout=layout, attention_factor=attention_factor, axes=axes,
                          dtype=dtype)


def table_args(xp, positions, inv_freq, layout, attention_factor, axes, dtype):
    """:func:`rope_cos_sin`'s arguments (of namespace ``xp``) validated and normalised:
    ``(positions, inv_freq, layout, attention_factor, axes, dtype)``."""
    check_array(xp, inv_freq, "inv_freq", kind="real")
    if inv_freq.ndim not in (1, 2) or 0 in tuple(inv_freq.shape):
        raise ValueError(f"inv_freq must have shape (F,) or (n_coords, F) (RoPE-Mixed) with "
                         f"F >= 1, got shape {tuple(inv_freq.shape)}")
    top = check_finite_values(xp, inv_freq, "inv_freq")
    # an int length is made beside inv_freq; an array's device is its own (None under jit)
    pos = as_positions(xp, positions, "positions", width=2 * inv_freq.shape[0],
                       device=device_of(inv_freq) if isinstance(positions, int) else None)
    layout = check_choice(layout, "layout", LAYOUTS)
    attention_factor = check_real_scalar(attention_factor, "attention_factor", positive=True)
    if inv_freq.ndim == 2:
        if not hasattr(positions, "shape"):
            raise TypeError("with a 2-D inv_freq (RoPE-Mixed), positions must be an array of "
                            f"coordinates, got {type(positions).__name__}")
        _check_mixed(inv_freq, pos, axes)
    else:
        axes = check_axes(axes, inv_freq.shape[0], pos.shape[-1] if pos.ndim else None)
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
    return pos, inv_freq, layout, attention_factor, axes, dtype


def mrope_axes(sections: Sequence[int], *, interleaved: bool = False,
               preset: Literal["bailing", "openpangu"] | None = None) -> tuple[int, ...]:
    """Which coordinate (0 = t, 1 = h, 2 = w) each frequency of multimodal RoPE turns with.

    Qwen2-VL (``interleaved=False``): ``sections[k]`` consecutive frequencies per chunk, chunk
    ``k`` taking coordinate ``k % 3`` (T then H then W). Qwen3-VL (``interleaved=True``):
    T, H, W, T, H, W, ... — frequency ``i`` takes H when ``i % 3 == 1`` and
    ``i < 3 * sections[1]``, W when ``i % 3 == 2`` and ``i < 3 * sections[2]``, T otherwise.

    The serving engines' arrangements are named presets (``sections`` as the engine's config
    gives ``mrope_section``):

    - ``"bailing"`` (vLLM ``bailing_mrope.py``, Bailing / Ling multimodal): ``sections = (t, h,
      w)`` with ``h == w``; the first ``h + w`` frequencies alternate H, W, H, W, ..., the last
      ``t`` take T.
    - ``"openpangu"`` (vLLM ``openpangu_rope.py``, ``rope_type: "openpangu"`` with
      ``mrope_interleaved``): frequencies dealt one at a time to the coordinate with the
      smallest share placed so far (ties to the lower coordinate), never the same coordinate
      twice running while another remains; with three sections ``(t, h, w)`` the last frequency
      is kept for T; with two, ``(h, w)`` are coordinates 0 and 1.

    Parameters
    ----------
    sections : sequence of int
        ``mrope_section`` of the config (e.g. ``[16, 24, 24]``), summing to ``head_dim // 2``.
    interleaved : bool, optional
        Qwen3-VL's interleaved assignment (needs exactly three sections).
    preset : {"bailing", "openpangu"}, optional
        A serving engine's arrangement (above); not with ``interleaved=True``.

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
        rotary width is wider than ``2**17``); ``interleaved`` with other than three sections;
        an unknown ``preset``, one given with ``interleaved=True``, ``"bailing"`` with other
        than three sections or ``h != w``, ``"openpangu"`` with other than two or three
        sections or three with ``t == 0``.

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
    >>> arrpos.mrope_axes([2, 2, 2], preset="bailing")
    (1, 2, 1, 2, 0, 0)
    >>> arrpos.mrope_axes([2, 2, 2], preset="openpangu")
    (0, 1, 2, 1, 2, 0)
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
    if preset is not None:
        preset = check_choice(preset, "preset", tuple(_MROPE_PRESETS))
        if interleaved:
            raise ValueError(f"preset={preset!r} is an arrangement of its own: not with "
                             "interleaved=True")
        return _MROPE_PRESETS[preset](sections)
    if not interleaved:
        return tuple(k % 3 for k, s in enumerate(sections) for _ in range(s))
    if len(sections) != 3:
        raise ValueError(f"interleaved=True needs three sections (t, h, w), got {sections}")
    axes = [0] * total
    for coord in (1, 2):  # transformers' Qwen3-VL: slice(coord, 3 * sections[coord], 3)
        for i in range(coord, min(3 * sections[coord], total), 3):
            axes[i] = coord
    return tuple(axes)


def _bailing_axes(sections):
    """vLLM ``BailingMRotaryEmbedding.select_cos_sin``: H, W alternating, then T."""
    if len(sections) != 3 or sections[1] != sections[2]:
        raise ValueError(f"preset='bailing' needs sections (t, h, w) with h == w, got "
                         f"{sections}")
    t, h, w = sections
    return tuple(1 + i % 2 for i in range(h + w)) + (0,) * t


def _openpangu_axes(sections):
    """vLLM ``MRotaryEmbeddingInterleaved.get_mrope_interleaved_id_list``: each frequency to the
    coordinate least placed for its count, not the last one placed while another remains."""
    if len(sections) not in (2, 3):
        raise ValueError(f"preset='openpangu' needs two sections (h, w) or three (t, h, w), "
                         f"got {sections}")
    counts = list(sections) + [0] * (3 - len(sections))
    keep_last = len(sections) == 3
    if keep_last:
        if counts[0] < 1:
            raise ValueError(f"preset='openpangu' with three sections keeps the last frequency "
                             f"for t: sections[0] must be >= 1, got {sections}")
        counts[0] -= 1
    placed, left, out = [0, 0, 0], list(counts), []
    last = None
    for _ in range(sum(counts)):
        pool = [k for k in range(3) if left[k] > 0 and k != last] or [
            k for k in range(3) if left[k] > 0]
        best = min(pool, key=lambda k: (placed[k] / counts[k], k))
        out.append(best)
        placed[best] += 1
        left[best] -= 1
        last = best
    return tuple(out) + ((0,) if keep_last else ())


_MROPE_PRESETS = {"bailing": _bailing_axes, "openpangu": _openpangu_axes}


@host_memo(maxsize=64)
def _xpos_rates(dim: int, scale_base: float) -> np.ndarray:
    """``ln(zeta_i) / scale_base``, ``zeta_i = (2i/dim + 0.4) / 1.4``, correctly rounded."""
    with localcontext() as ctx:
        ctx.prec = 40
        rates = [((Decimal(2 * i) / dim + Decimal("0.4")) / Decimal("1.4")).ln()
                 / Decimal(scale_base) for i in range(dim // 2)]
    out = np.array([float(r) for r in rates], dtype=np.float64)
    out.flags.writeable = False
    return out


def xpos_scale(positions: Array | int, /, dim: int, *, scale_base: float = 512.0,
               layout: RopeLayout = "half", dtype: DType | None = None) -> Array:
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
    layout = check_choice(layout, "layout", LAYOUTS)
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

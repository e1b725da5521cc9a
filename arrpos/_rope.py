"""Rotary position embedding (RoPE; Su et al. 2021) with every transformers 5 scaling.

``rope_frequencies`` gives the (scaled) inverse frequencies and the attention factor,
``rope_cos_sin`` the cos/sin tables with angles formed exactly, ``apply_rope`` rotates queries
and keys, ``mrope_axes`` assigns frequencies to (t, h, w) for Qwen2-VL / Qwen3-VL, and ``RoPE``
bundles all of it, built by hand or from a transformers ``config.json``.
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np

from . import _dispatch
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
    device_of,
    has_float64,
    is_lazy,
    is_writeable,
    output_dtype,
)
from ._rope_scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
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
    "ProportionalScaling",
    "RoPE",
    "YarnScaling",
    "apply_rope",
    "mrope_axes",
    "rope_cos_sin",
    "rope_frequencies",
]

_LAYOUTS = ("half", "interleaved")
# transformers rope_type -> what from_hf_config builds ("mrope": Qwen2-VL's old name for default)
_HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional",
                  "mrope")
_SEQ_DEPENDENT = (DynamicNTKScaling, LongRopeScaling)


def _check_scaling(scaling):
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise TypeError(
            "scaling must be None or one of LinearScaling, DynamicNTKScaling, YarnScaling, "
            f"LongRopeScaling, Llama3Scaling, ProportionalScaling; got {type(scaling).__name__}"
        )
    return scaling


def rope_frequencies(dim, /, *, base=10000.0, scaling=None, seq_len=None, dtype=None,
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
        :class:`LinearScaling`, :class:`DynamicNTKScaling`, :class:`YarnScaling`,
        :class:`LongRopeScaling`, :class:`Llama3Scaling` or :class:`ProportionalScaling`;
        None for the original RoPE.
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
    xp = array_namespace(xp=xp)
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


def _check_array(xp, a, name):
    if not hasattr(a, "dtype") or not hasattr(a, "shape"):
        raise TypeError(f"{name} must be an array, got {type(a).__name__}")
    return a


def _check_axes(axes, n_freq, n_coords):
    if axes is None:
        return None
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__len__"):
        raise TypeError(f"axes must be a sequence of ints (one per frequency), got "
                        f"{type(axes).__name__}")
    axes = tuple(check_positive_int(a, f"axes[{i}]", minimum=0) for i, a in enumerate(axes))
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
        real floating, ``axes`` not a sequence of ints.
    ValueError
        ``inv_freq`` not 1-D or empty, unknown ``layout``, ``attention_factor <= 0``, non-finite
        positions, ``axes`` of the wrong length or naming a coordinate that does not exist.

    Notes
    -----
    Angles are formed exactly (float64 where the device has it, else an exact float32 split),
    so a float32 table is within 2e-7 of the exact one for the given ``inv_freq`` up to
    position 2**24, on every backend (JAX without x64 included).
    Backend support: NumPy float32/float64 output takes the compiled kernel when it is built;
    Dask arrays with NumPy chunks one task per chunk, each taking that path; every other
    namespace the generic Array API code.

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
    """
    xp, pos, inv_freq, layout, attention_factor, axes, dtype = _table_args(
        positions, inv_freq, layout, attention_factor, axes, dtype)
    return _dispatch.call("rope_cos_sin", xp, pos, inv_freq, arrays=(pos, inv_freq),
                          layout=layout, attention_factor=attention_factor, axes=axes,
                          dtype=dtype)


def _table_args(positions, inv_freq, layout, attention_factor, axes, dtype):
    """rope_cos_sin's arguments validated and normalised (the namespace, positions, dtype)."""
    xp = array_namespace(positions, inv_freq, name="positions and inv_freq")
    _check_array(xp, inv_freq, "inv_freq")
    check_real_array(xp, inv_freq, "inv_freq")
    if inv_freq.ndim != 1 or inv_freq.shape[0] < 1:
        raise ValueError(f"inv_freq must have shape (F,) with F >= 1, got shape "
                         f"{tuple(inv_freq.shape)}")
    # an int length is made beside inv_freq; an array's device is its own (None under jit)
    pos = as_positions(xp, positions, "positions",
                       device=device_of(inv_freq) if isinstance(positions, int) else None)
    layout = check_choice(layout, "layout", _LAYOUTS)
    attention_factor = check_real_scalar(attention_factor, "attention_factor", positive=True)
    axes = _check_axes(axes, inv_freq.shape[0], pos.shape[-1] if pos.ndim else None)
    check_dtype_arg(xp, dtype, device=device_of(pos))
    if dtype is None:
        ref = inv_freq
        if xp.isdtype(pos.dtype, "real floating"):
            ref = xp.empty((), dtype=xp.result_type(pos.dtype, inv_freq.dtype),
                           device=device_of(pos))
        dtype = output_dtype(xp, ref, None, device=device_of(pos))
    else:
        dtype = output_dtype(xp, None, dtype, device=device_of(pos))
    check_finite_range(xp, pos, "positions")
    return xp, pos, inv_freq, layout, attention_factor, axes, dtype


def mrope_axes(sections, /, *, interleaved=False):
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
        An empty ``sections`` or a negative entry; ``interleaved`` with other than three
        sections.

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
    sections = [check_positive_int(s, f"sections[{i}]", minimum=0)
                for i, s in enumerate(sections)]
    if not sections or sum(sections) == 0:
        raise ValueError(f"sections must be non-empty with a positive sum, got {sections}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {interleaved!r}")
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


_VALIDATED: set = set()


def _check_apply_args(xp, x, cos, sin, layout, inverse, out):
    """The argument checks of :func:`apply_rope` (raises; returns nothing)."""
    for name, a in (("x", x), ("cos", cos), ("sin", sin)):
        _check_array(xp, a, name)
        check_real_array(xp, a, name, integer_ok=False)
    check_choice(layout, "layout", _LAYOUTS)
    if not isinstance(inverse, bool):
        raise TypeError(f"inverse must be a bool, got {type(inverse).__name__} {inverse!r}")
    if x.ndim < 1:
        raise ValueError("x must have shape (..., dim), got a 0-d array")
    if tuple(cos.shape) != tuple(sin.shape):
        raise ValueError(f"cos and sin must have the same shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    if cos.ndim < 1:
        raise ValueError("cos must have shape (..., rotary_dim), got a 0-d array")
    r, d = cos.shape[-1], x.shape[-1]
    if r < 2 or r % 2:
        raise ValueError(f"cos.shape[-1] (the rotary width) must be even and >= 2, got {r}")
    if r > d:
        raise ValueError(f"cos.shape[-1] = {r} is wider than x (x.shape[-1] = {d}); the "
                         "rotary width must be <= the head dim")
    if not _broadcastable_into(tuple(cos.shape[:-1]), tuple(x.shape[:-1])):
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast to x[..., :{r}] of shape "
            f"{tuple(x.shape[:-1]) + (r,)}; insert the heads axis (e.g. cos[:, :, None, :] for "
            "x of shape (batch, seq, heads, dim))"
        )
    if out is not None:
        _check_array(xp, out, "out")
        if not is_writeable(out):
            raise TypeError("out= needs a mutable array; this library's arrays are immutable "
                            "(JAX): use the return value (under jit, XLA reuses the buffer)")
        if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype:
            raise ValueError(f"out must have x's shape {tuple(x.shape)} and dtype {x.dtype}, got "
                             f"shape {tuple(out.shape)} and dtype {out.dtype}")


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
        immutable arrays (JAX).

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
        or dtype.

    Notes
    -----
    The arithmetic promotes ``x`` with the tables (float16 ``x`` with float32 tables computes in
    float32) and rounds once to ``x.dtype``. Without ``out`` nothing is written in place, so
    gradients flow on torch and JAX.
    Backend support: NumPy float32/float64 ``x`` takes the compiled kernel when it is built;
    Dask arrays with NumPy chunks one task per chunk of rows, each taking that path (``out``
    then names the lazy result: Dask arrays are not written in place); every other namespace
    (and any input that kernel declines) the generic Array API code.

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
    xp = array_namespace(x, cos, sin, out, name="x, cos, sin and out")
    # Everything checked below depends only on this signature; a decoder calls apply_rope with
    # the same one at every layer and step, so each is validated once.
    try:
        key = (id(xp), x.shape, x.dtype, cos.shape, cos.dtype, sin.shape, sin.dtype, layout,
               inverse if type(inverse) is bool else object(),  # 1 == True must still fail
               None if out is None else (out.shape, out.dtype))
        known = key in _VALIDATED
    except (AttributeError, TypeError):  # not arrays, or unhashable shapes/dtypes: check fully
        key, known = None, False
    if not known:
        _check_apply_args(xp, x, cos, sin, layout, inverse, out)
        if key is not None and len(_VALIDATED) < 4096:
            _VALIDATED.add(key)
    return _dispatch.call("apply_rope", xp, x, cos, sin, arrays=(x, cos, sin, out),
                          layout=layout, inverse=inverse, out=out)


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
    >>> rope.apply(q, np.arange(3)).shape
    (1, 3, 2, 8)
    >>> cfg = {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
    ...        "max_position_embeddings": 131072,
    ...        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    >>> arrpos.RoPE.from_hf_config(cfg).scaling
    Llama3Scaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=8192)
    """

    __slots__ = ("head_dim", "base", "scaling", "partial_rotary_factor", "layout", "axes",
                 "rotary_dim")

    def __init__(self, head_dim, /, *, base=10000.0, scaling=None, partial_rotary_factor=1.0,
                 layout="half", axes=None):
        head_dim = check_positive_int(head_dim, "head_dim")
        base = check_real_scalar(base, "base", positive=True)
        scaling = _check_scaling(scaling)
        prf = check_real_scalar(partial_rotary_factor, "partial_rotary_factor", positive=True)
        if prf > 1.0:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {prf}")
        rotary_dim = int(head_dim * prf)
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(
                f"int(head_dim * partial_rotary_factor) = int({head_dim} * {prf}) = {rotary_dim} "
                "must be even and >= 2"
            )
        layout = check_choice(layout, "layout", _LAYOUTS)
        if axes is not None:
            # the number of coordinates is known only with the positions (checked in cos_sin)
            axes = _check_axes(axes, rotary_dim // 2, float("inf"))
        for name, value in (("head_dim", head_dim), ("base", base), ("scaling", scaling),
                            ("partial_rotary_factor", prf), ("layout", layout), ("axes", axes),
                            ("rotary_dim", rotary_dim)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"RoPE is immutable; make a new one (cannot set {name})")

    def __repr__(self):
        extra = "" if self.axes is None else f", axes={self.axes}"
        return (f"RoPE({self.head_dim}, base={self.base}, scaling={self.scaling!r}, "
                f"partial_rotary_factor={self.partial_rotary_factor}, layout={self.layout!r}"
                f"{extra})")

    def __eq__(self, other):
        if not isinstance(other, RoPE):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, k) for k in self.__slots__))

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
        check_dtype_arg(xp, dtype, device=dev)
        if dtype is None:
            dtype = output_dtype(xp, pos, None, device=dev)
        if isinstance(self.scaling, _SEQ_DEPENDENT) and seq_len is None:
            seq_len = self._seq_len_from(xp, pos)
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
        return max(int(xp.max(pos)) + 1, 1) if pos.size else 1

    def apply(self, x, positions, *, heads_axis=-2, inverse=False, out=None, seq_len=None):
        """Rotate ``x`` at ``positions``.

        Parameters
        ----------
        x : array
            ``(..., seq, heads, head_dim)`` with the default ``heads_axis=-2``
            (``(batch, seq, heads, dim)``, transformers' layout before its transpose); use
            ``heads_axis=-3`` for ``(batch, heads, seq, dim)`` and ``None`` when ``x`` has no
            heads axis.
        positions : int or array
            Positions of the tokens of ``x``: shape ``x.shape`` without the heads and feature
            axes, or any shape broadcasting to it (e.g. ``(seq,)``); multimodal: plus a
            trailing coordinate axis.
        heads_axis : int or None, optional
            Axis of ``x`` holding the heads (negative, counted from the end, or positive).
        inverse, out : optional
            As :func:`apply_rope`.
        seq_len : int, optional
            As :meth:`cos_sin`.
        """
        xp = array_namespace(x, name="x")
        _check_array(xp, x, "x")
        check_real_array(xp, x, "x", integer_ok=False)
        if heads_axis is not None:
            if isinstance(heads_axis, bool) or not isinstance(heads_axis, numbers.Integral):
                raise TypeError(f"heads_axis must be an int or None, got {heads_axis!r}")
            ax = int(heads_axis) - x.ndim if heads_axis >= 0 else int(heads_axis)
            if not -x.ndim <= ax <= -2:
                raise ValueError(f"heads_axis must name an axis of x other than the last "
                                 f"(x.ndim = {x.ndim}), got {heads_axis}")
        if not hasattr(positions, "shape"):
            positions = as_positions(xp, positions, "positions", device=device_of(x))
        cos, sin = self.cos_sin(positions, dtype=x.dtype, seq_len=seq_len)
        if heads_axis is not None:
            # a length-1 heads axis at the same place counted from the end
            cos = xp.expand_dims(cos, axis=cos.ndim + ax + 1)
            sin = xp.expand_dims(sin, axis=sin.ndim + ax + 1)
        return apply_rope(x, cos, sin, layout=self.layout, inverse=inverse, out=out)

    @classmethod
    def from_hf_config(cls, config, *, layer_type=None):
        """The rotary embedding of a transformers model from its ``config.json`` (a dict).

        Reads ``rope_parameters`` (transformers 5) or ``rope_scaling`` (older), ``rope_theta``,
        ``head_dim`` (else ``hidden_size // num_attention_heads``), ``partial_rotary_factor``
        (GPT-NeoX's ``rotary_pct`` too), ``max_position_embeddings`` and
        ``original_max_position_embeddings`` (a top-level value wins, as in transformers),
        and Qwen-VL's ``mrope_section``. A ``text_config`` is used when present.
        ``layer_type`` picks one entry of per-layer ``rope_parameters`` (Gemma 3).

        Raises
        ------
        TypeError
            ``config`` not a mapping.
        ValueError
            An unknown ``rope_type`` (the message lists the known ones), missing keys, nested
            ``rope_parameters`` without ``layer_type``.
        """
        if hasattr(config, "to_dict") and not isinstance(config, Mapping):
            config = config.to_dict()
        if not isinstance(config, Mapping):
            raise TypeError(f"config must be a dict (a parsed config.json), got "
                            f"{type(config).__name__}")
        if isinstance(config.get("text_config"), Mapping):
            config = {**config, **config["text_config"]}
        rp = config.get("rope_parameters") or config.get("rope_scaling") or {}
        if not isinstance(rp, Mapping):
            raise TypeError(f"config['rope_parameters'] must be a dict, got {type(rp).__name__}")
        nested = [k for k, v in rp.items() if isinstance(v, Mapping)]
        if nested:
            if layer_type is None:
                raise ValueError(f"rope_parameters are given per layer type {nested}; pass "
                                 "layer_type= to choose one")
            if layer_type not in rp:
                raise ValueError(f"layer_type must be one of {nested}, got {layer_type!r}")
            rp = rp[layer_type]
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        if rope_type not in _HF_ROPE_TYPES:
            raise ValueError(f"unknown rope_type {rope_type!r}; known: "
                             f"{', '.join(repr(t) for t in _HF_ROPE_TYPES)}")
        head_dim = config.get("head_dim")
        if not head_dim:
            hidden = config.get("hidden_size", config.get("n_embd"))  # n_embd, n_head: GPT-J
            heads = config.get("num_attention_heads", config.get("n_head"))
            if not hidden or not heads:
                raise ValueError("config needs head_dim, or hidden_size and "
                                 "num_attention_heads")
            head_dim = hidden // heads
        base = rp.get("rope_theta", config.get("rope_theta", 10000.0))
        prf = rp.get("partial_rotary_factor",
                     config.get("partial_rotary_factor", config.get("rotary_pct", 1.0)))
        prf = 1.0 if prf is None else prf
        max_pos = config.get("max_position_embeddings")

        def need(key, value):
            if value is None:
                raise ValueError(f"rope_type {rope_type!r} needs {key} in the config")
            return value

        def original():
            if config.get("original_max_position_embeddings") is not None:
                return config["original_max_position_embeddings"]
            return need("max_position_embeddings or original_max_position_embeddings",
                        rp.get("original_max_position_embeddings", max_pos))

        scaling = None
        if rope_type == "linear":
            scaling = LinearScaling(need("factor", rp.get("factor")))
        elif rope_type == "dynamic":
            scaling = DynamicNTKScaling(need("factor", rp.get("factor")),
                                        need("max_position_embeddings", max_pos))
        elif rope_type == "yarn":
            orig = original()
            factor = rp.get("factor")
            if factor is None:  # DeepSeek-V3: the ratio of the context lengths
                factor = need("max_position_embeddings", max_pos) / orig
            scaling = YarnScaling(
                factor, orig, beta_fast=rp.get("beta_fast") or 32.0,
                beta_slow=rp.get("beta_slow") or 1.0, mscale=rp.get("mscale"),
                mscale_all_dim=rp.get("mscale_all_dim"),
                attention_factor=rp.get("attention_factor"),
                truncate=bool(rp.get("truncate", True)),
            )
        elif rope_type == "longrope":
            scaling = LongRopeScaling(
                need("short_factor", rp.get("short_factor")),
                need("long_factor", rp.get("long_factor")), original(),
                factor=rp.get("factor"), max_positions=max_pos,
                attention_factor=rp.get("attention_factor"),
            )
        elif rope_type == "llama3":
            scaling = Llama3Scaling(need("factor", rp.get("factor")),
                                    need("low_freq_factor", rp.get("low_freq_factor")),
                                    need("high_freq_factor", rp.get("high_freq_factor")),
                                    original())
        elif rope_type == "proportional":
            scaling = ProportionalScaling(prf, factor=rp.get("factor", 1.0))
            prf = 1.0  # the zero frequencies keep the table head_dim wide
        axes = None
        if rp.get("mrope_section"):
            interleaved = rp.get("mrope_interleaved",
                                 str(config.get("model_type", "")).startswith("qwen3"))
            axes = mrope_axes(rp["mrope_section"], interleaved=bool(interleaved))
        layout = "interleaved" if config.get("model_type") in ("gptj", "codegen") else "half"
        if config.get("rotary_dim") and layout == "interleaved":
            prf = config["rotary_dim"] / head_dim
        return cls(head_dim, base=base, scaling=scaling, partial_rotary_factor=prf,
                   layout=layout, axes=axes)


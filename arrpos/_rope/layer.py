"""The RoPE layer: :class:`RoPE` bundles the frequencies, tables and application of one
attention layer's rotary embedding, built by hand or from a transformers ``config.json``
(:mod:`.hf_config`).

:meth:`RoPE.apply` takes the decode path first (:mod:`.decode`: integer positions, one fused
gather-and-rotate from cached tables); otherwise it infers the namespace once and calls the
validated internals of :mod:`.frequencies`, :mod:`.tables` and :mod:`.apply` with it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from .. import _dispatch
from .._lib import (
    MAX_DIM,
    array_namespace,
    as_positions,
    check_array,
    check_choice,
    check_dtype_arg,
    check_out_memory,
    check_positive_int,
    check_real_scalar,
    detached,
    device_of,
    dtype_kind,
    has_float64,
    is_lazy,
    output_dtype,
)
from .apply import rotate
from .checks import LAYOUTS, check_fit, check_out, heads_axis_from_end
from .decode import DecodeTables, clear_tables, decode_step
from .frequencies import frequency_array, host_frequencies, rope_frequencies
from .hf_config import rope_from_config
from .position_scales import PositionScale
from .scaling import RopeScaling, check_scaling
from .tables import check_axes, cos_sin_tables, table_args
from ..typing import Array, Config, DType, Device, Namespace, RopeLayout

__all__ = ["RoPE"]


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
    layout : {"half", "interleaved", "blocks"}, optional
        ``"half"`` for LLaMA-family checkpoints, ``"interleaved"`` for GPT-J / RoFormer;
        ``"blocks"`` with ``axes`` (see below).
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
    rotary_part : {"first", "last"}, optional
        Where the rotated ``rotary_dim`` features sit in each head: the first ones (partial
        rotary of GPT-NeoX, Phi, ...) or the last ones (DeepSeek-V4 lays a head out as
        ``[nope | rope]``); the others pass through.
    rotate_num_heads : int, optional
        Rotate only the last ``rotate_num_heads`` heads of ``x`` (x-transformers
        ``Attention(rotate_num_heads=...)``); the others pass through. :meth:`apply` then
        needs ``heads_axis``.

    With ``layout="blocks"`` (and ``axes``), each run of frequencies turning with one
    coordinate rotates half-wise inside its own contiguous block of the rotary width, pairs
    ``(j, j + w/2)`` of a block of width ``w`` (Gemma 4 vision); the
    runs must be of equal length. Its tables hold each block's ``cat(f, f)`` in turn.

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

    # _tables: this RoPE's decode caches (a decode.DecodeTables: never pickled, copied or
    # compared)
    __slots__ = ("head_dim", "base", "scaling", "partial_rotary_factor", "layout", "axes",
                 "rotary_dim", "inverse", "attention_scale", "position_scale", "rotary_part",
                 "rotate_num_heads", "_tables", "_inner", "_blocks", "__weakref__")
    head_dim: int
    base: float
    scaling: RopeScaling | None
    partial_rotary_factor: float
    layout: RopeLayout | Literal["blocks"]
    axes: tuple[int, ...] | None
    rotary_dim: int
    inverse: bool
    attention_scale: float
    position_scale: PositionScale | None
    rotary_part: str
    rotate_num_heads: int | None
    _tables: DecodeTables
    _inner: RoPE | None
    _blocks: tuple[int, ...] | None

    def __init__(self, head_dim: int, *, base: float = 10000.0, scaling: RopeScaling | None = None,
                 partial_rotary_factor: float = 1.0,
                 layout: RopeLayout | Literal["blocks"] = "half",
                 axes: Sequence[int] | None = None, inverse: bool = False,
                 attention_scale: float = 1.0, position_scale: PositionScale | None = None,
                 rotary_part: Literal["first", "last"] = "first",
                 rotate_num_heads: int | None = None) -> None:
        head_dim = check_positive_int(head_dim, "head_dim")
        attention_scale = check_real_scalar(attention_scale, "attention_scale", positive=True)
        if position_scale is not None and not isinstance(position_scale, PositionScale):
            raise TypeError(f"position_scale must be an arrpos.PositionScale or None, got "
                            f"{type(position_scale).__name__}")
        if not isinstance(inverse, bool):
            raise TypeError(f"inverse must be a bool, got {type(inverse).__name__} {inverse!r}")
        base = check_real_scalar(base, "base", positive=True)
        scaling = check_scaling(scaling)
        prf = check_real_scalar(partial_rotary_factor, "partial_rotary_factor", positive=True)
        if prf > 1.0:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {prf}")
        rotary_dim = int(head_dim * prf)
        if rotary_dim < 2 or rotary_dim % 2 or rotary_dim > MAX_DIM:
            raise ValueError(
                f"int(head_dim * partial_rotary_factor) = int({head_dim} * {prf}) = {rotary_dim} "
                f"must be even, >= 2 and <= {MAX_DIM}"
            )
        layout = check_choice(layout, "layout", LAYOUTS + ("blocks",))
        if axes is not None:
            # the number of coordinates is known only with the positions (checked in cos_sin)
            axes = check_axes(axes, rotary_dim // 2, float("inf"))
        rotary_part = check_choice(rotary_part, "rotary_part", ("first", "last"))
        if rotate_num_heads is not None:
            rotate_num_heads = check_positive_int(rotate_num_heads, "rotate_num_heads")
        for name, value in (("head_dim", head_dim), ("base", base), ("scaling", scaling),
                            ("partial_rotary_factor", prf), ("layout", layout), ("axes", axes),
                            ("rotary_dim", rotary_dim), ("inverse", inverse),
                            ("attention_scale", attention_scale),
                            ("position_scale", position_scale), ("rotary_part", rotary_part),
                            ("rotate_num_heads", rotate_num_heads)):
            object.__setattr__(self, name, value)
        self._derive()

    def _derive(self):
        """The caches and, for a RoPE that rotates a selection of ``x`` (its last features,
        some heads, blocks), the plain RoPE that rotates the selection itself."""
        object.__setattr__(self, "_tables", DecodeTables(self._fields()))
        blocks = _block_columns(self.layout, self.axes, self.rotary_dim)
        object.__setattr__(self, "_blocks", blocks)
        selects = (self.rotary_part == "last" and self.rotary_dim < self.head_dim) or (
            self.rotate_num_heads is not None)
        inner = None
        if selects and blocks is None:
            inner = RoPE(self.rotary_dim, base=self.base, scaling=self.scaling,
                         layout=self.layout, axes=self.axes, inverse=self.inverse)
        object.__setattr__(self, "_inner", inner)

    def __setattr__(self, name, value):
        raise AttributeError(f"RoPE is immutable; make a new one (cannot set {name})")

    def __repr__(self):
        extra = "" if self.axes is None else f", axes={self.axes}"
        extra += ", inverse=True" if self.inverse else ""
        extra += "" if self.attention_scale == 1.0 else f", attention_scale={self.attention_scale}"
        extra += "" if self.position_scale is None else f", position_scale={self.position_scale!r}"
        extra += "" if self.rotary_part == "first" else f", rotary_part={self.rotary_part!r}"
        extra += ("" if self.rotate_num_heads is None
                  else f", rotate_num_heads={self.rotate_num_heads}")
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
        state = {"rotary_part": "first", "rotate_num_heads": None, **state}  # older pickles
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self._derive()

    def query_scale(self, positions: Array, /, *, dtype: DType | None = None) -> Array | None:
        """The per-position scale this layer's queries get (multiply the queries, or the
        attention logits, by it), or None when the model has none: what the config given to
        :meth:`from_hf_config` asks for (Ministral 3 / Mistral 4 ``llama_4_scaling_beta``;
        :func:`arrpos.position_scale` has the formulas). Shape ``positions.shape``.
        :attr:`attention_scale` is the constant factor on the softmax scale (DeepSeek's
        ``mscale_all_dim``)."""
        if self.position_scale is None:
            return None
        return self.position_scale(positions, dtype=dtype)

    def clear_cache(self) -> None:
        """Free this RoPE's decode caches (the half-width cos/sin tables :meth:`apply` keeps
        per namespace, device and dtype); they are rebuilt on next use. A dropped RoPE frees
        them by itself; :func:`arrpos.clear_caches` frees every RoPE's."""
        clear_tables(self._tables)

    def frequencies(self, seq_len: int | None = None, xp: Namespace | None = None, *,
                    dtype: DType | None = None,
                    device: Device | None = None) -> tuple[Array, float]:
        """``(inv_freq, attention_factor)`` of :func:`rope_frequencies` for this layer."""
        return rope_frequencies(self.rotary_dim, base=self.base, scaling=self.scaling,
                                seq_len=seq_len, dtype=dtype, device=device, xp=xp)

    def cos_sin(self, positions: Array | int, dtype: DType | None = None, *,
                seq_len: int | None = None) -> tuple[Array, Array]:
        """``(cos, sin)`` of :func:`rope_cos_sin` at ``positions``, shape ``P + (rotary_dim,)``.

        ``seq_len`` feeds the dynamic NTK and LongRoPE scalings; by default it is the largest
        position + 1 (read from the array: pass it explicitly for lazy arrays and under jit).
        The dtype defaults to that of real positions, else the namespace's default float.
        """
        return self._cos_sin_at(array_namespace(positions, name="positions"), positions, dtype,
                                seq_len)

    def _cos_sin_at(self, xp, positions, dtype, seq_len):
        """:meth:`cos_sin` of positions of namespace ``xp``."""
        pos = as_positions(xp, positions, "positions")
        dev = device_of(pos)
        dtype = check_dtype_arg(xp, dtype, device=dev)
        if dtype is None:
            real = dtype_kind(xp, pos.dtype) == "real floating"  # bfloat16 of ml_dtypes too
            dtype = pos.dtype if real else output_dtype(xp, None, None, device=dev)
        if seq_len is not None:
            seq_len = check_positive_int(seq_len, "seq_len")
        elif self.scaling is not None and self.scaling.seq_dependent:
            seq_len = self._seq_len_from(xp, pos)
        cos, sin = self._cos_sin(xp, pos, dev, dtype, seq_len)
        if self._blocks is not None:  # each block's cat(f, f) in turn
            columns = xp.asarray(self._blocks, device=dev)
            cos, sin = xp.take(cos, columns, axis=-1), xp.take(sin, columns, axis=-1)
        return (cos, -sin) if self.inverse else (cos, sin)

    def _cos_sin(self, xp, pos, dev, dtype, seq_len):
        layout = "half" if self.layout == "blocks" else self.layout  # permuted by the caller
        if has_float64(xp, dev):  # float64 frequencies: the angles are exact
            inv, att = frequency_array(xp, self.rotary_dim, self.base, self.scaling, seq_len,
                                       xp.float64, dev)
            return cos_sin_tables(xp, *table_args(xp, pos, inv, layout, att, self.axes, dtype))
        # No float64 here (JAX without x64): carry the host float64 frequencies as a float32
        # pair hi + lo, or the angles would be those of float32-rounded frequencies (1e-4 rad
        # off at position 3000).
        inv64, att = host_frequencies(self.rotary_dim, self.base, self.scaling, seq_len)
        w_hi, w_lo = _dispatch.call("frequency_arrays", xp, inv64, None, device=dev)
        pos, _, layout, att, axes, dtype = table_args(xp, pos, w_hi, layout, att, self.axes,
                                                      dtype)
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

    def apply(self, x: Array, positions: Array | int, *, heads_axis: int | None,
              inverse: bool = False, out: Array | None = None, seq_len: int | None = None) -> Array:
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
        and multimodal ``axes`` take the table path. A RoPE that rotates a selection
        (``rotary_part="last"``, ``rotate_num_heads``) rotates the selected slice of ``x`` as
        above and concatenates the rest, unchanged, around it (``layout="blocks"`` takes the
        table path); ``out`` then receives the result.
        """
        if self._inner is not None or self._blocks is not None:
            return self._apply_selected(x, positions, heads_axis, inverse, out, seq_len)
        y = decode_step(self, self._tables, x, positions, heads_axis, inverse, out, seq_len)
        if y is not None:  # integer positions: one gather-and-rotate from the cached tables
            return y
        # the table path: one namespace for x, its tables and out (tables made from positions
        # of another library could not rotate x)
        xp = array_namespace(x, positions, out, name="x, positions and out")
        check_array(xp, x, "x", kind="floating")
        ax = heads_axis_from_end(heads_axis, x)
        if not hasattr(positions, "shape"):
            positions = as_positions(xp, positions, "positions", device=device_of(x))
        pad = check_fit(self, x, positions, heads_axis, ax)  # named in the caller's terms
        if pad:
            positions = xp.reshape(positions, (1,) * pad + tuple(positions.shape))
        cos, sin = self._cos_sin_at(xp, positions, x.dtype, seq_len)
        if ax is not None:
            # a length-1 heads axis at the same place counted from the end
            cos = xp.expand_dims(cos, axis=cos.ndim + ax + 1)
            sin = xp.expand_dims(sin, axis=sin.ndim + ax + 1)
        return rotate(xp, x, cos, sin, self.layout, inverse, out)

    def _apply_selected(self, x, positions, heads_axis, inverse, out, seq_len):
        """:meth:`apply` of a RoPE that rotates a selection of ``x``: its last features, its
        last ``rotate_num_heads`` heads or blocks; the rest of ``x`` passes through."""
        xp = array_namespace(x, positions, out, name="x, positions and out")
        check_array(xp, x, "x", kind="floating")
        ax = heads_axis_from_end(heads_axis, x)
        if not hasattr(positions, "shape"):
            positions = as_positions(xp, positions, "positions", device=device_of(x))
        pad = check_fit(self, x, positions, heads_axis, ax)
        check_out(xp, x, out)
        if out is not None:
            check_out_memory(out)
        part, kept = x, None
        if self.rotate_num_heads is not None:
            if ax is None:
                raise ValueError(f"heads_axis is None, but {self!r} rotates only its last "
                                 f"{self.rotate_num_heads} heads: name the heads axis of x")
            heads = x.shape[ax]
            if self.rotate_num_heads > heads:
                raise ValueError(f"rotate_num_heads = {self.rotate_num_heads} exceeds the "
                                 f"{heads} heads of x (shape {tuple(x.shape)}, heads_axis="
                                 f"{heads_axis})")
            lead = (slice(None),) * (x.ndim + ax)
            split = heads - self.rotate_num_heads
            kept = x[lead + (slice(0, split), ...)]
            part = x[lead + (slice(split, heads), ...)]
        width, r = x.shape[-1], self.rotary_dim
        start = width - r if self.rotary_part == "last" else 0
        sub = part[..., start:start + r]
        if self._blocks is None:
            assert self._inner is not None
            rot = self._inner.apply(sub, positions, heads_axis=ax, inverse=inverse,
                                    seq_len=seq_len)
        else:
            if pad:
                positions = xp.reshape(positions, (1,) * pad + tuple(positions.shape))
            rot = self._rotate_blocks(xp, sub, positions, ax, inverse, seq_len)
        pieces = [p for p in (part[..., :start], rot, part[..., start + r:]) if p.shape[-1]]
        y = pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=-1)
        if kept is not None and kept.shape[ax]:
            y = xp.concat([kept, y], axis=ax)
        if out is None:
            return y
        out[...] = y
        return out

    def _rotate_blocks(self, xp, sub, positions, ax, inverse, seq_len):
        """``sub`` (the rotary width) rotated half-wise inside each block."""
        cos, sin = self._cos_sin_at(xp, positions, sub.dtype, seq_len)
        if ax is not None:
            cos = xp.expand_dims(cos, axis=cos.ndim + ax + 1)
            sin = xp.expand_dims(sin, axis=sin.ndim + ax + 1)
        axes = self.axes or ()
        n = 1 + sum(a != b for a, b in zip(axes, axes[1:]))  # one block per run of axes
        block = (n, self.rotary_dim // n)
        cos = xp.reshape(cos, tuple(cos.shape[:-1]) + block)
        sin = xp.reshape(sin, tuple(sin.shape[:-1]) + block)
        y = rotate(xp, xp.reshape(sub, tuple(sub.shape[:-1]) + block), cos, sin, "half",
                   inverse, None)
        return xp.reshape(y, tuple(sub.shape))

    @classmethod
    def from_hf_config(cls, config: Config, *, layer_type: str | None = None,
                       subconfig: str | None = None) -> RoPE:
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
            (HunyuanVL's sections of the doubled table,
            timestamp-modulated ropes, V-JEPA 2's 3-D rope, conformer rotaries).
            Messages start with the model type. Vision towers (``rope_type: "axial"`` and
            the patch-coordinate rotaries of Llama 4 vision, DINOv3, EfficientLoFTR) give a
            2-D RoPE whose ``apply`` takes coordinates; NanoChat's flipped rotation gives
            ``inverse=True``.
        """
        return rope_from_config(cls, config, layer_type, subconfig)


def _block_columns(layout, axes, rotary_dim):
    """For ``layout="blocks"``, the columns of the half-layout table that make each block's
    ``cat(f, f)`` in turn (a block: a run of frequencies turning with one coordinate); else
    None."""
    if layout != "blocks":
        return None
    if axes is None:
        raise ValueError("layout='blocks' needs axes: each run of frequencies turning with one "
                         "coordinate rotates inside its own block")
    runs: list = []
    for i, a in enumerate(axes):
        if runs and axes[runs[-1][0]] == a:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    if len({length for _, length in runs}) != 1:
        raise ValueError(f"layout='blocks' needs runs of equal length in axes (one block per "
                         f"run), got runs of {[length for _, length in runs]} in axes={axes}")
    half = rotary_dim // 2
    return tuple(c for first, length in runs
                 for c in (*range(first, first + length),
                           *range(half + first, half + first + length)))


# the fields that make a RoPE what it is: every slot but its caches and derived helpers
_FIELDS = tuple(k for k in RoPE.__slots__
                if k not in ("_tables", "_inner", "_blocks", "__weakref__"))

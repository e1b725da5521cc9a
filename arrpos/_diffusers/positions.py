"""Positional encodings of diffusers transformers, read from their ``config.json``.

``from_diffusers_config(config)`` looks the model class up (``_class_name``) in the family
modules, which describe each class's positional module as data (``spec.Spec``):
how its pipeline or transformer lays out the position ids, the rotary frequencies of each axis
and how the model pairs features, or its sincos chunks. The returned
:class:`DiffusersPositions` builds the ids (exact, on the host, once per call) and computes
every table with arrpos' own ``rope_cos_sin``, ``apply_rope`` and ``sinusoidal``, on any
Array API namespace.
"""
from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from . import image, seq, sincos, video
from .._absolute import sinusoidal
from .spec import Reader, Refusal, Spec
from .._lib import (
    array_namespace,
    check_array,
    check_dtype_arg,
    check_int,
    check_real_scalar,
    device_of,
    dtype_kind,
    from_host,
    has_float64,
    index_dtype,
    output_dtype,
)
from .._rope.apply import apply_rope
from .._rope.checks import heads_axis_from_end
from .._rope.tables import rope_cos_sin
from ..typing import Array, DType, Device, Namespace

__all__ = ["DiffusersPositions", "from_diffusers_config"]

# class name -> builder(Reader) -> Spec, over every family module
_BUILDERS = {**image.BUILDERS, **video.BUILDERS,
             **seq.BUILDERS, **sincos.BUILDERS}
# class name -> why arrpos refuses it (the model has no rotary or sincos encoding, or one that
# a config cannot give)
_REFUSED = {**image.REFUSED, **video.REFUSED,
            **seq.REFUSED, **sincos.REFUSED}
# position_ids keywords that count tokens (>= 1; text_len and offsets may be 0)
_COUNTS = {"frames": 1, "height": 1, "width": 1, "length": 1, "text_len": 0, "pad": 0,
           "frame_offset": 0}


def from_diffusers_config(config: Mapping[str, Any], /) -> DiffusersPositions:
    """The positional encoding of a diffusers transformer, from its ``config.json``.

    Parameters
    ----------
    config : Mapping
        The parsed ``config.json`` of the model's ``transformer/`` folder (or a diffusers
        ``FrozenDict`` / ``model.config``): ``_class_name`` names the model class; the keys the
        class reads default to that class's ``__init__`` defaults (diffusers 0.42), as
        ``from_pretrained`` fills them.

    Returns
    -------
    DiffusersPositions
        Its :meth:`~DiffusersPositions.position_ids` takes the latent token grid (and text
        length) the model takes and builds the ids as the model's pipeline or transformer does;
        :meth:`~DiffusersPositions.cos_sin` and :meth:`~DiffusersPositions.apply` reproduce
        the model's rotary module and apply function (``kind == "rope"``),
        :meth:`~DiffusersPositions.table` its sincos table (``kind == "sincos"``).

    Raises
    ------
    TypeError
        ``config`` is not a mapping, or ``_class_name`` is not a string.
    ValueError
        No ``_class_name``; a class this release does not know; a class with no rotary or
        sincos encoding, or one arrpos cannot reproduce exactly from a config (learned
        frequencies, learned tables); a key of the wrong type or value. The message starts
        with the class name and names the key or the missing feature.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> flux = arrpos.from_diffusers_config({"_class_name": "FluxTransformer2DModel"})
    >>> flux
    DiffusersPositions('FluxTransformer2DModel', kind='rope', head_dim=128, n_axes=3)
    >>> ids = flux.position_ids(height=2, width=3, text_len=2)   # text, then the 2x3 image
    >>> ids.tolist()
    [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
    >>> cos, sin = flux.cos_sin(ids)
    >>> cos.shape
    (8, 128)
    >>> q = np.ones((1, 8, 24, 128), dtype=np.float32)           # (batch, seq, heads, dim)
    >>> flux.apply(q, ids, heads_axis=-2).shape
    (1, 8, 24, 128)
    """
    if not isinstance(config, Mapping):
        if hasattr(config, "to_dict"):
            config = config.to_dict()
        else:
            raise TypeError(f"config must be a mapping (the parsed config.json), got "
                            f"{type(config).__name__}")
    name = config.get("_class_name")
    if name is None:
        raise ValueError("config has no _class_name: pass the config.json of the model's "
                         "transformer/ folder (its _class_name names the model class)")
    if not isinstance(name, str):
        raise TypeError(f"config['_class_name'] must be a string, got {type(name).__name__}")
    if name in _REFUSED:
        raise ValueError(f"{name}: {_REFUSED[name]}")
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(f"{name} is not a diffusers transformer arrpos knows (verified against "
                         f"diffusers 0.42.1; {len(_BUILDERS)} classes, listed in "
                         f"docs/diffusers.md)")
    try:
        return DiffusersPositions(builder(Reader(config, name)), config)
    except Refusal:
        raise
    except (TypeError, ZeroDivisionError, OverflowError) as e:  # a malformed value
        raise ValueError(f"{name}: config value not understood: {e}") from None


class DiffusersPositions:
    """The positional encoding of one diffusers transformer (:func:`from_diffusers_config`).

    Attributes
    ----------
    class_name : str
        The model class (``_class_name``).
    kind : {"rope", "sincos"}
        A rotary embedding (:meth:`cos_sin`, :meth:`apply`) or an added sincos table
        (:meth:`table`).
    head_dim : int or None
        Rope: the features per head of the ``x`` that :meth:`apply` rotates (the rotated ones
        first; any after them pass through). Sincos: None.
    width : int
        Features the tables cover: the rotary width (cos/sin), or the sincos table width.
    n_axes : int
        Coordinates per position id (the last axis of :meth:`position_ids`).
    order : str
        How the model lays out its tokens (text first or last, ...), for the reader.

    Notes
    -----
    Angles are exact, as everywhere in arrpos: the ids are built in float64 on the host and
    rounded once, and the frequencies are formed in float64, so tables agree with a model's own
    float32 tables to within its float32 rounding (about ``|angle| * 2**-24``).
    ``docs/diffusers.md`` lists every class, its ``position_ids`` keywords and token order.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> wan = arrpos.from_diffusers_config({"_class_name": "WanTransformer3DModel"})
    >>> wan.size_names, wan.order
    (('frames', 'height', 'width'), 'video tokens (frames, rows, columns)')
    >>> ids = wan.position_ids(frames=2, height=2, width=3)
    >>> ids[3:5].tolist()
    [[0, 1, 0], [0, 1, 1]]
    >>> q = np.ones((1, 12, 40, 128))                  # (batch, seq, heads, head_dim)
    >>> wan.apply(q, ids, heads_axis=-2).shape
    (1, 12, 40, 128)

    A sincos model gives the table it adds to its patch tokens:

    >>> dit = arrpos.from_diffusers_config({"_class_name": "DiTTransformer2DModel"})
    >>> ids = dit.position_ids(height=16, width=16)    # its 16 x 16 grid: (x, y) per token
    >>> ids[17].tolist(), dit.table(ids).shape
    ([1, 1], (256, 1152))
    """

    __slots__ = ("_spec", "_config")
    _spec: Spec
    _config: dict

    def __init__(self, spec: Spec, config: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_config", json.loads(json.dumps(dict(config))))

    def __setattr__(self, name, value):
        raise AttributeError(f"DiffusersPositions is immutable (cannot set {name})")

    # a value of its config: equal configs, equal encodings; pickled (dask.distributed,
    # multiprocessing, deepcopy of a model) as the config it is rebuilt from
    def __eq__(self, other):
        if not isinstance(other, DiffusersPositions):
            return NotImplemented
        return self._config == other._config

    def __hash__(self):
        return hash(json.dumps(self._config, sort_keys=True))

    def __reduce__(self):
        return from_diffusers_config, (self._config,)

    def __repr__(self):
        s = self._spec
        dim = f"head_dim={s.head_dim}" if s.kind == "rope" else f"width={s.width}"
        return f"DiffusersPositions({s.class_name!r}, kind={s.kind!r}, {dim}, n_axes={s.n_axes})"

    @property
    def class_name(self) -> str:
        """The model class the config names (its ``_class_name``)."""
        return self._spec.class_name

    @property
    def kind(self) -> str:
        """``"rope"`` (rotary: :meth:`cos_sin`, :meth:`apply`) or ``"sincos"`` (:meth:`table`)."""
        return self._spec.kind

    @property
    def head_dim(self) -> int | None:
        """Features of ``x`` per head (the rotated ones first); None for sincos models."""
        return self._spec.head_dim

    @property
    def width(self) -> int:
        """Features the tables cover (rotated plus leading pass-through; sincos: the table)."""
        return self._spec.width

    @property
    def n_axes(self) -> int:
        """Coordinates per position id: the last axis of :meth:`position_ids`."""
        return self._spec.n_axes

    @property
    def order(self) -> str:
        """How the position ids are laid out (for the reader)."""
        return self._spec.order

    @property
    def size_names(self) -> tuple:
        """The keywords :meth:`position_ids` takes (required ones first)."""
        params = inspect.signature(self._spec.ids).parameters.values()
        return tuple(p.name for p in sorted(params, key=lambda p: p.default is not p.empty))

    def position_ids(self, *, dtype: DType | None = None, device: Device | None = None,
                     xp: Namespace | None = None, **sizes: float) -> Array:
        """The position ids the model builds for a latent of the given size.

        Parameters
        ----------
        **sizes : int or float
            The token grid and sequence lengths the model takes, named as in
            :attr:`size_names`: ``height``, ``width`` (tokens along each axis: the latent's size
            over the patch size), ``frames`` (latent frames over the temporal patch size),
            ``text_len`` (text tokens), and the few model-specific options of the pipeline
            (``fps``, ``frame_rate``, ...) with the pipeline's defaults.
        dtype : dtype, optional
            Default: the namespace's index dtype when every id is an integer, else its default
            real floating dtype (ids are computed in float64 and rounded once).
        device, xp : optional
            Where the ids are made (default NumPy).

        Returns
        -------
        array
            Shape ``(tokens, n_axes)`` in the model's token order (:attr:`order`).

        Raises
        ------
        TypeError
            A keyword the model does not take, a missing one, a non-integer size.
        ValueError
            A size out of range (the message names it).
        """
        xp = array_namespace(xp=xp, dtype=dtype)
        values = self._sizes(sizes)
        ids = np.asarray(self._spec.ids(**values), dtype=np.float64)
        dtype = check_dtype_arg(xp, dtype, device=device)
        if dtype is None and np.array_equal(ids, np.round(ids)) and np.abs(ids).max(
                initial=0) < 2**53:
            dtype = index_dtype(xp, device)
        if dtype is not None and dtype_kind(xp, dtype) == "integral":
            return xp.asarray(ids.astype(np.int64), dtype=dtype, device=device)
        dtype = output_dtype(xp, None, dtype, device=device)
        return from_host(xp, ids, dtype, device)

    def _sizes(self, sizes):
        name = self._spec.class_name
        params = inspect.signature(self._spec.ids).parameters
        for key in sizes:
            if key not in params:
                raise TypeError(f"{name}.position_ids() takes {', '.join(self.size_names)}; got "
                                f"an unexpected keyword {key!r}")
        missing = [k for k, p in params.items() if p.default is p.empty and k not in sizes]
        if missing:
            raise TypeError(f"{name}.position_ids() needs {', '.join(missing)} (it takes "
                            f"{', '.join(self.size_names)})")
        out: dict[str, Any] = {}
        for key, value in sizes.items():
            default = params[key].default
            if key in _COUNTS or isinstance(default, int) and not isinstance(default, bool):
                out[key] = check_int(value, key, minimum=_COUNTS.get(key, 0), maximum=2**31)
            elif isinstance(default, tuple):  # one real per axis
                if not isinstance(value, (tuple, list)) or len(value) != len(default):
                    raise TypeError(f"{key} must be a tuple of {len(default)} numbers, got "
                                    f"{value!r}")
                out[key] = tuple(check_real_scalar(v, f"{key}[{i}]", positive=True)
                                 for i, v in enumerate(value))
            elif value is not None or default is not None:  # None: the model's "not given"
                out[key] = check_real_scalar(value, key, positive=True)
        return out

    # --- rotary ---------------------------------------------------------------------------

    def _need(self, kind, what):
        if self._spec.kind != kind:
            other = ".table()" if kind == "rope" else ".cos_sin() / .apply()"
            raise ValueError(f"{self._spec.class_name} has a {self._spec.kind} encoding: "
                             f"{what} is for {kind} models; use {other}")

    def _positions(self, position_ids):
        xp = array_namespace(position_ids, name="position_ids")
        check_array(xp, position_ids, "position_ids", kind="real", min_ndim=1,
                    shape_hint="(..., n_axes)")
        if position_ids.shape[-1] != self._spec.n_axes:
            raise ValueError(f"position_ids must have a trailing axis of {self._spec.n_axes} "
                             f"coordinates for {self._spec.class_name}, got shape "
                             f"{tuple(position_ids.shape)}")
        return xp

    def _coords(self, xp, pos):
        """The ids the angles are formed from: the model's own transform applied, exactly."""
        if self._spec.transform is None:
            return pos
        dev = device_of(pos)
        work = xp.float64 if has_float64(xp, dev) else xp.float32
        scale = xp.asarray([s for s, _ in self._spec.transform], dtype=work, device=dev)
        shift = xp.asarray([t for _, t in self._spec.transform], dtype=work, device=dev)
        return xp.astype(pos, work) * scale + shift

    def cos_sin(self, position_ids: Array, /, *, dtype: DType | None = None) -> tuple[Array, Array]:
        """``(cos, sin)`` of the model's rotary module at ``position_ids``.

        Parameters
        ----------
        position_ids : array
            Shape ``P + (n_axes,)`` (:meth:`position_ids` gives ``(tokens, n_axes)``).
        dtype : dtype, optional
            Real floating output. Default: that of floating ids, else the namespace's default.

        Returns
        -------
        cos, sin : array
            Each ``P + (width,)``, full width in the model's own pairing of features (what its
            apply function multiplies ``x`` by); models whose rotary spans all heads (LTX-2
            ``"split"``) give ``P + (heads, width)``.
        """
        self._need("rope", "cos_sin()")
        xp = self._positions(position_ids)
        dev = device_of(position_ids)
        dtype = check_dtype_arg(xp, dtype, device=dev)
        dtype = output_dtype(xp, position_ids if dtype is None else None, dtype, device=dev)
        if self._spec.rope is not None:  # 1-D, frequencies chosen by the sequence length
            return self._spec.rope.cos_sin(position_ids[..., 0], dtype=dtype)
        pos = self._coords(xp, position_ids)
        work = xp.float64 if has_float64(xp, dev) else xp.float32
        cos, sin = [], []
        for block in self._spec.blocks:
            inv = from_host(xp, np.asarray(block.inv_freq), work, dev)
            c, s = rope_cos_sin(pos, inv, layout=block.layout, axes=block.axes, dtype=dtype,
                                attention_factor=self._spec.attention_factor)
            cos.append(c)
            sin.append(s)
        if self._spec.lead:
            shape = tuple(pos.shape[:-1]) + (self._spec.lead,)
            cos.insert(0, xp.ones(shape, dtype=dtype, device=dev))
            sin.insert(0, xp.zeros(shape, dtype=dtype, device=dev))
        cos = cos[0] if len(cos) == 1 else xp.concat(cos, axis=-1)
        sin = sin[0] if len(sin) == 1 else xp.concat(sin, axis=-1)
        if self._spec.heads:  # one slice of the frequencies per head
            shape = tuple(cos.shape[:-1]) + (self._spec.heads, -1)
            cos, sin = xp.reshape(cos, shape), xp.reshape(sin, shape)
        return cos, sin

    def apply(self, x: Array, position_ids: Array, /, *, heads_axis: int | None,
              inverse: bool = False) -> Array:
        """Rotate ``x`` as the model's apply function does.

        Parameters
        ----------
        x : array
            Queries or keys: ``(..., seq, heads, head_dim)`` with ``heads_axis=-2``,
            ``(..., heads, seq, head_dim)`` with ``heads_axis=-3``, or ``(..., seq, dim)``
            with ``heads_axis=None`` (models that rotate before splitting heads).
        position_ids : array
            The ids of the tokens of ``x``: ``(seq, n_axes)`` or broadcasting to
            ``x.shape`` without the heads and feature axes, plus the coordinate axis.
        heads_axis : int or None
            Required: where the heads axis of ``x`` is (no default: a guess is silently wrong
            when heads == seq).
        inverse : bool, optional
            Rotate back.

        Returns
        -------
        array
            ``x`` rotated, same shape and dtype; features past the rotated ones pass through.
        """
        self._need("rope", "apply()")
        xp = array_namespace(x, position_ids, name="x and position_ids")
        check_array(xp, x, "x", kind="floating")
        ax = heads_axis_from_end(heads_axis, x)
        spec = self._spec
        if spec.heads:
            return self._apply_per_head(xp, x, position_ids, ax, inverse)
        if spec.rope is not None:
            self._positions(position_ids)
            return spec.rope.apply(x, position_ids[..., 0], heads_axis=heads_axis,
                                   inverse=inverse)
        if x.shape[-1] < spec.width:
            raise ValueError(f"x must have at least {spec.width} features (the rotary width of "
                             f"{spec.class_name}), got shape {tuple(x.shape)}")
        cos, sin = self.cos_sin(position_ids, dtype=x.dtype)
        if ax is not None:
            cos = xp.expand_dims(cos, axis=cos.ndim + ax + 1)
            sin = xp.expand_dims(sin, axis=sin.ndim + ax + 1)
        layouts = {b.rotate for b in spec.blocks}
        if layouts == {"interleaved"} or len(spec.blocks) == 1 and not spec.lead:
            return apply_rope(x, cos, sin, layout=layouts.pop(), inverse=inverse)
        # blocks paired "half" each within itself: rotate them one by one
        parts, start = [], 0
        edges = [(0, spec.lead, None)] if spec.lead else []
        for b in spec.blocks:
            edges.append((spec.lead + start, b.width, b.rotate))
            start += b.width
        for lo, w, layout in edges:
            xs = x[..., lo:lo + w]
            parts.append(xs if layout is None else apply_rope(
                xs, cos[..., lo:lo + w], sin[..., lo:lo + w], layout=layout, inverse=inverse))
        if x.shape[-1] > spec.width:
            parts.append(x[..., spec.width:])
        return xp.concat(parts, axis=-1)

    def _apply_per_head(self, xp, x, position_ids, ax, inverse):
        """LTX-2 "split": head ``h`` rotates with the ``h``-th slice of the tables."""
        spec = self._spec
        heads = cast(int, spec.heads)  # (set: the per-head specs alone come here)
        if ax is None or x.shape[ax] != heads or x.shape[-1] * heads != spec.width:
            raise ValueError(f"x must have {heads} heads of {spec.width // heads} "
                             f"features on heads_axis for {spec.class_name}, got shape "
                             f"{tuple(x.shape)} with heads_axis={ax}")
        cos, sin = self.cos_sin(position_ids, dtype=x.dtype)  # P + (heads, head_dim)
        if ax == -3:  # tables (..., seq, heads, d) -> (..., heads, seq, d)
            cos, sin = xp.moveaxis(cos, -2, -3), xp.moveaxis(sin, -2, -3)
        return apply_rope(x, cos, sin, layout=spec.blocks[0].rotate, inverse=inverse)

    # --- sincos ---------------------------------------------------------------------------

    def table(self, position_ids: Array, /, *, dtype: DType | None = None) -> Array:
        """The model's sincos table at ``position_ids`` (what it adds to the patch tokens).

        Parameters
        ----------
        position_ids : array
            Shape ``P + (n_axes,)``: the coordinates of :meth:`position_ids`.
        dtype : dtype, optional
            Real floating output. Default: that of floating ids, else the namespace's default.

        Returns
        -------
        array
            ``P + (width,)``: per chunk of features, ``sinusoidal(coordinate, chunk width,
            layout="split")`` (sines then cosines), chunks in the model's order.
        """
        self._need("sincos", "table()")
        xp = self._positions(position_ids)
        dev = device_of(position_ids)
        dtype = check_dtype_arg(xp, dtype, device=dev)
        dtype = output_dtype(xp, position_ids if dtype is None else None, dtype, device=dev)
        pos = self._coords(xp, position_ids)
        parts = [sinusoidal(pos[..., c.axis], c.width, layout="split", dtype=dtype)
                 for c in self._spec.blocks]
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1)

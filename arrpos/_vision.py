"""Patch coordinates of vision models: variable grids per sample (timm NaFlex) and DINOv3's
coordinate augmentation (shift, jitter, rescale).

Coordinates follow :func:`arrpos.grid_coords`: the last grid axis (x = w) comes first. The
peers stack ``(h, w)`` / ``(y, x)``: reverse the last axis (``[..., ::-1]``) for their order.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from ._lib import (
    array_namespace,
    check_array,
    check_choice,
    check_dtype_arg,
    check_int,
    check_real_scalar,
    check_size,
    default_float,
    describe,
    device_of,
    from_host,
    has_float64,
    is_lazy,
    output_dtype,
    round_once,
    to_numpy,
)
from .typing import Array, DType, Device, GridMode, Grids, Namespace

__all__ = ["CoordAugmentation", "augment_coords", "coord_augmentation", "patch_coords"]

_MODES = ("index", "linspace", "center")


def host_grids(xp: Namespace, grids: Grids, name: str,
               widths: tuple[int, ...] = (2,)) -> tuple[np.ndarray, Device]:
    """``grids`` as host int64 rows ``(n, c)`` (``c`` one of ``widths``) and the device of the
    array (None for a sequence of tuples, accepted as sizes like a shape). Every entry >= 1."""
    what = " or ".join({2: "(h, w)", 3: "(t, h, w)"}[c] for c in widths) + " rows"
    if hasattr(grids, "shape") and hasattr(grids, "dtype"):
        check_array(xp, grids, name, kind="integer", ndim=2, shape_hint=f"(n, {widths[0]}): {what}")
        if is_lazy(grids) and not hasattr(grids, "compute"):
            raise ValueError(f"{name} must have values that can be read (not traced under jit, "
                             "not a meta or fake tensor): the output's shape depends on them")
        host = to_numpy(grids).astype(np.int64)
        dev = device_of(grids)
    else:
        if isinstance(grids, (str, bytes, numbers.Number)) or not hasattr(grids, "__iter__"):
            raise TypeError(f"{name} must be an integer array or a sequence of {what}, got "
                            f"{describe(grids)}")
        rows = [tuple(r) if hasattr(r, "__iter__") and not isinstance(r, (str, bytes)) else r
                for r in grids]
        if any(not isinstance(r, tuple) for r in rows):
            raise TypeError(f"{name} must hold {what}, got a row that is not a sequence")
        if len({len(r) for r in rows}) > 1:
            raise ValueError(f"{name} must hold rows of one length, got lengths "
                             f"{sorted({len(r) for r in rows})}")
        host = np.array([[check_int(v, name) for v in r] for r in rows],
                        dtype=np.int64).reshape(len(rows), -1)
        dev = None
    if host.shape[1] not in widths:
        raise ValueError(f"{name} must have shape (n, {' or '.join(map(str, widths))}): {what}, "
                         f"got {host.shape}")
    if host.size and host.min() < 1:
        raise ValueError(f"{name} must hold sizes >= 1, got a value of {int(host.min())}")
    return host, dev


def _axis_values(n, mode):
    """Host float64 coordinates along an axis of ``n`` patches (as ``grid_coords``)."""
    i = np.arange(n, dtype=np.float64)
    if mode == "linspace":
        return (2.0 * i - (n - 1)) / (n - 1) if n > 1 else i - 1.0
    if mode == "center":
        return (2.0 * i + (1 - n)) / n
    return i


def patch_coords(grids: Grids, /, *, mode: GridMode = "index", pad_to: int | None = None,
                 dtype: DType | None = None, device: Device | None = None,
                 xp: Namespace | None = None) -> tuple[Array, Array]:
    """Per-sample patch coordinates of a batch of images with different grids (timm NaFlex),
    padded to one length, with the mask of the real patches.

    Image ``b`` of grid ``(h, w)`` has its ``h * w`` patches in row-major order (as timm's
    ``patchify_image`` and NaFlex collate them); patch ``p`` sits at row ``p // w`` and
    column ``p % w``. Rows past ``h * w`` are padding: coordinates 0 and ``valid`` False.

    Parameters
    ----------
    grids : array or sequence of (int, int)
        ``(n, 2)`` integer ``(h, w)`` patch grids, one per image (sizes >= 1).
    mode : {"index", "linspace", "center"}, optional
        As :func:`grid_coords`, per image: integer indices, ``linspace(-1, 1, n)`` along each
        axis, or the centred ``2 (i + 0.5) / n - 1`` (DINOv3).
    pad_to : int, optional
        Patches per sample (NaFlex's ``max_patches``); default the largest ``h * w``. A
        smaller value than an image's patch count is refused (never truncated).
    dtype : dtype, optional
        Real floating dtype of ``coords`` (default: the namespace default float).
    device, xp : optional
        Where to build a sequence ``grids`` (default: the device of an array ``grids``, else
        the namespace default; NumPy).

    Returns
    -------
    coords : array
        ``(n, pad_to, 2)``, x (column) first then y (row), as :func:`grid_coords`.
    valid : array
        Boolean ``(n, pad_to)``: True for real patches (NaFlex's ``patch_valid``).

    Raises
    ------
    TypeError
        ``grids`` not integer; ``pad_to`` not an int; ``dtype`` not real floating.
    ValueError
        ``grids`` not ``(n, 2)`` or with a size < 1; ``pad_to`` below an image's patch count;
        unknown ``mode``.

    Notes
    -----
    timm's ``patch_coord`` is the integer ``(y, x)`` pair: ``coords[..., ::-1]`` cast to an
    integer dtype; ``coords.max(axis=1) + 1`` over the valid rows gives back the grids
    (timm's ``calculate_naflex_grid_sizes``, in ``(x, y)`` order). The grids are read on the
    host (the output shape depends on them); coordinates are formed there in float64 and
    rounded once. Backend support: host arithmetic and one transfer per output.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> coords, valid = arrpos.patch_coords(np.array([[2, 3], [1, 2]]))
    >>> coords[1, :3].tolist(), valid[1].tolist()
    ([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]], [True, True, False, False, False, False])
    >>> coords[0, :, ::-1].astype(int).tolist()  # timm's (y, x) patch_coord
    [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    """
    is_array = hasattr(grids, "shape") and hasattr(grids, "dtype")
    xp = array_namespace(grids if is_array else None, xp=xp, name="grids", dtype=dtype)
    host, dev = host_grids(xp, grids, "grids")
    mode = check_choice(mode, "mode", _MODES)
    if dev is not None and device is not None and device != dev:
        raise ValueError(f"device={device!r} differs from the device of grids ({dev!r}); move "
                         "the array yourself if that is what you want")
    dev = dev if dev is not None else device
    counts = host[:, 0] * host[:, 1]
    top = int(counts.max()) if len(counts) else 0
    length = top if pad_to is None else check_int(pad_to, "pad_to", minimum=0)
    if length < top:
        b = int(np.argmax(counts))
        raise ValueError(f"pad_to must be >= every image's patch count: image {b} of grid "
                         f"{tuple(int(v) for v in host[b])} has {top} patches, got pad_to={length}")
    n = len(host)
    check_size(n * length * 2, "the coordinates")
    dtype = check_dtype_arg(xp, dtype, device=dev)
    dtype = dtype if dtype is not None else default_float(xp, dev)
    coords = np.zeros((n, length, 2))
    valid = np.zeros((n, length), dtype=bool)
    for b, (h, w) in enumerate(host.tolist()):
        ys, xs = np.meshgrid(_axis_values(h, mode), _axis_values(w, mode), indexing="ij")
        coords[b, :h * w, 0] = xs.reshape(-1)
        coords[b, :h * w, 1] = ys.reshape(-1)
        valid[b, :h * w] = True
    return from_host(xp, coords, dtype, dev), xp.asarray(valid, device=dev)


def _check_augmentation(shift, jitter, rescale):
    """The three ranges as floats (None passes), checked as timm's ``_coord_aug_config``."""
    if shift is not None:
        shift = check_real_scalar(shift, "shift", minimum=0.0)
    if jitter is not None:
        jitter = check_real_scalar(jitter, "jitter", minimum=1.0)
    if rescale is not None:
        rescale = check_real_scalar(rescale, "rescale", minimum=1.0)
    return shift, jitter, rescale


def _draws(values, n, name, *, positive):
    """``values`` as a tuple of ``n`` finite floats (a scalar is repeated), None passes."""
    if values is None:
        return None
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = (values,) * n
    try:
        values = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of floats, got {describe(values)}") from None
    out = tuple(check_real_scalar(v, f"{name}[{i}]", positive=positive)
                for i, v in enumerate(values))
    return out


@dataclasses.dataclass(frozen=True)
class CoordAugmentation:
    """One drawn coordinate augmentation: ``((coords + shift) * jitter) * rescale``.

    ``shift`` and ``jitter`` hold one value per coordinate axis (in the order of the
    coordinates the object is applied to), ``rescale`` one value for all; a field that is
    None is skipped (DINOv3 with that augmentation off). :func:`coord_augmentation` draws one
    from ranges; a caller may also build one from draws made elsewhere (a peer's RNG).

    Calling it on coordinates ``(..., n)`` applies it (computed in float64 where the backend
    has it, rounded once to the coordinates' floating dtype or to ``dtype``).
    Backend support: generic Array API code.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> aug = arrpos.CoordAugmentation(shift=(0.5, -0.5), rescale=2.0)
    >>> aug(np.array([[0.0, 1.0]])).tolist()
    [[1.0, 1.0]]
    """

    shift: tuple | None = None
    jitter: tuple | None = None
    rescale: float | None = None

    def __post_init__(self):
        shift = _draws(self.shift, 1, "shift", positive=False)
        jitter = _draws(self.jitter, 1, "jitter", positive=True)
        if shift is not None and jitter is not None and len(shift) != len(jitter):
            raise ValueError(f"shift and jitter must have one value per axis each, got "
                             f"{len(shift)} and {len(jitter)}")
        rescale = None if self.rescale is None else check_real_scalar(self.rescale, "rescale",
                                                                      positive=True)
        object.__setattr__(self, "shift", shift)
        object.__setattr__(self, "jitter", jitter)
        object.__setattr__(self, "rescale", rescale)

    def __call__(self, coords: Array, /, *, dtype: DType | None = None) -> Array:
        xp = array_namespace(coords, name="coords")
        check_array(xp, coords, "coords", kind="real", min_ndim=1, shape_hint="(..., n)")
        n = coords.shape[-1]
        for name in ("shift", "jitter"):
            values = getattr(self, name)
            if values is not None and len(values) != n:
                raise ValueError(f"coords must have one coordinate per {name} value: {name} "
                                 f"has {len(values)}, coords has shape {tuple(coords.shape)}")
        dev = device_of(coords)
        dtype = output_dtype(xp, coords, dtype, device=dev)
        work = xp.float64 if has_float64(xp, dev) else xp.float32
        out = xp.astype(coords, work)
        if self.shift is not None:
            out = out + from_host(xp, np.array(self.shift), work, dev)
        if self.jitter is not None:
            out = out * from_host(xp, np.array(self.jitter), work, dev)
        if self.rescale is not None:
            out = out * self.rescale
        return round_once(xp, out, dtype)


def coord_augmentation(n_axes: int, /, *, shift: float | None = None, jitter: float | None = None,
                       rescale: float | None = None,
                       seed: int | np.random.Generator | None = None) -> CoordAugmentation:
    """Draw one DINOv3 coordinate augmentation (shift, per-axis jitter, global rescale).

    The draws of transformers' ``augment_patches_center_coordinates`` (DINOv3, EoMT-DINOv3)
    and timm's ``_apply_coord_augs``, in their order: ``shift_a`` uniform in
    ``[-shift, shift]`` per axis, then ``jitter_a`` log-uniform in ``[1/jitter, jitter]``
    per axis, then one ``rescale`` log-uniform in ``[1/rescale, rescale]``; each only when
    its range is given.

    Parameters
    ----------
    n_axes : int
        Coordinate axes (2 for images).
    shift : float, optional
        Largest shift (>= 0), in the coordinates' units (DINOv3 ``pos_embed_shift``).
    jitter : float, optional
        Largest per-axis factor (>= 1; ``pos_embed_jitter``).
    rescale : float, optional
        Largest global factor (>= 1; ``pos_embed_rescale``, 2.0 in DINOv3's config).
    seed : int or numpy.random.Generator, optional
        NumPy's ``default_rng(seed)`` draws ``random(n_axes)`` for the shift, then for the
        jitter, then ``random()`` for the rescale, each turned into its range as torch's
        ``uniform_(a, b)`` does (``a + (b - a) u``): the same seed gives the same augmentation
        on every backend. None draws fresh entropy.

    Returns
    -------
    CoordAugmentation
        The drawn values; call it on coordinates ``(..., n_axes)``.

    Raises
    ------
    TypeError
        ``n_axes`` not an int, a range not a real number, ``seed`` of another kind.
    ValueError
        ``n_axes`` < 1, ``shift`` < 0, ``jitter`` or ``rescale`` < 1, a range not finite.

    Notes
    -----
    torch draws from its own generator, so a seed here does not give torch's draws; to
    replay a peer's draws, build :class:`CoordAugmentation` from them.
    Backend support: host draws (NumPy's generator); no array is made.

    Examples
    --------
    >>> import arrpos
    >>> aug = arrpos.coord_augmentation(2, shift=0.1, rescale=2.0, seed=0)
    >>> len(aug.shift), aug.jitter, 0.5 <= aug.rescale <= 2.0
    (2, None, True)
    >>> aug == arrpos.coord_augmentation(2, shift=0.1, rescale=2.0, seed=0)
    True
    """
    n = check_int(n_axes, "n_axes", minimum=1, maximum=2**16)
    shift, jitter, rescale = _check_augmentation(shift, jitter, rescale)
    if seed is not None and not isinstance(seed, np.random.Generator):
        seed = check_int(seed, "seed", minimum=0)
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    if shift is not None:
        out["shift"] = tuple(float(-shift + 2 * shift * u) for u in rng.random(n))
    if jitter is not None:
        top = math.log(jitter)
        out["jitter"] = tuple(float(math.exp(-top + 2 * top * u)) for u in rng.random(n))
    if rescale is not None:
        top = math.log(rescale)
        out["rescale"] = float(math.exp(-top + 2 * top * rng.random()))
    return CoordAugmentation(**out)


def augment_coords(coords: Array, /, *, shift: float | None = None, jitter: float | None = None,
                   rescale: float | None = None, seed: int | np.random.Generator | None = None,
                   dtype: DType | None = None) -> Array:
    """DINOv3's training-time coordinate augmentation of patch coordinates.

    ``coord_augmentation(coords.shape[-1], shift=..., jitter=..., rescale=..., seed=...)``
    applied to ``coords``: ``((coords + s) * j) * r`` with one shift ``s`` and one jitter
    ``j`` per axis and one rescale ``r`` drawn for the whole call (transformers
    ``augment_patches_center_coordinates``; timm ``_apply_coord_augs``).

    Parameters
    ----------
    coords : array
        Real ``(..., n)`` coordinates, e.g. ``grid_coords((H, W), mode="center")``.
    shift, jitter, rescale : float, optional
        The ranges (see :func:`coord_augmentation`); none given returns the coordinates
        converted to ``dtype``.
    seed : int or numpy.random.Generator, optional
        Seed of the host draws (see :func:`coord_augmentation`).
    dtype : dtype, optional
        Real floating output dtype (default: that of floating ``coords``, else the default).

    Returns
    -------
    array
        ``coords.shape``, computed in float64 where the backend has it, rounded once.

    Raises
    ------
    TypeError, ValueError
        As :func:`coord_augmentation`; ``coords`` not a real array with at least one axis.

    Notes
    -----
    Backend support: host draws, then generic Array API code.

    Examples
    --------
    >>> import arrpos
    >>> g = arrpos.grid_coords((2, 2), mode="center")
    >>> a = arrpos.augment_coords(g, rescale=2.0, seed=0)
    >>> bool(((a / g) == (a / g)[0, 0, 0]).all())   # one factor for every coordinate
    True
    """
    xp = array_namespace(coords, name="coords")
    check_array(xp, coords, "coords", kind="real", min_ndim=1, shape_hint="(..., n)")
    if coords.shape[-1] < 1:
        raise ValueError(f"coords must have shape (..., n) with n >= 1, got shape "
                         f"{tuple(coords.shape)}")
    aug = coord_augmentation(coords.shape[-1], shift=shift, jitter=jitter, rescale=rescale,
                             seed=seed)
    return aug(coords, dtype=dtype)

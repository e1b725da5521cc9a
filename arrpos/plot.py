"""Figures of positional encodings (matplotlib; install it with ``pip install matplotlib``).

Every function returns a :class:`matplotlib.figure.Figure` made without pyplot, so it is safe in
threads and needs no GUI backend: save it with ``fig.savefig("pe.png")`` or show it in a notebook.
Inputs may come from any supported array library; the values are computed there by arrpos and
then copied to the host explicitly (:func:`to_host`) for drawing.

This module is imported only when asked for (``import arrpos.plot``): ``import arrpos`` never
imports matplotlib.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

try:
    from matplotlib.figure import Figure
except ImportError as exc:  # the plot extra is optional
    raise ImportError(
        'arrpos.plot needs matplotlib: pip install matplotlib (or, from a checkout, pip install ".[plot]")'
    ) from exc

import arrpos
from arrpos._lib import check_int, to_numpy
from arrpos.typing import AlibiMode

__all__ = ["alibi", "rope_decay", "similarity", "t5", "table", "to_host"]

_DIVERGING = "RdBu_r"


def to_host(x: Any, name: str = "x") -> np.ndarray:
    """Copy an array from any supported library to a NumPy array in host memory.

    The copy is explicit and happens only here, for drawing: PyTorch tensors are detached and
    moved with ``.cpu()`` (bfloat16/float16 widened to float32), CuPy arrays with ``.get()``,
    Dask arrays are computed, and JAX, array-api-strict and anything else with ``__array__`` or
    ``__dlpack__`` go through :func:`numpy.asarray` / :func:`numpy.from_dlpack`.

    Parameters
    ----------
    x : array or array-like
        A NumPy, CuPy, PyTorch, JAX, Dask or array-api-strict array, or a nested sequence.
    name : str, optional
        The argument name used in error messages.

    Returns
    -------
    numpy.ndarray
        Same shape and values (integer, boolean or real floating dtype).

    Raises
    ------
    TypeError
        ``x`` cannot be converted, or holds something other than real numbers.

    Examples
    --------
    >>> import numpy as np
    >>> from arrpos.plot import to_host
    >>> to_host([[1, 2], [3, 4]]).shape
    (2, 2)
    >>> to_host(np.float32([0.5])).dtype
    dtype('float32')
    """
    try:
        out = to_numpy(x)
    except (TypeError, ValueError, RuntimeError, AttributeError, BufferError) as exc:
        raise TypeError(f"{name} must be an array, got {type(x).__name__} ({exc})") from None
    if out.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {out.dtype}")
    return out


def _check_ndim(a: np.ndarray, ndim: int, name: str, what: str) -> None:
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {what}, got shape {a.shape}")


def _new_axes(ax: Any, figsize: tuple[float, float]) -> tuple[Figure, Any]:
    if ax is not None:
        return ax.get_figure(), ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _symmetric_limit(a: np.ndarray) -> float:
    m = float(np.nanmax(np.abs(a))) if a.size else 1.0
    return m if m > 0 and math.isfinite(m) else 1.0


def table(table: Any, /, *, title: str | None = "positional encoding", cmap: str = _DIVERGING,
          ax: Any = None, figsize: tuple[float, float] = (8.0, 5.0)) -> Figure:
    """Heatmap of an encoding table: positions down, features across.

    The colour scale is symmetric around zero (blue negative, red positive), so a sinusoidal
    table shows its fast oscillating first features on the left and its slow ones on the right.

    Parameters
    ----------
    table : array
        Shape ``(positions, features)``, from any supported library (e.g.
        :func:`arrpos.sinusoidal`).
    title : str or None, optional
        Axes title.
    cmap : str, optional
        A matplotlib colormap name.
    ax : matplotlib.axes.Axes, optional
        Draw into this axes instead of a new figure (its figure is returned).
    figsize : (float, float), optional
        Size in inches of a new figure.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError
        ``table`` not a real array.
    ValueError
        ``table`` not 2-D.

    Examples
    --------
    >>> import arrpos, arrpos.plot
    >>> fig = arrpos.plot.table(arrpos.sinusoidal(100, 64))
    >>> fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()
    ('feature', 'position')
    >>> fig.savefig("pe.png")  # doctest: +SKIP
    """
    a = to_host(table, "table")
    _check_ndim(a, 2, "table", "2-D (positions, features)")
    fig, axes = _new_axes(ax, figsize)
    lim = _symmetric_limit(a)
    im = axes.imshow(a, aspect="auto", cmap=cmap, vmin=-lim, vmax=lim, interpolation="nearest")
    axes.set_xlabel("feature")
    axes.set_ylabel("position")
    if title:
        axes.set_title(title)
    fig.colorbar(im, ax=axes)
    return fig


def similarity(table: Any, /, *, metric: Literal["dot", "cosine"] = "dot", title: str | None = None,
               cmap: str = "viridis", ax: Any = None,
               figsize: tuple[float, float] = (6.0, 5.0)) -> Figure:
    """Similarity matrix of an encoding table: how close position ``i`` is to position ``j``.

    Computed by :func:`arrpos.similarity` in the table's own library, then drawn. For a
    sinusoidal table the dot product depends only on ``i - j`` (bands parallel to the
    diagonal) and falls off with distance.

    Parameters
    ----------
    table : array
        Shape ``(positions, features)``, from any supported library.
    metric : {"dot", "cosine"}, optional
        Passed to :func:`arrpos.similarity`.
    title : str or None, optional
        Axes title (default: names the metric).
    cmap : str, optional
        A matplotlib colormap name.
    ax : matplotlib.axes.Axes, optional
        Draw into this axes instead of a new figure.
    figsize : (float, float), optional
        Size in inches of a new figure.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError, ValueError
        As :func:`arrpos.similarity` (``table`` not a 2-D real array, unknown ``metric``).

    Examples
    --------
    >>> import arrpos, arrpos.plot
    >>> fig = arrpos.plot.similarity(arrpos.sinusoidal(64, 32), metric="cosine")
    >>> fig.axes[0].get_title()
    'cosine similarity between positions'
    """
    sim = to_host(arrpos.similarity(table, metric=metric), "similarity")
    fig, axes = _new_axes(ax, figsize)
    im = axes.imshow(sim, cmap=cmap, interpolation="nearest")
    axes.set_xlabel("position j")
    axes.set_ylabel("position i")
    axes.set_title(title if title is not None else f"{metric} similarity between positions")
    fig.colorbar(im, ax=axes)
    return fig


def rope_decay(dim: int = 128, /, *, max_distance: int = 256, base: float = 10000.0,
               scaling: Any = None, xp: Any = None,
               figsize: tuple[float, float] = (7.0, 6.0)) -> Figure:
    """RoPE's long-term decay: how attention between rotated vectors falls with distance.

    Two panels against the relative distance ``r = m - n`` (RoFormer, Su et al. 2021, sec. 3.4.3
    and fig. 2):

    * top, the relative upper bound ``(1 / (d/2)) sum_j |S_j|`` with
      ``S_j = sum_{k<j} exp(i r theta_k)``, which bounds ``<R_m q, R_n k>`` up to a factor
      that depends on ``q`` and ``k`` only;
    * bottom, the mean score ``<R_m q, R_n k> / d`` for all-ones ``q`` and ``k``, computed with
      :func:`arrpos.rope_cos_sin` and :func:`arrpos.apply_rope` in the library ``xp``
      (1 at ``r = 0``, times ``attention_factor ** 2`` under a scaling that has one).

    Parameters
    ----------
    dim : int, optional
        Rotary width ``d`` (even).
    max_distance : int, optional
        Largest relative distance drawn.
    base : float, optional
        RoPE base (``rope_theta``).
    scaling : optional
        A scaling object (e.g. ``arrpos.LinearScaling(4.0)``) passed to
        :func:`arrpos.rope_frequencies`, to see how it stretches the decay.
    xp : namespace, optional
        Library that computes the score (default NumPy).
    figsize : (float, float), optional
        Size in inches.

    Returns
    -------
    matplotlib.figure.Figure
        Two axes: the bound, then the score.

    Raises
    ------
    TypeError, ValueError
        ``max_distance`` not an int >= 1; as :func:`arrpos.rope_frequencies` (``dim`` odd or
        not an int, ``base <= 0``).

    Examples
    --------
    >>> import arrpos.plot
    >>> fig = arrpos.plot.rope_decay(64, max_distance=100)
    >>> [ax.get_ylabel() for ax in fig.axes]
    ['relative upper bound', 'mean score, all-ones q, k']
    """
    max_distance = check_int(max_distance, "max_distance", minimum=1)
    inv_freq, factor = arrpos.rope_frequencies(dim, base=base, scaling=scaling,
                                               seq_len=max_distance + 1, xp=xp)
    ns = _namespace_of(inv_freq)
    # The score <R_r q, R_0 k>: rotate all-ones q at every distance r, k at position 0.
    positions = ns.arange(max_distance + 1, device=_device_of(inv_freq))
    cos, sin = arrpos.rope_cos_sin(positions, inv_freq, attention_factor=factor)
    ones = ns.ones(tuple(cos.shape), dtype=cos.dtype, device=_device_of(cos))
    q = arrpos.apply_rope(ones, cos, sin)
    k = arrpos.apply_rope(ones[:1, :], cos[:1, :], sin[:1, :])
    score = to_host(ns.sum(q * k, axis=-1), "score").astype(np.float64) / int(cos.shape[-1])
    # The bound is a property of the frequencies alone: take them in float64 from NumPy, not
    # rounded to the backend's float32.
    theta, _ = arrpos.rope_frequencies(dim, base=base, scaling=scaling,
                                       seq_len=max_distance + 1, dtype=np.float64)
    r = np.arange(max_distance + 1, dtype=np.float64)
    partial = np.cumsum(np.exp(1j * r[:, None] * theta[None, :]), axis=1)
    bound = np.abs(partial).mean(axis=1)
    fig = Figure(figsize=figsize, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(r, bound)
    top.set_ylabel("relative upper bound")
    bottom.plot(r, score, color="C1")
    bottom.axhline(0.0, color="0.6", linewidth=0.8)
    bottom.set_ylabel("mean score, all-ones q, k")
    bottom.set_xlabel("relative distance m - n")
    for axes in (top, bottom):
        axes.grid(alpha=0.3)
    fig.suptitle(f"RoPE long-term decay (d = {2 * theta.size}, base = {base:g})")
    return fig


def _namespace_of(x: Any) -> Any:
    from ._lib import array_namespace

    return array_namespace(x)


def _heads_grid(bias: np.ndarray, heads: Any, title: str, cmap: str,
                figsize: tuple[float, float] | None, xlabel: str, ylabel: str, *,
                labels: list[str] | None = None, symmetric: bool = False) -> Figure:
    """One small heatmap per head with a shared colour scale (centred on 0 if ``symmetric``)."""
    n = bias.shape[0]
    sel = list(range(n)) if heads is None else [int(h) for h in heads]
    for h in sel:
        if not 0 <= h < n:
            raise ValueError(f"heads must index the {n} heads, got {h}")
    if not sel:
        raise ValueError("heads must select at least one head, got none")
    ncols = min(len(sel), 4)
    nrows = -(-len(sel) // ncols)
    fig = Figure(figsize=figsize or (2.6 * ncols + 1.0, 2.6 * nrows + 0.6), layout="constrained")
    grid = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    lo, hi = float(np.nanmin(bias[sel])), float(np.nanmax(bias[sel]))
    if symmetric:
        hi = max(abs(lo), abs(hi))
        lo = -hi
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    for i, axes in enumerate(grid.flat):
        if i >= len(sel):
            axes.set_visible(False)
            continue
        im = axes.imshow(bias[sel[i]], cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
        label = f"head {sel[i]}" + (f", {labels[sel[i]]}" if labels else "")
        axes.set_title(label, fontsize="small")
    for c in range(ncols):  # the lowest drawn panel of each column carries the x axis
        axes = grid[(len(sel) - 1 - c) // ncols, c]
        axes.set_xlabel(xlabel)
        axes.tick_params(labelbottom=True)
    for axes in grid[:, 0]:
        axes.set_ylabel(ylabel)
    fig.suptitle(title)
    fig.colorbar(im, ax=grid.ravel().tolist(), shrink=0.8)  # every panel shares lo..hi
    return fig


def alibi(slopes: Any = 8, /, *, length: int = 32, mode: AlibiMode = "causal",
          max_bias: float = 8.0, heads: Any = None, cmap: str = "viridis",
          figsize: tuple[float, float] | None = None) -> Figure:
    """ALiBi's attention bias, one panel per head (Press et al., 2022).

    Each panel is ``arrpos.alibi_bias(slopes, length, length, mode=mode)[h]``: query position
    down, key position across, titled with the head's slope ``m``. The colour scale is shared,
    so the panels compare: steep heads forget distant keys fast, shallow heads see far.

    Parameters
    ----------
    slopes : int or array, optional
        The number of heads (slopes from :func:`arrpos.alibi_slopes` with ``max_bias``), or an
        array of per-head slopes from any supported library.
    length : int, optional
        Query and key length.
    mode : {"causal", "symmetric", "key"}, optional
        Passed to :func:`arrpos.alibi_bias`.
    max_bias : float, optional
        Passed to :func:`arrpos.alibi_slopes` when ``slopes`` is an int.
    heads : sequence of int, optional
        The heads to draw (default all).
    cmap : str, optional
        A matplotlib colormap name.
    figsize : (float, float), optional
        Size in inches (default: grows with the number of panels).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError, ValueError
        As :func:`arrpos.alibi_slopes` / :func:`arrpos.alibi_bias`; ``heads`` out of range.

    Examples
    --------
    >>> import arrpos.plot
    >>> fig = arrpos.plot.alibi(8, length=16, heads=[0, 7])
    >>> [a.get_title() for a in fig.axes if a.get_title()]
    ['head 0, m = 0.5', 'head 7, m = 0.00391']
    """
    if isinstance(slopes, int) and not isinstance(slopes, bool):
        slopes = arrpos.alibi_slopes(slopes, max_bias=max_bias)
    bias = to_host(arrpos.alibi_bias(slopes, length, length, mode=mode), "bias")
    labels = [f"m = {m:.3g}" for m in to_host(slopes, "slopes").reshape(-1).tolist()]
    return _heads_grid(bias, heads, f"ALiBi bias ({mode})", cmap, figsize, "key position",
                       "query position", labels=labels)


def t5(table: Any, /, *, length: int = 64, bidirectional: bool = True,
       num_buckets: int | None = None, max_distance: int = 128, heads: Any = None,
       cmap: str = _DIVERGING, figsize: tuple[float, float] | None = None) -> Figure:
    """T5's relative attention bias, one panel per head (Raffel et al., 2020).

    The bias of query ``i`` and key ``j`` is ``table[t5_bucket(j - i), h]``: exact buckets near
    the diagonal, logarithmically wider ones further out, one value beyond ``max_distance``.
    Computed with :func:`arrpos.relative_positions`, :func:`arrpos.t5_bucket` and
    :func:`arrpos.relative_bias` in the table's library.

    Parameters
    ----------
    table : array
        Learned bias table ``(num_buckets, heads)`` from any supported library.
    length : int, optional
        Query and key length.
    bidirectional : bool, optional
        Encoder (True) or decoder (False) bucketing.
    num_buckets : int, optional
        Default: ``table.shape[0]``.
    max_distance : int, optional
        Passed to :func:`arrpos.t5_bucket`.
    heads : sequence of int, optional
        The heads to draw (default all).
    cmap : str, optional
        A matplotlib colormap name.
    figsize : (float, float), optional
        Size in inches (default: grows with the number of panels).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    TypeError, ValueError
        ``table`` not a 2-D array; as :func:`arrpos.t5_bucket`; ``heads`` out of range.

    Examples
    --------
    >>> import numpy as np, arrpos.plot
    >>> table = np.random.default_rng(0).normal(size=(32, 4))
    >>> fig = arrpos.plot.t5(table, length=48)
    >>> len([a for a in fig.axes if a.get_title()])
    4
    """
    ns = _namespace_of(table)
    shape = getattr(table, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(f"table must be a 2-D (num_buckets, heads) array, got shape {shape}")
    nb = int(shape[0]) if num_buckets is None else num_buckets
    rel = arrpos.relative_positions(length, length, xp=ns, device=_device_of(table))
    idx = arrpos.t5_bucket(rel, bidirectional=bidirectional, num_buckets=nb,
                           max_distance=max_distance)
    bias = to_host(arrpos.relative_bias(table, idx), "bias")
    kind = "bidirectional" if bidirectional else "causal"
    return _heads_grid(bias, heads, f"T5 relative bias ({kind}, {nb} buckets)", cmap, figsize,
                       "key position", "query position", symmetric=True)


def _device_of(x: Any) -> Any:
    from ._lib import device_of

    return device_of(x)

"""The argument rules the RoPE wing's modules share: the layouts, ``out``, broadcasting into
``x``, and :meth:`RoPE.apply`'s one ``heads_axis`` rule and shape check (the table path, the
decode path and :class:`arrpos.DiffusersPositions` all use them)."""
from __future__ import annotations

from .._lib import check_array, check_bool, check_choice, check_int

__all__ = ["LAYOUTS", "broadcastable_into", "check_fit", "check_layout_inverse", "check_out",
           "heads_axis_from_end"]

LAYOUTS = ("half", "interleaved")


def broadcastable_into(small, big):
    """Whether ``small`` broadcasts to exactly ``big`` (never enlarges it)."""
    n = len(small)
    if n > len(big):
        return False
    for s, b in zip(small, big[len(big) - n:]):
        if s != 1 and s != b:
            return False
    return True


def check_layout_inverse(layout, inverse):
    check_choice(layout, "layout", LAYOUTS)
    check_bool(inverse, "inverse")


def check_out(xp, x, out, x_name="x", out_name="out"):
    """``out``: None, or an array of ``x``'s shape and dtype (its memory: check_out_memory)."""
    if out is None:
        return
    check_array(xp, out, out_name, kind="any")
    if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype:
        raise ValueError(f"{out_name} must have {x_name}'s shape {tuple(x.shape)} and dtype "
                         f"{x.dtype}, got shape {tuple(out.shape)} and dtype {out.dtype}")


def heads_axis_from_end(heads_axis, x):
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


def check_fit(rope, x, positions, heads_axis, ax):
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
    if not broadcastable_into(ids, tuple(x.shape[:-1])):
        raise ValueError(
            f"positions of shape {tuple(positions.shape)}{what} do not fit x of shape "
            f"{tuple(x.shape)} with heads_axis={heads_axis}: they must broadcast to x's shape "
            f"without its heads and feature axes, {want}")
    return pad

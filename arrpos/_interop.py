"""Converters between arrpos's rotary tables and the forms other libraries keep them in.

arrpos's ``cos`` and ``sin`` are full width in the layout of ``x`` (``"half"``:
``cat(c, c)``; ``"interleaved"``: each value twice). The peers hold the same angles as:

* a complex ``freqs_cis`` ``(..., R/2)``: ``cos + i sin`` (Meta's LLaMA ``precompute_freqs_cis``,
  diffusers ``get_1d_rotary_pos_embed(use_real=False)``, Lumina);
* a ``[cos | sin]`` cache ``(..., R)``: the ``R/2`` cosines, then the ``R/2`` sines (vLLM's and
  SGLang's ``cos_sin_cache``, FlashInfer's ``apply_rope_with_cos_sin_cache``);
* 2x2 rotation matrices ``(..., R/2, 2, 2)``: ``[[cos, -sin], [sin, cos]]`` per pair (Flux,
  diffusers PRX, SGLang's matrix RoPE).

Every converter keeps the values (no arithmetic beyond copying and negating), so a round trip
is exact; the layout says which columns of a full-width table hold the ``R/2`` angles.
"""
from __future__ import annotations

from ._lib import (
    array_namespace,
    check_array,
    check_choice,
    dtype_kind,
    is_lazy,
)
from .typing import Array, RopeLayout

__all__ = ["from_cos_sin_cache", "from_freqs_cis", "from_rotation_matrices", "rotation_matrices",
           "to_cos_sin_cache", "to_freqs_cis"]

_LAYOUTS = ("half", "interleaved")


def _read(compute):
    """``compute()``, or None for a value traced under ``jit`` (not readable)."""
    try:
        return compute()
    except Exception as exc:
        if "Tracer" in type(exc).__name__ or "Concretization" in type(exc).__name__:
            return None
        raise


def _halve(xp, t, layout):
    """The ``R/2`` distinct columns of a full-width table."""
    h = t.shape[-1] // 2
    if layout == "half":
        return t[..., :h]
    return xp.reshape(t, tuple(t.shape[:-1]) + (h, 2))[..., 0]


def _widen(xp, t, layout):
    """A full-width table in ``layout`` from its ``R/2`` columns."""
    if layout == "half":
        return xp.concat([t, t], axis=-1)
    both = xp.stack([t, t], axis=-1)
    return xp.reshape(both, tuple(t.shape[:-1]) + (2 * t.shape[-1],))


def _check_table(xp, t, name, layout):
    """A real floating full-width table (even last axis) whose two copies of each angle agree
    in ``layout``: a table of the other layout would otherwise be read wrong, silently.
    Lazy arrays are not read."""
    check_array(xp, t, name, kind="floating", min_ndim=1, shape_hint="(..., R)")
    width = t.shape[-1]
    if width % 2:
        raise ValueError(f"{name} must have an even last axis (full width R), got shape "
                         f"{tuple(t.shape)}")
    if is_lazy(t) or not width:
        return
    h = width // 2
    if layout == "half":
        a, b = t[..., :h], t[..., h:]
    else:
        pairs = xp.reshape(t, tuple(t.shape[:-1]) + (h, 2))
        a, b = pairs[..., 0], pairs[..., 1]
    same = _read(lambda: bool(xp.all((a == b) | ((a != a) & (b != b)))))
    if same is False:
        other = "interleaved" if layout == "half" else "half"
        raise ValueError(f"{name} is not a full-width table in layout={layout!r}: its two copies "
                         f"of each angle differ (a table of layout={other!r}, or a half-width "
                         "one: widen it first)")


def _check_pair(xp, cos, sin, layout):
    layout = check_choice(layout, "layout", _LAYOUTS)
    _check_table(xp, cos, "cos", layout)
    _check_table(xp, sin, "sin", layout)
    if tuple(cos.shape) != tuple(sin.shape) or cos.dtype != sin.dtype:
        raise ValueError(f"cos and sin must have one shape and dtype, got cos "
                         f"{tuple(cos.shape)} {cos.dtype} and sin {tuple(sin.shape)} {sin.dtype}")
    return layout


def to_freqs_cis(cos: Array, sin: Array, /, *, layout: RopeLayout = "half") -> Array:
    """arrpos ``cos``, ``sin`` tables as a complex ``freqs_cis``: ``cos + i sin`` of each pair.

    Parameters
    ----------
    cos, sin : array
        Real floating, one shape ``(..., R)``: full-width tables in ``layout``
        (:func:`rope_cos_sin`'s).
    layout : {"half", "interleaved"}, optional
        The layout of the tables.

    Returns
    -------
    array
        Complex ``(..., R/2)``: complex128 from float64 tables, complex64 otherwise (the Array
        API has no 16-bit complex). Meta's LLaMA ``precompute_freqs_cis(dim, end)`` is
        ``to_freqs_cis(*rope_cos_sin(arange(end), rope_frequencies(dim)[0]))``; its
        ``apply_rotary_emb`` pairs ``(x[2i], x[2i+1])``: ``layout="interleaved"`` in
        :func:`apply_rope`.

    Raises
    ------
    TypeError
        Tables not real floating.
    ValueError
        An odd width, tables of different shapes or dtypes, or (eager arrays) tables whose two
        copies of each angle differ (not in ``layout``); an unknown ``layout``.

    Notes
    -----
    Backend support: generic Array API code (slices and stacks; the layout check reads eager
    arrays).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(3), np.array([1.0, 0.5]))
    >>> arrpos.to_freqs_cis(cos, sin).shape
    (3, 2)
    >>> bool(np.allclose(arrpos.to_freqs_cis(cos, sin)[2], np.exp(2j * np.array([1.0, 0.5]))))
    True
    """
    xp = array_namespace(cos, sin, name="cos and sin")
    layout = _check_pair(xp, cos, sin, layout)
    cdt = xp.complex128 if cos.dtype == getattr(xp, "float64", None) else xp.complex64
    c, s = _halve(xp, cos, layout), _halve(xp, sin, layout)
    return xp.astype(c, cdt) + xp.astype(s, cdt) * 1j


def from_freqs_cis(freqs_cis: Array, /, *, layout: RopeLayout = "half") -> tuple[Array, Array]:
    """A complex ``freqs_cis`` ``(..., R/2)`` as arrpos full-width ``(cos, sin)`` tables.

    Parameters
    ----------
    freqs_cis : array
        Complex ``(..., R/2)`` (unit numbers ``exp(i theta)``; any complex values are taken
        as they are: real part to ``cos``, imaginary part to ``sin``).
    layout : {"half", "interleaved"}, optional
        The layout of the tables to build.

    Returns
    -------
    cos, sin : array
        Real ``(..., R)`` in the complex dtype's real counterpart (float32 from complex64).

    Raises
    ------
    TypeError
        ``freqs_cis`` not complex.
    ValueError
        An unknown ``layout``; a 0-d ``freqs_cis``.

    Notes
    -----
    Backend support: generic Array API code (slices and stacks).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> cos, sin = arrpos.from_freqs_cis(np.exp(1j * np.array([[0.0, np.pi / 2]])))
    >>> cos.round(6).tolist(), sin.round(6).tolist()
    ([[1.0, 0.0, 1.0, 0.0]], [[0.0, 1.0, 0.0, 1.0]])
    """
    xp = array_namespace(freqs_cis, name="freqs_cis")
    layout = check_choice(layout, "layout", _LAYOUTS)
    check_array(xp, freqs_cis, "freqs_cis", kind="any", min_ndim=1, shape_hint="(..., R/2)")
    if dtype_kind(xp, freqs_cis.dtype) != "complex floating":
        raise TypeError(f"freqs_cis must be a complex array, got dtype {freqs_cis.dtype}")
    return _widen(xp, xp.real(freqs_cis), layout), _widen(xp, xp.imag(freqs_cis), layout)


def to_cos_sin_cache(cos: Array, sin: Array, /, *, layout: RopeLayout = "half") -> Array:
    """arrpos ``cos``, ``sin`` tables as a ``[cos | sin]`` cache (vLLM, SGLang, FlashInfer).

    Parameters
    ----------
    cos, sin : array
        Real floating, one shape ``(..., R)``: full-width tables in ``layout``.
    layout : {"half", "interleaved"}, optional
        The layout of the tables. The cache itself has no layout: vLLM's ``is_neox_style``
        (FlashInfer's ``is_neox``) says how it is applied: True for ``"half"``, False for
        ``"interleaved"``.

    Returns
    -------
    array
        ``(..., R)``: the ``R/2`` cosines, then the ``R/2`` sines, in the tables' dtype
        (vLLM's ``RotaryEmbedding.cos_sin_cache`` is ``(max_position, rotary_dim)``; FlashInfer
        wants float32).

    Raises
    ------
    TypeError, ValueError
        As :func:`to_freqs_cis`.

    Notes
    -----
    Backend support: generic Array API code (slices and stacks; the layout check reads eager
    arrays).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> inv_freq, _ = arrpos.rope_frequencies(4)
    >>> cos, sin = arrpos.rope_cos_sin(np.arange(8), inv_freq)
    >>> cache = arrpos.to_cos_sin_cache(cos, sin)            # vLLM's cos_sin_cache
    >>> cache.shape, bool((cache[:, :2] == cos[:, :2]).all())
    ((8, 4), True)
    """
    xp = array_namespace(cos, sin, name="cos and sin")
    layout = _check_pair(xp, cos, sin, layout)
    return xp.concat([_halve(xp, cos, layout), _halve(xp, sin, layout)], axis=-1)


def from_cos_sin_cache(cache: Array, /, *, layout: RopeLayout = "half") -> tuple[Array, Array]:
    """A ``[cos | sin]`` cache (vLLM, SGLang, FlashInfer) as arrpos full-width tables.

    Parameters
    ----------
    cache : array
        Real floating ``(..., R)``: ``R/2`` cosines then ``R/2`` sines.
    layout : {"half", "interleaved"}, optional
        The layout of the tables to build: ``"half"`` for vLLM's ``is_neox_style=True``,
        ``"interleaved"`` for False.

    Returns
    -------
    cos, sin : array
        ``(..., R)`` each, in ``cache``'s dtype. For a gather by position ids without the
        full tables, pass ``cache[..., :R/2]`` and ``cache[..., R/2:]`` to
        :func:`apply_rope_cached` directly.

    Raises
    ------
    TypeError
        ``cache`` not real floating.
    ValueError
        An odd last axis; an unknown ``layout``.

    Notes
    -----
    Backend support: generic Array API code (slices and stacks).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> cos, sin = arrpos.from_cos_sin_cache(np.array([[1.0, 0.5, 0.0, 0.8]]))
    >>> cos.tolist(), sin.tolist()
    ([[1.0, 0.5, 1.0, 0.5]], [[0.0, 0.8, 0.0, 0.8]])
    """
    xp = array_namespace(cache, name="cache")
    layout = check_choice(layout, "layout", _LAYOUTS)
    check_array(xp, cache, "cache", kind="floating", min_ndim=1, shape_hint="(..., R)")
    if cache.shape[-1] % 2:
        raise ValueError(f"cache must have an even last axis ([cos | sin]), got shape "
                         f"{tuple(cache.shape)}")
    h = cache.shape[-1] // 2
    return _widen(xp, cache[..., :h], layout), _widen(xp, cache[..., h:], layout)


def rotation_matrices(cos: Array, sin: Array, /, *, layout: RopeLayout = "half") -> Array:
    """arrpos ``cos``, ``sin`` tables as one 2x2 rotation matrix per pair.

    Parameters
    ----------
    cos, sin : array
        Real floating, one shape ``(..., R)``: full-width tables in ``layout``.
    layout : {"half", "interleaved"}, optional
        The layout of the tables.

    Returns
    -------
    array
        ``(..., R/2, 2, 2)``: ``[[cos, -sin], [sin, cos]]``, so that pair ``j`` of ``x``
        (``(x[j], x[j + R/2])`` for ``"half"``, ``(x[2j], x[2j+1])`` for ``"interleaved"``)
        turns into ``M[j] @ pair``. Flux's and diffusers PRX's ``rope(pos, dim, theta)`` are
        these of the interleaved tables (their ``apply_rope`` pairs ``(x[2j], x[2j+1])``).

    Raises
    ------
    TypeError, ValueError
        As :func:`to_freqs_cis`.

    Notes
    -----
    Backend support: generic Array API code (slices and stacks; the layout check reads eager
    arrays).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> cos, sin = arrpos.rope_cos_sin(np.array([1.0]), np.array([np.pi / 2]))
    >>> arrpos.rotation_matrices(cos, sin).round(6).tolist()
    [[[[0.0, -1.0], [1.0, 0.0]]]]
    """
    xp = array_namespace(cos, sin, name="cos and sin")
    layout = _check_pair(xp, cos, sin, layout)
    c, s = _halve(xp, cos, layout), _halve(xp, sin, layout)
    rows = [xp.stack([c, -s], axis=-1), xp.stack([s, c], axis=-1)]
    return xp.stack(rows, axis=-2)


def from_rotation_matrices(matrices: Array, /, *,
                           layout: RopeLayout = "half") -> tuple[Array, Array]:
    """2x2 rotation matrices ``(..., R/2, 2, 2)`` as arrpos full-width ``(cos, sin)`` tables.

    Parameters
    ----------
    matrices : array
        Real floating ``(..., R/2, 2, 2)``, ``[[cos, -sin], [sin, cos]]`` per pair: ``cos``
        is read from ``[..., 0, 0]`` and ``sin`` from ``[..., 1, 0]``.
    layout : {"half", "interleaved"}, optional
        The layout of the tables to build.

    Returns
    -------
    cos, sin : array
        ``(..., R)`` each, in the matrices' dtype.

    Raises
    ------
    TypeError
        ``matrices`` not real floating.
    ValueError
        Trailing axes that are not ``(2, 2)``; (eager arrays) matrices that are not of the
        form ``[[c, -s], [s, c]]``; an unknown ``layout``.

    Notes
    -----
    Backend support: generic Array API code (slices and stacks; the rotation check reads
    eager arrays).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> m = np.array([[[0.6, -0.8], [0.8, 0.6]]])
    >>> [t.tolist() for t in arrpos.from_rotation_matrices(m)]
    [[0.6, 0.6], [0.8, 0.8]]
    """
    xp = array_namespace(matrices, name="matrices")
    layout = check_choice(layout, "layout", _LAYOUTS)
    check_array(xp, matrices, "matrices", kind="floating", min_ndim=3,
                shape_hint="(..., R/2, 2, 2)")
    if tuple(matrices.shape[-2:]) != (2, 2):
        raise ValueError(f"matrices must have shape (..., R/2, 2, 2), got "
                         f"{tuple(matrices.shape)}")
    c, s = matrices[..., 0, 0], matrices[..., 1, 0]
    if not is_lazy(matrices):
        ok = _read(lambda: bool(xp.all((matrices[..., 1, 1] == c)
                                       & (matrices[..., 0, 1] == -s))))
        if ok is False:
            raise ValueError("matrices must be rotations [[cos, -sin], [sin, cos]]: their "
                             "diagonal or off-diagonal entries disagree")
    return _widen(xp, c, layout), _widen(xp, s, layout)

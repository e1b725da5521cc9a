"""RoPE's frequencies: :func:`rope_frequencies` (transformers' rope initialisation, every
scaling of :mod:`.scaling`), :func:`pixel_frequencies` and :func:`period_frequencies` (vision
towers), all formed in float64 on the host and rounded once; :func:`host_frequencies` and the
host memo :func:`frequency_key` serve the rest of the wing.
"""
from __future__ import annotations

import numpy as np

from .._lib import (
    array_namespace,
    check_even_dim,
    check_positive_int,
    check_real_scalar,
    host_memo,
    output_dtype,
    trace_constant,
)
from .scaling import RopeScaling, check_scaling, default_inv_freq, lists_scalings
from ..typing import Array, DType, Device, Namespace

__all__ = ["frequency_array", "frequency_key", "host_frequencies", "period_frequencies",
           "pixel_frequencies", "rope_frequencies"]


@lists_scalings
def rope_frequencies(dim: int, *, base: float = 10000.0, scaling: RopeScaling | None = None,
                     seq_len: int | None = None, dtype: DType | None = None,
                     device: Device | None = None,
                     xp: Namespace | None = None) -> tuple[Array, float]:
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
        {scalings}; None for the original RoPE.
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
    scaling = check_scaling(scaling)
    return frequency_array(xp, dim, base, scaling, seq_len, dtype, device)


def frequency_array(xp, dim, base, scaling, seq_len, dtype, device):
    """:func:`rope_frequencies` in namespace ``xp`` of a valid ``dim``, ``base`` and
    ``scaling`` (``seq_len`` and ``dtype`` are checked here)."""
    if seq_len is not None:
        seq_len = check_positive_int(seq_len, "seq_len")
    dtype = output_dtype(xp, None, dtype, device=device)
    inv, attention_factor = host_frequencies(dim, base, scaling, seq_len)
    return xp.asarray(inv, dtype=dtype, device=device), float(attention_factor)


@trace_constant  # torch.compile: a constant of the call, not NumPy to trace
def host_frequencies(dim, base, scaling, seq_len):
    """float64 NumPy frequencies and the attention factor (validated arguments)."""
    if scaling is None:
        return default_inv_freq(dim, base), 1.0
    inv, att = scaling.frequencies(dim, base, seq_len)
    return np.array(inv, dtype=np.float64), att


@host_memo(maxsize=256)
def frequency_key(rotary_dim, base, scaling, seq_len):
    """What a seq-dependent scaling's tables depend on: its frequencies at ``seq_len`` (keyed by
    a RoPE's fields, not the RoPE, so that the memo keeps no dropped RoPE alive)."""
    inv, att = host_frequencies(rotary_dim, base, scaling, seq_len)
    return inv.tobytes(), float(att)


def pixel_frequencies(dim: int, *, max_freq: float = 10.0, dtype: DType | None = None,
                      device: Device | None = None, xp: Namespace | None = None) -> Array:
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


def period_frequencies(dim: int, *, min_period: float, max_period: float,
                       dtype: DType | None = None, device: Device | None = None,
                       xp: Namespace | None = None) -> Array:
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

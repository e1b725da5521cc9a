"""Generic Array API implementations of the kernels that have compiled twins.

Every function here works on any array-api-compat namespace, is jit-safe (no Python control flow
on array values) and forms angles exactly enough for the accuracy contract:

* where the device has float64: the product ``p * w`` is split (Veltkamp) into an exact part and a
  small remainder, the exact part is reduced modulo 2*pi with a three-piece Cody-Waite constant, and
  sin/cos are taken of an argument in [-pi, pi] that is right to a few 1e-16;
* where it does not (JAX without x64): the angle is formed in *turns* as a sum of exact float32
  products of 12-bit pieces, each reduced modulo 1 exactly, summed with compensation, and finished
  with a 256-entry exact table plus a small-angle sin/cos.
"""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np

from .._exact import PI, decimal_pieces
from .._lib import (
    clip_shift as _clip_shift,
    device_of,
    float_bits,
    from_host,
    has_float64,
    index_dtype,
    is_dtype,
    round_once,
    work_float,
)

__all__ = ["frequency_arrays", "sincos", "sinusoid_table"]

# Cody-Waite pieces of 2*pi with 20 significant bits: k*C1, k*C2, k*C3 are exact and each
# subtraction is exact (Sterbenz) for k < 2**33, i.e. angles up to ~5e10 rad.
with localcontext() as _ctx:
    _ctx.prec = 60
    _C1, _C2, _C3 = decimal_pieces(2 * PI, 20, 3)
    _C4 = float(2 * PI - Decimal(_C1) - Decimal(_C2) - Decimal(_C3))
    _INV_2PI_32 = decimal_pieces(1 / (2 * PI), 12, 4)  # 12-bit float32 pieces of 1/(2 pi)
    _TWO_PI = float(2 * PI)
    _INV_2PI = float(1 / (2 * PI))
_SPLIT64 = 134217729.0  # 2**27 + 1: Veltkamp split of float64 into 26 + 26 bits
_SPLIT32 = 4097.0  # 2**12 + 1: Veltkamp split of float32 into 12 + 12 bits
_TURN_TABLE = 256
_COS_T = np.cos(2 * np.pi * np.arange(_TURN_TABLE) / _TURN_TABLE)
_SIN_T = np.sin(2 * np.pi * np.arange(_TURN_TABLE) / _TURN_TABLE)


def _split(x, c):
    """Veltkamp split: ``x == hi + lo`` exactly, each with half the significand."""
    t = c * x
    hi = t - (t - x)
    return hi, x - hi


def frequency_arrays(hi, lo, *, xp, device=None):
    """Host double-double frequencies -> device arrays in the working precision.

    Returns ``(w_hi, w_lo)``: float64 when the device has it, else a float32 pair whose sum
    carries ~48 bits of the frequency.
    """
    # fresh writable copies: some libraries (torch) warn on wrapping read-only buffers
    hi = np.array(hi, dtype=np.float64)
    lo = np.zeros_like(hi) if lo is None else np.array(lo, dtype=np.float64)
    if has_float64(xp, device):
        return (
            xp.asarray(hi, dtype=xp.float64, device=device),
            xp.asarray(lo, dtype=xp.float64, device=device),
        )
    h32 = hi.astype(np.float32)
    l32 = ((hi - h32.astype(np.float64)) + lo).astype(np.float32)
    return (
        xp.asarray(h32, dtype=xp.float32, device=device),
        xp.asarray(l32, dtype=xp.float32, device=device),
    )


def sincos(positions, w_hi, w_lo=None, *, xp, per_frequency=False):
    """``(sin, cos)`` of ``positions[..., None] * (w_hi + w_lo)``, shape ``P + (F,)``.

    With ``per_frequency=True`` the positions already have the trailing frequency axis
    (shape ``P + (F,)``, one position per frequency: multimodal RoPE) and are not expanded.

    Working precision follows ``w_hi``: float64 (results right to ~1e-15 for |p w| < 5e10)
    or float32 (measured against mpmath: within 1.3e-7 for integer positions below 2**28,
    2.5e-7 below 2**29 and 9e-7 below 2**31, from the float32 tail ``p * tail``; the public
    functions refuse |p| >= 2**28 there, ``_lib.POSITION_LIMIT_F32``).
    """
    if w_hi.dtype == xp.float64:
        return _sincos64(positions, w_hi, w_lo, xp, per_frequency)
    return _sincos32(positions, w_hi, w_lo, xp, per_frequency)


def _sincos64(positions, w_hi, w_lo, xp, per_frequency):
    p = xp.astype(positions, xp.float64)
    if not per_frequency:
        p = p[..., None]
    r = _reduced64(p, w_hi, w_lo, xp)
    return xp.sin(r), xp.cos(r)


def _reduced64(p, w_hi, w_lo, xp):
    """``p * (w_hi + w_lo)`` reduced modulo 2*pi to [-pi, pi] (float64, right to a few 1e-16)."""
    p1, p2 = _split(p, _SPLIT64)
    w1, w2 = _split(w_hi, _SPLIT64)
    big = p1 * w1  # exact: 26 x 26 significant bits
    small = p1 * w2 + p2 * w1 + p2 * w2
    if w_lo is not None:
        small = small + p * w_lo
    return _cody_waite(big, small, xp)


def _cody_waite(big, small, xp):
    """``big + small`` reduced modulo 2*pi: exact for the big part, ``small`` added after."""
    k = xp.round(big * _INV_2PI)
    return (((big - k * _C1) - k * _C2) - k * _C3) + (small - k * _C4)


def _position_pieces32(positions, xp):
    """Positions as float32 arrays of <= 12 significant bits each, summing exactly to them."""
    if xp.isdtype(positions.dtype, "integral"):
        p = positions
        c = p % 4096
        rest = (p - c) // 4096
        b = rest % 4096
        a = (rest - b) // 4096
        return [
            xp.astype(a, xp.float32) * 16777216.0,
            xp.astype(b, xp.float32) * 4096.0,
            xp.astype(c, xp.float32),
        ]
    p = xp.astype(positions, xp.float32)
    return list(_split(p, _SPLIT32))


def _turn_pieces32(w_hi, w_lo, xp):
    """``w / (2 pi)`` in turns as 12-bit float32 pieces (exact products) plus a tiny tail."""
    ws = list(_split(w_hi, _SPLIT32))
    if w_lo is not None:
        ws += list(_split(w_lo, _SPLIT32))
    pieces, tail = [], None
    for a, wa in enumerate(ws):
        for b, ib in enumerate(_INV_2PI_32):
            prod = wa * ib  # exact: 12 x 12 bits
            if a + b <= 2:
                pieces += list(_split(prod, _SPLIT32))
            else:
                tail = prod if tail is None else tail + prod
    return pieces, tail


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _sincos32(positions, w_hi, w_lo, xp, per_frequency):
    s, e = _turns32(positions, w_hi, w_lo, xp, per_frequency)
    return _finish32(s, e, xp)


def _turns32(positions, w_hi, w_lo, xp, per_frequency):
    """``p * w / (2 pi)`` modulo one turn as ``s + e`` (float32, ``e`` the compensation)."""
    ppieces = _position_pieces32(positions, xp)
    if not per_frequency:
        ppieces = [pp[..., None] for pp in ppieces]
    fpieces, tail = _turn_pieces32(w_hi, w_lo, xp)
    s = e = None
    for pp in ppieces:
        for fp in fpieces:
            x = pp * fp  # exact
            x = x - xp.round(x)  # exact reduction modulo one turn
            if s is None:
                s, e = x, xp.zeros_like(x)
            else:
                s, err = _two_sum(s, x)
                e = e + err
    p_full = sum(ppieces[1:], ppieces[0])
    return s, e + p_full * tail


def _finish32(s, e, xp):
    """sin and cos of ``s + e`` turns: an exact table at 1/256 turn plus a small-angle step."""
    s = s - xp.round(s)
    j = xp.round(s * float(_TURN_TABLE))
    u = (s - j / float(_TURN_TABLE)) + e  # |u| <= 1/512 turn: rounding here is ~1e-10 rad
    ang = u * _TWO_PI
    sin_u = xp.sin(ang)
    h = xp.sin(ang * 0.5)
    vers = 2.0 * h * h  # 1 - cos(ang), without cancellation
    idx = xp.astype(j, xp.int32) % _TURN_TABLE
    dev = device_of(s)
    ct = xp.asarray(_COS_T, dtype=xp.float32, device=dev)
    st = xp.asarray(_SIN_T, dtype=xp.float32, device=dev)
    flat = xp.reshape(idx, (-1,))
    c0 = xp.reshape(xp.take(ct, flat, axis=0), idx.shape)
    s0 = xp.reshape(xp.take(st, flat, axis=0), idx.shape)
    cos = c0 - (c0 * vers + s0 * sin_u)
    sin = s0 + (c0 * sin_u - s0 * vers)
    return sin, cos


def sinusoid_table(positions, hi, lo, *, layout, dtype, width, xp, out=None):
    """The sinusoid table ``P + (width,)`` for host double-double frequencies ``hi + lo``.

    ``layout``: ``"interleaved"`` (sin, cos per pair), ``"split"`` ([sin | cos]) or
    ``"split_cos"`` ([cos | sin]); columns past ``2 * len(hi)`` are zero; an interleaved
    ``width = 2 * len(hi) - 1`` drops the last cosine (odd widths, keras-hub). ``out``, when
    given, receives the table (namespaces with mutable arrays only).
    """
    device = device_of(positions)
    w_hi, w_lo = frequency_arrays(hi, lo, xp=xp, device=device)
    s, c = sincos(positions, w_hi, w_lo, xp=xp)
    s = round_once(xp, s, dtype)  # 16-bit tables: one rounding, as the compiled kernels
    c = round_once(xp, c, dtype)
    if layout == "interleaved":
        table = xp.reshape(xp.stack([s, c], axis=-1), s.shape[:-1] + (2 * s.shape[-1],))
    elif layout == "split":
        table = xp.concat([s, c], axis=-1)
    else:
        table = xp.concat([c, s], axis=-1)
    pad = width - table.shape[-1]
    if pad < 0:
        table = table[..., :width]
    elif pad:
        zeros = xp.zeros(table.shape[:-1] + (pad,), dtype=dtype, device=device)
        table = xp.concat([table, zeros], axis=-1)
    if out is not None:
        out[...] = table
        return out
    return table




# --- rotary position embedding (RoPE) -----------------------------------------------------------


def rope_cos_sin(positions, inv_freq, *, layout, attention_factor, axes, dtype, xp, out=None):
    """RoPE tables ``(cos, sin)``, each ``P + (2F,)`` with ``F = len(inv_freq)``.

    ``axes`` (a tuple of ``F`` ints, or None): positions then carry a trailing coordinate axis
    and frequency ``i`` turns with ``positions[..., axes[i]]``. Angles go through :func:`sincos`:
    float64 where the device has it (the float32 ``inv_freq`` of a model casts exactly), else
    the exact float32 path. ``attention_factor`` scales in the working precision, then one
    rounding to ``dtype``. ``layout``: ``"half"`` -> ``[f | f]``, ``"interleaved"`` -> each
    frequency twice. ``out``: an optional ``(cos_out, sin_out)`` pair to write into.
    """
    work = xp.float64 if has_float64(xp, device_of(positions)) else xp.float32
    return rope_cos_sin_pair(positions, xp.astype(inv_freq, work), None, layout=layout,
                             attention_factor=attention_factor, axes=axes, dtype=dtype, xp=xp,
                             out=out)


def rope_cos_sin_pair(positions, w_hi, w_lo, *, layout, attention_factor, axes, dtype, xp,
                      out=None):
    """:func:`rope_cos_sin` for frequencies ``w_hi + w_lo`` in the working precision.

    Generic only: a float32 pair (:func:`frequency_arrays`) carries float64 frequencies to a
    device without float64, so the angles are those of the exact frequencies.
    """
    device = device_of(positions)
    if axes is not None:
        idx = xp.asarray(list(axes), dtype=xp.int32, device=device)
        pos = xp.take(positions, idx, axis=positions.ndim - 1)  # P + (F,), one per frequency
        s, c = sincos(pos, w_hi, w_lo, xp=xp, per_frequency=True)
    else:
        s, c = sincos(positions, w_hi, w_lo, xp=xp)
    if attention_factor != 1.0:
        s = s * attention_factor
        c = c * attention_factor
    c = xp.astype(c, dtype)
    s = xp.astype(s, dtype)
    full = c.shape[:-1] + (2 * c.shape[-1],)
    if layout == "half":
        cos, sin = xp.concat([c, c], axis=-1), xp.concat([s, s], axis=-1)
    else:
        cos = xp.reshape(xp.stack([c, c], axis=-1), full)
        sin = xp.reshape(xp.stack([s, s], axis=-1), full)
    if out is not None:
        out[0][...] = cos
        out[1][...] = sin
        return out
    return cos, sin


def _rotate(xr, layout, xp):
    """The 90-degree partner of each feature: half -> ``[-x2 | x1]``, interleaved -> ``(-x1, x0)``."""
    r = xr.shape[-1]
    if layout == "half":
        return xp.concat([-xr[..., r // 2:], xr[..., : r // 2]], axis=-1)
    pairs = xp.stack([-xr[..., 1::2], xr[..., 0::2]], axis=-1)
    return xp.reshape(pairs, xr.shape)


def apply_rope(x, cos, sin, *, layout, inverse, xp, out=None):
    """Rotate the first ``cos.shape[-1]`` features of ``x``; the rest pass through.

    ``x * cos + rotate(x) * sin`` (``- ... * sin`` when ``inverse``), computed in the promoted
    dtype of ``x`` and the tables (float32 when both are 16-bit) and rounded once to
    ``x.dtype``. Without ``out`` nothing is
    written in place, so autograd (torch, JAX) sees an ordinary expression. ``out`` (x's shape
    and dtype, possibly ``x`` itself) receives the result.
    """
    r = cos.shape[-1]
    d = x.shape[-1]
    xr = x[..., :r] if r < d else x
    if float_bits(xp, x.dtype) == 16 and float_bits(xp, cos.dtype) == 16:
        # 16-bit data: computed in float32 and rounded once, like the kernels
        xr, cos, sin = (xp.astype(a, xp.float32) for a in (xr, cos, sin))
    rot = _rotate(xr, layout, xp)
    y = xr * cos - rot * sin if inverse else xr * cos + rot * sin
    if y.dtype != x.dtype:
        y = xp.astype(y, x.dtype)
    if out is not None:
        if r < d:
            out[..., :r] = y
            if out is not x:
                out[..., r:] = x[..., r:]
        else:
            out[...] = y
        return out
    if r < d:
        y = xp.concat([y, x[..., r:]], axis=-1)
    return y


__all__ += ["apply_rope", "rope_cos_sin", "rope_cos_sin_pair"]


def sincos_mixed(positions, w_hi, w_lo=None, *, xp):
    """``(sin, cos)`` of ``sum_a positions[..., a] * (w_hi[a] + w_lo[a])``, shape ``P + (F,)``.

    RoPE-Mixed: ``positions`` ``P + (n,)``, frequencies ``(n, F)``. Each product is reduced
    exactly (as in :func:`sincos`) before the ``n`` terms are added, so the angle is as exact as
    a single product's.
    """
    n = w_hi.shape[0]
    if w_hi.dtype == xp.float64:
        p = xp.astype(positions, xp.float64)
        r = None
        for a in range(n):  # n is a static shape: jit-safe
            lo = None if w_lo is None else w_lo[a, ...]
            term = _reduced64(p[..., a, None], w_hi[a, ...], lo, xp)
            r = term if r is None else r + term
        return xp.sin(r), xp.cos(r)
    s = e = None
    for a in range(n):
        lo = None if w_lo is None else w_lo[a, ...]
        sa, ea = _turns32(positions[..., a], w_hi[a, ...], lo, xp, False)
        if s is None:
            s, e = sa, ea
        else:
            s, err = _two_sum(s, sa)
            e = e + (ea + err)
    return _finish32(s, e, xp)


def _widen(c, layout, xp):
    """A half-width table ``(..., F)`` to the full width of ``layout``: ``[c | c]`` or pairs."""
    if layout == "half":
        return xp.concat([c, c], axis=-1)
    return xp.reshape(xp.stack([c, c], axis=-1), c.shape[:-1] + (2 * c.shape[-1],))


def rope_cos_sin_mixed(positions, inv_freq, *, layout, attention_factor, dtype, xp, out=None):
    """RoPE-Mixed tables ``(cos, sin)``, each ``P + (2F,)``, for ``inv_freq`` of shape ``(n, F)``
    and ``positions`` ``P + (n,)``: the angle of frequency ``i`` is
    ``sum_a positions[..., a] * inv_freq[a, i]``, formed exactly (:func:`sincos_mixed`)."""
    work = xp.float64 if has_float64(xp, device_of(positions)) else xp.float32
    s, c = sincos_mixed(positions, xp.astype(inv_freq, work), xp=xp)
    if attention_factor != 1.0:
        s = s * attention_factor
        c = c * attention_factor
    cos = _widen(xp.astype(c, dtype), layout, xp)
    sin = _widen(xp.astype(s, dtype), layout, xp)
    if out is not None:
        out[0][...] = cos
        out[1][...] = sin
        return out
    return cos, sin


def _gather_rows(cache, ids, xp):
    """``cache[ids]`` for an integer array ``ids`` of any shape: ``ids.shape + (F,)``."""
    flat = xp.reshape(ids, (-1,))
    if flat.dtype != xp.int32 and flat.dtype != xp.int64:  # torch takes only these two
        flat = xp.astype(flat, xp.int32)  # the caller checked 0 <= id < rows
    rows = xp.take(cache, flat, axis=0)
    return xp.reshape(rows, tuple(ids.shape) + (cache.shape[-1],))


def apply_rope_cached(x, cos_cache, sin_cache, position_ids, *, layout, inverse, xp, out=None):
    """:func:`apply_rope` with half-width tables gathered at ``position_ids`` (ONNX form).

    ``cos_cache``/``sin_cache`` ``(max_positions, R/2)``; ``position_ids`` broadcasts against
    ``x.shape[:-1]`` (validated by the caller). Each pair ``(x1, x2)`` becomes
    ``(x1 c - x2 s, x2 c + x1 s)`` (``s -> -s`` when ``inverse``): the same operations as
    :func:`apply_rope` on the widened tables, so the results are identical.
    """
    half = cos_cache.shape[-1]
    r, d = 2 * half, x.shape[-1]
    c = _gather_rows(cos_cache, position_ids, xp)
    s = _gather_rows(sin_cache, position_ids, xp)
    if inverse:
        s = -s
    if layout == "half":
        x1, x2 = x[..., :half], x[..., half:r]
    else:
        x1, x2 = x[..., 0:r:2], x[..., 1:r:2]
    if float_bits(xp, x.dtype) == 16 and float_bits(xp, c.dtype) == 16:
        # 16-bit data: computed in float32 and rounded once, as apply_rope and the kernels
        x1, x2, c, s = (xp.astype(a, xp.float32) for a in (x1, x2, c, s))
    y1 = x1 * c - x2 * s
    y2 = x2 * c + x1 * s
    if y1.dtype != x.dtype:
        y1, y2 = xp.astype(y1, x.dtype), xp.astype(y2, x.dtype)
    if layout == "half":
        y = xp.concat([y1, y2], axis=-1)
    else:
        y = xp.reshape(xp.stack([y1, y2], axis=-1), y1.shape[:-1] + (r,))
    if out is not None:
        out[..., :r] = y
        if r < d and out is not x:
            out[..., r:] = x[..., r:]
        return out
    if r < d:
        y = xp.concat([y, x[..., r:]], axis=-1)
    return y


def apply_rope_qk(q, k, cos, sin, *, layout, inverse, xp, out=None):
    """``(apply_rope(q, cos, sin), apply_rope(k, cos, sin))``; ``out`` a pair or None."""
    q_out, k_out = (None, None) if out is None else out
    return (apply_rope(q, cos, sin, layout=layout, inverse=inverse, xp=xp, out=q_out),
            apply_rope(k, cos, sin, layout=layout, inverse=inverse, xp=xp, out=k_out))


def xpos_scale(positions, rate, *, layout, dtype, xp):
    """``exp(p * rate_i)`` widened to ``layout``, shape ``P + (2F,)``; ``rate`` host float64
    ``ln(zeta_i) / scale_base``. The exponent is exact to float64 (or to a float32 pair where
    the device lacks float64), so the relative error is that of one ``exp``."""
    dev = device_of(positions)
    if has_float64(xp, dev):
        p = xp.astype(positions, xp.float64)[..., None]
        rate = np.array(rate, dtype=np.float64)  # a writable copy: torch warns on read-only
        scale = xp.exp(p * xp.asarray(rate, dtype=xp.float64, device=dev))
    else:
        r_hi, r_lo = frequency_arrays(rate, None, xp=xp, device=dev)
        r1, r2 = _split(r_hi, _SPLIT32)
        s = e = None
        for pp in _position_pieces32(positions, xp):
            pp = pp[..., None]
            for term in (pp * r1, pp * r2):  # exact: 12 x 12 bits
                if s is None:
                    s, e = term, xp.zeros_like(term)
                else:
                    s, err = _two_sum(s, term)
                    e = e + err
            e = e + pp * r_lo
        scale = xp.exp(s)
        scale = scale + scale * e
    return _widen(xp.astype(scale, dtype), layout, xp)


__all__ += ["apply_rope_cached", "apply_rope_qk", "rope_cos_sin_mixed", "sincos_mixed",
            "xpos_scale"]


def alibi_bias(slopes, query_len, key_len, *, mode, query_offset, dtype, xp):
    """ALiBi bias ``(heads, query_len, key_len)`` for 1-D ``slopes`` (validated by the caller).

    ``d = q_pos - k_pos`` with ``q_pos = i + query_offset``: ``"causal"`` ``-slope * d`` where
    ``d >= 0`` and 0 elsewhere, ``"symmetric"`` ``-slope * |d|``, ``"key"`` ``slope * k_pos``.
    Distances are exact integers converted once to ``dtype``; one multiply per element. For
    16-bit ``dtype`` the product is formed in float64 (exact) and rounded once.
    """
    dev = device_of(slopes)
    # 16-bit: distances beyond 256 (bfloat16) or 2048 (float16) are not exact in dtype; the
    # product of a 16-bit slope and an integer below 2**42 is exact in float64, rounded once
    work = dtype
    if float_bits(xp, dtype) <= 16 and has_float64(xp, dev):
        work = xp.float64
    s = xp.reshape(xp.astype(slopes, work), (slopes.shape[0], 1, 1))
    kpos = xp.reshape(xp.arange(key_len, device=dev), (1, key_len))
    if mode == "key":
        row = xp.astype(kpos, work)
        return round_once(xp, s * xp.broadcast_to(row, (query_len, key_len)), dtype)
    qpos = xp.reshape(xp.arange(query_len, device=dev) + query_offset, (query_len, 1))
    back = kpos - qpos  # -(q_pos - k_pos)
    if mode == "causal":
        back = xp.clip(back, max=0)  # keys after the query get 0 (+0.0, not -0.0)
    else:
        back = -xp.abs(back)
    return round_once(xp, s * xp.astype(back, work), dtype)


__all__ += ["alibi_bias"]


def alibi_bias_from_mask(slopes, attention_mask, *, dtype, xp):
    """BLOOM's ``(batch, heads, 1, key_len)`` bias of a bool or 0/1 ``attention_mask``
    (validated by the caller): ``slope * (cumsum(mask) - 1) * mask``; 16-bit slopes multiply
    in float64 (positions past 256 are not exact in bfloat16; the float64 product is), rounded
    once."""
    m = attention_mask
    dev = device_of(m)
    ones = xp.astype(m, index_dtype(xp, dev))
    pos = (xp.cumulative_sum(ones, axis=-1) - 1) * ones
    work = xp.float64 if float_bits(xp, dtype) <= 16 and has_float64(xp, dev) else dtype
    b, k = m.shape
    bias = (xp.reshape(xp.astype(slopes, work), (1, slopes.shape[0], 1, 1))
            * xp.reshape(xp.astype(pos, work), (b, 1, 1, k)))
    return round_once(xp, bias, dtype)


def alibi_bias_from_positions(slopes, query_positions, key_positions, *, mode, lead, dtype,
                              xp):
    """ALiBi ``lead + (heads, q, k)`` of positions ``(..., q)`` and ``(..., k)`` (validated:
    integers in the index dtype, leading axes broadcasting to ``lead``). The distance is formed
    exactly (integers subtract in the index dtype; floats in float64 where the device has it)
    and the product is rounded once to ``dtype``."""
    work = xp.float64 if has_float64(xp, device_of(slopes)) else xp.float32
    qp, kp = query_positions[..., :, None], key_positions[..., None, :]
    if mode == "key":
        dist = xp.broadcast_to(xp.astype(kp, work), lead + (qp.shape[-2], kp.shape[-1]))
    else:
        ints = is_dtype(xp, qp.dtype, "integral") and is_dtype(xp, kp.dtype, "integral")
        back = kp - qp if ints else xp.astype(kp, work) - xp.astype(qp, work)  # -d
        # 0 - |x| and clip give +0.0 where the distance is 0 (-|x| would give -0.0 for floats)
        back = xp.clip(back, max=0) if mode == "causal" else 0 - xp.abs(back)
        dist = xp.astype(back, work)
    s = xp.reshape(xp.astype(slopes, work), (slopes.shape[0], 1, 1))
    return round_once(xp, s * dist[..., None, :, :], dtype)


def relative_bias(table, index, *, dtype, xp):
    """``out[h, ...] = table[index[...], h]`` for a 2-D ``table`` and ids validated in range."""
    shape = tuple(index.shape)
    rows = xp.take(table, xp.reshape(index, (-1,)), axis=0)  # (prod(P), heads)
    rows = xp.reshape(rows, shape + (table.shape[1],))
    return xp.permute_dims(rows, (rows.ndim - 1,) + tuple(range(rows.ndim - 1)))


def toeplitz_ids(xp, q, k, device):
    """The ``(q, k)`` ids ``j - i + q - 1`` of a bias that depends on ``j - i`` only (int32
    where they fit), in one pass over the matrix."""
    idt = xp.int32 if q + k - 1 < 2**31 else xp.int64
    return (xp.reshape(xp.arange(k, dtype=idt, device=device), (1, k))
            - xp.reshape(xp.arange(q, dtype=idt, device=device) - (q - 1), (q, 1)))


def toeplitz_bias(lines, *, q, k, dtype, xp):
    """``out[h, i, j] = lines[j - i + q - 1, h]`` for ``lines (q + k - 1, heads)``."""
    return relative_bias(lines, toeplitz_ids(xp, q, k, device_of(lines)), dtype=dtype, xp=xp)


__all__ += ["alibi_bias_from_mask", "alibi_bias_from_positions", "relative_bias",
            "toeplitz_bias", "toeplitz_ids"]


# ---- conv_positional -------------------------------------------------------------------------

# The exact (erf) GELU needs ``erfc``, which the Array API standard does not have. It is
# computed as ``erfc(z) = t exp(-z^2 + f(t))`` with ``t = 2 / (2 + z)`` for ``z >= 0`` (the form
# of Numerical Recipes' ``erfccheb``), where ``f`` is a 30-term Chebyshev series in ``2t - 1``
# whose coefficients were computed for this module with mpmath at 50 digits (``c_k = 2/N sum_j
# f(y_j) T_k(y_j)`` on N = 80 Chebyshev nodes; the terms dropped are below 1e-18). The series is
# accurate to ~1e-16 relative; ``exp(-z^2)`` is formed with an exact split of ``z^2``, so the
# GELU is within a few ulps in float32 and float64 (measured against mpmath: 4.2e-7 relative in
# float32 and 1e-13 in float64 over [-12, 12]). csrc/families.hpp holds the same numbers.
# float32 sums only the first ``_ERFC_TERMS_FLOAT32`` terms: the rest add up to under 1.4e-9
# relative to the result, a hundredth of a float32 ulp, and the series is the GELU's main cost.
_ERFC_CHEB = (
    -0.6513268598908547, 0.6419697923564902, 0.019476473204185836, -0.009561514786808632,
    -0.0009465953444820369, 0.00036683949785276145, 4.252332480690777e-05,
    -2.0278578112534242e-05, -1.6242900046470256e-06, 1.3036558355805232e-06,
    1.5626441722066142e-08, -8.523809591492654e-08, 6.5290544390988515e-09,
    5.059343495551469e-09, -9.91364156493033e-10, -2.273651222931836e-10,
    9.646791102015527e-11, 2.3940380830391146e-12, -6.886027526497553e-12,
    8.944879273090725e-13, 3.130921399342958e-13, -1.1270822361367252e-13,
    3.810905255189232e-16, 7.106097613609237e-15, -1.5230282014571043e-15,
    -9.457494571291233e-17, 1.210237189224279e-16, -2.816663087747177e-17,
    5.003005559445902e-20, 2.3281042579529253e-18,
)
_ERFC_TERMS_FLOAT32 = 14


def _erfc_abs(xp, ax, split):
    """``erfc(ax / sqrt 2)`` for ``ax >= 0`` (Chebyshev form, see the module notes).

    ``exp(-ax^2 / 2)`` is formed from a Veltkamp split ``ax = hi + lo`` (``split = 2**(p/2)+1``)
    so that the large part ``hi^2 / 2`` of the exponent is exact: rounding ``z^2`` would cost
    ``z^2`` ulps of relative error in the result.
    """
    z = ax * (1.0 / math.sqrt(2.0))
    t = 2.0 / (2.0 + z)
    y2 = 2.0 * (2.0 * t - 1.0)  # Clenshaw on 2y
    d = xp.zeros_like(z)
    dd = xp.zeros_like(z)
    terms = len(_ERFC_CHEB) if z.dtype == xp.float64 else _ERFC_TERMS_FLOAT32
    for c in _ERFC_CHEB[terms - 1:0:-1]:
        d, dd = y2 * d - dd + c, d
    f = 0.5 * y2 * d - dd + _ERFC_CHEB[0]
    s = split * ax
    hi = s - (s - ax)
    lo = ax - hi
    big = hi * hi * 0.5  # exact
    small = lo * (ax + hi) * 0.5  # ax^2/2 - big, tiny against big
    return t * xp.exp(f - small) * xp.exp(-big)


def _gelu(xp, x):
    """Exact GELU ``x Phi(x) = x erfc(-x / sqrt 2) / 2``; the negative side has no cancellation."""
    dtype = x.dtype
    if dtype != xp.float64 and dtype != xp.float32:
        x = xp.astype(x, xp.float32)  # half precisions: work in float32, round once
    split = 134217729.0 if x.dtype == xp.float64 else 4097.0
    ax = xp.clip(xp.abs(x), max=64.0)  # erfc is 0 beyond; keeps the split finite
    e = _erfc_abs(xp, ax, split)
    erfc = xp.where(x <= 0, e, 2.0 - e)
    out = 0.5 * xp.clip(x, min=-64.0) * erfc  # GELU(-inf) = 0, not NaN
    return out if out.dtype == dtype else xp.astype(out, dtype)


def _activate(xp, x, activation):
    if activation == "gelu":
        return _gelu(xp, x)
    if activation == "tanh":
        return xp.tanh(x)
    return x


def _pad_axis(xp, x, axis, left, right):
    """Zero padding of axis ``axis`` (negative) by ``left`` and ``right``."""
    if left == right == 0:
        return x
    dev = device_of(x)
    parts = []
    for n in (left, right):
        shape = list(x.shape)
        shape[axis] = n
        # (no empty block: Dask cannot chunk an array with a zero-length axis)
        parts.append(xp.zeros(tuple(shape), dtype=x.dtype, device=dev) if n else None)
    return xp.concat([p for p in (parts[0], x, parts[1]) if p is not None], axis=axis)


def _slice_axis(x, axis, start, length):
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(start, start + length)
    return x[tuple(idx)]


def _work(xp, x):
    """``(work, dtype)``: the taps are summed in float32 for 16-bit ``x`` (a bfloat16 sum keeps
    8 bits) and the result is rounded once to ``x.dtype``."""
    work, _ = work_float(xp, x.dtype)
    return work, x.dtype


def _finish(xp, out, xw, bias, activation, residual, dtype):
    """``+ bias``, the activation, ``+ x`` (all in the working dtype), one rounding."""
    if bias is not None:
        out = out + xp.astype(bias, out.dtype)
    out = _activate(xp, out, activation)
    out = out + xw if residual else out
    return out if out.dtype == dtype else xp.astype(out, dtype)


def conv_positional(x, weight, bias, *, activation, residual, dtype, xp):
    """The depthwise convolution of ``x (..., H, W, C)`` with ``weight (kh, kw, C)`` (validated)
    as shifted multiply-adds: taps summed in the order a over kh, b over kw (zero padding
    ``(k - 1) // 2`` before: a tap outside adds ``0 * weight``), ``+ bias``, the activation,
    ``+ x``, in the working type, rounded once to ``dtype`` (x's). A 1-D convolution is the
    grid of one column (``kw = 1``)."""
    kh, kw = weight.shape[0], weight.shape[1]
    h, w_len = x.shape[-3], x.shape[-2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    work, dtype = _work(xp, x)
    xw = xp.astype(x, work)
    xpad = _pad_axis(xp, _pad_axis(xp, xw, -3, top, kh - 1 - top), -2, left, kw - 1 - left)
    wt = xp.astype(weight, work)
    out = None
    for a in range(kh):
        rows = _slice_axis(xpad, -3, a, h)
        for b in range(kw):
            term = _slice_axis(rows, -2, b, w_len) * wt[a, b, :]
            out = term if out is None else out + term
    return _finish(xp, out, xw, bias, activation, residual, dtype)


__all__ += ["conv_positional"]


# ---- resample: separable taps ----------------------------------------------------------------

def apply_taps(xp, grid, index, weight, axis):
    """Resample axis ``axis`` (negative) of ``grid`` with taps ``(n_out, T)``: one gather of
    ``n_out * T`` rows and a weighted sum, so memory follows the output (``T`` is 2 or 4, or
    about twice the shrink factor with antialias), not ``n_out * n_in`` as a dense matrix."""
    n_out, taps = index.shape
    ax = grid.ndim + axis
    rows = xp.take(grid, xp.reshape(index, (n_out * taps,)), axis=ax)
    rows = xp.reshape(rows, tuple(grid.shape[:ax]) + (n_out, taps) + tuple(grid.shape[ax + 1:]))
    w = xp.reshape(weight, (n_out, taps) + (1,) * (grid.ndim - ax - 1))
    return xp.sum(rows * w, axis=ax + 1)


def work_dtype(xp, table):
    """``(work dtype, single)``: float64 where the device has it (the taps are applied there
    and the result rounded once: closer to the exact kernel than any float32 accumulation
    order, torch's included); ``single`` when torch would form the weights in float32."""
    work = xp.float64 if has_float64(xp, device_of(table)) else xp.float32
    return work, table.dtype != getattr(xp, "float64", None)


def resample_grid(grid, prefix, *, taps, dtype, xp):
    """The grid axes of ``grid (..., *old, C)`` resampled with host ``taps``, one per grid axis
    (``(index, weight)``, each ``(n_out, T)``, or None: the axis keeps its length), the first
    axis first, in the working dtype (float64 where the device has it), rounded once to
    ``dtype`` (grid's); the rows flattened ``(..., P + prod(new), C)`` after the ``prefix`` rows
    ``(..., P, C)`` (None: P = 0)."""
    work, _ = work_dtype(xp, grid)
    dev = device_of(grid)
    out = xp.astype(grid, work)
    for axis, tap in enumerate(taps):
        if tap is not None:
            # (a fresh copy of the kept host index: torch warns on a read-only array)
            index = xp.asarray(np.array(tap[0]), dtype=index_dtype(xp, dev), device=dev)
            weight = from_host(xp, tap[1], work, dev)
            out = apply_taps(xp, out, index, weight, axis - len(taps) - 1)
    k = len(taps)
    lead = tuple(out.shape[:-k - 1])
    out = xp.reshape(round_once(xp, out, dtype), lead + (math.prod(out.shape[-k - 1:-1]),
                                                         out.shape[-1]))
    return out if prefix is None else xp.concat([prefix, out], axis=-2)


__all__ += ["apply_taps", "resample_grid", "work_dtype"]


# ---- clip_shift: Shaw's index, the bucket tables' index --------------------------------------

def clip_shift(x, *, lo, hi, shift, dtype, xp):
    """``clip(x, lo, hi) + shift`` of an integer ``x`` in the integer ``dtype``: x's own, or
    the index dtype, to which x is widened first (exactly: the caller refuses the unsigned
    values that do not fit); the shifted bounds fit ``dtype``."""
    if x.dtype != dtype:
        x = xp.astype(x, dtype)
    return _clip_shift(xp, x, lo, hi, shift)


__all__ += ["clip_shift"]

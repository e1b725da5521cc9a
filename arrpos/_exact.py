"""Host-side constants computed to well beyond float64 (decimal arithmetic), cached.

Frequencies are returned as double-double pairs ``(hi, lo)`` of float64 NumPy arrays with
``hi + lo`` equal to the exact value to ~1e-32 relative, so that a table at position 2**24
can be right to 1e-12 and not only to the ~1e-9 a float64 frequency allows.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from decimal import Decimal, localcontext

import numpy as np

__all__ = ["PI", "decimal_pieces", "double_double", "power_frequencies", "timestep_frequencies"]

PI = Decimal(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863"
)
_PREC = 45


def double_double(values: Sequence[Decimal]) -> tuple[np.ndarray, np.ndarray]:
    """Decimal values -> (hi, lo) float64 arrays, hi = nearest float, lo = nearest of the rest."""
    hi = np.array([float(v) for v in values], dtype=np.float64)
    lo = np.array([float(v - Decimal(float(h))) for v, h in zip(values, hi)], dtype=np.float64)
    return hi, lo


def decimal_pieces(value: Decimal, bits: int, count: int) -> list[float]:
    """``value`` as ``count`` floats of at most ``bits`` significant bits each, summing to it."""
    out = []
    rest = value
    for _ in range(count):
        x = float(rest)
        if x == 0.0:
            out.append(0.0)
            continue
        m, e = np.frexp(x)
        piece = float(np.ldexp(np.trunc(m * 2.0**bits), e - bits))
        out.append(piece)
        rest -= Decimal(piece)
    return out


@functools.lru_cache(maxsize=64)
def power_frequencies(count: int, dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """``w_i = base ** (-2 i / dim)`` for ``i < count`` as a double-double pair."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        ln_base = Decimal(base).ln()
        vals = [(-(Decimal(2 * i) / Decimal(dim)) * ln_base).exp() for i in range(count)]
        return _frozen(double_double(vals))


@functools.lru_cache(maxsize=64)
def timestep_frequencies(
    half: int, max_period: float, shift: float, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """diffusers' ``scale * exp(-ln(max_period) * i / (half - shift))`` as a double-double pair."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        ln_p = Decimal(max_period).ln()
        denom = Decimal(half) - Decimal(shift)
        vals = [Decimal(scale) * (-ln_p * Decimal(i) / denom).exp() for i in range(half)]
        return _frozen(double_double(vals))


def _frozen(pair):
    for a in pair:
        a.flags.writeable = False
    return pair

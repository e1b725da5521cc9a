"""Position-dependent query scales of transformers models.

``position_scale`` is the per-position multiplier of Llama 4's attention temperature tuning,
Ministral 3 / Mistral 4's ``llama_4_scaling_beta`` and Inkling 2's log scaling;
:class:`PositionScale` holds one of them with its parameters (what ``RoPE.query_scale``
applies).
"""
from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from .._lib import (
    array_namespace,
    check_choice,
    check_real_array,
    check_real_scalar,
    device_of,
    has_float64,
    is_lazy,
    output_dtype,
)
from ..typing import Array, DType

__all__ = ["PositionScale", "position_scale"]

# kind -> the parameters it takes (all required), with the transformers code it restates
_KINDS = {
    # Llama4TextAttention.forward (attn_temperature_tuning, NoPE layers)
    "llama4": ("floor_scale", "attn_scale"),
    # Ministral3Attention / Mistral4Attention: get_llama_4_attn_scale
    "log": ("beta", "original_max_positions"),
    # Inkling2LogScale
    "log_floor": ("alpha", "floor_scale"),
}


def position_scale(positions: Array, /, *, kind: Literal["llama4", "log", "log_floor"],
                   floor_scale: float | None = None, attn_scale: float | None = None,
                   beta: float | None = None, original_max_positions: float | None = None,
                   alpha: float | None = None, dtype: DType | None = None) -> Array:
    """Per-position multiplier of the queries of models that scale attention with position.

    Parameters
    ----------
    positions : array
        Integer (or real) token positions, any shape ``P``; ``>= 0``.
    kind : {"llama4", "log", "log_floor"}
        ``"llama4"``: ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` (Llama 4's
        ``attn_temperature_tuning`` on its NoPE layers); ``"log"``:
        ``1 + beta * log(1 + floor(p / original_max_positions))`` (Ministral 3 / Mistral 4
        ``llama_4_scaling_beta``); ``"log_floor"``:
        ``1 + alpha * log(max((p + 1) / floor_scale, 1))`` (Inkling 2).
    floor_scale, attn_scale, beta, original_max_positions, alpha : float, optional
        The parameters of ``kind`` (each kind needs exactly its own).
    dtype : dtype, optional
        Output dtype (default: the namespace's default real floating dtype).

    Returns
    -------
    array
        Shape ``P``, computed in float64 where the backend has it and rounded once.

    Raises
    ------
    TypeError
        ``positions`` not a real array.
    ValueError
        An unknown ``kind``, a missing or foreign parameter, a parameter that is not positive,
        a negative position (on eager arrays).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> arrpos.position_scale(np.array([0, 8191, 8192, 100000]), kind="llama4",
    ...                       floor_scale=8192, attn_scale=0.1).round(6).tolist()
    [1.0, 1.069315, 1.069315, 1.256495]
    """
    kind = check_choice(kind, "kind", tuple(_KINDS))
    given = {"floor_scale": floor_scale, "attn_scale": attn_scale, "beta": beta,
             "original_max_positions": original_max_positions, "alpha": alpha}
    needed = _KINDS[kind]
    for name, value in given.items():
        if name in needed and value is None:
            raise ValueError(f"kind={kind!r} needs {name}")
        if name not in needed and value is not None:
            raise ValueError(f"kind={kind!r} takes {', '.join(needed)}, not {name}")
    params = {name: check_real_scalar(given[name], name, positive=name != "beta"
                                      and name != "alpha" and name != "attn_scale")
              for name in needed}
    xp = array_namespace(positions, name="positions")
    check_real_array(xp, positions, "positions")
    out_dtype = output_dtype(xp, None, dtype, device=device_of(positions))
    work = xp.float64 if has_float64(xp, device_of(positions)) else xp.float32
    p = xp.astype(positions, work)
    if not is_lazy(positions) and positions.size and bool(xp.any(~(p >= 0))):
        raise ValueError("positions must be >= 0 (token positions)")
    if kind == "llama4":
        s = xp.log1p(xp.floor((p + 1.0) / params["floor_scale"])) * params["attn_scale"] + 1.0
    elif kind == "log":
        s = 1.0 + params["beta"] * xp.log(1.0 + xp.floor(p / params["original_max_positions"]))
    else:
        s = 1.0 + params["alpha"] * xp.log(xp.maximum((p + 1.0) / params["floor_scale"],
                                                      xp.asarray(1.0, dtype=work)))
    return xp.astype(s, out_dtype)


@dataclasses.dataclass(frozen=True)
class PositionScale:
    """One of :func:`position_scale`'s kinds with its parameters; calling it on positions
    gives the scale. ``RoPE.query_scale`` applies the one its config asks for.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> s = arrpos.PositionScale("log", beta=0.1, original_max_positions=16384)
    >>> s(np.array([0, 16384, 40000])).round(6).tolist()
    [1.0, 1.069315, 1.109861]
    """

    kind: str
    floor_scale: float | None = None
    attn_scale: float | None = None
    beta: float | None = None
    original_max_positions: float | None = None
    alpha: float | None = None

    def __post_init__(self):  # validates the parameters once, on a one-element array
        position_scale(np.zeros(1, dtype=np.int64), **self._parameters())

    def _parameters(self):
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __call__(self, positions: Array, /, *, dtype: DType | None = None) -> Array:
        return position_scale(positions, **self._parameters(), dtype=dtype)

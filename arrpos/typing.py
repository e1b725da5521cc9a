"""Type aliases of arrpos's public signatures.

The Array API standard has no static array type yet (data-apis/array-api#589), so, as in
array-api-compat and array-api-extra, an array, its dtype and its device are ``Any`` to a type
checker: every library's arrays (NumPy, CuPy, torch, JAX, Dask, array-api-strict) pass, and the
functions check at run time what a static type cannot say (dtype kind, shape, namespace).

>>> import numpy as np, arrpos
>>> from arrpos.typing import Array
>>> def table(n: int) -> Array:
...     return arrpos.sinusoidal(np.arange(n), 4)
>>> table(3).shape
(3, 4)
"""
from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal, TypeAlias

__all__ = [
    "AlibiMode",
    "Array",
    "Config",
    "DType",
    "Device",
    "GridMode",
    "Grids",
    "Namespace",
    "RopeLayout",
    "Shape",
    "SinusoidLayout",
    "Size",
]

Array: TypeAlias = Any
"""An array of any Array API library (``numpy.ndarray``, ``torch.Tensor``, ``jax.Array``, ...)."""

DType: TypeAlias = Any
"""A dtype of the array's own library (``numpy.float32``, ``torch.bfloat16``, ...)."""

Device: TypeAlias = Any
"""A device of the array's own library (``"cpu"``, ``torch.device("cuda:0")``, ...)."""

Namespace: TypeAlias = ModuleType
"""An array library's module, as ``xp=`` takes it: ``numpy``, ``torch``, ``jax.numpy``,
``cupy``, ``dask.array``, ``array_api_strict`` (or the array-api-compat wrapper of one)."""

Size: TypeAlias = int | Sequence[int]
"""A length (1-D) or a grid shape, one int per axis (``resample``'s ``size``)."""

Shape: TypeAlias = Sequence[int]
"""A grid or window shape, one int per axis (``(H, W)``); a bare int is refused."""

Grids: TypeAlias = Array | Sequence[Sequence[int]]
"""Per-image patch grids: an integer ``(n, 2)`` / ``(n, 3)`` array, or a sequence of ``(h, w)``
/ ``(t, h, w)`` tuples."""

Config: TypeAlias = Any
"""A model's parsed ``config.json`` (a mapping) or the library's config object
(transformers' ``PretrainedConfig``)."""

RopeLayout: TypeAlias = Literal["half", "interleaved"]
"""How rotary features pair: ``"half"`` (rotate-half: ``i`` with ``i + d/2``, GPT-NeoX, Llama)
or ``"interleaved"`` (``2i`` with ``2i + 1``, GPT-J, Meta's LLaMA)."""

SinusoidLayout: TypeAlias = Literal["interleaved", "split"]
"""Where a sinusoidal table puts its sines and cosines: ``"interleaved"`` (``sin, cos`` per
frequency) or ``"split"`` (all sines, then all cosines)."""

GridMode: TypeAlias = Literal["index", "linspace", "center"]
"""Coordinates along a grid axis of length ``n``: ``0 .. n-1``, ``linspace(-1, 1, n)``, or the
cell centres ``2 (i + 0.5) / n - 1``."""

AlibiMode: TypeAlias = Literal["causal", "symmetric", "key"]
"""ALiBi's bias: ``-slope (q - k)`` for ``k <= q`` (0 elsewhere), ``-slope |q - k|``, or
``slope k`` (BLOOM's form: ``"causal"`` plus a constant per row)."""

"""THE op table: every op the dispatcher serves, its array slots, its dtype rule, and which
kernel drivers have it.

Read by the dispatcher (the arrays a call decides on, which front-ends guard or validate an
op), every front-end (which ops it serves, the dtype rule of ``supports``), the output-overlap
rule (``memory``: which inputs an output may meet), Dask (which ops become graphs, how tables
and ids align with the rows) and the CUDA driver (the kernels' instantiation list, hence
``cupy.RawModule``'s name expressions and the CI's NVRTC and nvcc compiles). Adding an op is
one :class:`Op` here plus its functions (the generic twin in ``_xp``, the drivers' kernels);
no other list names it.

Slots are argument names. A call of op ``o`` is ``o(*args, xp=..., **options)``:

* ``args``: its leading positional arguments that hold data (an output may share memory with
  any of them: ``memory``'s rule);
* ``arrays``: the device arrays a front-end decides on, as a call's ``arrays`` lists them: some
  of ``args`` and, for the rotations, the outputs (``apply_rope_qk``'s pair flattened);
* ``outputs``: each output and the argument it may replace in place (None: a new table);
  two outputs come as the pair ``out``;
* ``rotated`` / ``tables`` / ``ids``: the arrays a rotation rotates (its outputs take their
  dtypes), the tables of one dtype it reads them with, and the integer ids it gathers by.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["DRIVERS", "FLOATS", "INTEGERS", "OPS", "Op", "cuda_kernels", "served_by"]

FLOATS = ("float32", "float64", "float16", "bfloat16")  # the element types of the kernels
# the integer ops' inputs (their outputs: signed, the input's own type or int64)
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_WIDE = ("float32", "float64")
# drivers: host (compiled CPU kernels, csrc/), cuda (kernels.cu through CuPy), dask (graphs
# whose tasks dispatch per chunk: whatever each chunk's front-end takes, so no dtypes here)
DRIVERS = ("host", "cuda", "dask")
_PER_CHUNK = None


class Op:
    """One row of the table (see the module docstring); the ``*_at`` fields are the derived
    positions of the slots in a call's ``arrays``."""

    __slots__ = ("name", "args", "arrays", "outputs", "rotated", "tables", "ids", "dtypes",
                 "dtype_option", "kernel", "offsets", "guarded_by", "validated_by", "owns",
                 "integer", "rotated_at", "tables_at", "outputs_at", "ids_at", "_array_at")

    def __init__(self, name: str, args: tuple[str, ...], *, arrays: tuple[str, ...] = (),
                 outputs: tuple[tuple[str, str | None], ...] = (),
                 rotated: tuple[str, ...] = (), tables: tuple[str, ...] = (),
                 ids: str | None = None, dtypes: Mapping[str, tuple[str, ...] | None] = {},
                 kernel: str | None = None, offsets: bool = False,
                 guarded_by: tuple[str, ...] = (), validated_by: tuple[str, ...] = (),
                 integer: bool = False):
        self.name, self.args, self.arrays = name, args, arrays
        # (output slot, index in args of the input it may be in place of, or None)
        self.outputs = tuple((o, None if own is None else args.index(own)) for o, own in outputs)
        self.owns = tuple(own for _, own in self.outputs)
        self.rotated, self.tables, self.ids = rotated, tables, ids
        # driver -> the element types its kernels have for this op (None: per chunk)
        self.dtypes = dict(dtypes)
        # the outputs' dtype is the ``dtype`` option (tables), not a rotated array's
        self.dtype_option = not rotated
        # CUDA: the kernel template launched (None: none), instantiated per offset type too
        self.kernel, self.offsets = kernel, offsets
        # drivers whose kernels refuse outputs that meet an input other than their own x in
        # place, or each other (``Unsupported``, nothing written: ``memory``'s rule after it)
        self.guarded_by = frozenset(guarded_by)
        # drivers whose kernels check the ids' values themselves (ValueError naming them)
        self.validated_by = frozenset(validated_by)
        # integer arithmetic: its arrays and its ``dtype`` option are integers, of any type
        self.integer = integer
        at = {slot: k for k, slot in enumerate(arrays)}
        self.rotated_at = tuple(at[s] for s in rotated)
        self.tables_at = tuple(at[s] for s in tables)
        self.outputs_at = tuple(at[o] for o, _ in self.outputs if o in at)
        self.ids_at = at.get(ids) if ids is not None else None
        # where each slot of ``arrays`` comes from: ("arg", k) or ("out", k)
        outs = [o for o, _ in self.outputs]
        self._array_at = tuple(("arg", args.index(s)) if s in args else ("out", outs.index(s))
                               for s in arrays)

    def __repr__(self) -> str:
        return f"Op({self.name!r})"

    def arrays_of(self, args: tuple, out: Any) -> tuple:
        """The ``arrays`` of a call ``op(*args, out=out)`` (outputs None where not given)."""
        outs = (out,) if len(self.outputs) == 1 else ((None, None) if out is None else out)
        return tuple(args[k] if kind == "arg" else outs[k] for kind, k in self._array_at)

    def fits(self, arrays: tuple, options: Mapping[str, Any], code: Callable[[Any], Any],
             integer: Callable[[Any], bool], tables_converted: bool) -> bool:
        """The dtype rule of a driver's kernels for a call whose arrays are all of the
        front-end's kind: tables' outputs of the ``dtype`` option, with a code; a rotation's
        rotated arrays with a code each, its tables of one dtype with a code (the rotated
        array's dtype unless the driver converts ``tables_converted``), each output of its
        input's dtype, ids integer. ``code(dtype)`` is the driver's code of a front-end dtype,
        None for none. An integer op's arrays and ``dtype`` option: integers (``integer``)."""
        if self.integer:
            dtype = options.get("dtype")
            return dtype is not None and integer(dtype) and all(
                a is None or integer(a.dtype) for a in arrays)
        if self.dtype_option:
            dtype = options.get("dtype")
            return dtype is not None and code(dtype) is not None
        tables = self.tables_at
        dt = arrays[tables[0]].dtype
        if code(dt) is None:
            return False
        for k in tables[1:]:
            t = arrays[k].dtype
            if t is not dt and t != dt:
                return False
        for r, o in zip(self.rotated_at, self.outputs_at):
            dx = arrays[r].dtype
            if code(dx) is None or not (tables_converted or dx is dt or dx == dt):
                return False
            out = arrays[o]
            if out is not None and out.dtype is not dx and out.dtype != dx:
                return False
        return self.ids_at is None or integer(arrays[self.ids_at].dtype)


_ROTATION: dict[str, Any] = dict(kernel="apply_rope", offsets=True, guarded_by=("host", "cuda"),
                                 dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK})

OPS: dict[str, Op] = {op.name: op for op in (
    Op("sinusoid_table", ("positions", "hi", "lo"), arrays=("positions",),
       outputs=(("out", None),), kernel="sinusoid_table",
       dtypes={"host": FLOATS, "cuda": _WIDE, "dask": _PER_CHUNK}),
    Op("rope_cos_sin", ("positions", "inv_freq"), arrays=("positions", "inv_freq"),
       outputs=(("cos", None), ("sin", None)), kernel="rope_cos_sin",
       dtypes={"host": FLOATS, "cuda": _WIDE, "dask": _PER_CHUNK}),
    Op("apply_rope", ("x", "cos", "sin"), arrays=("x", "cos", "sin", "out"),
       outputs=(("out", "x"),), rotated=("x",), tables=("cos", "sin"), **_ROTATION),
    Op("apply_rope_cached", ("x", "cos_cache", "sin_cache", "position_ids"),
       arrays=("x", "cos_cache", "sin_cache", "position_ids", "out"), outputs=(("out", "x"),),
       rotated=("x",), tables=("cos_cache", "sin_cache"), ids="position_ids",
       validated_by=("host",), **dict(_ROTATION, kernel="apply_rope_cached")),
    Op("apply_rope_qk", ("q", "k", "cos", "sin"),
       arrays=("q", "k", "cos", "sin", "q_out", "k_out"),
       outputs=(("q_out", "q"), ("k_out", "k")), rotated=("q", "k"), tables=("cos", "sin"),
       **dict(_ROTATION, kernel=None)),  # on CUDA: two launches of apply_rope's kernel
    Op("alibi_bias", ("slopes",), arrays=("slopes",), kernel="alibi_bias",
       dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}),
    # on CUDA: the positions kernel of the mask's cumulative sum (its "mask" mode)
    Op("alibi_bias_from_mask", ("slopes", "attention_mask"),
       arrays=("slopes", "attention_mask"), kernel="alibi_bias_from_positions",
       dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}, validated_by=("host",)),
    Op("alibi_bias_from_positions", ("slopes", "query_positions", "key_positions"),
       arrays=("slopes", "query_positions", "key_positions"),
       kernel="alibi_bias_from_positions",
       dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}),
    Op("relative_bias", ("table", "index"), arrays=("table", "index"), kernel="relative_bias",
       dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}, validated_by=("host",)),
    # a bias of j - i alone: (heads, q, k) from the q + k - 1 lines (its rows) of the
    # distances; on CUDA the gather of its ids
    Op("toeplitz_bias", ("lines",), arrays=("lines",), kernel="relative_bias",
       dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}),
    # both conv_positional forms: x (..., H, W, C), weight (kh, kw, C) (1-D: W = kw = 1)
    Op("conv_positional", ("x", "weight", "bias"), arrays=("x", "weight", "bias"),
       kernel="conv_positional", dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}),
    # resample's separable taps: grid (..., *old, C), taps per grid axis built on the host;
    # prefix rows (..., P, C) or None lead the result (..., P + prod(new), C)
    Op("resample_grid", ("grid", "prefix"), arrays=("grid", "prefix"), kernel="resample_grid",
       dtypes={"host": FLOATS, "cuda": FLOATS, "dask": _PER_CHUNK}),
    # clip(x, lo, hi) + shift of an integer x in the integer ``dtype`` (Shaw's index, the
    # bucket tables' index); the shifted bounds fit ``dtype``
    Op("clip_shift", ("x",), arrays=("x",), dtypes={"host": INTEGERS}, integer=True),
    # the generic code's alone (no driver has them); listed for their slots
    Op("rope_cos_sin_mixed", ("positions", "inv_freq"), arrays=("positions", "inv_freq"),
       outputs=(("cos", None), ("sin", None))),
    Op("rope_cos_sin_pair", ("positions", "w_hi", "w_lo"), arrays=("positions",),
       outputs=(("cos", None), ("sin", None))),
    Op("xpos_scale", ("positions", "rates"), arrays=("positions",)),
    Op("frequency_arrays", ()),
)}


def served_by(driver: str) -> frozenset[str]:
    """The ops that ``driver``'s kernels (or graphs) have."""
    return frozenset(name for name, op in OPS.items() if driver in op.dtypes)


def cuda_kernels() -> dict[str, tuple[tuple[str, ...], bool]]:
    """Each CUDA kernel template -> (the element types it is instantiated for, whether per
    offset type too): the instantiation list, from the ops launching it."""
    kernels: dict[str, tuple[tuple[str, ...], bool]] = {}
    for op in OPS.values():
        dtypes = op.dtypes.get("cuda")
        if op.kernel is None or dtypes is None:
            continue
        have = kernels.get(op.kernel, ((), False))[0]
        kernels[op.kernel] = (have + tuple(d for d in dtypes if d not in have), op.offsets)
    return kernels

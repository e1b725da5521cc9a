"""Each public docstring's "Backend support" note agrees with the dispatch table: a function
whose arithmetic goes through ``_dispatch.call(op, ...)`` (or ``plan``) names every library
whose front-end's driver has ``op`` (the op table); a function that never dispatches claims no
compiled path."""
from __future__ import annotations

import inspect
import re

import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import ops

# front-end -> how a docstring names its library
LIBRARY = {"host.numpy": "NumPy", "host.torch_cpu": "torch", "cuda.torch_cuda": "CUDA",
           "cuda.cupy": "CuPy", "dask.graph": "Dask"}


def _front_ends_with(op):
    row = ops.OPS.get(op)
    return [name for names in _dispatch.FRONT_ENDS.values() for name in names
            if row is not None and name.split(".")[0] in row.dtypes]


def _public_functions():
    for name in sorted(arrpos.__all__):
        obj = getattr(arrpos, name)
        if inspect.isfunction(obj) and obj.__doc__ and "Backend support" in obj.__doc__:
            yield name, obj


def _ops(fn):
    """The ops a function dispatches, found in its source (and that of the helpers it calls by
    name: private ones, and the functions of its own module)."""
    src = inspect.getsource(fn)
    module = inspect.getmodule(fn)
    for helper in set(re.findall(r"\b([A-Za-z_]\w*)\(", src)):
        obj = getattr(module, helper, None)
        if inspect.isfunction(obj) and obj is not fn and (
                helper.startswith("_") or obj.__module__ == module.__name__):
            src += inspect.getsource(obj)
    return set(re.findall(r'_dispatch\.(?:call|plan)\(\s*"(\w+)"', src))


def _note(doc):
    text = " ".join(doc.split())
    return text[text.index("Backend support"):].split(". Examples", 1)[0]


@pytest.mark.parametrize("name, fn", list(_public_functions()))
def test_backend_note_matches_dispatch_table(name, fn):
    note = _note(fn.__doc__)
    dispatched = _ops(fn)
    served = sorted({a for op in dispatched for a in _front_ends_with(op)})
    if not served:
        assert not re.search(r"compiled|CUDA kernel|takes the kernel", note), (name, note)
        return
    missing = [LIBRARY[a] for a in served if LIBRARY[a] not in note
               and not re.search(r"as :func:`\w+`", note)]
    assert not missing, f"{name}: its note does not mention {missing}: {note}"

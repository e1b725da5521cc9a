"""Implementation modules, chosen by ``arrpos._dispatch``.

``ops`` is the op table; ``_xp`` the generic Array API code of every op; ``memory`` what an
array's memory allows (the output-overlap rule). Each kernel driver is a subpackage (``host``:
the compiled CPU kernels of ``csrc/``, built as ``_cpu``; ``cuda``: the kernels of
``kernels.cu``; ``dask``: graphs whose tasks dispatch per chunk) with a thin front-end per
array library whose ops have ``_xp``'s names and signatures. Front-ends use their driver's
package-public names, never another module's private ones."""


class Unsupported(Exception):
    """A front-end's or driver's late "no": raised while preparing a call it cannot serve after
    all (e.g. strides that do not merge, memory it must not touch), before anything is
    written; the dispatcher then tries the next front-end, then ``_xp``."""


import contextlib as _contextlib
import threading as _threading

_CALLER = _threading.local()


@_contextlib.contextmanager
def one_thread_per_call():
    """Within this block (in this Python thread) compiled kernels use one CPU thread: for
    callers that already run one kernel call per core (a Dask task per chunk), where each
    call's own threads would only oversubscribe the cores."""
    before = getattr(_CALLER, "one_thread", False)
    _CALLER.one_thread = True
    try:
        yield
    finally:
        _CALLER.one_thread = before


def one_thread_wanted() -> bool:
    """Whether the current Python thread is inside :func:`one_thread_per_call`."""
    return getattr(_CALLER, "one_thread", False)


@_contextlib.contextmanager
def writing_part_of(nbytes: int):
    """Within this block (in this Python thread) each kernel call's output is one part of an
    output of ``nbytes`` (a Dask chunk written into its canvas): the kernels choose their
    stores by that size, since the whole output, not the part, decides whether it can stay
    in the cache."""
    before = getattr(_CALLER, "whole_bytes", 0)
    _CALLER.whole_bytes = nbytes
    try:
        yield
    finally:
        _CALLER.whole_bytes = before


def whole_output_bytes() -> int:
    """The ``nbytes`` of the enclosing :func:`writing_part_of` (0 outside one)."""
    return getattr(_CALLER, "whole_bytes", 0)

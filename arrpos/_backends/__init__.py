"""Implementation modules. ``_xp`` is the generic Array API code; the others are adapters around
compiled kernels with the same function names and signatures plus ``supports(op, arrays,
**kwargs)``, chosen by ``arrpos._dispatch``."""


class Unsupported(Exception):
    """An adapter's late "no": raised while preparing a call it cannot serve after all (e.g.
    strides that do not merge); the dispatcher then tries the next adapter, then ``_xp``."""


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

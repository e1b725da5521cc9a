"""Implementation modules. ``_xp`` is the generic Array API code; the others are adapters around
compiled kernels with the same function names and signatures plus ``supports(op, arrays,
**kwargs)``, chosen by ``arrpos._dispatch``."""


class Unsupported(Exception):
    """An adapter's late "no": raised while preparing a call it cannot serve after all (e.g.
    strides that do not merge); the dispatcher then tries the next adapter, then ``_xp``."""

"""``python -m arrpos`` and the ``arrpos`` console script; the commands live in ``arrpos._cli``."""
from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())

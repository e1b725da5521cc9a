"""Implementation modules. ``_xp`` is the generic Array API code; the others are compiled twins
with the same function names and signatures, chosen by ``arrpos._dispatch``."""

"""arrpos benchmarks: every figure is a ratio to a baseline timed in the same run."""

import os as _os

# Peers' OpenMP pools (torch's) spin after each call by default, on the core the next timed call
# of the interleaved rounds needs; sleeping at once, they leave every candidate the same machine.
# Set before any peer is imported; an explicit OMP_WAIT_POLICY wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

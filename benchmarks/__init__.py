"""arrpos benchmarks: every figure is a ratio to a baseline timed in the same run."""

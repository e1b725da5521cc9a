"""The host driver (``driver``: the compiled CPU kernels) and its front-ends: ``numpy``,
``torch_cpu``."""

"""The CUDA driver (``driver``: the kernels of ``kernels.cu`` through NVRTC) and its front-ends:
``cupy``, ``torch_cuda``."""

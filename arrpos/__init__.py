"""arrpos: positional encodings for transformers, written once against the Array API.

The same functions run on NumPy, CuPy, PyTorch, JAX, Dask and array-api-strict arrays and give
the same numbers; NumPy inputs take compiled CPU kernels and CuPy inputs CUDA kernels where
those serve better. See ``shared/API.md`` for the contract and the README for a tour.
"""
from ._absolute import decode_sinusoidal, grid_coords, sinusoidal, sinusoidal_nd, timestep_embedding

__version__ = "0.1.0"

__all__ = sorted(
    [
        "decode_sinusoidal",
        "grid_coords",
        "sinusoidal",
        "sinusoidal_nd",
        "timestep_embedding",
    ]
)

"""A first look at arrpos: the same encodings on NumPy (compiled kernels) and other libraries."""
import numpy as np

import arrpos

pe = arrpos.sinusoidal(2048, 512, dtype=np.float32)  # Vaswani et al. table, compiled kernel
print("sinusoidal(2048, 512):", pe.shape, pe.dtype)
print("position 1, first features (d=16, base=100):",
      np.round(arrpos.sinusoidal(2, 16, base=100.0)[1, :6], 2))

far = arrpos.sinusoidal(np.array([16_000_000]), 4, dtype=np.float32)[0]
exact = [np.sin(16e6), np.cos(16e6), np.sin(16e6 / 100), np.cos(16e6 / 100)]  # float64 formula
print("float32 row at position 16,000,000, max error:", float(np.abs(far - exact).max()))
print("position 31,415.5 decoded from its encoding:",
      float(arrpos.decode_sinusoidal(arrpos.sinusoidal(np.array([31415.5]), 64))[0]))

patches = arrpos.sinusoidal_nd(arrpos.grid_coords((14, 14)), 768)  # ViT/MAE 2-D table
print("2-D table for a 14x14 patch grid:", patches.reshape(-1, 768).shape)

t = arrpos.timestep_embedding(np.array([0, 500, 999]), 320, flip_sin_to_cos=True,
                              downscale_freq_shift=0.0)
print("Stable-Diffusion timestep embedding:", t.shape)

try:
    import torch
except ImportError:
    print("(torch not installed: skipping the torch part)")
else:
    pt = arrpos.sinusoidal(torch.arange(2048), 512, dtype=torch.float32)
    print("same table from torch:", type(pt).__name__, "max |diff| vs NumPy =",
          float((pt - torch.from_numpy(pe)).abs().max()))

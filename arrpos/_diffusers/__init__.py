"""Positional encodings of diffusers transformers, read from their ``config.json``.

``positions`` holds :func:`from_diffusers_config` and :class:`DiffusersPositions`; ``spec`` the
data each model class is described by; ``image``, ``video``, ``seq`` and ``sincos`` the model
classes of each kind (rotary image, video and sequence models; sincos tables).
"""
from .positions import DiffusersPositions, from_diffusers_config

__all__ = ["DiffusersPositions", "from_diffusers_config"]

"""Relative position encodings: index matrices, buckets (T5, DeBERTa), bias tables, Shaw et al.'s
two terms, the Transformer-XL score and DeBERTa's disentangled terms.

Sign convention: ``relative = key_position - query_position`` (T5, Shaw). DeBERTa buckets
``query - key``; :func:`deberta_bucket` takes the T5-style value and says so.

The buckets equal transformers' float32 arithmetic for integers of every width (how: the
``buckets`` module).

Modules: ``indices`` (index matrices), ``buckets`` (T5, DeBERTa), ``scores`` (bias gather and
the score terms).
"""
from .buckets import deberta_bucket, t5_bucket
from .indices import log_relative_coords, relative_index_nd, relative_positions, shaw_index
from .scores import (
    deberta_scores,
    rel_shift,
    relative_bias,
    shaw_key_scores,
    shaw_value_term,
    t5_bias,
    transformer_xl_scores,
)

__all__ = [
    "deberta_bucket",
    "deberta_scores",
    "log_relative_coords",
    "rel_shift",
    "relative_bias",
    "relative_index_nd",
    "relative_positions",
    "shaw_index",
    "shaw_key_scores",
    "shaw_value_term",
    "t5_bias",
    "t5_bucket",
    "transformer_xl_scores",
]

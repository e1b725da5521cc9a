"""Relative position encodings: index matrices, buckets (T5, DeBERTa), bias tables, Shaw et al.'s
two terms, the Transformer-XL score and DeBERTa's disentangled terms.

Sign convention: ``relative = key_position - query_position`` (T5, Shaw). DeBERTa buckets
``query - key``; :func:`deberta_bucket` takes the T5-style value and says so.

The T5 and DeBERTa buckets reproduce transformers' float32 arithmetic exactly: the bucket is a
non-decreasing step function of the distance, so its steps are found once on the host (in the
reference's float32 arithmetic with a correctly rounded log, by a bisection per bucket value:
``O(buckets)`` memory whatever ``max_distance`` is) and the device only counts the steps below
each distance (``searchsorted``). Every backend therefore gives the same integers, whatever its
own ``log`` rounds to, and no ``log(0)`` is ever evaluated.

Integer inputs of every width are accepted: distances, indices and buckets are formed in the
widest signed integer dtype of the device (``_lib.as_index``), so int8/16/32 minima (``abs``
overflows) and unsigned inputs (differences wrap) give transformers' buckets; a bucket keeps
the input's dtype where that dtype is signed and holds every bucket.

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
    "t5_bucket",
    "transformer_xl_scores",
]

"""T5 and DeBERTa buckets through their lookup tables equal transformers' own functions, for
every integer dtype, on hypothesis-drawn values (small distances, the dtype's extremes)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrpos

torch = pytest.importorskip("torch")
t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
deberta = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")

DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _values(dtype):
    info = np.iinfo(dtype)
    # -2**63: transformers' negation overflows there (arrpos widens first and stays right)
    lo, hi = max(int(info.min), 1 - 2**63), min(int(info.max), 2**63 - 1)
    small = st.integers(max(lo, -5000), min(hi, 5000))
    return st.lists(st.one_of(small, st.integers(lo, hi), st.sampled_from([lo, hi])),
                    min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), bidirectional=st.booleans(),
       num_buckets=st.sampled_from([4, 32, 64, 320]),
       max_distance=st.sampled_from([None, 128, 1000, 70000]))
def test_t5_bucket_equals_transformers(data, dtype, bidirectional, num_buckets, max_distance):
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    md = max(max_distance or 0, max_exact + 1)
    rel = np.array(data.draw(_values(dtype)), dtype=dtype)
    got = arrpos.t5_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                           max_distance=md)
    ref = t5.T5Attention._relative_position_bucket(
        torch.tensor(rel.astype(np.int64)), bidirectional=bidirectional,
        num_buckets=num_buckets, max_distance=md)
    assert got.tolist() == ref.tolist()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), bucket_size=st.sampled_from([8, 256]),
       max_position=st.sampled_from([512, 4096]), shape=st.sampled_from([(-1,), (3, -1)]))
def test_deberta_bucket_equals_transformers(data, dtype, bucket_size, max_position, shape):
    rel = np.array(data.draw(_values(dtype)) * 3, dtype=dtype).reshape(shape)
    got = arrpos.deberta_bucket(rel, bucket_size=bucket_size, max_position=max_position)
    ref = deberta.make_log_bucket_position(-torch.tensor(rel.astype(np.int64)), bucket_size,
                                           max_position)
    assert got.shape == rel.shape and got.tolist() == ref.tolist()


def test_buckets_of_relative_positions_torch_and_dask():
    """The table path on torch tensors and Dask arrays (chunk by chunk) gives transformers'
    buckets of a (q, k) matrix."""
    rel = arrpos.relative_positions(300, 500, xp=torch)
    ref = t5.T5Attention._relative_position_bucket(rel)
    assert torch.equal(arrpos.t5_bucket(rel), ref)
    ref = deberta.make_log_bucket_position(-rel, 256, 512)
    assert torch.equal(arrpos.deberta_bucket(rel), ref)
    da = pytest.importorskip("dask.array")
    drel = da.from_array(rel.numpy(), chunks=(128, 256))
    assert np.array_equal(arrpos.t5_bucket(drel).compute(),
                          t5.T5Attention._relative_position_bucket(rel).numpy())
    assert np.array_equal(arrpos.deberta_bucket(drel).compute(), ref.numpy())

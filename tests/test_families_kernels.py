"""The compiled ALiBi and relative-bias kernels against the generic implementation (``_xp``,
the reference), bit for bit, on hypothesis-drawn shapes, strides, dtypes, offsets and modes;
through the public functions, so the dispatcher's routing is what is tested."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import array_api_compat.numpy as xp
import arrpos
from reference import numpy_float_dtypes
from arrpos import _dispatch
from arrpos._backends import _xp

_numpy = _dispatch.front_end("host.numpy")
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")

MODES = ["causal", "symmetric", "key"]


DTYPES = numpy_float_dtypes()


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _slopes(draw_heads, dtype, negative=False, step=1):
    s = arrpos.alibi_slopes(draw_heads).astype(np.float64) * (-1 if negative else 1)
    s = np.repeat(s, step)  # a strided view below when step > 1
    return s.astype(dtype)[::step]


def _served(op, *arrays, **options):
    """The front-end that serves this call is the compiled one (not a silent fallback)."""
    assert _dispatch.plan(op, xp, arrays, **options).module is _numpy


@settings(max_examples=80, deadline=None)
@given(heads=st.integers(1, 9), q=st.integers(0, 40), k=st.integers(0, 300),
       offset=st.one_of(st.none(), st.integers(-2**40, 2**40), st.integers(-50, 50)),
       mode=st.sampled_from(MODES), dtype=st.sampled_from(DTYPES), negative=st.booleans(),
       step=st.integers(1, 2))
def test_alibi_bias_equals_generic(heads, q, k, offset, mode, dtype, negative, step):
    s = _slopes(heads, dtype, negative, step)
    got = arrpos.alibi_bias(s, q, k, mode=mode, query_offset=offset)
    _served("alibi_bias", s, mode=mode, dtype=s.dtype)
    off = k - q if offset is None else offset
    ref = _xp.alibi_bias(s, q, k, mode=mode, query_offset=off, dtype=s.dtype, xp=xp)
    _same_bits(got, ref)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [1, 7, 500, 3000])
def test_alibi_bias_streamed_sizes(mode, k):
    """Outputs past the streaming size, rows short (staged) and long (copied from the line)."""
    s = arrpos.alibi_slopes(5).astype(np.float32)
    q = (9 << 20) // (5 * 4 * k) + 3
    got = arrpos.alibi_bias(s, q, k, mode=mode, query_offset=-17)
    ref = _xp.alibi_bias(s, q, k, mode=mode, query_offset=-17, dtype=s.dtype, xp=xp)
    _same_bits(got, ref)


def test_alibi_bias_special_slopes():
    """NaN, infinite and zero slopes multiply like the generic code's (0 * inf is NaN)."""
    s = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45], dtype=np.float32)
    for mode in MODES:
        ref = _xp.alibi_bias(s, 5, 6, mode=mode, query_offset=2, dtype=s.dtype, xp=xp)
        _same_bits(arrpos.alibi_bias(s, 5, 6, mode=mode, query_offset=2), ref)


positions = st.one_of(
    st.lists(st.integers(-2**40, 2**40), min_size=1, max_size=30).map(np.array),
    st.lists(st.integers(-300, 300), min_size=1, max_size=30).map(np.array),
    st.lists(st.integers(-300, 300), min_size=1, max_size=30).map(
        lambda v: np.array(v, dtype=np.float64) / 4),
    st.lists(st.integers(0, 200), min_size=1, max_size=30).map(
        lambda v: np.array(v, dtype=np.uint8)),
)


@settings(max_examples=80, deadline=None)
@given(qp=positions, kp=positions, lead_q=st.sampled_from([(), (1,), (3,), (2, 1)]),
       lead_k=st.sampled_from([(), (1,), (3,)]), mode=st.sampled_from(MODES),
       dtype=st.sampled_from(DTYPES), heads=st.integers(1, 5), negative=st.booleans())
def test_alibi_from_positions_equals_generic(qp, kp, lead_q, lead_k, mode, dtype, heads,
                                             negative):
    s = _slopes(heads, dtype, negative)
    qp = np.broadcast_to(qp, lead_q + qp.shape)
    kp = np.broadcast_to(kp[::-1], lead_k + kp.shape)  # a reversed, broadcast view
    got = arrpos.alibi_bias_from_positions(s, qp, kp, mode=mode)
    lead = np.broadcast_shapes(lead_q, lead_k)
    qi = qp.astype(np.int64) if qp.dtype.kind in "iu" else qp
    ki = kp.astype(np.int64) if kp.dtype.kind in "iu" else kp
    ref = _xp.alibi_bias_from_positions(s, qi, ki, mode=mode, lead=lead, dtype=s.dtype, xp=xp)
    _served("alibi_bias_from_positions", s, qi, ki, mode=mode, lead=lead, dtype=s.dtype)
    _same_bits(got, ref)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 5), k=st.integers(1, 400), heads=st.integers(1, 40),
       dtype=st.sampled_from(DTYPES),
       kind=st.sampled_from([bool, np.int64, np.int8, np.int32, np.uint16, np.uint8]),
       negative=st.booleans(), data=st.data())
def test_alibi_from_mask_equals_generic(batch, k, heads, dtype, kind, negative, data):
    bits = data.draw(st.lists(st.booleans(), min_size=batch * k, max_size=batch * k))
    mask = np.array(bits).reshape(batch, k).astype(kind)
    s = _slopes(heads, dtype, negative)
    got = arrpos.alibi_bias_from_mask(s, mask)
    ref = _xp.alibi_bias_from_mask(s, mask != 0, dtype=s.dtype, xp=xp)
    _served("alibi_bias_from_mask", s, mask != 0, dtype=s.dtype)
    _same_bits(got, ref)


@pytest.mark.parametrize("k", [1, 7, 8, 9, 64, 1003])
@pytest.mark.parametrize("kind", [bool, np.int64, np.uint8])
def test_alibi_from_mask_runs_equal_generic(k, kind):
    """Masks of long runs (left and right padding, all real, all padding, holes): the kernel
    writes whole blocks of real tokens or padding at once, mixed blocks one by one."""
    rows = [np.ones(k), np.zeros(k), np.r_[np.zeros(k // 3), np.ones(k - k // 3)],
            np.r_[np.ones(k - k // 5), np.zeros(k // 5)], (np.arange(k) % 11 < 9)]
    mask = np.array(rows).astype(kind)
    for dtype in DTYPES:
        s = _slopes(12, dtype)
        got = arrpos.alibi_bias_from_mask(s, mask)
        ref = _xp.alibi_bias_from_mask(s, mask != 0, dtype=s.dtype, xp=xp)
        _served("alibi_bias_from_mask", s, mask != 0, dtype=s.dtype)
        _same_bits(got, ref)


@pytest.mark.parametrize("at", [0, 650, 698])
@pytest.mark.parametrize("kind", [np.int64, np.uint8])
def test_alibi_from_mask_bad_value_anywhere_raises(at, kind):
    """A bad value in a block of ones, a mixed block or the tail past the last whole block."""
    mask = np.ones((2, 699), dtype=kind)
    mask[1, 640:660] = 0
    mask[1, at] = 3
    with pytest.raises(ValueError, match="attention_mask must hold only 0 and 1"):
        arrpos.alibi_bias_from_mask(np.ones(4, np.float32), mask)


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint64])
@pytest.mark.parametrize("bad", [2, -1, 255])
def test_alibi_from_mask_bad_values_raise(kind, bad):
    """The kernel reads the integer mask itself: a value other than 0 and 1 is refused."""
    mask = np.ones((3, 700), dtype=np.int64)
    mask[2, 650] = bad
    mask = mask.astype(kind)
    if mask[2, 650] in (0, 1):
        return  # (the value does not survive the dtype)
    with pytest.raises(ValueError, match="attention_mask must hold only 0 and 1"):
        arrpos.alibi_bias_from_mask(np.ones(4, np.float32), mask)


@settings(max_examples=60, deadline=None)
@given(buckets=st.integers(1, 40), heads=st.integers(1, 20),
       shape=st.sampled_from([(0,), (5,), (7, 9), (3, 4, 5), (64, 300)]),
       dtype=st.sampled_from(DTYPES),
       idt=st.sampled_from([np.int64, np.int32, np.int16, np.uint8, np.uint64]),
       transposed=st.booleans(), data=st.data())
def test_relative_bias_equals_generic(buckets, heads, shape, dtype, idt, transposed, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    table = rng.standard_normal((heads, buckets) if transposed else (buckets, heads))
    table = (table.T if transposed else table).astype(dtype)  # a transposed view, or not
    index = rng.integers(0, min(buckets, 127), size=shape).astype(idt)
    got = arrpos.relative_bias(table, index)
    ref = _xp.relative_bias(table, index, dtype=table.dtype, xp=xp)
    _served("relative_bias", table, index, dtype=table.dtype)
    _same_bits(got, ref)


def test_relative_bias_large_streamed_and_t5_index():
    table = np.random.default_rng(1).standard_normal((32, 12)).astype(np.float32)
    index = arrpos.t5_bucket(arrpos.relative_positions(700, 900))
    ref = _xp.relative_bias(table, index, dtype=table.dtype, xp=xp)
    _same_bits(arrpos.relative_bias(table, index), ref)


def _toeplitz_reference(lines, q, k):
    """``out[h, i, j] = lines[j - i + q - 1, h]`` by a loop over the rows (independent of
    both the kernel and the generic twin)."""
    out = np.empty((lines.shape[1], q, k), lines.dtype)
    for i in range(q):
        out[:, i, :] = lines[q - 1 - i:q - 1 - i + k].T
    return out


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 9), q=st.integers(1, 70), k=st.integers(1, 700),
       dtype=st.sampled_from(DTYPES), transposed=st.booleans(), data=st.data())
def test_toeplitz_bias_equals_generic_and_the_loop(heads, q, k, dtype, transposed, data):
    """The windows kernel (t5_bias's bias from its distances' rows): bit for bit the loop's
    and the generic twin's, any lines layout (a transposed view is made contiguous)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = q + k - 1
    lines = rng.standard_normal((heads, n) if transposed else (n, heads))
    lines = (lines.T if transposed else lines).astype(dtype)
    _served("toeplitz_bias", lines, dtype=lines.dtype)
    got = _dispatch.call("toeplitz_bias", xp, lines, arrays=(lines,), q=q, k=k,
                         dtype=lines.dtype)
    _same_bits(got, _toeplitz_reference(lines, q, k))
    _same_bits(got, _xp.toeplitz_bias(lines, q=q, k=k, dtype=lines.dtype, xp=xp))


@pytest.mark.parametrize("q, k", [(1, 1 << 20), (2048, 2048), (3000, 5), (5, 3000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_toeplitz_bias_streamed_and_threaded(q, k, dtype):
    """Outputs past the streaming and threading sizes, long and short rows, one row."""
    lines = np.random.default_rng(3).standard_normal((q + k - 1, 3)).astype(dtype)
    got = _dispatch.call("toeplitz_bias", xp, lines, arrays=(lines,), q=q, k=k,
                         dtype=lines.dtype)
    _same_bits(got, _toeplitz_reference(lines, q, k))


def test_t5_bias_takes_the_windows_kernel(monkeypatch):
    """t5_bias on NumPy reaches the windows kernel, not a gather of (q, k) ids."""
    def refuse(*args, **kwargs):
        raise AssertionError("t5_bias gathered by ids on the host")
    monkeypatch.setattr(_xp, "relative_bias", refuse)
    monkeypatch.setattr(_numpy, "relative_bias", refuse)
    table = np.random.default_rng(4).standard_normal((32, 4)).astype(np.float32)
    got = arrpos.t5_bias(table, 300, 500)
    rel = np.arange(500)[None, :] - np.arange(300)[:, None]
    ref = table[arrpos.t5_bucket(rel)].transpose(2, 0, 1)
    _same_bits(got, ref)


def _window_index(w, cls):
    """Swin's relative_position_index for a w x w window (BEiT's with its three class-token
    ids when ``cls``): rows that are shifts of the row before but for one column a window
    row, and one row in w gathered whole."""
    c = np.stack(np.meshgrid(np.arange(w), np.arange(w), indexing="ij")).reshape(2, -1)
    rel = (c[:, :, None] - c[:, None, :]).transpose(1, 2, 0) + (w - 1)
    idx = rel[..., 0] * (2 * w - 1) + rel[..., 1]
    if not cls:
        return idx
    n = (2 * w - 1) ** 2
    out = np.empty((w * w + 1, w * w + 1), idx.dtype)
    out[1:, 1:], out[0, 1:], out[1:, 0], out[0, 0] = idx, n, n + 1, n + 2
    return out


def _runs_of_ids(rng, shape, buckets):
    """Rows of runs of ids that go up or down by one, 1 to 19 long (within [0, buckets))."""
    out = np.empty(shape, np.int64)
    for row in out.reshape(-1, shape[-1]):
        m = 0
        while m < row.size:
            n, up = int(rng.integers(1, 20)), bool(rng.integers(0, 2))
            first = rng.integers(0, buckets - n + 1) + (0 if up else n - 1)
            run = first + np.arange(n) if up else first - np.arange(n)
            row[m:m + n] = run[:row.size - m]
            m += n
    return out


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(["t5", "swin", "swin key - query", "beit", "random rows",
                             "period", "period in runs"]),
       w=st.integers(8, 20),
       heads=st.integers(1, 17), dtype=st.sampled_from(DTYPES),
       idt=st.sampled_from([np.int64, np.int32]), edits=st.integers(0, 3), data=st.data())
def test_relative_bias_2d_index_paths_equal_generic(kind, w, heads, dtype, idt, edits, data):
    # the compiled gather's row paths (windows of lines: rows of a period p, each row p places
    # on from the one p rows before; rows moved on from the row before with changed columns
    # looked up; whole rows gathered), with a few ids edited anywhere so that each path meets
    # the rows it must not take
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if kind == "t5":
        q = data.draw(st.integers(2, 130))
        index = np.asarray(arrpos.t5_bucket(arrpos.relative_positions(q, w * w)))
    elif kind == "random rows":
        index = rng.integers(0, 50, size=(data.draw(st.integers(2, 70)), w * w))
    elif kind.startswith("period"):  # ids of (i % p, j - i): Swin's rows are of a period of w
        # (in runs: lines copied run by run from the table's rows or their reversal where the
        # runs are long, gathered where not)
        p, q = data.draw(st.integers(2, 6)), data.draw(st.integers(8, 90))
        ids = (_runs_of_ids(rng, (p, q + w * w), 40) if kind.endswith("runs")
               else rng.integers(0, 40, size=(p, q + w * w)))
        i, j = np.arange(q)[:, None], np.arange(w * w)[None, :]
        index = ids[i % p, j - i + q]
    elif kind == "swin key - query":  # its lines' runs go up (copied from the table's rows)
        index = np.ascontiguousarray(_window_index(w, False).T)
    else:
        index = _window_index(w, kind == "beit")
    index = index.astype(idt)
    buckets = int(index.max()) + 1 + data.draw(st.integers(0, 3))
    for _ in range(edits):
        i, j = rng.integers(0, index.shape[0]), rng.integers(0, index.shape[1])
        index[i, j] = rng.integers(0, buckets)
    table = rng.standard_normal((buckets, heads)).astype(dtype)
    got = arrpos.relative_bias(table, index)
    _served("relative_bias", table, index, dtype=table.dtype)
    _same_bits(got, _xp.relative_bias(table, index, dtype=table.dtype, xp=xp))
    if index.size:  # an id out of range anywhere (a changed column, a shifted one) is refused
        i, j = rng.integers(0, index.shape[0]), rng.integers(0, index.shape[1])
        bad = index.copy()
        bad[i, j] = buckets if data.draw(st.booleans()) else -1
        with pytest.raises(ValueError, match="index"):
            arrpos.relative_bias(table, bad)


@pytest.mark.parametrize("kind,w,dtype", [("beit", 24, np.float32), ("swin", 16, np.float16),
                                          ("beit", 13, np.float64), ("t5", 23, np.float32),
                                          ("swin key - query", 20, np.float32)])
def test_relative_bias_2d_index_streamed(kind, w, dtype):
    # outputs past the streaming threshold, rows of lengths that are not whole cache lines
    if kind == "t5":
        index = arrpos.t5_bucket(arrpos.relative_positions(601, w * w + 2))
    elif kind == "swin key - query":
        index = np.ascontiguousarray(_window_index(w, False).T)
    else:
        index = _window_index(w, kind == "beit")
    heads = max(2, (12 << 20) // (index.size * np.dtype(dtype).itemsize))
    table = np.random.default_rng(2).standard_normal((int(index.max()) + 1, heads))
    table = table.astype(dtype)
    ref = _xp.relative_bias(table, index, dtype=table.dtype, xp=xp)
    _same_bits(arrpos.relative_bias(table, index), ref)
    _same_bits(arrpos.relative_bias(table, index.astype(np.int32)), ref)


def _swin_index(w):
    c = np.stack(np.meshgrid(np.arange(w), np.arange(w), indexing="ij")).reshape(2, -1)
    rel = (c[:, :, None] - c[:, None, :]).transpose(1, 2, 0) + (w - 1)
    return rel[..., 0] * (2 * w - 1) + rel[..., 1]


@settings(max_examples=80, deadline=None)
@given(op=st.sampled_from(["alibi", "positions", "mask", "gather", "t5", "swin", "toeplitz"]),
       heads=st.integers(1, 5), q=st.integers(1, 40), k=st.integers(1, 300),
       mode=st.sampled_from(MODES), dtype=st.sampled_from(DTYPES), data=st.data())
def test_streamed_parts_equal_generic(op, heads, q, k, mode, dtype, data):
    """Outputs written as a part of a larger one (a Dask chunk in its canvas: streaming
    stores whatever the part's size) at every row length and start (NumPy's arrays are
    16-byte aligned, their rows anywhere): the lines a run leaves partly written, carried to
    the next piece or stored at the run's ends, hold the generic path's bits."""
    from arrpos._backends import writing_part_of
    from arrpos._backends.host import driver

    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    s = _slopes(heads, dtype)
    if op == "alibi":
        def call():
            return arrpos.alibi_bias(s, q, k, mode=mode, query_offset=3)
        ref = _xp.alibi_bias(s, q, k, mode=mode, query_offset=3, dtype=s.dtype, xp=xp)
    elif op == "positions":
        qp, kp = rng.integers(-300, 300, size=(2, q)), rng.integers(-300, 300, size=(2, k))
        def call():
            return arrpos.alibi_bias_from_positions(s, qp, kp, mode=mode)
        ref = _xp.alibi_bias_from_positions(s, qp, kp, mode=mode, lead=(2,), dtype=s.dtype,
                                            xp=xp)
    elif op == "mask":
        mask = rng.integers(0, 2, size=(q % 5 + 1, k)).astype(np.int64)
        def call():
            return arrpos.alibi_bias_from_mask(s, mask)
        ref = _xp.alibi_bias_from_mask(s, mask != 0, dtype=s.dtype, xp=xp)
    elif op in ("gather", "t5", "swin"):
        if op == "gather":
            index = rng.integers(0, 200, size=(q, k))
        elif op == "t5":
            index = arrpos.t5_bucket(arrpos.relative_positions(q, k + 64))
        else:
            index = _swin_index(q % 9 + 3)
        table = rng.standard_normal((int(index.max()) + 1, heads)).astype(dtype)
        def call():
            return arrpos.relative_bias(table, index)
        ref = _xp.relative_bias(table, index, dtype=table.dtype, xp=xp)
    else:
        lines = rng.standard_normal((q + k - 1, heads)).astype(dtype)
        def call():
            return _dispatch.call("toeplitz_bias", xp, lines, arrays=(lines,), q=q, k=k,
                                  dtype=lines.dtype)
        ref = _toeplitz_reference(lines, q, k)
    with writing_part_of(driver.STREAM_MIN_BYTES):
        assert driver.streams(0)
        got = call()
    _same_bits(got, ref)


def test_relative_bias_index_out_of_range_raises():
    from arrpos._backends.host import driver

    table = np.zeros((4, 2), np.float32)
    out = np.empty((2, 3), np.float32)
    with pytest.raises(ValueError, match="index"):
        driver.relative_gather_into(table, np.array([0, 4, 1]), out)
    with pytest.raises(ValueError, match="index"):
        driver.relative_gather_into(table, np.array([0, -1, 1]), out)


torch = pytest.importorskip("torch")
TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_cpu_kernels_equal_generic(dtype):
    """Torch CPU tensors reach the same kernels (bfloat16 as its bits) with the same values."""
    import array_api_compat.torch as txp

    s = torch.tensor(arrpos.alibi_slopes(6, dtype=np.float64), dtype=dtype)
    for mode in MODES:
        got = arrpos.alibi_bias(s, 33, 70, mode=mode, query_offset=5)
        ref = _xp.alibi_bias(s, 33, 70, mode=mode, query_offset=5, dtype=dtype, xp=txp)
        assert torch.equal(got.view(torch.int16 if dtype.itemsize == 2 else got.dtype),
                           ref.view(torch.int16 if dtype.itemsize == 2 else ref.dtype))
        qp, kp = torch.arange(20) * 3 - 7, torch.arange(31, dtype=torch.int32)
        got = arrpos.alibi_bias_from_positions(s, qp, kp, mode=mode)
        ref = _xp.alibi_bias_from_positions(s, qp, kp.to(torch.int64), mode=mode, lead=(),
                                            dtype=dtype, xp=txp)
        assert torch.equal(got.float(), ref.float()) and got.dtype == ref.dtype
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    ref = _xp.alibi_bias_from_mask(s, mask, dtype=dtype, xp=txp)
    for kind in (torch.bool, torch.int64, torch.int32, torch.uint8, torch.uint16):
        got = arrpos.alibi_bias_from_mask(s, mask.to(kind))
        assert torch.equal(got.float(), ref.float())
    with pytest.raises(ValueError, match="attention_mask must hold only 0 and 1"):
        arrpos.alibi_bias_from_mask(s, mask.to(torch.int64) * 2)
    table = torch.randn(32, 6).to(dtype)
    index = arrpos.t5_bucket(arrpos.relative_positions(40, 50, xp=txp))
    got = arrpos.relative_bias(table, index)
    ref = _xp.relative_bias(table, index, dtype=dtype, xp=txp)
    assert torch.equal(got.float(), ref.float())
    assert _dispatch.plan("relative_bias", txp, (table, index), dtype=dtype).module.__name__ \
        .endswith("host.torch_cpu")


def test_torch_autograd_keeps_generic_path():
    table = torch.randn(8, 3, requires_grad=True)
    index = torch.tensor([[0, 7], [3, 1]])
    arrpos.relative_bias(table, index).sum().backward()
    assert table.grad is not None and float(table.grad.sum()) == 4 * 3


def test_alibi_slopes_kept_host_values_never_shared():
    """The host slopes are kept between calls: what a caller gets is its own writable copy."""
    a = arrpos.alibi_slopes(4, dtype=np.float64)
    a[0] = 5.0
    b = arrpos.alibi_slopes(4, dtype=np.float64)
    assert b.flags.writeable and b.tolist() == [0.25, 0.0625, 0.015625, 0.00390625]
    t = arrpos.alibi_slopes(4, dtype=torch.float64, xp=torch)
    t[1] = 7.0
    assert arrpos.alibi_slopes(4, dtype=torch.float64, xp=torch).tolist()[1] == 0.0625

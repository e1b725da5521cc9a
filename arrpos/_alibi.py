"""ALiBi (Press et al., 2022): per-head linear attention biases, and BLOOM's left-padding form."""
from __future__ import annotations

import functools
import math

import numpy as np

from . import _dispatch
from ._lib import (
    MAX_OFFSET,
    array_namespace,
    as_index,
    broadcast_leads,
    check_array,
    check_choice,
    check_dtype_arg,
    check_int,
    check_offset,
    check_real_scalar,
    check_size,
    default_float,
    device_of,
    from_host,
    has_float64,
    is_dtype,
    is_lazy,
    largest_magnitude,
)
from .typing import AlibiMode, Array, DType, Device, Namespace

__all__ = ["alibi_bias", "alibi_bias_from_mask", "alibi_bias_from_positions", "alibi_slopes"]

_MODES = ("causal", "symmetric", "key")
MAX_HEADS = 2**20  # far above any model; bounds the host computation and the transfer


@functools.lru_cache(maxsize=64)
def _host_slopes(n, max_bias):
    """Press et al.'s rule in float64: powers of two get ``2**(-max_bias k / n)``; otherwise
    the slopes of the lower power of two ``c`` then every other slope of ``2c``. Read-only and
    kept (BLOOM asks for them at every step; callers copy what they return)."""
    c = 2 ** int(math.floor(math.log2(n)))
    slopes = [2.0 ** (-max_bias * k / c) for k in range(1, c + 1)]
    slopes += [2.0 ** (-max_bias * k / (2 * c)) for k in range(1, 2 * (n - c), 2)]
    out = np.array(slopes, dtype=np.float64)
    out.flags.writeable = False
    return out


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0, head_offset: int = 0,
                 total_heads: int | None = None, dtype: DType | None = None,
                 device: Device | None = None, xp: Namespace | None = None) -> Array:
    """ALiBi head slopes for any number of heads (Press et al.; BLOOM's ``build_alibi_tensor``).

    For a power of two ``n``: ``2 ** (-max_bias * k / n)``, ``k = 1 .. n``. Otherwise, with
    ``c`` the largest power of two below ``n``: the ``c`` slopes of ``c`` heads followed by
    the odd-numbered slopes (``k = 1, 3, 5, ...``) of ``2c`` heads, ``n - c`` of them.
    With tensor parallelism a rank holds heads ``head_offset .. head_offset + num_heads - 1``
    of a model with ``total_heads`` heads, and gets exactly that slice of
    ``alibi_slopes(total_heads)`` (flashinfer, vLLM, Megatron).

    Parameters
    ----------
    num_heads : int
        Number of attention heads returned (>= 1).
    max_bias : float, optional
        The exponent scale (8 in the paper and BLOOM).
    head_offset : int, optional
        Index of the first returned head in the whole model (>= 0).
    total_heads : int, optional
        Heads of the whole model, whose rule the slopes follow (default ``num_heads``);
        ``head_offset + num_heads <= total_heads``.
    dtype : dtype, optional
        Real floating dtype (default: the namespace's default float).
    device : device, optional
        Where to create the slopes.
    xp : namespace, optional
        Array namespace (default NumPy).

    Returns
    -------
    array
        Shape ``(num_heads,)``, decreasing within each of the two groups.

    Raises
    ------
    TypeError
        ``num_heads``, ``head_offset`` or ``total_heads`` not an int, ``max_bias`` not real,
        ``dtype`` not real floating.
    ValueError
        ``num_heads < 1``, ``max_bias <= 0``, ``head_offset < 0`` or
        ``head_offset + num_heads > total_heads``.

    Notes
    -----
    Computed in float64 on the host and rounded once to ``dtype`` (BLOOM raises a float32 base
    to integer powers, which agrees to within a few float32 ulps).
    Backend support: host computation, then one transfer, for every namespace.

    Examples
    --------
    >>> import arrpos
    >>> arrpos.alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> [round(s, 4) for s in arrpos.alibi_slopes(6).tolist()]
    [0.25, 0.0625, 0.0156, 0.0039, 0.5, 0.125]
    >>> arrpos.alibi_slopes(2, head_offset=2, total_heads=4).tolist()  # rank 1 of 2
    [0.015625, 0.00390625]
    """
    xp = array_namespace(xp=xp, dtype=dtype)
    num_heads = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
    max_bias = check_real_scalar(max_bias, "max_bias", positive=True)
    head_offset = check_int(head_offset, "head_offset", minimum=0)
    total = num_heads if total_heads is None else check_int(total_heads, "total_heads", minimum=1,
                                                             maximum=MAX_HEADS)
    if head_offset + num_heads > total:
        raise ValueError(
            f"head_offset + num_heads must be <= total_heads, got {head_offset} + {num_heads} > "
            f"{total}" + (" (total_heads defaults to num_heads)" if total_heads is None else "")
        )
    dtype = check_dtype_arg(xp, dtype, device=device)
    if dtype is None:
        dtype = default_float(xp, device)
    elif dtype == getattr(xp, "float64", None) and not has_float64(xp, device):
        raise TypeError(f"dtype=float64 is not available on this device ({xp.__name__})")
    host = _host_slopes(total, max_bias)[head_offset:head_offset + num_heads]
    if dtype == getattr(xp, "float32", None):  # rounded once here: no float64 on the device
        return xp.asarray(host.astype(np.float32), dtype=dtype, device=device)
    return from_host(xp, host, dtype, device)


def _check_slopes(xp, slopes):
    check_array(xp, slopes, "slopes", kind="floating", ndim=1, shape_hint="(heads,)")


def alibi_bias(slopes: Array, /, query_len: int, key_len: int, *, mode: AlibiMode = "causal",
               query_offset: int | None = None) -> Array:
    """The ALiBi attention bias ``(heads, query_len, key_len)``.

    Queries sit at ``q_pos = i + query_offset`` and keys at ``k_pos = j``.

    * ``"causal"``: ``-slope * (q_pos - k_pos)`` where ``k_pos <= q_pos``, 0 elsewhere (mask
      the future yourself);
    * ``"symmetric"``: ``-slope * |q_pos - k_pos|`` (bidirectional encoders);
    * ``"key"``: ``slope * k_pos``, BLOOM's and the reference code's form: it differs from
      ``"causal"`` by a constant per row, so the softmax is the same.

    Parameters
    ----------
    slopes : array
        Floating ``(heads,)``, e.g. from :func:`alibi_slopes`.
    query_len, key_len : int
        Numbers of queries and keys (>= 0).
    mode : {"causal", "symmetric", "key"}, optional
        The form of the bias (see above).
    query_offset : int, optional
        Position of the first query; default ``key_len - query_len`` (the queries are the last
        positions, as when decoding with a cache).

    Returns
    -------
    array
        ``(heads, query_len, key_len)`` in the dtype, namespace and device of ``slopes``.

    Raises
    ------
    TypeError
        ``slopes`` not a floating array; non-int lengths or offset.
    ValueError
        ``slopes`` not 1-D, negative lengths, unknown ``mode``, ``|query_offset|`` past 2**53
        or past the index dtype (int32 on JAX without x64), a bias of more than 2**34
        elements.

    Notes
    -----
    Backend support: the generic Array API kernel (``arrpos._backends._xp.alibi_bias``) on every
    namespace (Dask: one task per chunk of heads and query rows); the dispatcher routes NumPy
    arrays and torch CPU tensors to a compiled twin and CuPy arrays to a CUDA twin (the same
    values, bit for bit).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> s = np.array([0.5, 0.25])
    >>> arrpos.alibi_bias(s, 3, 3)[0].tolist()
    [[0.0, 0.0, 0.0], [-0.5, 0.0, 0.0], [-1.0, -0.5, 0.0]]
    >>> arrpos.alibi_bias(s, 1, 4, mode="key")[1].tolist()
    [[0.0, 0.25, 0.5, 0.75]]
    """
    xp = array_namespace(slopes, name="slopes")
    _check_slopes(xp, slopes)
    query_len = check_int(query_len, "query_len", minimum=0)
    key_len = check_int(key_len, "key_len", minimum=0)
    check_size(slopes.shape[0] * query_len * key_len, "the bias")
    mode = check_choice(mode, "mode", _MODES)
    if query_offset is None:
        query_offset = key_len - query_len
    # distances stay exact integers of the index dtype (int32 without x64)
    query_offset = check_offset(xp, query_offset, query_len, key_len, device=device_of(slopes))
    dtype = slopes.dtype
    return _dispatch.call("alibi_bias", xp, slopes, query_len, key_len, arrays=(slopes,),
                          mode=mode, query_offset=query_offset, dtype=dtype)


def alibi_bias_from_mask(slopes: Array, attention_mask: Array, /) -> Array:
    """BLOOM's left-padding aware ALiBi bias (``build_alibi_tensor``).

    Key positions count only real tokens: ``pos = (cumsum(mask) - 1) * mask``, so a left-padded
    sequence gets the same bias on its real tokens as the unpadded one; padded keys get 0 (mask
    them). The bias is ``slope * pos`` (the ``"key"`` form of :func:`alibi_bias`).

    Parameters
    ----------
    slopes : array
        Floating ``(heads,)``.
    attention_mask : array
        ``(batch, key_len)``: bool, or integers 0/1 (1 = real token).

    Returns
    -------
    array
        ``(batch, heads, 1, key_len)`` in ``slopes``' dtype; it broadcasts over the queries.

    Raises
    ------
    TypeError
        ``slopes`` not floating; ``attention_mask`` not bool or integer.
    ValueError
        ``slopes`` not 1-D, ``attention_mask`` not 2-D, (eager) mask values other than 0/1.

    Notes
    -----
    BLOOM reshapes the result to ``(batch * heads, 1, key_len)``; reshape it yourself if needed.
    Backend support: the generic Array API kernel (``arrpos._backends._xp``) on every
    namespace; the dispatcher routes NumPy arrays and torch CPU tensors to a compiled twin,
    CuPy arrays and torch CUDA tensors to a CUDA twin (the same values, bit for bit), and
    Dask arrays to one task per chunk of batch rows and heads (the keys whole; a lazy mask's
    values are checked as its chunks are computed).

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    >>> arrpos.alibi_bias_from_mask(np.array([0.5]), mask)[:, 0, 0].tolist()
    [[0.0, 0.0, 0.0, 0.5, 1.0], [0.0, 0.5, 1.0, 1.5, 2.0]]
    """
    xp = array_namespace(slopes, attention_mask, name="slopes and attention_mask")
    _check_slopes(xp, slopes)
    m = check_array(xp, attention_mask, "attention_mask", kind="bool or integer", ndim=2,
                    shape_hint="(batch, key_len)")
    if is_dtype(xp, m.dtype, "bool"):
        return _dispatch.call("alibi_bias_from_mask", xp, slopes, m, arrays=(slopes, m),
                              dtype=slopes.dtype)

    def check():  # 0/1 only: checked here unless the kernel that serves the call checks it
        if not is_lazy(m) and m.size and not bool(xp.all((m == 0) | (m == 1))):
            raise ValueError("attention_mask must hold only 0 and 1")
    return _dispatch.call("alibi_bias_from_mask", xp, slopes, m, arrays=(slopes, m),
                          dtype=slopes.dtype, check=check)


def _distance_positions(xp, x, name, limit):
    """Positions whose differences are exact: integers in the index dtype (``as_index``: an
    unsigned difference wraps, an int8 one overflows), floats as they are; eager values finite
    and ``|p| < limit`` (a ValueError naming ``name``; lazy ones are not read)."""
    check_array(xp, x, name, kind="real", min_ndim=1, shape_hint="(..., n)")
    if is_dtype(xp, x.dtype, "integral"):
        x = as_index(xp, x, name)
    big = largest_magnitude(xp, x, name)
    if big is not None and big >= limit:
        raise ValueError(f"{name} must satisfy |{name}| < 2**{int(math.log2(limit))} = {limit} "
                         f"(distances stay exact), got a value of {big}")
    return x


def alibi_bias_from_positions(slopes: Array, query_positions: Array, key_positions: Array, /, *,
                              mode: AlibiMode = "symmetric") -> Array:
    """ALiBi bias for arbitrary query and key positions (packed, reordered or 2-D tokens).

    With ``d = q_pos - k_pos``: ``"symmetric"`` ``-slope * |d|`` (x-transformers'
    ``forward_custom_pos``), ``"causal"`` ``-slope * d`` where ``d >= 0`` and 0 elsewhere,
    ``"key"`` ``slope * k_pos``: the modes of :func:`alibi_bias`, which is this function for
    ``query_positions = arange(q) + offset`` and ``key_positions = arange(k)``.

    Parameters
    ----------
    slopes : array
        Floating ``(heads,)``, e.g. from :func:`alibi_slopes`.
    query_positions : array
        Integer (any width, signed or unsigned) or real ``(..., q)``.
    key_positions : array
        Integer or real ``(..., k)``; its leading axes broadcast against those of
        ``query_positions``.
    mode : {"symmetric", "causal", "key"}, optional
        The form of the bias (see above).

    Returns
    -------
    array
        ``(..., heads, q, k)`` in the dtype, namespace and device of ``slopes``.

    Raises
    ------
    TypeError
        ``slopes`` not a floating array, positions not real arrays.
    ValueError
        ``slopes`` not 1-D, 0-d positions, leading axes that do not broadcast, unknown
        ``mode``, (eager) non-finite positions or ``|position| >= 2**53`` (``2**24`` without
        float64), a bias of more than 2**34 elements.

    Notes
    -----
    The distance is formed exactly (integers widened to the index dtype first, so an unsigned
    or int8 difference cannot wrap; floats in float64 where the device has it) and the
    product is rounded once to the slopes' dtype, so integer positions below ``2**24`` give the
    float32 values of x-transformers bit for bit. For packed documents, mask the pairs across
    documents with :func:`packed_mask` (the bias itself does not know the documents).
    Backend support: the generic Array API kernel (``arrpos._backends._xp``) on every
    namespace; the dispatcher routes NumPy arrays and torch CPU tensors to a compiled twin,
    CuPy arrays and torch CUDA tensors to a CUDA twin (the same values, bit for bit), and
    Dask arrays to one task per chunk of the leading axes, heads, queries and keys.

    Examples
    --------
    >>> import numpy as np, arrpos
    >>> s = np.array([0.5])
    >>> pos = arrpos.packed_positions([2, 3])
    >>> arrpos.alibi_bias_from_positions(s, pos, pos)[0, :2].tolist()
    [[0.0, -0.5, 0.0, -0.5, -1.0], [-0.5, 0.0, -0.5, 0.0, -0.5]]
    >>> q = np.array([[3], [1]])
    >>> arrpos.alibi_bias_from_positions(s, q, np.arange(4), mode="causal")[:, 0, 0].tolist()
    [[-1.5, -1.0, -0.5, 0.0], [-0.5, 0.0, 0.0, 0.0]]
    """
    xp = array_namespace(slopes, query_positions, key_positions,
                         name="slopes, query_positions and key_positions")
    _check_slopes(xp, slopes)
    mode = check_choice(mode, "mode", _MODES)
    f64 = has_float64(xp, device_of(slopes))
    # integer distances formed in int64 below 2**53 are exact, and so is their float64;
    # without float64 (JAX without x64: int32 and float32) 2**24 keeps them exact
    limit = MAX_OFFSET if f64 else 2**24
    qp = _distance_positions(xp, query_positions, "query_positions", limit)
    kp = _distance_positions(xp, key_positions, "key_positions", limit)
    lead = broadcast_leads({"query_positions": qp, "key_positions": kp}, keep=1)
    check_size(slopes.shape[0] * math.prod(lead) * qp.shape[-1] * kp.shape[-1], "the bias")
    return _dispatch.call("alibi_bias_from_positions", xp, slopes, qp, kp,
                          arrays=(slopes, qp, kp), mode=mode, lead=lead, dtype=slopes.dtype)

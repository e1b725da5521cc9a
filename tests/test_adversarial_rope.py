"""Nothing silently wrong, round 3: the RoPE class and the package's caches (issue 25).

Threads hammering every cache at once, RoPE objects through pickle, copies and other processes,
the decode cache's memory (weakly held, clearable), errors in the caller's terms, 16-bit
inputs through the class, options that would allocate without bound, and torch's small and
unsigned integer positions. References are single-threaded results, the function path
(``rope_cos_sin`` then ``apply_rope``) or int64 positions, compared bit for bit.
"""
from __future__ import annotations

import copy
import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import weakref

import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._rope import apply as rope_apply, decode as rope_decode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _function_path(rope, x, pos, heads_axis, **kw):
    """What RoPE.apply means: the tables at the positions, a length-1 heads axis, apply_rope."""
    cos, sin = rope.cos_sin(pos, dtype=x.dtype, **kw)
    if heads_axis is not None:
        cos = np.expand_dims(cos, cos.ndim + heads_axis + 1)
        sin = np.expand_dims(sin, sin.ndim + heads_axis + 1)
    return arrpos.apply_rope(x, cos, sin, layout=rope.layout)


def _bits(a):
    """The array's bytes, for bit-for-bit comparisons of any dtype (bfloat16 included)."""
    a = np.ascontiguousarray(np.asarray(a))
    return a.dtype.str, a.shape, a.tobytes()


# --- 1. threads ---------------------------------------------------------------------------


def _workload(n_ropes):
    """Calls touching every cache: RoPE.apply through the decode cache (integer positions,
    past the first cache: it grows) and the table path (real positions), RoPE.cos_sin,
    apply_rope_cached and the table functions, over several dtypes, shapes and layouts."""
    rng = np.random.default_rng(0)
    ropes = [arrpos.RoPE(8 if i % 3 else 16, base=100.0 + i,
                         layout="interleaved" if i % 2 else "half",
                         partial_rotary_factor=0.5 if i % 5 == 0 else 1.0)
             for i in range(n_ropes)]
    ropes.append(arrpos.RoPE(8, scaling=arrpos.DynamicNTKScaling(2.0, 64)))
    inv, _ = arrpos.rope_frequencies(8)
    c, s = arrpos.rope_cos_sin(256, inv)
    cc, sc = np.ascontiguousarray(c[:, :4]), np.ascontiguousarray(s[:, :4])
    calls = []
    for i, rope in enumerate(ropes):
        d = rope.head_dim
        dtype = (np.float32, np.float64)[i % 2]
        x1 = rng.standard_normal((2, 1, 3, d)).astype(dtype)        # one decode step
        x2 = rng.standard_normal((1, 3, 5, d)).astype(dtype)        # (batch, heads, seq, D)
        p1 = rng.integers(0, 40 + 200 * (i % 4), size=(2, 1))
        p2 = np.arange(5) + 7 * i
        calls += [
            (lambda r=rope, x=x1, p=p1: r.apply(x, p, heads_axis=-2)),
            (lambda r=rope, x=x2, p=p2: r.apply(x, p, heads_axis=-3)),
            (lambda r=rope, x=x1, p=p1: r.apply(x, p + 0.5, heads_axis=-2)),
            (lambda r=rope, p=p2: r.cos_sin(p, dtype=np.float32)),
        ]
    xq = rng.standard_normal((2, 6, 2, 8))
    ids = rng.integers(0, 256, size=(2, 6, 1))
    calls += [
        lambda: arrpos.apply_rope_cached(xq, cc, sc, ids),
        lambda: arrpos.apply_rope(xq, c[:6, None], s[:6, None]),
        lambda: arrpos.rope_cos_sin(np.arange(33), inv, layout="interleaved"),
        lambda: arrpos.sinusoidal(np.arange(17), 12),
        lambda: arrpos.xpos_scale(np.arange(9), 8),
    ]
    return calls


def _flat(result):
    return [_bits(r) for r in (result if isinstance(result, tuple) else (result,))]


def test_threads_hammering_every_cache_get_single_threaded_results(monkeypatch):
    """8 threads x 40 RoPEs (> the 16 caches kept: every round evicts) x several dtypes,
    shapes and layouts, with a one-microsecond switch interval: every result equal to the
    single-threaded one, no exception (the eviction used to iterate a dict other threads
    changed: "dictionary changed size during iteration")."""
    monkeypatch.setattr(rope_decode, "_MIN_ROWS", 64)  # small caches: builds and evictions are cheap
    calls = _workload(40)
    want = [_flat(f()) for f in calls]
    errors, wrong = [], []
    start = threading.Barrier(8)

    def work(k):
        try:
            start.wait()
            for it in range(6):
                for j in range(len(calls)):
                    i = (j * 7 + k * 13 + it) % len(calls)
                    if _flat(calls[i]()) != want[i]:
                        wrong.append(i)
        except Exception as exc:  # noqa: BLE001 - the test reports any
            errors.append(f"{type(exc).__name__}: {exc}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:3]
    assert not wrong, f"{len(wrong)} results differ from the single-threaded ones"


class _Yielding(dict):
    """A dict that lets other threads run inside each of its writes and iterations, as
    free-threaded Python (or a thread switch at the wrong bytecode) may: code that iterates
    a cache another thread can change, or checks then acts without a lock, fails at once."""

    def __iter__(self):
        it = super().__iter__()
        time.sleep(0)  # releases the GIL
        return it

    def items(self):
        for kv in super().items():
            time.sleep(0)
            yield kv

    def values(self):
        for v in super().values():
            time.sleep(0)
            yield v

    def __setitem__(self, k, v):
        time.sleep(0)
        super().__setitem__(k, v)

    def __delitem__(self, k):
        time.sleep(0)
        super().__delitem__(k)

    def pop(self, *args):
        time.sleep(0)
        return super().pop(*args)

    def clear(self):
        time.sleep(0)
        super().clear()


def test_every_module_cache_survives_switches_inside_its_operations(monkeypatch):
    """Every module-level cache dict of the package made to switch threads inside each write
    and iteration; 8 threads decode with 40 RoPEs (every round evicts): no exception, every
    result the single-threaded one (today's eviction iterated a dict other threads changed)."""
    for name, mod in list(sys.modules.items()):
        if name == "arrpos" or name.startswith("arrpos."):
            for attr, value in list(vars(mod).items()):
                if type(value) is dict and attr.startswith("_") and attr.isupper():
                    monkeypatch.setattr(mod, attr, _Yielding(value))
    monkeypatch.setattr(rope_decode, "_MIN_ROWS", 64)
    ropes = [arrpos.RoPE(4, base=100.0 + i, layout=("half", "interleaved")[i % 2])
             for i in range(40)]
    xs = [np.ones((1, 1, 1, 4), dt) for dt in (np.float32, np.float64)]
    pos = np.array([[3]])
    want = [[_bits(_function_path(r, x, pos, -2)) for x in xs] for r in ropes]
    errors, wrong = [], []
    start = threading.Barrier(8)

    def work(k):
        try:
            start.wait()
            for it in range(100):
                i = (k * 7 + it) % len(ropes)
                if _bits(ropes[i].apply(xs[it % 2], pos, heads_axis=-2)) != want[i][it % 2]:
                    wrong.append(i)
        except Exception as exc:  # noqa: BLE001 - the test reports any
            errors.append(f"{type(exc).__name__}: {exc}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:3]
    assert not wrong


def test_clearing_caches_while_threads_decode(monkeypatch):
    """clear_caches() and RoPE.clear_cache() from one thread while others decode: the
    decoders keep getting the right results (their caches are rebuilt)."""
    monkeypatch.setattr(rope_decode, "_MIN_ROWS", 64)
    ropes = [arrpos.RoPE(8, base=50.0 + i) for i in range(20)]
    x = np.random.default_rng(1).standard_normal((1, 1, 2, 8)).astype(np.float32)
    pos = np.array([[37]])
    want = [_bits(_function_path(r, x, pos, -2)) for r in ropes]
    stop, errors = threading.Event(), []

    def decode(k):
        try:
            while not stop.is_set():
                for i, r in enumerate(ropes[k::2]):
                    if _bits(r.apply(x, pos, heads_axis=-2)) != want[k + 2 * i]:
                        errors.append("wrong result")
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {exc}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threads = [threading.Thread(target=decode, args=(k,)) for k in range(2)]
    try:
        for t in threads:
            t.start()
        for i in range(200):
            arrpos.clear_caches() if i % 2 else ropes[i % 20].clear_cache()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        sys.setswitchinterval(old)
    assert not errors, errors[:3]


def test_memo_remember_keeps_its_limit_under_threads(monkeypatch):
    """remember() checks the limit and stores under one lock: threads storing at once never
    push a memo past LIMIT."""
    from arrpos._lib import _memo

    monkeypatch.setattr(_memo, "LIMIT", 50)
    memo = _memo.new_memo()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=lambda k=k: [_memo.remember(memo, (k, i), i)
                                                        for i in range(200)])
                   for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert len(memo) == 50
    _memo.clear_memos()
    assert not memo


# --- 2. pickling and copies ---------------------------------------------------------------


def _ropes():
    return [
        arrpos.RoPE(16),
        arrpos.RoPE(16, base=500.0, layout="interleaved", partial_rotary_factor=0.5),
        arrpos.RoPE(8, scaling=arrpos.LinearScaling(2.0), inverse=True),
        arrpos.RoPE(8, scaling=arrpos.DynamicNTKScaling(2.0, 64)),
        arrpos.RoPE(128, scaling=arrpos.YarnScaling(4.0, 4096)),
        arrpos.RoPE(128, base=500000.0, scaling=arrpos.Llama3Scaling()),
        arrpos.RoPE(8, scaling=arrpos.LongRopeScaling([1.0, 1.5, 2.0, 3.0],
                                                      [2.0, 4.0, 8.0, 16.0], 64, factor=8.0)),
        arrpos.RoPE(16, axes=arrpos.mrope_axes([4, 2, 2])),
        arrpos.RoPE(16, scaling=arrpos.AxialScaling(2), axes=(0,) * 4 + (1,) * 4),
        arrpos.RoPE.from_hf_config({"model_type": "llama", "hidden_size": 256,
                                    "num_attention_heads": 4, "rope_theta": 10000.0,
                                    "max_position_embeddings": 2048}),
    ]


def _results(rope):
    """What a RoPE computes: cos/sin and a rotation at integer and real positions."""
    rng = np.random.default_rng(3)
    n = 3 if rope.axes is not None else None
    pos = rng.integers(0, 3000, size=(2, 5) + ((n,) if n else ()))
    x = rng.standard_normal((2, 5, 3, rope.head_dim))
    out = [*rope.cos_sin(pos), rope.apply(x, pos, heads_axis=-2),
           rope.apply(x, pos + 0.25, heads_axis=-2)]
    return [_bits(a) for a in out]


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_rope_pickles_and_copies_without_its_caches(how):
    for rope in _ropes():
        want = _results(rope)
        assert _results(rope) == want  # the original has caches now (seq-dependent: 2nd time)
        assert rope._tables or rope.axes is not None
        dup = {"pickle": lambda r: pickle.loads(pickle.dumps(r)), "copy": copy.copy,
               "deepcopy": copy.deepcopy}[how](rope)
        assert dup == rope and hash(dup) == hash(rope) and repr(dup) == repr(rope)
        assert dup is not rope
        assert dup._tables == {}, "the copy carries no device caches"
        assert _results(dup) == want
        assert rope._tables or rope.axes is not None  # the original keeps its own
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        rope = _ropes()[1]
        assert pickle.loads(pickle.dumps(rope, protocol=protocol)) == rope


def test_copies_stay_immutable():
    dup = copy.deepcopy(arrpos.RoPE(8))
    with pytest.raises(AttributeError, match="immutable"):
        dup.base = 5.0


@pytest.mark.parametrize("obj", [
    arrpos.LinearScaling(2.0), arrpos.DynamicNTKScaling(2.0, 64), arrpos.NTKScaling(2.0),
    arrpos.YarnScaling(4.0, 4096, mscale=1.0, mscale_all_dim=0.5), arrpos.Llama3Scaling(),
    arrpos.LongRopeScaling([1.0, 2.0], [2.0, 4.0], 64), arrpos.ProportionalScaling(0.5),
    arrpos.AxialScaling(2, "pairs"), arrpos.properties(arrpos.sinusoidal(16, 8)),
], ids=lambda o: type(o).__name__)
def test_every_public_object_pickles_and_copies(obj):
    for dup in (pickle.loads(pickle.dumps(obj)), copy.copy(obj), copy.deepcopy(obj)):
        assert type(dup) is type(obj) and dup == obj


def test_hf_layer_ropes_and_their_position_scales_pickle():
    if not hasattr(arrpos, "hf_layer_ropes"):
        pytest.skip("hf_layer_ropes not in this tree")
    cfg = {"model_type": "ministral3", "hidden_size": 256, "num_attention_heads": 4,
           "max_position_embeddings": 4096, "num_hidden_layers": 2,
           "rope_parameters": {"rope_type": "yarn", "factor": 16.0, "rope_theta": 1e6,
                               "original_max_position_embeddings": 16384,
                               "llama_4_scaling_beta": 0.1}}
    ropes = arrpos.hf_layer_ropes(cfg)
    for dup in (pickle.loads(pickle.dumps(ropes)), copy.deepcopy(ropes)):
        assert dup == ropes and [_results(r) for r in dup] == [_results(r) for r in ropes]


def test_diffusers_positions_pickle_and_copy():
    """from_diffusers_config's objects go to workers and deep-copied models like a RoPE."""
    if not hasattr(arrpos, "from_diffusers_config"):
        pytest.skip("from_diffusers_config not in this tree")
    obj = arrpos.from_diffusers_config({"_class_name": "FluxTransformer2DModel"})
    for dup in (pickle.loads(pickle.dumps(obj)), copy.copy(obj), copy.deepcopy(obj)):
        assert type(dup) is type(obj) and repr(dup) == repr(obj) and dup == obj


_PROCESSES_SCRIPT = textwrap.dedent("""
    import copy, multiprocessing as mp, pickle
    import numpy as np, arrpos

    def rotate(rope, x, pos):
        return rope.apply(x, pos, heads_axis=-2), rope.cos_sin(pos)

    if __name__ == "__main__":
        rope = arrpos.RoPE(64, base=500000.0, scaling=arrpos.Llama3Scaling(), layout="interleaved")
        x = np.random.default_rng(0).standard_normal((2, 7, 4, 64)).astype(np.float32)
        pos = np.arange(14).reshape(2, 7) * 300
        want = rotate(rope, x, pos)           # the parent's caches exist; none travel
        assert pickle.loads(pickle.dumps(rope)) == rope  # (a pool worker failing to unpickle
        with mp.get_context("spawn").Pool(1) as pool:    # its task dies: the task hangs)
            got = pool.apply_async(rotate, (rope, x, pos)).get(timeout=120)
            back = pool.apply_async(copy.deepcopy, (rope,)).get(timeout=60)  # pickled back
        assert back == rope and back._tables == {}
        for g, w in zip((got[0], *got[1]), (want[0], *want[1])):
            np.testing.assert_array_equal(g, w)
        from dask.distributed import Client, LocalCluster
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            got = client.submit(rotate, rope, x, pos).result(timeout=120)
            assert client.submit(lambda r: r == rope, rope).result(timeout=60)
        for g, w in zip((got[0], *got[1]), (want[0], *want[1])):
            np.testing.assert_array_equal(g, w)
        print("processes ok")
""")


def test_rope_crosses_processes_spawn_pool_and_dask_distributed(tmp_path):
    """A RoPE as the argument of a multiprocessing spawn pool and of dask.distributed's
    client.submit (worker process): same results as in the parent."""
    pytest.importorskip("distributed")
    script = tmp_path / "processes.py"
    script.write_text(_PROCESSES_SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=240, env=env, cwd=str(tmp_path))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process run did not finish in 240 s: {exc.stderr}")
    assert done.returncode == 0 and "processes ok" in done.stdout, done.stderr[-3000:]


# --- 3. decode cache memory ---------------------------------------------------------------


def _decode(rope, pos=700, dtype=np.float32):
    x = np.ones((1, 1, 2, rope.head_dim), dtype)
    return rope.apply(x, np.array([[pos]]), heads_axis=-2)


def _cache_refs(rope):
    """Weak references to the arrays of every decode cache ``rope`` holds."""
    refs = [weakref.ref(t.cos) for t in rope._tables.values()]
    assert refs, "the decode step made a cache"
    return refs


@pytest.mark.parametrize("scaling", [None, arrpos.DynamicNTKScaling(2.0, 64)],
                         ids=["plain", "dynamic"])
def test_a_dropped_rope_frees_its_caches(scaling):
    rope = arrpos.RoPE(64, base=4321.0, scaling=scaling)
    for _ in range(2):  # a seq-dependent frequency set gets its cache the second time
        _decode(rope)
        _decode(rope, dtype=np.float64)
    tables = _cache_refs(rope)
    ref = weakref.ref(rope)
    del rope
    gc.collect()
    assert ref() is None, "nothing keeps a dropped RoPE alive"
    assert all(t() is None for t in tables), "its cos/sin caches are freed"


def test_equal_ropes_share_a_cache_until_the_last_is_dropped():
    a, b = arrpos.RoPE(32, base=999.0), arrpos.RoPE(32, base=999.0)
    want = _bits(_decode(a))
    assert _bits(_decode(b)) == want
    (ta,), (tb,) = a._tables.values(), b._tables.values()
    assert ta is tb, "one cache for equal RoPEs (a layer each, one table)"
    cos = weakref.ref(ta.cos)
    del a, ta, tb
    gc.collect()
    assert cos() is not None and _bits(_decode(b)) == want
    _decode(b, pos=5000)  # grows: the new cache replaces the old one
    del b
    gc.collect()
    assert cos() is None


def test_clear_cache_and_clear_caches():
    rope, other = arrpos.RoPE(32, base=31.0), arrpos.RoPE(32, base=32.0)
    want = [_bits(_decode(r)) for r in (rope, other)]
    held = _cache_refs(rope)
    rope.clear_cache()
    gc.collect()
    assert rope._tables == {} and all(t() is None for t in held)
    assert other._tables, "clear_cache frees one RoPE's caches"
    held = _cache_refs(other)
    arrpos.apply_rope(np.ones((2, 4)), np.ones((2, 4)), np.zeros((2, 4)))
    assert rope_apply._APPLY_PLANS
    arrpos.clear_caches()
    gc.collect()
    assert other._tables == {} and all(t() is None for t in held)
    assert not rope_apply._APPLY_PLANS and not rope_decode._DECODE_PLANS
    assert [_bits(_decode(r)) for r in (rope, other)] == want  # rebuilt, same numbers


def test_clear_caches_frees_the_compiled_kernels_tables():
    """arrpos.clear_caches() also empties what the kernel drivers keep (the CPU kernels'
    rotation tables, up to 64 MiB), through each front-end's cache_clear()."""
    from arrpos import _dispatch

    host = _dispatch.driver("host")
    if host is None:
        pytest.skip("compiled kernels not built or disabled")
    arrpos.sinusoidal(4, 512, base=1234.5)
    assert host.table_cache_bytes() > 0
    arrpos.clear_caches()
    assert host.table_cache_bytes() == 0


def test_at_most_max_entries_caches_live(monkeypatch):
    monkeypatch.setattr(rope_decode, "_MIN_ROWS", 64)
    arrpos.clear_caches()
    ropes = [arrpos.RoPE(8, base=10.0 + i) for i in range(3 * rope_decode._MAX_ENTRIES)]
    for r in ropes:
        _decode(r, pos=3)
    live = {id(t) for r in ropes for t in r._tables.values()}
    assert len(live) == rope_decode._MAX_ENTRIES
    assert all(ropes[-i]._tables for i in range(1, rope_decode._MAX_ENTRIES + 1)), "newest kept"


# --- 4. errors in the caller's terms ------------------------------------------------------


def _message(call, exc=ValueError):
    with pytest.raises(exc) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("pos_kind", ["int", "real"])
def test_positions_that_do_not_fit_x_are_named(pos_kind):
    rope = arrpos.RoPE(16)
    x = np.ones((2, 5, 4, 16), np.float32)
    cast = (lambda p: p) if pos_kind == "int" else (lambda p: p + 0.5)
    for pos, heads_axis in ((np.arange(7), -2), (np.zeros((3, 5), np.int64), -2),
                            (np.arange(5), -3), (np.arange(5), None)):
        msg = _message(lambda: rope.apply(x, cast(pos), heads_axis=heads_axis))
        for part in ("positions", str(tuple(pos.shape)), "x", "(2, 5, 4, 16)",
                     f"heads_axis={heads_axis}"):
            assert part in msg, (part, msg)
        assert "cos" not in msg, msg


@pytest.mark.parametrize("pos", [np.arange(5), np.arange(5) + 0.5], ids=["int", "real"])
def test_a_rope_wider_than_x_is_named(pos):
    msg = _message(lambda: arrpos.RoPE(32).apply(np.ones((2, 5, 4, 16)), pos, heads_axis=-2))
    assert "x" in msg and "(2, 5, 4, 16)" in msg and "32" in msg, msg
    assert "broadcast together" not in msg and "cos" not in msg, msg


def test_errors_name_the_arguments_on_torch():
    torch = pytest.importorskip("torch")
    rope = arrpos.RoPE(16)
    x = torch.ones(2, 5, 4, 16)
    for pos in (torch.arange(7), torch.arange(7) + 0.5):
        msg = _message(lambda: rope.apply(x, pos, heads_axis=-2))
        assert "positions of shape (7,)" in msg and "(2, 5, 4, 16)" in msg, msg
    msg = _message(lambda: arrpos.RoPE(32).apply(x, torch.arange(5), heads_axis=-2))
    assert "x" in msg and "(2, 5, 4, 16)" in msg, msg
    msg = _message(lambda: rope.apply(x, np.arange(5), heads_axis=-2), TypeError)
    assert "x" in msg and "positions" in msg, msg


def test_positions_on_another_device_are_named():
    strict = pytest.importorskip("array_api_strict")
    devices = strict.__array_namespace_info__().devices()
    x = strict.ones((2, 5, 4, 16), device=devices[0])
    for pos in (strict.arange(5, device=devices[1]),
                strict.asarray([0.5, 1.0, 2.0, 3.0, 4.0], device=devices[1])):
        msg = _message(lambda: arrpos.RoPE(16).apply(x, pos, heads_axis=-2))
        assert "positions" in msg and "x" in msg and "device" in msg, msg
        assert "cos" not in msg, msg


@pytest.mark.parametrize("pos", [np.arange(5), np.arange(5) + 0.5], ids=["int", "real"])
def test_heads_axis_one_rule_on_both_paths(pos):
    rope = arrpos.RoPE(16)
    x = np.random.default_rng(5).standard_normal((2, 5, 4, 16)).astype(np.float32)
    want = _bits(_function_path(rope, x, pos, -2))
    for same in (-2, 2, np.int64(-2), np.int32(2)):
        assert _bits(rope.apply(x, pos, heads_axis=same)) == want
    for bad in (True, 1.0, "-2", np.bool_(True)):
        msg = _message(lambda: rope.apply(x, pos, heads_axis=bad), TypeError)
        assert "heads_axis" in msg, msg
    for bad in (-1, 3, -5, 7):
        msg = _message(lambda: rope.apply(x, pos, heads_axis=bad))
        assert "heads_axis" in msg and "(2, 5, 4, 16)" in msg, msg


def test_numpy_integer_heads_axis_takes_the_cache():
    rope = arrpos.RoPE(16, base=1234.0)
    rope.apply(np.ones((2, 1, 4, 16)), np.array([[3], [4]]), heads_axis=np.int64(-2))
    assert rope._tables, "a NumPy integer heads_axis is the same heads axis: the cache serves"


def test_zero_d_positions_broadcast_with_any_heads_axis():
    rope = arrpos.RoPE(16)
    x = np.random.default_rng(6).standard_normal((2, 4, 5, 16))
    want = _bits(_function_path(rope, x, np.array([9]), -3))
    assert _bits(rope.apply(x, np.array(9), heads_axis=-3)) == want


# --- 5. 16-bit ----------------------------------------------------------------------------


def _sixteen():
    ml = pytest.importorskip("ml_dtypes")
    return [ml.bfloat16, np.float16]



@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("prf", [1.0, 0.5])
def test_16bit_numpy_through_the_class_equals_the_function_path(layout, prf):
    rope = arrpos.RoPE(32, base=700.0, layout=layout, partial_rotary_factor=prf)
    rng = np.random.default_rng(8)
    for dtype in _sixteen():
        name = np.dtype(dtype).name
        # a decode step (the cache path), a prefill, real positions (the table path)
        for shape, pos in (((3, 1, 4, 32), rng.integers(0, 5000, size=(3, 1))),
                           ((2, 6, 4, 32), np.arange(6) + 100),
                           ((2, 6, 4, 32), np.arange(6) + 0.5)):
            x = rng.standard_normal(shape).astype(dtype)
            got = rope.apply(x, pos, heads_axis=-2)
            assert got.dtype == x.dtype
            assert _bits(got) == _bits(_function_path(rope, x, pos, -2)), (name, shape)
        assert any(k[2] == np.dtype(dtype) for k in rope._tables), "a 16-bit cache was used"
        cos, sin = rope.cos_sin(np.arange(40), dtype=dtype)
        inv, att = rope.frequencies(xp=np, dtype=np.float64)
        rc, rs = arrpos.rope_cos_sin(np.arange(40), inv, layout=layout, attention_factor=att,
                                     dtype=dtype)
        assert cos.dtype == np.dtype(dtype) and _bits(cos) == _bits(rc) and _bits(sin) == _bits(rs)


def test_16bit_numpy_real_positions():
    """16-bit real positions: tables in their dtype, the numbers of the same positions in
    float64 rounded once."""
    rope = arrpos.RoPE(32, base=700.0)
    for dtype in _sixteen():
        p16 = (np.arange(10) * 3).astype(dtype)
        cos, sin = rope.cos_sin(p16)
        want = rope.cos_sin(p16.astype(np.float64), dtype=dtype)
        assert cos.dtype == np.dtype(dtype) and _bits(cos) == _bits(want[0])
        assert _bits(sin) == _bits(want[1])
        x = np.ones((10, 2, 32), dtype)
        assert _bits(rope.apply(x, p16, heads_axis=-2)) == _bits(_function_path(rope, x, p16, -2))


def test_16bit_torch_through_the_class_equals_the_function_path():
    torch = pytest.importorskip("torch")
    rope = arrpos.RoPE(32, base=700.0)
    for dtype in (torch.bfloat16, torch.float16):
        for shape, pos in (((3, 1, 4, 32), torch.tensor([[5], [900], [4000]])),
                           ((2, 6, 4, 32), torch.arange(6) + 0.5)):
            x = torch.randn(shape).to(dtype)
            cos, sin = rope.cos_sin(pos, dtype=dtype)
            want = arrpos.apply_rope(x, cos[..., None, :], sin[..., None, :])
            assert torch.equal(rope.apply(x, pos, heads_axis=-2), want)


# --- 6. memory from options ---------------------------------------------------------------


@pytest.mark.parametrize("sections, interleaved", [
    ([2**16, 1], False), ([2**15, 2**15, 2**15], True), ([1] * (2**16 + 1), False),
    ([0, 2**16 + 1], False),
])
def test_mrope_sections_no_rotary_width_has_are_refused_before_allocating(sections,
                                                                          interleaved):
    """Sections past the widest rotary (2**17 features, 2**16 frequencies): a ValueError
    naming sections, with next to nothing allocated (not one entry per frequency first)."""
    tracemalloc.start()
    try:
        msg = _message(lambda: arrpos.mrope_axes(sections, interleaved=interleaved))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "sections" in msg, msg
    assert peak < 4 << 20, f"{peak} bytes allocated to refuse it"


_HUGE_SECTIONS = textwrap.dedent("""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a regression fails, no swap
    import arrpos
    for interleaved in (False, True):
        try:
            arrpos.mrope_axes([10**9, 1, 1], interleaved=interleaved)
        except ValueError as exc:
            assert "sections" in str(exc), exc
        else:
            raise SystemExit("accepted")
    print("refused")
""")


def test_mrope_a_billion_sections_is_refused_in_bounded_memory():
    """The issue's case, in a process capped at 3 GiB: O(option) memory fails there at once."""
    pytest.importorskip("resource")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _HUGE_SECTIONS], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and "refused" in done.stdout, done.stderr[-2000:]


def test_largest_sections_and_rope_widths():
    assert len(arrpos.mrope_axes([2**15, 2**14, 2**14])) == 2**16
    msg = _message(lambda: arrpos.RoPE(2**18))
    assert "head_dim" in msg and str(2**17) in msg


# --- 7. torch integer positions -----------------------------------------------------------


@pytest.mark.parametrize("scaling", [None, arrpos.DynamicNTKScaling(2.0, 64)],
                         ids=["plain", "dynamic"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "uint64"])
def test_torch_integer_positions_of_every_width(dtype, scaling):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    rope = arrpos.RoPE(16, base=300.0, scaling=scaling)
    x = torch.randn(2, 5, 4, 16)
    top = 100 if dtype in ("int8", "uint8") else 3000
    for pos in (torch.arange(5) * (top // 5), torch.tensor([[3], [top - 1]])):
        xx = x if pos.ndim == 1 else x[:, :1]
        for _ in range(2):  # the second call of a dynamic frequency set takes its cache
            got = rope.apply(xx, pos.to(dt), heads_axis=-2)
            assert torch.equal(got, rope.apply(xx, pos, heads_axis=-2)), dtype
        c, s = rope.cos_sin(pos.to(dt))
        c64, s64 = rope.cos_sin(pos)
        assert torch.equal(c, c64) and torch.equal(s, s64)


def test_torch_positions_past_the_limit_or_bool_are_refused_by_name():
    torch = pytest.importorskip("torch")
    rope = arrpos.RoPE(16)
    x = torch.ones(2, 1, 4, 16)
    huge = torch.tensor([[3], [2**63 + 5]], dtype=torch.uint64)
    assert "positions" in _message(lambda: rope.apply(x, huge, heads_axis=-2))
    flags = torch.tensor([[True], [False]])
    assert "positions" in _message(lambda: rope.apply(x, flags, heads_axis=-2), TypeError)
    assert "positions" in _message(lambda: rope.cos_sin(flags), TypeError)

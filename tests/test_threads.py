"""The kernels' thread pool: fork after a parallel call, concurrent callers, thread counts."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from arrpos import _dispatch

_numpy = _dispatch.front_end("host.numpy")
pytestmark = pytest.mark.skipif(_numpy is None, reason="compiled extension disabled or absent")

_FORK_SCRIPT = """
import multiprocessing as mp, os, sys
import numpy as np
import arrpos
from arrpos._backends import _cpu

ref = arrpos.sinusoidal(100_000, 64)          # parallel: the pool's workers exist now
assert _cpu.max_threads() == 2

def child(_):
    return float(np.asarray(arrpos.sinusoidal(100_000, 64)).sum())

pid = os.fork()
if pid == 0:                                   # bare fork, as in the issue
    got = arrpos.sinusoidal(100_000, 64)
    os._exit(0 if np.array_equal(np.asarray(got), np.asarray(ref)) else 3)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 0, status
with mp.get_context("fork").Pool(2) as pool:  # multiprocessing's default start on Linux
    sums = pool.map(child, range(4))
assert all(s == sums[0] for s in sums)
print("ok")
"""


def test_fork_after_parallel_call_completes():
    """libgomp hung the child here; the pool's atfork handlers must not (timeout: a hang fails)."""
    import signal

    env = dict(os.environ, ARRPOS_NUM_THREADS="2")
    proc = subprocess.Popen([sys.executable, "-c", _FORK_SCRIPT], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # its own group: a hung child is killed too
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("a child process forked after a parallel kernel call hung")
    assert proc.returncode == 0, err[-3000:]
    assert out.strip() == "ok"


def test_concurrent_callers_get_their_own_results():
    """Python threads calling parallel kernels at once (GIL released): one runs on the pool,
    the others alone; every result is right."""
    import array_api_compat.numpy as xp

    rng = np.random.default_rng(11)
    xs = [rng.normal(size=(4, 256, 8, 64)).astype(np.float32) for _ in range(4)]
    ang = rng.uniform(-3, 3, size=(256, 1, 64))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    refs = [_numpy.apply_rope(x, cos, sin, layout="half", inverse=False, xp=xp) for x in xs]
    errors = []

    def work(i):
        for _ in range(20):
            got = _numpy.apply_rope(xs[i], cos, sin, layout="half", inverse=False, xp=xp)
            if not np.array_equal(got, refs[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a kernel call hung"
    assert not errors


def test_thread_count_env():
    """ARRPOS_NUM_THREADS (then OMP_NUM_THREADS) sets the pool size, read at first use."""
    code = "from arrpos._backends import _cpu; print(_cpu.max_threads())"
    for var in ("ARRPOS_NUM_THREADS", "OMP_NUM_THREADS"):
        env = {k: v for k, v in os.environ.items()
               if k not in ("ARRPOS_NUM_THREADS", "OMP_NUM_THREADS")}
        env[var] = "3"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert out.strip() == "3"


@pytest.mark.parametrize("nthreads", [1, 2])
def test_benchmark_limit_rows_write_exactly_their_bytes(nthreads):
    """The streaming copy and fill the benchmarks time as limits: every byte written, none
    beside the destination, at starts inside a cache line and sizes around the 4 KiB fill
    period and the 1 MiB thread chunk."""
    from arrpos._backends import _cpu

    rng = np.random.default_rng(0)
    for n in (0, 1, 15, 64, 100, 4095, 4097, (1 << 20) + 17, (3 << 20) + 5):
        for off in (0, 1, 16, 48):
            raw = np.zeros(n + off + 64, np.uint8)
            dst = raw[off:off + n]
            src = rng.integers(1, 256, n, dtype=np.uint8)
            _cpu.stream_copy(src, dst, nthreads)
            np.testing.assert_array_equal(dst, src)
            _cpu.stream_fill(dst, 0x3F, nthreads)
            assert (dst == 0x3F).all(), (n, off)
            assert not raw[:off].any() and not raw[off + n:].any(), (n, off)
    with pytest.raises(ValueError, match="byte"):
        _cpu.stream_fill(np.zeros(8, np.uint8), 256)
    with pytest.raises(ValueError, match="contiguous"):
        _cpu.stream_fill(np.zeros(8, np.uint8)[::2], 1)

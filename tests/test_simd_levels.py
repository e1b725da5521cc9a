"""The SIMD levels of the compiled kernels (csrc/simd.hpp) give the same bits, on the paths that
issue 28 added or restructured: the portable level's vectorisable loops (float16 tables widened
once per run of heads, 16-bit rows converted in pieces, rows longer than a piece, streamed
rows through SSE2 streaming stores), tables without fused multiply-adds, and the level's name.

Each level runs in a subprocess (ARRPOS_SIMD_LEVEL caps the level, read once per process); the
results of every level this CPU has are compared with the portable level's: identical bits, NaN
at the same places (a NaN's payload follows the operand order, which IEEE leaves open). The C++
driver csrc/check_kernels.cpp (CI: .ci/check_aarch64.sh, .ci/check_windows.sh) runs the same
comparison over more cases, under qemu-aarch64 (NEON) and Wine too. Light: NumPy only, fast
enough for the wheels' test command (pyproject.toml, [tool.cibuildwheel])."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arrpos

try:
    from arrpos._backends import _cpu
except ImportError:  # not built
    _cpu = None

# the directory holding the arrpos package that this process imported
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(arrpos.__file__)))

_REQUIRED = os.environ.get("ARRPOS_REQUIRE_EXTENSION", "") not in ("", "0")


def test_kernels_present_where_required():
    """A wheel's test run (pyproject.toml sets ARRPOS_REQUIRE_EXTENSION) fails, not skips,
    when its compiled kernels are missing."""
    if _REQUIRED:
        assert _cpu is not None, "arrpos._backends._cpu is not built"


_needs_kernels = pytest.mark.skipif(
    _cpu is None or os.environ.get("ARRPOS_NO_EXTENSIONS", "") not in ("", "0"),
    reason="compiled kernels not built or disabled")

_SCRIPT = textwrap.dedent(r'''
    import sys
    import numpy as np
    from arrpos._backends import _cpu

    F32, F64, F16, BF16 = _cpu.F32, _cpu.F64, _cpu.F16, _cpu.BF16
    rng = np.random.default_rng(28)
    res = {}


    def values(shape, code):
        """normal values with zeros, infinities, NaNs, tiny and huge ones"""
        v = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, shape)
        flat = v.reshape(-1)
        k = rng.permutation(flat.size)
        n = flat.size // 40
        flat[k[:n]] = 0.0
        flat[k[n:2 * n]] = np.inf
        flat[k[2 * n:3 * n]] = -np.nan
        flat[k[3 * n:4 * n]] *= 1e-42 if code != F64 else 1e-310
        flat[k[4 * n:5 * n]] *= 1e36 if code != F64 else 1e300
        if code == F64:
            return v
        if code == F16:
            return v.astype(np.float16)
        v32 = v.astype(np.float32)
        if code == F32:
            return v32
        u = v32.view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        bits[np.isnan(v32)] = 0x7FC0
        return bits.view(np.int16)


    def at_offset(a, offset):
        """a copy of a whose data starts offset bytes past a 64-byte boundary"""
        buf = np.empty(a.nbytes + 128, np.uint8)
        start = (-buf.ctypes.data) % 64 + offset
        b = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
        b[...] = a
        return b


    for tx, tc in sorted(_cpu.APPLY_TYPES):
        item = {F32: 4, F64: 8, F16: 2, BF16: 2}[tx]
        for R in (38, 64, 600):  # 600: rows of several portable pieces (256 columns)
            D = R + 6
            x = values((2, 7, 5, D), tx)
            cos, sin = values((7, 1, R), tc), values((7, 1, R), tc)  # broadcast over heads
            caches = values((9, R // 2), tc), values((9, R // 2), tc)
            ids = rng.integers(0, 9, (2, 7, 1))
            for inter in (False, True):
                for inv in (False, True):
                    for stream in (False, True):
                        for off in (0, item):
                            out = at_offset(np.zeros_like(x), off)
                            _cpu.apply_rope(x, cos, sin, out, tx, tc, inter, inv, 1, stream, 256)
                            res[f"apply {tx} {tc} {R} {inter} {inv} {stream} {off}"] = out
                            out = at_offset(np.zeros_like(x), off)
                            _cpu.apply_rope_cached(x, *caches, ids, out, tx, tc, inter, inv, 2,
                                                   stream, 256)
                            res[f"cached {tx} {tc} {R} {inter} {inv} {stream} {off}"] = out
                    y = x.copy()
                    _cpu.apply_rope(y, cos, sin, y, tx, tc, inter, inv, 2, True, 256)
                    res[f"in place {tx} {tc} {R} {inter} {inv}"] = y

    def rotation_tables(w, block=64):
        """rot(r w) for r < block and rot(2**k block w) (any values do: every level gets the
        same; arrpos makes them exact, here libm's)"""
        r = np.arange(block, dtype=np.float64)[:, None] * w
        p = np.ldexp(float(block), np.arange(53 - 6))[:, None] * w
        return [np.ascontiguousarray(f(a)) for a in (r, p) for f in (np.cos, np.sin)]


    store = {F32: np.float32, F64: np.float64, F16: np.float16, BF16: np.int16}
    pos = np.concatenate([np.arange(-40.0, 300.0), [2.0**40 + 7, 0.25, -77.5]])
    for nf in (5, 40, 300):  # 300: float64 rows longer than a stage
        hi = 10.0 ** rng.uniform(-5, 0, nf)
        lo = np.zeros(nf)
        rc, rs, pc, ps = rotation_tables(hi)
        for code in (F32, F64, F16, BF16):
            for stream in (False, True):
                for layout in (0, 1, 2):
                    out = at_offset(np.zeros((pos.size, 2 * nf + 3), store[code]), 16)
                    _cpu.sinusoid_table(pos, rc, rs, pc, ps, hi, lo, out, code, layout, 2, stream,
                                        4096)
                    res[f"sinusoid {nf} {code} {layout} {stream}"] = out
                for inter in (False, True):
                    a = at_offset(np.zeros((pos.size, 2 * nf), store[code]), 32)
                    b = at_offset(np.zeros((pos.size, 2 * nf), store[code]), 32)
                    _cpu.rope_table(pos, rc, rs, pc, ps, hi, lo, a, b, code, inter, 0.5, 2,
                                    stream, 4096)
                    res[f"rope {nf} {code} {inter} {stream}"] = np.concatenate([a, b])
    np.savez(sys.argv[1], **{k: v.view(np.uint8) for k, v in res.items()})
    print(_cpu.instruction_set(), _cpu.instruction_set_name())
''')

_DTYPE = {"0": np.float32, "1": np.float64, "2": np.float16, "3": np.uint16}


def _floats(raw, code):
    if code == "3":  # bfloat16 bits widened exactly
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw.view(_DTYPE[code])


def _code(key):
    words = key.split()
    if words[0] in ("apply", "cached"):
        return words[1]
    if words[0] == "in":
        return words[2]
    return words[2]  # tables: kind, nf, code


@pytest.fixture(scope="module")
def levels(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("levels")
    script = tmp / "levels.py"
    script.write_text(_SCRIPT)
    out = {}
    for level in range(_cpu.instruction_set() + 1):
        path = tmp / f"level{level}.npz"
        env = dict(os.environ, ARRPOS_SIMD_LEVEL=str(level))
        # the arrpos under test (a checkout's, not another installed one)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        proc = subprocess.run([sys.executable, str(script), str(path)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        number, name = proc.stdout.split()[-2:]
        assert number == str(level)
        with np.load(path) as data:
            out[level] = (name, {k: data[k] for k in data.files})
    return out


@_needs_kernels
def test_level_names():
    """instruction_set_name names the level the kernels run (arrpos info prints it)."""
    import platform

    name = _cpu.instruction_set_name()
    top = {"x86_64": ["portable", "avx2", "avx512", "avx512-bf16"], "AMD64":
           ["portable", "avx2", "avx512", "avx512-bf16"], "aarch64": ["portable", "neon"],
           "arm64": ["portable", "neon"]}.get(platform.machine(), ["portable"])
    assert name == top[_cpu.instruction_set()]


@_needs_kernels
def test_levels_are_named_in_order(levels):
    names = [levels[k][0] for k in sorted(levels)]
    assert names[0] == "portable"
    assert len(set(names)) == len(names)


@_needs_kernels
def test_every_level_gives_the_portable_bits(levels):
    """apply_rope (tables broadcast over heads, misaligned outputs, streamed, in place),
    apply_rope_cached and the tables at every level: the portable level's bits. Fails on a
    float16 table row widened for one head and reused for another, on a piece boundary, and on
    a table whose level fuses the complex multiply while another does not."""
    base_name, base = levels[0]
    assert base_name == "portable"
    bad = []
    for level in sorted(levels)[1:]:
        name, got = levels[level]
        for key, raw0 in base.items():
            code = _code(key)
            v0, v = _floats(raw0, code), _floats(got[key], code)
            nan0, nan = np.isnan(v0), np.isnan(v)
            u = f"u{v0.itemsize}"
            same = (nan0 == nan) & (nan0 | (v0.view(u) == v.view(u)))
            if not same.all():
                i = np.flatnonzero(~same.reshape(-1))[0]
                bad.append(f"{key} at {name}: {v0.reshape(-1)[i]!r} vs {v.reshape(-1)[i]!r}")
    assert not bad, "\n".join(bad[:20]) + f"\n({len(bad)} in all)"

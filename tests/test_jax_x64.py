"""JAX with 64-bit mode on takes the float64 angle path: checked in a subprocess, since x64 is
a process-wide switch (the rest of the suite runs JAX without it)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

SCRIPT = textwrap.dedent(
    """
    import numpy as np, jax, jax.numpy as jnp, mpmath as mp
    import arrpos
    assert jax.config.jax_enable_x64
    mp.mp.dps = 40
    pos = np.array([0, 1, 999_983, 2**24 - 1, 2**24])
    out = np.asarray(arrpos.sinusoidal(jnp.asarray(pos), 32, dtype=jnp.float64))
    assert out.dtype == np.float64
    w = [mp.power(10000, -mp.mpf(2 * i) / 32) for i in range(16)]
    ref = np.array([[float(f(int(p) * wi)) for wi in w for f in (mp.sin, mp.cos)] for p in pos])
    err = np.abs(out - ref).max()
    assert err <= 1e-12, err
    inv, _ = arrpos.rope_frequencies(64, xp=jnp, dtype=jnp.float64)
    cos, sin = jax.jit(lambda p: arrpos.rope_cos_sin(p, inv))(jnp.asarray(pos))
    refc = np.array([[float(mp.cos(int(p) * mp.mpf(float(v)))) for v in np.asarray(inv)] * 2
                     for p in pos])
    err = np.abs(np.asarray(cos) - refc).max()
    assert err <= 1e-12, err
    print("ok")
    """
)


def test_jax_float64_tables_meet_the_float64_contract():
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().endswith("ok")

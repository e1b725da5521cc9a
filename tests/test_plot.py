"""arrpos.plot on every backend: each figure draws the values that formulas written here give.

The drawn data is read back from the figure (image arrays, line data), so a plot that shows the
wrong numbers fails, not only one that crashes.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import arrpos  # noqa: E402
from arrpos import plot  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402



def vaswani(length, dim, base=10000.0):
    p = np.arange(length, dtype=np.float64)[:, None]
    w = base ** (-2.0 * np.arange(dim // 2) / dim)
    out = np.empty((length, dim))
    out[:, 0::2], out[:, 1::2] = np.sin(p * w), np.cos(p * w)
    return out


def image_data(fig, i=0):
    return np.asarray(fig.axes[i].images[0].get_array())


def panels(fig):
    return [a for a in fig.axes if a.images and a.get_title().startswith("head")]


def tol(backend, like=None):
    """Tolerance for values computed in the backend's default float (torch and JAX: float32)."""
    if like is None:
        like = arrpos.sinusoidal(1, 2, xp=backend.module)
    return 1e-12 if plot.to_host(like).dtype == np.float64 else 2e-6


def test_import_arrpos_does_not_import_matplotlib():
    code = "import sys, arrpos; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------ to_host


def test_to_host_every_backend(backend):
    ref = np.arange(12.0).reshape(3, 4)
    got = plot.to_host(backend.asarray(ref), "x")
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, ref)


def test_to_host_torch_grad_and_bfloat16():
    torch = pytest.importorskip("torch")
    x = torch.linspace(0, 1, 5, requires_grad=True) * 2
    np.testing.assert_allclose(plot.to_host(x), np.linspace(0, 2, 5), rtol=1e-6)
    h = plot.to_host(torch.tensor([0.5, 1.5], dtype=torch.bfloat16))
    assert h.dtype == np.float32 and h.tolist() == [0.5, 1.5]


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([1 + 2j]), object()])
def test_to_host_rejects_non_real(bad):
    with pytest.raises(TypeError, match="table"):
        plot.to_host(bad, "table")


# -------------------------------------------------------------------------------------- table


def test_table_every_backend(backend):
    pe = arrpos.sinusoidal(backend.asarray(np.arange(30)), 16)
    fig = plot.table(pe)
    assert isinstance(fig, Figure)
    np.testing.assert_allclose(image_data(fig), vaswani(30, 16), rtol=0, atol=tol(backend))
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("feature", "position")
    assert ax.images[0].get_clim() == (-1.0, 1.0)  # symmetric around zero


def test_table_into_existing_axes():
    fig = Figure()
    ax = fig.add_subplot()
    assert plot.table(np.ones((3, 4)), ax=ax, title="mine") is fig
    assert ax.get_title() == "mine"


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_table_rejects_non_2d(shape):
    with pytest.raises(ValueError, match="table must be 2-D"):
        plot.table(np.zeros(shape))


def test_figures_save_as_png(tmp_path):
    from matplotlib.image import imread

    plot.table(arrpos.sinusoidal(10, 8), figsize=(4, 3)).savefig(tmp_path / "t.png", dpi=50)
    assert imread(str(tmp_path / "t.png")).shape[:2] == (150, 200)


# --------------------------------------------------------------------------------- similarity


@pytest.mark.parametrize("metric", ["dot", "cosine"])
def test_similarity_every_backend(backend, metric):
    ref = vaswani(24, 8)
    fig = plot.similarity(backend.asarray(ref), metric=metric)
    want = ref @ ref.T
    if metric == "cosine":
        n = np.linalg.norm(ref, axis=1)
        want = want / np.outer(n, n)
    np.testing.assert_allclose(image_data(fig), want, rtol=1e-6, atol=tol(backend) * 10)
    assert metric in fig.axes[0].get_title()


def test_similarity_bad_metric_names_it():
    with pytest.raises(ValueError, match="metric"):
        plot.similarity(np.ones((3, 4)), metric="manhattan")


# --------------------------------------------------------------------------------- rope decay


def test_rope_decay_every_backend(backend):
    d, n = 32, 60
    fig = plot.rope_decay(d, max_distance=n, base=100.0, xp=backend.module)
    bound_line, score_line = (ax.get_lines()[0] for ax in fig.axes[:2])
    theta = [100.0 ** (-2.0 * i / d) for i in range(d // 2)]
    r = np.arange(n + 1)
    # <R_r 1, R_0 1> / d = (1/d) sum over the d/2 pairs of 2 cos(r theta_i)
    score = np.array([sum(2 * math.cos(k * t) for t in theta) / d for k in r])
    bound = np.array([np.mean([abs(sum(complex(math.cos(k * t), math.sin(k * t))
                                       for t in theta[:j])) for j in range(1, d // 2 + 1)])
                      for k in r])
    np.testing.assert_allclose(score_line.get_xdata(), r)
    inv, _ = arrpos.rope_frequencies(d, xp=backend.module)
    np.testing.assert_allclose(score_line.get_ydata(), score, atol=tol(backend, inv) * 10)
    np.testing.assert_allclose(bound_line.get_ydata(), bound, rtol=1e-9)
    assert score_line.get_ydata()[0] == pytest.approx(1.0)


def test_rope_decay_with_linear_scaling_stretches():
    plain = plot.rope_decay(16, max_distance=40).axes[1].get_lines()[0].get_ydata()
    slow = plot.rope_decay(16, max_distance=40, scaling=arrpos.LinearScaling(4.0))
    # Positions divided by 4: the scaled score at distance 4k is the plain score at k.
    np.testing.assert_allclose(slow.axes[1].get_lines()[0].get_ydata()[::4], plain[:11],
                               atol=1e-12)


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (2.5, TypeError)])
def test_rope_decay_bad_max_distance(bad, exc):
    with pytest.raises(exc, match="max_distance"):
        plot.rope_decay(16, max_distance=bad)


# -------------------------------------------------------------------------------------- alibi


def bloom_slopes(n):
    def pow2(m):
        return [2.0 ** (-8.0 * k / m) for k in range(1, m + 1)]

    low = 2 ** int(math.floor(math.log2(n)))
    return pow2(low) + pow2(2 * low)[0::2][: n - low]


def test_alibi_every_backend(backend):
    slopes = [0.5, 0.25, 0.125]
    fig = plot.alibi(backend.asarray(np.array(slopes)), length=6)
    got = panels(fig)
    assert [a.get_title() for a in got] == ["head 0, m = 0.5", "head 1, m = 0.25",
                                            "head 2, m = 0.125"]
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    for ax, m in zip(got, slopes):
        want = np.where(j <= i, -m * (i - j), 0.0)
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), want, atol=tol(backend))


@pytest.mark.parametrize("heads", [4, 12])
def test_alibi_from_head_count(heads):
    fig = plot.alibi(heads, length=5, mode="symmetric")
    got = panels(fig)
    assert len(got) == heads
    d = np.abs(np.arange(5)[:, None] - np.arange(5)[None, :])
    for ax, m in zip(got, bloom_slopes(heads)):
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), -m * d, atol=1e-12)


def test_alibi_heads_out_of_range():
    with pytest.raises(ValueError, match="heads"):
        plot.alibi(4, heads=[4])


# ----------------------------------------------------------------------------------------- t5


def test_t5_every_backend(backend):
    nb, heads, L = 16, 3, 20
    table = np.random.default_rng(1).normal(size=(nb, heads))
    fig = plot.t5(backend.asarray(table), length=L)
    got = panels(fig)
    assert len(got) == heads
    # Bucket index written from the T5 paper's rule: sign half, exact below max_exact = n/4.
    rel = np.arange(L)[None, :] - np.arange(L)[:, None]
    idx = np.asarray(backend.to_numpy(arrpos.t5_bucket(backend.asarray(rel), num_buckets=nb)))
    half, exact = nb // 2, nb // 4
    small = np.abs(rel) < exact
    np.testing.assert_array_equal(idx[small], np.abs(rel[small]) + half * (rel[small] > 0))
    assert (idx[~small] >= exact).all() and (idx[~small] < nb).all()
    for h, ax in enumerate(got):
        np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), table[idx, h],
                                   atol=tol(backend))


def test_t5_rejects_1d_table():
    with pytest.raises(ValueError, match="table"):
        plot.t5(np.zeros(32))

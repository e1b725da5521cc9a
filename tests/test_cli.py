"""The ``arrpos`` command line, run as users run it: ``python -m arrpos ...`` in a subprocess.

Files it writes are checked against formulas written here (not arrpos); errors must be one line
on stderr with a non-zero exit status.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import arrpos
from arrpos import _cli, _dispatch

HAS_MPL = __import__("importlib").util.find_spec("matplotlib") is not None
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def run_cli(*args, cwd=None, env=None):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "arrpos", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300)



def assert_one_line_error(res, status, *words):
    assert res.returncode == status, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def vaswani(length, dim, base=10000.0, layout="interleaved"):
    out = np.empty((length, dim))
    for p in range(length):
        for i in range(dim // 2):
            a = p * base ** (-2.0 * i / dim)
            if layout == "interleaved":
                out[p, 2 * i], out[p, 2 * i + 1] = math.sin(a), math.cos(a)
            else:
                out[p, i], out[p, dim // 2 + i] = math.sin(a), math.cos(a)
    return out


def bloom_slopes(n):
    """Press et al. / BLOOM slopes, written from the paper's description."""
    def pow2(m):
        return [2.0 ** (-8.0 * k / m) for k in range(1, m + 1)]

    low = 2 ** int(math.floor(math.log2(n)))
    return pow2(low) + pow2(2 * low)[0::2][: n - low]


# --------------------------------------------------------------------------------------- help

HELP_COMMANDS = [
    [],
    ["info"],
    ["plot"],
    *[["plot", k] for k in _cli.PLOT_KINDS],
    ["table"],
    *[["table", k] for k in _cli.TABLE_KINDS],
    ["bench"],
]


@pytest.mark.parametrize("cmd", HELP_COMMANDS, ids=lambda c: " ".join(c) or "arrpos")
def test_help(cmd):
    res = run_cli(*cmd, "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: arrpos" + "".join(" " + c for c in cmd))
    assert res.stderr == ""


def test_version():
    res = run_cli("--version")
    assert res.returncode == 0
    assert res.stdout.strip() == f"arrpos {arrpos.__version__}"


# --------------------------------------------------------------------------------------- info


def test_info_text():
    res = run_cli("info")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith(f"arrpos {arrpos.__version__}")
    assert f"numpy             {np.__version__}" in out
    built, _ = _dispatch.compiled_available()
    if built:
        assert "compiled CPU kernels: built" in out
        from arrpos._backends import _cpu

        assert f"SIMD level: {_cpu.instruction_set_name()} (ARRPOS_SIMD_LEVEL" in out
    assert "GPU:" in out


def test_info_names_the_simd_level_and_its_cap():
    """The level the kernels run, by name; ARRPOS_SIMD_LEVEL=0 caps it at the portable level."""
    if not _dispatch.compiled_available(ignore_switch=True)[0]:
        pytest.skip("compiled kernels not built")
    import platform

    names = {"x86_64": {"avx512-bf16", "avx512", "avx2", "portable"},
             "AMD64": {"avx512-bf16", "avx512", "avx2", "portable"},
             "aarch64": {"neon"}, "arm64": {"neon"}}
    info = json.loads(run_cli("info", "--json", env={"ARRPOS_NO_EXTENSIONS": ""}).stdout)
    assert info["extension"]["simd_level"] in names.get(platform.machine(), {"portable"})
    capped = run_cli("info", "--json", env={"ARRPOS_NO_EXTENSIONS": "", "ARRPOS_SIMD_LEVEL": "0"})
    assert json.loads(capped.stdout)["extension"]["simd_level"] == "portable"
    assert "SIMD level: portable" in run_cli("info", env={"ARRPOS_SIMD_LEVEL": "0"}).stdout


def test_info_json_matches_environment():
    res = run_cli("info", "--json", env={"ARRPOS_NO_EXTENSIONS": ""})
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["arrpos"] == arrpos.__version__
    assert info["backends"]["numpy"] == np.__version__
    try:
        from arrpos._backends import _cpu
    except ImportError:
        assert info["extension"]["built"] is False
    else:
        # the threading keys are _dispatch's ("thread_pool": built with the kernels' own pool)
        assert info["extension"] == {"disabled": False, "built": True,
                                     **_dispatch.compiled_threads(),
                                     "simd_level": _cpu.instruction_set_name()}
        assert info["extension"]["threads"] == _cpu.max_threads()
    try:
        import torch
    except ImportError:
        assert info["backends"]["torch"] is None
    else:
        assert info["backends"]["torch"] == torch.__version__


def test_info_reports_disabled_extensions():
    res = run_cli("info", env={"ARRPOS_NO_EXTENSIONS": "1"})
    assert res.returncode == 0, res.stderr
    assert "ARRPOS_NO_EXTENSIONS: '1': compiled kernels disabled" in res.stdout
    info = json.loads(run_cli("info", "--json", env={"ARRPOS_NO_EXTENSIONS": "1"}).stdout)
    assert info["extension"]["disabled"] is True


def test_info_imports_no_array_library():
    code = ("import sys; from arrpos._cli import main; main(['info']); "
            "heavy = [m for m in ('torch', 'jax', 'dask', 'cupy', 'array_api_strict', "
            "'matplotlib') if m in sys.modules]; print('heavy:', heavy)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "heavy: []"


def test_source_tree_without_kernels_says_so(tmp_path):
    """After 'pip install .', a command run from the checkout imports the sources (the current
    directory comes first on sys.path), where the kernels are not built: a warning at import
    and 'arrpos info' say so, instead of a silent 10-80x slowdown."""
    from importlib.machinery import EXTENSION_SUFFIXES

    checkout = tmp_path / "checkout"
    sources = pathlib.Path(arrpos.__file__).parent  # the package's files, installed or not
    shutil.copytree(sources, checkout / "arrpos", ignore=shutil.ignore_patterns(
        "__pycache__", *("_cpu" + suffix for suffix in EXTENSION_SUFFIXES)))
    (checkout / "setup.py").write_text("")
    (checkout / "csrc").mkdir()
    installed = tmp_path / "site" / "arrpos" / "_backends"  # an install with its kernels
    installed.mkdir(parents=True)
    (installed / ("_cpu" + EXTENSION_SUFFIXES[0])).write_bytes(b"")
    env = {"PYTHONPATH": str(tmp_path / "site"), "ARRPOS_NO_EXTENSIONS": ""}
    res = run_cli("info", cwd=checkout, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("RuntimeWarning: arrpos is imported from its source tree") == 1
    assert "pip install -e ." in res.stderr and str(tmp_path / "site") in res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("compiled CPU kernels:"))
    assert "not built" in line and f"source tree {checkout / 'arrpos'}" in line, line
    assert "run from another directory" in line
    # the sources with no built install to shadow: no warning (info says how to build); where
    # this interpreter has an installed copy with kernels (the tests run against a wheel), it does
    env = dict(os.environ, PYTHONPATH=str(checkout))
    path = json.loads(subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=120, check=True).stdout)
    shadowed = any((pathlib.Path(entry) / "arrpos" / "_backends" / ("_cpu" + suffix)).is_file()
                   for entry in path if entry for suffix in EXTENSION_SUFFIXES)
    res = subprocess.run([sys.executable, "-c", "import arrpos"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert ("arrpos is imported from its source tree" in res.stderr) is shadowed, res.stderr


# -------------------------------------------------------------------------------------- table


@pytest.mark.parametrize("layout", ["interleaved", "split"])
def test_table_sinusoidal(tmp_path, layout):
    res = run_cli("table", "sinusoidal", "--length", "40", "--dim", "12", "--base", "100",
                  "--layout", layout, "-o", "pe.npy", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "wrote pe.npy" in res.stdout
    got = np.load(tmp_path / "pe.npy")
    assert got.dtype == np.float32 and got.shape == (40, 12)
    np.testing.assert_allclose(got, vaswani(40, 12, 100.0, layout), rtol=0, atol=2e-7)


def test_table_sinusoidal_float64(tmp_path):
    res = run_cli("table", "sinusoidal", "--length", "300", "--dim", "8", "--dtype", "float64",
                  "-o", str(tmp_path / "pe.npy"))
    assert res.returncode == 0, res.stderr
    got = np.load(tmp_path / "pe.npy")
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, vaswani(300, 8), rtol=0, atol=1e-12)


def rope_reference(length, dim, base, layout):
    inv = [base ** (-2.0 * i / dim) for i in range(dim // 2)]
    cols = inv + inv if layout == "half" else [w for w in inv for _ in (0, 1)]
    ang = np.arange(length)[:, None] * np.array(cols)[None, :]
    return np.cos(ang), np.sin(ang)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_table_rope_npz(tmp_path, layout):
    res = run_cli("table", "rope", "--length", "50", "--dim", "16", "--base", "500",
                  "--layout", layout, "-o", "rope.npz", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with np.load(tmp_path / "rope.npz") as f:
        cos, sin, inv = f["cos"], f["sin"], f["inv_freq"]
    ref_cos, ref_sin = rope_reference(50, 16, 500.0, layout)
    assert cos.shape == sin.shape == (50, 16) and cos.dtype == np.float32
    np.testing.assert_allclose(cos, ref_cos, rtol=0, atol=2e-7)
    np.testing.assert_allclose(sin, ref_sin, rtol=0, atol=2e-7)
    np.testing.assert_allclose(inv, [500.0 ** (-2 * i / 16) for i in range(8)], rtol=1e-6)


def test_table_rope_npy_stacks_cos_then_sin(tmp_path):
    res = run_cli("table", "rope", "--length", "20", "--dim", "8", "--dtype", "float64",
                  "-o", "rope.npy", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = np.load(tmp_path / "rope.npy")
    assert got.shape == (2, 20, 8)
    ref_cos, ref_sin = rope_reference(20, 8, 10000.0, "half")
    np.testing.assert_allclose(got[0], ref_cos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[1], ref_sin, rtol=0, atol=1e-12)


@pytest.mark.parametrize("heads", [8, 6])
@pytest.mark.parametrize("mode", ["causal", "symmetric"])
def test_table_alibi(tmp_path, heads, mode):
    res = run_cli("table", "alibi", "--heads", str(heads), "--length", "10", "--mode", mode,
                  "--dtype", "float64", "-o", "alibi.npy", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = np.load(tmp_path / "alibi.npy")
    assert got.shape == (heads, 10, 10)
    ref = np.zeros((heads, 10, 10))
    for h, m in enumerate(bloom_slopes(heads)):
        for i in range(10):
            for j in range(10):
                if mode == "symmetric":
                    ref[h, i, j] = -m * abs(i - j)
                elif j <= i:
                    ref[h, i, j] = -m * (i - j)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------- plot

needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="matplotlib not installed")


def read_png(path):
    from matplotlib.image import imread

    return imread(str(path))


@needs_mpl
def test_plot_sinusoidal_png(tmp_path):
    res = run_cli("plot", "sinusoidal", "--length", "100", "--dim", "64", "-o", "pe.png",
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "wrote pe.png (800 x 500 px)" in res.stdout
    img = read_png(tmp_path / "pe.png")
    assert img.shape[:2] == (500, 800)  # default 8 x 5 inches at 100 dpi
    rgb = img[..., :3].reshape(-1, 3)
    # A diverging heatmap of values in [-1, 1]: both strongly red and strongly blue pixels.
    assert ((rgb[:, 0] > 0.6) & (rgb[:, 2] < 0.3)).mean() > 0.02
    assert ((rgb[:, 2] > 0.5) & (rgb[:, 0] < 0.3)).mean() > 0.02


@needs_mpl
def test_plot_dpi_sets_size(tmp_path):
    res = run_cli("plot", "sinusoidal", "--dpi", "50", "-o", "small.png", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert read_png(tmp_path / "small.png").shape[:2] == (250, 400)


PLOT_CASES = {  # kind: (arguments, (height, width) of the PNG at 100 dpi)
    "similarity": (["--length", "32", "--dim", "16"], (500, 600)),
    "rope-decay": (["--dim", "64", "--max-distance", "100"], (600, 700)),
    "alibi": (["--heads", "4", "--length", "16"], (320, 1140)),  # 4 panels in one row
    "t5": (["--heads", "8", "--length", "40"], (580, 1140)),  # 2 rows of 4
}


@needs_mpl
@pytest.mark.parametrize("kind", list(PLOT_CASES))
def test_plot_kinds(tmp_path, kind):
    args, (height, width) = PLOT_CASES[kind]
    res = run_cli("plot", kind, *args, "-o", "fig.png", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    img = read_png(tmp_path / "fig.png")
    assert img.shape[:2] == (height, width)
    assert img[..., :3].std() > 0.05  # something was drawn


@needs_mpl
def test_plot_t5_reads_a_table(tmp_path):
    np.save(tmp_path / "bias.npy", np.linspace(-1, 1, 16 * 3).reshape(16, 3))
    res = run_cli("plot", "t5", "--table", "bias.npy", "--num-buckets", "16", "-o", "t5.png",
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert read_png(tmp_path / "t5.png").shape[:2] == (320, 880)  # 3 panels in one row


# ------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args, status, words",
    [
        (["table", "sinusoidal", "--length", "10", "--dim", "7", "--layout", "split", "-o",
          "x.npy"], 1, ["dim"]),  # odd dims: interleaved only (keras-hub)
        (["table", "sinusoidal", "--length", "10", "--dim", "8", "-o", "x.txt"], 1,
         ["-o/--output", ".npy"]),
        (["table", "sinusoidal", "--length", "10", "--dim", "8", "-o", "no/such/dir/x.npy"], 1,
         ["No such file"]),
        (["table", "sinusoidal", "--length", "0", "--dim", "8", "-o", "x.npy"], 2, ["--length"]),
        (["table", "sinusoidal", "--dim", "8", "-o", "x.npy"], 2, ["--length"]),
        (["table", "sinusoidal", "--length", "10", "--dim", "8", "--base", "-2", "-o", "x.npy"],
         1, ["base"]),
        (["table", "wavelet", "-o", "x.npy"], 2, ["wavelet"]),
        (["plot", "sinusoidal", "--layout", "diagonal", "-o", "x.png"], 2, ["--layout"]),
        (["plot", "sinusoidal", "-o", "noextension"], 1, ["-o/--output"]),
        (["plot", "sinusoidal", "--dpi", "0", "-o", "x.png"], 1, ["--dpi"]),
        (["plot", "similarity", "--table", "missing.npy", "-o", "x.png"], 1, ["missing.npy"]),
        (["frobnicate"], 2, ["frobnicate"]),
        ([], 2, ["COMMAND"]),
    ],
)
def test_errors_are_one_line(tmp_path, args, status, words):
    if "--table" in args and not HAS_MPL:  # arguments valid: the missing extra is the error
        words = ["matplotlib"]
    res = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(res, status, *words)
    assert not any(tmp_path.iterdir())  # nothing half-written


# -------------------------------------------------------------------------------------- bench


def test_bench_runs_the_suite_with_progress(monkeypatch, capsys):
    root = _cli._benchmarks_root()
    if root is None:
        pytest.skip("no benchmarks/ here (installed package, not a checkout)")
    calls = []

    def fake_main(argv=None, progress=None):
        calls.append(list(argv))
        progress(0, 2, "bench_a")
        progress(1, 2, "bench_b")
        print("the table")
        return 0

    # The real runner times things; here only the wiring is under test.
    fake = types.ModuleType("benchmarks.run")
    fake.__file__ = str(root / "benchmarks" / "run.py")
    fake.main = fake_main
    monkeypatch.setitem(sys.modules, "benchmarks.run", fake)
    assert _cli.main(["bench", "--quick"]) == 0
    out, err = capsys.readouterr()
    assert calls == [["--quick"]]
    assert out == "the table\n"
    assert "[1/2] bench_a" in err and "[2/2] bench_b" in err


def test_bench_csv_is_passed_on(monkeypatch, capsys):
    root = _cli._benchmarks_root()
    if root is None:
        pytest.skip("no benchmarks/ here (installed package, not a checkout)")
    calls = []
    fake = types.ModuleType("benchmarks.run")
    fake.__file__ = str(root / "benchmarks" / "run.py")
    fake.main = lambda argv=None, progress=None: calls.append(list(argv)) or 0
    monkeypatch.setitem(sys.modules, "benchmarks.run", fake)
    assert _cli.main(["bench", "--quick", "--csv"]) == 0
    assert calls == [["--quick", "--csv"]]


def test_bench_table_fits_120_columns_and_reads_back():
    """Two lines a row within 120 columns (the old one-line rows were 290 wide); --csv rows."""
    import csv
    import io

    root = _cli._benchmarks_root()
    if root is None:
        pytest.skip("no benchmarks/ here (installed package, not a checkout)")
    sys.path.insert(0, str(root))
    try:
        from benchmarks._timing import format_results, parse_results, results_csv
    finally:
        sys.path.remove(str(root))
    long_user = ("peer/arrpos: ORT bound 27.52 us (1 thr) 1.37, ORT run() 34.48 us (1 thr) 1.68 "
                 "(vs allocating), numba 0.79, numpy 6.59")
    rows = [("decode apply_rope_cached (32 sequences, own positions)", "(32, 1, 32, 128)",
             "0.020", "20.12 us into out=, 20.57 us allocating", long_user),
            ("apply_rope half, in place", "(4, 2048, 32, 128) f64", "13.286", "1.36 x (x *= 1.0)",
             ""),
            ("apply_rope, Dask threaded", "(4, 2048, 32, 128) f32, chunks (1, 512, 32, 128)",
             "12.727", "", "tasks alone 1.98 x; Dask with no work 0.59 x")]
    text = format_results(rows)
    assert max(map(len, text.splitlines())) <= 120, text
    assert parse_results(text) == rows
    got = list(csv.reader(io.StringIO(results_csv(rows))))
    assert got[0] == ["kernel", "size", "ms", "vs memory baseline", "vs user code"]
    assert [tuple(r) for r in got[1:]] == rows


def test_bench_outside_a_checkout_is_one_line(monkeypatch, tmp_path, capsys):
    fake_pkg = tmp_path / "site" / "arrpos"
    fake_pkg.mkdir(parents=True)
    monkeypatch.setattr(arrpos, "__file__", str(fake_pkg / "__init__.py"))
    monkeypatch.chdir(tmp_path)
    assert _cli.main(["bench"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "benchmarks/" in err and "checkout" in err

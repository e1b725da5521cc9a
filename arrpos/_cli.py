"""The ``arrpos`` command line: ``info``, ``plot``, ``table``, ``bench`` and ``explore``.

Every command has ``--help``. Errors print one line on stderr and exit non-zero (1 for a bad
value or a failed write, 2 for a bad command line), never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["main"]

PLOT_KINDS = ("sinusoidal", "similarity", "rope-decay", "alibi", "t5")
TABLE_KINDS = ("sinusoidal", "rope", "alibi")
# (name shown, importable module, distribution names to ask for the version; None: look it up)
_BACKENDS: list[tuple[str, str, tuple[str, ...] | None]] = [
    ("numpy", "numpy", ("numpy",)),
    ("array_api_strict", "array_api_strict", ("array-api-strict", "array_api_strict")),
    ("torch", "torch", ("torch",)),
    ("jax", "jax", ("jax",)),
    ("dask", "dask", ("dask",)),
    ("cupy", "cupy", None),  # cupy-cuda12x, cupy-cuda11x, cupy, ...
]


class CommandError(Exception):
    """A failure the user can fix; printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _dtype(name: str) -> Any:
    import numpy as np

    return {"float32": np.float32, "float64": np.float64}[name]


# ---------------------------------------------------------------------------------------- info


def _version(module: str, dists: tuple[str, ...] | None) -> str | None:
    """Installed version of ``module`` without importing it; None when it is not installed."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    if dists is None:
        dists = tuple(importlib.metadata.packages_distributions().get(module, ()))
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed (version unknown)"


def _extension() -> dict[str, Any]:
    from . import _dispatch

    import arrpos

    info: dict[str, Any] = {"disabled": _dispatch.extensions_disabled()}
    ok, why = _dispatch.compiled_available(ignore_switch=True)
    if not ok:
        info.update(built=False, reason=why)
        tree = arrpos._unbuilt_source_tree()
        if tree is not None:  # the sources of a checkout, imported instead of an install
            info.update(source_tree=tree[0], installed_with_kernels=tree[1])
    else:
        info.update(built=True, **_dispatch.compiled_threads(), simd_level=_simd_level())
    return info


def _simd_level() -> str:
    """The instruction set the compiled kernels run: "avx512-bf16", "avx512", "avx2", "neon" or
    "portable" (csrc/simd.hpp; ARRPOS_SIMD_LEVEL caps it)."""
    try:
        from ._backends import _cpu

        return str(_cpu.instruction_set_name())
    except (ImportError, AttributeError):  # (an extension built before the name existed)
        return "unknown"


# Run in a child process: importing CuPy is slow and a broken driver may crash or hang it; the
# info command itself stays free of array libraries.
_GPU_PROBE = """
import json, cupy
rt = cupy.cuda.runtime
names = []
for i in range(int(rt.getDeviceCount())):
    n = rt.getDeviceProperties(i)["name"]
    names.append(n.decode() if isinstance(n, bytes) else str(n))
v = int(rt.runtimeGetVersion())
print(json.dumps({"devices": names, "cuda_runtime": f"{v // 1000}.{v % 1000 // 10}"}))
"""


def _gpu(cupy_version: str | None) -> dict[str, Any]:
    import subprocess

    if cupy_version is None:
        return {"devices": [], "note": "CuPy not installed"}
    try:
        res = subprocess.run([sys.executable, "-c", _GPU_PROBE], capture_output=True,
                             text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"devices": [], "note": "CuPy did not answer within 60 s"}
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no message"])[-1]
        return {"devices": [], "note": f"CuPy cannot use a GPU: {last}"}
    data: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return data


def collect_info() -> dict[str, Any]:
    """Everything ``arrpos info`` reports, as plain data."""
    import arrpos

    backends = {name: _version(mod, dists) for name, mod, dists in _BACKENDS}
    return {
        "arrpos": arrpos.__version__,
        "location": str(Path(arrpos.__file__).resolve().parent),
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu_count": os.cpu_count(),
        "extension": _extension(),
        "ARRPOS_NO_EXTENSIONS": os.environ.get("ARRPOS_NO_EXTENSIONS"),
        "backends": backends,
        "gpu": _gpu(backends["cupy"]),
        "matplotlib": _version("matplotlib", ("matplotlib",)),
    }


def _threads_text(ext: dict[str, Any]) -> str:
    """How the built kernels run: their own thread pool (not OpenMP) or one thread."""
    # "built with the pool" in _dispatch.compiled_threads(): "thread_pool", once "openmp"
    pooled = bool(ext.get("thread_pool", ext.get("openmp", True)))
    if not pooled:
        return "built single-threaded (ARRPOS_NO_THREADS at build time): 1 thread"
    return (f"built, {ext['threads']} thread(s) in the kernels' own pool (ARRPOS_NUM_THREADS, "
            "else OMP_NUM_THREADS, sets how many)")


def _cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    ext = info["extension"]
    if ext["built"]:
        ext_line = _threads_text(ext)
    else:
        ext_line = f"not built ({ext['reason']}); the generic Array API code runs everywhere"
        if ext.get("installed_with_kernels"):
            ext_line += (f". This is the source tree {ext['source_tree']}, imported instead of "
                         f"the installed copy with kernels ({ext['installed_with_kernels']}): "
                         "run from another directory, or build here with pip install -e .")
        elif "source_tree" in ext:
            ext_line += (f". This is the source tree {ext['source_tree']}, not built: "
                         "pip install -e . builds the kernels (a C++17 compiler is needed)")
    env = info["ARRPOS_NO_EXTENSIONS"]
    if ext["disabled"]:
        env_line = f"{env!r}: compiled kernels disabled, the generic code runs everywhere"
    else:
        env_line = "not set" if env is None else f"{env!r} (kernels enabled)"
        if ext["built"]:
            env_line += (": NumPy arrays and torch CPU tensors (float16, bfloat16, float32, "
                         "float64) take the compiled kernels")
    gpu = info["gpu"]
    if gpu["devices"]:
        gpu_line = ", ".join(gpu["devices"]) + f" (CUDA runtime {gpu['cuda_runtime']})"
    else:
        gpu_line = f"none ({gpu['note']})" if "note" in gpu else "none (CuPy sees no device)"
    lines = [
        f"arrpos {info['arrpos']}  ({info['location']})",
        f"python {info['python']} on {info['platform']}, {info['cpu_count']} CPU cores",
        f"compiled CPU kernels: {ext_line}",
        *([f"SIMD level: {ext['simd_level']} (ARRPOS_SIMD_LEVEL caps it)"]
          if ext["built"] else []),
        f"ARRPOS_NO_EXTENSIONS: {env_line}",
        "backends:",
    ]
    width = max(len(n) for n in info["backends"])
    for name, ver in info["backends"].items():
        lines.append(f"  {name.ljust(width)}  {ver or 'not installed'}")
    lines.append(f"GPU: {gpu_line}")
    mpl = info["matplotlib"]
    lines.append(f"plots: matplotlib {mpl}" if mpl else
                 'plots: matplotlib not installed (pip install matplotlib)')
    print("\n".join(lines))
    return 0


# ---------------------------------------------------------------------------------------- plot


def _load_npy(path: str, name: str) -> Any:
    import numpy as np

    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as exc:
        raise ValueError(f"{name} {path!r} cannot be read: {_one_line(exc)}") from None
    if magic != b"\x93NUMPY":
        raise ValueError(f"{name} {path!r} is not a .npy file (no NumPy header); write one "
                         "with numpy.save")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{name} {path!r} is not a .npy array file: {_one_line(exc)}") from None


_MAX_PLOTTED_HEADS = 64  # one panel per head: more would take minutes and be unreadable


def _table_2d(tab: Any, name: str, what: str) -> Any:
    if tab.ndim != 2:
        raise ValueError(f"{name} must hold a 2-D array {what}, got shape {tab.shape}")
    return tab


def _figure(args: argparse.Namespace) -> Any:
    try:
        from . import plot
    except ImportError as exc:
        raise CommandError(_one_line(exc)) from None
    import arrpos

    kind = args.kind
    if kind == "sinusoidal":
        pe = arrpos.sinusoidal(args.length, args.dim, base=args.base, layout=args.layout)
        return plot.table(pe, title=f"sinusoidal encoding ({args.length} x {args.dim}, "
                                    f"{args.layout}, base {args.base:g})")
    if kind == "similarity":
        if args.table:
            tab = _table_2d(_load_npy(args.table, "--table"), "--table", "(positions, dim)")
        else:
            tab = arrpos.sinusoidal(args.length, args.dim, base=args.base)
        return plot.similarity(tab, metric=args.metric)
    if kind == "rope-decay":
        return plot.rope_decay(args.dim, max_distance=args.max_distance, base=args.base)
    if kind == "alibi":
        return plot.alibi(args.heads, length=args.length, mode=args.mode,
                          max_bias=args.max_bias)
    if kind == "t5":
        if args.table:  # the table's rows are its buckets
            tab = _table_2d(_load_npy(args.table, "--table"), "--table", "(buckets, heads)")
            if tab.shape[1] > _MAX_PLOTTED_HEADS:
                raise ValueError(f"--table must have at most {_MAX_PLOTTED_HEADS} heads "
                                 f"(columns) to plot, got {tab.shape[1]}; save a slice")
            buckets = tab.shape[0]
        else:  # an untrained table: random values per bucket make the bucket pattern visible
            import numpy as np

            tab = np.random.default_rng(args.seed).normal(size=(args.num_buckets, args.heads))
            buckets = args.num_buckets
        return plot.t5(tab, length=args.length, bidirectional=not args.causal,
                       num_buckets=buckets, max_distance=args.max_distance)
    raise CommandError(f"unknown plot kind {kind!r}")  # argparse prevents this


def _cmd_plot(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if not out.suffix:
        raise ValueError(f"-o/--output needs a file extension (.png, .pdf, .svg), got {str(out)!r}")
    if args.dpi <= 0:
        raise ValueError(f"--dpi must be > 0, got {args.dpi}")
    fig = _figure(args)
    fig.savefig(out, dpi=args.dpi)
    w, h = fig.get_size_inches() * args.dpi
    print(f"wrote {out} ({round(w)} x {round(h)} px)")
    return 0


# --------------------------------------------------------------------------------------- table


def _check_suffix(path: str, allowed: tuple[str, ...]) -> str:
    suffix = Path(path).suffix
    if suffix not in allowed:
        raise ValueError(f"-o/--output must end in {' or '.join(allowed)}, got {path!r}")
    return suffix


def _cmd_table(args: argparse.Namespace) -> int:
    import numpy as np

    import arrpos

    dtype = _dtype(args.dtype)
    kind = args.kind
    if kind == "sinusoidal":
        _check_suffix(args.output, (".npy",))
        arr = arrpos.sinusoidal(args.length, args.dim, base=args.base, layout=args.layout,
                                dtype=dtype)
        np.save(args.output, arr)
        what = f"shape {arr.shape}"
    elif kind == "rope":
        suffix = _check_suffix(args.output, (".npz", ".npy"))
        inv_freq, factor = arrpos.rope_frequencies(args.dim, base=args.base)
        cos, sin = arrpos.rope_cos_sin(np.arange(args.length), inv_freq, layout=args.layout,
                                       attention_factor=factor, dtype=dtype)
        if suffix == ".npz":
            np.savez(args.output, cos=cos, sin=sin, inv_freq=inv_freq)
            what = f"cos and sin, each {cos.shape}, and inv_freq {inv_freq.shape}"
        else:
            arr = np.stack([cos, sin])
            np.save(args.output, arr)
            what = f"shape {arr.shape}: [cos, sin]"
    elif kind == "alibi":
        _check_suffix(args.output, (".npy",))
        slopes = arrpos.alibi_slopes(args.heads, max_bias=args.max_bias, dtype=dtype)
        arr = arrpos.alibi_bias(slopes, args.length, args.length, mode=args.mode)
        np.save(args.output, arr)
        what = f"shape {arr.shape}"
    else:  # argparse prevents this
        raise CommandError(f"unknown table kind {kind!r}")
    print(f"wrote {args.output} ({what}, {args.dtype})")
    return 0


# --------------------------------------------------------------------------------------- bench


def _benchmarks_root() -> Path | None:
    """The source tree holding ``benchmarks/``: the checkout arrpos runs from, or the CWD."""
    import arrpos

    for root in (Path(arrpos.__file__).resolve().parent.parent, Path.cwd().resolve()):
        if (root / "benchmarks" / "run.py").is_file():
            return root
    return None


def _cmd_bench(args: argparse.Namespace) -> int:
    root = _benchmarks_root()
    if root is None:
        raise CommandError(
            "the benchmark suite (benchmarks/ in the arrpos source tree) was not found next to "
            "the installed package or in the current directory; run 'arrpos bench' from a "
            "checkout of arrpos"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    run = importlib.import_module("benchmarks.run")
    found = Path(run.__file__ or "").resolve().parent.parent
    if found != root:
        raise CommandError(f"a different 'benchmarks' package ({found}) shadows {root}/benchmarks")
    start = time.perf_counter()

    def progress(i: int, n: int, name: str) -> None:
        print(f"arrpos bench: [{i + 1}/{n}] {name} ({time.perf_counter() - start:.0f} s)",
              file=sys.stderr, flush=True)

    print(f"arrpos bench: running {root / 'benchmarks'}" + (" (quick)" if args.quick else ""),
          file=sys.stderr, flush=True)
    argv = (["--quick"] if args.quick else []) + (["--csv"] if args.csv else [])
    status = int(run.main(argv, progress=progress) or 0)
    print(f"arrpos bench: done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return status


# ------------------------------------------------------------------------------------- explore


def _cmd_explore(args: argparse.Namespace) -> int:
    from . import _explore

    sizes = _explore.ExploreSizes(
        length=args.length, dim=args.dim, heads=args.heads, base=args.base,
        rope_dim=args.rope_dim, rope_positions=args.rope_positions, seed=args.seed)
    page = _explore.explore_html(sizes)
    if args.output:
        out = Path(args.output)
    else:  # a page of its own in the temporary directory, kept for the browser to read
        import tempfile

        fd, name = tempfile.mkstemp(prefix="arrpos-explore-", suffix=".html")
        os.close(fd)
        out = Path(name)
    out.write_text(page, encoding="utf-8")
    size = out.stat().st_size
    print(f"wrote {out} ({size / 1e6:.1f} MB, self-contained; open it in a browser)")
    if not args.output and not args.no_browser:
        import webbrowser

        if not webbrowser.open(out.resolve().as_uri()):
            print("arrpos explore: no browser found; open the file above yourself",
                  file=sys.stderr)
    return 0


# -------------------------------------------------------------------------------------- parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _add_output(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help=f"file to write (e.g. {example})")


def _plot_parsers(sub: Any) -> None:
    common = _Parser(add_help=False)
    _add_output(common, "pe.png; .pdf and .svg work too")
    common.add_argument("--dpi", type=float, default=100.0, help="pixels per inch (default 100)")

    def kind(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help,
                                                    description=help)
        p.set_defaults(kind=name)
        return p

    p = kind("sinusoidal", "heatmap of the sinusoidal table (positions x features)")
    p.add_argument("--length", type=_positive, default=100, help="positions (default 100)")
    p.add_argument("--dim", type=_positive, default=64, help="features, even (default 64)")
    p.add_argument("--base", type=float, default=10000.0, help="wavelength base (default 1e4)")
    p.add_argument("--layout", choices=("interleaved", "split"), default="interleaved",
                   help="sin/cos layout (default %(default)s)")

    p = kind("similarity", "similarity matrix between the positions of a table")
    p.add_argument("--length", type=_positive, default=64, help="positions (default 64)")
    p.add_argument("--dim", type=_positive, default=64, help="features, even (default 64)")
    p.add_argument("--base", type=float, default=10000.0, help="wavelength base (default 1e4)")
    p.add_argument("--metric", choices=("dot", "cosine"), default="dot",
                   help="similarity of two rows (default %(default)s)")
    p.add_argument("--table", metavar="FILE.npy",
                   help="a (positions, features) table to use instead of a sinusoidal one")

    p = kind("rope-decay", "RoPE long-term decay against relative distance (RoFormer fig. 2)")
    p.add_argument("--dim", type=_positive, default=128, help="rotary width (default 128)")
    p.add_argument("--max-distance", type=_positive, default=256,
                   help="largest relative distance (default 256)")
    p.add_argument("--base", type=float, default=10000.0, help="rope_theta (default 1e4)")

    p = kind("alibi", "ALiBi bias, one panel per head")
    p.add_argument("--heads", type=_positive, default=8, help="number of heads (default 8)")
    p.add_argument("--length", type=_positive, default=32, help="query/key length (default 32)")
    p.add_argument("--mode", choices=("causal", "symmetric", "key"), default="causal",
                   help="form of the bias (default %(default)s)")
    p.add_argument("--max-bias", type=float, default=8.0, help="slope parameter (default 8)")

    p = kind("t5", "T5 relative bias, one panel per head")
    p.add_argument("--heads", type=_positive, default=8,
                   help="heads of the random demo table (default 8)")
    p.add_argument("--length", type=_positive, default=64, help="query/key length (default 64)")
    p.add_argument("--num-buckets", type=_positive, default=32, help="buckets (default 32)")
    p.add_argument("--max-distance", type=_positive, default=128,
                   help="distance of the last bucket (default 128)")
    p.add_argument("--causal", action="store_true", help="decoder (unidirectional) buckets")
    p.add_argument("--seed", type=int, default=0, help="seed of the random demo table")
    p.add_argument("--table", metavar="FILE.npy",
                   help="a trained (num_buckets, heads) bias table instead of a random one")


def _table_parsers(sub: Any) -> None:
    common = _Parser(add_help=False)
    common.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                        help="element type (default float32)")

    def kind(name: str, help: str, example: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help,
                                                    description=help)
        _add_output(p, example)
        p.set_defaults(kind=name)
        return p

    p = kind("sinusoidal", "sinusoidal table (length, dim) as .npy", "pe.npy")
    p.add_argument("--length", type=_positive, required=True, help="positions 0 .. length-1")
    p.add_argument("--dim", type=_positive, required=True, help="features, even")
    p.add_argument("--base", type=float, default=10000.0, help="wavelength base (default 1e4)")
    p.add_argument("--layout", choices=("interleaved", "split"), default="interleaved",
                   help="sin/cos layout (default %(default)s)")

    p = kind("rope", "RoPE cos and sin tables: .npz with arrays cos, sin, inv_freq, or .npy "
                     "with cos and sin stacked (2, length, dim)", "rope.npz")
    p.add_argument("--length", type=_positive, required=True, help="positions 0 .. length-1")
    p.add_argument("--dim", type=_positive, required=True, help="rotary width, even")
    p.add_argument("--base", type=float, default=10000.0, help="rope_theta (default 1e4)")
    p.add_argument("--layout", choices=("half", "interleaved"), default="half",
                   help="rotary layout (default %(default)s)")

    p = kind("alibi", "ALiBi bias (heads, length, length) as .npy", "alibi.npy")
    p.add_argument("--heads", type=_positive, required=True, help="number of heads")
    p.add_argument("--length", type=_positive, required=True, help="query and key length")
    p.add_argument("--mode", choices=("causal", "symmetric", "key"), default="causal",
                   help="form of the bias (default %(default)s)")
    p.add_argument("--max-bias", type=float, default=8.0, help="slope parameter (default 8)")


def _explore_parser(sub: Any) -> None:
    p = sub.add_parser(
        "explore", help="interactive page: move sliders, see arrpos's numbers",
        description="Write a self-contained interactive page (HTML with its own JavaScript and "
                    "the data arrpos computed for every slider position; works offline, from "
                    "file://) with panels: sine wave explorer, embedding visualiser, rotation "
                    "matrix explorer, RoPE playground, the three properties, bit flipping. "
                    "Without "
                    "-o the page goes to a temporary file and opens in the web browser.",
        epilog="Example: arrpos explore -o explore.html")
    p.add_argument("-o", "--output", metavar="FILE.html",
                   help="write the page here (and open nothing) instead of a temporary file")
    p.add_argument("--no-browser", action="store_true",
                   help="only print the path of the page written, do not open a browser")
    p.add_argument("--length", type=_positive, default=48,
                   help="positions of the tables and biases, 3 .. 128 (default 48)")
    p.add_argument("--dim", type=_positive, default=64, help="features of the tables, even, 2 .. 256 (default 64)")
    p.add_argument("--heads", type=_positive, default=4, help="heads of the ALiBi and T5 biases, 1 .. 8 (default 4)")
    p.add_argument("--base", type=float, default=10000.0,
                   help="sinusoidal base and RoPE theta (default 1e4)")
    p.add_argument("--rope-dim", type=_positive, default=32,
                   help="rotary width of the RoPE playground, even, 2 .. 256 "
                        "(default 32)")
    p.add_argument("--rope-positions", type=_positive, default=48,
                   help="query/key positions of the RoPE playground, 2 .. 64; shifts "
                        "go up to as many (default 48)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random learned table, T5 table and q, k vectors "
                        "(default 0)")
    p.set_defaults(func=_cmd_explore)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``arrpos`` command."""
    from . import __version__

    parser = _Parser(
        prog="arrpos",
        description="Positional encodings on any array library: inspect the install, draw "
                    "encodings, write tables, run the benchmarks, explore interactively.",
        epilog="Run 'arrpos COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"arrpos {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("info", help="version, backends found, compiled kernels, GPU",
                       description="Report the arrpos version, the array libraries found (without "
                                   "importing them), the compiled kernels and any GPU.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("plot", help="draw an encoding to an image file",
                       description="Draw an encoding to an image (PNG, PDF, SVG). Needs "
                                   'matplotlib: pip install matplotlib.',
                       epilog="Example: arrpos plot sinusoidal --length 100 --dim 64 -o pe.png")
    p.set_defaults(func=_cmd_plot)
    _plot_parsers(p.add_subparsers(dest="kind", metavar="KIND", required=True))

    p = sub.add_parser("table", help="write a table to .npy / .npz",
                       description="Compute a table with NumPy and write it with numpy.save "
                                   "(.npy) or numpy.savez (.npz).",
                       epilog="Example: arrpos table sinusoidal --length 2048 --dim 512 -o pe.npy")
    p.set_defaults(func=_cmd_table)
    _table_parsers(p.add_subparsers(dest="kind", metavar="KIND", required=True))

    p = sub.add_parser("bench", help="run the benchmark suite (a table of ratios)",
                       description="Run benchmarks/ of an arrpos checkout: every figure is a "
                                   "ratio to a baseline timed in the same run. Progress goes "
                                   "to stderr, the table to stdout (two lines a row, within "
                                   "120 columns; --csv for a machine-readable table).")
    p.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    p.add_argument("--csv", action="store_true",
                   help="print the rows as CSV (for scripts); the machine and notes go to stderr")
    p.set_defaults(func=_cmd_bench)
    _explore_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    prog = f"arrpos {args.command}" + (f" {args.kind}" if getattr(args, "kind", None) else "")
    try:
        return func(args)
    except BrokenPipeError:  # e.g. "arrpos info | head": stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (CommandError, TypeError, ValueError, OSError) as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130

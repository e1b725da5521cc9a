"""The benchmark runner: ``python -m benchmarks [--quick] [--csv] [--suites dask,rope]`` or
``python benchmarks/run.py``.

Prints one table, each row on two lines to fit 120 columns (the kernel, its size and time; then
its ratios against a memory baseline and against user code), or with ``--csv`` the same rows
as CSV (the machine and the notes then go to stderr). Times are medians of interleaved rounds;
every claim is the ratio in the same row, measured against a baseline timed in the same run.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

if __package__ in (None, ""):  # run as a script: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "benchmarks"

from . import (bench_dask, bench_families, bench_gpu, bench_peers, bench_rope,  # noqa: E402
               bench_simd, bench_sinusoid, bench_threads, bench_train)
from ._timing import format_results, results_csv  # noqa: E402

SUITES = [bench_sinusoid, bench_rope, bench_peers, bench_train, bench_families, bench_threads,
          bench_simd, bench_gpu, bench_dask]


def machine() -> str:
    from arrpos._dispatch import driver

    host = driver("host")
    threads = host.max_threads() if host is not None else 0
    return (f"{_cpu_name()}, {os.cpu_count()} cores, {threads} kernel threads, "
            f"numpy {__import__('numpy').__version__}")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None, progress=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    parser.add_argument("--suites", default=None,
                        help="comma-separated suites to run (e.g. dask,rope; default all)")
    parser.add_argument("--csv", action="store_true",
                        help="the rows as CSV on stdout; the machine and notes on stderr")
    args = parser.parse_args(argv)
    suites = SUITES
    if args.suites:
        names = {s.__name__.rsplit(".", 1)[-1].removeprefix("bench_"): s for s in SUITES}
        unknown = sorted(set(args.suites.split(",")) - set(names))
        if unknown:
            parser.error(f"unknown suites {', '.join(unknown)}; have {', '.join(names)}")
        suites = [names[n] for n in args.suites.split(",")]
    rows, notes = [], []
    for i, suite in enumerate(suites):
        if progress:
            progress(i, len(suites), suite.__name__.rsplit(".", 1)[-1])
        got, note = suite.run(quick=args.quick)
        rows += [(a, b, f"{ms:.3f}", c, d) for a, b, ms, c, d in got]
        if note:
            notes.append(note)
    if args.csv:
        print(f"# machine: {machine()}", file=sys.stderr)
        for note in notes:
            print(f"# note: {note}", file=sys.stderr)
        sys.stdout.write(results_csv(rows))
        return 0
    print(f"machine: {machine()}")
    print(format_results(rows))
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

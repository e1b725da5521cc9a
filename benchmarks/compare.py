"""Before/after rows: ``python -m benchmarks.compare OTHER_TREE [--suites sinusoid,rope]``.

Times the same benchmark rows in this checkout and in another one (a built checkout of an
older commit, say ``git worktree add ../before <commit>`` then ``python setup.py build_ext
--inplace`` there) in alternating subprocesses, so drift on a shared machine hits both alike,
and prints each row's median time in both, the ratio of the medians and the ratio of each
tree's fastest run (the run least disturbed by other work: on a shared machine the medians
carry the neighbours' load). Rows are matched by their (kernel, size) names; a row only one
side has is left out. A ratio above 1 means this checkout is slower.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in a subprocess with one tree first on sys.path: its arrpos and its benchmarks.
_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import importlib
import arrpos
assert arrpos.__file__.startswith(sys.argv[1]), arrpos.__file__
rows = {}
for name in sys.argv[2].split(","):
    suite = importlib.import_module("benchmarks.bench_" + name)
    got = suite.run(quick=True)
    for r in (got[0] if isinstance(got, tuple) else got):
        rows[name + ": " + r[0] + " " + r[1]] = r[2]
print(json.dumps(rows))
"""


def _one_run(tree: str, suites: str, env: dict) -> dict:
    res = subprocess.run([sys.executable, "-c", _DRIVER, os.path.abspath(tree), suites],
                         capture_output=True, text=True, env=env, cwd=os.path.abspath(tree))
    if res.returncode != 0:
        raise SystemExit(f"benchmark run in {tree} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare(other: str, suites: str, runs: int, env=None) -> list:
    """[(row, ms here, ms there, ratio of the medians, (lowest, highest) ratio of one run
    here to the run of the other tree right after it, ratio of the fastest runs)] from
    ``runs`` alternating runs."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONPATH", None)
    here, there = {}, {}
    for _ in range(runs):
        for tree, acc in ((HERE, here), (other, there)):
            for row, ms in _one_run(tree, suites, env).items():
                acc.setdefault(row, []).append(ms)
    out = []
    for row in here:
        if row in there and len(here[row]) == len(there[row]):
            a, b = statistics.median(here[row]), statistics.median(there[row])
            paired = [p / q for p, q in zip(here[row], there[row])]
            out.append((row, a, b, a / b, (min(paired), max(paired)),
                        min(here[row]) / min(there[row])))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    p.add_argument("other", help="another built checkout of arrpos")
    p.add_argument("--suites", default="sinusoid,rope", help="comma-separated: sinusoid,rope,...")
    p.add_argument("--runs", type=int, default=5, help="alternating runs per tree (default 5)")
    args = p.parse_args(argv)
    rows = compare(args.other, args.suites, args.runs)
    from ._timing import format_table

    print(f"this tree: {HERE}\nother: {os.path.abspath(args.other)}\n"
          f"medians of {args.runs} alternating runs (quick rows)")
    print(format_table([(r, f"{a:.3f}", f"{b:.3f}", f"{q:.2f}", f"{lo:.2f}-{hi:.2f}", f"{f:.2f}")
                        for r, a, b, q, (lo, hi), f in rows],
                       ["row", "ms here", "ms other", "here / other", "paired runs",
                        "fastest / fastest"]))
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, HERE)
        __package__ = "benchmarks"
    raise SystemExit(main())

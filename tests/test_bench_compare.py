"""``python -m benchmarks.compare``: rows of two checkouts matched by name, from alternating
subprocess runs (here the checkout against itself: every row appears once, on both sides)."""
from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_compare_matches_rows_of_two_trees(capsys):
    if not os.path.isdir(os.path.join(ROOT, "benchmarks")):
        pytest.skip("no benchmarks/ here (installed package, not a checkout)")
    from arrpos import _dispatch

    if _dispatch.driver("host") is None:
        pytest.skip("the sinusoid rows time the compiled kernels")
    from benchmarks import compare

    rows = compare.compare(ROOT, "sinusoid", 1)
    assert rows and all(r[0].startswith("sinusoid: ") for r in rows)
    assert len({r[0] for r in rows}) == len(rows)
    for _, here, there, ratio, (lo, hi), fastest in rows:
        assert here > 0 and there > 0 and ratio == pytest.approx(here / there)
        assert lo == hi == fastest == pytest.approx(ratio)  # one run: one pair
    assert compare.main([ROOT, "--suites", "sinusoid", "--runs", "1"]) == 0
    printed = capsys.readouterr().out
    assert "here / other" in printed and "fastest / fastest" in printed

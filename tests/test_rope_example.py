"""examples/numpy_llama.py runs: cached token-by-token decoding equals the full forward."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "numpy_llama.py"


def test_numpy_llama_example_runs():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLE.parent.parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    res = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "cached steps; max |cached - full| logits" in res.stdout
    err = float(res.stdout.split("logits = ")[1].split()[0])
    assert err < 1e-9

"""Every command run that README.md and docs/*.md show prints what they show.

A ```text (or ```console) block whose first line starts with ``$ `` is a transcript: each
``$ `` line a command, the lines up to the next one what it prints (stdout, then stderr). Each
command runs here in a temporary directory (``arrpos`` as ``python -m arrpos``, ``python`` as
this interpreter) and must print the transcript, once what varies between machines is
normalised on both sides (numbers and versions, paths, the platform, a backend installed or
not, the GPU line); a transcript that shows an ``error:`` must fail, any other must succeed.

``python -m benchmarks`` times for minutes: it is not run. Its transcript must instead be
exactly what the runner's formatter prints for the rows it shows, so a change of format shows
up here until the README is regenerated.

Every ``arrpos ...`` line of the ```bash blocks must parse with the current command line.
The documents are found by globbing, as in tests/test_readme.py.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from arrpos import _cli, _dispatch

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
NOT_RUN = ("python -m benchmarks",)  # checked by re-rendering instead (see the module doc)


def _blocks(path, kinds):
    return [body for kind, body in _FENCE.findall(path.read_text(encoding="utf-8"))
            if kind in kinds]


def transcripts():
    """(document, command, expected output) for every ``$`` line of every text block."""
    out = []
    for doc in DOCUMENTS:
        for body in _blocks(doc, ("text", "console")):
            if not body.startswith("$ "):
                continue
            command, lines = None, []
            for line in body.splitlines():
                if line.startswith("$ "):
                    if command is not None:
                        out.append((doc, command, "\n".join(lines)))
                    command, lines = line[2:].strip(), []
                else:
                    lines.append(line)
            out.append((doc, command, "\n".join(lines)))
    return out


CASES = transcripts()


def test_transcripts_are_found():
    commands = [c for _, c, _ in CASES]
    assert "arrpos info" in commands and "python -m benchmarks" in commands
    assert any("error:" in expected for _, _, expected in CASES)  # the error examples


def normalise(text):
    """What varies between machines, replaced by placeholders, line by line."""
    out = []
    for line in text.strip("\n").splitlines():
        line = line.rstrip()
        line = re.sub(r"^GPU: .*", "GPU: <gpu>", line)  # the devices of this machine
        line = re.sub(r"^SIMD level: [\w-]+", "SIMD level: <simd>", line)  # this CPU's
        line = re.sub(r"\((?:/|[A-Za-z]:\\)[^)]*\)", "(<path>)", line)
        line = re.sub(r"(?<![\w.])/[\w./+-]+", "<path>", line)
        line = re.sub(r"\bon (?:Linux|Darwin|Windows|FreeBSD) [\w-]+,", "on <platform>,", line)
        line = re.sub(r"not installed(?: \(pip install \w+\))?", "<version>", line)
        line = re.sub(r"(?<![\w.])\d+(?:\.\d+)*(?:[+.][\w.]+)?(?![\w])", "#", line)
        line = line.replace("<version>", "#")
        out.append(line)
    return "\n".join(out)


def test_normalise_keeps_words_and_drops_versions():
    assert normalise("  torch             2.13.0+cpu") == normalise("  torch             not installed")
    assert normalise("arrpos 0.1.0  (/home/me/arrpos/arrpos)") == "arrpos #  (<path>)"
    assert normalise("plots: matplotlib not installed (pip install matplotlib)") == \
        normalise("plots: matplotlib 3.11.2")
    assert normalise("float32, 2 thread(s)") == "float32, # thread(s)"
    assert normalise("thread pool on") != normalise("own pool")


def _argv(command):
    words = shlex.split(command)
    if words[0] == "arrpos":
        return [sys.executable, "-m", "arrpos", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    raise AssertionError(f"a transcript runs arrpos or python, not {words[0]!r}")


@pytest.mark.parametrize("doc, command, expected", CASES,
                         ids=[f"{d.name}: {c}" for d, c, _ in CASES])
def test_transcript_prints_what_the_docs_show(doc, command, expected, tmp_path):
    if command.startswith(NOT_RUN):
        pytest.skip("not run (minutes of timing); test_benchmark_transcript_is_current checks it")
    if command.startswith("arrpos info"):
        if not _dispatch.compiled_available(ignore_switch=True)[0]:
            pytest.skip("the transcript shows built kernels; they are not built here")
        if "matplotlib" in expected and "plots: matplotlib not" not in expected:
            pytest.importorskip("matplotlib")
    env = {k: v for k, v in os.environ.items() if k != "ARRPOS_NO_EXTENSIONS"}  # as shown
    res = subprocess.run(_argv(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    got = res.stdout + res.stderr
    where = f"{doc.name}: $ {command}"
    if "error:" in expected:
        assert res.returncode != 0, f"{where} no longer fails:\n{got}"
    else:
        assert res.returncode == 0, f"{where} failed:\n{got}"
    assert normalise(got) == normalise(expected), (
        f"{where} prints something else than the docs show.\nprinted:\n{got}\ndocs:\n{expected}")


BENCH_CASES = [(c, e) for _, c, e in CASES if c.startswith(NOT_RUN)]


def test_benchmark_transcripts_are_found():
    assert [c for c, _ in BENCH_CASES] == ["python -m benchmarks",
                                           "python -m benchmarks --suites families,dask"]


@pytest.mark.parametrize("command, expected", BENCH_CASES, ids=[c for c, _ in BENCH_CASES])
def test_benchmark_transcript_is_current_format(command, expected):
    """The README's benchmark tables are what the runner's formatter prints for those rows."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks._timing import WIDTH, format_results, parse_results
    finally:
        sys.path.remove(str(ROOT))
    lines = expected.splitlines()
    assert lines[0].startswith("machine: ")
    notes = [line for line in lines if line.startswith("note: ")]
    table = "\n".join(line for line in lines[1:] if not line.startswith("note: "))
    rows = parse_results(table)
    assert len(rows) > 20 and all(len(r) == 5 for r in rows)
    assert format_results(rows) == table, "the README's table is not in the runner's format"
    assert lines[1 + len(table.splitlines()):] == notes  # the notes come last
    assert max(len(line) for line in lines) <= WIDTH


def _arrpos_lines():
    out = []
    for doc in DOCUMENTS:
        for body in _blocks(doc, ("bash", "sh", "shell")):
            for line in body.splitlines():
                line = line.split("#", 1)[0].strip()
                for part in re.split(r"&&|;|\|", line):
                    part = part.strip()
                    if part.startswith("arrpos "):
                        out.append((doc, part))
    return out


BASH_LINES = _arrpos_lines()


def test_bash_blocks_are_found():
    assert len(BASH_LINES) >= 10


@pytest.mark.parametrize("doc, command", BASH_LINES,
                         ids=[f"{d.name}: {c}" for d, c in BASH_LINES])
def test_documented_command_line_parses(doc, command, capsys):
    parser = _cli.build_parser()
    try:
        parser.parse_args(shlex.split(command)[1:])
    except SystemExit as exc:  # the parser's one-line error
        pytest.fail(f"{doc.name}: {command!r} no longer parses: {capsys.readouterr().err}"
                    f" (exit {exc.code})")

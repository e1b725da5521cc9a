"""Interleaved timing: candidates and baselines run in turns (A, B, A, B, ...) after a warm-up,
and each is summarised by its median, so drift on a shared machine hits all of them alike."""
from __future__ import annotations

import re
import statistics
import time


def interleaved(funcs: dict, *, rounds: int = 15, warmup: int = 2, min_time: float = 0.02):
    """Median seconds per call of each function in ``funcs``, timed in interleaved rounds.

    Fast calls are repeated inside a round until it lasts ``min_time``.
    """
    reps = {}
    for name, fn in funcs.items():
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-7)
        reps[name] = max(1, int(min_time / one))
    samples = {name: [] for name in funcs}
    for _ in range(rounds):
        for name, fn in funcs.items():
            n = reps[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(v) for name, v in samples.items()}


def one_thread(fn):
    """``fn`` as a call whose compiled kernels use one CPU thread (``one_thread_per_call``, as a
    Dask task runs them): the one-thread rows."""
    from arrpos._backends import one_thread_per_call

    def call():
        with one_thread_per_call():
            return fn()
    return call


def fill_text(t, mine, stream):
    """A table row's time as multiples of ``fill`` of the same buffer (ordinary stores: from
    the L3 cache where the buffer fits, as a repeated fill finds it) and of the streaming fill
    (the write limit, which the table kernels' streaming stores meet)."""
    return f"{t[mine] / t['fill']:.2f} x fill, {t[mine] / t[stream]:.2f} x streaming fill"


def format_table(rows, headers) -> str:
    cols = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(headers))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                               for i, (c, w) in enumerate(zip(r, widths)))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in cols[1:]])


# The runner's table: each row on two lines, so that it fits WIDTH columns: the kernel, its size
# and its time, then, indented, the two comparisons ("vs memory baseline | vs user code"),
# wrapped at spaces under the same indent when they are longer than the line.
WIDTH = 120
RESULT_HEADERS = ("kernel", "size", "ms", "vs memory baseline", "vs user code")
_INDENT, _MORE = "    ", "      "


def _detail(memory: str, user: str) -> str:
    if memory and user:
        return f"{memory} | {user}"
    return f"| {user}" if user else memory


def format_results(rows, width: int = WIDTH) -> str:
    """The result rows ``(kernel, size, ms, vs memory, vs user code)`` as text, two lines (or
    more, wrapped) a row, no line longer than ``width`` unless one name alone is."""
    import textwrap

    rows = [[str(c) for c in r] for r in rows]
    w_kernel = max([len(r[0]) for r in rows] + [len(RESULT_HEADERS[0])])
    w_size = max([len(r[1]) for r in rows] + [len(RESULT_HEADERS[1])])
    w_ms = max([len(r[2]) for r in rows] + [len(RESULT_HEADERS[2])])

    def first(kernel, size, ms):
        return f"{kernel.ljust(w_kernel)}  {size.ljust(w_size)}  {ms.rjust(w_ms)}"

    def second(text):
        return textwrap.wrap(text, width, initial_indent=_INDENT, subsequent_indent=_MORE,
                             break_long_words=False, break_on_hyphens=False) or [""]

    lines = [first(*RESULT_HEADERS[:3])] + second(_detail(*RESULT_HEADERS[3:]))
    lines.append("-" * min(width, len(first("", "", ""))))
    for kernel, size, ms, memory, user in rows:
        lines.append(first(kernel, size, ms))
        lines += [line for line in second(_detail(memory, user)) if line]
    return "\n".join(lines)


def parse_results(text: str):
    """The rows of a table that ``format_results`` printed (the inverse, for tests and docs)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    rows, detail = [], []

    def close():
        if rows:
            text = " ".join(detail)
            if text.startswith("| "):
                memory, user = "", text[2:]
            elif " | " in text:
                memory, user = text.split(" | ", 1)
            else:
                memory, user = text, ""
            rows[-1] += [memory, user]

    for line in lines[start:]:
        if not line.strip():
            continue
        if line.startswith(" "):
            detail.append(line.strip())
            continue
        close()
        detail = []
        cells = re.split(r"\s{2,}", line.strip())
        rows.append(cells if len(cells) == 3 else [cells[0], "", cells[-1]])
    close()
    return [tuple(r) for r in rows]


def results_csv(rows) -> str:
    """The result rows as CSV with a header line (``--csv``: for scripts and spreadsheets)."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RESULT_HEADERS)
    writer.writerows([[str(c) for c in r] for r in rows])
    return buf.getvalue()

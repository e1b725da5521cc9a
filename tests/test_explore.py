"""``arrpos explore``: the page the command writes, loaded in a real headless Chromium.

The browser tests move controls of every panel (arrow keys on focused sliders, selects, values
set with an ``input`` event) and compare the numbers the page then shows with float64 NumPy
computations written here from the formulas (sinusoids, rotations, T5 buckets, ALiBi slopes, the
three properties). Only inputs are read from the page's embedded data: the random q, k vectors
and the random T5 table. The layout is checked by element geometry at 1280 x 900 and 420 x 900
in every encoding of every panel (nothing wider than its panel or the window, no blank stretch,
figures and readouts that stay put); screenshots are taken and their pixels checked to be
non-blank.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package (``.ci/run``
installs them); without them the browser tests are skipped, the others run.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from arrpos import _cli

ROOT = Path(__file__).resolve().parent.parent
PANELS = ("sine-explorer", "embedding-visualiser", "rotation-explorer", "rope-playground",
          "properties", "bit-flipping")
BROWSER_DEADLINE_S = 300  # the whole browser session; chromedriver is killed after it
TOL = 1.2e-4  # the page shows 4 decimals of values embedded with 7


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "arrpos", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


# --------------------------------------------------------------------------- command and page


def test_help_lists_the_options():
    res = run_cli("explore", "--help")
    assert res.returncode == 0, res.stderr
    for opt in ("-o FILE.html", "--no-browser", "--length", "--dim", "--heads", "--rope-dim",
                "--rope-positions", "--seed", "(default 48)"):
        assert opt in res.stdout, opt


@pytest.mark.parametrize("args, words", [
    (("--dim", "7"), ("--dim", "even", "7")),
    (("--length", "2"), ("--length", "[3, 128]", "2")),
    (("--rope-positions", "65"), ("--rope-positions", "[2, 64]", "65")),
    (("--rope-dim", "5"), ("--rope-dim", "even")),
    (("--base", "nan"), ("--base", "nan")),
    (("--seed", "-1"), ("--seed", ">= 0", "-1")),
])
def test_bad_sizes_are_one_line_errors(tmp_path, args, words):
    res = run_cli("explore", *args, "-o", str(tmp_path / "p.html"))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (tmp_path / "p.html").exists()


def test_unwritable_output_is_a_one_line_error(tmp_path):
    res = run_cli("explore", "--length", "8", "-o", str(tmp_path / "no-such-dir" / "p.html"))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "p.html" in res.stderr


@pytest.fixture(scope="module")
def page_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("explore") / "page.html"
    res = run_cli("explore", "-o", str(path))
    assert res.returncode == 0, res.stderr
    assert str(path) in res.stdout
    return path


def page_data(path):
    html = path.read_text(encoding="utf-8")
    m = re.search(r'<script id="arrpos-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_page_is_offline_and_self_contained(page_path):
    html = page_path.read_text(encoding="utf-8")
    assert not re.search(r"(?i)\b(?:https?|wss?|ftp):", html), "a network address in the page"
    assert not re.search(r"(?i)<(?:link|img|iframe|object|embed|base)\b", html)
    assert not re.search(r"(?i)<[a-z][^>]*\s(?:src|href|srcset|action)\s*=", html), \
        "a resource loaded from elsewhere"
    for call in ("fetch(", "XMLHttpRequest", "WebSocket", "EventSource", "import(", "@import",
                 "url(", "sendBeacon"):
        assert call not in html, call
    assert html.count("<script") == 2  # the data and the project's own script, both inline
    for panel in PANELS:
        assert f'<section id="{panel}"' in html
    # every control has a label naming it
    for control in re.findall(r'<(?:input|select)[^>]*\bid="([^"]+)"', html):
        assert f'<label for="{control}"' in html, control


def test_without_output_writes_a_temp_file_and_opens_it(monkeypatch, capsys):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: opened.append(url) or True)
    assert _cli.main(["explore", "--length", "8", "--dim", "8", "--rope-positions", "4"]) == 0
    path = Path(re.search(r"wrote (\S+\.html)", capsys.readouterr().out).group(1))
    try:
        assert opened == [path.resolve().as_uri()]
        assert page_data(path)["sizes"]["length"] == 8
    finally:
        path.unlink()


def test_no_browser_only_prints_the_path(monkeypatch, capsys):
    monkeypatch.setattr("webbrowser.open", lambda *a, **k: pytest.fail("browser opened"))
    assert _cli.main(["explore", "--no-browser", "--length", "8", "--dim", "8",
                      "--rope-positions", "4"]) == 0
    path = Path(re.search(r"wrote (\S+\.html)", capsys.readouterr().out).group(1))
    assert path.is_file() and path.name.startswith("arrpos-explore-")
    path.unlink()


# ------------------------------------------------------------------------------ the browser


def _browser_or_skip():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_exe = shutil.which("chromedriver")
    if not chromium or not driver_exe:
        pytest.skip("chromium and chromedriver not installed (apt-get install chromium "
                    "chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    # scroll bars shown (they take room from the page, as on a desktop), one pixel per CSS pixel
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--force-device-scale-factor=1", "--window-size=1280,900"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(driver_exe)
    return webdriver.Chrome(service=service, options=opts), service


@pytest.fixture(scope="module")
def browser(page_path):
    driver, service = _browser_or_skip()
    # a hung browser must not hang the suite: past the deadline chromedriver is killed, and
    # every pending or later call fails
    watchdog = threading.Timer(BROWSER_DEADLINE_S, service.process.kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(30)
        driver.get(page_path.resolve().as_uri())
        assert driver.execute_script("return document.body.dataset.ready") == "1"
        yield driver
    finally:
        watchdog.cancel()
        driver.quit()


def _by_id():
    from selenium.webdriver.common.by import By

    return By.ID


def shown(driver, element_id):
    return driver.find_element(_by_id(), element_id).text.strip()


def number(driver, element_id):
    return float(shown(driver, element_id))


def set_control(driver, element_id, value):
    """Set a slider or select like a script would, then fire the events a user's move fires."""
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input', {bubbles: true}));"
        "e.dispatchEvent(new Event('change', {bubbles: true}));", element_id, str(value))
    assert driver.find_element(_by_id(), element_id).get_attribute("value") == str(value)


def press(driver, element_id, key, times):
    from selenium.webdriver.common.keys import Keys

    el = driver.find_element(_by_id(), element_id)
    for _ in range(times):
        el.send_keys(getattr(Keys, key))


def choose(driver, element_id, value):
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(_by_id(), element_id)).select_by_value(value)


def test_console_has_no_errors(browser):
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_sine_explorer(browser):
    press(browser, "sine-frequency", "ARROW_RIGHT", 3)  # 0.20 -> 0.35, with the keyboard
    assert shown(browser, "sine-frequency-value") == "0.35"
    set_control(browser, "sine-amplitude", 1.5)
    set_control(browser, "sine-phase", 45)
    set_control(browser, "sine-position", 3.7)
    angle = 2 * math.pi * 0.35 * 3.7 + math.radians(45)
    assert number(browser, "sine-sin") == pytest.approx(1.5 * math.sin(angle), abs=TOL)
    assert number(browser, "sine-cos") == pytest.approx(1.5 * math.cos(angle), abs=TOL)
    assert number(browser, "sine-angle") == pytest.approx(angle % (2 * math.pi), abs=TOL)


def vaswani(p, j, dim, base=10000.0, layout="interleaved"):
    """Entry (p, j) of the sinusoidal table, from the paper's formula."""
    if layout == "interleaved":
        w = base ** (-2 * (j // 2) / dim)
        return math.sin(p * w) if j % 2 == 0 else math.cos(p * w)
    half = dim // 2
    w = base ** (-2 * (j % half) / dim)
    return math.sin(p * w) if j < half else math.cos(p * w)


def t5_bucket(rel, num_buckets=32, max_distance=128):
    """T5's bidirectional bucket of key - query (Raffel et al.; mesh-tensorflow)."""
    half = num_buckets // 2
    bucket = half if rel > 0 else 0
    n, exact = abs(rel), half // 2
    if n < exact:
        return bucket + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (half - exact))
    return bucket + min(large, half - 1)


def alibi_slope(h, heads, max_bias=8.0):  # heads a power of two here
    return 2.0 ** (-max_bias * (h + 1) / heads)


def test_embedding_visualiser(browser, page_path):
    data, sizes = page_data(page_path), page_data(page_path)["sizes"]
    L, dim, heads = sizes["length"], sizes["dim"], sizes["heads"]
    set_control(browser, "embedding-position", 7)
    set_control(browser, "embedding-dimension", 13)
    assert number(browser, "embedding-value") == pytest.approx(vaswani(7, 13, dim), abs=TOL)
    press(browser, "embedding-dimension", "ARROW_RIGHT", 2)  # feature 15
    assert number(browser, "embedding-value") == pytest.approx(vaswani(7, 15, dim), abs=TOL)
    choose(browser, "embedding-encoding", "sinusoidal-split")
    set_control(browser, "embedding-dimension", 40)
    assert number(browser, "embedding-value") == pytest.approx(
        vaswani(7, 40, dim, layout="split"), abs=TOL)
    choose(browser, "embedding-encoding", "rope-cos")  # half layout: cos(p theta_{j mod d/2})
    assert number(browser, "embedding-value") == pytest.approx(
        math.cos(7 * 10000.0 ** (-2 * (40 % (dim // 2)) / dim)), abs=TOL)
    choose(browser, "embedding-encoding", "alibi")
    set_control(browser, "embedding-head", 2)
    set_control(browser, "embedding-position", 30)
    set_control(browser, "embedding-dimension", 12)
    assert number(browser, "embedding-value") == pytest.approx(
        -alibi_slope(2, heads) * (30 - 12), abs=TOL)
    set_control(browser, "embedding-dimension", 31)  # a future key: 0 in the causal form
    assert number(browser, "embedding-value") == 0.0
    choose(browser, "embedding-encoding", "t5")
    table = np.asarray(data["tables"]["t5"]["table"])  # the random (buckets, heads) input
    for q, k in ((30, 31), (30, 2), (5, 40)):
        set_control(browser, "embedding-position", q)
        set_control(browser, "embedding-dimension", k)
        assert number(browser, "embedding-value") == pytest.approx(
            table[t5_bucket(k - q), 2], abs=TOL), (q, k)
        assert shown(browser, "embedding-detail") == f"bucket {t5_bucket(k - q)}"
    choose(browser, "embedding-encoding", "learned-random")
    assert browser.find_element(_by_id(), "embedding-head").get_attribute("disabled")
    learned = np.asarray(data["tables"]["learned-random"]["values"])
    assert learned.shape == (L, dim) and 0.015 < learned.std() < 0.025  # normal, std 0.02
    set_control(browser, "embedding-position", 3)
    set_control(browser, "embedding-dimension", 5)
    assert number(browser, "embedding-value") == pytest.approx(learned[3, 5], abs=TOL)


def test_rotation_explorer(browser):
    press(browser, "rotation-angle", "ARROW_RIGHT", 3)  # 45 -> 60 degrees
    assert shown(browser, "rotation-angle-value") == "60\u00b0"
    set_control(browser, "rotation-x1", -0.5)
    set_control(browser, "rotation-x2", 0.75)
    t = math.radians(60)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    got = np.array([[number(browser, "rotation-m00"), number(browser, "rotation-m01")],
                    [number(browser, "rotation-m10"), number(browser, "rotation-m11")]])
    np.testing.assert_allclose(got, rot, atol=6e-4)
    v = np.array([-0.5, 0.75])
    assert [number(browser, "rotation-v1"), number(browser, "rotation-v2")] == [-0.5, 0.75]
    r = [number(browser, "rotation-r1"), number(browser, "rotation-r2")]
    np.testing.assert_allclose(r, rot @ v, atol=6e-4)
    assert math.hypot(*r) == pytest.approx(math.hypot(*v), abs=1.5e-3)  # a rotation


def rope_score(q, k, m, n, base=10000.0):
    """<R_m q, R_n k> with interleaved pairs, a float64 loop over the pairs."""
    total = 0.0
    for i in range(len(q) // 2):
        theta = base ** (-2 * i / len(q))
        a, b = m * theta, n * theta
        q0, q1 = q[2 * i], q[2 * i + 1]
        k0, k1 = k[2 * i], k[2 * i + 1]
        rq = (q0 * math.cos(a) - q1 * math.sin(a), q0 * math.sin(a) + q1 * math.cos(a))
        rk = (k0 * math.cos(b) - k1 * math.sin(b), k0 * math.sin(b) + k1 * math.cos(b))
        total += rq[0] * rk[0] + rq[1] * rk[1]
    return total


def test_rope_playground(browser, page_path):
    rope = page_data(page_path)["rope"]
    q, k, d = rope["q"], rope["k"], rope["dim"]  # the page's random inputs
    set_control(browser, "rope-m", 17)
    set_control(browser, "rope-n", 9)
    press(browser, "rope-shift", "ARROW_RIGHT", 23)
    set_control(browser, "rope-pair", 3)
    assert shown(browser, "rope-distance") == "8"
    assert shown(browser, "rope-shifted") == "(40, 32)"
    score, shifted = number(browser, "rope-score"), number(browser, "rope-score-shifted")
    assert score == pytest.approx(rope_score(q, k, 17, 9), abs=TOL)
    assert shifted == pytest.approx(rope_score(q, k, 40, 32), abs=TOL)
    assert shifted == pytest.approx(score, abs=TOL)  # invariance under a common shift
    assert rope_score(q, k, 17, 9) != pytest.approx(rope_score(q, k, 17, 10), abs=1e-2)
    assert number(browser, "rope-theta") == pytest.approx(10000.0 ** (-6 / d), abs=2e-6)
    # RoFormer's decay at r = 8: <R_8 1, R_0 1> / d = mean_i cos(8 theta_i)
    decay = np.mean([math.cos(8 * 10000.0 ** (-2 * i / d)) for i in range(d // 2)])
    assert number(browser, "rope-decay-value") == pytest.approx(decay, abs=TOL)


def reference_properties(phi):
    """Monotonicity, translation invariance, symmetry of a proximity matrix, as loops."""
    n = len(phi)
    m = max(2, n // 2)
    rhos = []
    for sign, anchors in ((1, range(n - m)), (-1, range(m, n))):
        for x in anchors:
            prox = [phi[x][x + sign * s] for s in range(1, m + 1)]
            order = sorted(range(m), key=lambda j: -prox[j])  # stable: ties keep their order
            rank = {j: r for r, j in enumerate(order)}
            rhos.append(1 - 6 * sum((rank[j] - j) ** 2 for j in range(m)) / (m * (m * m - 1)))
    pairs = [(x, y) for x in range(n) for y in range(n) if x != y]
    mean = sum(phi[x][y] for x, y in pairs) / len(pairs)
    total = sum((phi[x][y] - mean) ** 2 for x, y in pairs)
    by_offset = {}
    for x, y in pairs:
        by_offset.setdefault(y - x, []).append(phi[x][y])
    within = sum(sum((v - sum(vs) / len(vs)) ** 2 for v in vs) for vs in by_offset.values())
    cross = sum((phi[x][y] - mean) * (phi[y][x] - mean) for x, y in pairs)
    return sum(rhos) / len(rhos), 1 - within / total, cross / total


def test_properties(browser, page_path):
    sizes = page_data(page_path)["sizes"]
    L, dim, heads = sizes["length"], sizes["dim"], sizes["heads"]
    choose(browser, "properties-encoding", "sinusoidal-split")
    choose(browser, "properties-metric", "cosine")
    set_control(browser, "properties-x", 10)
    press(browser, "properties-y", "ARROW_LEFT", 2)  # 14 -> 12
    pe = np.array([[vaswani(p, j, dim, layout="split") for j in range(dim)] for p in range(L)])
    unit = pe / np.linalg.norm(pe, axis=1, keepdims=True)
    phi = unit @ unit.T
    assert number(browser, "properties-phi-xy") == pytest.approx(phi[10, 12], abs=TOL)
    assert number(browser, "properties-phi-yx") == pytest.approx(phi[12, 10], abs=TOL)
    assert number(browser, "properties-phi-next") == pytest.approx(phi[11, 13], abs=TOL)
    want = reference_properties(phi.tolist())
    for name, value in zip(("monotonicity", "translation", "symmetry"), want):
        assert number(browser, f"properties-{name}") == pytest.approx(value, abs=TOL), name
    choose(browser, "properties-encoding", "alibi")
    assert browser.find_element(_by_id(), "properties-metric").get_attribute("disabled")
    set_control(browser, "properties-head", 1)
    s = alibi_slope(1, heads)
    bias = [[-s * (x - y) if y <= x else 0.0 for y in range(L)] for x in range(L)]
    assert number(browser, "properties-phi-xy") == pytest.approx(bias[10][12], abs=TOL)
    assert number(browser, "properties-phi-yx") == pytest.approx(bias[12][10], abs=TOL)
    want = reference_properties(bias)
    assert want[2] < 0  # the causal bias is far from symmetric: the check can fail
    for name, value in zip(("monotonicity", "translation", "symmetry"), want):
        assert number(browser, f"properties-{name}") == pytest.approx(value, abs=TOL), name


def test_bit_flipping(browser):
    press(browser, "bits-position", "ARROW_RIGHT", 6)  # 5 -> 11
    assert shown(browser, "bits-binary-value") == "1011"
    for j in range(4):  # pair j turns at pi / 2**j per position: period 2**(j+1), as bit j
        a = math.pi * 11 / 2**j
        got = [float(x) for x in shown(browser, f"bits-pair-{j}").split(",")]
        np.testing.assert_allclose(got, [math.sin(a), math.cos(a)], atol=TOL)


# ------------------------------------------------------------------------------ screenshots


def decode_png(png):
    mpimg = pytest.importorskip("matplotlib.image", reason="matplotlib decodes the screenshots")
    img = mpimg.imread(io.BytesIO(png), format="png")
    return np.round(np.asarray(img)[..., :3] * 255).astype(np.uint8)


def assert_not_blank(png, what):
    rgb = decode_png(png)
    colours = np.unique(rgb.reshape(-1, 3), axis=0)
    assert len(colours) >= 16, f"{what}: only {len(colours)} colours"
    lum = rgb.astype(float).mean(axis=2)
    assert lum.std() > 10, f"{what}: almost uniform"
    # the figures' ink is there: a strongly coloured pixel (the blue and red of the curves/maps)
    spread = rgb.max(axis=2).astype(int) - rgb.min(axis=2)
    assert (spread > 100).sum() > 50, f"{what}: no coloured drawing"
    return rgb


# ------------------------------------------------------------------------ layout, by geometry

# One script measures a panel: every element's box against the panel's and the window's, the
# elements whose content is wider than their box, the blank height under the panel's last
# child, canvases whose labels did not fit, and the boxes of the elements named.
_GEOMETRY = r"""
const [panelId, ids] = arguments;
const panel = document.getElementById(panelId), root = document.documentElement;
const pr = panel.getBoundingClientRect(), ps = getComputedStyle(panel);
const left = pr.left + parseFloat(ps.borderLeftWidth), right = pr.right - parseFloat(ps.borderRightWidth);
const out = {panel: [pr.left, pr.top, pr.width, pr.height], outside: [], clipped: [],
             view: root.clientWidth, pageOverflow: root.scrollWidth - root.clientWidth, boxes: {}};
for (const e of [panel, ...panel.querySelectorAll("*")]) {
  if (e.closest("option")) continue;  // an option's box is the closed select's, not its own
  const r = e.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  const name = e.tagName.toLowerCase() + (e.id ? "#" + e.id : "");
  if (e !== panel && (r.left < left - 0.5 || r.right > right + 0.5))
    out.outside.push([name, Math.round(r.left - left), Math.round(r.right - right)]);
  if (r.left < -0.5 || r.right > root.clientWidth + 0.5)
    out.outside.push([name + " (window)", Math.round(r.left), Math.round(r.right)]);
  if (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
    out.outside.push([name + " (content wider than its box)", e.scrollWidth, e.clientWidth]);
  if (e.dataset && e.dataset.clipped) out.clipped.push(name + ": " + e.dataset.clipped);
}
let last = pr.top;
for (const c of panel.children) last = Math.max(last, c.getBoundingClientRect().bottom);
out.blank = pr.bottom - parseFloat(ps.borderBottomWidth) - parseFloat(ps.paddingBottom) - last;
for (const id of ids) {
  const r = document.getElementById(id).getBoundingClientRect();
  out.boxes[id] = [r.left, r.top + scrollY, r.width, r.height].map((v) => Math.round(v * 10) / 10);
}
return out;
"""
MAX_BLANK_PX = 48  # under a panel's last child: 3 lines of text at most

# Per panel: the states to visit (every encoding, the bias heads and metrics) and the elements
# whose place and size must not change between them.
_ENCODINGS = ("sinusoidal-interleaved", "sinusoidal-split", "rope-cos", "learned-random",
              "alibi", "t5")
LAYOUT_STATES = {
    "sine-explorer": ([], [{"sine-amplitude": a, "sine-frequency": f, "sine-phase": p}
                           for a, f, p in ((2, 1, 345), (0, 0.05, 0), (1, 0.2, 0))]),
    "embedding-visualiser": (
        ["embedding-heatmap", "embedding-readout", "embedding-row"],
        [{"embedding-encoding": e, "embedding-head": h, "embedding-position": p,
          "embedding-dimension": d}
         for e in _ENCODINGS for h, p, d in ((0, 0, 0), (3, 47, 47), (1, 30, 3))]),
    "rotation-explorer": (["rotation-plot", "rotation-curve"],
                          [{"rotation-angle": a, "rotation-x1": x1, "rotation-x2": x2}
                           for a, x1, x2 in ((355, -1, -1), (0, 0, 0), (45, 1, 0))]),
    "rope-playground": (["rope-scores", "rope-decay"],
                        [{"rope-m": m, "rope-n": n, "rope-shift": s, "rope-pair": i}
                         for m, n, s, i in ((47, 0, 48, 15), (0, 47, 0, 0), (5, 2, 0, 0))]),
    "properties": (
        ["properties-similarity", "properties-row"],
        [{"properties-encoding": e, "properties-metric": m, "properties-head": h,
          "properties-x": x, "properties-y": y}
         for e in _ENCODINGS for m in ("dot", "cosine") for h, x, y in ((3, 47, 0), (0, 10, 14))]),
    "bit-flipping": (["bits-binary", "bits-sinusoidal"],
                     [{"bits-position": p} for p in (15, 0, 5)]),
}
# the readout of the properties keeps its box too, but may sit beside or under the map
READOUTS = {"properties": "properties-monotonicity", "embedding-visualiser": "embedding-value"}


def _settle(browser):
    """Wait for two animation frames: the page redraws on resize in one."""
    browser.execute_async_script(
        "requestAnimationFrame(() => requestAnimationFrame(arguments[arguments.length - 1]))")


def _set_state(browser, state):
    for control, value in state.items():
        if control.endswith("-metric") and browser.find_element(
                _by_id(), control).get_attribute("disabled"):
            continue  # a bias is selected: the similarity is not the user's to choose
        set_control(browser, control, value)


@pytest.mark.parametrize("width, height", [(1280, 900), (420, 900)])
def test_layout_by_geometry(browser, width, height):
    """At both widths, in every state of every panel: nothing wider than its panel or the window
    (no sideways scrolling, no clipped value), no blank stretch under a panel's content, the
    figures and the readout in the same place and size for every encoding, and every label
    drawn on a canvas fits."""
    browser.set_window_size(width, height)
    _settle(browser)
    assert browser.execute_script("return window.innerWidth") == width
    report = {}
    for panel, (fixed, states) in LAYOUT_STATES.items():
        ids = fixed + ([READOUTS[panel]] if panel in READOUTS else [])
        first = None
        for state in states:
            _set_state(browser, state)
            g = browser.execute_script(_GEOMETRY, panel, ids)
            where = f"{panel} at {width}px in {state}"
            assert g["pageOverflow"] <= 0, f"{where}: the page scrolls sideways"
            assert not g["outside"], f"{where}: {g['outside']}"
            assert not g["clipped"], f"{where}: labels that do not fit: {g['clipped']}"
            assert g["blank"] <= MAX_BLANK_PX, f"{where}: {g['blank']:.0f} px blank"
            if first is None:
                first = g
            else:
                assert g["boxes"] == first["boxes"], f"{where}: moved {first['boxes']}"
                assert g["panel"][3] == pytest.approx(first["panel"][3], abs=0.5), where
        report[panel] = (round(first["panel"][3]), round(first["blank"]))
    print(f"{width}x{height}: panel height, blank px:", report)


def test_disabled_controls_say_so(browser):
    choose(browser, "properties-encoding", "sinusoidal-interleaved")
    choose(browser, "properties-metric", "cosine")
    assert shown(browser, "properties-head-value") == "\u2013"
    choose(browser, "properties-encoding", "alibi")
    sel = browser.find_element(_by_id(), "properties-metric")
    assert sel.get_attribute("disabled") and sel.get_attribute("value") == "bias"
    choose(browser, "properties-encoding", "rope-cos")  # the table's similarity comes back
    assert sel.get_attribute("value") == "cosine" and not sel.get_attribute("disabled")
    choose(browser, "embedding-encoding", "learned-random")
    assert shown(browser, "embedding-head-value") == "\u2013"
    assert shown(browser, "embedding-detail") == "\u2013"


@pytest.mark.parametrize("width, height", [(1280, 900), (420, 900)])
def test_screenshots_are_drawn(browser, width, height):
    browser.set_window_size(width, height)
    _settle(browser)
    browser.execute_script("window.scrollTo(0, 0)")
    for panel in PANELS:
        el = browser.find_element(_by_id(), panel)
        browser.execute_script("arguments[0].scrollIntoView()", el)
        assert_not_blank(el.screenshot_as_png, f"{panel} at {width}px")
    browser.execute_script("window.scrollTo(0, 0)")
    png = browser.get_screenshot_as_png()
    assert_not_blank(png, f"window at {width}x{height}")
    if width == 1280 and os.environ.get("ARRPOS_UPDATE_SCREENSHOT") == "1":
        _save_readme_screenshot(browser)


def _save_readme_screenshot(browser):
    """docs/explore.png: the rotation explorer and the RoPE playground in a set state, as a
    palette PNG under 150 KB (ARRPOS_UPDATE_SCREENSHOT=1 python -m pytest tests/test_explore.py)."""
    from PIL import Image

    for control, value in (("rotation-angle", 60), ("rotation-x1", 0.75), ("rotation-x2", 0.5),
                           ("rope-m", 17), ("rope-n", 9), ("rope-shift", 23), ("rope-pair", 2)):
        set_control(browser, control, value)
    browser.set_window_size(1280, 1300)
    _settle(browser)
    top = browser.find_element(_by_id(), "rotation-explorer")
    browser.execute_script("window.scrollTo(0, arguments[0].getBoundingClientRect().top"
                           " + window.scrollY - 10)", top)
    box = browser.execute_script(  # the page's width: no scroll bar in the picture
        "const r = document.getElementById('rope-playground').getBoundingClientRect();"
        "return [r.bottom + 10, document.documentElement.clientWidth];")
    img = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    img = img.crop((0, 0, min(img.width, int(box[1])), min(img.height, int(box[0]))))
    img = img.quantize(colors=96, method=Image.Quantize.MEDIANCUT)
    out = ROOT / "docs" / "explore.png"
    img.save(out, optimize=True)
    assert out.stat().st_size < 150_000, out.stat().st_size
    browser.set_window_size(1280, 900)

"""``arrpos explore``: the data and the page of the interactive explorer.

The page is one self-contained HTML file: the project's own CSS and JavaScript (in
``arrpos/_explore_page/``) and, as JSON, every number the page can show, computed here with the
public arrpos functions for every position of every slider the page offers. The browser only
looks values up and draws them; nothing is fetched at run time (see docs/explore.md).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

import numpy as np

import arrpos

__all__ = ["ExploreSizes", "explore_data", "explore_html"]

# Sine explorer grids: frequency f = k/20 (k = 1..20), position t = j/10 (j = 0..100), phase in
# steps of 15 degrees. Then 2*pi*f*t + phase = 2*pi*(3*k*j + 25*p)/600: a table of 600 angles
# holds every value the sliders can reach (sin and cos are 2*pi periodic).
SINE_STEPS = 600
ROTATION_ANGLES = tuple(range(0, 360, 5))  # degrees
ROTATION_COMPONENTS = tuple(i / 4 for i in range(-4, 5))  # -1 .. 1 in steps of 0.25
_DIGITS = 7  # decimals kept in the page (the page shows 4)


@dataclass(frozen=True)
class ExploreSizes:
    """Sizes of the tables the page embeds (the command line's options)."""

    length: int = 48  # positions of the tables and biases
    dim: int = 64  # features of the tables
    heads: int = 4  # heads of the ALiBi and T5 biases
    base: float = 10000.0  # sinusoidal base and rope_theta
    rope_dim: int = 32  # rotary width of the RoPE playground
    rope_positions: int = 48  # query/key positions offered; shifts 0 .. rope_positions
    num_buckets: int = 32  # T5 buckets
    max_distance: int = 128  # T5 distance of the last bucket
    seed: int = 0  # learned table, T5 table, q and k

    def check(self) -> None:
        """Raise ValueError naming the first size out of range."""
        limits = {"length": (3, 128), "dim": (2, 256), "heads": (1, 8),
                  "rope_dim": (2, 256), "rope_positions": (2, 64), "num_buckets": (2, 256),
                  "max_distance": (1, 10**6)}
        for name, (lo, hi) in limits.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(f"--{name.replace('_', '-')} must be in [{lo}, {hi}], got {value}")
        for name in ("dim", "rope_dim"):
            if getattr(self, name) % 2:
                raise ValueError(f"--{name.replace('_', '-')} must be even, got "
                                 f"{getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if not (math.isfinite(self.base) and self.base > 1.0):
            raise ValueError(f"--base must be a finite number > 1, got {self.base}")


def _num(a: Any) -> Any:
    """Nested lists of rounded Python floats (JSON ready)."""
    return np.round(np.asarray(a, dtype=np.float64), _DIGITS).tolist()


def _sine() -> dict[str, Any]:
    angles = np.arange(SINE_STEPS) * (2 * math.pi / SINE_STEPS)
    sc = arrpos.sinusoidal(angles, 2, dtype=np.float64)  # w_0 = 1: [sin(angle), cos(angle)]
    return {"steps": SINE_STEPS, "angle": _num(angles), "sin": _num(sc[:, 0]),
            "cos": _num(sc[:, 1])}


def _rope_cos(s: ExploreSizes) -> np.ndarray:
    inv_freq, factor = arrpos.rope_frequencies(s.dim, base=s.base, dtype=np.float64)
    cos, _ = arrpos.rope_cos_sin(np.arange(s.length), inv_freq, attention_factor=factor)
    return cos


def _bias_tables(s: ExploreSizes) -> dict[str, dict[str, Any]]:
    slopes = arrpos.alibi_slopes(s.heads, dtype=np.float64)
    alibi = arrpos.alibi_bias(slopes, s.length, s.length, mode="causal")
    rel = arrpos.relative_positions(s.length, s.length)
    bucket = arrpos.t5_bucket(rel, bidirectional=True, num_buckets=s.num_buckets,
                              max_distance=s.max_distance)
    t5_table = np.random.default_rng(s.seed + 1).normal(size=(s.num_buckets, s.heads))
    t5 = arrpos.relative_bias(t5_table, bucket)
    return {
        "alibi": {"label": "ALiBi bias (causal)", "kind": "bias", "values": alibi,
                  "extra": {"slopes": _num(slopes)}},
        "t5": {"label": "T5 relative bias (random table)", "kind": "bias", "values": t5,
               "extra": {"bucket": np.asarray(bucket).tolist(), "table": _num(t5_table),
                         "num_buckets": s.num_buckets, "max_distance": s.max_distance}},
    }


def _tables(s: ExploreSizes) -> dict[str, dict[str, Any]]:
    """Every encoding the visualiser and the properties panel offer, as float64 NumPy."""
    def table(label: str, values: Any) -> dict[str, Any]:
        return {"label": label, "kind": "table", "values": np.asarray(values), "extra": {}}

    out = {
        "sinusoidal-interleaved": table(
            "sinusoidal, interleaved", arrpos.sinusoidal(s.length, s.dim, base=s.base,
                                                         dtype=np.float64)),
        "sinusoidal-split": table(
            "sinusoidal, split", arrpos.sinusoidal(s.length, s.dim, base=s.base,
                                                   layout="split", dtype=np.float64)),
        "rope-cos": table("RoPE cos table (half layout)", _rope_cos(s)),
        "learned-random": table(
            "learned, random init (normal, std 0.02)",
            arrpos.learned_init(s.length, s.dim, seed=s.seed, dtype=np.float64)),
    }
    out.update(_bias_tables(s))
    return out


def _table_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Values, similarity matrices and properties of one encoding, JSON ready."""
    values = entry["values"]
    res: dict[str, Any] = {"label": entry["label"], "kind": entry["kind"], **entry["extra"]}
    res["values"] = _num(values)
    if entry["kind"] == "table":
        res["similarity"] = {m: _num(arrpos.similarity(values, metric=m))
                             for m in ("dot", "cosine")}
        res["properties"] = {m: list(arrpos.properties(values, metric=m))
                             for m in ("dot", "cosine")}
    else:  # a bias is already a proximity matrix, one per head
        res["properties"] = [list(arrpos.properties(values[h], metric="precomputed"))
                             for h in range(values.shape[0])]
    return res


def _rotation() -> dict[str, Any]:
    """R(theta) v for every angle and vector the rotation explorer offers, via apply_rope."""
    deg = np.asarray(ROTATION_ANGLES)
    # one frequency pi/180 turning with the angle in degrees: cos/sin of the angle, interleaved
    cos, sin = arrpos.rope_cos_sin(deg, np.array([math.pi / 180]), layout="interleaved")
    comps = np.asarray(ROTATION_COMPONENTS)
    vecs = np.stack(np.meshgrid(comps, comps, indexing="ij"), axis=-1)  # (x1, x2, 2)
    x = np.broadcast_to(vecs, (deg.shape[0],) + vecs.shape)  # (angle, x1, x2, 2)
    rotated = arrpos.apply_rope(x, cos[:, None, None, :], sin[:, None, None, :],
                                layout="interleaved")
    return {"angles": list(ROTATION_ANGLES), "components": list(ROTATION_COMPONENTS),
            "cos": _num(cos[:, 0]), "sin": _num(sin[:, 0]), "rotated": _num(rotated)}


def _rope(s: ExploreSizes) -> dict[str, Any]:
    """Rotated q and k at every position and their scores, plus the long-term decay curve."""
    rng = np.random.default_rng(s.seed + 2)
    q, k = rng.normal(size=s.rope_dim), rng.normal(size=s.rope_dim)
    inv_freq, factor = arrpos.rope_frequencies(s.rope_dim, base=s.base, dtype=np.float64)
    npos = 2 * s.rope_positions + 1  # m, n < rope_positions plus a shift <= rope_positions
    cos, sin = arrpos.rope_cos_sin(np.arange(npos), inv_freq, layout="interleaved",
                                   attention_factor=factor)
    q_rot = arrpos.apply_rope(np.broadcast_to(q, cos.shape), cos, sin, layout="interleaved")
    k_rot = arrpos.apply_rope(np.broadcast_to(k, cos.shape), cos, sin, layout="interleaved")
    # RoFormer's decay: <R_r 1, R_0 1> / d for all-ones vectors, r = 0 .. max(256, npos)
    dist = np.arange(max(256, npos))
    dcos, dsin = arrpos.rope_cos_sin(dist, inv_freq, layout="interleaved",
                                     attention_factor=factor)
    ones = np.ones((dist.shape[0], s.rope_dim))
    decay = arrpos.apply_rope(ones, dcos, dsin, layout="interleaved") @ ones[0] / s.rope_dim
    return {"dim": s.rope_dim, "base": s.base, "positions": s.rope_positions, "layout":
            "interleaved", "q": _num(q), "k": _num(k), "inv_freq": _num(inv_freq),
            "q_rot": _num(q_rot), "k_rot": _num(k_rot), "scores": _num(q_rot @ k_rot.T),
            "decay": _num(decay)}


def _bits() -> dict[str, Any]:
    """Bit j of p flips every 2**j positions; the sinusoidal pair j of sinusoidal(pi * p, 8,
    base=16) (frequency pi / 2**j) turns with the same period 2**(j+1), smoothly."""
    p = np.arange(16)
    bits = (p[:, None] >> np.arange(4)[None, :]) & 1  # column j: bit j (lowest first)
    pe = arrpos.sinusoidal(math.pi * p, 8, base=16.0, dtype=np.float64)
    return {"bits": bits.tolist(), "values": _num(pe)}


def explore_data(sizes: ExploreSizes | None = None) -> dict[str, Any]:
    """Everything the explorer page shows, computed with arrpos (plain JSON-ready data)."""
    s = sizes or ExploreSizes()
    s.check()
    return {
        "arrpos": arrpos.__version__,
        "sizes": asdict(s),
        "sine": _sine(),
        "tables": {name: _table_entry(e) for name, e in _tables(s).items()},
        "rotation": _rotation(),
        "rope": _rope(s),
        "bits": _bits(),
    }


def _asset(name: str) -> str:
    return (resources.files("arrpos") / "_explore_page" / name).read_text("utf-8")


def explore_html(sizes: ExploreSizes | None = None) -> str:
    """The self-contained explorer page (HTML with inline CSS, JavaScript and data)."""
    data = json.dumps(explore_data(sizes), separators=(",", ":"), allow_nan=False)
    page = _asset("page.html")
    # "</" cannot end the <script> element early once escaped (JSON allows "\/").
    parts = {"/*STYLE*/": _asset("explore.css"), "/*SCRIPT*/": _asset("explore.js"),
             "/*DATA*/": data.replace("</", "<\\/"), "/*VERSION*/": arrpos.__version__}
    for key, value in parts.items():
        page = page.replace(key, value)
    return page

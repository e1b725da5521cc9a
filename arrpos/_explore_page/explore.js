// arrpos explore: looks values up in the embedded data (computed by arrpos) and draws them.
// No number shown here is computed by this script, except the amplitude scaling A * sin and
// the sign of -sin in the rotation matrix.
"use strict";
const D = JSON.parse(document.getElementById("arrpos-data").textContent);
const $ = (id) => document.getElementById(id);
const C0 = "#1f5fbf", C1 = "#d2461e", INK = "#1b1b1b", GRID = "#d5d8de", MUTED = "#666";

function fmt(x, digits = 4) {
  let s = Number(x).toFixed(digits);
  if (/^-0\.?0*$/.test(s)) s = s.slice(1);  // no "-0.0000"
  return s;
}
function val(id) { return parseFloat($(id).value); }
function setOut(id, text) { $(id + "-value").textContent = text; }
function setRange(id, max) {
  const el = $(id);
  el.max = String(max);
  if (parseFloat(el.value) > max) el.value = String(max);
}
function bind(ids, fn) {
  for (const id of ids) {
    $(id).addEventListener("input", fn);
    $(id).addEventListener("change", fn);
  }
}

// ----------------------------------------------------------------------------------- drawing

function setup(canvas) {
  const r = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300, h = canvas.clientHeight || 150;
  if (canvas.width !== Math.round(w * r) || canvas.height !== Math.round(h * r)) {
    canvas.width = Math.round(w * r);
    canvas.height = Math.round(h * r);
  }
  const g = canvas.getContext("2d");
  g.setTransform(r, 0, 0, r, 0, 0);
  g.clearRect(0, 0, w, h);
  g.fillStyle = "#fff";
  g.fillRect(0, 0, w, h);
  g.font = "11px system-ui, sans-serif";
  delete canvas.dataset.clipped;
  return { g, w, h };
}

// The first of `variants` that fits in `width` pixels (labels drawn on a canvas cannot wrap). A
// canvas where even the shortest does not fit is marked (data-clipped), which the tests check.
function fitText(g, variants, width) {
  for (const t of variants) if (g.measureText(t).width <= width) return t;
  g.canvas.dataset.clipped = variants[variants.length - 1];
  return variants[variants.length - 1];
}

function divergingRGB(t) {  // t in [-1, 1]: blue, white, red
  t = Math.max(-1, Math.min(1, t || 0));
  const mid = [247, 247, 247], end = t < 0 ? [33, 102, 172] : [178, 24, 43];
  const u = Math.abs(t);
  return mid.map((m, i) => Math.round(m + (end[i] - m) * u));
}

function maxAbs(M) {
  let m = 0;
  for (const row of M) for (const v of row) m = Math.max(m, Math.abs(v));
  return m || 1;
}

// Heatmap of a matrix (rows down, columns across) with crosshair marks at `marks` [[row, col]].
// `opts.legend`: the colour legend's variants, longest first (default: the symmetric scale).
function heatmap(canvas, M, opts) {
  const { g, w, h } = setup(canvas);
  const rows = M.length, cols = M[0].length, lim = maxAbs(M);
  const img = new ImageData(cols, rows);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const [r, gg, b] = divergingRGB(M[i][j] / lim), o = 4 * (i * cols + j);
      img.data[o] = r; img.data[o + 1] = gg; img.data[o + 2] = b; img.data[o + 3] = 255;
    }
  }
  const tmp = document.createElement("canvas");
  tmp.width = cols; tmp.height = rows;
  tmp.getContext("2d").putImageData(img, 0, 0);
  const box = { l: 34, t: 8, r: 8, b: 30 };
  const pw = w - box.l - box.r, ph = h - box.t - box.b;
  g.imageSmoothingEnabled = false;
  g.drawImage(tmp, box.l, box.t, pw, ph);
  g.strokeStyle = INK;
  g.strokeRect(box.l, box.t, pw, ph);
  const cw = pw / cols, ch = ph / rows;
  (opts.marks || []).forEach(([i, j], k) => {  // at least 8 px, white halo for contrast
    const sw = Math.max(cw + 2, 8), sh = Math.max(ch + 2, 8);
    const x = box.l + (j + 0.5) * cw - sw / 2, y = box.t + (i + 0.5) * ch - sh / 2;
    g.lineWidth = 4; g.strokeStyle = "#fff"; g.strokeRect(x, y, sw, sh);
    g.lineWidth = 2; g.strokeStyle = k === 0 ? INK : "#1a8a2e"; g.strokeRect(x, y, sw, sh);
  });
  for (const i of opts.rows || []) {
    g.lineWidth = 2;
    g.strokeStyle = INK;
    g.strokeRect(box.l - 1, box.t + i * ch - 1, pw + 2, ch + 2);
  }
  g.lineWidth = 1;
  g.fillStyle = MUTED;
  g.textAlign = "center";
  const room = w - 4;  // centred under the map, but the canvas is the limit
  const cx = Math.min(Math.max(box.l + pw / 2, room / 2 + 2), w - room / 2 - 2);
  g.fillText(fitText(g, [`${opts.xlabel} 0 .. ${cols - 1}`, `0 .. ${cols - 1}`], room), cx, h - 16);
  const a = fmt(lim, 3);
  g.fillText(fitText(g, opts.legend || [`colour: \u2212${a} (blue) .. ${a} (red)`,
                                        `\u2212${a} blue .. ${a} red`], room), cx, h - 3);
  g.save();
  g.translate(12, box.t + ph / 2);
  g.rotate(-Math.PI / 2);
  g.fillText(fitText(g, [`${opts.ylabel} 0 .. ${rows - 1}`, `0 .. ${rows - 1}`], ph), 0, 0);
  g.restore();
}

// Line plot: series [{ys, color, dash}], x = index * xstep; marker {x, ys: [[y, color]]}.
function linePlot(canvas, series, opts) {
  const { g, w, h } = setup(canvas);
  const box = { l: 44, t: 8, r: 10, b: 22 };
  const pw = w - box.l - box.r, ph = h - box.t - box.b;
  const n = series[0].ys.length, xstep = opts.xstep || 1, xmax = (n - 1) * xstep || 1;
  let lo = opts.ymin, hi = opts.ymax;
  if (lo === undefined) {
    lo = Math.min(...series.map((s) => Math.min(...s.ys)));
    hi = Math.max(...series.map((s) => Math.max(...s.ys)));
    if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
  }
  const X = (x) => box.l + (x / xmax) * pw, Y = (y) => box.t + (hi - y) / (hi - lo) * ph;
  g.strokeStyle = GRID;
  g.strokeRect(box.l, box.t, pw, ph);
  if (lo < 0 && hi > 0) { g.beginPath(); g.moveTo(X(0), Y(0)); g.lineTo(X(xmax), Y(0)); g.stroke(); }
  g.fillStyle = MUTED;
  g.textAlign = "right";
  g.fillText(fmt(hi, 2), box.l - 4, box.t + 9);
  g.fillText(fmt(lo, 2), box.l - 4, box.t + ph);
  g.textAlign = "center";
  g.fillText(fitText(g, [`${opts.xlabel} (0 .. ${+(xmax.toFixed(6))})`, opts.xlabel], pw),
             box.l + pw / 2, h - 6);
  for (const s of series) {
    g.strokeStyle = s.color;
    g.lineWidth = 2;
    g.setLineDash(s.dash ? [5, 4] : []);
    g.beginPath();
    s.ys.forEach((y, i) => (i ? g.lineTo(X(i * xstep), Y(y)) : g.moveTo(X(0), Y(y))));
    g.stroke();
  }
  g.setLineDash([]);
  if (opts.marker) {
    const mx = X(opts.marker.x);
    g.strokeStyle = INK; g.lineWidth = 1;
    g.beginPath(); g.moveTo(mx, box.t); g.lineTo(mx, box.t + ph); g.stroke();
    for (const [y, color] of opts.marker.ys) {
      g.fillStyle = color;
      g.beginPath(); g.arc(mx, Y(y), 4.5, 0, 2 * Math.PI); g.fill();
    }
  }
}

// Plane with a circle of radius `radius` and arrows [{x, y, color, dash}] from the origin.
function plane(canvas, arrows, radius, extent) {
  const { g, w, h } = setup(canvas);
  const s = Math.min(w, h) / (2 * extent), cx = w / 2, cy = h / 2;
  g.strokeStyle = GRID;
  g.beginPath(); g.moveTo(0, cy); g.lineTo(w, cy); g.moveTo(cx, 0); g.lineTo(cx, h); g.stroke();
  g.beginPath(); g.arc(cx, cy, radius * s, 0, 2 * Math.PI); g.stroke();
  for (const a of arrows) {
    const x = cx + a.x * s, y = cy - a.y * s, ang = Math.atan2(y - cy, x - cx);
    g.strokeStyle = a.color; g.fillStyle = a.color; g.lineWidth = 2.5;
    g.setLineDash(a.dash ? [5, 4] : []);
    g.beginPath(); g.moveTo(cx, cy); g.lineTo(x, y); g.stroke();
    g.setLineDash([]);
    if (Math.hypot(x - cx, y - cy) > 4) {
      g.beginPath(); g.moveTo(x, y);
      g.lineTo(x - 10 * Math.cos(ang - 0.4), y - 10 * Math.sin(ang - 0.4));
      g.lineTo(x - 10 * Math.cos(ang + 0.4), y - 10 * Math.sin(ang + 0.4));
      g.closePath(); g.fill();
    }
  }
}

// -------------------------------------------------------------------------------- the panels

function sineIndex(k, j, p) {  // 2 pi (k/20)(j/10) + 15p degrees = 2 pi (3kj + 25p) / 600
  return ((3 * k * j + 25 * p) % D.sine.steps + D.sine.steps) % D.sine.steps;
}

function updateSine() {
  const A = val("sine-amplitude"), k = Math.round(val("sine-frequency") * 20);
  const p = Math.round(val("sine-phase") / 15), j = Math.round(val("sine-position") * 10);
  setOut("sine-amplitude", fmt(A, 1));
  setOut("sine-frequency", fmt(k / 20, 2));
  setOut("sine-phase", `${15 * p}\u00b0`);
  setOut("sine-position", fmt(j / 10, 1));
  const ys = (key) => Array.from({ length: 101 }, (_, jj) => A * D.sine[key][sineIndex(k, jj, p)]);
  const i = sineIndex(k, j, p), s = A * D.sine.sin[i], c = A * D.sine.cos[i];
  $("sine-angle").textContent = fmt(D.sine.angle[i]);
  $("sine-sin").textContent = fmt(s);
  $("sine-cos").textContent = fmt(c);
  linePlot($("sine-plot"), [{ ys: ys("sin"), color: C0 }, { ys: ys("cos"), color: C1 }],
    { xstep: 0.1, xlabel: "position t", ymin: -2, ymax: 2,
      marker: { x: j / 10, ys: [[s, C0], [c, C1]] } });
  plane($("sine-circle"), [{ x: c, y: s, color: INK }], A, 2.2);
}

function tableOptions(select) {
  for (const [name, t] of Object.entries(D.tables)) {
    const o = document.createElement("option");
    o.value = name; o.textContent = t.label;
    select.appendChild(o);
  }
}

function tableMatrix(name, head) {  // (rows, cols) values of a table or of one bias head
  const t = D.tables[name];
  return t.kind === "bias" ? t.values[head] : t.values;
}

const SOURCES = {  // line breaks at the calls: the code wraps at the same places everywhere
  "sinusoidal-interleaved": "arrpos.sinusoidal(L, dim)",
  "sinusoidal-split": "arrpos.sinusoidal(L, dim,\n  layout=\"split\")",
  "rope-cos": "arrpos.rope_cos_sin(\n  arange(L),\n  arrpos.rope_frequencies(dim)[0])[0]",
  "learned-random": "arrpos.learned_init(L, dim,\n  seed=seed)",
  "alibi": "arrpos.alibi_bias(\n  arrpos.alibi_slopes(heads),\n  L, L)",
  "t5": "arrpos.relative_bias(\n  table,\n  arrpos.t5_bucket(\n    arrpos.relative_positions(\n      L, L)))",
};

function embeddingDetail(name, t, head, i, j) {  // [label, value] of the readout's second row
  if (name === "alibi") return ["ALiBi slope of the head", fmt(t.slopes[head], 4)];
  if (name === "t5") return ["T5 bucket of (query, key)", `bucket ${t.bucket[i][j]}`];
  return ["Bucket or slope (biases)", "\u2013"];
}

// The readout keeps one height for every encoding (the tallest), so that nothing below it moves
// when the encoding changes; measured again when the width changes.
function reserveEmbeddingReadout() {
  const box = $("embedding-readout");
  box.style.minHeight = "";
  let tallest = 0;
  for (const [name, t] of Object.entries(D.tables)) {
    const [label, detail] = embeddingDetail(name, t, 0, 0, 0);
    $("embedding-value").textContent = "\u22120.0000";
    $("embedding-detail-label").textContent = label;
    $("embedding-detail").textContent = detail.replace(/\d+$/, "000");
    $("embedding-source").textContent = SOURCES[name] || name;
    tallest = Math.max(tallest, box.getBoundingClientRect().height);
  }
  box.style.minHeight = `${Math.ceil(tallest)}px`;
}

function updateEmbedding() {
  const name = $("embedding-encoding").value, t = D.tables[name], bias = t.kind === "bias";
  $("embedding-head").disabled = !bias;
  const head = bias ? val("embedding-head") : 0, M = tableMatrix(name, head);
  setRange("embedding-position", M.length - 1);
  setRange("embedding-dimension", M[0].length - 1);
  const i = val("embedding-position"), j = val("embedding-dimension");
  $("embedding-position-label").textContent = bias ? "Query position" : "Position";
  $("embedding-dimension-label").textContent = bias ? "Key position" : "Feature";
  setOut("embedding-position", String(i));
  setOut("embedding-dimension", String(j));
  setOut("embedding-head", bias ? String(head) : "\u2013");
  $("embedding-value").textContent = fmt(M[i][j]);
  const [label, detail] = embeddingDetail(name, t, head, i, j);
  $("embedding-detail-label").textContent = label;
  $("embedding-detail").textContent = detail;
  $("embedding-source").textContent = SOURCES[name] || name;
  heatmap($("embedding-heatmap"), M, { marks: [[i, j]], xlabel: bias ? "key" : "feature",
                                       ylabel: bias ? "query" : "position" });
  linePlot($("embedding-row"), [{ ys: M[i], color: C0 }],
    { xlabel: bias ? `key, query ${i}` : `feature, position ${i}`,
      marker: { x: j, ys: [[M[i][j], INK]] } });
}

function updateRotation() {
  const ia = Math.round(val("rotation-angle") / 5);
  const comps = D.rotation.components, step = comps[1] - comps[0];
  const i1 = Math.round((val("rotation-x1") - comps[0]) / step);
  const i2 = Math.round((val("rotation-x2") - comps[0]) / step);
  const c = D.rotation.cos[ia], s = D.rotation.sin[ia], r = D.rotation.rotated[ia][i1][i2];
  setOut("rotation-angle", `${D.rotation.angles[ia]}\u00b0`);
  setOut("rotation-x1", fmt(comps[i1], 2));
  setOut("rotation-x2", fmt(comps[i2], 2));
  $("rotation-m00").textContent = fmt(c, 3);
  $("rotation-m01").textContent = fmt(-s, 3);
  $("rotation-m10").textContent = fmt(s, 3);
  $("rotation-m11").textContent = fmt(c, 3);
  $("rotation-v1").textContent = fmt(comps[i1], 3);
  $("rotation-v2").textContent = fmt(comps[i2], 3);
  $("rotation-r1").textContent = fmt(r[0], 3);
  $("rotation-r2").textContent = fmt(r[1], 3);
  plane($("rotation-plot"), [{ x: comps[i1], y: comps[i2], color: C0 },
                             { x: r[0], y: r[1], color: C1 }], 1, 1.6);
  const turned = D.rotation.rotated.map((byAngle) => byAngle[i1][i2]);
  linePlot($("rotation-curve"), [{ ys: turned.map((v) => v[0]), color: C1 },
                                 { ys: turned.map((v) => v[1]), color: C1, dash: true }],
    { xstep: 5, xlabel: "angle \u03b8 in degrees", ymin: -1.5, ymax: 1.5,
      marker: { x: D.rotation.angles[ia], ys: [[r[0], C1], [r[1], C1]] } });
}

function updateRope() {
  const R = D.rope, m = val("rope-m"), n = val("rope-n"), sh = val("rope-shift");
  const i = val("rope-pair");
  setOut("rope-m", String(m)); setOut("rope-n", String(n));
  setOut("rope-shift", String(sh)); setOut("rope-pair", String(i));
  $("rope-distance").textContent = String(m - n);
  $("rope-score").textContent = fmt(R.scores[m][n]);
  $("rope-shifted").textContent = `(${m + sh}, ${n + sh})`;
  $("rope-score-shifted").textContent = fmt(R.scores[m + sh][n + sh]);
  $("rope-theta").textContent = fmt(R.inv_freq[i], 6);
  const pair = (rows, p, color, dash) => ({ x: rows[p][2 * i], y: rows[p][2 * i + 1], color, dash });
  const ext = 1.15 * Math.max(Math.hypot(R.q[2 * i], R.q[2 * i + 1]),
                              Math.hypot(R.k[2 * i], R.k[2 * i + 1]), 0.1);
  plane($("rope-pairs"), [pair(R.q_rot, m + sh, C0, true), pair(R.k_rot, n + sh, C1, true),
                          pair(R.q_rot, m, C0, false), pair(R.k_rot, n, C1, false)],
        Math.hypot(R.q[2 * i], R.q[2 * i + 1]), ext);
  heatmap($("rope-scores"), R.scores, { marks: [[m, n], [m + sh, n + sh]], xlabel: "key n",
                                        ylabel: "query m" });
  const r = Math.abs(m - n);
  $("rope-decay-value").textContent = fmt(R.decay[r]);
  linePlot($("rope-decay"), [{ ys: R.decay, color: C0 }],
    { xlabel: "distance r", marker: { x: r, ys: [[R.decay[r], INK]] } });
}

let tableMetric = "dot";  // the similarity chosen for tables, kept while a bias is shown

function updateProperties() {
  const name = $("properties-encoding").value, t = D.tables[name], bias = t.kind === "bias";
  const sel = $("properties-metric");
  if (sel.value !== "bias") tableMetric = sel.value;
  sel.value = bias ? "bias" : tableMetric;  // a bias is its own proximity: no similarity
  sel.disabled = bias;
  $("properties-head").disabled = !bias;
  const head = bias ? val("properties-head") : 0, metric = tableMetric;
  const phi = bias ? t.values[head] : t.similarity[metric];
  const props = bias ? t.properties[head] : t.properties[metric];
  setRange("properties-x", phi.length - 1);
  setRange("properties-y", phi.length - 1);
  const x = val("properties-x"), y = val("properties-y");
  setOut("properties-head", bias ? String(head) : "\u2013");
  setOut("properties-x", String(x)); setOut("properties-y", String(y));
  $("properties-monotonicity").textContent = fmt(props[0]);
  $("properties-translation").textContent = fmt(props[1]);
  $("properties-symmetry").textContent = fmt(props[2]);
  $("properties-phi-xy").textContent = fmt(phi[x][y]);
  $("properties-phi-yx").textContent = fmt(phi[y][x]);
  const inside = x + 1 < phi.length && y + 1 < phi.length;
  $("properties-phi-next").textContent = inside ? fmt(phi[x + 1][y + 1]) : "\u2013";
  heatmap($("properties-similarity"), phi, { marks: [[x, y], [y, x]], xlabel: "y",
                                             ylabel: "x" });
  linePlot($("properties-row"), [{ ys: phi[x], color: C0 }],
    { xlabel: `y, the row of x = ${x}`, marker: { x: y, ys: [[phi[x][y], INK]] } });
}

function updateBits() {
  const p = val("bits-position"), B = D.bits;
  setOut("bits-position", String(p));
  $("bits-binary-value").textContent = B.bits[p].slice().reverse().join("");
  for (let j = 0; j < 4; j++) {
    const row = B.values[p];
    $(`bits-pair-${j}`).textContent = `${fmt(row[2 * j])}, ${fmt(row[2 * j + 1])}`;
  }
  heatmap($("bits-binary"), B.bits, { rows: [p], xlabel: "bit", ylabel: "position",
                                      legend: ["colour: 0 white, 1 red", "0 white, 1 red"] });
  heatmap($("bits-sinusoidal"), B.values, { rows: [p], xlabel: "feature",
                                            ylabel: "position" });
}

// ------------------------------------------------------------------------------------ set up

function init() {
  const S = D.sizes;
  tableOptions($("embedding-encoding"));
  tableOptions($("properties-encoding"));
  for (const id of ["embedding-head", "properties-head"]) setRange(id, S.heads - 1);
  for (const id of ["rope-m", "rope-n"]) setRange(id, S.rope_positions - 1);
  setRange("rope-shift", S.rope_positions);
  setRange("rope-pair", S.rope_dim / 2 - 1);
  bind(["sine-amplitude", "sine-frequency", "sine-phase", "sine-position"], updateSine);
  bind(["embedding-encoding", "embedding-position", "embedding-dimension", "embedding-head"],
       updateEmbedding);
  bind(["rotation-angle", "rotation-x1", "rotation-x2"], updateRotation);
  bind(["rope-m", "rope-n", "rope-shift", "rope-pair"], updateRope);
  bind(["properties-encoding", "properties-metric", "properties-head", "properties-x",
        "properties-y"], updateProperties);
  bind(["bits-position"], updateBits);
  const all = () => { updateSine(); updateEmbedding(); updateRotation(); updateRope();
                      updateProperties(); updateBits(); };
  let pending = 0, width = 0;
  const layout = () => {
    const w = document.documentElement.clientWidth;
    if (w !== width) { width = w; reserveEmbeddingReadout(); }
    all();
  };
  window.addEventListener("resize", () => {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(layout);
  });
  layout();
  document.body.dataset.ready = "1";
}

init();

// Live charts for `streamlearn up`: polls /api/series and draws each chart as SVG, with a
// y axis in the chart's unit, an x axis of time before now, and one line per variant.
//
// The y scale is linear and robust: its top is the 95th percentile of the visible points
// (plus a margin) when the largest point is far above it, so the catch-up at start-up
// (tens of thousands of samples/s for a few seconds) does not flatten the steady rate for
// the rest of the run. Points above the top are drawn on it, marked in red, and the chart
// says how high they went. A log scale would also keep the spike, but it squeezes the
// steady rate's swings (500 vs 600 samples/s) into a few pixels and its ticks read badly.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#1971c2", "#d9480f", "#2f9e44", "#7048e8", "#c2255c", "#0c8599", "#e67700"];
const W_LEFT = 52, W_RIGHT = 10, H_TOP = 24, H_BOTTOM = 20, HEIGHT = 170;

// Each chart: its title, its y unit, whether 0 is always on the scale, and its lines.
// `lines(points)` gives [{name, values: [[at, value], ...]}]; a model with variants gets
// one line per variant (from each variant's own reports), the others one per field.
const CHARTS = [
  { title: "samples/s trained", unit: () => "samples/s", zero: true, lines: perVariant("samples_per_s") },
  { title: "online loss", unit: () => "loss", zero: false, lines: perVariant("online_loss") },
  { title: "online metric", unit: p => last(p).metric || "metric", zero: false, lines: perVariant("online_metric") },
  { title: "queue depth", unit: () => "entries", zero: true, lines: fields(["queue_length", "pending"]) },
  { title: "weights version", unit: () => "version", zero: false, lines: versionLines },
  { title: "learner status age", unit: () => "seconds", zero: true, lines: fields(["status_age_s"]) },
];

function last(points) { return points[points.length - 1] || {}; }

function series(points, name, pick) {
  const values = [];
  points.forEach(p => { const v = pick(p); if (typeof v === "number" && isFinite(v)) values.push([p.at, v]); });
  return { name, values };
}

function fields(keys) {
  return points => keys.map(k => series(points, k, p => p[k]));
}

function perVariant(key) {
  return points => {
    const names = new Set();
    points.forEach(p => Object.keys(p.variants || {}).forEach(n => names.add(n)));
    if (!names.size) return [series(points, key, p => p[key])];
    return [...names].sort().map(n => series(points, n, p => ((p.variants || {})[n] || {})[key]));
  };
}

function versionLines(points) {
  const lines = [series(points, "version", p => p.version)];
  const pinned = series(points, "pinned", p => p.pinned_version);
  if (pinned.values.length) { pinned.dashed = true; lines.push(pinned); }
  return lines;
}

function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return v.toLocaleString();
  return Math.abs(v) >= 100 ? Math.round(v).toLocaleString() : v.toPrecision(4);
}

function tickLabel(v, step) {
  if (Math.abs(v) >= 10000) return (v / 1000).toLocaleString(undefined, { maximumFractionDigits: 1 }) + "k";
  let digits = 0;
  while (digits < 6 && Math.abs(step * 10 ** digits - Math.round(step * 10 ** digits)) > 1e-6) digits++;
  return v.toFixed(digits);
}

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * (sorted.length - 1)))];
}

function niceStep(span, ticks) {
  const raw = span / ticks, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  return mag * [1, 2, 2.5, 5, 10].find(m => m * mag >= raw);
}

// The y range: robust to a few outliers at either end (see the note at the top), but
// always showing the lines' latest values: what is happening now is never off scale.
function scale(all, latest, zero) {
  const sorted = all.slice().sort((a, b) => a - b);
  let lo = sorted[0], hi = sorted[sorted.length - 1];
  const p95 = quantile(sorted, 0.95), p05 = quantile(sorted, 0.05);
  const spread = Math.max(p95 - p05, Math.abs(p95) * 0.05, 1e-9);
  if (hi > p95 + 2 * spread) hi = p95 + 0.25 * spread;
  if (lo < p05 - 2 * spread) lo = p05 - 0.25 * spread;
  hi = Math.max(hi, ...latest); lo = Math.min(lo, ...latest);
  if (zero) lo = Math.min(0, lo);
  if (hi - lo < 1e-9) { hi += 1; lo -= zero && lo === 0 ? 0 : 1; }
  const step = niceStep(hi - lo, 4);
  return { lo: Math.floor(lo / step) * step, hi: Math.ceil(hi / step) * step, step };
}

function timeTicks(span) {
  const step = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800].find(s => span / s <= 5) || 3600;
  const ticks = [];
  for (let ago = 0; ago <= span + 1e-9; ago += step) ticks.push(ago);
  const label = ago => ago === 0 ? "now" : ago < 60 ? `-${ago} s` : `-${+(ago / 60).toFixed(1)} min`;
  return ticks.map(ago => [ago, label(ago)]);
}

function el(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// An HTML element with a class and children (strings become text nodes: never markup).
function tag(name, className, ...children) {
  const node = document.createElement(name);
  if (className) node.className = className;
  node.append(...children);
  return node;
}

// A model's card, built without innerHTML: its name, like every string from a status,
// only ever reaches the page as text.
function section(model) {
  let box = document.getElementById("model-" + model);
  if (box) return box;
  box = tag("div", "model",
    tag("h2", "", tag("span", "name", model), " ", tag("span", "age")),
    tag("div", "figures"),
    tag("div", "charts", ...CHARTS.map((c, i) => {
      const svg = el("svg", { "data-chart": i, "data-points": 0, height: HEIGHT });
      return tag("div", "chart", tag("h3", "", c.title), tag("div", "legend"), svg);
    })));
  box.id = "model-" + model;
  document.getElementById("models").appendChild(box);
  return box;
}

// Draws one chart; returns how many points it drew.
function draw(svg, legend, points, chart) {
  const w = svg.clientWidth || 360, h = HEIGHT;
  const x0 = W_LEFT, x1 = w - W_RIGHT, y0 = H_TOP, y1 = h - H_BOTTOM;
  svg.replaceChildren();
  svg.setAttribute("width", w);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.dataset.plotTop = y0; svg.dataset.plotBottom = y1;
  const lines = chart.lines(points).filter(l => l.values.length);
  const all = lines.flatMap(l => l.values.map(([, v]) => v));
  const unit = chart.unit(points);
  legend.replaceChildren(...lines.map((l, i) => {
    const span = document.createElement("span"), swatch = document.createElement("i");
    swatch.style.background = PALETTE[i % PALETTE.length];
    span.append(swatch, String(l.name) + " ", bold(fmt(l.values[l.values.length - 1][1])));
    return span;
  }));
  svg.appendChild(el("text", { x: 4, y: 11, class: "unit" }, unit));
  svg.appendChild(el("line", { x1: x0, y1: y0, x2: x0, y2: y1, class: "axis" }));
  svg.appendChild(el("line", { x1: x0, y1: y1, x2: x1, y2: y1, class: "axis" }));
  const t1 = points.length ? points[points.length - 1].at : 0;
  const span = points.length ? Math.max(t1 - points[0].at, 10) : 60;
  const xAt = at => x1 - (x1 - x0) * ((t1 - at) / span);
  timeTicks(span).forEach(([ago, label]) => {
    const x = xAt(t1 - ago);
    svg.appendChild(el("line", { x1: x, y1: y1, x2: x, y2: y1 + 3, class: "axis" }));
    svg.appendChild(el("text", { x, y: h - 5, class: "xtick", "text-anchor": "middle" }, label));
  });
  if (!all.length) { svg.dataset.points = "0"; return 0; }
  const latest = lines.map(l => l.values[l.values.length - 1][1]);
  const { lo, hi, step } = scale(all, latest, chart.zero);
  svg.dataset.ymin = lo; svg.dataset.ymax = hi;
  const yAt = v => y1 - (y1 - y0) * ((Math.min(Math.max(v, lo), hi) - lo) / (hi - lo));
  for (let v = lo; v <= hi + step / 2; v += step) {
    const y = yAt(v);
    svg.appendChild(el("line", { x1: x0, y1: y, x2: x1, y2: y, class: "grid" }));
    svg.appendChild(el("text", { x: x0 - 4, y: y + 3, class: "ytick", "text-anchor": "end" },
      `${tickLabel(v, step)}`));
  }
  let drawn = 0, clipped = 0, peak = -Infinity;
  lines.forEach((l, i) => {
    const color = PALETTE[i % PALETTE.length];
    const coords = l.values.map(([at, v]) => `${xAt(at).toFixed(1)},${yAt(v).toFixed(1)}`);
    svg.appendChild(el("polyline", { points: coords.join(" "), stroke: color, "data-series": l.name,
      class: "line" + (l.dashed ? " dashed" : "") }));
    l.values.forEach(([at, v]) => {
      if (v <= hi && v >= lo) return;
      clipped++; peak = Math.max(peak, v);
      svg.appendChild(el("circle", { cx: xAt(at), cy: yAt(v), r: 2.5, class: "clipped" }));
    });
    drawn += l.values.length;
  });
  if (clipped) {
    svg.appendChild(el("text", { x: x1, y: 11, class: "clipnote", "text-anchor": "end" },
      `${clipped} off scale (max ${fmt(peak)} ${unit})`));
  }
  svg.dataset.points = String(drawn);
  return drawn;
}

function ageText(p) {
  const state = p.learner_state || "";
  if (typeof p.status_age_s !== "number") return state === "starting" ? "learner starting, no status yet" : "no learner status yet";
  return `${state ? "learner " + state + " · " : ""}last status ${Math.round(p.status_age_s)} s ago`;
}

// The figures line, built with textContent only: every string here comes from a status.
function figure(label, value, attrs) {
  const span = document.createElement("span");
  for (const [k, v] of Object.entries(attrs || {})) span.setAttribute(k, v);
  const b = document.createElement("b");
  b.textContent = value;
  span.append(label + " ", b);
  return span;
}

function figures(p) {
  const out = [
    figure("version", fmt(p.version)), figure("step", fmt(p.step)),
    figure("samples", fmt(p.samples_seen)), figure("loss", fmt(p.online_loss)),
    figure(String(p.metric || "metric"), fmt(p.online_metric)),
    figure("queue", fmt(p.queue_length)), figure("dead letters", fmt(p.deadletters)),
    figure("actors", fmt(p.actors)),
  ];
  if (p.champion) out.push(figure("champion", String(p.champion)));
  const s = p.served;
  if (s && typeof s === "object") {
    const metric = "accuracy" in s ? "accuracy" : "mae";
    const served = figure("served: labels", fmt(s.labels), { class: "served" });
    served.append(" loss ", bold(fmt(s.loss)), ` ${metric} `, bold(fmt(s[metric])),
      " delay p50 ", bold(fmt(s.delay_p50_s) + " s"), " p95 ", bold(fmt(s.delay_p95_s) + " s"),
      " unknown ids ", bold(fmt(s.unknown)));
    out.push(served);
  }
  if (p.pinned_version) {
    const pin = figure("pinned: actors serve version", fmt(p.pinned_version),
      { class: "pinned", "data-pinned": String(p.pinned_version) });
    pin.append(` (latest ${fmt(p.latest_version)})`);
    out.push(pin);
  }
  return out;
}

function bold(text) {
  const b = document.createElement("b");
  b.textContent = text;
  return b;
}

async function refresh() {
  try {
    const res = await fetch("api/series", { cache: "no-store" });
    const data = await res.json();
    let total = 0;
    for (const [model, points] of Object.entries(data.models)) {
      const box = section(model), p = last(points);
      const age = box.querySelector(".age");
      age.textContent = ageText(p);
      age.dataset.age = typeof p.status_age_s === "number" ? String(p.status_age_s) : "";
      age.className = "age " + (p.learner_state || "");
      box.querySelector(".figures").replaceChildren(...figures(p));
      box.querySelectorAll("svg[data-chart]").forEach(svg => {
        total += draw(svg, svg.previousElementSibling, points, CHARTS[+svg.dataset.chart]);
      });
    }
    const counter = document.getElementById("points");
    counter.dataset.count = String(total);
    counter.textContent = `${total} points`;
  } catch (err) {
    document.getElementById("points").textContent = "disconnected: " + err;
  }
}

refresh();
setInterval(refresh, 1000);

// Live charts for `streamlearn up`: polls /api/series and draws each series on a canvas.
"use strict";

const CHARTS = [
  { title: "online loss / metric", keys: [["online_loss", "#d9480f"], ["online_metric", "#1971c2"]] },
  { title: "samples/s trained", keys: [["samples_per_s", "#2f9e44"]] },
  { title: "queue depth (length, pending)", keys: [["queue_length", "#7048e8"], ["pending", "#e8590c"]] },
  { title: "weights version", keys: [["version", "#495057"]] },
];

function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return v.toLocaleString();
  return Math.abs(v) >= 100 ? Math.round(v).toLocaleString() : v.toFixed(4);
}

function section(model) {
  let el = document.getElementById("model-" + model);
  if (el) return el;
  el = document.createElement("div");
  el.className = "model";
  el.id = "model-" + model;
  el.innerHTML = `<h2>${model}</h2><div class="figures"></div><div class="charts"></div>`;
  const charts = el.querySelector(".charts");
  CHARTS.forEach((c, i) => {
    const box = document.createElement("div");
    box.className = "chart";
    box.innerHTML = `<h3>${c.title}</h3><canvas data-chart="${i}" data-points="0"></canvas>`;
    charts.appendChild(box);
  });
  document.getElementById("models").appendChild(el);
  return el;
}

function draw(canvas, points, keys) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, h);
  const t0 = points.length ? points[0].at : 0, t1 = points.length ? points[points.length - 1].at : 1;
  let drawn = 0;
  keys.forEach(([key, color]) => {
    const vals = points.map(p => p[key]).filter(v => typeof v === "number");
    if (!vals.length) return;
    let lo = Math.min(...vals), hi = Math.max(...vals);
    if (hi === lo) { hi += 1; lo -= 1; }
    ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.beginPath();
    let first = true;
    points.forEach(p => {
      const v = p[key];
      if (typeof v !== "number") return;
      const x = 30 + (w - 36) * ((p.at - t0) / Math.max(t1 - t0, 1e-9));
      const y = h - 14 - (h - 24) * ((v - lo) / (hi - lo));
      if (first) { ctx.moveTo(x, y); first = false; } else ctx.lineTo(x, y);
      drawn++;
    });
    ctx.stroke();
    ctx.fillStyle = color; ctx.font = "11px system-ui";
    ctx.fillText(`${key} ${fmt(vals[vals.length - 1])}`, 32 + 150 * keys.findIndex(k => k[0] === key), 11);
  });
  ctx.fillStyle = "#868e96"; ctx.font = "10px system-ui";
  ctx.fillText(`${Math.round(t1 - t0)} s`, w - 40, h - 2);
  canvas.dataset.points = String(drawn);
  return drawn;
}

async function refresh() {
  try {
    const res = await fetch("api/series", { cache: "no-store" });
    const data = await res.json();
    let total = 0;
    for (const [model, points] of Object.entries(data.models)) {
      const el = section(model);
      const last = points[points.length - 1] || {};
      el.querySelector(".figures").innerHTML =
        `<span>version <b>${fmt(last.version)}</b></span><span>step <b>${fmt(last.step)}</b></span>` +
        `<span>samples <b>${fmt(last.samples_seen)}</b></span><span>loss <b>${fmt(last.online_loss)}</b></span>` +
        `<span>${last.metric || "metric"} <b>${fmt(last.online_metric)}</b></span>` +
        `<span>queue <b>${fmt(last.queue_length)}</b></span><span>dead letters <b>${fmt(last.deadletters)}</b></span>` +
        `<span>actors <b>${fmt(last.actors)}</b></span>` +
        (last.champion ? `<span>champion <b>${last.champion}</b></span>` : "") +
        (last.pinned_version ? `<span class="pinned" data-pinned="${last.pinned_version}">` +
          `pinned: actors serve version <b>${fmt(last.pinned_version)}</b> ` +
          `(latest ${fmt(last.latest_version)})</span>` : "");
      el.querySelectorAll("canvas").forEach(c => { total += draw(c, points, CHARTS[+c.dataset.chart].keys); });
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

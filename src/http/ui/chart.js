// Throughput charts: inline SVG built node by node (createElementNS), so
// the page needs no external script and no style attribute (the policy
// forbids both); colours come from classes in app.css.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const SERIES = ["pushed", "delivered", "finished", "failed", "dead"];

function svgEl(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function hhmm(ms, seconds) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, "0");
  return p(d.getHours()) + ":" + p(d.getMinutes()) + (seconds ? ":" + p(d.getSeconds()) : "");
}

// A round top for the axis: 1, 2 or 5 times a power of ten, at least max.
function niceTop(max) {
  if (max <= 1) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= max);
}

// `data`: the reply of /v1/stats/throughput. Returns the chart and its
// legend (each series with its total over the window).
function throughputChart(data, id) {
  const W = 640, H = 180, L = 44, R = 8, T = 8, B = 22;
  const series = data.series || {};
  const kinds = SERIES.filter((k) => Array.isArray(series[k]));
  const points = Math.max(1, ...kinds.map((k) => series[k].length));
  let max = 0;
  for (const k of kinds) for (const n of series[k]) max = Math.max(max, Number(n) || 0);
  const top = niceTop(max);
  const x = (i) => L + (W - L - R) * (points === 1 ? 0 : i / (points - 1));
  const y = (n) => T + (H - T - B) * (1 - n / top);
  const perMin = Number(data.resolution_s) >= 60;
  const unit = t(perMin ? "chart.minute" : "chart.second");
  const grid = [0, 0.5, 1].map((f) => [
    svgEl("line", { x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: "grid" }),
    svgEl("text", { x: L - 4, y: y(top * f) + 4, "text-anchor": "end", class: "axis" }, String(Math.round(top * f * 10) / 10)),
  ]);
  const from = Number(data.from_ms), to = Number(data.to_ms);
  const times = Number.isFinite(from) && Number.isFinite(to) ? [
    svgEl("text", { x: L, y: H - 6, "text-anchor": "start", class: "axis" }, hhmm(from, !perMin)),
    svgEl("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "axis" }, hhmm(to, !perMin)),
  ] : [];
  const lines = kinds.map((k) => {
    const vals = series[k].map((n) => Number(n) || 0);
    const total = vals.reduce((a, b) => a + b, 0);
    return svgEl("polyline", {
      class: "line s-" + k, fill: "none", "stroke-width": 1.6,
      "data-series": k, "data-total": total,
      points: vals.map((n, i) => x(i).toFixed(1) + "," + y(n).toFixed(1)).join(" "),
    }, svgEl("title", {}, t("series." + k) + ": " + total));
  });
  const svg = svgEl("svg", {
    viewBox: "0 0 " + W + " " + H, class: "chart", role: "img",
    "aria-label": t("chart.label", t("col.jobs"), unit),
  }, grid, times, lines);
  const legend = el("p", { class: "legend" }, kinds.map((k) => el("span", { class: "key", "data-series": k },
    el("span", { class: "swatch s-" + k }), t("series." + k) + " ",
    el("span", { class: "total" }, series[k].reduce((a, b) => a + (Number(b) || 0), 0)))));
  return el("div", { class: "chart-box", id }, svg, legend);
}

// app/common.js, the first part of app.js: the dashboard's state, DOM
// helpers (text only), times, the API and the throughput section.
//
// delayq's dashboard. Plain JavaScript, no build step, served from the
// binary (with i18n.js, the strings, and chart.js, the SVG charts). Every
// value from the server is put on the page as text (never as HTML), and
// the page holds no inline script or style (its Content-Security-Policy
// forbids them). API calls use paths relative to this page, so the
// dashboard works behind a reverse proxy under any path, and carry the
// X-Delayq-UI header, without which the server does not accept the login
// cookie (a page on another site cannot set it).
"use strict";

const API = "../";
const BODY_SHOWN = 4000;
const STATES = ["delayed", "ready", "reserved", "finished", "dead"];
let config = { read_only: false, auth: false };
// The view shown refreshes itself every 5 seconds (not the job page, whose
// inputs must keep what is typed), unless the user has started editing.
let refreshes = false;
let dirty = false;
let chartRes = "minute";

// ---- DOM helpers: text only ----
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick" || k === "onsubmit" || k === "onchange") e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  // Children may be nested arrays at any depth (rows of [dt, dd] pairs).
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
// Each render belongs to one route() call; a slower, older one that
// finishes later must not overwrite the page the user has moved on to.
let seq = 0;
// The last notice (see flash in app.js) and the view it was given on: the
// refresh every 5 s renders the view anew, and a notice it dropped would
// be gone before the user read it. It stays on its view for NOTICE_MS.
let notice = null;
const NOTICE_MS = 30000;
function show(mine, ...nodes) {
  if (mine !== seq) return;
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat(Infinity).filter(has));
  if (notice && notice.hash === location.hash && Date.now() - notice.at < NOTICE_MS) main.prepend(notice.node);
}
function link(href, text) { return el("a", { href }, text); }
function enc(s) { return encodeURIComponent(s); }
function has(v) { return v !== null && v !== undefined; }
// A table that scrolls sideways on a narrow screen instead of the page.
function table(id, heads, rows) {
  return el("div", { class: "scroll" }, el("table", { id },
    el("tr", {}, heads.map((h) => Array.isArray(h) ? el("th", { class: h[1] }, h[0]) : el("th", {}, h))), rows));
}
function notAvailable(what) { return el("p", { class: "muted not-available" }, t("not.available", what)); }

// ---- Times: the browser's zone, shown; ISO dates; relative beside ----
function pad(n, w = 2) { return String(n).padStart(w, "0"); }
function zoneOffset(d) {
  const m = -d.getTimezoneOffset();
  if (m === 0) return "UTC";
  const a = Math.abs(m);
  return "UTC" + (m < 0 ? "-" : "+") + Math.floor(a / 60) + (a % 60 ? ":" + pad(a % 60) : "");
}
function zoneName() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || zoneOffset(new Date()); } catch (_) { return zoneOffset(new Date()); }
}
function when(ms) {
  if (!has(ms)) return t("none");
  const d = new Date(Number(ms));
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" +
    pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3) + " " + zoneOffset(d);
}
// A length of time, in the largest unit that keeps it readable.
function dur(ms) {
  if (!has(ms)) return t("dash");
  const a = Math.abs(Number(ms));
  // Sub-millisecond bucket bounds (0.5 ms) stay apart from 1 ms.
  if (a < 1) return t("u.ms", Math.round(a * 100) / 100);
  if (a < 1000) return t("u.ms", Math.round(a));
  if (a < 90000) return t("u.s", Math.round(a / 100) / 10);
  if (a < 5400000) return t("u.min", Math.round(a / 60000));
  if (a < 172800000) return t("u.h", Math.round(a / 3600000));
  return t("u.d", Math.round(a / 86400000));
}
function fromNow(ms) {
  if (!has(ms)) return "";
  const d = Number(ms) - Date.now();
  if (Math.abs(d) < 500) return t("now");
  return d >= 0 ? t("in", dur(d)) : t("ago", dur(-d));
}
function whenRel(ms) { return has(ms) ? when(ms) + " (" + fromNow(ms) + ")" : t("none"); }
// Error texts may quote a webhook's URL: its password and query values are
// secrets, never shown.
function masked(text) {
  return String(text || "").replace(/\b(https?:\/\/)([^\s/@:]+):[^\s/@]*@/g, "$1$2:***@")
    .replace(/(https?:\/\/[^\s?#)]*\?)([^\s#)]*)/g, (_, head, q) => head + q.replace(/=[^&]*/g, "=***"));
}
function num(v) { return has(v) ? String(v) : t("dash"); }
function rateText(r) { return r ? t("per.second", r.per_second, r.burst) : t("none"); }
// A percentile: a bucket's upper bound; null with samples is beyond the
// last bound (60 s).
function le(v, samples) { return has(v) ? t("lateness.le", dur(v)) : samples ? t("lateness.beyond", dur(60000)) : t("dash"); }
// Which partitions an instance dispatches, in words ("partition 0").
function partitionsText(list) {
  const l = list || [];
  return l.length ? t(l.length === 1 ? "partitions.one" : "partitions.many", l.join(", ")) : t("none");
}
function heldText(h) { return h === "paused" ? t("held.paused") : h === "rate" ? t("held.rate") : has(h) && h !== "" ? String(h) : t("dash"); }

// ---- API ----
class Unauthorized extends Error {}
class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}
async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: { "X-Delayq-UI": "1" } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(API + path, opts);
  if (r.status === 401) throw new Unauthorized();
  const text = await r.text();
  let v = {};
  try { v = text ? JSON.parse(text) : {}; } catch (_) { v = { text }; }
  if (!r.ok) throw new ApiError(r.status, v.error && v.error.code, (v.error && v.error.message) || r.status + " " + r.statusText);
  return v;
}
// A route this server does not have (an older delayq): null, so the view
// says "not available" instead of failing.
async function optional(call) {
  try {
    return await call;
  } catch (e) {
    if (e instanceof ApiError && e.status === 404 && e.code === "no_route") return null;
    throw e;
  }
}
// `query`: "?redis=false" for this process's own series only (no Redis
// call, whatever the number of topics).
async function metricsText(query) {
  const r = await fetch(API + "metrics" + (query || ""), { credentials: "same-origin", headers: { "X-Delayq-UI": "1" } });
  if (r.status === 401) throw new Unauthorized();
  return r.ok ? r.text() : "";
}

// The throughput chart with its resolution switch (a view control, not an
// action: shown in read-only mode too).
function throughputSection(id, title, data) {
  const res = ["minute", "second"].map((r) => el("button", {
    type: "button", "data-view": r, class: r === chartRes ? "current" : null,
    onclick: () => { chartRes = r; route(); },
  }, t("res." + r)));
  return [
    el("h2", {}, title),
    data ? [el("div", { class: "actions" }, res), throughputChart(data, id)] : notAvailable(t("throughput.absent")),
  ];
}

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
function show(mine, ...nodes) {
  if (mine !== seq) return;
  document.getElementById("main").replaceChildren(...nodes.flat(Infinity).filter(has));
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
async function metricsText() {
  const r = await fetch(API + "metrics", { credentials: "same-origin", headers: { "X-Delayq-UI": "1" } });
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

// ---- Views ----
async function overview(mine) {
  const [topics, upcoming, metrics, tp] = await Promise.all([
    api("GET", "v1/topics"),
    api("GET", "v1/schedule?limit=20"),
    metricsText().catch(() => ""),
    optional(api("GET", "v1/stats/throughput?resolution=" + chartRes)),
  ]);
  const names = Object.keys(topics.topics).slice(0, 50);
  const counts = names.map((n) => topics.topics[n]);
  const withFinished = counts.some((c) => has(c.finished));
  const withStats = counts.some((c) => "oldest_ready_ms" in c || "lateness_ms" in c || "held" in c);
  // Each topic's next due time comes from the one listing of what falls
  // due next (a listing per topic cost Redis thousands of entries a
  // refresh). A topic with delayed jobs that is not in it falls due after
  // its last entry; it is never "none".
  const next = {};
  for (const j of upcoming.jobs) if (!(j.topic in next)) next[j.topic] = j.due_at_ms;
  const last = upcoming.jobs.length ? upcoming.jobs[upcoming.jobs.length - 1].due_at_ms : null;
  const nextDue = (tp, c) => {
    if (tp in next) return whenRel(next[tp]);
    if (!c.delayed) return t("none");
    const list = "#/topic/" + enc(tp) + "/delayed";
    return link(list, last === null ? t("next.later") : t("next.after", whenRel(last)));
  };
  const hook = (n) => topics.webhooks && topics.webhooks[n];
  const rows = names.map((n) => {
    const c = topics.topics[n];
    const rate = topics.rates && topics.rates[n];
    const lat = c.lateness_ms || {};
    const count = (s) => el("td", { class: "num", "data-count": s }, s === "dead" && c.dead ? link("#/dead/" + enc(n), c.dead) : num(c[s]));
    const cells = [
      el("td", { class: "fit" }, link("#/topic/" + enc(n), n)),
      count("delayed"), count("ready"), count("reserved"),
      withFinished ? count("finished") : null,
      count("dead"),
      withStats ? [
        el("td", { class: "num", "data-col": "oldest_ready" }, dur(c.oldest_ready_ms)),
        el("td", { class: "num", "data-col": "oldest_overdue" }, dur(c.oldest_overdue_ms)),
        el("td", { class: "num", "data-col": "p50" }, le(lat.p50, lat.samples)),
        el("td", { class: "num", "data-col": "p99" }, le(lat.p99, lat.samples)),
        el("td", { class: "num", "data-col": "p999" }, le(lat.p999, lat.samples)),
        el("td", { "data-col": "held", class: "fit" }, heldText(c.held)),
      ] : null,
      el("td", { "data-col": "next_due", class: "fit" }, nextDue(n, c)),
      el("td", { "data-col": "rate", class: "fit" }, rateText(rate)),
      el("td", { "data-col": "state" }, c.paused ? el("span", { class: "paused" }, t("paused")) : t("running")),
      el("td", { "data-delivery": "", class: "fit" }, hook(n) ? t("delivery.webhook", hook(n)) : t("delivery.pop")),
    ];
    if (!config.read_only) {
      cells.push(el("td", { class: "actions-cell" }, el("button", {
        onclick: () => act(() => api("POST", "v1/topics/" + enc(n) + (c.paused ? "/resume" : "/pause")), t(c.paused ? "act.resumed" : "act.paused", n)),
      }, t(c.paused ? "act.resume" : "act.pause"))));
    }
    return el("tr", { "data-topic": n }, cells);
  });
  const head = [t("col.topic"), ...["delayed", "ready", "reserved"].concat(withFinished ? ["finished"] : [], ["dead"]).map((s) => [t("state." + s), "num"])];
  if (withStats) head.push([t("col.oldest.ready"), "num"], [t("col.oldest.overdue"), "num"], [t("col.p50"), "num"], [t("col.p99"), "num"], [t("col.p999"), "num"], t("col.held"));
  head.push(t("col.next.due"), t("col.rate"), t("col.state"), t("col.delivery"));
  if (!config.read_only) head.push("");
  const up = upcoming.jobs.slice(0, 10).map((j) => el("tr", {},
    el("td", {}, when(j.due_at_ms)), el("td", {}, fromNow(j.due_at_ms)), el("td", {}, link("#/topic/" + enc(j.topic), j.topic)),
    el("td", {}, link("#/job/" + enc(j.id), j.id))));
  show(mine,
    el("h2", {}, t("topics")),
    rows.length ? table("topics", head, rows) : el("p", { class: "muted" }, t("topics.none")),
    rows.length && !withStats ? notAvailable(t("backlog.absent")) : null,
    throughputSection("throughput", t("throughput"), tp),
    el("h2", {}, t("due.next")),
    up.length ? [table("upcoming", [t("col.due"), "", t("col.topic"), t("col.id")], up), el("p", {}, link("#/schedule", t("due.more")))]
      : el("p", { class: "muted" }, t("due.none")),
    latenessView(topics, metrics),
  );
}

// Lateness: the percentiles across instances (from /v1/topics, when the
// server has them) beside this instance's histogram and dispatches by
// path (from /metrics).
function latenessView(topics, text) {
  const out = [el("h2", {}, t("lateness"))];
  const all = topics.lateness_ms;
  if (all && all.samples) {
    out.push(el("p", { id: "lateness-all" }, t("lateness.all", dur((all.window_s || 3600) * 1000), le(all.p50, 1), le(all.p99, 1), le(all.p999, 1), num(all.samples))));
  } else if (all) {
    out.push(el("p", { id: "lateness-all" }, t("lateness.all.none", dur((all.window_s || 3600) * 1000))));
  }
  out.push(el("p", { class: "muted" }, t("lateness.promise")));
  const buckets = [];
  const paths = {};
  for (const line of (text || "").split("\n")) {
    let m = line.match(/^delayq_fire_lateness_seconds_bucket\{le="([^"]+)"\} (\d+)/);
    if (m) buckets.push([m[1], Number(m[2])]);
    m = line.match(/^delayq_jobs_dispatched_total\{path="([^"]+)",[^}]*\} (\d+)/);
    if (m) paths[m[1]] = (paths[m[1]] || 0) + Number(m[2]);
  }
  out.push(el("h2", {}, t("lateness.here")));
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!total) {
    out.push(el("p", { class: "muted" }, t("lateness.none")));
  } else {
    let prev = 0;
    const rows = buckets.map(([b, n]) => {
      const here = n - prev;
      prev = n;
      const label = b === "+Inf" ? t("lateness.more") : t("lateness.le", dur(Number(b) * 1000));
      // An SVG bar: sized by attributes, as the policy forbids style ones.
      const w = Math.round(300 * here / total);
      const bar = svgEl("svg", { width: 300, height: 12, class: "hbar" }, svgEl("rect", { x: 0, y: 1, width: w, height: 10, class: "bar" }));
      return el("tr", {}, el("td", {}, label), el("td", { class: "num" }, here), el("td", {}, bar));
    });
    out.push(table("lateness", [t("col.lateness"), [t("col.jobs"), "num"], ""], rows));
  }
  const p = Object.entries(paths);
  out.push(el("h2", {}, t("paths")),
    p.length ? table("paths", [t("col.path"), [t("col.jobs"), "num"]],
      p.map(([k, n]) => el("tr", {}, el("td", {}, k === "event" ? t("path.event") : k), el("td", { class: "num" }, n))))
      : el("p", { class: "muted" }, t("paths.none")));
  return out;
}

// A topic's heading, what holds it, its rate limit (editable), pause and
// resume, its chart and the tabs of its states.
function topicHead(topic, topics, state, tp) {
  const c = topics.topics[topic] || { delayed: 0, ready: 0, reserved: 0, dead: 0, paused: false };
  const rate = topics.rates && topics.rates[topic];
  const hook = topics.webhooks && topics.webhooks[topic];
  const lat = c.lateness_ms;
  const fields = [
    ["state", c.paused ? el("span", { class: "paused" }, t("paused")) : t("running")],
    "held" in c ? ["held", heldText(c.held)] : null,
    "oldest_ready_ms" in c ? ["oldest_ready", dur(c.oldest_ready_ms)] : null,
    "oldest_overdue_ms" in c ? ["oldest_overdue", dur(c.oldest_overdue_ms)] : null,
    lat ? ["lateness", le(lat.p50, lat.samples) + " / " + le(lat.p99, lat.samples) + " / " + le(lat.p999, lat.samples) + " (" + t("samples", num(lat.samples)) + ")"] : null,
    ["rate", rateText(rate)],
    ["delivery", hook ? t("delivery.webhook", hook) : t("delivery.pop")],
  ].filter(Boolean);
  const label = { state: "f.state", held: "f.held", oldest_ready: "f.oldest.ready", oldest_overdue: "f.oldest.overdue", lateness: "f.lateness", rate: "topic.rate", delivery: "f.delivery" };
  const actions = [];
  if (!config.read_only) {
    actions.push(el("button", {
      id: "toggle-pause",
      onclick: () => act(() => api("POST", "v1/topics/" + enc(topic) + (c.paused ? "/resume" : "/pause")), t(c.paused ? "act.resumed" : "act.paused", topic)),
    }, t(c.paused ? "act.resume" : "act.pause")));
    const per = el("input", { id: "rate-per-second", type: "number", min: "0", step: "any", value: rate ? rate.per_second : "", "aria-label": t("topic.rate.per.second"), placeholder: t("topic.rate.per.second") });
    const burst = el("input", { id: "rate-burst", type: "number", min: "1", step: "1", value: rate ? rate.burst : "", "aria-label": t("topic.rate.burst"), placeholder: t("topic.rate.burst") });
    actions.push(el("form", { id: "rate-form", class: "inline", onsubmit: (ev) => {
      ev.preventDefault();
      const ps = Number(per.value);
      if (!per.value || !(ps > 0)) return flash(t("topic.rate.bad"), true);
      const spec = { per_second: ps };
      if (burst.value) spec.burst = Number(burst.value);
      act(() => api("PUT", "v1/topics/" + enc(topic) + "/rate", spec), t("topic.rate.saved", topic));
    } }, el("label", {}, t("topic.rate.per.second") + " ", per), " ", el("label", {}, t("topic.rate.burst") + " ", burst), " ",
    el("button", { type: "submit", id: "rate-save" }, t("topic.rate.save"))));
    if (rate) {
      actions.push(el("button", { id: "rate-remove", onclick: () => act(() => api("DELETE", "v1/topics/" + enc(topic) + "/rate"), t("topic.rate.removed", topic)) }, t("topic.rate.remove")));
    }
  }
  const tabs = STATES.filter((s) => s !== "finished" || has(c.finished)).map((s) =>
    el("a", { href: s === "dead" ? "#/dead/" + enc(topic) : "#/topic/" + enc(topic) + "/" + s, class: s === state ? "current" : null, "data-state": s },
      t("state." + s) + " (" + num(c[s]) + ")"));
  return [
    el("h2", {}, t("topic.title", topic)),
    el("dl", { class: "fields", id: "topic" }, fields.map(([k, v]) => [el("dt", {}, t(label[k])), el("dd", { "data-field": k }, v)])),
    actions.length ? el("div", { class: "actions" }, actions) : null,
    tp === undefined ? null : throughputSection("topic-throughput", t("throughput.topic", topic), tp),
    el("h2", {}, t("topic.jobs")),
    el("p", { class: "tabs" }, tabs),
  ];
}

async function topicPage(mine, topic, state, cursor) {
  const listing = api("GET", "v1/topics/" + enc(topic) + "/jobs?state=" + enc(state) + "&limit=50" + (cursor ? "&cursor=" + enc(cursor) : ""))
    .catch((e) => {
      // An older server knows no finished state: not available, no error.
      if (state === "finished" && e instanceof ApiError && (e.status === 400 || e.status === 422)) return null;
      throw e;
    });
  const [topics, p, tp] = await Promise.all([
    api("GET", "v1/topics"), listing,
    optional(api("GET", "v1/stats/throughput?resolution=" + chartRes + "&topic=" + enc(topic))),
  ]);
  const time = state === "finished" ? (j) => j.finished_at_ms : (j) => j.due_at_ms;
  const rows = p ? p.jobs.map((j) => el("tr", { "data-id": j.id },
    el("td", {}, link("#/job/" + enc(j.id), j.id)),
    el("td", {}, whenRel(time(j))),
    el("td", { class: "num" }, num(j.attempts)),
    state === "reserved" ? el("td", {}, whenRel(j.lease_until_ms)) : null,
    state === "finished" ? el("td", { class: "wrap" }, j.last_error ? masked(j.last_error) : t("none")) : null)) : [];
  const heads = [t("col.id"), t(state === "finished" ? "col.finished" : "col.due"), [t("col.attempts"), "num"]];
  if (state === "reserved") heads.push(t("col.lease"));
  if (state === "finished") heads.push(t("col.error"));
  const base = "#/topic/" + enc(topic) + "/" + state;
  show(mine,
    topicHead(topic, topics, state, tp),
    !p ? notAvailable(t("topic.finished.absent"))
      : rows.length ? table("jobs", heads, rows)
        : el("p", { class: "muted" }, p.next_cursor ? t("topic.list.stretch") : t("topic.list.none")),
    el("p", { class: "pager" },
      cursor ? link(base, t("topic.first.page")) : null, cursor && p && p.next_cursor ? " · " : null,
      p && p.next_cursor ? link(base + "/" + enc(p.next_cursor), t("topic.next.page")) : null),
  );
}

async function deadPage(mine, topic, cursor) {
  const [topics, p] = await Promise.all([
    api("GET", "v1/topics"),
    api("GET", "v1/topics/" + enc(topic) + "/jobs?state=dead&limit=50" + (cursor ? "&cursor=" + enc(cursor) : "")),
  ]);
  const boxes = [];
  const rows = p.jobs.map((j) => {
    const box = el("input", { type: "checkbox", value: j.id, "aria-label": t("act.select", j.id) });
    boxes.push(box);
    return el("tr", { "data-id": j.id },
      config.read_only ? null : el("td", {}, box),
      el("td", {}, link("#/job/" + enc(j.id), j.id)),
      el("td", {}, whenRel(j.dead_at_ms)), el("td", { class: "num" }, num(j.attempts)), el("td", { class: "wrap" }, masked(j.last_error)));
  });
  const actions = config.read_only ? [] : [
    el("button", { id: "requeue-selected", onclick: () => {
      const ids = boxes.filter((b) => b.checked).map((b) => b.value);
      if (!ids.length) return flash(t("act.select.first"), true);
      act(() => api("POST", "v1/topics/" + enc(topic) + "/dead/requeue", { ids }), t("act.requeued", ids.length));
    } }, t("act.requeue.selected")),
    el("button", { id: "requeue-all", onclick: () => {
      if (confirm(t("act.confirm.requeue.all", topic))) act(() => api("POST", "v1/topics/" + enc(topic) + "/dead/requeue", {}), t("act.requeued.all"));
    } }, t("act.requeue.all")),
    el("button", { id: "purge", class: "danger", onclick: () => {
      if (confirm(t("act.confirm.purge", topic))) act(() => api("DELETE", "v1/topics/" + enc(topic) + "/dead"), t("act.purged"));
    } }, t("act.purge")),
  ];
  const heads = [t("col.id"), t("col.died"), [t("col.attempts"), "num"], t("col.error")];
  if (!config.read_only) heads.unshift("");
  show(mine,
    el("p", {}, link("#/topic/" + enc(topic), t("topic.title", topic))),
    el("h2", {}, t("dead.title", topic)),
    el("p", { class: "tabs" }, STATES.filter((s) => s !== "finished" || has((topics.topics[topic] || {}).finished)).map((s) =>
      el("a", { href: s === "dead" ? "#/dead/" + enc(topic) : "#/topic/" + enc(topic) + "/" + s, class: s === "dead" ? "current" : null }, t("state." + s)))),
    el("div", { class: "actions" }, actions),
    rows.length ? table("dead", heads, rows) : el("p", { class: "muted", id: "no-dead" }, t("dead.none")),
    p.next_cursor ? el("p", {}, link("#/dead/" + enc(topic) + "/" + enc(p.next_cursor), t("topic.next.page"))) : null,
  );
}

async function jobPage(mine, id) {
  let j;
  try {
    j = await api("GET", "v1/jobs/" + enc(id));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    show(mine, el("h2", {}, t("job")), el("p", { class: "error", id: "job-missing" }, t("job.missing", JSON.stringify(id), e.message)));
    return;
  }
  const body = j.body || "";
  const r = j.retry || {};
  const retry = ((r.intervals_ms || []).length ? t("retry.waits", r.intervals_ms.map(dur).join(", ")) : t("retry.no.waits")) + "; " +
    (has(r.max_attempts) ? t("retry.max", r.max_attempts)
      : (r.intervals_ms || []).length ? t("retry.default.max", r.intervals_ms.length + 1) : t("retry.unlimited"));
  const fields = [
    ["id", "f.id", j.id],
    ["topic", "f.topic", link("#/topic/" + enc(j.topic), j.topic)],
    ["state", "f.state", t("state." + j.state)],
    ["due", "f.due", whenRel(j.due_at_ms)],
    ["attempts", "f.attempts", num(j.attempts)],
    ["ttr", "f.ttr", dur(j.ttr_ms)],
    ["retry", "f.retry", retry],
    ["lease until", "f.lease", has(j.lease_until_ms) ? whenRel(j.lease_until_ms) : t("none")],
    ["dead since", "f.dead", has(j.dead_at_ms) ? whenRel(j.dead_at_ms) : t("none")],
    ["finished", "f.finished", has(j.finished_at_ms) ? whenRel(j.finished_at_ms) : t("none")],
    ["last error", "f.error", j.last_error ? masked(j.last_error) : t("none")],
    ["tags", "f.tags", (j.tags || []).join(", ") || t("none")],
  ];
  // Every other field the server sends, as it sends it (nulls left out).
  const known = new Set(["id", "topic", "state", "due_at_ms", "attempts", "ttr_ms", "retry", "lease_until_ms", "dead_at_ms", "finished_at_ms", "last_error", "history", "body", "tags"]);
  for (const [k, v] of Object.entries(j)) {
    if (known.has(k) || !has(v)) continue;
    const shown = typeof v === "object" ? JSON.stringify(v, (_, x) => (x === null ? undefined : x)) : String(v);
    fields.push([k, null, /_ms$/.test(k) && typeof v === "number" && v > 1e12 ? whenRel(v) : shown]);
  }
  const history = (j.history || []).map((h) => el("tr", {}, el("td", { class: "num" }, num(h.attempt)), el("td", {}, when(h.at_ms)), el("td", { class: "wrap" }, masked(h.error))));
  const actions = [];
  if (!config.read_only) {
    if (j.state === "dead") {
      actions.push(el("button", { id: "requeue", onclick: () => act(() => api("POST", "v1/topics/" + enc(j.topic) + "/dead/requeue", { ids: [j.id] }), t("act.requeued", 1)) }, t("act.requeue")));
    } else if (j.state !== "finished") {
      const at = el("input", { type: "datetime-local", id: "reschedule-at", step: "1", "aria-label": t("act.new.due") });
      actions.push(
        el("button", { id: "run-now", onclick: () => act(() => api("POST", "v1/jobs/" + enc(id) + "/reschedule", { delay_ms: 0 }), t("act.due.now")) }, t("act.run")),
        at,
        el("button", { id: "reschedule", onclick: () => {
          if (!at.value) return flash(t("act.pick.time"), true);
          act(() => api("POST", "v1/jobs/" + enc(id) + "/reschedule", { due_at: new Date(at.value).toISOString() }), t("act.rescheduled"));
        } }, t("act.reschedule")),
      );
    }
    actions.push(el("button", { id: "delete", class: "danger", onclick: () => {
      if (confirm(t("act.confirm.delete", id))) act(() => api("DELETE", "v1/jobs/" + enc(id)), t("act.deleted", id), "#/topic/" + enc(j.topic));
    } }, t("act.delete")));
  }
  show(mine,
    el("h2", {}, t("job") + " ", el("span", { id: "job-id" }, j.id)),
    el("dl", { class: "fields", id: "job" }, fields.map(([k, label, v]) => [el("dt", {}, label ? t(label) : k), el("dd", { "data-field": k }, v)])),
    actions.length ? el("div", { class: "actions" }, actions) : null,
    el("h2", {}, t("job.history")),
    history.length ? table("history", [[t("col.attempts"), "num"], t("col.when"), t("col.error")], history)
      : el("p", { class: "muted" }, t("job.history.none")),
    // A finished job's record keeps no body.
    j.state === "finished" ? [el("h2", {}, t("job.body", 0)), el("p", { class: "muted", id: "body" }, t("job.body.gone"))] : [
      el("h2", {}, body.length > BODY_SHOWN ? t("job.body.cut", body.length, BODY_SHOWN) : t("job.body", body.length)),
      el("pre", { class: "body", id: "body" }, body.slice(0, BODY_SHOWN))],
  );
}

async function schedulePage(mine, cursor) {
  const p = await api("GET", "v1/schedule?limit=50" + (cursor ? "&cursor=" + enc(cursor) : ""));
  const rows = p.jobs.map((j) => el("tr", { "data-id": j.id },
    el("td", {}, when(j.due_at_ms)), el("td", {}, fromNow(j.due_at_ms)),
    el("td", {}, link("#/topic/" + enc(j.topic), j.topic)), el("td", {}, link("#/job/" + enc(j.id), j.id))));
  show(mine,
    el("h2", {}, t("schedule.title")),
    rows.length ? table("schedule", [t("col.due"), "", t("col.topic"), t("col.id")], rows) : el("p", { class: "muted" }, t("due.none")),
    el("p", { class: "pager" },
      cursor ? link("#/schedule", t("topic.first.page")) : null, cursor && p.next_cursor ? " · " : null,
      p.next_cursor ? link("#/schedule/" + enc(p.next_cursor), t("topic.next.page")) : null),
  );
}

async function recurringPage(mine) {
  const list = await api("GET", "v1/recurring");
  const rows = (list.schedules || []).map((s) => {
    const nextRuns = Array.isArray(s.next_runs_ms) ? s.next_runs_ms : has(s.next_fire_ms) ? [s.next_fire_ms] : [];
    const ops = "paused" in s; // a server with run now, pause and resume
    const actions = [];
    if (!config.read_only) {
      const base = "v1/recurring/" + enc(s.name);
      if (ops) {
        actions.push(
          el("button", { "data-act": "run", onclick: () => act(async () => {
            const r = await api("POST", base + "/run");
            return r.id || r.job_id || "";
          }, (id) => t("recurring.run.done", id)) }, t("act.run")),
          el("button", { "data-act": s.paused ? "resume" : "pause", onclick: () => act(() => api("POST", base + (s.paused ? "/resume" : "/pause")),
            t(s.paused ? "recurring.resumed" : "recurring.paused", s.name)) }, t(s.paused ? "act.resume" : "act.pause")),
        );
      }
      actions.push(el("button", { "data-act": "delete", class: "danger", onclick: () => {
        if (confirm(t("recurring.confirm.delete", s.name))) act(() => api("DELETE", base), t("recurring.deleted", s.name));
      } }, t("act.delete")));
    }
    return el("tr", { "data-name": s.name },
      el("td", {}, s.name),
      el("td", {}, link("#/topic/" + enc(s.topic), s.topic)),
      el("td", {}, el("code", {}, s.cron), " ", s.timezone || ""),
      el("td", { "data-col": "state" }, ops && s.paused ? [el("span", { class: "paused" }, t("paused")), has(s.paused_at_ms) ? el("div", { class: "muted" }, t("since", when(s.paused_at_ms))) : null] : t("running")),
      el("td", { "data-col": "last_tick", class: "fit" }, s.last_tick_ms ? whenRel(s.last_tick_ms) : t("never")),
      el("td", { "data-col": "next_runs", class: "fit" }, nextRuns.length ? el("ul", { class: "plain" }, nextRuns.map((ms) => el("li", {}, whenRel(ms))))
        : ops && s.paused ? t("dash") : t("recurring.no.more")),
      el("td", { class: "clip" }, (s.body || "").slice(0, 80)),
      config.read_only ? null : el("td", { class: "actions-cell" }, actions));
  });
  const heads = [t("col.name"), t("col.topic"), t("col.cron"), t("col.state"), t("col.last.tick"), t("col.next.runs"), t("col.body")];
  if (!config.read_only) heads.push("");
  show(mine,
    el("h2", {}, t("recurring.title")),
    rows.length ? table("recurring", heads, rows) : el("p", { class: "muted" }, t("recurring.none")),
  );
}

async function webhooksPage(mine) {
  const w = await optional(api("GET", "v1/webhooks"));
  if (!w) return show(mine, el("h2", {}, t("webhooks.title")), notAvailable(t("webhooks.absent")));
  const rows = (w.webhooks || []).map((h) => el("tr", { "data-topic": h.topic },
    el("td", {}, link("#/topic/" + enc(h.topic), h.topic)),
    el("td", { "data-col": "url" }, masked(h.url)),
    el("td", { class: "num", "data-col": "concurrency" }, num(h.concurrency)),
    el("td", { class: "num" }, dur(h.timeout_ms)),
    el("td", { "data-col": "last_status" }, has(h.last_status) ? String(h.last_status) : t("dash")),
    el("td", { class: "fit" }, has(h.last_at_ms) ? whenRel(h.last_at_ms) : t("never")),
    el("td", { class: "wrap" }, masked(h.last_error)),
    el("td", { class: "num", "data-col": "delivered" }, num(h.delivered_last_hour)),
    el("td", { class: "num", "data-col": "failures" }, num(h.failures_last_hour)),
    el("td", { class: "num" }, num(h.instances))));
  show(mine,
    el("h2", {}, t("webhooks.title")),
    rows.length ? table("webhooks", [t("col.topic"), t("col.url"), [t("col.concurrency"), "num"], [t("col.timeout"), "num"], t("col.last.status"),
      t("col.last.at"), t("col.error"), [t("col.delivered.hour"), "num"], [t("col.failures.hour"), "num"], [t("col.instances"), "num"]], rows)
      : el("p", { class: "muted" }, t("webhooks.none")),
  );
}

async function instancesPage(mine) {
  const v = await optional(api("GET", "v1/instances"));
  if (!v) return show(mine, el("h2", {}, t("instances.title")), notAvailable(t("instances.absent")));
  const rows = (v.instances || []).map((i) => el("tr", { "data-id": i.id },
    el("td", { "data-col": "id" }, i.id),
    el("td", { "data-col": "host" }, i.host || ""),
    el("td", { class: "num" }, num(i.pid)),
    el("td", { "data-col": "version" }, i.version || ""),
    el("td", { class: "fit" }, whenRel(i.started_at_ms)),
    el("td", { "data-col": "listen" }, i.listen || ""),
    el("td", { class: "num", "data-col": "waiting_pops" }, num(i.waiting_pops)),
    el("td", { class: "fit" }, (i.webhook_consumers || []).map((c) => c.topic + " ×" + num(c.concurrency)).join(", ") || t("none")),
    el("td", { "data-col": "dispatching" }, partitionsText(i.dispatching)),
    el("td", { class: "fit" }, whenRel(i.last_seen_ms))));
  show(mine,
    el("h2", {}, t("instances.title")),
    rows.length ? table("instances", [t("col.id"), t("col.host"), [t("col.pid"), "num"], t("col.version"), t("col.started"), t("col.listen"),
      [t("col.waiting"), "num"], t("col.consumers"), t("col.dispatching"), t("col.last.seen")], rows)
      : el("p", { class: "muted" }, t("instances.none")),
  );
}

// The path the server is mounted at ("/" or a proxy's prefix), for the cookie.
function mountPath() { return location.pathname.replace(/ui\/[^/]*$/, ""); }
function loginPage(mine = seq) {
  refreshes = false;
  footer();
  document.getElementById("signout").hidden = true;
  const input = el("input", { type: "password", id: "token", name: "token", "aria-label": t("signin.token"), autocomplete: "current-password" });
  show(mine,
    el("h2", {}, t("signin")),
    el("p", {}, t("signin.why")),
    el("form", { id: "login", onsubmit: async (ev) => {
      ev.preventDefault();
      const path = mountPath();
      const r = await fetch("login", { method: "POST", credentials: "same-origin",
        headers: { "X-Delayq-UI": "1", "Content-Type": "application/json" }, body: JSON.stringify({ token: input.value, path }) });
      if (r.ok) route(); else flash(t("signin.wrong"), true);
    } }, input, " ", el("button", { type: "submit" }, t("signin"))),
  );
}

// ---- Plumbing ----
function flash(text, bad) {
  const n = el("p", { class: bad ? "error" : "notice", id: "flash" }, text);
  const old = document.getElementById("flash");
  if (old) old.remove();
  document.getElementById("main").prepend(n);
}
// Runs an action, shows the page again, then says what was done (`done`
// may be a function of what the action returned).
async function act(call, done, then) {
  try {
    const v = await call();
    dirty = false;
    if (then) location.hash = then;
    await route();
    flash(typeof done === "function" ? done(v) : done);
  } catch (e) {
    if (e instanceof Unauthorized) return loginPage();
    flash(e.message, true);
  }
}
async function health() {
  const h = document.getElementById("health");
  try {
    const r = await fetch(API + "readyz", { credentials: "same-origin", headers: { "X-Delayq-UI": "1" } });
    const v = await r.json();
    h.className = "health " + (r.ok ? "ok" : "bad");
    h.textContent = t("health.line", t(v.redis ? "health.up" : "health.down"), v.memory || t("dash"),
      t(v.subscriber ? "health.connected" : "health.down")) + (v.masters ? t("health.masters", v.masters.length) : "");
  } catch (_) {
    h.className = "health bad";
    h.textContent = t("health.unreachable");
  }
}
function footer() {
  document.getElementById("refresh-note").textContent = refreshes ? t(dirty ? "refresh.held" : "refresh.note") : "";
  const name = zoneName(), offset = zoneOffset(new Date());
  document.getElementById("zone").textContent = name === offset ? t("zone.one", name) : t("zone", name, offset);
}
// The header's fixed strings, in the language chosen.
function applyLang() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  for (const n of document.querySelectorAll("[data-i18n]")) n.textContent = t(n.getAttribute("data-i18n"));
  document.getElementById("find-id").placeholder = t("find.placeholder");
  document.getElementById("find-id").setAttribute("aria-label", t("find.placeholder"));
  document.getElementById("lang").textContent = t("lang.other");
  document.getElementById("mode").textContent = config.read_only ? t("readonly") : "";
}
function currentNav(first) {
  for (const a of document.querySelectorAll("#nav a")) {
    const target = a.getAttribute("href").replace(/^#\/?/, "");
    a.className = target === first || (target === "" && (first === "" || first === "topic" || first === "dead")) ? "current" : "";
  }
}
async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
  const mine = ++seq;
  currentNav(parts[0]);
  try {
    let still = true;
    if (parts[0] === "job" && parts[1]) { still = false; await jobPage(mine, parts.slice(1).join("/")); }
    else if (parts[0] === "dead" && parts[1]) await deadPage(mine, parts[1], parts[2]);
    else if (parts[0] === "topic" && parts[1] && parts[2] === "dead") await deadPage(mine, parts[1], parts[3]);
    else if (parts[0] === "topic" && parts[1]) await topicPage(mine, parts[1], parts[2] || "delayed", parts[3]);
    else if (parts[0] === "schedule") await schedulePage(mine, parts[1]);
    else if (parts[0] === "recurring") await recurringPage(mine);
    else if (parts[0] === "webhooks") await webhooksPage(mine);
    else if (parts[0] === "instances") await instancesPage(mine);
    else await overview(mine);
    if (mine !== seq) return;
    refreshes = still;
    // Which view is shown (the tests wait for it).
    document.getElementById("main").setAttribute("data-page", parts[0] || "overview");
    await health();
    document.getElementById("signout").hidden = !config.auth;
    footer();
    const d = new Date();
    document.getElementById("updated").textContent = t("updated", pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()));
  } catch (e) {
    if (e instanceof Unauthorized) return loginPage(mine);
    show(mine, el("p", { class: "error" }, e.message));
  }
}

async function start() {
  try {
    const r = await fetch("config", { credentials: "same-origin" });
    if (r.ok) config = await r.json();
  } catch (_) { /* defaults */ }
  applyLang();
  document.getElementById("lang").addEventListener("click", () => {
    setLang(lang === "zh" ? "en" : "zh");
    applyLang();
    if (!document.getElementById("login")) route(); else loginPage(++seq);
  });
  document.getElementById("find").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = document.getElementById("find-id").value.trim();
    if (id) location.hash = "#/job/" + enc(id);
  });
  // Typing in a form of the page holds the refresh, which would redraw it.
  const main = document.getElementById("main");
  const edited = () => { dirty = true; footer(); };
  main.addEventListener("input", edited);
  main.addEventListener("change", edited);
  // Ends this session on the server (every instance), then asks again.
  document.getElementById("signout").addEventListener("click", async () => {
    const r = await fetch("logout", { method: "POST", credentials: "same-origin",
      headers: { "X-Delayq-UI": "1", "Content-Type": "application/json" }, body: JSON.stringify({ path: mountPath() }) });
    if (r.ok) loginPage(++seq); else flash(t("signout.failed", r.status), true);
  });
  window.addEventListener("hashchange", () => { dirty = false; route(); });
  await route();
  setInterval(() => {
    if (refreshes && !dirty && !document.getElementById("login")) route();
  }, 5000);
}
document.addEventListener("DOMContentLoaded", start);

// delayq's dashboard. Plain JavaScript, no build step, served from the
// binary. Every value from the server is put on the page as text (never as
// HTML), and the page holds no inline script (its Content-Security-Policy
// forbids it). API calls use paths relative to this page, so the dashboard
// works behind a reverse proxy under any path, and carry the X-Delayq-UI
// header, without which the server does not accept the login cookie (a
// page on another site cannot set it).
"use strict";

const API = "../";
const BODY_SHOWN = 4000;
let config = { read_only: false, auth: false };
let timer = null;

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
  document.getElementById("main").replaceChildren(...nodes);
}
function when(ms) {
  if (ms === null || ms === undefined) return "none";
  const d = new Date(ms);
  return d.toLocaleString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}
function fromNow(ms) {
  if (ms === null || ms === undefined) return "";
  const s = Math.round((ms - Date.now()) / 1000);
  const a = Math.abs(s);
  const t = a < 90 ? a + " s" : a < 5400 ? Math.round(a / 60) + " min" : a < 172800 ? Math.round(a / 3600) + " h" : Math.round(a / 86400) + " d";
  return s >= 0 ? "in " + t : t + " ago";
}
function link(href, text) { return el("a", { href }, text); }
function enc(s) { return encodeURIComponent(s); }

// ---- API ----
class Unauthorized extends Error {}
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
  if (!r.ok) throw new Error((v.error && v.error.message) || r.status + " " + r.statusText);
  return v;
}
async function metricsText() {
  const r = await fetch(API + "metrics", { credentials: "same-origin", headers: { "X-Delayq-UI": "1" } });
  if (r.status === 401) throw new Unauthorized();
  return r.text();
}

// ---- Views ----
async function overview(mine) {
  const [topics, upcoming, metrics] = await Promise.all([
    api("GET", "v1/topics"),
    api("GET", "v1/schedule?limit=20"),
    metricsText().catch(() => ""),
  ]);
  const names = Object.keys(topics.topics).slice(0, 50);
  // Each topic's next due time comes from the one listing of what falls
  // due next (a listing per topic cost Redis thousands of entries a
  // refresh). A topic with delayed jobs that is not in it falls due after
  // its last entry; it is never "none".
  const next = {};
  for (const j of upcoming.jobs) if (!(j.topic in next)) next[j.topic] = j.due_at_ms;
  const last = upcoming.jobs.length ? upcoming.jobs[upcoming.jobs.length - 1].due_at_ms : null;
  const nextDue = (t, c) => {
    if (t in next) return when(next[t]) + " (" + fromNow(next[t]) + ")";
    if (!c.delayed) return "none";
    const list = "#/topic/" + enc(t) + "/delayed";
    return link(list, last === null ? "later" : "after " + when(last) + " (" + fromNow(last) + ")");
  };
  const hook = (t) => topics.webhooks && topics.webhooks[t];
  const rows = names.map((t) => {
    const c = topics.topics[t];
    const rate = topics.rates && topics.rates[t];
    const cells = [
      el("td", {}, link("#/topic/" + enc(t) + "/delayed", t)),
      el("td", { class: "num", "data-count": "delayed" }, c.delayed),
      el("td", { class: "num", "data-count": "ready" }, c.ready),
      el("td", { class: "num", "data-count": "reserved" }, c.reserved),
      el("td", { class: "num", "data-count": "dead" }, c.dead ? link("#/dead/" + enc(t), c.dead) : "0"),
      el("td", {}, nextDue(t, c)),
      el("td", {}, rate ? rate.per_second + "/s, burst " + rate.burst : "none"),
      el("td", {}, c.paused ? el("span", { class: "paused" }, "paused") : "running"),
      el("td", { "data-delivery": "" }, hook(t) ? "webhook to " + hook(t) : "pop"),
    ];
    if (!config.read_only) {
      cells.push(el("td", {}, el("button", {
        onclick: () => act(() => api("POST", "v1/topics/" + enc(t) + (c.paused ? "/resume" : "/pause")), c.paused ? "Resumed " + t : "Paused " + t),
      }, c.paused ? "Resume" : "Pause")));
    }
    return el("tr", { "data-topic": t }, cells);
  });
  const head = ["topic", "delayed", "ready", "reserved", "dead", "next due", "rate limit", "state", "delivered by"];
  if (!config.read_only) head.push("");
  const up = upcoming.jobs.map((j) => el("tr", {},
    el("td", {}, when(j.due_at_ms)), el("td", {}, fromNow(j.due_at_ms)), el("td", {}, j.topic),
    el("td", {}, link("#/job/" + enc(j.id), j.id))));
  show(mine,
    el("h2", {}, "Topics"),
    rows.length ? el("table", { id: "topics" }, el("tr", {}, head.map((h, i) => el("th", { class: i >= 1 && i <= 4 ? "num" : null }, h))), rows)
      : el("p", { class: "muted" }, "No topics yet."),
    el("h2", {}, "Falling due next"),
    up.length ? el("table", { id: "upcoming" }, el("tr", {}, ["due", "", "topic", "id"].map((h) => el("th", {}, h))), up)
      : el("p", { class: "muted" }, "Nothing scheduled."),
    ...metricsView(metrics),
  );
}

// The lateness histogram and dispatches by path, from /metrics.
function metricsView(text) {
  if (!text) return [];
  const buckets = [];
  const paths = {};
  for (const line of text.split("\n")) {
    let m = line.match(/^delayq_fire_lateness_seconds_bucket\{le="([^"]+)"\} (\d+)/);
    if (m) buckets.push([m[1], Number(m[2])]);
    m = line.match(/^delayq_jobs_dispatched_total\{path="([^"]+)",[^}]*\} (\d+)/);
    if (m) paths[m[1]] = (paths[m[1]] || 0) + Number(m[2]);
  }
  const out = [el("h2", {}, "Fire lateness (hand-over minus due time, this instance)")];
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!total) {
    out.push(el("p", { class: "muted" }, "No job has fallen due here yet."));
  } else {
    let prev = 0;
    const rows = buckets.map(([le, n]) => {
      const here = n - prev;
      prev = n;
      const label = le === "+Inf" ? "more" : "≤ " + (Number(le) * 1000).toLocaleString() + " ms";
      // Sized through the CSSOM: the policy forbids style attributes.
      const bar = el("span", { class: "bar" });
      bar.style.width = Math.round(300 * here / total) + "px";
      return el("tr", {}, el("td", {}, label), el("td", { class: "num" }, here), el("td", {}, bar));
    });
    out.push(el("table", { id: "lateness" }, el("tr", {}, el("th", {}, "lateness"), el("th", { class: "num" }, "jobs"), el("th", {}, "")), rows));
  }
  const p = Object.entries(paths);
  out.push(el("h2", {}, "Dispatches by path"),
    p.length ? el("table", { id: "paths" }, el("tr", {}, el("th", {}, "path"), el("th", { class: "num" }, "jobs")),
      p.map(([k, n]) => el("tr", {}, el("td", {}, k === "event" ? "expired event" : k), el("td", { class: "num" }, n))))
      : el("p", { class: "muted" }, "None yet."));
  return out;
}

async function jobPage(mine, id) {
  let j;
  try {
    j = await api("GET", "v1/jobs/" + enc(id));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    show(mine, el("h2", {}, "Job"), el("p", { class: "error", id: "job-missing" }, "No job " + JSON.stringify(id) + ": " + e.message));
    return;
  }
  const body = j.body || "";
  const fields = [
    ["id", j.id], ["topic", j.topic], ["state", j.state],
    ["due", when(j.due_at_ms) + " (" + fromNow(j.due_at_ms) + ")"],
    ["attempts", j.attempts], ["ttr", j.ttr_ms + " ms"],
    ["lease until", j.lease_until_ms ? when(j.lease_until_ms) : "none"],
    ["dead since", j.dead_at_ms ? when(j.dead_at_ms) : "none"],
    ["last error", j.last_error || "none"],
  ];
  const history = (j.history || []).map((h) => el("tr", {}, el("td", { class: "num" }, h.attempt), el("td", {}, when(h.at_ms)), el("td", {}, h.error)));
  const actions = [];
  if (!config.read_only) {
    const at = el("input", { type: "datetime-local", id: "reschedule-at", "aria-label": "new due time" });
    actions.push(
      el("button", { id: "run-now", onclick: () => act(() => api("POST", "v1/jobs/" + enc(id) + "/reschedule", { delay_ms: 0 }), "Due now") }, "Run now"),
      at,
      el("button", { id: "reschedule", onclick: () => {
        if (!at.value) return flash("Pick a time first.", true);
        act(() => api("POST", "v1/jobs/" + enc(id) + "/reschedule", { due_at: new Date(at.value).toISOString() }), "Rescheduled");
      } }, "Reschedule"),
      el("button", { id: "delete", class: "danger", onclick: () => {
        if (confirm("Delete job " + id + "?")) act(() => api("DELETE", "v1/jobs/" + enc(id)), "Deleted " + id, "#/");
      } }, "Delete"),
    );
  }
  show(mine,
    el("h2", {}, "Job ", el("span", { id: "job-id" }, j.id)),
    el("dl", { class: "fields", id: "job" }, fields.map(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)])),
    el("div", { class: "actions" }, actions),
    el("h2", {}, "Failed attempts"),
    history.length ? el("table", {}, el("tr", {}, el("th", { class: "num" }, "attempt"), el("th", {}, "at"), el("th", {}, "error")), history)
      : el("p", { class: "muted" }, "None."),
    el("h2", {}, "Body (" + body.length + " characters" + (body.length > BODY_SHOWN ? ", first " + BODY_SHOWN + " shown" : "") + ")"),
    el("pre", { class: "body", id: "body" }, body.slice(0, BODY_SHOWN)),
  );
}

async function listPage(mine, topic, state, cursor) {
  const p = await api("GET", "v1/topics/" + enc(topic) + "/jobs?state=" + state + "&limit=50" + (cursor ? "&cursor=" + enc(cursor) : ""));
  const tabs = ["delayed", "ready", "reserved", "dead"].map((s) =>
    el("a", { href: s === "dead" ? "#/dead/" + enc(topic) : "#/topic/" + enc(topic) + "/" + s, class: s === state ? "current" : null }, s));
  const rows = p.jobs.map((j) => el("tr", {}, el("td", {}, link("#/job/" + enc(j.id), j.id)), el("td", {}, when(j.due_at_ms)), el("td", { class: "num" }, j.attempts)));
  show(mine,
    el("h2", {}, topic + ": " + state),
    el("p", { class: "tabs" }, tabs),
    rows.length ? el("table", { id: "jobs" }, el("tr", {}, el("th", {}, "id"), el("th", {}, "due"), el("th", { class: "num" }, "attempts")), rows)
      : el("p", { class: "muted" }, p.next_cursor ? "None in this stretch of the schedule; more may follow." : "None."),
    p.next_cursor ? el("p", {}, link("#/topic/" + enc(topic) + "/" + state + "/" + enc(p.next_cursor), "Next page")) : null,
  );
}

async function deadPage(mine, topic, cursor) {
  const p = await api("GET", "v1/topics/" + enc(topic) + "/jobs?state=dead&limit=50" + (cursor ? "&cursor=" + enc(cursor) : ""));
  const boxes = [];
  const rows = p.jobs.map((j) => {
    const box = el("input", { type: "checkbox", value: j.id, "aria-label": "select " + j.id });
    boxes.push(box);
    return el("tr", { "data-id": j.id },
      config.read_only ? null : el("td", {}, box),
      el("td", {}, link("#/job/" + enc(j.id), j.id)),
      el("td", {}, when(j.dead_at_ms)), el("td", { class: "num" }, j.attempts), el("td", {}, j.last_error || ""));
  });
  const actions = config.read_only ? [] : [
    el("button", { id: "requeue-selected", onclick: () => {
      const ids = boxes.filter((b) => b.checked).map((b) => b.value);
      if (!ids.length) return flash("Select jobs first.", true);
      act(() => api("POST", "v1/topics/" + enc(topic) + "/dead/requeue", { ids }), "Requeued " + ids.length);
    } }, "Requeue selected"),
    el("button", { id: "requeue-all", onclick: () => {
      if (confirm("Requeue every dead job of " + topic + "?")) act(() => api("POST", "v1/topics/" + enc(topic) + "/dead/requeue", {}), "Requeued all");
    } }, "Requeue all"),
    el("button", { id: "purge", class: "danger", onclick: () => {
      if (confirm("Delete every dead job of " + topic + " for good?")) act(() => api("DELETE", "v1/topics/" + enc(topic) + "/dead"), "Purged");
    } }, "Purge all"),
  ];
  show(mine,
    el("h2", {}, "Dead letters of " + topic),
    el("div", { class: "actions" }, actions),
    rows.length ? el("table", { id: "dead" }, el("tr", {}, config.read_only ? null : el("th", {}, ""), el("th", {}, "id"), el("th", {}, "died"), el("th", { class: "num" }, "attempts"), el("th", {}, "last error")), rows)
      : el("p", { class: "muted", id: "no-dead" }, "No dead jobs."),
    p.next_cursor ? el("p", {}, link("#/dead/" + enc(topic) + "/" + enc(p.next_cursor), "Next page")) : null,
  );
}

// The path the server is mounted at ("/" or a proxy's prefix), for the cookie.
function mountPath() { return location.pathname.replace(/ui\/[^/]*$/, ""); }
function loginPage(mine = seq) {
  document.getElementById("signout").hidden = true;
  const input = el("input", { type: "password", id: "token", name: "token", "aria-label": "token", autocomplete: "current-password" });
  show(mine,
    el("h2", {}, "Sign in"),
    el("p", {}, "This delayq needs its access token (--auth-token)."),
    el("form", { id: "login", onsubmit: async (ev) => {
      ev.preventDefault();
      const path = mountPath();
      const r = await fetch("login", { method: "POST", credentials: "same-origin",
        headers: { "X-Delayq-UI": "1", "Content-Type": "application/json" }, body: JSON.stringify({ token: input.value, path }) });
      if (r.ok) route(); else flash("Wrong token.", true);
    } }, input, " ", el("button", { type: "submit" }, "Sign in")),
  );
}

// ---- Plumbing ----
function flash(text, bad) {
  const n = el("p", { class: bad ? "error" : "notice", id: "flash" }, text);
  const old = document.getElementById("flash");
  if (old) old.remove();
  document.getElementById("main").prepend(n);
}
async function act(call, done, then) {
  try {
    await call();
    if (then) location.hash = then;
    await route();
    flash(done);
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
    const ok = r.ok;
    h.className = "health " + (ok ? "ok" : "bad");
    h.textContent = "Redis " + (v.redis ? "up" : "down") + ", memory " + v.memory + ", subscriber " + (v.subscriber ? "connected" : "down") +
      (v.masters ? ", " + v.masters.length + " masters" : "");
  } catch (_) {
    h.className = "health bad";
    h.textContent = "delayq unreachable";
  }
}
async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const mine = ++seq;
  try {
    if (parts[0] === "job" && parts[1]) await jobPage(mine, parts.slice(1).join("/"));
    else if (parts[0] === "dead" && parts[1]) await deadPage(mine, parts[1], parts[2]);
    else if (parts[0] === "topic" && parts[1]) await listPage(mine, parts[1], parts[2] || "delayed", parts[3]);
    else await overview(mine);
    await health();
    document.getElementById("signout").hidden = !config.auth;
    document.getElementById("updated").textContent = "Updated " + new Date().toLocaleTimeString(undefined, { hour12: false }) + ".";
  } catch (e) {
    if (e instanceof Unauthorized) return loginPage(mine);
    show(mine, el("p", { class: "error" }, e.message));
  }
}

async function start() {
  try { config = await (await fetch("config", { credentials: "same-origin" })).json(); } catch (_) {}
  document.getElementById("mode").textContent = config.read_only ? "read-only" : "";
  document.getElementById("find").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = document.getElementById("find-id").value.trim();
    if (id) location.hash = "#/job/" + enc(id);
  });
  // Ends this session on the server (every instance), then asks again.
  document.getElementById("signout").addEventListener("click", async () => {
    const r = await fetch("logout", { method: "POST", credentials: "same-origin",
      headers: { "X-Delayq-UI": "1", "Content-Type": "application/json" }, body: JSON.stringify({ path: mountPath() }) });
    if (r.ok) loginPage(++seq); else flash("Sign-out failed: " + r.status, true);
  });
  window.addEventListener("hashchange", route);
  await route();
  // The job page is left alone: its inputs must keep what is typed.
  timer = setInterval(() => { if (!location.hash.startsWith("#/job/") && !document.getElementById("login")) route(); }, 5000);
}
document.addEventListener("DOMContentLoaded", start);

// app.js's last part: flash notices, actions, the health line, routing
// and the start. The dashboard's script /ui/app.js is the files of app/
// (common.js first, see src/http/ui.rs), then this one.

// ---- Plumbing ----
function flash(text, bad) {
  const n = el("p", { class: bad ? "error" : "notice", id: "flash" }, text);
  const old = document.getElementById("flash");
  if (old) old.remove();
  notice = { node: n, hash: location.hash, at: Date.now() };
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
      t(v.subscriber ? "health.connected" : "health.down"),
      t(v.expired_events === true ? "health.events.heard" : v.expired_events === false ? "health.events.not" : "health.events.unknown")) + (v.masters ? t("health.masters", v.masters.length) : "");
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
  findLabels();
  document.getElementById("lang").textContent = t("lang.other");
  document.getElementById("mode").textContent = config.read_only ? t("readonly") : "";
}
// Marks the nav link of the page shown, and only it (a topic's, a job's
// or dead letters' page has none).
function currentNav(first) {
  for (const a of document.querySelectorAll("#nav a")) {
    const target = a.getAttribute("href").replace(/^#\/?/, "");
    a.className = target === first ? "current" : "";
  }
}
async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
  const mine = ++seq;
  currentNav(parts[0]);
  try {
    let still = true;
    if (parts[0] === "job" && parts[1]) { still = false; await jobPage(mine, parts.slice(1).join("/")); }
    else if (parts[0] === "batch" && parts[1]) await batchPage(mine, parts.slice(1).join("/"));
    else if (parts[0] === "flow" && parts[1]) await flowPage(mine, parts.slice(1).join("/"));
    else if (parts[0] === "dead" && parts[1]) await deadPage(mine, parts[1], parts[2]);
    else if (parts[0] === "topic" && parts[1] && parts[2] === "dead") await deadPage(mine, parts[1], parts[3]);
    else if (parts[0] === "topic" && parts[1]) await topicPage(mine, parts[1], parts[2] || "delayed", parts[3]);
    else if (parts[0] === "schedule") await schedulePage(mine, parts[1]);
    else if (parts[0] === "recurring") await recurringPage(mine);
    else if (parts[0] === "webhooks") await webhooksPage(mine);
    else if (parts[0] === "instances") await instancesPage(mine);
    else if (parts[0] === "topics" && parts[1]) await overview(mine, parts[1]);
    else await overview(mine);
    if (mine !== seq) return;
    refreshes = still;
    await health();
    // A newer draw began meanwhile: it finishes the page.
    if (mine !== seq) return;
    document.getElementById("signout").hidden = !config.auth;
    footer();
    const d = new Date();
    document.getElementById("updated").textContent = t("updated", pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()));
    // Which view is shown, drawn whole with its footer (the tests wait
    // for it, then read any part of the page).
    document.getElementById("main").setAttribute("data-page", parts[0] || "overview");
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
    if (id) location.hash = findTarget(id);
  });
  document.getElementById("find-kind").addEventListener("change", findLabels);
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

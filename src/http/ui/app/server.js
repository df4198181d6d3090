// app/server.js, part of app.js: recurring schedules, webhooks, instances
// and the sign-in page.

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

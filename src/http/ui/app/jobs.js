// app/jobs.js, part of app.js: a job's page and the jobs falling due.

async function jobPage(mine, id) {
  let j;
  try {
    j = await api("GET", "v1/jobs/" + enc(id));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    const waiting = await waitingParent(id);
    show(mine, el("h2", {}, t("job")), el("p", { class: "error", id: "job-missing" }, t("job.missing", JSON.stringify(id), e.message)), waiting);
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
    ["progress", "f.progress", has(j.progress) ? JSON.stringify(j.progress) : t("none")],
    ["result", "f.result", has(j.result) ? JSON.stringify(j.result) : t("none")],
    batchField(j),
  ];
  // Every other field the server sends, as it sends it (nulls left out).
  const known = new Set(["id", "topic", "state", "due_at_ms", "attempts", "ttr_ms", "retry", "lease_until_ms", "dead_at_ms", "finished_at_ms", "last_error", "history", "body", "tags", "progress", "result", "batch", "logs", "children"]);
  for (const [k, v] of Object.entries(j)) {
    if (known.has(k) || !has(v)) continue;
    const shown = typeof v === "object" ? JSON.stringify(v, (_, x) => (x === null ? undefined : x)) : String(v);
    fields.push([k, null, /_ms$/.test(k) && typeof v === "number" && v > 1e12 ? whenRel(v) : shown]);
  }
  // Lines as text nodes (el escapes them), newest last, as written.
  const logs = (j.logs || []).map((l) => el("tr", {}, el("td", {}, when(l.at_ms)), el("td", { class: "wrap" }, l.line)));
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
    if (j.state === "reserved") {
      // A running job: its consumer hears "cancelled" at its next touch,
      // nack or finish, and it is never handed out again.
      actions.push(el("button", { id: "cancel", class: "danger", onclick: () => {
        if (confirm(t("act.confirm.cancel", id))) act(() => api("POST", "v1/jobs/" + enc(id) + "/cancel"), t("act.cancelled", id));
      } }, t("act.cancel")));
    }
    actions.push(el("button", { id: "delete", class: "danger", onclick: () => {
      if (confirm(t("act.confirm.delete", id))) act(() => api("DELETE", "v1/jobs/" + enc(id)), t("act.deleted", id), "#/topic/" + enc(j.topic));
    } }, t("act.delete")));
  }
  show(mine,
    el("h2", {}, t("job") + " ", el("span", { id: "job-id" }, j.id)),
    el("dl", { class: "fields", id: "job" }, fields.map(([k, label, v]) => [el("dt", {}, label ? t(label) : k), el("dd", { "data-field": k }, v)])),
    actions.length ? el("div", { class: "actions" }, actions) : null,
    childrenSection(j.children),
    el("h2", {}, t("job.history")),
    history.length ? table("history", [[t("col.attempts"), "num"], t("col.when"), t("col.error")], history)
      : el("p", { class: "muted" }, t("job.history.none")),
    el("h2", {}, t("job.log", logs.length)),
    logs.length ? table("logs", [t("col.when"), ""], logs) : el("p", { class: "muted", id: "logs-none" }, t("job.log.none")),
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

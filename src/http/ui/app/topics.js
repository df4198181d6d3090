// app/topics.js, part of app.js: a topic's page (its heading, rate limit,
// pause, chart, states and groups) and its dead letters.

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
  const [topics, p, tp, groups] = await Promise.all([
    api("GET", "v1/topics?topic=" + enc(topic)), listing,
    optional(api("GET", "v1/stats/throughput?resolution=" + chartRes + "&topic=" + enc(topic))),
    optional(api("GET", "v1/topics/" + enc(topic) + "/groups?limit=50")),
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
    groupsSection(topic, groups),
  );
}

async function deadPage(mine, topic, cursor) {
  const [topics, p] = await Promise.all([
    api("GET", "v1/topics?topic=" + enc(topic)),
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

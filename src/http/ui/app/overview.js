// app/overview.js, part of app.js: the overview and its lateness view.

// ---- Views ----
async function overview(mine, cursor) {
  // A page of 50 topics: each of its Redis calls costs O(page).
  const [topics, upcoming, metrics, tp] = await Promise.all([
    api("GET", "v1/topics?limit=50" + (cursor ? "&cursor=" + enc(cursor) : "")),
    api("GET", "v1/schedule?limit=20"),
    metricsText("?redis=false").catch(() => ""),
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
    // The topic's own next due time, where the server read it.
    if (c.next_due_ms != null) return whenRel(c.next_due_ms);
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
    el("p", { class: "pager" },
      cursor ? link("#/", t("topic.first.page")) : null, cursor && topics.next_cursor ? " · " : null,
      topics.next_cursor ? link("#/topics/" + enc(topics.next_cursor), t("topic.next.page")) : null),
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

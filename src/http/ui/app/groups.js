// app/groups.js, part of app.js: a topic's groups on its page (their
// figures, limit, rate, pause and resume), and their strings in both
// languages (i18n.js is at its bound of lines).

Object.assign(STRINGS.en, {
  "groups.title": "Groups",
  "groups.more": "The first {0} groups, by key.",
  "col.group": "group",
  "col.held": "held",
  "col.limit": "limit",
  "col.group.rate": "rate",
  "col.oldest.ready": "oldest ready",
  "act.group.paused": "Group {0} paused",
  "act.group.resumed": "Group {0} resumed",
});
Object.assign(STRINGS.zh, {
  "groups.title": "分组",
  "groups.more": "按键排序的前 {0} 个分组。",
  "col.group": "分组",
  "col.held": "被挡住",
  "col.limit": "并发上限",
  "col.group.rate": "限流",
  "col.oldest.ready": "最早就绪",
  "act.group.paused": "已暂停分组 {0}",
  "act.group.resumed": "已恢复分组 {0}",
});

// The groups of a topic's first page of groups, or nothing when it has
// none (or the server knows no groups).
function groupsSection(topic, page) {
  if (!page || !page.groups || !page.groups.length) return null;
  const path = (g) => "v1/topics/" + enc(topic) + "/groups/" + enc(g.group);
  const rows = page.groups.map((g) => el("tr", { "data-group": g.group },
    el("td", {}, g.group),
    el("td", { class: "num", "data-col": "ready" }, num(g.ready)),
    el("td", { class: "num", "data-col": "held" }, num(g.held)),
    el("td", { class: "num", "data-col": "reserved" }, num(g.reserved)),
    el("td", { class: "num", "data-col": "limit" }, has(g.concurrency) ? num(g.concurrency) : t("none")),
    el("td", { "data-col": "rate" }, rateText(g.rate)),
    el("td", { "data-col": "oldest_ready" }, dur(g.oldest_ready_ms)),
    el("td", { "data-col": "state" }, g.paused ? el("span", { class: "paused" }, t("paused")) : t("running")),
    config.read_only ? null : el("td", {}, el("button", {
      class: "group-toggle",
      onclick: () => act(() => api("POST", path(g) + (g.paused ? "/resume" : "/pause")),
        t(g.paused ? "act.group.resumed" : "act.group.paused", g.group)),
    }, t(g.paused ? "act.resume" : "act.pause")))));
  const heads = [t("col.group"), [t("state.ready"), "num"], [t("col.held"), "num"], [t("state.reserved"), "num"],
    [t("col.limit"), "num"], t("col.group.rate"), t("col.oldest.ready"), t("col.state")];
  if (!config.read_only) heads.push("");
  return [
    el("h2", {}, t("groups.title")),
    table("groups", heads, rows),
    page.next ? el("p", { class: "muted" }, t("groups.more", num(page.groups.length))) : null,
  ];
}

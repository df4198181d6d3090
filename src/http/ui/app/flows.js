// app/flows.js, part of app.js: a flow's page (its state and counts, its
// parent's job once released, the flow above it; cancel), read from GET
// /v1/flows/{id}; what a job's page shows of flows (a parent's children,
// a child's flow); and their strings in both languages.

Object.assign(STRINGS.en, {
  "find.kind.flow": "flow",
  "find.flow.placeholder": "flow (parent job) id",
  "find.flow.button": "Find flow",
  "flow": "Flow",
  "flow.missing": "No flow {0}: {1}",
  "flow.state.adding": "adding: its children are being pushed",
  "flow.state.waiting": "waiting: its parent runs once every child has its outcome",
  "flow.state.released": "released: its parent job was pushed",
  "flow.state.failed": "failed: a child died, its parent was made dead",
  "flow.state.cancelled": "cancelled: its parent never runs",
  "flow.dead.fail": "the parent fails at once",
  "flow.dead.ignore": "ignored: the parent runs when the rest are done",
  "flow.parent.later": "(made when its children are done)",
  "flow.waiting.parent": "{0} has no job yet: it is a flow's parent, waiting for its children.",
  "flow.see": "See the flow",
  "ff.children": "children",
  "ff.on.child.dead": "when a child dies",
  "ff.failed.by": "failed by",
  "ff.parent": "parent job",
  "ff.upper": "flow above",
  "f.flow": "flow",
  "job.children": "Children ({0})",
  "col.outcome": "outcome",
  "col.result": "result",
  "outcome.pending": "pending (none yet)",
  "act.flow.cancel": "Cancel the flow",
  "act.flow.confirm.cancel": "Cancel flow {0}? Its parent never runs, and its children not handed out are deleted, down the tree.",
  "act.flow.cancelled": "Flow {0} cancelled: {1} jobs deleted",
});
Object.assign(STRINGS.zh, {
  "find.kind.flow": "流程",
  "find.flow.placeholder": "流程（父任务）id",
  "find.flow.button": "查找流程",
  "flow": "流程",
  "flow.missing": "没有流程 {0}：{1}",
  "flow.state.adding": "推送中：正在推送其子任务",
  "flow.state.waiting": "等待中：每个子任务都有结果后父任务运行",
  "flow.state.released": "已放行：父任务已推送",
  "flow.state.failed": "已失败：某个子任务死信，父任务成为死信",
  "flow.state.cancelled": "已取消：父任务不会运行",
  "flow.dead.fail": "父任务立即失败",
  "flow.dead.ignore": "忽略：其余子任务完成后父任务运行",
  "flow.parent.later": "（子任务都完成后创建）",
  "flow.waiting.parent": "{0} 还没有任务：它是一个流程的父任务，正在等待其子任务。",
  "flow.see": "查看流程",
  "ff.children": "子任务数",
  "ff.on.child.dead": "子任务死信时",
  "ff.failed.by": "失败原因（子任务）",
  "ff.parent": "父任务",
  "ff.upper": "上层流程",
  "f.flow": "流程",
  "job.children": "子任务（{0}）",
  "col.outcome": "结局",
  "col.result": "结果",
  "outcome.pending": "未有结果",
  "act.flow.cancel": "取消流程",
  "act.flow.confirm.cancel": "取消流程 {0}？父任务不会运行，尚未交出的子任务会被删除，沿树向下。",
  "act.flow.cancelled": "已取消流程 {0}：删除了 {1} 个任务",
});

function flowLink(parent) { return link("#/flow/" + enc(parent), parent); }

async function flowPage(mine, id) {
  let f;
  try {
    f = await api("GET", "v1/flows/" + enc(id));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    show(mine, el("h2", {}, t("flow")), el("p", { class: "error", id: "flow-missing" }, t("flow.missing", JSON.stringify(id), e.message)));
    return;
  }
  // The parent is a job once released (or made dead by a child's death).
  const made = f.state === "released" || f.state === "failed";
  const fields = [
    ["id", "f.id", f.id],
    ["state", "f.state", t("flow.state." + f.state)],
    ["topic", "f.topic", link("#/topic/" + enc(f.topic), f.topic)],
    ["parent_job", "ff.parent", made ? link("#/job/" + enc(f.id), f.id) : t("flow.parent.later")],
    ["on_child_dead", "ff.on.child.dead", t("flow.dead." + f.on_child_dead)],
    ["children", "ff.children", num(f.children)],
    ["pending", "bf.pending", num(f.pending)],
    ["finished", "state.finished", num(f.finished)],
    ["dead", "state.dead", num(f.dead)],
    ["deleted", "bf.deleted", num(f.deleted)],
    ["failed_by", "ff.failed.by", f.failed_by ? link("#/job/" + enc(f.failed_by), f.failed_by) : t("none")],
    ["upper", "ff.upper", f.parent ? flowLink(f.parent) : t("none")],
    ["created", "bf.created", whenRel(f.created_at_ms)],
    ["ended", "bf.ended", whenRel(f.ended_at_ms)],
  ];
  const actions = [];
  if (!config.read_only && (f.state === "adding" || f.state === "waiting")) {
    actions.push(el("button", { id: "flow-cancel", class: "danger", onclick: () => {
      if (confirm(t("act.flow.confirm.cancel", f.id))) act(() => api("POST", "v1/flows/" + enc(f.id) + "/cancel"), (v) => t("act.flow.cancelled", f.id, v.deleted));
    } }, t("act.flow.cancel")));
  }
  show(mine,
    el("h2", {}, t("flow") + " ", el("span", { id: "flow-id" }, f.id)),
    el("dl", { class: "fields", id: "flow" }, fields.map(([k, label, v]) => [el("dt", {}, t(label)), el("dd", { "data-field": k }, v)])),
    actions.length ? el("div", { class: "actions" }, actions) : null,
  );
}

// A job page's field for its batch: a flow's child (its `flow`, the
// parent's id) links to its parent's flow, another job to its batch.
function batchField(j) {
  if (j.flow) return ["flow", "f.flow", flowLink(j.flow)];
  return ["batch", "f.batch", j.batch ? link("#/batch/" + enc(j.batch), j.batch) : t("none")];
}

// A released parent's children: id (linked), outcome and result.
function childrenSection(children) {
  if (!children) return null;
  const outcome = (o) => t(o === "pending" ? "outcome.pending" : o === "deleted" ? "bf.deleted" : "state." + o);
  const rows = Object.entries(children).map(([id, c]) => el("tr", { "data-id": id },
    el("td", {}, link("#/job/" + enc(id), id)), el("td", { "data-outcome": c.outcome }, outcome(c.outcome)),
    el("td", { class: "wrap" }, "result" in c ? JSON.stringify(c.result) : t("none"))));
  return [el("h2", {}, t("job.children", rows.length)), table("children", [t("col.id"), t("col.outcome"), t("col.result")], rows)];
}

// A job that is not there may be a flow's parent still waiting: says so,
// with a link to its flow, if the flow is there.
async function waitingParent(id) {
  let f;
  try {
    f = await api("GET", "v1/flows/" + enc(id));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    return null;
  }
  if (f.state !== "adding" && f.state !== "waiting") return null;
  return el("p", { class: "muted", id: "job-flow" }, t("flow.waiting.parent", JSON.stringify(id)) + " ", link("#/flow/" + enc(id), t("flow.see")));
}

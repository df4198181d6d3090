// app/batches.js, part of app.js: a batch's page (its state, trigger,
// counts and callback, read from GET /v1/batches/{id}; close and cancel),
// the header's finder switched between jobs and batches, and their strings
// in both languages (i18n.js is at its bound of lines).

Object.assign(STRINGS.en, {
  "find.kind": "what to find",
  "find.kind.job": "job",
  "find.kind.batch": "batch",
  "find.batch.placeholder": "batch id",
  "find.batch.button": "Find batch",
  "batch": "Batch",
  "batch.missing": "No batch {0}: {1}",
  "batch.state.open": "open: taking jobs",
  "batch.state.closed": "closed: fires once every job has its outcome",
  "batch.state.fired": "fired: its callback job was pushed",
  "batch.state.cancelled": "cancelled: it never fires",
  "batch.on.settled": "once every job finished or died",
  "batch.on.finished": "once every job finished",
  "batch.callback.later": "(pushed when it fires)",
  "bf.on": "fires",
  "bf.jobs": "jobs",
  "bf.pending": "pending (no outcome yet)",
  "bf.deleted": "deleted",
  "bf.callback": "callback job",
  "bf.callback.topic": "callback topic",
  "bf.created": "created",
  "bf.ended": "ended",
  "act.batch.close": "Close the batch",
  "act.batch.closed": "Batch {0} closed",
  "act.batch.cancel": "Cancel the batch",
  "act.batch.confirm.cancel": "Cancel batch {0}? Its jobs not handed out are deleted, and it never fires.",
  "act.batch.cancelled": "Batch {0} cancelled: {1} jobs deleted",
});
Object.assign(STRINGS.zh, {
  "find.kind": "查找类型",
  "find.kind.job": "任务",
  "find.kind.batch": "批次",
  "find.batch.placeholder": "批次 id",
  "find.batch.button": "查找批次",
  "batch": "批次",
  "batch.missing": "没有批次 {0}：{1}",
  "batch.state.open": "开放：接收任务中",
  "batch.state.closed": "已关闭：每个任务都有结果后触发",
  "batch.state.fired": "已触发：回调任务已推送",
  "batch.state.cancelled": "已取消：不会触发",
  "batch.on.settled": "每个任务都完成或死信后",
  "batch.on.finished": "每个任务都完成后",
  "batch.callback.later": "（触发时推送）",
  "bf.on": "触发条件",
  "bf.jobs": "任务数",
  "bf.pending": "未有结果",
  "bf.deleted": "已删除",
  "bf.callback": "回调任务",
  "bf.callback.topic": "回调主题",
  "bf.created": "创建于",
  "bf.ended": "结束于",
  "act.batch.close": "关闭批次",
  "act.batch.closed": "已关闭批次 {0}",
  "act.batch.cancel": "取消批次",
  "act.batch.confirm.cancel": "取消批次 {0}？其中尚未交出的任务会被删除，批次不会触发。",
  "act.batch.cancelled": "已取消批次 {0}：删除了 {1} 个任务",
});

// The header's finder: its field and button say what it looks for.
function findLabels() {
  const kind = document.getElementById("find-kind").value;
  const input = document.getElementById("find-id");
  input.placeholder = t(kind === "job" ? "find.placeholder" : "find." + kind + ".placeholder");
  input.setAttribute("aria-label", input.placeholder);
  document.getElementById("find-kind").setAttribute("aria-label", t("find.kind"));
  document.querySelector("#find button").textContent = t(kind === "job" ? "find.button" : "find." + kind + ".button");
}
// Where the finder leads for `id`: a job's, a batch's or a flow's page.
function findTarget(id) {
  return "#/" + document.getElementById("find-kind").value + "/" + enc(id);
}

async function batchPage(mine, id) {
  let b;
  try {
    b = await api("GET", "v1/batches/" + enc(id));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    show(mine, el("h2", {}, t("batch")), el("p", { class: "error", id: "batch-missing" }, t("batch.missing", JSON.stringify(id), e.message)));
    return;
  }
  const callback = [link("#/job/" + enc(b.callback_id), b.callback_id), b.state === "fired" ? null : " " + t("batch.callback.later")];
  const fields = [
    ["id", "f.id", b.id],
    ["state", "f.state", t("batch.state." + b.state)],
    ["on", "bf.on", t("batch.on." + b.on)],
    ["jobs", "bf.jobs", num(b.jobs)],
    ["pending", "bf.pending", num(b.pending)],
    ["finished", "state.finished", num(b.finished)],
    ["dead", "state.dead", num(b.dead)],
    ["deleted", "bf.deleted", num(b.deleted)],
    ["callback", "bf.callback", callback],
    ["callback_topic", "bf.callback.topic", link("#/topic/" + enc(b.callback_topic), b.callback_topic)],
    ["created", "bf.created", whenRel(b.created_at_ms)],
    ["ended", "bf.ended", whenRel(b.ended_at_ms)],
  ];
  const path = "v1/batches/" + enc(b.id);
  const actions = [];
  if (!config.read_only && b.state === "open") {
    actions.push(el("button", { id: "batch-close", onclick: () => act(() => api("POST", path + "/close"), t("act.batch.closed", b.id)) }, t("act.batch.close")));
  }
  if (!config.read_only && (b.state === "open" || b.state === "closed")) {
    actions.push(el("button", { id: "batch-cancel", class: "danger", onclick: () => {
      if (confirm(t("act.batch.confirm.cancel", b.id))) act(() => api("POST", path + "/cancel"), (v) => t("act.batch.cancelled", b.id, v.deleted));
    } }, t("act.batch.cancel")));
  }
  show(mine,
    el("h2", {}, t("batch") + " ", el("span", { id: "batch-id" }, b.id)),
    el("dl", { class: "fields", id: "batch" }, fields.map(([k, label, v]) => [el("dt", {}, t(label)), el("dd", { "data-field": k }, v)])),
    actions.length ? el("div", { class: "actions" }, actions) : null,
  );
}

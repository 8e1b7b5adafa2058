// One order: its state, steps, compensation log, holds, input corrections, replies sent and timeline
// (GET orders/{key} and GET orders/{key}/timeline), and the actions an operator or reviewer may take, each
// confirmed first.

import { RawJson, call, listAll, orderPath } from "./api.js";
import { confirmAction } from "./confirm.js";
import { h, notify, replaceChildren, table, when } from "./dom.js";
import { FAILED, SETTLED, stateKind } from "./states.js";

function facts(order, etag) {
  const error = order.lastError;
  const review = order.review;
  const rows = [
    ["state", h("span", { class: `state ${stateKind(order.processState)}`, "data-testid": "process-state" }, order.processState)],
    ["suspended", h("span", { "data-testid": "suspended" }, order.suspendedAt ? `since ${when(order.suspendedAt)} by ${order.suspendedByName || order.suspendedBy}` : "no")],
    ["client", order.clientId || ""],
    ["workflow", order.workflowVersion],
    ["attempt", String(order.attempt)],
    ["failures", String(order.failureCount)],
    ["retry budget", order.retryBudget ? `${order.retryBudget.limit - order.retryBudget.spent} of ${order.retryBudget.limit} calls left` : ""],
    ["locked by", order.lockedBy || ""],
    ["last error", error ? `${error.code || error.kind}${error.step ? ` at ${error.step}` : ""}: ${error.message}` : ""],
    ["compensation error", order.compensationError ? `${order.compensationError.code || order.compensationError.kind}: ${order.compensationError.message}` : ""],
    ["stopped by", order.stopRequestedBy ? `${order.stopRequestedByName || order.stopRequestedBy}` : ""],
    ["stop reason", h("span", { "data-testid": "stop-reason" }, order.stopReason || "")],
    ["review", review ? `${review.step}: ${review.decision ? `${review.decision} by ${review.decidedByName || review.decidedBy}` : `awaiting a decision until ${when(review.deadline)}`}` : ""],
    ["created", when(order.createdAt)],
    ["last written", when(order.updatedAt)],
    ["ETag", h("code", { "data-testid": "etag" }, etag || "")],
  ];
  return h("dl", { class: "facts" }, rows.filter(([, value]) => value !== "").map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

function steps(order) {
  const rows = Object.entries(order.steps || {}).map(([name, step]) => [
    name,
    step.status,
    String(step.attempts),
    step.fallback ? "fallback" : "",
    when(step.startedAt),
    when(step.completedAt),
  ]);
  return table(["step", "status", "attempts", "", "started", "completed"], rows, { empty: "No step started.", testId: "steps" });
}

function compensation(order) {
  const rows = (order.compensationLog || []).map((entry) => [entry.step, entry.action, entry.undo || "", entry.status, when(entry.recordedAt), when(entry.undoneAt)]);
  return table(["step", "did", "undo", "status", "recorded", "undone"], rows, { empty: "Nothing to undo recorded.", testId: "compensation-log" });
}

function holds(order) {
  const rows = Object.entries(order.holds || {}).map(([step, hold]) => [
    step,
    hold.holdId,
    when(hold.expiresAt),
    hold.commit,
    hold.idempotencyKey,
    String(hold.reacquired),
    when(hold.committedAt),
  ]);
  return table(["step", "hold", "expires", "commit", "key", "re-acquired", "committed"], rows, { empty: "No hold.", testId: "holds" });
}

function corrections(order) {
  const rows = (order.corrections || []).map((c) => [
    String(c.number),
    c.step,
    Object.entries(c.input || {}).map(([field, value]) => `${field}: ${JSON.stringify(value)}`).join(", "),
    c.idempotencyKey,
    c.byName || c.by || "",
    when(c.at),
  ]);
  return table(["#", "step", "input", "key", "by", "at"], rows, { empty: "No input corrected.", testId: "corrections" });
}

function describe(entry) {
  const changes = (entry.steps || []).map((s) => `${s.step} ${s.fromStatus || "—"}→${s.toStatus}`).join(", ");
  const corrected = (entry.correctedFields || []).length ? `corrected ${entry.correctedFields.join(", ")}` : "";
  return [corrected, entry.outcome, changes, entry.errorCode ? `error ${entry.errorCode}` : ""].filter(Boolean).join("; ");
}

function correctedInput(input) {
  // The resubmit's body: {} without corrected input, {"input": <the text as typed>} with a JSON object of
  // fields. Parsed only to check its shape (one JSON value, so it cannot reach out of the wrapper); sent as
  // typed, so the API refuses a duplicate key that JSON.parse would resolve to its last value.
  const text = input.value.trim();
  if (!text) return {};
  const fields = JSON.parse(text);
  if (fields === null || typeof fields !== "object" || Array.isArray(fields)) throw new Error("corrected input must be a JSON object of fields");
  return new RawJson(`{"input": ${text}}`);
}

function timeline(entries) {
  const rows = entries.map((e) => [
    String(e.seq),
    when(e.at),
    e.role,
    e.byName || e.by || "",
    e.action || "",
    `${e.fromState || "—"} → ${e.toState}`,
    String(e.attempt),
    describe(e),
  ]);
  return table(["#", "at", "role", "by", "action", "state", "attempt", "what changed"], rows, { empty: "No entry yet.", testId: "timeline" });
}

function replies(entries) {
  const rows = entries.filter((e) => e.action === "reply").map((e) => [when(e.at), e.outcome || ""]);
  return table(["at", "status"], rows, { empty: "No reply sent yet.", testId: "replies" });
}

async function act(key, label, action, { body, ifMatch, detail, extra, read } = {}) {
  const confirmed = await confirmAction({ title: `${label} ${key}?`, detail, extra, confirmLabel: label });
  if (!confirmed) return false;
  try {
    const answer = await call("POST", orderPath(key, action), { body: read ? read() : body, ifMatch });
    notify(`${label}: ${answer.body.outcome || answer.body.decision || "done"}.`, "info");
  } catch (refused) {
    if (refused.status === 401) throw refused;
    const again = refused.status === 412 ? " The order changed since you read it: it is shown again, decide again." : "";
    notify(`${label} refused: ${refused.message}.${again}`, "error");
  }
  return true;
}

function actions(key, order, etag, refresh) {
  const buttons = [];
  const add = (label, id, run) => buttons.push(h("button", { type: "button", id, "data-action": id, onclick: async () => { if (await run()) await refresh(true); } }, label));
  const review = order.review;
  const stopping = Boolean(order.stopRequestedBy);
  if (order.processState === "AwaitingReview" && review && !review.decision && !stopping) {
    add("Approve", "approve", () => act(key, "Approve", "review", { body: { decision: "approve" }, detail: `The order goes on past ${review.step}.` }));
    add("Reject", "reject", () => act(key, "Reject", "review", { body: { decision: "reject" }, detail: "The order is stopped and what it did is undone." }));
  }
  if (order.processState === "Error") {
    const input = h("input", { id: "resubmit-input", type: "text", maxlength: 2000, placeholder: '{"carrier": "AIR"} (optional)' });
    const extra = h("label", {}, "Corrected input ", input);
    add("Resubmit", "resubmit", () => act(key, "Resubmit", "resubmit", { ifMatch: etag, extra, read: () => correctedInput(input), detail: "A new attempt runs from the failed step, on corrected input if given (where the step takes it)." }));
  } else if (FAILED.has(order.processState)) {
    add("Resubmit", "resubmit", () => act(key, "Resubmit", "resubmit", { ifMatch: etag, detail: "The compensation is tried again." }));
  }
  // An Error order that passed no point of no return (a refused step waiting for a correction) may be undone.
  const undoable = order.processState === "Error" && order.lastError && order.lastError.code !== "past_point_of_no_return";
  if ((!SETTLED.has(order.processState) && !stopping) || order.processState === "CompensationFailed" || undoable) {
    const reason = h("input", { id: "compensate-reason", type: "text", maxlength: 500, placeholder: "why (kept in the record)" });
    const extra = h("label", {}, "Reason ", reason);
    add("Compensate", "compensate", () => act(key, "Compensate", "compensate", { ifMatch: etag, extra, read: () => (reason.value.trim() ? { reason: reason.value.trim() } : {}), detail: "Stop the order and undo what it did (or retry a failed undo)." }));
  }
  if (!SETTLED.has(order.processState) && !order.suspendedAt) {
    add("Suspend", "suspend", () => act(key, "Suspend", "suspend", { ifMatch: etag, detail: "The order takes no new step until it is resumed." }));
  }
  if (order.suspendedAt) {
    add("Resume", "resume", () => act(key, "Resume", "resume", { ifMatch: etag, detail: "The order goes on from where it is." }));
  }
  return h("div", { class: "actions", "data-testid": "actions" }, buttons.length ? buttons : h("p", { class: "empty" }, "No action applies to this order now."));
}

export async function render(main, [key]) {
  const refresh = async (keepNotice = false) => {
    const [view, history] = await Promise.all([call("GET", orderPath(key)), listAll(orderPath(key, "timeline"), "entries")]);
    const order = view.body;
    const entries = history.items;
    if (!keepNotice) notify("");
    replaceChildren(
      main,
      h("p", {}, h("a", { href: "#/" }, "← Dashboard")),
      h("h1", {}, "Order ", h("span", { "data-testid": "order-key" }, key)),
      h("div", { class: "order-head" }, facts(order, view.etag), actions(key, order, view.etag, refresh)),
      h("p", {}, h("button", { type: "button", id: "reload", onclick: () => refresh() }, "Reload")),
      h("section", {}, h("h2", {}, "Steps"), steps(order)),
      h("section", {}, h("h2", {}, "Compensation log"), compensation(order)),
      ...(Object.keys(order.holds || {}).length ? [h("section", {}, h("h2", {}, "Holds"), holds(order))] : []),
      ...((order.corrections || []).length ? [h("section", {}, h("h2", {}, "Input corrections"), corrections(order))] : []),
      h("section", {}, h("h2", {}, "Replies sent"), replies(entries)),
      h("section", {}, h("h2", {}, `Timeline (${entries.length} entries)`), timeline(entries)),
    );
  };
  replaceChildren(main, h("h1", {}, "Order ", key), h("p", { class: "loading" }, "Loading…"));
  await refresh();
}

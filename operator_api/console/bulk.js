// One action on every order the orders page lists: a dry-run list in the confirmation dialog, then one
// call per order at the version listed (If-Match of its ETag), a progress bar, and a summary.
// Which orders an action applies to is the API's rule (orderflow.operator_actions): the rest are skipped.

import { ApiError, call, orderPath } from "./api.js";
import { confirmAction } from "./confirm.js";
import { h, table } from "./dom.js";
import { FAILED, SETTLED } from "./states.js";

/** Why `action` does not apply to listed order `o` ({code, detail}), or null when it does. */
export function refusal(action, o) {
  if (action === "resubmit") {
    return FAILED.has(o.processState) ? null : { code: "NotResubmittable", detail: `order is ${o.processState}` };
  }
  if (action === "suspend") {
    if (SETTLED.has(o.processState)) return { code: "NotSuspendable", detail: `order is ${o.processState}` };
    return o.suspended ? { code: "AlreadySuspended", detail: "already suspended" } : null;
  }
  return o.suspended ? null : { code: "NotSuspended", detail: "the order is not suspended" };
}

export const BULK_ACTIONS = [
  { action: "suspend", label: "Suspend", does: "Each takes no new step until it is resumed" },
  { action: "resume", label: "Resume", does: "Each goes on from where it is" },
  { action: "resubmit", label: "Resubmit", does: "A new attempt of each Error order, a compensation retry of each CompensationFailed one" },
];

function planTable(plan) {
  const rows = plan.map(({ order, skip }) => [order.orderId, order.processState, order.suspended ? "suspended" : "", skip ? `skip: ${skip.code}` : "act"]);
  return h("div", { class: "bulk-plan", "data-testid": "bulk-plan" }, table(["order", "state", "", "would"], rows, { empty: "No order listed." }));
}

async function send(action, order) {
  try {
    await call("POST", orderPath(order.orderId, action), { ifMatch: order.etag });
    return { order, outcome: "done" };
  } catch (refused) {
    if (!(refused instanceof ApiError)) return { order, outcome: "failed", detail: String(refused) };
    const outcome = refused.status >= 500 ? "failed" : "refused";
    return { order, outcome, status: refused.status, code: refused.code, detail: refused.detail };
  }
}

function summary(label, results) {
  const count = (outcome) => results.filter((r) => r.outcome === outcome).length;
  const line = ["done", "refused", "failed", "not sent", "skipped"].map((o) => `${o} ${count(o)}`).join(", ");
  const problems = results.filter((r) => !["done", "skipped"].includes(r.outcome));
  const rows = problems.map((r) => [r.order.orderId, r.outcome, r.status ? String(r.status) : "", r.code || "", r.detail || ""]);
  return h(
    "section",
    { "data-testid": "bulk-summary" },
    h("h2", {}, `${label}: summary`),
    h("p", { "data-testid": "bulk-counts" }, line),
    problems.length ? table(["order", "outcome", "status", "code", "message"], rows, { testId: "bulk-problems" }) : null,
  );
}

/**
 * Offer `label` on every listed order: the dry-run list and the confirmation first, then the calls, one
 * at a time, with `progress` (an element the page shows) kept up to date. Resolves to the summary
 * section, or null when the operator cancelled (nothing was sent).
 */
export async function runBulk({ action, label, does }, orders, { truncated, progress }) {
  const plan = orders.map((order) => ({ order, skip: refusal(action, order) }));
  const todo = plan.filter((p) => !p.skip).map((p) => p.order);
  const capped = truncated ? " Only the orders listed (the first pages) are considered." : "";
  const confirmed = await confirmAction({
    title: `${label} ${todo.length} of ${orders.length} listed orders?`,
    detail: `${does}. Each is sent at the version listed: one changed since is refused, not acted on. ${plan.length - todo.length} skipped (not in a state the action applies to).${capped}`,
    extra: planTable(plan),
    confirmLabel: `${label} ${todo.length}`,
  });
  if (!confirmed) return null;
  const bar = h("progress", { max: String(Math.max(todo.length, 1)), value: "0", "data-testid": "bulk-progress" });
  const text = h("span", {}, `0 of ${todo.length}`);
  progress.replaceChildren(h("p", { class: "inline" }, `${label}: `, bar, text));
  const results = plan.filter((p) => p.skip).map((p) => ({ order: p.order, outcome: "skipped", code: p.skip.code }));
  for (const [n, order] of todo.entries()) {
    const result = await send(action, order);
    results.push(result);
    bar.value = n + 1;
    text.textContent = `${n + 1} of ${todo.length}`;
    if (result.status === 401 || result.status === 403) {
      todo.slice(n + 1).forEach((o) => results.push({ order: o, outcome: "not sent" }));
      break;
    }
  }
  return summary(label, results);
}

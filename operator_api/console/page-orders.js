// Every order, or those in some states (GET orders, every page up to 2,000), each linking to its page;
// with a state chosen, an action on every order listed (bulk.js), confirmed on a dry-run list first.

import { listAll } from "./api.js";
import { BULK_ACTIONS, runBulk } from "./bulk.js";
import { h, notify, orderLink, replaceChildren, table, when } from "./dom.js";
import { STATES, stateKind } from "./states.js";

function stateFilter(chosen) {
  const pick = (event) => {
    window.location.hash = event.target.value ? `#/orders?state=${encodeURIComponent(event.target.value)}` : "#/orders";
  };
  const select = h(
    "select",
    { id: "state-filter", name: "state", onchange: pick },
    h("option", { value: "", selected: !chosen }, "every state"),
    STATES.map((state) => h("option", { value: state, selected: state === chosen }, state)),
  );
  return h("p", { class: "inline" }, h("label", { for: "state-filter" }, "State "), select);
}

function rows(orders) {
  return orders.map((o) => [
    orderLink(o.orderId),
    o.clientId || "",
    h("span", { class: `state ${stateKind(o.processState)}` }, o.processState),
    o.suspended ? "suspended" : "",
    o.workflowVersion,
    String(o.attempt),
    o.lastErrorCode || "",
    when(o.updatedAt),
  ]);
}

const HEADINGS = ["order", "client", "state", "", "workflow", "attempt", "last error", "last written"];

function bulkActions(main, query, listed) {
  const progress = h("div", { "data-testid": "bulk-running" });
  const buttons = BULK_ACTIONS.map((bulk) =>
    h("button", {
      type: "button",
      "data-action": `bulk-${bulk.action}`,
      onclick: async () => {
        const done = await runBulk(bulk, listed.items, { truncated: listed.truncated, progress });
        if (done) await render(main, [], query, done);
      },
    }, `${bulk.label} these…`),
  );
  return h("div", { class: "bulk" }, h("p", { class: "row-actions" }, "Every order listed: ", buttons), progress);
}

/**
 * `#/orders` (`#/orders?state=S`): the orders, in the order the list API gives them; with `S`, the bulk
 * actions. `done` is the summary of a bulk action just run, shown above the list read after it.
 */
export async function render(main, _args, query, done = null) {
  const asked = query.get("state");
  const state = STATES.includes(asked) ? asked : "";
  if (asked && !state) notify(`No state is called "${asked}": every order is listed.`, "error");
  replaceChildren(main, h("h1", {}, "Orders"), done, h("p", { class: "loading" }, "Loading orders…"));
  const listed = await listAll(state ? `orders?state=${encodeURIComponent(state)}` : "orders", "orders");
  replaceChildren(
    main,
    h("h1", {}, "Orders"),
    done,
    stateFilter(state),
    state && listed.items.length ? bulkActions(main, query, listed) : null,
    h("p", { class: "summary", "data-testid": "orders-count" }, `${listed.items.length} orders${listed.truncated ? " (the first pages only)" : ""}`),
    table(HEADINGS, rows(listed.items), { empty: "No order.", testId: "orders" }),
  );
}

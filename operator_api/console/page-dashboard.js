// The dashboard: orders by state, stuck orders and recoveries, counted from the list API
// (GET orders, every page; GET orders?stuckFor=S), and what happened over time: alerts, dead letters,
// recoveries and the stuck-orders gauge (GET activity), over the last hour or the last 24 h.

import { call, listAll } from "./api.js";
import { barChart, timeSeriesChart } from "./charts.js";
import { h, orderLink, replaceChildren, table, when } from "./dom.js";
import { FAILED, STATES, stateKind } from "./states.js";

const DEFAULT_STUCK_S = 300;
/** The windows offered: the last hour in 5-minute buckets, the last day in hours. */
const WINDOWS = { "1h": { bucketS: 300, buckets: 12, label: "last hour" }, "24h": { bucketS: 3600, buckets: 24, label: "last 24 h" } };

function count(orders, keyOf) {
  const counts = new Map();
  for (const order of orders) counts.set(keyOf(order), (counts.get(keyOf(order)) || 0) + 1);
  return counts;
}

function byState(orders) {
  const counts = count(orders, (o) => o.processState);
  const known = STATES.map((state) => ({ label: state, value: counts.get(state) || 0, kind: stateKind(state) }));
  const other = [...counts].filter(([state]) => !STATES.includes(state));
  return [...known, ...other.map(([state, value]) => ({ label: state, value, kind: "live" }))];
}

function byAttempt(orders) {
  // An order past its first attempt was recovered: the supervisor re-ran it, or an operator resubmitted it.
  const counts = count(orders, (o) => (o.attempt >= 4 ? "4+" : String(Math.max(o.attempt, 1))));
  return ["1", "2", "3", "4+"].map((attempt) => ({
    label: `attempt ${attempt}`,
    value: counts.get(attempt) || 0,
    kind: attempt === "1" ? "settled" : "live",
  }));
}

function orderRows(orders) {
  return orders.map((o) => [
    orderLink(o.orderId),
    h("span", { class: `state ${stateKind(o.processState)}` }, o.processState),
    o.suspended ? "suspended" : "",
    String(o.attempt),
    o.lastErrorCode || "",
    when(o.updatedAt),
  ]);
}

const HEADINGS = ["order", "state", "", "attempt", "last error", "last written"];

function stuckForm(stuckS) {
  const input = h("input", { id: "stuck-for", type: "number", min: 1, value: stuckS, name: "stuckFor" });
  const submit = (event) => {
    event.preventDefault();
    window.location.hash = `#/?stuckFor=${encodeURIComponent(input.value)}`;
  };
  return h("form", { class: "inline", onsubmit: submit }, h("label", { for: "stuck-for" }, "Stuck: not written for "), input, " s ", h("button", { type: "submit" }, "Show"));
}

function windowPicker(chosen, stuckS) {
  const links = Object.entries(WINDOWS).map(([name, w]) =>
    h("a", { href: `#/?window=${name}&stuckFor=${stuckS}`, "aria-current": name === chosen ? "true" : false, "data-window": name }, w.label),
  );
  return h("p", { class: "window-picker" }, "Over the ", links);
}

function series(buckets, field) {
  return buckets.map((b) => ({ start: b.start, value: b[field] }));
}

function activityCharts(answer, chosen, stuckS) {
  if (answer.error) return h("section", { "data-testid": "activity" }, h("h2", {}, "Over time"), h("p", { class: "error" }, `Not available: ${answer.error}`));
  const { buckets, bucketS, complete } = answer;
  const partial = Object.entries(complete).filter(([, done]) => done === false).map(([name]) => name);
  return h(
    "section",
    { "data-testid": "activity", "data-since": answer.since, "data-until": answer.until },
    h("h2", {}, "Over time"),
    windowPicker(chosen, stuckS),
    partial.length ? h("p", { class: "summary" }, `Counted from the first pages only: ${partial.join(", ")}.`) : null,
    h(
      "div",
      { class: "charts" },
      timeSeriesChart("Alerts", series(buckets, "alerts"), { bucketS, testId: "chart-alerts-over-time", kind: "failed" }),
      buckets.some((b) => b.deadLetters === null)
        ? h("p", { class: "summary" }, "This host reads no dead-letter queues.")
        : timeSeriesChart("Dead letters held (by when dead-lettered)", series(buckets, "deadLetters"), { bucketS, testId: "chart-dead-letters-over-time", kind: "failed" }),
      timeSeriesChart("Recoveries (supervisor re-queues)", series(buckets, "recoveries"), { bucketS, testId: "chart-recoveries-over-time" }),
      timeSeriesChart("Stuck orders (most a sweep found)", series(buckets, "stuckOrders"), { bucketS, testId: "chart-stuck-over-time" }),
    ),
  );
}

async function activity(chosen) {
  const w = WINDOWS[chosen];
  try {
    return (await call("GET", `activity?bucketS=${w.bucketS}&buckets=${w.buckets}`)).body;
  } catch (error) {
    return { error: error.message };
  }
}

export async function render(main, _args, query) {
  const stuckS = Number.parseInt(query.get("stuckFor") || "", 10) || DEFAULT_STUCK_S;
  const chosen = WINDOWS[query.get("window")] ? query.get("window") : "1h";
  replaceChildren(main, h("h1", {}, "Dashboard"), h("p", { class: "loading" }, "Loading orders…"));
  const [all, stuck, overTime] = await Promise.all([
    listAll("orders", "orders"),
    call("GET", `orders?stuckFor=${stuckS}&limit=100`),
    activity(chosen),
  ]);
  const orders = all.items;
  const recovered = orders.filter((o) => o.attempt > 1);
  const failed = orders.filter((o) => FAILED.has(o.processState));
  replaceChildren(
    main,
    h("h1", {}, "Dashboard"),
    h("p", { class: "summary", "data-testid": "order-count" }, `${orders.length} orders${all.truncated ? " (the first pages only)" : ""}`),
    h("p", {}, h("a", { href: "#/deadletters", "data-testid": "dead-letters-link" }, "Dead letters of the deployment's queues →")),
    h(
      "div",
      { class: "charts" },
      barChart("Orders by state", byState(orders), { testId: "chart-states" }),
      barChart(`Stuck for over ${stuckS} s: ${stuck.body.orders.length}`, byState(stuck.body.orders).filter((d) => d.value > 0 || d.kind === "live"), { testId: "chart-stuck" }),
      barChart(`Recoveries: ${recovered.length} orders past their first attempt`, byAttempt(orders), { testId: "chart-recoveries" }),
    ),
    activityCharts(overTime, chosen, stuckS),
    h("section", {}, h("h2", {}, "Stuck orders"), stuckForm(stuckS), table(HEADINGS, orderRows(stuck.body.orders), { empty: "No order is stuck.", testId: "stuck-orders" })),
    h("section", {}, h("h2", {}, "Failed orders (need a person)"), table(HEADINGS, orderRows(failed), { empty: "No failed order.", testId: "failed-orders" })),
    h("section", {}, h("h2", {}, "Recovered orders"), table(HEADINGS, orderRows(recovered), { empty: "No order needed a second attempt.", testId: "recovered-orders" })),
  );
}

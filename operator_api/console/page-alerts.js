// The alerts page: the stored alerts, newest first (GET alerts?kind=&since=), with their order, cause and
// suggested action. Every value is text (dom.js): an alert's cause is whatever the raising code put in it.
// A counted alert (one client's alerts of one kind within a window) is one row: how many times it was
// raised, when first and when last.

import { call } from "./api.js";
import { h, orderLink, replaceChildren, table, when } from "./dom.js";

const HEADINGS = ["last seen", "count", "first seen", "kind", "order", "instance", "cause", "suggested action", "host"];

function rows(alerts) {
  return alerts.map((a) => [
    when(a.lastSeen || a.at),
    h("span", { "data-testid": "alert-count" }, String(a.count ?? 1)),
    when(a.firstSeen || a.at),
    h("span", { class: "state failed", "data-testid": "alert-kind" }, a.kind),
    a.orderId ? orderLink(a.orderId) : "",
    a.instanceId || "",
    a.cause,
    a.suggestedAction,
    a.host || "",
  ]);
}

function filterForm(kind, since) {
  const kindInput = h("input", { id: "alert-kind", name: "kind", value: kind, placeholder: "order_gave_up" });
  const sinceInput = h("input", { id: "alert-since", name: "since", value: since, placeholder: "2026-03-01T12:00:00Z" });
  const submit = (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    if (kindInput.value.trim()) params.set("kind", kindInput.value.trim());
    if (sinceInput.value.trim()) params.set("since", sinceInput.value.trim());
    window.location.hash = `#/alerts?${params}`;
  };
  return h(
    "form",
    { class: "inline", onsubmit: submit },
    h("label", { for: "alert-kind" }, "Kind "),
    kindInput,
    h("label", { for: "alert-since" }, " since "),
    sinceInput,
    " ",
    h("button", { type: "submit" }, "Show"),
  );
}

export async function render(main, _args, query) {
  const kind = query.get("kind") || "";
  const since = query.get("since") || "";
  const continuation = query.get("continuation") || "";
  replaceChildren(main, h("h1", {}, "Alerts"), h("p", { class: "loading" }, "Loading alerts…"));
  const params = new URLSearchParams({ limit: "50" });
  if (kind) params.set("kind", kind);
  if (since) params.set("since", since);
  if (continuation) params.set("continuation", continuation);
  const { body } = await call("GET", `alerts?${params}`);
  const next = new URLSearchParams(params);
  next.delete("limit");
  next.set("continuation", body.continuation || "");
  replaceChildren(
    main,
    h("h1", {}, "Alerts"),
    filterForm(kind, since),
    table(HEADINGS, rows(body.alerts), { empty: "No alert.", testId: "alerts" }),
    body.continuation ? h("p", {}, h("a", { href: `#/alerts?${next}`, "data-testid": "alerts-more" }, "Older alerts")) : null,
  );
}

// The supervisor page: who sweeps (a lease holder locally, the timer's singleton on Azure), the
// stuck-orders gauge and the latest sweeps (GET supervisor).

import { call } from "./api.js";
import { h, replaceChildren, table, when } from "./dom.js";

const HEADINGS = ["ended", "host", "scanned", "recovered", "gave up", "held", "stuck", "seconds", "scan complete"];

function leaderLine(status) {
  if (status.leader) return `${status.leader} (${status.leadership})`;
  if (status.leadership) return `none known: no sweep in the last ${status.staleAfterS} s (last ${when(status.lastSweepAt)})`;
  return "none known: no sweep recorded";
}

export async function render(main) {
  replaceChildren(main, h("h1", {}, "Supervisor"), h("p", { class: "loading" }, "Loading…"));
  const { body } = await call("GET", "supervisor?limit=20");
  const rows = body.sweeps.map((s) => [
    when(s.at),
    s.host,
    String(s.scanned),
    String(s.recovered),
    String(s.gaveUp),
    String(s.held),
    String(s.stuck),
    String(s.durationS),
    s.complete ? "yes" : "no",
  ]);
  replaceChildren(
    main,
    h("h1", {}, "Supervisor"),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Leader"),
      h("dd", { "data-testid": "leader" }, leaderLine(body)),
      h("dt", {}, "Stuck orders (last sweep)"),
      h("dd", { "data-testid": "stuck-orders-gauge" }, body.stuckOrders === null ? "unknown" : String(body.stuckOrders)),
    ),
    h("section", {}, h("h2", {}, "Latest sweeps"), table(HEADINGS, rows, { empty: "No sweep recorded.", testId: "sweeps" })),
  );
}

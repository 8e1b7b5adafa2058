// Small SVG charts drawn here (no chart library): horizontal bars, one per label.

import { svg, h } from "./dom.js";

const BAR = 22;
const GAP = 6;
const LABEL_W = 150;
const WIDTH = 460;

/**
 * A horizontal bar chart of `data` ([{label, value, kind}]): each bar's length is its share of the
 * largest value, and its count is written beside it. `kind` names a CSS class (a state's colour).
 */
export function barChart(title, data, { testId } = {}) {
  const most = Math.max(1, ...data.map((d) => d.value));
  const height = data.length * (BAR + GAP) + GAP;
  const bars = data.map((d, i) => {
    const y = GAP + i * (BAR + GAP);
    const length = Math.round(((WIDTH - LABEL_W - 50) * d.value) / most);
    return svg(
      "g",
      { class: `bar ${d.kind || ""}`, "data-label": d.label, "data-value": d.value },
      svg("text", { x: LABEL_W - 8, y: y + BAR * 0.7, "text-anchor": "end", class: "label" }, d.label),
      svg("rect", { x: LABEL_W, y, width: Math.max(length, d.value > 0 ? 2 : 0), height: BAR, rx: 3 }),
      svg("text", { x: LABEL_W + length + 6, y: y + BAR * 0.7, class: "count" }, String(d.value)),
    );
  });
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height, role: "img", "aria-label": title },
    svg("title", {}, title),
    bars,
  );
  return h("figure", { class: "chart", "data-testid": testId }, h("figcaption", {}, title), chart);
}

const TS_HEIGHT = 120;
const TS_LEFT = 34;
const TS_BOTTOM = 30;
const TS_WIDTH = 460;

/** "HH:MM" of an ISO time, in UTC (the API's times are UTC). */
function utcClock(iso) {
  const at = new Date(iso);
  return `${String(at.getUTCHours()).padStart(2, "0")}:${String(at.getUTCMinutes()).padStart(2, "0")}`;
}

/** "YYYY-MM-DD HH:MM" of an ISO time, in UTC. */
function utcMinute(iso) {
  return `${new Date(iso).toISOString().slice(0, 10)} ${utcClock(iso)}`;
}

/**
 * A vertical bar chart over time of `points` ([{start, value}], oldest first, `value` a count or null
 * for "not known"), one bar per bucket of `bucketS` seconds. Each bar carries data-start and data-value
 * ("none" for null); the axis is labelled in UTC; the figure's aria-label sums it up and a table under
 * a disclosure gives every value as text.
 */
export function timeSeriesChart(title, points, { bucketS, testId, kind = "" } = {}) {
  const known = points.filter((p) => p.value !== null && p.value !== undefined);
  const most = Math.max(1, ...known.map((p) => p.value));
  const slot = (TS_WIDTH - TS_LEFT - 8) / Math.max(points.length, 1);
  const labelEvery = Math.max(1, Math.ceil(points.length / 6));
  const bars = points.map((p, i) => {
    const x = TS_LEFT + i * slot;
    const value = p.value === null || p.value === undefined ? null : p.value;
    const height = value === null ? 0 : Math.round(((TS_HEIGHT - 10) * value) / most);
    const tip = `${utcMinute(p.start)} UTC, ${bucketS / 60} min: ${value === null ? "no sweep" : value}`;
    return svg(
      "g",
      { class: `tick ${kind}`, "data-start": p.start, "data-value": value === null ? "none" : value },
      svg("title", {}, tip),
      svg("rect", { x: x + 1, y: TS_HEIGHT - Math.max(height, value ? 2 : 0), width: Math.max(slot - 2, 1), height: Math.max(height, value ? 2 : 0) }),
      i % labelEvery === 0 ? svg("text", { x, y: TS_HEIGHT + 14, class: "axis" }, utcClock(p.start)) : null,
    );
  });
  const total = known.reduce((sum, p) => sum + p.value, 0);
  const first = points.length ? utcMinute(points[0].start) : "";
  const summary = `${title}: ${known.length ? `${total} in all, at most ${Math.max(0, ...known.map((p) => p.value))} per ${bucketS / 60} min` : "nothing known"}, from ${first} UTC`;
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${TS_WIDTH} ${TS_HEIGHT + TS_BOTTOM}`, width: TS_WIDTH, height: TS_HEIGHT + TS_BOTTOM, role: "img", "aria-label": summary },
    svg("title", {}, summary),
    svg("line", { x1: TS_LEFT, y1: TS_HEIGHT, x2: TS_WIDTH - 8, y2: TS_HEIGHT, class: "axis-line" }),
    svg("text", { x: TS_LEFT - 4, y: 12, "text-anchor": "end", class: "axis" }, String(most)),
    svg("text", { x: TS_LEFT - 4, y: TS_HEIGHT, "text-anchor": "end", class: "axis" }, "0"),
    svg("text", { x: TS_WIDTH - 8, y: TS_HEIGHT + 27, "text-anchor": "end", class: "axis" }, "time (UTC)"),
    bars,
  );
  const rows = points.map((p) => h("tr", {}, h("td", {}, `${utcMinute(p.start)} UTC`), h("td", {}, p.value === null || p.value === undefined ? "no sweep" : String(p.value))));
  const text = h(
    "details",
    { class: "as-table" },
    h("summary", {}, "As a table"),
    h("table", {}, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "bucket start"), h("th", { scope: "col" }, title))), h("tbody", {}, rows)),
  );
  return h("figure", { class: "chart timeseries", "data-testid": testId, "data-bucket-s": bucketS }, h("figcaption", {}, title), chart, text);
}

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

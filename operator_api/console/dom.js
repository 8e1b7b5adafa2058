// Building the page: elements are made here, and every text goes in as a text node. Nothing in the
// console parses HTML (no property or call that takes markup): whatever an order
// record holds (a reason, a name, an error message) is shown as the characters it is. Every text is
// made `visible` first: a client's message id, correlation id or body may hold characters that would
// hide text or reorder what is around it.

const SVG_NS = "http://www.w3.org/2000/svg";

/** What Python's str.isprintable() refuses: "Other" (controls, format characters such as bidi overrides
 * and zero-width ones, surrogates, private use, unassigned) and "Separator" but the ASCII space. */
const UNPRINTABLE = /(?! )[\p{C}\p{Z}]/gu;
const NAMED = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escaped(char) {
  const code = char.codePointAt(0);
  const hex = code.toString(16);
  if (code < 0x100) return `\\x${hex.padStart(2, "0")}`;
  if (code < 0x10000) return `\\u${hex.padStart(4, "0")}`;
  return `\\U${hex.padStart(8, "0")}`;
}

/**
 * `text` with every character that is not printable shown as its Python escape, as the CLI shows it
 * (orderflow.client_text.visible): an ESC as the four characters \x1b, U+202E as \u202e, a line feed
 * as \n. Nothing is removed, so the text stays recognisable.
 */
export function visible(text) {
  return String(text).replace(UNPRINTABLE, (char) => NAMED[char] ?? escaped(char));
}

function fill(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return element;
}

/** An HTML element: h("a", {href: "#/"}, "text", otherNode). Attributes named on* take a listener. */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, the same way. */
export function svg(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replace the children of `element` with `children`. */
export function replaceChildren(element, ...children) {
  element.replaceChildren();
  fill(element, {}, children);
}

/** A table of `rows` (arrays of cells) under `headings`; `empty` when there are no rows. */
export function table(headings, rows, { empty = "none", testId } = {}) {
  if (rows.length === 0) return h("p", { class: "empty", "data-testid": testId }, empty);
  return h(
    "table",
    { "data-testid": testId },
    h("thead", {}, h("tr", {}, headings.map((heading) => h("th", { scope: "col" }, heading)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell ?? ""))))),
  );
}

/** A time as the operator reads it: the ISO text, shortened to the second. */
export function when(iso) {
  return iso ? String(iso).replace("T", " ").replace(/\.\d+/, "") : "";
}

/** A link to an order's page. */
export function orderLink(key) {
  return h("a", { href: `#/orders/${encodeURIComponent(key)}`, class: "order-link" }, key);
}

/** Show `text` in the notice line (kind: "info" or "error"); empty text hides it. */
export function notify(text, kind = "info") {
  const notice = document.getElementById("notice");
  notice.textContent = visible(text || "");
  notice.className = `notice ${kind}`;
  notice.hidden = !text;
}

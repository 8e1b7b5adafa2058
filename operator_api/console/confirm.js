// The confirmation step every action takes: a modal dialog saying what will be done to which order.

import { replaceChildren, visible } from "./dom.js";

/**
 * Ask the operator to confirm. `extra` is an element to show in the dialog (a reason field, say).
 * Resolves true when they confirm, false when they cancel or press Escape.
 */
export function confirmAction({ title, detail, extra = null, confirmLabel = "Confirm" }) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = visible(title);
  document.getElementById("confirm-detail").textContent = visible(detail);
  replaceChildren(document.getElementById("confirm-extra"), extra);
  document.getElementById("confirm-ok").textContent = visible(confirmLabel);
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

// What the console knows of orderflow's states: their order on the charts and which ones are settled.

export const STATES = [
  "Pending",
  "Processing",
  "AwaitingReview",
  "Compensating",
  "Processed",
  "Compensated",
  "Error",
  "CompensationFailed",
  "Cancelled",
];

export const SETTLED = new Set(["Processed", "Compensated", "Error", "CompensationFailed", "Cancelled"]);
export const FAILED = new Set(["Error", "CompensationFailed"]);

/** The CSS class of a state's colour. */
export function stateKind(state) {
  if (FAILED.has(state)) return "failed";
  if (SETTLED.has(state)) return "settled";
  return "live";
}

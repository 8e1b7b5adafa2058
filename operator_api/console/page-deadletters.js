// Dead letters: the deployment's queues (GET queues), one queue's dead letters (GET deadletters/{queue},
// every page), one dead letter with its body (GET deadletters/{queue}/{id}), and replay and purge, each
// confirmed first (POST deadletters/{queue}/{id}/replay, POST deadletters/{queue}/purge).

import { call, listAll } from "./api.js";
import { confirmAction } from "./confirm.js";
import { h, notify, orderLink, replaceChildren, table, when } from "./dom.js";

const KIND = { inbound: "client inbound", agent: "agent requests", responses: "agent responses" };

function queuePath(queue, rest) {
  return `deadletters/${encodeURIComponent(queue)}${rest ? `/${rest}` : ""}`;
}

/** The hash of a queue's list, or of one of its dead letters. */
function pageHash(queue, id) {
  return id ? `#/deadletters/${encodeURIComponent(queue)}/${encodeURIComponent(id)}` : `#/deadletters?queue=${encodeURIComponent(queue)}`;
}

function queueLabel(queue, count) {
  const owner = queue.owner ? ` ${queue.owner}` : "";
  return `${queue.name} (${KIND[queue.kind] || queue.kind}${owner}): ${count}`;
}

async function countDeadLetters(queue) {
  // The first page says enough for the picker: "100+" when there are more.
  const { body } = await call("GET", `${queuePath(queue.name)}?limit=100`);
  return body.continuation ? `${body.deadLetters.length}+` : String(body.deadLetters.length);
}

function picker(queues, counts, chosen) {
  const select = h(
    "select",
    { id: "queue-picker", name: "queue", onchange: (event) => { window.location.hash = pageHash(event.target.value); } },
    queues.map((q, i) => h("option", { value: q.name, selected: q.name === chosen }, queueLabel(q, counts[i]))),
  );
  return h("p", { class: "inline" }, h("label", { for: "queue-picker" }, "Queue "), select);
}

/** What a replay or a purge said, shown above the list: its texts and elements, in order. */
function outcome(...said) {
  return h("p", { class: "notice info", "data-testid": "dead-letter-outcome" }, said);
}

/**
 * The order a dead letter is linked to (the API's `orderId`: one of the sending client's, proved by the
 * queue it arrived on), or "not linked". A correlation id is what the sender wrote and links nothing.
 */
function linkedOrder(orderId) {
  return orderId ? orderLink(orderId) : h("span", { class: "not-linked", "data-testid": "not-linked" }, "not linked");
}

async function replay(queue, dead) {
  const confirmed = await confirmAction({
    title: `Replay dead letter ${dead.deadLetterId}?`,
    detail: `Its body is sent to ${queue} again under a new message id, and the dead letter is deleted. Replay once the cause is fixed: the consumer takes it as a new delivery.`,
    confirmLabel: "Replay",
  });
  if (!confirmed) return null;
  try {
    const { body } = await call("POST", queuePath(queue, `${encodeURIComponent(dead.deadLetterId)}/replay`), { body: {} });
    const order = body.orderId ? [" Order: ", orderLink(body.orderId), "."] : [" Not linked to an order: no order's timeline was written."];
    // The new id is the client's message id and a suffix: isolated, so right-to-left letters in it
    // cannot reorder the sentence around it.
    return outcome(`Replayed ${dead.deadLetterId} as `, h("bdi", { "data-testid": "replay-message-id" }, body.replayMessageId), ".", order);
  } catch (refused) {
    if (refused.status === 401) throw refused;
    notify(`Replay refused: ${refused.message}.`, "error");
    return null;
  }
}

async function purge(queue, dead) {
  const confirmed = await confirmAction({
    title: `Purge dead letter ${dead.deadLetterId}?`,
    detail: `It is deleted from ${queue}'s dead letters and its message is never processed. This cannot be undone.`,
    confirmLabel: "Purge",
  });
  if (!confirmed) return null;
  try {
    const { body } = await call("POST", queuePath(queue, "purge"), { body: { deadLetterId: dead.deadLetterId } });
    return outcome(body.count ? `Purged ${dead.deadLetterId}.` : `Nothing purged: ${dead.deadLetterId} is gone already.`);
  } catch (refused) {
    if (refused.status === 401) throw refused;
    notify(`Purge refused: ${refused.message}.`, "error");
    return null;
  }
}

function buttons(queue, dead, done) {
  const run = (action) => async () => {
    const said = await action(queue, dead);
    if (said) await done(said);
  };
  return h(
    "span",
    { class: "row-actions" },
    h("button", { type: "button", "data-action": "replay", "data-dead-letter": dead.deadLetterId, onclick: run(replay) }, "Replay"),
    h("button", { type: "button", "data-action": "purge", "data-dead-letter": dead.deadLetterId, onclick: run(purge) }, "Purge"),
  );
}

function deadLetterRows(queue, deadLetters, done) {
  return deadLetters.map((d) => [
    h("a", { href: pageHash(queue, d.deadLetterId), class: "dead-letter-link" }, d.deadLetterId),
    d.reason,
    d.description,
    when(d.deadLetteredAt),
    String(d.deliveryCount),
    h("code", {}, d.messageId),
    buttons(queue, d, done),
  ]);
}

const HEADINGS = ["dead letter", "reason", "description", "dead-lettered", "deliveries", "message id", ""];

async function renderQueue(main, query, said = null) {
  const { body } = await call("GET", "queues");
  const queues = body.queues;
  if (queues.length === 0) {
    replaceChildren(main, h("h1", {}, "Dead letters"), h("p", { class: "empty" }, "This deployment has no queue."));
    return;
  }
  const counts = await Promise.all(queues.map(countDeadLetters));
  const asked = query.get("queue");
  const chosen = queues.some((q) => q.name === asked) ? asked : (queues[counts.findIndex((c) => c !== "0")] || queues[0]).name;
  const listed = await listAll(queuePath(chosen), "deadLetters", { maxPages: 10 });
  const done = (outcomeShown) => renderQueue(main, new URLSearchParams({ queue: chosen }), outcomeShown);
  replaceChildren(
    main,
    h("h1", {}, "Dead letters"),
    picker(queues, counts, chosen),
    said,
    h(
      "section",
      {},
      h("h2", {}, h("span", { "data-testid": "queue-name" }, chosen), `: ${listed.items.length} dead letters${listed.truncated ? " (the first pages only)" : ""}`),
      table(HEADINGS, deadLetterRows(chosen, listed.items, done), { empty: "No dead letter on this queue.", testId: "dead-letters" }),
    ),
  );
}

function deadLetterFacts(d) {
  const rows = [
    ["queue", d.queue],
    ["dead letter", d.deadLetterId],
    ["message id", h("code", {}, d.messageId)],
    ["reason", h("span", { "data-testid": "dead-letter-reason" }, d.reason)],
    ["description", d.description],
    ["dead-lettered", when(d.deadLetteredAt)],
    ["deliveries", String(d.deliveryCount)],
    ["order", h("span", { "data-testid": "dead-letter-order" }, linkedOrder(d.orderId))],
    ["correlation id", d.correlationId || ""],
  ];
  return h("dl", { class: "facts" }, rows.filter(([, v]) => v !== "").map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

async function renderDeadLetter(main, queue, id) {
  const back = h("p", {}, h("a", { href: pageHash(queue), "data-testid": "back-to-queue" }, `← ${queue}`));
  let found;
  try {
    found = (await call("GET", queuePath(queue, encodeURIComponent(id)))).body;
  } catch (missing) {
    if (missing.status !== 404) throw missing;
    replaceChildren(main, back, h("h1", {}, "Dead letter ", id), h("p", { class: "empty", "data-testid": "dead-letter-gone" }, `${missing.detail}.`));
    return;
  }
  const done = (said) => replaceChildren(main, back, h("h1", {}, "Dead letter ", id), said);
  replaceChildren(
    main,
    back,
    h("h1", {}, "Dead letter ", h("span", { "data-testid": "dead-letter-id" }, id)),
    h("div", { class: "order-head" }, deadLetterFacts(found), h("div", { class: "actions" }, buttons(queue, found, done))),
    h("section", {}, h("h2", {}, "Body, as it was"), h("pre", { class: "body-text", "data-testid": "dead-letter-body" }, found.body)),
  );
}

/** `#/deadletters?queue=Q` (the picker and Q's list) or `#/deadletters/<queue>/<id>` (one dead letter). */
export async function render(main, args, query) {
  replaceChildren(main, h("h1", {}, "Dead letters"), h("p", { class: "loading" }, "Loading…"));
  if (args.length === 2) {
    await renderDeadLetter(main, args[0], args[1]);
  } else {
    await renderQueue(main, query);
  }
}

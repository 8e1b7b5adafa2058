"""How a demo run ended: each order classified against what its data says, attempts that overlapped,
the summary, the invariants and the report.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
from rich.table import Table

from demo.config import MAX_FAILURES, console
from demo.system import DemoTarget, Settling, await_final_replies, missing_final_replies
from demo.tpch import (
    Catalog,
    DemoOrder,
    customer_declined,
)
from orderflow.compensation_trigger import HOLD_EXPIRED
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState, StateRecord, client_order_id, parse_utc
from orderflow.stores.base import StateQuery, StateStore
from orderflow_client.client import OrderflowClient


def all_records(states: StateStore) -> list[StateRecord]:
    """Every state record, paged."""
    out: list[StateRecord] = []
    continuation: str | None = None
    while True:
        page = states.query(StateQuery(), max_item_count=500, continuation=continuation)
        out.extend(v.item for v in page.items)
        continuation = page.continuation
        if continuation is None:
            return out


def active_effects(facts: dict[str, Any]) -> int:
    """Effects of an order still in place at the demo services: reservations not released, shipments
    not cancelled, authorisations still held, and a charge not refunded (counted once). A cancellation
    fee the refund kept by the payment service's rule is not an effect left behind."""
    summary = facts.get("summary", {})
    charged = Decimal(summary.get("netCharged") or "0") > Decimal(summary.get("feeKept") or "0")
    held = int(summary.get("activeAuthorizations", 0))
    return (
        int(summary.get("activeReservations", 0))
        + int(summary.get("activeShipments", 0))
        + int(charged)
        + held
    )


def classify(order: DemoOrder, record: StateRecord | None, facts: dict[str, Any], max_failures: int) -> str:
    """How an order ended compared with what its data says.

    Returns:
        ``ok``; ``exhausted`` (the injected faults pushed it past the supervisor's threshold, the retry
        budget or its holds' expiry, and it was compensated); ``escalated`` (stopped past a point of no
        return, left for an operator); ``compensation_failed``; ``not_terminal``; or
        ``mismatched:<why>``.
    """
    if record is None:
        return "mismatched:no state record"
    if record.process_state not in SETTLED_STATES:
        return "not_terminal"
    error = record.last_error
    code = error.code if error else None
    if record.process_state is ProcessState.PROCESSED:
        return _classify_processed(order, facts.get("summary", {}))
    if record.process_state is ProcessState.COMPENSATION_FAILED:
        return "compensation_failed"
    if record.process_state is ProcessState.ERROR:
        return "escalated" if code == PAST_POINT_OF_NO_RETURN else f"mismatched:error {code}"
    if record.process_state is not ProcessState.COMPENSATED:
        return f"mismatched:{record.process_state.value}"
    return _classify_compensated(order, record, facts, code, max_failures)


def _classify_processed(order: DemoOrder, summary: dict[str, Any]) -> str:
    """:func:`classify` for a ``Processed`` order: one reservation, one shipment, the total charged."""
    if customer_declined(order):
        return "mismatched:processed a declined customer"
    if summary.get("activeReservations") != 1 or summary.get("activeShipments") != 1:
        return "mismatched:processed without exactly one reservation and one shipment"
    if summary.get("netCharged") != f"{order.amount:.2f}":
        return "mismatched:charged amount differs from the order total"
    return "ok"


def _classify_compensated(
    order: DemoOrder, record: StateRecord, facts: dict[str, Any], code: str | None, max_failures: int
) -> str:
    """:func:`classify` for a ``Compensated`` order: nothing left in place, and a cause its data justifies."""
    if active_effects(facts):
        return "mismatched:compensated but effects remain"
    if code == "card_declined":
        return "ok" if customer_declined(order) else "mismatched:declined a customer in credit"
    if code == "out_of_stock":
        declines = [d for d in facts.get("declines", []) if d.get("error") == "out_of_stock"]
        justified = any(int(d["available"]) < int(d["requested"]) for d in declines)
        return "ok" if justified else "mismatched:out of stock without a justified decline"
    if code == "review_rejected":
        return "ok"  # a person (or the review's default) decided
    if code in ("too_many_failures", "retry_budget_exhausted") or record.failure_count >= max_failures:
        return "exhausted"
    delayed = record.failure_count > 0 or any(hold.reacquired for hold in record.holds.values())
    if code == HOLD_EXPIRED and delayed:
        return "exhausted"  # recoveries (or a hold re-acquired already) outlasted a hold
    return f"mismatched:compensated for {code}"


STORE_TIME_SLACK_S = 1.0
"""Seconds a host's stamp of the store's time may be off the true time: its measured interval is at most
the store's stamp resolution (one second) wide once the host has written, and narrows from there."""


def attempt_overlaps(
    records: dict[str, StateRecord], audit_keys: dict[str, Any], *, clock_slack_s: float = 0.0
) -> dict[str, str]:
    """Orders that two attempts drove at once, with why: ``{orderId: reason}`` (empty when none).

    Two checks, from two independent sources:

    - the state store: in ``attemptHistory`` every attempt's tenure ended (``endedAt``) no later than the
      next attempt's claim (``claimedAt``);
    - the demo services' audit: no call made for attempt *k* (its ``Orderflow-Instance-Id`` header)
      arrived after attempt *k + 1* was claimed.

    The services stamp this machine's wall clock (UTC), and the hosts the state store's time as each one
    reads it (orderflow.store_clock), which cosmosdb-server keeps on this machine's clock: a host's
    stamps are then off by at most its measured interval (:data:`STORE_TIME_SLACK_S`), whatever its own
    clock's offset, and a time is counted later than another only by more than ``clock_slack_s``.
    """
    slack = timedelta(seconds=clock_slack_s)
    overlaps: dict[str, str] = {}
    next_claim: dict[str, datetime] = {}
    for order_id, record in records.items():
        history = sorted(record.attempt_history, key=lambda e: e.attempt)
        for earlier, later in pairwise(history):
            next_claim[earlier.instance_id] = later.claimed_at
            if earlier.ended_at is None or earlier.ended_at > later.claimed_at + slack:
                overlaps[order_id] = (
                    f"attempt {earlier.attempt} still owned the record "
                    f"when attempt {later.attempt} was claimed"
                )
    for key, entry in audit_keys.items():
        for call in entry.get("received", []):
            instance = call.get("instance")
            claimed = next_claim.get(instance) if instance else None
            if claimed is not None and parse_utc(call["at"]) > claimed + slack:
                order_id = client_order_id(str(entry.get("orderId") or instance.rpartition(":")[0]))
                overlaps.setdefault(
                    order_id, f"a call of {instance} ({key}) arrived after the next attempt was claimed"
                )
    return overlaps


def _key(records: Mapping[str, StateRecord], order_id: str) -> str:
    record = records.get(order_id)
    return record.order_id if record is not None else order_id


def summarise(
    catalog: Catalog,
    records: dict[str, StateRecord],
    services_url: str,
    submitted: int,
    elapsed_s: float,
    *,
    clock_slack_s: float = 0.0,
    services_auth: httpx.Auth | None = None,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Build the report and the list of mismatched orders; ``records`` by the clients' own order ids
    (``clock_slack_s``: :func:`attempt_overlaps`; ``services_auth``: how the demo services' reporting
    routes are called, None for no token)."""
    with httpx.Client(base_url=services_url, timeout=30, auth=services_auth) as http:
        audit = http.get("/audit").json()
        # The services know an order by its key, {clientId}:{orderId}; an order never recorded has none.
        facts = {
            o.order_id: http.get(f"/orders/{_key(records, o.order_id)}/facts").json() for o in catalog.orders
        }
    states = Counter(r.process_state for r in records.values())
    verdicts = {
        o.order_id: classify(o, records.get(o.order_id), facts[o.order_id], MAX_FAILURES)
        for o in catalog.orders
    }
    mismatched = [(oid, v.split(":", 1)[1]) for oid, v in verdicts.items() if v.startswith("mismatched")]
    settled = sum(states[s] for s in SETTLED_STATES)
    overlaps = attempt_overlaps(records, audit.get("keys", {}), clock_slack_s=clock_slack_s)
    report = {
        "submitted": submitted,
        "processed": states[ProcessState.PROCESSED],
        "error": states[ProcessState.ERROR],
        "compensated": states[ProcessState.COMPENSATED],
        "compensation_failed": states[ProcessState.COMPENSATION_FAILED],
        "awaiting_review": states[ProcessState.AWAITING_REVIEW],
        "not_terminal": submitted - settled,
        # Effects left in place by orders that did not complete, except those an operator owns
        # (CompensationFailed, or stopped past a point of no return): must be 0.
        "uncompensated_effects": sum(
            active_effects(facts[o.order_id])
            for o in catalog.orders
            if verdicts[o.order_id] not in ("compensation_failed", "escalated")
            and (rec := records.get(o.order_id)) is not None
            and rec.process_state is not ProcessState.PROCESSED
        ),
        "duplicate_effects": int(audit["duplicate_effects"]) + int(audit.get("duplicate_order_effects", 0)),
        "mismatched": len(mismatched),
        "overlapping_attempts": len(overlaps),
        "exhausted": sum(1 for v in verdicts.values() if v == "exhausted"),
        "escalated": sum(1 for v in verdicts.values() if v == "escalated"),
        "reviewed": sum(1 for r in records.values() if r.review is not None),
        "declined_card": sum(
            1 for r in records.values() if r.last_error and r.last_error.code == "card_declined"
        ),
        "out_of_stock": sum(
            1 for r in records.values() if r.last_error and r.last_error.code == "out_of_stock"
        ),
        "recovered_orders": sum(1 for r in records.values() if r.failure_count > 0),
        "recoveries": sum(1 for r in records.values() for e in r.attempt_history if e.outcome == "recovered"),
        "gave_up": sum(1 for r in records.values() for e in r.attempt_history if e.outcome == "gave_up"),
        "attempts_max": max((r.attempt for r in records.values()), default=0),
        "calls_per_step_max": int(audit["calls_per_key_max"]),
        "faults_injected": int(audit.get("faults_total", 0)),
        "fees_kept": audit.get("fees_kept_total", "0.00"),
        **holds_report(records, audit.get("holds", {})),
        "elapsed_s": round(elapsed_s, 2),
        "orders_per_s": round(submitted / elapsed_s, 2) if elapsed_s > 0 else 0.0,
    }
    # Listed with the mismatches for the operator, counted apart in the report.
    mismatched += [(oid, f"driven by two attempts at once: {why}") for oid, why in overlaps.items()]
    return report, mismatched


def holds_report(records: Mapping[str, StateRecord], holds: Mapping[str, int]) -> dict[str, int]:
    """The run's holds: acquired, expired and committed as the services count them, re-acquired as the
    records say, and ``committed_on_expired_hold``, the commits that reached a service after their hold
    had expired there (each refused, ``hold_expired``): the hold rule keeps it at 0."""
    return {
        "holds_acquired": int(holds.get("acquired", 0)),
        "holds_expired": int(holds.get("expired", 0)),
        "holds_reacquired": sum(h.reacquired for r in records.values() for h in r.holds.values()),
        "holds_committed": int(holds.get("committed", 0)),
        "committed_on_expired_hold": int(holds.get("commitsOnExpired", 0)),
    }


INVARIANTS = (
    "timed_out",
    "not_terminal",
    "duplicate_effects",
    "uncompensated_effects",
    "committed_on_expired_hold",
    "mismatched",
    "overlapping_attempts",
    "missing_final_replies",
)
"""Report entries that must be 0; the demo exits 1 otherwise."""


def print_summary(
    report: dict[str, Any],
    mismatched: list[tuple[str, str]],
    *,
    title: str = "orderflow demo",
    invariants: Sequence[str] = INVARIANTS,
) -> None:
    """Print the report as a table, failed invariants in red, then the first 20 mismatched orders."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in report.items():
        style = ""
        if key in invariants and value:
            style = "bold red"
        table.add_row(key, f"[{style}]{value}[/{style}]" if style else str(value))
    console.print(table)
    for order_id, why in mismatched[:20]:
        console.print(f"[red]mismatched[/red] {order_id}: {why}")


def catalog_records(records: Iterable[StateRecord], others: Collection[str] = ()) -> list[StateRecord]:
    """The records of the catalog's orders: those neither stored under nor recorded for a client of
    ``others`` (client ids; the chaos intruder, which reuses the catalog's order ids)."""
    return [r for r in records if r.order_id.partition(":")[0] not in others and r.client_id not in others]


def build_report(
    system: DemoTarget,
    clients: Sequence[OrderflowClient],
    settling: Settling,
    *,
    processes: int,
    kills: int,
    others: Collection[str] = (),
    clock_slack_s: float = STORE_TIME_SLACK_S,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The demo report of a run whose orders have settled (or timed out), and its mismatched orders.

    Gives the last final replies up to 60 s to arrive, then reads the state store and the demo services.
    The orders of ``others`` (client ids whose orders are not the catalog's) are left out;
    ``clock_slack_s``: :func:`attempt_overlaps`.
    """
    # Every settled order owes its client a final reply; give the last ones a moment to arrive.
    await_final_replies(clients, settling.owners, timeout_s=60.0)
    # By the clients' own order ids, as the catalog names them (each catalog order has one client); a
    # deployment's store also holds earlier runs' orders, which this report leaves out.
    ids = {order.order_id for order in system.catalog.orders}
    records = {
        client_order_id(r.order_id): r
        for r in catalog_records(all_records(system.stores.state), others)
        if client_order_id(r.order_id) in ids
    }
    report, mismatched = summarise(
        system.catalog,
        records,
        system.services_url,
        settling.submitted,
        settling.elapsed_s,
        clock_slack_s=clock_slack_s,
        services_auth=system.services_auth,
    )
    report["final_replies"] = sum(
        client.replies.settled(oid for oid, queue in settling.owners.items() if queue == client.reply_queue)
        for client in clients
    )
    report["missing_final_replies"] = missing_final_replies(records, settling.owners, clients)
    report["processes"] = processes
    report["kills"] = kills
    # Orders that settle only after the time limit (and the killing) stopped do not count as a pass.
    report["timed_out"] = int(settling.timed_out)
    return report, mismatched


def write_report(report: dict[str, Any], report_path: Path) -> None:
    """Write ``report`` as indented JSON."""
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

"""Retention: purge the payment and customer data of orders finished more than the retention period ago.

A finished order (``Processed``, ``Compensated``, ``Cancelled``: no undo can run any more) keeps its data
for ``COMPENSATION_LOG_RETENTION_S`` after its last change (for audits and disputes). Then one pass
redacts its order document (customer id and name, amount, items) and purges its state record (step
results, compensation data and undo results, error and reply texts), keeping what the protocol needs
after the end: statuses, keys, the content hash, error kinds and codes, times. ``CompensationFailed`` and
``Error`` orders keep theirs for the operator who resolves them; the period starts at the resolution.
What each field holds, and why it is kept or purged: docs/data.md.

Per record, the document is redacted first and the record marked second (``dataPurgedAt``,
``dataPurgeVersion``), each a conditional write: a pass that dies between the two, or whose record write
loses a race (412), leaves the record unmarked, and the next pass redoes both (a redacted document is
left as it is). Records purged by an earlier, narrower version (``compensationLogPurgedAt`` alone) are
purged again. A pass is bounded like a sweep: ``max_records`` records, and the ``SCAN_*`` page bounds
(:mod:`orderflow.stores.paging`), so pages with nothing on them (Cosmos DB returns some) are followed,
but not for ever.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict, InvalidContinuation, NotFound
from orderflow.records import DATA_PURGE_VERSION, ProcessState, StateRecord
from orderflow.settings import Settings
from orderflow.stores.base import OrderStore, StateQuery, StateStore, Versioned
from orderflow.stores.paging import PageBudget, PageLimits
from orderflow.timeline import Actor, note

logger = logging.getLogger(__name__)

PURGEABLE_STATES = (ProcessState.PROCESSED, ProcessState.COMPENSATED, ProcessState.CANCELLED)
"""Finished for good: no undo can run any more."""


@dataclass
class PurgeReport:
    """What one retention pass did: records purged, and records that moved meanwhile (left for later)."""

    purged: int = 0
    lost_races: int = 0


def purge_expired_logs(
    *, states: StateStore, orders: OrderStore, clock: Clock, settings: Settings, max_records: int = 100
) -> PurgeReport:
    """Purge the payment and customer data of orders finished more than the retention period ago.

    Args:
        states: The state store.
        orders: The order store (each purged record's document is redacted).
        clock: Time source (UTC).
        settings: ``COMPENSATION_LOG_RETENTION_S`` (0 disables the purge) and the ``SCAN_*`` page bounds.
        max_records: Most records this pass looks at (each costs up to two writes).

    Returns:
        A :class:`PurgeReport`.

    Raises:
        TransientError: a store is unavailable; the next pass starts over.
    """
    report = PurgeReport()
    if settings.COMPENSATION_LOG_RETENTION_S <= 0:
        return report
    now = clock.now()
    query = StateQuery(
        process_states=PURGEABLE_STATES,
        updated_before=now - timedelta(seconds=settings.COMPENSATION_LOG_RETENTION_S),
        purge_version_below=DATA_PURGE_VERSION,
    )
    # Purged records leave the result, so each pass starts again from the first page.
    budget = PageBudget("retention", PageLimits.from_settings(settings))
    continuation: str | None = None
    examined = 0
    while examined < max_records and budget.allows_another():
        try:
            page = states.query(query, max_item_count=max_records - examined, continuation=continuation)
        except InvalidContinuation:
            break
        budget.record(page)
        for found in page.items:
            if _purge(found, states=states, orders=orders, now=now):
                report.purged += 1
            else:
                report.lost_races += 1
        examined += len(page.items)
        continuation = page.continuation
        if continuation is None:
            break
    if report.purged:
        telemetry.event("retention.purged", records=report.purged)
    return report


def _purge(found: Versioned[StateRecord], *, states: StateStore, orders: OrderStore, now: datetime) -> bool:
    """Redact the order's document, then purge and mark its record; False if either write lost a race."""
    order_id = found.item.order_id
    try:
        orders.redact(order_id, at=now)
    except NotFound:
        # Submission writes the document before the record; a record without one has nothing to redact.
        logger.warning("retention: order %s has a state record but no order document", order_id)
    except ConcurrencyConflict:
        return False  # another pass is redacting it
    record = found.item.copied()
    record.purge_data(now)
    note(found.item, record, Actor("retention"), action="purge", at=now)
    try:
        states.replace(record, etag=found.etag)
    except ConcurrencyConflict:
        return False
    return True

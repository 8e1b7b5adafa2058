"""Retention of compensation logs: purge the data a finished order's log no longer needs.

A compensation log entry holds what an undo needs: effect ids and amounts (never card data). Once an
order is finished for good (``Processed``, ``Compensated``, ``Cancelled``: no undo can run any more), that
data is kept for ``COMPENSATION_LOG_RETENTION_S`` (for audits and disputes), then purged: each entry keeps
its step, action, undo key and status, and loses ``data`` and ``undoResult``. ``CompensationFailed`` and
``Error`` orders keep theirs for the operator who resolves them.

The purge is one conditional write per record (a record that moved since it was read is left for the
next pass), marks the record ``compensationLogPurgedAt`` so later passes skip it, and is bounded per
pass like a sweep.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery, StateStore

logger = logging.getLogger(__name__)

PURGEABLE_STATES = (ProcessState.PROCESSED, ProcessState.COMPENSATED, ProcessState.CANCELLED)
"""Finished for good: no undo can run any more."""


@dataclass
class PurgeReport:
    """What one retention pass did: records purged, and records that moved meanwhile (left for later)."""

    purged: int = 0
    lost_races: int = 0


def purge_expired_logs(
    *, states: StateStore, clock: Clock, settings: Settings, max_records: int = 100
) -> PurgeReport:
    """Purge the compensation-log data of orders finished more than the retention period ago.

    Args:
        states: The state store.
        clock: Time source (UTC).
        settings: ``COMPENSATION_LOG_RETENTION_S`` (0 disables the purge).
        max_records: Most records this pass writes.

    Returns:
        A :class:`PurgeReport`.

    Raises:
        TransientError: the store is unavailable; the next pass starts over.
    """
    report = PurgeReport()
    if settings.COMPENSATION_LOG_RETENTION_S <= 0:
        return report
    now = clock.now()
    query = StateQuery(
        process_states=PURGEABLE_STATES,
        updated_before=now - timedelta(seconds=settings.COMPENSATION_LOG_RETENTION_S),
        log_unpurged=True,
    )
    # Purged records leave the result, so the first page is always the next work.
    page = states.query(query, max_item_count=max_records)
    for found in page.items:
        record = found.item.model_copy(deep=True)
        for entry in record.compensation_log:
            entry.data = {}
            entry.undo_result = None
        record.compensation_log_purged_at = now
        try:
            states.replace(record, etag=found.etag)
        except ConcurrencyConflict:
            report.lost_races += 1
            continue
        report.purged += 1
    if report.purged:
        telemetry.event("retention.purged", records=report.purged)
    return report

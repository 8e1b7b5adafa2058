"""The supervisor's sweep: find orders whose ``completeBy`` has passed and recover or fail them.

The state store deliberately does not distinguish a step that timed out from a process that crashed
(docs/design.md §3.4): either way the record is ``Processing`` with an expired ``completeBy``. For each such
record the supervisor makes one conditional write on the ETag it read (§3.5):

- ``failureCount += 1``;
- below ``SUPERVISOR_MAX_FAILURES``, and with retry budget left: back to ``Pending``, ``lockedBy = null``,
  ``nextAttemptAt = now + backoff`` (exponential, capped), so a starter claims a new attempt later;
- otherwise: ``Error`` with ``lastError``, an operator alert and a ``Failed`` reply to the client.

Clearing ``lockedBy`` fences the expired attempt: any write it still tries changes nothing (§3.3).
Several supervisors may sweep at once; the ETag makes at most one win each record, and the loser skips.
Sweeps are bounded: a page size, a maximum number of records per sweep, and a repeated or rejected
continuation token ends the sweep (the next one starts over; docs/design.md §7).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict, ErrorKind, InvalidContinuation
from orderflow.messages import OrderStatus, StatusReply, reply_message_id
from orderflow.queues.base import QueueFactory
from orderflow.records import LastError, ProcessState, StateRecord, StepStatus
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery, StateStore, Versioned

logger = logging.getLogger(__name__)


class Recovery(StrEnum):
    """What the supervisor did with one record."""

    REQUEUED = "requeued"
    GAVE_UP = "gave_up"
    SKIPPED = "skipped"
    LOST_RACE = "lost_race"


@dataclass
class SweepReport:
    """What one sweep did: records scanned, pages read, and order ids per outcome."""

    scanned: int = 0
    pages: int = 0
    requeued: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)
    skipped: int = 0
    lost_races: int = 0
    restarted_scan: bool = False


def backoff_s(failure_count: int, settings: Settings) -> float:
    """Seconds before a recovered order may be claimed again: initial x 2^(n-1), capped."""
    delay = settings.SUPERVISOR_BACKOFF_INITIAL_S * 2 ** max(0, failure_count - 1)
    return float(min(settings.SUPERVISOR_BACKOFF_MAX_S, delay))


def _running_step(record: StateRecord) -> str | None:
    for name, step in record.steps.items():
        if step.status in (StepStatus.RUNNING, StepStatus.FAILED):
            return name
    return None


def recover(
    states: StateStore,
    found: Versioned[StateRecord],
    *,
    queues: QueueFactory,
    clock: Clock,
    settings: Settings,
) -> Recovery:
    """Recover one expired record with a conditional write on the ETag it was read with.

    Returns:
        What was done. ``LOST_RACE`` when the record moved since it was read (someone else decided).
    """
    record = found.item
    now = clock.now()
    if (
        record.process_state is not ProcessState.PROCESSING
        or record.complete_by is None
        or record.complete_by >= now
    ):
        return Recovery.SKIPPED
    updated = record.model_copy(deep=True)
    updated.failure_count = record.failure_count + 1
    step = _running_step(record)
    expired_by = record.locked_by
    # A failure the orchestration recorded (record_step_failure sets completeBy to its time) is kept;
    # anything else is a deadline that passed.
    recorded_failure = record.last_error is not None and record.last_error.at == record.complete_by
    if not recorded_failure:
        updated.last_error = LastError(
            kind=ErrorKind.TIMEOUT.value,
            message=f"completeBy {record.complete_by.isoformat()} passed (attempt {record.attempt})",
            step=step,
            code="complete_by_expired",
            at=now,
        )
    give_up = updated.failure_count >= settings.SUPERVISOR_MAX_FAILURES or record.retry_budget.remaining <= 0
    updated.locked_by = None
    updated.complete_by = None
    updated.updated_at = now
    if give_up:
        updated.process_state = ProcessState.ERROR
        updated.next_attempt_at = None
    else:
        updated.process_state = ProcessState.PENDING
        updated.next_attempt_at = now + timedelta(seconds=backoff_s(updated.failure_count, settings))
    try:
        states.replace(updated, etag=found.etag)
    except ConcurrencyConflict:
        return Recovery.LOST_RACE

    fields = {
        "order_id": record.order_id,
        "instance_id": expired_by,
        "attempt": record.attempt,
        "failure_count": updated.failure_count,
    }
    if not give_up:
        telemetry.event("recovery", step=step, next_attempt_at=_iso(updated.next_attempt_at), **fields)
        return Recovery.REQUEUED
    telemetry.alert(
        "order_gave_up", step=step, reason=updated.last_error.code if updated.last_error else None, **fields
    )
    reply = StatusReply(
        order_id=record.order_id,
        status=OrderStatus.FAILED,
        reason="retry_budget_exhausted" if record.retry_budget.remaining <= 0 else "too_many_failures",
        detail=(updated.last_error.message if updated.last_error else None),
        at=now,
    )
    queues.queue(record.reply_to).send(
        reply.to_json(),
        message_id=reply_message_id(record.order_id, OrderStatus.FAILED),
        correlation_id=record.order_id,
    )
    return Recovery.GAVE_UP


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def run_sweep(*, states: StateStore, queues: QueueFactory, clock: Clock, settings: Settings) -> SweepReport:
    """One bounded sweep over ``Processing`` records whose ``completeBy`` has passed.

    Reads pages of ``SUPERVISOR_PAGE_SIZE`` until the continuation token is null, ``SUPERVISOR_MAX_RECORDS``
    records were examined, or a token repeats or is rejected (then the next sweep starts over).

    Returns:
        A :class:`SweepReport`.
    """
    report = SweepReport()
    query = StateQuery(process_states=(ProcessState.PROCESSING,), complete_by_before=clock.now())
    continuation: str | None = None
    seen_tokens: set[str] = set()
    while report.scanned < settings.SUPERVISOR_MAX_RECORDS:
        try:
            page = states.query(
                query, max_item_count=settings.SUPERVISOR_PAGE_SIZE, continuation=continuation
            )
        except InvalidContinuation:
            report.restarted_scan = True
            break
        report.pages += 1
        for found in page.items:
            report.scanned += 1
            outcome = recover(states, found, queues=queues, clock=clock, settings=settings)
            if outcome is Recovery.REQUEUED:
                report.requeued.append(found.item.order_id)
            elif outcome is Recovery.GAVE_UP:
                report.gave_up.append(found.item.order_id)
            elif outcome is Recovery.LOST_RACE:
                report.lost_races += 1
            else:
                report.skipped += 1
        continuation = page.continuation
        if continuation is None:
            break
        if continuation in seen_tokens:
            logger.warning("continuation token repeated; ending the sweep, the next one starts over")
            report.restarted_scan = True
            break
        seen_tokens.add(continuation)
    if report.requeued or report.gave_up:
        logger.info(
            "supervisor sweep: scanned=%s requeued=%s gave_up=%s lost_races=%s",
            report.scanned,
            len(report.requeued),
            len(report.gave_up),
            report.lost_races,
        )
    return report

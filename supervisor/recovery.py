"""The supervisor's recovery of one record whose ``completeBy`` passed (docs/design.md §3.4, §3.5).

:func:`recover` makes one conditional write on the ETag the sweep read (:mod:`supervisor.sweep` finds the
records): the transitions are :mod:`orderflow.protocol.transitions.supervision` (re-queue with backoff,
give up to compensation, hold for the poison guard, hand a compensation on or fail it), written with
:func:`orderflow.protocol.conditional.update`; this module adds the backoff policy, the poison guard's
questions, the alerts and the reply a failed compensation owes. Several supervisors may recover at once:
the ETag makes at most one win each record, and the loser skips.
"""

from __future__ import annotations

import logging
from datetime import datetime
from enum import StrEnum

from orderflow import telemetry
from orderflow.clock import Clock, earliest
from orderflow.errors import ConcurrencyConflict
from orderflow.protocol.conditional import Note, update
from orderflow.protocol.transitions import supervision
from orderflow.queues.base import QueueFactory
from orderflow.records import LastError, ProcessState, StateRecord
from orderflow.replies import deliver_reply
from orderflow.settings import Supervisor
from orderflow.stores.base import StateQuery, StateStore, Versioned
from orderflow.timeline import Actor
from supervisor.poison import POISON_GUARD, Failure, VersionFailures, held_error, repeated_failure

logger = logging.getLogger(__name__)


class Recovery(StrEnum):
    """What the supervisor did with one record."""

    REQUEUED = "requeued"
    HELD = "held"
    GAVE_UP = "gave_up"
    SKIPPED = "skipped"
    LOST_RACE = "lost_race"


SWEPT_STATES = (ProcessState.PROCESSING, ProcessState.AWAITING_REVIEW, ProcessState.COMPENSATING)
"""States whose expired ``completeBy`` the supervisor acts on: an attempt running steps, waiting for a
review (past the review deadline: its attempt died), or undoing them. An expired ``AwaitingReview`` is
recovered like ``Processing``; the next attempt finds the review and its decision in the record."""


def expired_query(cutoff: datetime) -> StateQuery:
    """The query of a scan: ``Processing`` or ``Compensating`` records whose ``completeBy`` is before
    ``cutoff``."""
    return StateQuery(process_states=SWEPT_STATES, complete_by_before=cutoff, not_suspended=True)


def overdue_cutoff(clock: Clock) -> datetime:
    """The latest ``completeBy`` (UTC) the supervisor acts on now: the store's time at its earliest
    (:func:`orderflow.clock.earliest`), so every deadline before it has certainly passed by the store's
    clock, whatever this host's own clock says."""
    return earliest(clock)


def is_overdue(complete_by: datetime, clock: Clock) -> bool:
    """Whether a record with this ``completeBy`` is the supervisor's to act on (:func:`overdue_cutoff`)."""
    return complete_by < overdue_cutoff(clock)


def backoff_s(failure_count: int, supervisor: Supervisor) -> float:
    """Seconds before a recovered order may be claimed again: initial x 2^(n-1), capped."""
    delay = supervisor.SUPERVISOR_BACKOFF_INITIAL_S * 2 ** max(0, failure_count - 1)
    return float(min(supervisor.SUPERVISOR_BACKOFF_MAX_S, delay))


def is_extended(failure_count: int, supervisor: Supervisor) -> bool:
    """Whether a record re-queued with this ``failureCount`` waits the extended backoff."""
    return failure_count >= supervisor.SUPERVISOR_EXTENDED_BACKOFF_AFTER


def requeue_delay_s(failure_count: int, supervisor: Supervisor) -> float:
    """Seconds from recovery to ``nextAttemptAt``: :func:`backoff_s`, or the extended backoff.

    Args:
        failure_count: The record's ``failureCount`` after this recovery (1 for the first).
        supervisor: The ``SUPERVISOR_BACKOFF_*`` and ``SUPERVISOR_EXTENDED_BACKOFF_*`` settings.
    """
    if is_extended(failure_count, supervisor):
        return float(supervisor.SUPERVISOR_EXTENDED_BACKOFF_S)
    return backoff_s(failure_count, supervisor)


def recover(
    states: StateStore,
    found: Versioned[StateRecord],
    *,
    queues: QueueFactory,
    clock: Clock,
    supervisor: Supervisor,
    host_id: str,
    failures: VersionFailures | None = None,
) -> Recovery:
    """Recover one expired record with a conditional write on the ETag it was read with.

    ``Processing``: re-queue (``Pending``, backoff), or give up forward progress: ``Compensating``,
    unlocked and ready, so a starter claims an attempt that undoes what was done (docs/design.md §4).
    ``Compensating``: unlock it for another attempt to resume the undo (``compensationFailures`` counts
    these), or, past ``SUPERVISOR_MAX_FAILURES``, ``CompensationFailed`` with an alert and a reply.
    A ``Processing`` order whose last ``POISON_FAILURES`` attempts failed the same way is held instead of
    re-queued (:mod:`supervisor.poison`); ``failures``, the supervisor's window of failures by workflow
    version, is told of each failure written (None: no window). ``host_id`` names this supervisor in
    the records' timelines.

    Returns:
        What was done. ``LOST_RACE`` when the record moved since it was read (someone else decided).

    Raises:
        TransientError: the store or the reply queue is unavailable.
        NotFound: the record was deleted since it was read.
    """
    record = found.item
    now = clock.now()
    complete_by = record.complete_by
    if (
        record.process_state not in SWEPT_STATES
        or complete_by is None
        or not is_overdue(complete_by, clock)
        or record.suspended_at is not None  # an operator holds it: recovered after the resume
    ):
        return Recovery.SKIPPED
    if record.process_state is ProcessState.COMPENSATING:
        return _recover_compensation(
            states, found, queues=queues, clock=clock, supervisor=supervisor, host_id=host_id
        )
    actor = Actor("supervisor", host_id)
    decided: list[supervision.Recovered] = []

    def decide(current: StateRecord) -> StateRecord:
        decided[:] = [
            supervision.recover(
                current,
                complete_by=complete_by,
                now=now,
                max_failures=supervisor.SUPERVISOR_MAX_FAILURES,
                requeue_delay_s=lambda failure_count: requeue_delay_s(failure_count, supervisor),
                poisoned=_poison_guard(now, supervisor, failures),
                hold_by=POISON_GUARD,
            )
        ]
        return decided[0].record

    give_up = supervision.gives_up(record, supervisor.SUPERVISOR_MAX_FAILURES)
    try:
        written = update(
            states,
            record.order_id,
            decide,
            clock=clock,
            actor=Note(actor, action="give_up" if give_up else "recover"),
            found=found,
            attempts=1,
            at=now,
        ).written
    except ConcurrencyConflict:
        return Recovery.LOST_RACE
    recovered = decided[0]
    failure = _failure_of(record, recovered.cause)
    if failures is not None and failure is not None:
        failures.note(failure, record.order_id, now)
    stored_at = written.stored_at if written else None
    return _announce_recovery(record, recovered, failure, supervisor, stored_at=stored_at)


def _poison_guard(
    now: datetime, supervisor: Supervisor, failures: VersionFailures | None
) -> supervision.Poisoned:
    """The poison guard as the recovery asks it (:data:`orderflow.protocol.transitions.supervision.Poisoned`):
    the held ``lastError`` when the order's last ``POISON_FAILURES`` attempts failed the same way and that
    failure is not systemic (:mod:`supervisor.poison`)."""

    def poisoned(updated: StateRecord, cause: LastError) -> LastError | None:
        failure = _failure_of(updated, cause)
        if failure is None or not _poisoned(updated, failure, now, supervisor, failures):
            return None
        return held_error(cause, failure.step, failure.code, supervisor.POISON_FAILURES, now)

    return poisoned


def _failure_of(record: StateRecord, cause: LastError | None) -> Failure | None:
    """The failure the supervisor acts on, by workflow version, step and code (None without both)."""
    if cause is None or cause.step is None or cause.code is None:
        return None
    return Failure(record.workflow_version, cause.step, cause.code)


def _poisoned(
    updated: StateRecord,
    failure: Failure | None,
    now: datetime,
    supervisor: Supervisor,
    failures: VersionFailures | None,
) -> bool:
    """Whether the poison guard holds the order: its last ``POISON_FAILURES`` attempts (this one ended
    in ``updated``) failed the same way, and that failure is not systemic (:mod:`supervisor.poison`)."""
    if failure is None or repeated_failure(updated.attempt_history, supervisor.POISON_FAILURES) is None:
        return False
    return failures is None or not failures.systemic(failure, now)


def _announce_recovery(
    record: StateRecord,
    recovered: supervision.Recovered,
    failure: Failure | None,
    supervisor: Supervisor,
    *,
    stored_at: datetime | None,
) -> Recovery:
    """Log a recovery that was written (an alert for an order given up) and say which it was. The
    ``recovery`` event names the expired ``completeBy`` and the store's own stamp of the recovery write
    (``stored_at``, whole seconds), so that the one can be checked against the other on the store's clock."""
    updated = recovered.record
    step = supervision.running_step(record)
    fields = {
        "order_id": record.order_id,
        "instance_id": record.locked_by,
        "attempt": record.attempt,
        "failure_count": updated.failure_count,
    }
    if recovered.held:
        error = updated.last_error
        telemetry.alert(
            "poison_order",
            step=error.step if error else None,
            code=failure.code if failure is not None else None,
            **fields,
        )
        return Recovery.HELD
    if not recovered.give_up:
        telemetry.event(
            "recovery",
            step=step,
            cancelled=recovered.cancelled,
            next_attempt_at=_iso(updated.next_attempt_at),
            extended_backoff=is_extended(updated.failure_count, supervisor),
            complete_by=_iso(record.complete_by),
            stored_at=_iso(stored_at),
            **fields,
        )
        return Recovery.REQUEUED
    telemetry.alert(
        "order_gave_up", step=step, reason=updated.last_error.code if updated.last_error else None, **fields
    )
    return Recovery.GAVE_UP


def _recover_compensation(
    states: StateStore,
    found: Versioned[StateRecord],
    *,
    queues: QueueFactory,
    clock: Clock,
    supervisor: Supervisor,
    host_id: str,
) -> Recovery:
    """Recover an expired ``Compensating`` record: unlock it for another attempt, or fail it."""
    record = found.item
    now = clock.now()
    give_up = record.compensation_failures + 1 >= supervisor.SUPERVISOR_MAX_FAILURES
    action = "give_up" if give_up else "recover"
    decided: list[StateRecord] = []

    def decide(current: StateRecord) -> StateRecord:
        decided[:] = [
            supervision.recover_compensation(
                current,
                now=now,
                max_failures=supervisor.SUPERVISOR_MAX_FAILURES,
                requeue_delay_s=lambda failures: requeue_delay_s(failures, supervisor),
            )
        ]
        return decided[0]

    try:
        written = update(
            states,
            record.order_id,
            decide,
            clock=clock,
            actor=Note(Actor("supervisor", host_id), action=action),
            found=found,
            attempts=1,
            at=now,
        ).written
    except ConcurrencyConflict:
        return Recovery.LOST_RACE
    updated = decided[0]
    fields = {
        "order_id": record.order_id,
        "instance_id": record.locked_by,
        "attempt": record.attempt,
        "compensation_failures": updated.compensation_failures,
    }
    if not give_up:
        telemetry.event("recovery", step=supervision.undoing_step(record), compensating=True, **fields)
        return Recovery.REQUEUED
    error = updated.compensation_error
    telemetry.alert(
        "compensation_failed",
        step=error.step if error else None,
        code=error.code if error else None,
        cause=record.last_error.code if record.last_error else None,
        **fields,
    )
    owed = updated.pending_reply
    assert owed is not None and written is not None  # every give-up writes, owing a reply
    try:
        deliver_reply(states, queues, clock, written.item, owed, etag=written.etag)
    except Exception:
        # The write stands; the relay re-sends the owed reply after its grace period.
        logger.warning("the reply of order %s is left to the relay", record.order_id, exc_info=True)
    return Recovery.GAVE_UP


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None

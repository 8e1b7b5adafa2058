"""The supervisor's transitions on an attempt whose ``completeBy`` passed (docs/design.md §3.5): re-queue
it, give forward progress up, hold it for the poison guard, hand a compensation to another attempt, or
fail the compensation.

Each changes a private copy of the record in place: the attempt's tenure is over (the caller closed it
with :meth:`StateRecord.end_attempt`), so the record is unlocked and without a deadline.
"""

from __future__ import annotations

from datetime import datetime

from orderflow.records import PendingReply, ProcessState, StateRecord


def _unlock(record: StateRecord) -> None:
    record.locked_by = None
    record.complete_by = None


def requeue(record: StateRecord, *, next_attempt_at: datetime) -> StateRecord:
    """``Pending``, unlocked, for the starter to claim a new attempt at ``next_attempt_at`` (UTC)."""
    _unlock(record)
    record.process_state = ProcessState.PENDING
    record.next_attempt_at = next_attempt_at
    return record


def give_up(record: StateRecord, *, now: datetime) -> StateRecord:
    """Forward progress is over: ``Compensating``, unlocked and ready at ``now``, so a starter claims an
    attempt that undoes what was done (docs/design.md §4)."""
    _unlock(record)
    record.process_state = ProcessState.COMPENSATING
    record.next_attempt_at = now
    return record


def hold(record: StateRecord, *, now: datetime, by: str) -> StateRecord:
    """Held by the poison guard ``by``: ``Pending``, unlocked, suspended so no starter claims it, and
    ready at once when an operator resumes it."""
    _unlock(record)
    record.process_state = ProcessState.PENDING
    record.next_attempt_at = now
    record.suspended_at, record.suspended_by = now, by
    return record


def requeue_compensation(record: StateRecord, *, next_attempt_at: datetime) -> StateRecord:
    """Still ``Compensating``, unlocked, for another attempt to resume the undo at ``next_attempt_at``."""
    _unlock(record)
    record.next_attempt_at = next_attempt_at
    return record


def fail_compensation(record: StateRecord, *, owed: PendingReply) -> StateRecord:
    """``CompensationFailed``, unlocked, owing the client ``owed``: a person takes over."""
    _unlock(record)
    record.process_state = ProcessState.COMPENSATION_FAILED
    record.next_attempt_at = None
    record.pending_reply = owed
    return record

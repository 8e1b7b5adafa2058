"""The supervisor's transitions on an attempt whose ``completeBy`` passed (docs/design.md §3.5): re-queue
it, give forward progress up, hold it for the poison guard, hand a compensation to another attempt, or
fail the compensation.

Each changes a private copy of the record in place: the attempt's tenure is over (the caller closed it
with :meth:`StateRecord.end_attempt`), so the record is unlocked and without a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from orderflow.errors import ErrorKind
from orderflow.messages import OrderStatus
from orderflow.records import LastError, PendingReply, ProcessState, StateRecord, StepStatus


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


class Recovered(NamedTuple):
    """An expired ``Processing`` record as :func:`recover` writes it, and why."""

    record: StateRecord
    give_up: bool
    """Forward progress is over (too many failures, or no retry budget left)."""
    cancelled: bool
    """The client cancelled: no new forward attempt either way."""
    held: bool
    """The poison guard holds the order (``Pending`` until an operator acts)."""
    cause: LastError | None
    """How the attempt failed: the failure it recorded, or its deadline passing."""


Poisoned = Callable[[StateRecord, LastError], LastError | None]
"""The poison guard: given the record whose attempt just ended (its tenure closed) and how it failed, the
``lastError`` of an order it holds, or None when it does not hold it."""


def gives_up(record: StateRecord, max_failures: int) -> bool:
    """Whether recovering ``record`` gives forward progress up: its ``failureCount`` reaches
    ``max_failures`` with this failure, or no retry budget is left."""
    return record.failure_count + 1 >= max_failures or record.retry_budget.remaining <= 0


def recover(
    record: StateRecord,
    *,
    complete_by: datetime,
    now: datetime,
    max_failures: int,
    requeue_delay_s: Callable[[int], float],
    poisoned: Poisoned,
    hold_by: str,
) -> Recovered:
    """``record``, whose ``completeBy`` passed, with its attempt's tenure ended and either re-queued
    (``Pending``, ready ``requeue_delay_s(failureCount)`` seconds from ``now``), held by the poison guard
    ``hold_by``, or given up (``Compensating`` and ready): a private copy, ``record`` is left as it is."""
    updated = record.copied()
    updated.failure_count = record.failure_count + 1
    step = running_step(record)
    # A failure the orchestration recorded (record_step_failure sets completeBy to its time) is kept;
    # anything else is a deadline that passed.
    if record.last_error is None or record.last_error.at != complete_by:
        updated.last_error = LastError(
            kind=ErrorKind.TIMEOUT.value,
            message=f"completeBy {complete_by.isoformat()} passed (attempt {record.attempt})",
            step=step,
            code="complete_by_expired",
            at=now,
        )
    out_of_budget = record.retry_budget.remaining <= 0
    over = gives_up(record, max_failures)
    # The client cancelled: no new forward attempt; the next one undoes what was done.
    cancelled = record.cancel_requested_at is not None
    cause = updated.last_error
    updated.end_attempt(now, "gave_up" if over else "recovered", expired_complete_by=complete_by, error=cause)
    held = None if over or cancelled or cause is None else poisoned(updated, cause)
    updated.updated_at = now
    if over and not cancelled:
        # Forward progress is over: the next attempt compensates, and its outcome is the client's reply.
        updated.last_error = given_up_error(updated.last_error, out_of_budget, step, now)
    if over or cancelled:
        if cancelled and record.last_error is not None:
            updated.last_error = record.last_error  # the client's cancel, not the expiry
        give_up(updated, now=now)
    elif held is not None:
        hold(updated, now=now, by=hold_by)  # no starter claims it meanwhile
        updated.last_error = held
    else:
        delay = requeue_delay_s(updated.failure_count)
        requeue(updated, next_attempt_at=now + timedelta(seconds=delay))
    return Recovered(updated, over, cancelled, held is not None, cause)


def given_up_error(
    cause: LastError | None, out_of_budget: bool, step: str | None, now: datetime
) -> LastError:
    """``lastError`` of an order given up: why (``retry_budget_exhausted``, ``too_many_failures``) and
    the failure that led there."""
    return LastError(
        kind=ErrorKind.BUDGET.value if out_of_budget else (cause.kind if cause else ErrorKind.TIMEOUT.value),
        code="retry_budget_exhausted" if out_of_budget else "too_many_failures",
        message=(cause.message if cause else "")[:500],
        step=cause.step if cause else step,
        at=now,
    )


def recover_compensation(
    record: StateRecord, *, now: datetime, max_failures: int, requeue_delay_s: Callable[[int], float]
) -> StateRecord:
    """``record`` (a private copy), whose undo's ``completeBy`` passed, unlocked for another attempt to
    resume the undo ``requeue_delay_s(compensationFailures)`` seconds from ``now``, or, at
    ``max_failures``, ``CompensationFailed`` owing a reply."""
    complete_by = record.complete_by
    record.compensation_failures += 1
    failed = record.compensation_failures >= max_failures
    recorded = record.compensation_error is not None and record.compensation_error.at == complete_by
    if not recorded:
        record.compensation_error = LastError(
            kind=ErrorKind.TIMEOUT.value,
            message=f"completeBy {_iso(complete_by)} passed (attempt {record.attempt})",
            step=undoing_step(record),
            code="complete_by_expired",
            at=now,
        )
    record.end_attempt(now, "gave_up" if failed else "recovered", expired_complete_by=complete_by)
    record.updated_at = now
    if not failed:
        delay = requeue_delay_s(record.compensation_failures)
        return requeue_compensation(record, next_attempt_at=now + timedelta(seconds=delay))
    error = record.compensation_error
    owed = PendingReply(
        status=OrderStatus.COMPENSATION_FAILED.value,
        reason=error.code if error else "too_many_failures",
        detail=error.message if error else None,
    )
    return fail_compensation(record, owed=owed)


def running_step(record: StateRecord) -> str | None:
    """The step the attempt was running (or that failed), if any."""
    for name, step in record.steps.items():
        if step.status in (StepStatus.RUNNING, StepStatus.FAILED):
            return name
    return None


def undoing_step(record: StateRecord) -> str | None:
    """The step the compensation was undoing, if any."""
    for name, step in record.steps.items():
        if step.status is StepStatus.COMPENSATING:
            return name
    return None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None

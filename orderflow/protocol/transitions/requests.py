"""Transitions asked for from outside the order's owner: a client's cancel, a reviewer's decision, an
operator's compensate, resubmit, suspend and resume, and the grace an owner paused for review gets to
act on a request.

They apply only to a record no attempt runs (unlocked) or ask the owner to act; the request layer
(:mod:`orderflow.order_requests`) decides which applies and writes it with
:func:`orderflow.protocol.conditional.update`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orderflow.errors import IllegalTransition
from orderflow.records import PendingReply, ProcessState, ReviewDecision, StateRecord


def owner_acts_within(record: StateRecord, now: datetime, grace_s: float) -> None:
    """An order paused in ``AwaitingReview`` gets its ``completeBy`` within ``grace_s`` of ``now``, in
    place: its owner waits for a review decision, not for this request, and if it died the supervisor
    must not wait for the review deadline. Any other record is left as it is."""
    if record.process_state is ProcessState.AWAITING_REVIEW:
        bound = now + timedelta(seconds=grace_s)
        if record.complete_by is None or bound < record.complete_by:
            record.complete_by = bound


def cancel(record: StateRecord, *, owed: PendingReply) -> StateRecord:
    """An unclaimed order nothing was done for is ``Cancelled`` outright, owing the client ``owed``."""
    record.process_state = ProcessState.CANCELLED
    record.pending_reply = owed
    return record


def compensate_unclaimed(record: StateRecord, *, now: datetime) -> StateRecord:
    """An unclaimed ``Pending`` order asked to stop: ``Compensating`` and ready at ``now``, so an attempt
    claims it and undoes what earlier ones did (nothing, if none started a step)."""
    record.process_state = ProcessState.COMPENSATING
    record.next_attempt_at = now
    return record


def retry_compensation(record: StateRecord, *, now: datetime) -> StateRecord:
    """A ``CompensationFailed`` order an operator compensates again: ``Compensating``, unlocked and ready,
    its compensation failures forgotten; it resumes from the first entry not undone."""
    record.process_state = ProcessState.COMPENSATING
    record.locked_by = None
    record.complete_by = None
    record.next_attempt_at = now
    record.compensation_failures = 0
    record.compensation_error = None
    return record


def compensate_error(record: StateRecord, *, now: datetime) -> StateRecord:
    """An ``Error`` order an operator compensates: ``Compensating``, unlocked and ready, no longer
    suspended (its ``lastError`` stays the cause)."""
    record.process_state = ProcessState.COMPENSATING
    record.locked_by = record.complete_by = None
    record.next_attempt_at = now
    record.suspended_at = record.suspended_by = record.suspended_by_name = None
    return record


def new_attempt(record: StateRecord, now: datetime, retry_budget: int) -> StateRecord:
    """An ``Error`` order an operator resubmits: ``Pending``, unlocked and ready, ``failureCount`` 0 and
    the retry budget topped up to ``retry_budget`` calls left."""
    record.process_state = ProcessState.PENDING
    record.locked_by = None
    record.complete_by = None
    record.next_attempt_at = now
    record.failure_count = 0
    budget = record.retry_budget
    budget.limit = max(budget.limit, budget.spent + retry_budget)
    record.updated_at = now
    return record


def suspend(record: StateRecord, *, by: str, by_name: str | None, now: datetime) -> StateRecord:
    """Suspended by ``by``: a flag, not a state; nothing starts a step until it is resumed."""
    record.suspended_at = record.updated_at = now
    record.suspended_by = by
    record.suspended_by_name = by_name
    return record


def resume(record: StateRecord, *, now: datetime) -> StateRecord:
    """No longer suspended; a ``Pending`` record no attempt holds is ready at once."""
    record.suspended_at = record.suspended_by = record.suspended_by_name = None
    record.updated_at = now
    if record.process_state is ProcessState.PENDING and record.locked_by is None:
        record.next_attempt_at = now
    return record


def decide_review(
    record: StateRecord, *, decision: ReviewDecision, by: str, by_name: str | None, now: datetime
) -> StateRecord:
    """A reviewer's ``decision`` on the review ``record`` awaits, recorded for the waiting attempt to act
    on (its ``record_review`` moves the order back to ``Processing``).

    Raises:
        IllegalTransition: the record awaits no review.
    """
    review = record.review
    if review is None:
        raise IllegalTransition(f"order {record.order_id} awaits no review")
    review.decision = decision
    review.decided_by = by
    review.decided_by_name = by_name
    review.decided_at = record.updated_at = now
    return record

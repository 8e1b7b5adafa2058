"""An operator's decision to compensate an order, made through the operator API (docs/design.md §4).

Like a client's cancel, the decision is recorded with one ETag-conditional write and the order's owner
acts on it; unlike a cancel, the order ends ``Compensated`` (not ``Cancelled``), and an operator may also
retry a compensation that ended ``CompensationFailed`` once the cause is fixed:

- ``CompensationFailed``: back to ``Compensating``, unlocked and ready, with ``compensationFailures``
  and ``compensationError`` cleared; the next attempt resumes from the first entry not undone;
- ``Pending``: ``Compensating``, unlocked and ready: an attempt undoes what earlier ones did;
- ``Processing``, ``AwaitingReview``: the owner is asked to stop (as for a cancel) and compensates;
- ``Error`` with no irreversible step that may have taken effect (a step refused and left for an input
  correction): ``Compensating``, unlocked and ready, like ``Pending``;
- anything else (finished, ``Error`` past a point of no return, already compensating): refused.

Who decided is the verified principal: ``stopRequestedBy`` is ``operator:<audit id>``
(:attr:`orderflow.operator_auth.Principal.audit_id`), ``stopRequestedByName`` the display name, and the
operator's reason is kept in ``stopReason``. None of it reaches the client: the ``lastError`` of an order
stopped in flight, which its replies quote, says only that an operator stopped it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from operator_api.answers import Refused
from operator_api.decisions import apply_decision
from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.effects import irreversible_effects
from orderflow.operator_auth import Principal
from orderflow.protocol.transitions import requests
from orderflow.queues.base import QueueFactory
from orderflow.records import LastError, ProcessState, StateRecord, StepStatus
from orderflow.stores.base import StateStore
from orderflow.workflows import workflow_for

logger = logging.getLogger(__name__)

OPERATOR_DECISION = "operator_decision"
"""``lastError.code`` (kind ``cancelled``) of an order an operator stopped and compensated."""

OPERATOR_PREFIX = "operator:"
"""``stopRequestedBy`` of an operator's stop is this prefix and the operator's audit id."""


class CompensateAction(StrEnum):
    """What an accepted decision set in motion."""

    RETRIED = "CompensationRetried"
    """A ``CompensationFailed`` order compensates again, from the first entry not undone."""
    SCHEDULED = "CompensationScheduled"
    """A ``Pending`` order is ``Compensating``: the next attempt undoes what earlier ones did."""
    STOP_REQUESTED = "StopRequested"
    """The attempt running the order stops at its next write and compensates."""


class CompensateRefusal(StrEnum):
    """Why a decision was refused (the API's error code)."""

    NOT_COMPENSABLE = "NotCompensable"
    """The order is in a state no compensation starts from (finished, ``Error``, compensating)."""
    STOP_ALREADY_REQUESTED = "StopAlreadyRequested"
    """A client's cancel or another operator's stop is already recorded."""
    PAST_POINT_OF_NO_RETURN = "PastPointOfNoReturn"
    """An irreversible step completed, or may have: the order is not compensated."""


@dataclass(frozen=True)
class CompensateAccepted:
    """The decision was recorded: ``record`` (ETag ``etag``) is the record written; ``action`` what it set
    in motion."""

    record: StateRecord
    etag: str
    action: CompensateAction


CompensateOutcome = CompensateAccepted | Refused
"""What :func:`compensate_order` did: recorded, or refused (409; nothing written)."""


def _requested_by(record: StateRecord, principal: Principal, now: datetime) -> None:
    record.stop_requested_by = OPERATOR_PREFIX + principal.audit_id
    record.stop_requested_by_name = principal.display_name or None
    record.updated_at = now


def decide_compensation(
    record: StateRecord, principal: Principal, reason: str | None, now: datetime
) -> CompensateAction | tuple[CompensateRefusal, str]:
    """Apply the decision to ``record`` in place: what it set in motion, or why it was refused (a
    resubmit of a ``CompensationFailed`` order makes the same decision: :mod:`operator_api.resubmit`)."""
    state = record.process_state
    if state is ProcessState.COMPENSATION_FAILED:
        requests.retry_compensation(record, now=now)
        _requested_by(record, principal, now)
        return CompensateAction.RETRIED
    if state is ProcessState.ERROR:
        return _compensate_error(record, principal, reason, now)
    if state not in (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.AWAITING_REVIEW):
        return CompensateRefusal.NOT_COMPENSABLE, f"order is {state.value}"
    if record.cancel_requested_at is not None:
        return (
            CompensateRefusal.STOP_ALREADY_REQUESTED,
            f"a stop was already requested by {record.stop_requested_by}",
        )
    passed = irreversible_effects(record, workflow_for(record.workflow_version))
    if passed:
        return CompensateRefusal.PAST_POINT_OF_NO_RETURN, f"past the point of no return: {', '.join(passed)}"
    record.cancel_requested_at = now
    _requested_by(record, principal, now)
    # The operator's decision to undo it supersedes a suspension (the poison guard's, or an operator's).
    record.suspended_at = record.suspended_by = record.suspended_by_name = None
    record.stop_reason = reason[:500] if reason else None
    record.last_error = LastError(
        kind="cancelled",
        code=OPERATOR_DECISION,
        # Quoted to the client in its replies: who decided and why stay in the audit fields.
        message="an operator stopped the order",
        step=next((name for name, s in record.steps.items() if s.status is StepStatus.RUNNING), None),
        at=now,
    )
    if state is ProcessState.PENDING and record.locked_by is None:
        # An attempt claims it and undoes what earlier ones did (nothing, if none started a step).
        requests.compensate_unclaimed(record, now=now)
        return CompensateAction.SCHEDULED
    return CompensateAction.STOP_REQUESTED


def _compensate_error(
    record: StateRecord, principal: Principal, reason: str | None, now: datetime
) -> CompensateAction | tuple[CompensateRefusal, str]:
    """An ``Error`` order no irreversible step of which may have taken effect (one stopped for an input
    correction: its refused step applied nothing) is compensated: ``Compensating``, unlocked and ready,
    its ``lastError`` (the refusal) kept as the cause. Past a point of no return it is refused."""
    passed = irreversible_effects(record, workflow_for(record.workflow_version))
    if passed:
        return CompensateRefusal.PAST_POINT_OF_NO_RETURN, f"past the point of no return: {', '.join(passed)}"
    requests.compensate_error(record, now=now)
    record.stop_reason = reason[:500] if reason else None
    _requested_by(record, principal, now)
    return CompensateAction.SCHEDULED


def compensate_order(
    order_id: str,
    principal: Principal,
    *,
    reason: str | None,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    grace_s: float,
    if_match: str | None = None,
) -> CompensateOutcome:
    """Record ``principal``'s decision to compensate an order, or refuse it.

    Args:
        order_id: The order.
        principal: The verified operator.
        reason: Why, in the operator's words (kept in ``lastError`` for an order stopped in flight).
        states / queues / clock: Dependencies.
        grace_s: Seconds an owner paused for review has to act (``CLAIM_TIMEOUT_S``).
        if_match: The ETag the operator saw, if the call was conditional on it.

    Returns:
        :class:`CompensateAccepted`, or a :class:`~operator_api.answers.Refused` (409, with the ETag of
        the record as read).

    Raises:
        InvalidMessage: ``UnknownOrder``: there is no such order.
        StaleVersion: the record is no longer at ``if_match``; nothing written.
        TransientError, ConcurrencyConflict: the store is unavailable, or the owner kept winning the
            ETag race; retry.
    """

    def decide(record: StateRecord) -> tuple[CompensateAction | tuple[CompensateRefusal, str], bool]:
        decided = decide_compensation(record, principal, reason, clock.now())
        return decided, isinstance(decided, CompensateAction)

    applied = apply_decision(
        principal=principal,
        role="operator",
        states=states,
        queues=queues,
        clock=clock,
        order_id=order_id,
        decide=decide,
        what="compensate",
        grace_s=grace_s,
        if_match=if_match,
    )
    decided = applied.decision
    if not isinstance(decided, CompensateAction):
        refusal, detail = decided
        logger.warning(
            "compensation of %s by principal %s refused: %s", order_id, principal.audit_id, refusal.value
        )
        telemetry.event(
            "operator.refused", order_id=order_id, operator=principal.audit_id, reason=refusal.value
        )
        return Refused(409, refusal.value, detail, etag=applied.etag)
    telemetry.event(
        "operator.compensate", order_id=order_id, operator=principal.audit_id, detail=decided.value
    )
    return CompensateAccepted(applied.record, applied.etag, decided)

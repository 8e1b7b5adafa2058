"""An operator's decision to compensate an order, from the submission path (docs/design.md §4).

Like a client's cancel, the decision is recorded with one ETag-conditional write and the order's owner
acts on it; unlike a cancel, the order ends ``Compensated`` (not ``Cancelled``), and an operator may also
retry a compensation that ended ``CompensationFailed`` once the cause is fixed:

- ``CompensationFailed``: back to ``Compensating``, unlocked and ready, with ``compensationFailures``
  and ``compensationError`` cleared; the next attempt resumes from the first entry not undone;
- ``Pending``: ``Compensating``, unlocked and ready: an attempt undoes what earlier ones did;
- ``Processing``, ``AwaitingReview``: the owner is asked to stop (as for a cancel; ``stopRequestedBy``
  names the operator) and compensates;
- anything else (finished, ``Error`` past a point of no return, already compensating): refused, with the
  reason logged for the operator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.effects import PAST_POINT_OF_NO_RETURN, irreversible_effects
from orderflow.messages import CompensateOrder, parse_message
from orderflow.order_requests import apply_request
from orderflow.queues.base import QueueFactory
from orderflow.records import LastError, ProcessState, StateRecord, StepStatus
from orderflow.stores.base import StateStore
from orderflow.workflows import workflow_for

logger = logging.getLogger(__name__)

OPERATOR_DECISION = "operator_decision"
"""``lastError.code`` (kind ``cancelled``) of an order an operator stopped and compensated."""


@dataclass(frozen=True)
class OperatorResult:
    """What an operator's decision did: ``accepted`` (with what), or refused with why."""

    order_id: str
    accepted: bool
    detail: str


def _decide(record: StateRecord, request: CompensateOrder, clock: Clock) -> tuple[bool, str]:
    """Apply the decision to ``record`` in place; whether it was accepted, and what or why not."""
    now = clock.now()
    state = record.process_state
    if state is ProcessState.COMPENSATION_FAILED:
        record.process_state = ProcessState.COMPENSATING
        record.locked_by = None
        record.complete_by = None
        record.next_attempt_at = now
        record.compensation_failures = 0
        record.compensation_error = None
        record.stop_requested_by = f"operator:{request.operator}"
        record.updated_at = now
        return True, "compensation retried"
    if state not in (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.AWAITING_REVIEW):
        return False, f"order is {state.value}"
    if record.cancel_requested_at is not None:
        return False, "a stop was already requested"
    if irreversible_effects(record, workflow_for(record.workflow_version)):
        return False, PAST_POINT_OF_NO_RETURN
    record.cancel_requested_at = now
    record.stop_requested_by = f"operator:{request.operator}"
    record.updated_at = now
    record.last_error = LastError(
        kind="cancelled",
        code=OPERATOR_DECISION,
        message=(request.reason or f"{request.operator} decided to compensate the order")[:500],
        step=next((name for name, s in record.steps.items() if s.status is StepStatus.RUNNING), None),
        at=now,
    )
    if state is ProcessState.PENDING and record.locked_by is None:
        # An attempt claims it and undoes what earlier ones did (nothing, if none started a step).
        record.process_state = ProcessState.COMPENSATING
        record.next_attempt_at = now
        return True, "compensation scheduled"
    return True, "the owner stops and compensates"


def handle_compensate(
    body: str | bytes, *, states: StateStore, queues: QueueFactory, clock: Clock, grace_s: float = 30.0
) -> OperatorResult:
    """Record an operator's decision to compensate an order, or refuse it.

    Returns:
        What was done; every outcome means "complete the message" (a refusal is logged).

    Raises:
        InvalidMessage: the body is not a decision, or names no known order (dead-letter it).
        TransientError, ConcurrencyConflict: the store is unavailable, or the owner kept winning the
            ETag race; abandon and retry.
    """
    request = parse_message(CompensateOrder, body)

    def decide(record: StateRecord) -> tuple[str, bool]:
        accepted, detail = _decide(record, request, clock)
        return detail, accepted

    applied = apply_request(
        states=states,
        queues=queues,
        clock=clock,
        order_id=request.order_id,
        decide=decide,
        what="compensate",
        grace_s=grace_s,
    )
    detail = applied.decision
    if not applied.written:
        logger.warning("compensation of %s by %s refused: %s", request.order_id, request.operator, detail)
        telemetry.event(
            "operator.refused", order_id=request.order_id, operator=request.operator, reason=detail
        )
        return OperatorResult(request.order_id, accepted=False, detail=detail)
    telemetry.event(
        "operator.compensate", order_id=request.order_id, operator=request.operator, detail=detail
    )
    return OperatorResult(request.order_id, accepted=True, detail=detail)

"""An operator's resubmit: a new attempt for an ``Error`` order, a compensation retry for a
``CompensationFailed`` one; always conditional on the version the operator saw (docs/operator-api.md).

- ``Error``: back to ``Pending``, unlocked and ready, ``failureCount`` 0 and the retry budget topped up to
  ``RETRY_BUDGET`` calls left; the next claim starts a new attempt, which runs from the first step not
  completed (the failed one). Refused once compensation began on any step (its undo is recorded, so a
  forward attempt would contradict it).
- ``CompensationFailed``: the operator's compensate decision
  (:func:`operator_api.compensate.decide_compensation`): ``Compensating`` again, from the first entry not
  undone.

An ``Error`` order may be resubmitted with corrected input for its failed step
(:mod:`operator_api.corrections`), recorded in the same write.

The write is one ETag-conditional replace on the version named by ``If-Match``: of two operators who saw
the same version, one writes and the other is told the version is gone (412), so one new attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from operator_api.answers import Refused
from operator_api.compensate import CompensateAction, decide_compensation
from operator_api.corrections import INPUT_NOT_CORRECTABLE, INVALID_INPUT, CorrectionRefused, correct_input
from operator_api.decisions import apply_decision
from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import InvalidMessage, NotFound
from orderflow.operator_actions import NOT_RESUBMITTABLE, OperatorAction, action_refusal
from orderflow.operator_auth import Principal
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.protocol.transitions import requests
from orderflow.queues.base import QueueFactory
from orderflow.records import OrderDocument, ProcessState, StateRecord, StepStatus
from orderflow.stores.base import OrderStore, StateStore

NEW_ATTEMPT = "NewAttempt"
"""``outcome`` of a resubmitted ``Error`` order."""

_UNDO_STATUSES = frozenset({StepStatus.COMPENSATING, StepStatus.COMPENSATED, StepStatus.COMPENSATION_FAILED})


class ResubmitAction(StrEnum):
    """What an accepted resubmit set in motion."""

    NEW_ATTEMPT = NEW_ATTEMPT
    COMPENSATION_RETRIED = CompensateAction.RETRIED.value


REFUSAL_STATUS = {NOT_RESUBMITTABLE: 409, INPUT_NOT_CORRECTABLE: 409, INVALID_INPUT: 422}
"""The status of each resubmit refusal: the order's state (409), or a corrected value that is not one
(422: the body is well formed, its content is not)."""


@dataclass(frozen=True)
class ResubmitOutcome:
    """What :func:`resubmit_order` did: ``action`` (None when refused, with ``refusal`` the reason), and
    the record written (or read, when refused) with its ETag."""

    record: StateRecord
    etag: str
    action: ResubmitAction | None
    refusal: Refused | None = None


@dataclass(frozen=True)
class _Corrected:
    """A resubmit's corrected input and the order document it corrects."""

    input: dict[str, Any]
    order: OrderDocument


def _decide(
    record: StateRecord,
    principal: Principal,
    now: datetime,
    retry_budget: int,
    corrected: _Corrected | None = None,
) -> ResubmitAction | CorrectionRefused:
    state = record.process_state
    not_applicable = action_refusal(OperatorAction.RESUBMIT, state, suspended=record.suspended_at is not None)
    if not_applicable is not None:
        return CorrectionRefused(not_applicable.code, not_applicable.detail)
    if state is ProcessState.COMPENSATION_FAILED:
        if corrected is not None:
            return CorrectionRefused(INPUT_NOT_CORRECTABLE, "a compensation retry takes no input")
        decided = decide_compensation(record, principal, None, now)
        assert decided is CompensateAction.RETRIED  # what a CompensationFailed order always gets
        return ResubmitAction.COMPENSATION_RETRIED
    undoing = [name for name, step in record.steps.items() if step.status in _UNDO_STATUSES]
    if undoing:
        return CorrectionRefused(
            NOT_RESUBMITTABLE, f"compensation began ({', '.join(undoing)}): compensate it instead"
        )
    if corrected is not None:
        refused = correct_input(record, corrected.order, corrected.input, principal, now)
        if refused is not None:
            return refused
    requests.new_attempt(record, now, retry_budget)
    return ResubmitAction.NEW_ATTEMPT


def resubmit_order(
    order_id: str,
    principal: Principal,
    *,
    if_match: str,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    grace_s: float,
    retry_budget: int,
    corrected: dict[str, Any] | None = None,
    orders: OrderStore | None = None,
) -> ResubmitOutcome:
    """Resubmit an order on the version ``if_match`` names, or refuse.

    Args:
        order_id: The order key.
        principal: The verified operator (the timeline entry's ``by``).
        if_match: The ETag the operator saw.
        states / queues / clock: Dependencies.
        grace_s: ``CLAIM_TIMEOUT_S`` (for :func:`orderflow.order_requests.apply_request`).
        retry_budget: ``RETRY_BUDGET``: calls the new attempt has left at least.
        corrected: Corrected input for the failed step (wire name -> value, at least one), or None
            (:mod:`operator_api.corrections`); ``orders`` must be given with it.
        orders: The order store (the document the correction is laid over).

    Returns:
        The outcome; a refusal is 409 ``NotResubmittable`` or ``InputNotCorrectable``, or 422
        ``InvalidInput``, and nothing was written.

    Raises:
        StaleVersion: the record is not at ``if_match`` (412); nothing written.
        InvalidMessage: ``UnknownOrder``.
        TransientError, ConcurrencyConflict: retry.
    """
    correction = None
    if corrected is not None:
        assert orders is not None, "a correction is laid over the order document"
        found = _document(orders, order_id)
        correction = _Corrected(corrected, found)

    def decide(record: StateRecord) -> tuple[ResubmitAction | CorrectionRefused, bool]:
        decided = _decide(record, principal, clock.now(), retry_budget, correction)
        return decided, isinstance(decided, ResubmitAction)

    applied = apply_decision(
        principal=principal,
        role="operator",
        states=states,
        queues=queues,
        clock=clock,
        order_id=order_id,
        decide=decide,
        what="resubmit",
        grace_s=grace_s,
        if_match=if_match,
    )
    decided = applied.decision
    if not isinstance(decided, ResubmitAction):
        telemetry.event(
            "operator.refused", order_id=order_id, operator=principal.audit_id, reason=decided.code
        )
        refused = Refused(REFUSAL_STATUS[decided.code], decided.code, decided.detail, etag=applied.etag)
        return ResubmitOutcome(applied.record, applied.etag, None, refused)
    detail = (
        decided.value if corrected is None else f"{decided.value} corrected {','.join(sorted(corrected))}"
    )
    telemetry.event("operator.resubmit", order_id=order_id, operator=principal.audit_id, detail=detail)
    return ResubmitOutcome(applied.record, applied.etag, decided)


def _document(orders: OrderStore, order_id: str) -> OrderDocument:
    """The order's document.

    Raises:
        InvalidMessage: ``UnknownOrder`` (no document: the intake writes it before the record).
    """
    try:
        return orders.get(order_id)
    except NotFound:
        raise InvalidMessage(UNKNOWN_ORDER, f"no order {order_id!r} to resubmit") from None

"""What a state record holds per step and per attempt's outcome: step states, the compensation log, the
retry budget, the pending reply, reviews and input corrections."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from orderflow.records.model import (
    Model,
    StepStatus,
)
from orderflow.records.times import (
    UtcDatetime,
)


class LastError(Model):
    """The most recent failure recorded for an order: kind, short message, step, time (UTC)."""

    kind: str
    message: str
    step: str | None = None
    code: str | None = None
    at: UtcDatetime


class StepState(Model):
    """Progress of one workflow step.

    Attributes:
        status: The step's :class:`StepStatus`.
        attempts: Attempts (orchestration instances) that started this step.
        idempotency_key: ``{orderId}:{step}``, the same across attempts (docs/design.md §3.6);
            ``...:fallback`` on the fallback provider, ``...:correction-{n}`` once an operator corrected
            the step's input (:func:`orderflow.protocol.keys.corrected_key`).
        last_instance: Instance id of the attempt that last started the step (makes the start idempotent).
        result: Small summary of the remote service's answer (ids, amounts), never a document.
        reserved_calls: Calls reserved from the retry budget for the attempt running the step; the
            unused part is returned when its outcome is recorded, and kept if it never is.
        fallback: The step runs on its definition's fallback provider (the primary refused it); its
            ``idempotency_key`` is then ``{orderId}:{step}:fallback``.
        started_at / completed_at: UTC times of the last start and of completion.
    """

    status: StepStatus = StepStatus.NOT_STARTED
    attempts: int = 0
    idempotency_key: str
    last_instance: str | None = None
    reserved_calls: int = 0
    fallback: bool = False
    result: dict[str, str] | None = None
    started_at: UtcDatetime | None = None
    completed_at: UtcDatetime | None = None


class Hold(Model):
    """A short-term hold a step acquired (``holds``, by step name; docs/design.md §10).

    Attributes:
        hold_id: The service's id of the hold (a reservation id, an authorisation id).
        expires_at: When the service undoes the hold itself (UTC, the service's clock).
        commit: The operation that makes the hold permanent (``capture``).
        idempotency_key: The key of the call that acquired it: ``{orderId}:{step}``, or
            ``{orderId}:{step}:reacquire-1`` once re-acquired.
        acquired_at: When its acquisition was recorded (UTC).
        reacquired: Times it was re-acquired (at most once).
        reacquiring_by: The attempt that started its re-acquisition and has not recorded it yet, or None.
        committed_at: When the step that commits it completed (UTC): a committed hold no longer expires.
    """

    hold_id: str
    expires_at: UtcDatetime
    commit: str
    idempotency_key: str
    acquired_at: UtcDatetime
    reacquired: int = 0
    reacquiring_by: str | None = None
    committed_at: UtcDatetime | None = None


class CompensationEntry(Model):
    """One entry of the compensation log: what a completed step did and how to undo it.

    Attributes:
        step: The step that completed.
        action: What the step did (``reserve``, ``charge`` ...).
        undo: The undo operation (``release``, ``refund`` ...), or None for an irreversible step.
        undo_key: Idempotency key of the undo, ``{orderId}:{step}:undo``.
        data: Only what the undo needs (a reservation id, a charge id and amount), never card data.
        recorded_at: UTC time the entry was appended.
        status: Progress of the undo: ``Pending``, ``Compensating`` (an attempt started it),
            ``Compensated`` or ``CompensationFailed``.
        outcome_known: False for an entry appended when compensation began for a step whose outcome
            no attempt recorded (it died mid-step): the effect may or may not exist, and the undo is
            addressed by the step's idempotency key alone.
        undo_result: The undo's result summary once ``Compensated`` (``undone`` true or false, ids).
        undone_at: UTC time the undo was recorded.
    """

    step: str
    action: str
    undo: str | None
    undo_key: str
    data: dict[str, str] = Field(default_factory=dict)
    recorded_at: UtcDatetime
    status: str = "Pending"
    outcome_known: bool = True
    undo_result: dict[str, str] | None = None
    undone_at: UtcDatetime | None = None


class UndoStatus:
    """Values of :attr:`CompensationEntry.status`."""

    PENDING = "Pending"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    FAILED = "CompensationFailed"


class RetryBudget(Model):
    """End-to-end budget of calls to remote services for one order, across every attempt.

    Attributes:
        limit: Calls the order may make in total.
        spent: Calls made so far.
    """

    limit: int
    spent: int = 0

    @property
    def remaining(self) -> int:
        """Calls left (never negative)."""
        return max(0, self.limit - self.spent)


class PendingReply(Model):
    """A final status reply recorded in the same write as the outcome (a transactional outbox entry).

    Cleared once the reply was sent; the supervisor re-sends replies still pending after a grace
    period, so the client hears the outcome even if the sender died between the write and the send.
    """

    status: str
    reason: str | None = None
    detail: str | None = None


class ReviewDecision(StrEnum):
    """A person's decision on an order awaiting review."""

    APPROVE = "approve"
    REJECT = "reject"


class ReviewState(Model):
    """A review the order paused for (``review``): which step, until when, and the decision.

    Attributes:
        step: The step waiting for the decision.
        requested_at / deadline: UTC times; at the deadline the configured default applies.
        response_queue: The queue of the host running the waiting attempt: a decision is forwarded there
            and raised as the ``ReviewDecision`` external event.
        decision: ``approve`` or ``reject`` once decided (the first decision wins).
        decided_by: Who decided: the verified reviewer's audit id, ``<tenant id>/<object id>``
            (:attr:`orderflow.operator_auth.Principal.audit_id`), or ``deadline``. Records written before
            the operator API hold the name a reviewer typed.
        decided_by_name: The reviewer's display name from the token, for people to read; never an
            identity (None for ``deadline``).
        decided_at: UTC time of the decision.
    """

    step: str
    requested_at: UtcDatetime
    deadline: UtcDatetime
    response_queue: str
    decision: ReviewDecision | None = None
    decided_by: str | None = None
    decided_by_name: str | None = None
    decided_at: UtcDatetime | None = None


class InputCorrection(Model):
    """An operator's correction of the order's input for one step (``corrections``; docs/operator-api.md).

    The order document stays as the client sent it (its content hash answers duplicates); the step's next
    call is built from the document with every correction of that step laid over it, in number order.

    Attributes:
        number: 1, 2, ... across the order's corrections; part of the corrected step's idempotency key
            (:func:`orderflow.protocol.keys.corrected_key`), so the corrected call is a new call to the
            remote service.
        step: The step corrected (the failed one).
        input: The corrected fields by their wire names (``carrier``), with their validated values.
        idempotency_key: The step's idempotency key from this correction on.
        by / by_name: The verified operator's audit id and display name.
        at: When it was recorded (UTC), in the resubmit's write.
    """

    number: int
    step: str
    input: dict[str, Any]
    idempotency_key: str
    by: str
    by_name: str | None = None
    at: UtcDatetime

"""Client cancellation: a ``CancelOrder`` on the submission path (docs/design.md §4).

The client does not own the record, so it never writes the order's progress; it records its request,
with one ETag-conditional write, and the owner acts on it:

- ``Pending`` with no step ever started: nothing to undo, the order is ``Cancelled`` at once (reply
  ``Cancelled``);
- ``Pending`` after an earlier attempt did steps: ``Compensating``, unlocked and ready, so a starter
  claims an attempt that undoes them; the compensation then ends ``Cancelled``;
- ``Processing`` (or already ``Compensating``): ``cancelRequestedAt`` is set. The running attempt reads
  it in its next fenced write (``start_step``, ``finish_order``), starts nothing more and compensates;
  the compensation ends ``Cancelled``. Cancellation is cooperative: a step in flight finishes (or times
  out) first, and its effect is then undone;
- past a point of no return (an irreversible step completed, or may have: its outcome is unknown), or
  settled: refused, with a ``CancelRefused`` reply saying why. The ETag makes this exact: a cancel that
  races the write starting the irreversible step either lands first (the step is never started) or
  re-reads the record and sees the step.

A client names the order by its own order id, and the cancel acts on the order stored under the client's
key for it (``{clientId}:{orderId}``). A client may cancel its own orders only: a cancel that arrives on
one client's inbound queue for another client's order is answered exactly as a cancel of an order that
does not exist (``UnknownOrder``), so it learns nothing about it. Replies go to the reply queue the order
was submitted with, never to one named in the cancel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from orderflow import telemetry
from orderflow.clients import RegisteredClient
from orderflow.clock import Clock
from orderflow.contracts import CANCELLED_BY_CLIENT
from orderflow.effects import PAST_POINT_OF_NO_RETURN, irreversible_effects
from orderflow.messages import CancelOrder, OrderStatus, client_order_key, parse_message
from orderflow.order_requests import apply_request
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.protocol.transitions import requests
from orderflow.queues.base import QueueFactory
from orderflow.records import LastError, PendingReply, ProcessState, StateRecord, StepStatus
from orderflow.replies import send_reply
from orderflow.stores.base import StateStore
from orderflow.timeline import Actor
from orderflow.workflows import workflow_for

logger = logging.getLogger(__name__)

CLIENT = "client"
"""``stopRequestedBy`` of a client's cancel: the compensation then ends ``Cancelled``."""


class CancelOutcome(StrEnum):
    """What a cancel request did."""

    CANCELLED = "cancelled"
    """Nothing had been done: the order is Cancelled."""
    REQUESTED = "requested"
    """Recorded: the owner (or the next attempt) undoes what was done and the order ends Cancelled."""
    ALREADY_REQUESTED = "already_requested"
    REFUSED = "refused"


@dataclass(frozen=True)
class CancelResult:
    """Result of :func:`handle_cancel`: the order's key, what was done and, when refused, why."""

    order_id: str
    outcome: CancelOutcome
    reason: str | None = None


def _cause(request: CancelOrder, record: StateRecord, clock: Clock) -> LastError:
    return LastError(
        kind="cancelled",
        code=CANCELLED_BY_CLIENT,
        message=request.reason or "the client cancelled the order",
        step=next((name for name, s in record.steps.items() if s.status is StepStatus.RUNNING), None),
        at=clock.now(),
    )


def _decide(record: StateRecord, request: CancelOrder, clock: Clock) -> tuple[CancelOutcome, str | None]:
    """Apply the request to ``record`` in place; the outcome and, for a refusal, the reason."""
    if record.process_state in SETTLED_STATES:
        return CancelOutcome.REFUSED, f"order is {record.process_state.value}"
    if record.cancel_requested_at is not None:
        return CancelOutcome.ALREADY_REQUESTED, None
    if irreversible_effects(record, workflow_for(record.workflow_version)):
        return CancelOutcome.REFUSED, PAST_POINT_OF_NO_RETURN
    now = clock.now()
    record.cancel_requested_at = now
    record.stop_requested_by = CLIENT
    record.updated_at = now
    if record.process_state is ProcessState.PENDING and record.locked_by is None:
        record.last_error = _cause(request, record, clock)
        if not any(step.attempts for step in record.steps.values()):
            owed = PendingReply(
                status=OrderStatus.CANCELLED.value,
                reason=CANCELLED_BY_CLIENT,
                detail=record.last_error.message,
            )
            requests.cancel(record, owed=owed)
            return CancelOutcome.CANCELLED, None
        requests.compensate_unclaimed(record, now=now)
        return CancelOutcome.REQUESTED, None
    if record.process_state is not ProcessState.COMPENSATING:
        # The owner records the cause when it stops; keep what a compensation already records.
        record.last_error = _cause(request, record, clock)
    return CancelOutcome.REQUESTED, None


def handle_cancel(
    body: str | bytes,
    *,
    client: RegisteredClient,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    grace_s: float = 30.0,
) -> CancelResult:
    """Record a client's cancel request for one of its own orders, or refuse it, with one ETag-conditional
    write.

    Args:
        body: The raw :class:`CancelOrder` body.
        client: The registered client whose inbound queue the cancel arrived on.
        states / queues / clock: Dependencies.
        grace_s: For an order paused in ``AwaitingReview`` (its owner waits for a decision, not for
            this), seconds until the supervisor may hand it to compensation: its ``completeBy``.

    Returns:
        What was done (see :class:`CancelOutcome`); every outcome means "complete the message".

    Raises:
        InvalidMessage: the body is not a cancel request, or names no order of ``client``'s
            (``UnknownOrder``, the same for another client's order; dead-letter it).
        TransientError, ConcurrencyConflict: the store or queue is unavailable, or the owner kept
            winning the ETag race; abandon and retry.
    """
    request = parse_message(CancelOrder, body)
    key = client_order_key(client.client_id, request.order_id)

    def decide(record: StateRecord) -> tuple[tuple[CancelOutcome, str | None], bool]:
        outcome, reason = _decide(record, request, clock)
        return (outcome, reason), outcome in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED)

    applied = apply_request(
        states=states,
        queues=queues,
        clock=clock,
        order_id=key,
        decide=decide,
        what="cancel",
        grace_s=grace_s,
        actor=Actor("client", client.client_id),
        visible=lambda record: client.owns(record.client_id),
    )
    outcome, reason = applied.decision
    if outcome is CancelOutcome.REFUSED:
        refusal = PendingReply(status=OrderStatus.CANCEL_REFUSED.value, reason=reason)
        send_reply(queues, clock, applied.record, refusal)
        telemetry.event("cancel.refused", order_id=applied.record.order_id, reason=reason)
        return CancelResult(applied.record.order_id, outcome, reason)
    if applied.written is not None:
        telemetry.event("cancel.accepted", order_id=applied.record.order_id, outcome=outcome.value)
    return CancelResult(applied.record.order_id, outcome)

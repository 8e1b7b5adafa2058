"""Submission: turn an order message into the order document and its state record, idempotently.

The two writes go to separate resources with no shared transaction (the dual-write problem, docs/design.md
§2). Both are keyed by the order id and create-only, so a redelivery after a crash between them simply
finishes the job: the order document is accepted again when its content hash matches, the state record
create finds it exists. Conflicting content under a known order id is never written: it raises
:class:`ConflictingOrder` and the host dead-letters the message with that reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from orchestrators.definitions import CURRENT_WORKFLOW, WorkflowDefinition
from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import AlreadyExists, ConflictingOrder
from orderflow.messages import OrderStatus, StatusReply, SubmitOrder, parse_message, reply_message_id
from orderflow.queues.base import QueueFactory
from orderflow.records import (
    OrderDocument,
    OrderItem,
    RetryBudget,
    StateRecord,
    StepState,
    content_hash,
    idempotency_key,
)
from orderflow.settings import Settings
from orderflow.stores.base import OrderStore, StateStore

logger = logging.getLogger(__name__)


class SubmissionOutcome(StrEnum):
    """What a submission did."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class SubmissionResult:
    """Result of :func:`handle_submission`: the order id and whether this delivery created anything."""

    order_id: str
    outcome: SubmissionOutcome


def initial_state(
    order: SubmitOrder, definition: WorkflowDefinition, settings: Settings, clock: Clock
) -> StateRecord:
    """The state record of a new order: ``Pending``, unlocked, every step ``NotStarted``."""
    now = clock.now()
    return StateRecord(
        id=order.order_id,
        order_id=order.order_id,
        reply_to=order.reply_to,
        steps={
            step.name: StepState(idempotency_key=idempotency_key(order.order_id, step.name))
            for step in definition.steps
        },
        retry_budget=RetryBudget(limit=settings.RETRY_BUDGET),
        workflow_version=definition.version,
        created_at=now,
        updated_at=now,
    )


def order_document(order: SubmitOrder, clock: Clock) -> OrderDocument:
    """The immutable order document, with the content hash of everything the client sent."""
    return OrderDocument(
        id=order.order_id,
        order_id=order.order_id,
        customer_id=order.customer_id,
        customer_name=order.customer_name,
        currency=order.currency,
        amount=order.amount,
        items=tuple(OrderItem(sku=item.sku, quantity=item.quantity) for item in order.items),
        carrier=order.carrier,
        reply_to=order.reply_to,
        content_hash=content_hash(order.immutable_content()),
        received_at=clock.now(),
    )


def handle_submission(
    body: str | bytes,
    *,
    orders: OrderStore,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    settings: Settings,
    definition: WorkflowDefinition = CURRENT_WORKFLOW,
) -> SubmissionResult:
    """Validate an order message and record it, idempotently on the order id.

    Args:
        body: The raw message body.
        orders / states / queues / clock / settings: Dependencies.
        definition: The workflow new orders start with.

    Returns:
        ``accepted`` for a new order, ``duplicate`` for an identical redelivery; both mean "complete
        the message". A ``Received`` reply is sent in both cases (a redelivery may follow a crash that
        happened before the first reply was sent; the client de-duplicates by message id).

    Raises:
        InvalidMessage: the body is not a valid order; dead-letter with ``reason``.
        ConflictingOrder: the order id exists with different content; dead-letter, nothing is written.
        TransientError: a store or queue is unavailable; abandon and retry.
    """
    order = parse_message(SubmitOrder, body)
    document = order_document(order, clock)
    outcome = SubmissionOutcome.ACCEPTED
    try:
        orders.create(document)
    except AlreadyExists:
        existing = orders.get(order.order_id)
        if existing.content_hash != document.content_hash:
            telemetry.alert("conflicting_order", order_id=order.order_id)
            raise ConflictingOrder(
                f"order {order.order_id} exists with different content "
                f"(stored hash {existing.content_hash[:12]}, received {document.content_hash[:12]})"
            ) from None
        outcome = SubmissionOutcome.DUPLICATE
    try:
        states.create(initial_state(order, definition, settings, clock))
    except AlreadyExists:
        outcome = SubmissionOutcome.DUPLICATE

    reply = StatusReply(order_id=order.order_id, status=OrderStatus.RECEIVED, at=clock.now())
    queues.queue(order.reply_to).send(
        reply.to_json(),
        message_id=reply_message_id(order.order_id, OrderStatus.RECEIVED),
        correlation_id=order.order_id,
    )
    telemetry.event("order.received", order_id=order.order_id, outcome=outcome.value)
    return SubmissionResult(order.order_id, outcome)

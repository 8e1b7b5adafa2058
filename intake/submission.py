"""The submission path: every message on a client's inbound queue, and above all the order itself.

:func:`handle_intake_message` takes each message a client puts on its own inbound queue, with the
:class:`~orderflow.clients.RegisteredClient` that queue belongs to: the host says which queue it consumed,
and that is the sender's identity (docs/clients.md). Nothing in the body names the client; the reply
queue is the registry's, and a body naming any other is dead-lettered before anything is written.

A ``CancelOrder`` goes to :mod:`intake.cancellation`: it shares the queue (and its ordering) with the
order it cancels. A reviewer's decision or an operator's compensate is never taken here: those are calls
to the operator API (:mod:`operator_api`), and such a message is dead-lettered
``OperatorActionNotAccepted``. An order is recorded here: the order document and its state record,
idempotently.

The two writes go to separate resources with no shared transaction (the dual-write problem, docs/design.md
§2). Both are keyed by the order id and create-only, so a redelivery after a crash between them simply
finishes the job: the order document is accepted again when its content hash matches, the state record
create finds it exists. Conflicting content under a known order id is never written: it raises
:class:`ConflictingOrder` and the host dead-letters the message with that reason.

With admission control (:mod:`intake.admission`) a new order may instead be refused: nothing is
written, the client gets a ``Rejected`` reply saying why and when to retry, and the message is
completed. Only *new* orders are refused. The admission decision is in memory, so it comes first and an
admitted new order costs exactly what it did before (two creates, no read). Only a refusal pays one
point read of the order store, to tell a new order from one already known: a redelivery of an accepted
order is finished and acknowledged even when the system is full, and a conflicting one is still
dead-lettered. If that read fails, the error propagates (abandon, retry): an order that may already be
accepted is never answered ``Rejected``.

A new order is then claimed and its attempt started at once (``CLAIM_ON_SUBMIT``,
:mod:`intake.claim_on_submit`); a duplicate claims nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from intake.admission import Admission, AdmissionDecision
from intake.cancellation import CancelResult, handle_cancel
from intake.claim_on_submit import start_at_once
from intake.client_replies import check_reply_queue, final_status, send_status
from orderflow import telemetry, tracing
from orderflow.attempts import AttemptStarts
from orderflow.clients import RegisteredClient
from orderflow.clock import Clock
from orderflow.dependencies import OrderCache
from orderflow.errors import AlreadyExists, ConflictingOrder, NotFound
from orderflow.messages import (
    CANCEL_ORDER,
    OPERATOR_ACTIONS,
    ORDERS_QUEUE_TYPES,
    OrderStatus,
    StatusReply,
    SubmitOrder,
    client_order_key,
    message_type,
    parse_message,
    reply_message_id,
)
from orderflow.protocol.keys import idempotency_key
from orderflow.queues.base import QueueFactory
from orderflow.records import (
    OrderDocument,
    OrderItem,
    RetryBudget,
    StateRecord,
    StepState,
    client_order_id,
    content_hash,
)
from orderflow.replays import note_replayed_message
from orderflow.settings import Queues, Starter, Steps
from orderflow.stores.base import OrderStore, ReplayRecords, StateStore, Versioned
from orderflow.timeline import Actor, note
from orderflow.workflows import WorkflowDefinition, new_order_workflow

logger = logging.getLogger(__name__)


class IntakeOutcome(StrEnum):
    """What an intake message did: an order ``accepted``, ``duplicate`` or ``rejected``, or a client's cancel
    of a known order handled (``cancel``)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    CANCEL = "cancel"


@dataclass(frozen=True)
class IntakeResult:
    """Result of :func:`handle_intake_message`: the order the message was about and what it did.

    Attributes:
        order_id: The order's key, ``{clientId}:{orderId}`` (:func:`orderflow.records.order_key`).
        outcome: ``accepted``, ``duplicate``, ``rejected`` (admission control refused a new order) or
            ``cancel`` (a client's cancel request).
        reason: For ``rejected``, the admission reason (``InFlightCeiling`` ...); for ``cancel``, why it
            was refused; otherwise None.
        cancel: For ``cancel``, what the request did.
        started: Whether this call claimed the state record it created and started its attempt
            (``CLAIM_ON_SUBMIT``); False leaves a new record ``Pending`` for the starter's sweep.
    """

    order_id: str
    outcome: IntakeOutcome
    reason: str | None = None
    cancel: CancelResult | None = None
    started: bool = False


def initial_state(
    order: SubmitOrder,
    definition: WorkflowDefinition,
    steps: Steps,
    clock: Clock,
    client: RegisteredClient,
    *,
    key: str | None = None,
) -> StateRecord:
    """The state record of a new order: ``Pending``, unlocked, every step ``NotStarted``; its reply queue
    and ``clientId`` are ``client``'s. It is stored under ``key``: by default the client's
    :func:`~orderflow.messages.client_order_key`."""
    now = clock.now()
    key = key or client_order_key(client.client_id, order.order_id)
    return StateRecord(
        id=key,
        order_id=key,
        reply_to=client.reply_queue,
        client_id=client.client_id,
        steps={
            step.name: StepState(idempotency_key=idempotency_key(key, step.name)) for step in definition.steps
        },
        retry_budget=RetryBudget(limit=steps.RETRY_BUDGET),
        workflow_version=definition.version,
        created_at=now,
        updated_at=now,
    )


def order_document(
    order: SubmitOrder, clock: Clock, client: RegisteredClient, *, key: str | None = None
) -> OrderDocument:
    """The immutable order document, with the content hash of everything the client sent, and the
    ``clientId`` of ``client`` (whose reply queue the body's ``replyTo`` has been checked to be); stored
    under ``key`` as :func:`initial_state` is."""
    key = key or client_order_key(client.client_id, order.order_id)
    return OrderDocument(
        id=key,
        order_id=key,
        customer_id=order.customer_id,
        customer_name=order.customer_name,
        currency=order.currency,
        amount=order.amount,
        items=tuple(OrderItem(sku=item.sku, quantity=item.quantity) for item in order.items),
        carrier=order.carrier,
        reply_to=order.reply_to,
        content_hash=content_hash(order.immutable_content()),
        received_at=clock.now(),
        client_id=client.client_id,
    )


def handle_intake_message(
    body: str | bytes,
    *,
    client: RegisteredClient,
    reply_to: str | None = None,
    orders: OrderStore,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    steps: Steps,
    starter: Starter,
    queue_names: Queues,
    definition: WorkflowDefinition | None = None,
    admission: Admission | None = None,
    transport_traceparent: str | None = None,
    order_cache: OrderCache | None = None,
    message_id: str | None = None,
    replays: ReplayRecords | None = None,
    claim_on_submit: AttemptStarts | None = None,
) -> IntakeResult:
    """Handle one message of a client's inbound queue: validate an order and record it, idempotently on
    the client's order id, or hand a client's cancel of one of its own orders to its handler.

    A valid order is handled under an ``orderflow.submission`` span, the root of the order's trace (or
    a child of the client's span, when the message carries its trace context); the new state record
    keeps its ``traceparent`` for the claims and recoveries to join.

    The order is stored under its key, ``{clientId}:{orderId}``
    (:func:`orderflow.messages.client_order_key`), so another client's order with the same id is another
    order.

    A :class:`orderflow.messages.CancelOrder` body (``"type": "CancelOrder"``) is a cancel request for one
    of the client's own orders: :func:`intake.cancellation.handle_cancel` handles it (outcome ``cancel``;
    another client's order is answered exactly as an unknown one).

    Args:
        body: The raw message body.
        client: The registered client whose inbound queue the message arrived on (from the host, never
            from the body): its reply queue is the order's, its id the order's ``clientId``.
        reply_to: The message's transport reply-to property (Service Bus ``ReplyTo``), or None where the
            transport has none (Storage queues) or the sender set none. When given, it must be the
            client's reply queue too.
        orders / states / queues / clock: Dependencies.
        steps / starter / queue_names: The settings sections read: ``RETRY_BUDGET`` and
            ``WORKFLOW_VERSION``, a cancel's grace (``CLAIM_TIMEOUT_S``), orderflow's own queue names.
        definition: The workflow new orders start with; None for the ``WORKFLOW_VERSION`` setting's.
        admission: Admission control for new orders, or None to admit everything.
        transport_traceparent: The trace context the transport handed over with the message (an Azure
            trigger's), preferred over the body's ``traceparent``.
        order_cache: The process's order documents: an order this call creates is put there, so an
            activity of the same process reads it from memory, not from the order store. None: none.
        message_id: The message's id. One of a dead letter's replay (``<id>:replay:<digest>``) has the
            replay's entry put on the order's timeline once the order is on record, when ``replays``
            holds a record of that replay linked to this very order
            (:func:`orderflow.replays.note_replayed_message`).
        replays: The records of dead-letter replays; None: no replay's entry is written here.
        claim_on_submit: Where to start the attempt of a new order at once (the host's orchestration
            client, response queue and hooks): with ``CLAIM_ON_SUBMIT`` on, a new order's record is
            claimed and its attempt started right after the ``Received`` reply, by the starter's own
            conditional write (:func:`orderflow.attempts.claim_and_start`). None, or the setting off:
            the order waits ``Pending`` for the starter's sweep.

    Returns:
        The order's key and ``accepted`` for a new order, ``duplicate`` for an identical redelivery;
        both mean "complete the message". A ``Received`` reply is sent in both cases (a redelivery
        may follow a crash that happened before the first reply was sent; the client de-duplicates by
        message id), except that a resubmission of a settled order gets its final status again.
        ``rejected`` when admission control refused a new order: nothing was written, a ``Rejected``
        reply with the reason and ``retryAfterS`` was sent; complete the message too.
        ``cancel`` for a client's cancel of a known order: whatever its handler decided, complete the
        message.

    Raises:
        InvalidMessage: the body is not a valid order; dead-letter with ``reason``, one of
            :data:`orderflow.messages.SUBMISSION_REASONS` (``OperatorActionNotAccepted`` for a
            ``ReviewDecision`` or ``CompensateOrder``, before the rest of the body is read;
            ``UnknownMessageType`` for any other ``type`` but ``CancelOrder``; ``ReservedReplyQueue`` for a
            ``replyTo`` naming one of orderflow's own queues; ``ReplyToNotRegistered`` for any other
            queue than the client's registered reply queue; ``ReplyToMismatch`` for a transport
            ``ReplyTo`` other than it), or for a request about an order ``UnknownOrder`` (also for
            another client's order). Nothing is written.
        ConflictingOrder: the order id exists with different content; dead-letter, nothing is written
            (the sender gets a ``Rejected`` reply with reason ``ConflictingOrder``).
        TransientError: a store or queue is unavailable; abandon and retry (also when a replay's entry
            could not be written: the message taken in again writes it).
    """
    result = _take_in(
        body,
        client=client,
        reply_to=reply_to,
        orders=orders,
        states=states,
        queues=queues,
        clock=clock,
        steps=steps,
        starter=starter,
        queue_names=queue_names,
        definition=definition,
        admission=admission,
        transport_traceparent=transport_traceparent,
        order_cache=order_cache,
        claim_on_submit=claim_on_submit if starter.CLAIM_ON_SUBMIT else None,
    )
    if replays is not None and result.outcome is not IntakeOutcome.REJECTED:
        # After the order is on record: a replay that found no record left its entry to be written here.
        note_replayed_message(
            replays, states, queue=client.inbound_queue, message_id=message_id, order_id=result.order_id
        )
    return result


def _take_in(
    body: str | bytes,
    *,
    client: RegisteredClient,
    reply_to: str | None,
    orders: OrderStore,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    steps: Steps,
    starter: Starter,
    queue_names: Queues,
    definition: WorkflowDefinition | None,
    admission: Admission | None,
    transport_traceparent: str | None,
    order_cache: OrderCache | None,
    claim_on_submit: AttemptStarts | None,
) -> IntakeResult:
    """:func:`handle_intake_message` but for the replay's entry."""
    kind = message_type(
        body, known=ORDERS_QUEUE_TYPES, untyped=SubmitOrder, operator_actions=OPERATOR_ACTIONS
    )
    if kind == CANCEL_ORDER:
        # A cancel shares the submission path (and its ordering) with the order it cancels.
        cancelled = handle_cancel(
            body,
            client=client,
            states=states,
            queues=queues,
            clock=clock,
            grace_s=starter.CLAIM_TIMEOUT_S,
        )
        return IntakeResult(cancelled.order_id, IntakeOutcome.CANCEL, cancelled.reason, cancelled)
    # Validation first: bad input is dead-lettered with its reason whether or not the system is full.
    order = parse_message(SubmitOrder, body)
    check_reply_queue(order, client, queue_names, transport_reply_to=reply_to)
    attributes = {
        **tracing.order_attributes(
            client_order_key(client.client_id, order.order_id), client=client.client_id
        ),
        **tracing.messaging_attributes(tracing.messaging_system(queues), client.inbound_queue),
    }
    with tracing.span(
        tracing.SUBMISSION,
        kind=tracing.CONSUMER,
        parent=order.traceparent,
        transport_parent=transport_traceparent,
        attributes=attributes,
    ) as span:
        result, created = _submit(
            order,
            client=client,
            orders=orders,
            states=states,
            queues=queues,
            clock=clock,
            steps=steps,
            definition=definition or new_order_workflow(steps.WORKFLOW_VERSION),
            admission=admission,
            order_cache=order_cache,
        )
        if created is not None and claim_on_submit is not None:
            # After the Received reply: a client hears of its order before any step's reply.
            started = start_at_once(
                created,
                states=states,
                clock=clock,
                steps=steps,
                starter=starter,
                queue_names=queue_names,
                starts=claim_on_submit,
            )
            result = IntakeResult(result.order_id, result.outcome, started=started)
        tracing.mark_outcome(span, result.outcome.value)
        return result


def _submit(
    order: SubmitOrder,
    *,
    client: RegisteredClient,
    orders: OrderStore,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    steps: Steps,
    definition: WorkflowDefinition,
    admission: Admission | None,
    order_cache: OrderCache | None,
) -> tuple[IntakeResult, Versioned[StateRecord] | None]:
    """:func:`handle_intake_message` for a valid order whose ``replyTo`` has been checked; with the state
    record as this call created it (None: it created none)."""
    key = client_order_key(client.client_id, order.order_id)
    document = order_document(order, clock, client, key=key)
    existing: OrderDocument | None = None
    admitted = False
    if admission is not None:
        decision = admission.admit(key, client)
        admitted = decision.admitted
        if not decision.admitted:
            # Refusals alone pay this read; NotFound is the only answer that makes the order new.
            try:
                existing = orders.get(key)
            except NotFound:
                return _reject(order, key, decision, queues=queues, clock=clock), None
    try:
        outcome, created = _record(
            order,
            key,
            document,
            existing,
            orders=orders,
            states=states,
            clock=clock,
            steps=steps,
            definition=definition,
            client=client,
            order_cache=order_cache,
        )
    except ConflictingOrder as conflict:
        if admission is not None and admitted:
            admission.release(client)  # nothing was written: the place it took is nobody's
        # The sender is told too; the message itself is dead-lettered by the host.
        send_status(
            queues, clock, order, OrderStatus.REJECTED, reason=conflict.reason, detail=conflict.detail
        )
        raise

    if outcome is IntakeOutcome.DUPLICATE and admission is not None and admitted:
        # A resubmission is already counted (or settled): resending one order must not fill the ceiling.
        # (After a crash between the two creates the record is new here, and is counted at the next
        # refresh of the count instead: at most ADMISSION_REFRESH_S late.)
        admission.release(client)
    status, reason, detail = OrderStatus.RECEIVED, None, None
    if outcome is IntakeOutcome.DUPLICATE:
        # A client that resubmits a settled order (its reply was lost) gets the outcome, not "Received".
        settled = final_status(states.get(key).item)
        if settled is not None:
            status, reason, detail = settled
    send_status(queues, clock, order, status, reason=reason, detail=detail)
    telemetry.event("order.received", order_id=key, outcome=outcome.value)
    return IntakeResult(key, outcome), created


def _record(
    order: SubmitOrder,
    key: str,
    document: OrderDocument,
    existing: OrderDocument | None,
    *,
    orders: OrderStore,
    states: StateStore,
    clock: Clock,
    steps: Steps,
    definition: WorkflowDefinition,
    client: RegisteredClient,
    order_cache: OrderCache | None = None,
) -> tuple[IntakeOutcome, Versioned[StateRecord] | None]:
    """Write the order document and the state record under ``key``, create-only; ``existing`` if
    already read. A document this call creates is put in ``order_cache``.

    Returns:
        The outcome, and the state record with its first ETag when this call created it (else None).

    Raises:
        ConflictingOrder: the stored document's content hash differs, or it is another client's order;
            nothing is written. The description names no hash: the sender learns nothing of the stored
            order beyond that its id is taken.
    """
    outcome = IntakeOutcome.ACCEPTED
    if existing is None:
        try:
            orders.create(document)
        except AlreadyExists:
            existing = orders.get(key)
        else:
            if order_cache is not None:
                order_cache.put(document)
    if existing is not None:
        foreign = existing.client_id != client.client_id
        if foreign or existing.content_hash != document.content_hash:
            telemetry.alert("conflicting_order", order_id=key, client_id=client.client_id)
            raise ConflictingOrder(f"order {client_order_id(key)} exists with different content")
        outcome = IntakeOutcome.DUPLICATE
    try:
        # Also after a duplicate document: a crash between the two writes left the record missing.
        record = initial_state(order, definition, steps, clock, client, key=key)
        record.traceparent = tracing.current_traceparent()  # the submission span: the order's trace
        note(None, record, Actor("intake", record.client_id), action="submit")
        created = states.create(record)
    except AlreadyExists:
        return IntakeOutcome.DUPLICATE, None
    return outcome, created


def _reject(
    order: SubmitOrder, key: str, decision: AdmissionDecision, *, queues: QueueFactory, clock: Clock
) -> IntakeResult:
    """Tell the client its new order was refused; nothing is written to either store."""
    reason = decision.reason.value if decision.reason is not None else None
    reply = StatusReply(
        order_id=order.order_id,
        status=OrderStatus.REJECTED,
        reason=reason,
        detail=decision.detail,
        retry_after_s=decision.retry_after_s,
        at=clock.now(),
    )
    queues.queue(order.reply_to).send(
        reply.to_json(),
        message_id=reply_message_id(order.order_id, OrderStatus.REJECTED),
        correlation_id=order.order_id,
    )
    telemetry.event("order.rejected", order_id=key, reason=reason, retry_after_s=decision.retry_after_s)
    return IntakeResult(key, IntakeOutcome.REJECTED, reason)

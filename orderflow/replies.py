"""Final status replies, sent at least once through a transactional outbox on the state record.

The write that settles an order (``Processed``, ``Error`` ...) also records the reply it owes the
client (:class:`~orderflow.records.PendingReply`). The writer then sends the reply and clears the entry
with a conditional write. A process that dies between the two leaves the entry behind; the
supervisor's relay re-sends it after a grace period (:func:`resend_pending_replies`). Replies carry a
stable message id, so a re-send is a duplicate the client (and Service Bus duplicate detection)
recognises, never a second, different answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from orderflow import tracing
from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict, InvalidContinuation, NotFound
from orderflow.messages import OrderStatus, StatusReply, reply_message_id
from orderflow.protocol.conditional import Note, update
from orderflow.queues.base import QueueFactory
from orderflow.records import PendingReply, StateRecord, client_order_id, instance_id_for
from orderflow.stores.base import StateQuery, StateStore, Versioned
from orderflow.stores.paging import PageBudget, PageLimits
from orderflow.timeline import Actor

logger = logging.getLogger(__name__)

CLEAR_ATTEMPTS = 4
"""Re-reads after a 412 before leaving the entry to the relay (someone else keeps moving the record)."""


def send_reply(queues: QueueFactory, clock: Clock, record: StateRecord, reply: PendingReply) -> None:
    """Send ``reply`` to the order's private reply queue under its stable message id, naming the order by
    the client's own order id (:func:`orderflow.records.client_order_id`).

    The send is a PRODUCER span ``orderflow.reply``: a child of the current span (the activity that
    settled the order), or of the submission's when there is none (the supervisor's relay).

    Raises:
        TransientError: the queue is unavailable (the entry stays pending; the relay retries).
    """
    status = OrderStatus(reply.status)
    order_id = client_order_id(record.order_id)  # the client's own id, as the intake's replies name it
    message = StatusReply(
        order_id=order_id, status=status, reason=reply.reason, detail=reply.detail, at=clock.now()
    )
    message_id = reply_message_id(order_id, status)
    attributes = {
        **tracing.order_attributes(
            record.order_id,
            instance_id_for(record.order_id, record.attempt) if record.attempt > 0 else None,
            status=status.value,
        ),
        **tracing.messaging_attributes(
            tracing.messaging_system(queues), record.reply_to, message_id=message_id, operation="send"
        ),
    }
    with tracing.span(
        tracing.REPLY,
        kind=tracing.PRODUCER,
        parent=tracing.unless_current(record.traceparent),
        attributes=attributes,
    ):
        queues.queue(record.reply_to).send(message.to_json(), message_id=message_id, correlation_id=order_id)


def clear_pending_reply(
    states: StateStore,
    clock: Clock,
    order_id: str,
    reply: PendingReply,
    *,
    known: Versioned[StateRecord] | None = None,
) -> bool:
    """Remove the outbox entry ``reply`` from the record with a conditional write.

    Only the same entry is removed: a record that moved on to owe a different reply keeps it.

    Args:
        known: The version the caller just wrote, if any: the first try replaces it with its ETag and
            so needs no point read; a 412 falls back to reading the record.

    Returns:
        True if the entry is gone (removed now or already), False if the write kept losing races.
    """

    def clear(record: StateRecord) -> StateRecord | None:
        if record.pending_reply != reply:
            return None  # gone already, or the record moved on to owe another reply
        record.pending_reply = None
        return record

    try:
        update(
            states,
            order_id,
            clear,
            clock=clock,
            actor=Note(Actor("replies"), action="reply", outcome=reply.status),
            found=known,
            attempts=CLEAR_ATTEMPTS,
            housekeeping=True,
        )
    except NotFound:
        return True
    except ConcurrencyConflict:
        return False
    return True


def deliver_reply(
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    record: StateRecord,
    reply: PendingReply,
    *,
    etag: str | None = None,
) -> None:
    """Send an owed reply, then remove it from the record's outbox.

    Args:
        etag: The ETag of ``record`` when the caller has just written it: the outbox is then cleared
            without a point read.

    Raises:
        TransientError: the send failed; the entry stays owed for a retry or the relay.
    """
    send_reply(queues, clock, record, reply)
    known = Versioned(record, etag) if etag is not None else None
    clear_pending_reply(states, clock, record.order_id, reply, known=known)


@dataclass
class RelayReport:
    """What one relay pass did: order ids re-sent, and failures left for the next pass."""

    resent: list[str] = field(default_factory=list)
    failed: int = 0


def resend_pending_replies(
    *,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    grace_s: float,
    max_records: int = 200,
    limits: PageLimits | None = None,
) -> RelayReport:
    """Re-send replies still pending ``grace_s`` seconds after the write that recorded them.

    Args:
        states / queues / clock: Dependencies.
        grace_s: Seconds a writer has to send and clear its own entry before the relay steps in.
        max_records: Most records one pass handles.
        limits: The pass's page bounds (``SCAN_*``, :meth:`PageLimits.from_settings`); None: the defaults.

    Returns:
        A :class:`RelayReport`. A failed send or clear is counted and retried on the next pass.
    """
    report = RelayReport()
    query = StateQuery(reply_pending=True, updated_before=clock.now() - timedelta(seconds=grace_s))
    continuation: str | None = None
    handled = 0
    budget = PageBudget("reply_relay", limits or PageLimits())
    while handled < max_records and budget.allows_another():
        try:
            page = states.query(
                query, max_item_count=min(100, max_records - handled), continuation=continuation
            )
        except InvalidContinuation:
            break
        budget.record(page)
        for found in page.items:
            handled += 1
            record = found.item
            reply = record.pending_reply
            if reply is None:
                continue
            try:
                deliver_reply(states, queues, clock, record, reply)
            except Exception:
                report.failed += 1
                logger.warning("re-sending the %s reply of order %s failed", reply.status, record.order_id)
                continue
            report.resent.append(record.order_id)
        continuation = page.continuation
        if continuation is None:
            break
    if report.resent:
        logger.info("re-sent %s pending replies", len(report.resent))
    return report

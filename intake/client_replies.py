"""What submission answers a client, and where: the one reply queue a client may name
(:func:`check_reply_queue`), and the status replies sent there (:func:`send_status`,
:func:`final_status` for a settled order submitted again)."""

from __future__ import annotations

from orderflow.clients import RegisteredClient
from orderflow.clock import Clock
from orderflow.errors import InvalidMessage
from orderflow.messages import (
    REPLY_TO_MISMATCH,
    REPLY_TO_NOT_REGISTERED,
    RESERVED_REPLY_QUEUE,
    OrderStatus,
    StatusReply,
    SubmitOrder,
    reply_message_id,
)
from orderflow.queues.base import QueueFactory
from orderflow.records import ProcessState, StateRecord
from orderflow.settings import Queues


def check_reply_queue(
    order: SubmitOrder, client: RegisteredClient, queue_names: Queues, *, transport_reply_to: str | None
) -> None:
    """Refuse a ``replyTo`` that is not the sending client's registered reply queue, before anything is
    written or sent (and so before any queue is touched).

    Raises:
        InvalidMessage: ``ReservedReplyQueue``, ``ReplyToNotRegistered`` or ``ReplyToMismatch``.
    """
    reserved = queue_names.reserved_queue(order.reply_to)
    if reserved is not None:
        raise InvalidMessage(
            RESERVED_REPLY_QUEUE,
            f"replyTo {order.reply_to!r} is {reserved}, not a client's reply queue; name the client's own "
            "private queue",
        )
    if order.reply_to != client.reply_queue:
        raise InvalidMessage(
            REPLY_TO_NOT_REGISTERED,
            f"replyTo {order.reply_to!r} is not the reply queue registered for client {client.client_id!r}; "
            "replies go to the client's registered reply queue only",
        )
    if transport_reply_to is not None and transport_reply_to != order.reply_to:
        raise InvalidMessage(
            REPLY_TO_MISMATCH,
            f"replyTo {order.reply_to!r} differs from the message's ReplyTo property "
            f"{transport_reply_to[:64]!r}; a client sends both as its own reply queue",
        )


_FINAL_REPLIES = {
    ProcessState.PROCESSED: OrderStatus.PROCESSED,
    ProcessState.ERROR: OrderStatus.FAILED,
    ProcessState.COMPENSATED: OrderStatus.COMPENSATED,
    ProcessState.COMPENSATION_FAILED: OrderStatus.COMPENSATION_FAILED,
    ProcessState.CANCELLED: OrderStatus.CANCELLED,
}


def final_status(record: StateRecord) -> tuple[OrderStatus, str | None, str | None] | None:
    """The final reply a settled record stands for, or None while the order is still in flight."""
    status = _FINAL_REPLIES.get(record.process_state)
    if status is None:
        return None
    error = record.last_error if status is not OrderStatus.PROCESSED else None
    return status, error.code if error else None, error.message if error else None


def send_status(
    queues: QueueFactory,
    clock: Clock,
    order: SubmitOrder,
    status: OrderStatus,
    *,
    reason: str | None = None,
    detail: str | None = None,
) -> None:
    """Send ``order``'s client a ``status`` reply on its reply queue, under the reply's deterministic
    message id (a resend is de-duplicated by the client)."""
    reply = StatusReply(order_id=order.order_id, status=status, reason=reason, detail=detail, at=clock.now())
    queues.queue(order.reply_to).send(
        reply.to_json(), message_id=reply_message_id(order.order_id, status), correlation_id=order.order_id
    )

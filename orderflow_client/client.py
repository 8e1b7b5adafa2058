"""The client SDK: submit orders and read status replies from the client's private reply queue.

A registered client (docs/clients.md) sends to its own inbound queue and reads its own reply queue, and
needs credentials for those two queues only: locally a queue-scoped SAS each
(:meth:`devhost.queues.factory.StorageQueueFactory.from_queue_urls`, or a SAS-only connection string),
on Azure an identity with send rights on the one and receive rights on the other. Every order names the
reply queue as ``replyTo``; the submission checks it is the registered one. Status replies

Reviewing an order or compensating one is not a client's to do: those are calls to the operator API,
with an operator's or reviewer's bearer token (docs/operator-api.md).

carry the order id; the same reply may arrive more than once (at-least-once delivery), so the client
de-duplicates by message id and keeps the latest status per order.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orderflow import tracing
from orderflow.errors import InvalidMessage, PermanentError, TransientError
from orderflow.messages import (
    CANCEL_ORDER,
    CancelOrder,
    OrderStatus,
    StatusReply,
    SubmitOrder,
    parse_message,
    validate_message,
)
from orderflow.queues.base import MessageQueue, QueueFactory, ReceivedMessage

logger = logging.getLogger(__name__)

FINAL_STATUSES = frozenset(
    {
        OrderStatus.PROCESSED,
        OrderStatus.FAILED,
        OrderStatus.COMPENSATED,
        OrderStatus.COMPENSATION_FAILED,
        OrderStatus.CANCELLED,
        OrderStatus.REJECTED,
    }
)
"""Statuses after which the client expects nothing more for an order (unless an operator acts)."""


def submission_message_id(order_id: str, *, resubmission: int = 0) -> str:
    """Message id of an order submission: stable, so broker duplicate detection drops a send retried
    after a failure; ``:submit:<n>`` for the n-th resubmission after a ``Rejected`` reply, which said
    nothing was recorded, so that duplicate detection does not drop the retry."""
    return f"{order_id}:submit" if resubmission == 0 else f"{order_id}:submit:{resubmission}"


def cancel_message_id(order_id: str) -> str:
    """Message id of a cancel request: fresh each time, so that broker duplicate detection never drops
    a cancel retried after an earlier one was refused or arrived before its order."""
    return f"{order_id}:cancel:{uuid.uuid4().hex[:8]}"


def supersedes(reply: StatusReply, current: StatusReply | None) -> bool:
    """Whether ``reply`` replaces ``current`` as the latest known status of its order.

    A final status is never replaced by a non-final one (replies may arrive out of order). ``Rejected``
    answers one submission message, not the order: nothing was recorded for it. So it never replaces
    what the order's own record said (a conflicting resubmission, even one sent by someone else with
    this client's ``replyTo``, must not hide an accepted order), and any status of the order replaces it
    (the order was resubmitted and accepted).
    """
    if current is None or current.status is OrderStatus.REJECTED:
        return True
    if reply.status is OrderStatus.REJECTED:
        return False
    return current.status not in FINAL_STATUSES or reply.status in FINAL_STATUSES


@dataclass
class ReplyLog:
    """Replies seen so far: the latest status per order, and every message id (for de-duplication).

    Attributes:
        latest: The latest status per order id (see :func:`supersedes`).
        seen_ids: Message ids of the replies received.
        received: Replies received per order id, duplicates not counted.
        rejected: ``Rejected`` replies received per order id (each means that submission was not
            recorded), duplicates not counted.
        duplicates: Replies received again under a message id already seen.
        foreign: Messages on the reply queue that were not status replies (dead-lettered).
    """

    latest: dict[str, StatusReply] = field(default_factory=dict)
    seen_ids: set[str] = field(default_factory=set)
    received: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    foreign: int = 0

    def settled(self, order_ids: Iterable[str]) -> int:
        """How many of ``order_ids`` have a final status."""
        return sum(1 for oid in order_ids if oid in self.latest and self.latest[oid].status in FINAL_STATUSES)


class OrderflowClient:
    """Submits orders and reads the client's reply queue.

    Args:
        queues: Queue factory (Azurite locally, Service Bus on Azure); it needs only the two queues.
        reply_queue: This client's private reply queue (the registry's).
        orders_queue: This client's inbound queue (the registry's): where its orders and cancels go.
    """

    def __init__(self, queues: QueueFactory, *, reply_queue: str, orders_queue: str) -> None:
        self._queues = queues
        self.reply_queue = reply_queue
        self.orders_queue = orders_queue
        self.replies = ReplyLog()

    def submit(self, order: SubmitOrder | Mapping[str, Any]) -> str:
        """Validate and send one order; ``replyTo`` is set to this client's reply queue, in the body and,
        where the transport has message properties (Service Bus), as the message's ``ReplyTo``: the
        submission checks that the two agree. The current span's trace context, if the caller traces
        (:mod:`orderflow.tracing`), goes in the body's ``traceparent``: the order's trace continues it.

        Returns:
            The order id.

        Raises:
            InvalidMessage: the order is not valid (nothing is sent).
            TransientError: the queue could not be reached or timed out. Sending the same order again
                is safe: it goes with the same MessageId, and the submission is idempotent on the order
                id.
        """
        data = dict(order.model_dump(mode="json", by_alias=True) if isinstance(order, SubmitOrder) else order)
        data["replyTo"] = self.reply_queue
        traceparent = tracing.current_traceparent()
        if traceparent is not None and not data.get("traceparent"):
            data["traceparent"] = traceparent
        validated = validate_message(SubmitOrder, data)
        self._queues.queue(self.orders_queue).send(
            validated.to_json(),
            # After a Rejected reply a fresh id: the broker must not drop the retry as a duplicate.
            message_id=submission_message_id(
                validated.order_id, resubmission=self.replies.rejected[validated.order_id]
            ),
            correlation_id=validated.order_id,
            reply_to=self.reply_queue,
        )
        return validated.order_id

    def cancel(self, order_id: str, *, reason: str | None = None) -> None:
        """Ask for one of this client's orders to be cancelled (a ``CancelOrder`` on its inbound queue).

        The answer arrives on the reply queue the order was submitted with: ``Cancelled`` once what was
        done is undone, or ``CancelRefused`` with the reason (settled, or past its point of no return).

        Raises:
            InvalidMessage: the order id or reason is not valid (nothing is sent).
        """
        request = validate_message(
            CancelOrder, {"schemaVersion": 1, "type": CANCEL_ORDER, "orderId": order_id, "reason": reason}
        )
        self._queues.queue(self.orders_queue).send(
            request.to_json(), message_id=cancel_message_id(order_id), correlation_id=order_id
        )

    def send_raw(self, body: str, *, message_id: str) -> None:
        """Send a body as-is to the submission queue (for testing how bad input is handled)."""
        self._queues.queue(self.orders_queue).send(body, message_id=message_id)

    def poll(self, *, max_messages: int = 32) -> list[StatusReply]:
        """Receive and complete what is on the reply queue now; returns the new (non-duplicate) replies.

        A reply whose completion fails transiently is still returned: it comes back once its lock
        expires and is then dropped as a duplicate.

        Raises:
            TransientError: the receive failed; nothing was taken, so polling again is safe.
        """
        queue = self._queues.queue(self.reply_queue)
        fresh: list[StatusReply] = []
        for message in queue.receive(max_messages=max_messages, lock_s=30.0):
            try:
                reply = parse_message(StatusReply, message.body)
            except InvalidMessage as exc:
                self.replies.foreign += 1
                self._dead_letter(queue, message, exc)
                continue
            if message.message_id in self.replies.seen_ids:
                self.replies.duplicates += 1
            else:
                self.replies.seen_ids.add(message.message_id)
                self.replies.received[reply.order_id] += 1
                if reply.status is OrderStatus.REJECTED:
                    self.replies.rejected[reply.order_id] += 1
                if supersedes(reply, self.replies.latest.get(reply.order_id)):
                    self.replies.latest[reply.order_id] = reply
                fresh.append(reply)
            try:
                queue.complete(message)
            except TransientError as exc:
                # Recorded above: its redelivery is dropped as a duplicate, so the caller gets it once.
                logger.warning("completing reply %s on %s failed (%s)", message.message_id, queue.name, exc)
        return fresh

    @staticmethod
    def _dead_letter(queue: MessageQueue, message: ReceivedMessage, exc: InvalidMessage) -> None:
        """Dead-letter what is not a status reply; a client whose credentials cover only its reply queue
        (a queue-scoped SAS) cannot, and logs it and removes it instead: only the app may send there, so
        such a message is the app's bug, and leaving it would return it on every poll."""
        try:
            queue.dead_letter(message, reason=exc.reason, description=exc.description)
        except PermanentError as refused:
            logger.error(
                "not a status reply on %s (%s), removed: no right to dead-letter it (%s)",
                queue.name,
                exc.reason,
                refused,
            )
            queue.complete(message)

    def wait_for(
        self,
        order_ids: Iterable[str],
        *,
        timeout_s: float,
        on_reply: Callable[[StatusReply], None] | None = None,
        poll_s: float = 0.2,
    ) -> ReplyLog:
        """Poll until every order in ``order_ids`` has a final status or ``timeout_s`` seconds pass."""
        wanted = list(order_ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for reply in self.poll():
                if on_reply is not None:
                    on_reply(reply)
            if self.replies.settled(wanted) == len(wanted):
                break
            time.sleep(poll_s)
        return self.replies

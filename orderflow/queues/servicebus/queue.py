"""One Service Bus queue behind the message-queue port: send, scheduled redelivery, PeekLock receive and
settlement on the receiver that received, approximate count."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from azure.core.exceptions import AzureError
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import MessageAlreadySettled

from orderflow.errors import ConcurrencyConflict
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.servicebus.codec import (
    CONTENT_TYPE,
    MAX_DEAD_LETTER_FIELD_CHARS,
    checked_seconds,
    decode_body,
    message_id_of,
    truncate_utf16,
    utc_now,
)
from orderflow.queues.servicebus.errors import QueueCountUnavailable, is_lock_lost, lock_of, translate_error
from orderflow.queues.servicebus.redelivery import broker_delivery_count, redelivery_copy, trace_properties
from orderflow.queues.servicebus.sdk import (
    AdministrationClientLike,
    ReceivedMessageLike,
    ReceiverLike,
    SenderLike,
    ServiceBusClientLike,
)

logger = logging.getLogger("orderflow.queues.servicebus")  # the package's one logger, as filters name it

DEFAULT_MAX_WAIT_S = 1.0
"""Seconds a receive waits for the first message. Small, because the receive holds the receiver's lock
and settlements of other messages on the same queue wait behind it."""


class ServiceBusQueue:
    """One Service Bus queue, behind the :class:`~orderflow.queues.base.MessageQueue` port.

    Create instances through :class:`ServiceBusQueueFactory`, which gives every caller the same object
    per queue name, so that a message is always settled by the receiver that received it. Thread-safe:
    the sender and the receiver are each used under their own lock.

    Attributes:
        name: The queue's name.
    """

    def __init__(
        self,
        name: str,
        client: ServiceBusClientLike,
        *,
        admin: AdministrationClientLike | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        clock: Callable[[], datetime] = utc_now,
        send_timeout_s: float | None = None,
    ) -> None:
        """Wrap one queue of a client; opens nothing until first use.

        Args:
            name: The (existing) queue's name.
            client: A ``ServiceBusClient`` (or a fake of one).
            admin: An administration client, needed only by :meth:`approximate_count`.
            max_wait_s: Seconds a receive waits for the first message.
            clock: Current UTC time, for scheduled sends.
            send_timeout_s: Seconds one send may wait (the SDK's ``timeout``; ``QUEUE_READ_TIMEOUT_S``);
                None: the SDK's default.

        Raises:
            ValueError: ``max_wait_s`` is not positive.
        """
        self.name = name
        self._client = client
        self._admin = admin
        self._max_wait_s = checked_seconds(max_wait_s, what="max_wait_s", allow_zero=False)
        self._clock = clock
        self._send_options: dict[str, float] = {} if send_timeout_s is None else {"timeout": send_timeout_s}
        self._sender: SenderLike | None = None
        self._receiver: ReceiverLike | None = None
        self._sender_lock = threading.Lock()
        self._receiver_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ServiceBusQueue(name={self.name!r})"

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        """Send a message; with ``delay_s`` > 0 it is scheduled for now + ``delay_s``.

        A send retried after a lost response is dropped by broker duplicate detection (when the queue
        enables it) because ``message_id`` is stable; consumers dedupe by ``message_id`` as well.

        Args:
            body: The message body (normally JSON text).
            message_id: The sender's stable id; 1 to 128 characters.
            correlation_id: Optional correlation id (the order id).
            delay_s: Seconds before the message becomes available (a scheduled message).
            reply_to: The message's ``ReplyTo`` property: the queue answers go to (a client's reply
                queue on a submission, which checks the body's ``replyTo`` against it).

        Raises:
            ValueError: ``message_id`` is empty or longer than 128 characters, ``delay_s`` is negative
                or not finite, or the message is larger than the queue accepts.
            TransientError: the service is unreachable, busy, full or timed out.
            PermanentError: the service refused the message (for example the queue does not exist).
        """
        if not message_id:
            raise ValueError("message_id must not be empty")
        delay = checked_seconds(delay_s, what="delay_s", allow_zero=True)
        message = ServiceBusMessage(
            body,
            message_id=message_id,
            correlation_id=correlation_id,
            reply_to=reply_to,
            content_type=CONTENT_TYPE,
            scheduled_enqueue_time_utc=self._clock() + timedelta(seconds=delay) if delay > 0 else None,
            application_properties=trace_properties(),  # type: ignore[arg-type]
        )
        self._send(message, "send")

    def _send(self, message: ServiceBusMessage, action: str) -> None:
        """Send on the queue's one sender (opened on first use), translating the SDK's errors."""
        with self._sender_lock:
            if self._sender is None:
                self._sender = self._client.get_queue_sender(self.name)
            try:
                self._sender.send_messages(message, **self._send_options)
            except AzureError as error:
                raise translate_error(error, action, self.name) from error

    def redeliver(self, message: ReceivedMessageLike, *, delivery: int, delay_s: float) -> None:
        """Schedule a copy of ``message`` (received from this queue) as its delivery ``delivery``,
        ``delay_s`` seconds from now (:func:`redelivery_copy`); the caller then completes the original.

        This is the delayed abandon Service Bus lacks, for receivers that cannot read the broker's
        delivery count (the Functions trigger's SDK-type binding): the count travels in the copy, so
        the consumer's delivery limit still holds and a transient fault waits out a backoff instead of
        looping. Copy and complete are two operations: a complete that fails after the copy leaves the
        original to be redelivered as well, and every consumer is idempotent by order and request id.

        Raises:
            ValueError: ``delivery`` < 2, or ``delay_s`` is negative or not finite.
            TransientError: the service is unreachable, busy, full or timed out.
            PermanentError: the service refused the message.
        """
        if delivery < 2:
            raise ValueError(f"a redelivery is delivery 2 or later, got {delivery}")
        delay = checked_seconds(delay_s, what="delay_s", allow_zero=True)
        copy = redelivery_copy(
            message, delivery=delivery, enqueue_at=self._clock() + timedelta(seconds=delay)
        )
        self._send(copy, "redeliver")

    def receive(self, *, max_messages: int = 16, lock_s: float = 30.0) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` messages under PeekLock, waiting at most ``max_wait_s``.

        ``lock_s`` is advisory: Service Bus locks a message for the queue's ``LockDuration`` (default
        60 s, at most 5 minutes), whatever the receiver asks. Configure that duration to cover the
        usual handler, and call :meth:`renew_lock` in a longer one. An empty list means nothing
        arrived in time, not that the queue is drained.

        Returns:
            The messages; each ``lock_token`` is the SDK's ``ServiceBusReceivedMessage``.

        Raises:
            ValueError: ``max_messages`` < 1, or ``lock_s`` is not a positive number.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request (for example the queue does not exist).
        """
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        checked_seconds(lock_s, what="lock_s", allow_zero=False)
        with self._receiver_lock:
            receiver = self._open_receiver()
            try:
                received = receiver.receive_messages(
                    max_message_count=max_messages, max_wait_time=self._max_wait_s
                )
            except AzureError as error:
                raise translate_error(error, "receive", self.name) from error
        return [self._decode(message) for message in received]

    @staticmethod
    def _decode(message: ServiceBusReceivedMessage) -> ReceivedMessage:
        message_id = message_id_of(message)
        correlation_id = message.correlation_id
        reply_to = message.reply_to
        return ReceivedMessage(
            message_id=message_id,
            body=decode_body(message.body, message_id=message_id),
            delivery_count=broker_delivery_count(message),
            correlation_id=None if correlation_id is None else str(correlation_id),
            enqueued_at=message.enqueued_time_utc,
            lock_token=message,
            transport_id=str(message.sequence_number or ""),
            reply_to=None if reply_to is None else str(reply_to),
        )

    def _open_receiver(self) -> ReceiverLike:
        """The queue's receiver, created on first use; call under ``_receiver_lock``."""
        if self._receiver is None:
            # prefetch_count=0: a prefetched message's lock would expire unseen in the SDK's buffer.
            self._receiver = self._client.get_queue_receiver(
                self.name,
                receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                max_wait_time=self._max_wait_s,
                prefetch_count=0,
            )
        return self._receiver

    def _settle(
        self,
        message: ReceivedMessage,
        action: str,
        operation: Callable[[ReceiverLike, ServiceBusReceivedMessage], object],
    ) -> Exception | None:
        """Run one lock operation on the receiving receiver; the SDK's error if the lock was lost.

        Raises:
            ValueError: the message carries no Service Bus lock, or this queue never received.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the operation for another reason.
        """
        locked = lock_of(message)
        with self._receiver_lock:
            if self._receiver is None:
                raise ValueError(f"message {message.message_id!r} was not received through {self!r}")
            try:
                operation(self._receiver, locked)
            except MessageAlreadySettled as error:  # a ValueError, not a ServiceBusError
                return error
            except AzureError as error:
                if is_lock_lost(error):
                    return error
                raise translate_error(error, action, self.name) from error
        return None

    def _ignore_lost_lock(self, message: ReceivedMessage, action: str, error: Exception | None) -> bool:
        """Log a lost lock at warning; True if there was one."""
        if error is None:
            return False
        logger.warning(
            "%s of message %s on %s ignored: lock lost (%s)",
            action,
            message.message_id,
            self.name,
            type(error).__name__,
        )
        return True

    def complete(self, message: ReceivedMessage) -> None:
        """Remove a received message from the queue.

        A lost lock is logged at warning and ignored: the message will be, or was, handled again.

        Raises:
            ValueError: the message carries no Service Bus lock.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request for another reason.
        """
        lost = self._settle(message, "complete", lambda receiver, locked: receiver.complete_message(locked))
        self._ignore_lost_lock(message, "complete", lost)

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Release the lock now; the message is available again at once with its delivery count + 1.

        ``delay_s`` is checked but not honoured: Service Bus has no visibility delay on abandon. A
        receiver that reads the broker's count (this one) retries a failing message without backoff
        until a delivery limit (the consumer's, or the queue's ``MaxDeliveryCount``, which must be at
        least the consumer's) dead-letters it. The Functions triggers, whose binding does not report
        the count, use :meth:`redeliver` instead. A lost lock is logged at warning and ignored (the
        message is already back in circulation).

        Raises:
            ValueError: no Service Bus lock, or ``delay_s`` is negative or not finite.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request for another reason.
        """
        checked_seconds(delay_s, what="delay_s", allow_zero=True)
        lost = self._settle(message, "abandon", lambda receiver, locked: receiver.abandon_message(locked))
        self._ignore_lost_lock(message, "abandon", lost)

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        """Extend the lock by the queue's ``LockDuration`` from now (``lock_s`` is advisory, see
        :meth:`receive`).

        Raises:
            ValueError: no Service Bus lock, or ``lock_s`` is not a positive number.
            ConcurrencyConflict: the lock was lost; another consumer may be handling the message.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request for another reason.
        """
        checked_seconds(lock_s, what="lock_s", allow_zero=False)
        lost = self._settle(
            message, "renew_lock", lambda receiver, locked: receiver.renew_message_lock(locked)
        )
        if lost is not None:
            raise ConcurrencyConflict(
                f"lock of message {message.message_id!r} on {self.name!r} was lost ({type(lost).__name__})"
            ) from lost

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Move the message, body intact, to the queue's dead-letter sub-queue.

        ``reason`` and ``description`` are truncated to :data:`MAX_DEAD_LETTER_FIELD_CHARS` UTF-16
        code units each. A lost lock is logged at warning and ignored: the message is redelivered and
        dead-lettered again by whoever holds it then, or reaches ``MaxDeliveryCount``.

        Raises:
            ValueError: the message carries no Service Bus lock.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request for another reason.
        """
        short_reason = truncate_utf16(reason, MAX_DEAD_LETTER_FIELD_CHARS)
        short_description = truncate_utf16(description, MAX_DEAD_LETTER_FIELD_CHARS)
        lost = self._settle(
            message,
            "dead_letter",
            lambda receiver, locked: receiver.dead_letter_message(
                locked, reason=short_reason, error_description=short_description
            ),
        )
        if not self._ignore_lost_lock(message, "dead_letter", lost):
            logger.warning(
                "dead-lettered message %s from %s: %s", message.message_id, self.name, short_reason
            )

    def approximate_count(self) -> int:
        """Active messages in the queue (available or locked), for backpressure, not for correctness.

        Read with the administration client's ``get_queue_runtime_properties(name).
        active_message_count``; scheduled (delayed) and dead-lettered messages are not counted.

        Raises:
            QueueCountUnavailable: the factory was created without an administration client.
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request (for example missing rights).
        """
        if self._admin is None:
            raise QueueCountUnavailable(self.name)
        try:
            properties = self._admin.get_queue_runtime_properties(self.name)
        except AzureError as error:
            raise translate_error(error, "approximate_count", self.name) from error
        return int(properties.active_message_count or 0)

    def close(self) -> None:
        """Close the sender and the receiver (locks of unsettled messages are then lost)."""
        with self._sender_lock:
            sender, self._sender = self._sender, None
        with self._receiver_lock:
            receiver, self._receiver = self._receiver, None
        for handler in (sender, receiver):
            if handler is not None:
                handler.close()

"""Azure Storage queue adapter of the message-queue port, for the local host (Azurite).

Messages travel in the envelope of :mod:`orderflow.queues.wire`, sent as plain text (the SDK's default
``NoEncodePolicy``, no base64): the envelope is XML-safe already. Queues are opened through
:class:`devhost.queues.factory.StorageQueueFactory`, which also reads and removes dead letters
(:mod:`devhost.queues.dead_letter_scan`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.queue import QueueClient, QueueMessage

from orderflow.errors import ConcurrencyConflict, OrderflowError, PermanentError, TransientError
from orderflow.queues.base import ReceivedMessage, dead_letter_queue_name
from orderflow.queues.wire import (
    PopReceipt,
    decode_message,
    encode_dead_letter,
    encode_envelope,
    lock_of,
    receive_batch_size,
    visibility_seconds,
)

logger = logging.getLogger(__name__)


# Dead-lettering first re-takes the lock for this long (seconds): it proves the lock is still ours and
# leaves time for the two writes that follow.
DEAD_LETTER_LOCK_S = 30

_LOCK_LOST_CODES = frozenset({"PopReceiptMismatch", "MessageNotFound"})


def message_count(client: QueueClient) -> int:
    """The messages of a queue, hidden ones included (Storage's approximate count).

    Raises:
        AzureError: the service failed.
    """
    return client.get_queue_properties().approximate_message_count or 0


# --- SDK errors ----------------------------------------------------------------------------------------


def error_code(error: AzureError) -> str:
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def is_missing_queue(error: AzureError) -> bool:
    """Whether ``error`` says the queue does not exist (what a dead-letter queue never written is)."""
    return isinstance(error, HttpResponseError) and error_code(error) == "QueueNotFound"


def _is_lock_lost(error: AzureError) -> bool:
    return isinstance(error, HttpResponseError) and error_code(error) in _LOCK_LOST_CODES


def translate_error(error: AzureError, action: str, queue: str) -> OrderflowError:
    """Map an Azure SDK error to the orderflow hierarchy.

    Connection failures, timeouts, throttling (408, 429) and 5xx become :class:`TransientError`; any
    other HTTP error becomes :class:`PermanentError` with the storage error code.

    Args:
        error: The SDK's exception.
        action: What was being done, for the message (``send``, ``receive``, ...).
        queue: The queue's name.

    Returns:
        The exception to raise (``from error``).
    """
    text = f"{action} on queue {queue!r} failed: {error.message}"
    if isinstance(error, ServiceRequestError | ServiceResponseError):
        return TransientError(text)
    if isinstance(error, HttpResponseError):
        status = error.status_code
        if status is None or status >= 500 or status in (408, 429):
            return TransientError(text)
        return PermanentError(error_code(error) or f"http_{status}", text)
    # Any other AzureError is raised outside an HTTP exchange (a dropped connection mid-stream, ...).
    return TransientError(text)


# --- the adapter ---------------------------------------------------------------------------------------


class StorageQueue:
    """One Azure Storage queue, behind the :class:`~orderflow.queues.base.MessageQueue` port.

    Create instances through :class:`StorageQueueFactory`, which creates the queue and configures the
    client. Thread-safe as far as the SDK's ``QueueClient`` is; a :class:`ReceivedMessage` is settled by
    one thread.

    Attributes:
        name: The queue's name.
    """

    def __init__(
        self, name: str, client: QueueClient, *, dead_letter_client: Callable[[], QueueClient]
    ) -> None:
        """Wrap a queue client.

        Args:
            name: The queue's name.
            client: A client of the (existing) queue, configured with no message encoding.
            dead_letter_client: Returns a client of ``<name>-deadletter``, creating that queue if needed.
        """
        self.name = name
        self._client = client
        self._dead_letter_client = dead_letter_client

    def __repr__(self) -> str:
        return f"StorageQueue(name={self.name!r})"

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        """Send a message that never expires.

        A send retried by the SDK after a lost response may enqueue the message twice; consumers
        recognise the duplicate by ``message_id``.

        Args:
            body: The message body (normally JSON text).
            message_id: The sender's stable id.
            correlation_id: Optional correlation id (the order id).
            delay_s: Seconds before the message becomes visible, rounded up; at most 7 days.
            reply_to: Ignored: Storage queues carry no message properties, and an envelope field would
                be no more trustworthy than the body it travels with.

        Raises:
            ValueError: the envelope is larger than :data:`~orderflow.queues.wire.MAX_ENVELOPE_BYTES`, or
                ``delay_s`` is out of range.
            TransientError: the service is unreachable or failed (after the SDK's bounded retries).
            PermanentError: the service refused the request.
        """
        text = encode_envelope(
            body, message_id=message_id, correlation_id=correlation_id, sent_at=datetime.now(UTC)
        )
        delay = visibility_seconds(delay_s, minimum=0, what="delay_s")
        try:
            # time_to_live=-1: a message never expires, so nothing accepted is silently lost.
            self._client.send_message(text, visibility_timeout=delay, time_to_live=-1)
        except AzureError as error:
            raise translate_error(error, "send", self.name) from error

    def receive(self, *, max_messages: int = 16, lock_s: float = 30.0) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` visible messages and hide them for ``lock_s`` seconds.

        One request: at most 32 messages (the service's limit), ``lock_s`` rounded up to whole seconds.
        An empty list means nothing was visible, not that the queue is empty.

        Raises:
            ValueError: ``max_messages`` < 1, or ``lock_s`` is out of range (0 to 7 days).
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request.
        """
        batch = receive_batch_size(max_messages)
        lock = visibility_seconds(lock_s, minimum=1, what="lock_s")
        try:
            # by_page() + one next(): exactly one request. Iterating the ItemPaged itself would keep
            # requesting pages until max_messages or an empty page.
            pages = self._client.receive_messages(messages_per_page=batch, visibility_timeout=lock).by_page()
            page: list[QueueMessage] = list(next(pages, []))
        except AzureError as error:
            raise translate_error(error, "receive", self.name) from error
        return [self._decode(message) for message in page]

    def _decode(self, message: QueueMessage) -> ReceivedMessage:
        return decode_message(
            message.content or "",
            transport_id=message.id,
            delivery_count=message.dequeue_count or 1,
            enqueued_at=message.inserted_on,
            lock_token=PopReceipt(message.id, message.pop_receipt or ""),
        )

    def complete(self, message: ReceivedMessage) -> None:
        """Delete a received message with its newest pop receipt.

        A lost lock (the message was received again by someone else, or is already gone) is logged at
        warning and ignored: the message will be, or was, handled by that other consumer.

        Raises:
            ValueError: the message carries no pop receipt.
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request for another reason.
        """
        lock = lock_of(message)
        try:
            self._client.delete_message(lock.message_id, lock.pop_receipt)
        except AzureError as error:
            if _is_lock_lost(error):
                logger.warning(
                    "complete of message %s on %s ignored: lock lost (%s)",
                    message.message_id,
                    self.name,
                    error_code(error),
                )
                return
            raise translate_error(error, "complete", self.name) from error

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Make the message visible again after ``delay_s`` seconds (rounded up; 0 = now).

        A lost lock is logged at warning and ignored (the message is already back in circulation).

        Raises:
            ValueError: no pop receipt, or ``delay_s`` out of range (0 to 7 days).
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request for another reason.
        """
        delay = visibility_seconds(delay_s, minimum=0, what="delay_s")
        if not self._set_visibility(message, delay, "abandon"):
            logger.warning("abandon of message %s on %s ignored: lock lost", message.message_id, self.name)

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        """Keep the message hidden for ``lock_s`` more seconds (rounded up) from now.

        The message's pop receipt is replaced by the new one, so a later settlement uses the newest.

        Raises:
            ValueError: no pop receipt, or ``lock_s`` out of range (0 to 7 days).
            ConcurrencyConflict: the lock was lost; another consumer may be handling the message.
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request for another reason.
        """
        lock = visibility_seconds(lock_s, minimum=1, what="lock_s")
        if not self._set_visibility(message, lock, "renew_lock"):
            raise ConcurrencyConflict(f"lock of message {message.message_id!r} on {self.name!r} was lost")

    def _set_visibility(self, message: ReceivedMessage, seconds: int, action: str) -> bool:
        """Update the visibility timeout and store the new pop receipt; False if the lock was lost."""
        lock = lock_of(message)
        try:
            updated = self._client.update_message(
                lock.message_id, lock.pop_receipt, visibility_timeout=seconds
            )
        except AzureError as error:
            if _is_lock_lost(error):
                return False
            raise translate_error(error, action, self.name) from error
        # The old receipt is dead from now on (docs/design.md §7): settle only with this one.
        message.lock_token = PopReceipt(lock.message_id, updated.pop_receipt or "")
        return True

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Copy the message to ``<queue>-deadletter`` with the reason, then delete the original.

        The lock is re-taken first, so a consumer that lost it does not add a dead letter for a message
        another consumer holds (that case is logged at warning and ignored). The record is written
        before the original is deleted: a crash in between duplicates a dead letter, never loses one.

        Raises:
            ValueError: the message carries no pop receipt.
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request for another reason.
        """
        if not self._set_visibility(message, DEAD_LETTER_LOCK_S, "dead_letter"):
            logger.warning(
                "dead-letter of message %s on %s ignored: lock lost", message.message_id, self.name
            )
            return
        record = encode_dead_letter(
            message,
            reason=reason,
            description=description,
            source_queue=self.name,
            dead_lettered_at=datetime.now(UTC),
        )
        try:
            self._dead_letter_client().send_message(record, time_to_live=-1)
        except AzureError as error:
            raise translate_error(error, "dead_letter", dead_letter_queue_name(self.name)) from error
        logger.warning("dead-lettered message %s from %s: %s", message.message_id, self.name, reason)
        self.complete(message)

    def approximate_count(self) -> int:
        """Approximate number of messages, visible or not (for backpressure, not for correctness).

        Raises:
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request.
        """
        try:
            return message_count(self._client)
        except AzureError as error:
            raise translate_error(error, "approximate_count", self.name) from error

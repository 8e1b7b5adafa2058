"""Azure Service Bus adapter of the message-queue port (the Azure host; the Service Bus emulator locally).

Unlike Storage queues, Service Bus carries the sender's ids natively, so no envelope is needed: the body
is sent as-is with ``message_id`` = the sender's stable id (what broker duplicate detection keys on,
docs/design.md §3.7), ``correlation_id`` = the order id and ``content_type`` = ``application/json``.

How the port's PeekLock semantics map onto Service Bus:

- **Receive** uses a PeekLock receiver with ``prefetch_count=0``: a prefetched message's lock would
  tick in a local buffer, and with no prefetch the SDK releases messages that arrive outside a receive
  call. An empty receive means nothing arrived within ``max_wait_s``; it never means the queue is
  drained (docs/design.md §7).
- **Delivery count**: the SDK returns the AMQP header's count, which is 0 on first delivery (the
  service writes ``DeliveryCount - 1``; the SDK's own live tests assert 0 on a first receive). The
  port counts from 1, as the .NET and Java SDKs do, so 1 is added.
- **Lock duration** is a property of the queue (``LockDuration``, default 60 s, at most 5 minutes, set
  by the infrastructure), not of a receive call. ``lock_s`` is therefore advisory here: it is checked,
  and a handler that needs longer calls :meth:`ServiceBusQueue.renew_lock`, which extends the lock by
  the queue's lock duration from now.
- **Abandon** makes the message available again at once: Service Bus has no visibility delay on
  abandon, so ``delay_s`` is ignored. :meth:`ServiceBusQueue.redeliver` is the delayed alternative: a
  scheduled copy under a derived ``MessageId`` that carries the delivery count as an application
  property (:data:`DELIVERY_COUNT_PROPERTY`), read back by :func:`delivery_count`.
- **Settlement** goes through the receiver that received the message (the AMQP delivery belongs to its
  link). Each queue keeps one sender and one receiver open, and the factory hands out one queue object
  per name. The SDK's sync senders and receivers are not thread-safe, so each is guarded by a lock; a
  receive holds the receiver for at most ``max_wait_s`` (keep it small).
- **A lost lock** is harmless on complete, abandon and dead-letter (logged at warning): the message is
  redelivered, or was already settled. The SDK raises :class:`~azure.servicebus.exceptions.
  MessageLockLostError`, :class:`~azure.servicebus.exceptions.MessageAlreadySettled`,
  :class:`~azure.servicebus.exceptions.MessageNotFoundError`, or the base ``ServiceBusError`` for AMQP
  conditions it does not map (docs/design.md §7). On :meth:`ServiceBusQueue.renew_lock` the same errors
  raise :class:`~orderflow.errors.ConcurrencyConflict`, as on Storage.
- **Dead letters** use the queue's own dead-letter sub-queue; the reason and description become the
  ``DeadLetterReason`` / ``DeadLetterErrorDescription`` application properties, truncated to
  :data:`MAX_DEAD_LETTER_FIELD_CHARS`. An operator's removal finds dead letters by peeking (browsing
  shows locked messages and locks none) and settles them by sequence number, so that it never keeps
  another dead letter from a concurrent operation for longer than one pass
  (:meth:`ServiceBusQueueFactory.remove_dead_letters`).
- **Queues are never created** here: on Azure they come from the infrastructure (Bicep), and the
  emulator reads them from its configuration file. A missing queue surfaces as a
  :class:`~orderflow.errors.PermanentError` (``MessagingEntityNotFoundError``) on first use.
- Messages are sent without a time-to-live, so the queue's ``DefaultMessageTimeToLive`` applies; the
  infrastructure must keep it long and dead-letter on expiry, or an expired message is lost.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    OperationTimeoutError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)
from azure.servicebus.management import ServiceBusAdministrationClient

from orderflow import tracing
from orderflow.errors import ConcurrencyConflict, DeadLettersBusy, PermanentError, TransientError
from orderflow.queues.base import (
    MAX_DEAD_LETTER_SCAN,
    DeadLetter,
    DeadLetterPage,
    ReceivedMessage,
    RetryPauses,
)

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/json"
"""Content type of every message sent (bodies are JSON envelopes, docs/design.md §5)."""

MAX_DEAD_LETTER_FIELD_CHARS = 4096
"""Longest dead-letter reason or description, in UTF-16 code units.

The limit the .NET and JavaScript Service Bus SDKs enforce before dead-lettering (``Constants.
MaxDeadLetterReasonLength``, ``maxDeadLetterReasonLength``). The Python SDK does not check; staying
within it keeps a dead-letter request from being refused, which would leave the message locked.
"""

DEAD_LETTER_RETRY_S = 10.0
"""Longest a dead-letter removal keeps trying for a target another operation holds locked (seconds):
far longer than a removal holds a dead letter, shorter than an operator waits for an answer."""

DEFAULT_MAX_WAIT_S = 1.0
"""Seconds a receive waits for the first message. Small, because the receive holds the receiver's lock
and settlements of other messages on the same queue wait behind it."""

DEFAULT_RETRY_TOTAL = 2
"""SDK retries of a failed operation (its default is 3): consumer loops retry on their own, and the
order's retry budget is end to end (docs/design.md §2)."""

_QUEUE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,258}[A-Za-z0-9])?")

# Errors that may succeed on retry. A full queue (quota exceeded) drains as consumers catch up, so it is
# transient too: treating it as permanent would make a step fail for want of capacity.
_TRANSIENT_ERRORS = (
    ServiceBusConnectionError,
    OperationTimeoutError,
    ServiceBusServerBusyError,
    ServiceBusCommunicationError,
    ServiceBusQuotaExceededError,
)
# Settlement errors that mean the lock is gone (the base ServiceBusError is checked separately: only
# the exact base class counts, its subclasses say what else went wrong).
_LOCK_LOST_ERRORS = (MessageLockLostError, MessageAlreadySettled, MessageNotFoundError)


# --- the SDK surface this adapter uses (the real clients satisfy these; tests inject fakes) -----------


class SenderLike(Protocol):
    """The part of :class:`azure.servicebus.ServiceBusSender` used here."""

    def send_messages(self, message: ServiceBusMessage, *, timeout: float | None = ...) -> None:
        """Send one message."""
        ...

    def close(self) -> None:
        """Close the link."""
        ...


class ReceiverLike(Protocol):
    """The part of :class:`azure.servicebus.ServiceBusReceiver` used here."""

    def receive_messages(
        self, max_message_count: int | None = ..., max_wait_time: float | None = ...
    ) -> list[ServiceBusReceivedMessage]:
        """Receive a batch under PeekLock."""
        ...

    def peek_messages(
        self, max_message_count: int = ..., *, sequence_number: int = ...
    ) -> list[ServiceBusReceivedMessage]:
        """Browse messages without locking them."""
        ...

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        """Remove the message."""
        ...

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        """Release the lock."""
        ...

    def dead_letter_message(
        self,
        message: ServiceBusReceivedMessage,
        reason: str | None = ...,
        error_description: str | None = ...,
    ) -> None:
        """Move the message to the dead-letter sub-queue."""
        ...

    def renew_message_lock(self, message: ServiceBusReceivedMessage) -> datetime:
        """Extend the lock by the queue's lock duration."""
        ...

    def close(self) -> None:
        """Close the link."""
        ...


class ServiceBusClientLike(Protocol):
    """The part of :class:`azure.servicebus.ServiceBusClient` used here."""

    fully_qualified_namespace: str

    def get_queue_sender(self, queue_name: str) -> SenderLike:
        """A sender for ``queue_name``."""
        ...

    def get_queue_receiver(
        self,
        queue_name: str,
        *,
        sub_queue: ServiceBusSubQueue | None = ...,
        receive_mode: ServiceBusReceiveMode = ...,
        max_wait_time: float | None = ...,
        prefetch_count: int = ...,
    ) -> ReceiverLike:
        """A receiver for ``queue_name`` (or one of its sub-queues)."""
        ...

    def close(self) -> None:
        """Close the connection and every handler."""
        ...


class QueueRuntimePropertiesLike(Protocol):
    """The part of :class:`azure.servicebus.management.QueueRuntimeProperties` used here."""

    @property
    def active_message_count(self) -> int | None:
        """Messages available or locked (not scheduled, not dead-lettered)."""
        ...


class AdministrationClientLike(Protocol):
    """The part of :class:`azure.servicebus.management.ServiceBusAdministrationClient` used here."""

    def get_queue_runtime_properties(self, queue_name: str) -> QueueRuntimePropertiesLike:
        """Runtime counts of a queue."""
        ...

    def close(self) -> None:
        """Close the HTTP pipeline."""
        ...


class QueueCountUnavailable(PermanentError, NotImplementedError):
    """:meth:`ServiceBusQueue.approximate_count` was called without an administration client.

    Both a :class:`~orderflow.errors.PermanentError` (code ``approximate_count_unavailable``) and a
    :class:`NotImplementedError`, so callers may catch either.
    """

    def __init__(self, queue: str) -> None:
        super().__init__(
            "approximate_count_unavailable",
            f"queue {queue!r} has no Service Bus administration client, so its message count is unknown; "
            "create the factory with admin_connection_string (emulator) or admin=True (Azure)",
        )


# --- helpers ---------------------------------------------------------------------------------------


def _utc_now() -> datetime:
    return datetime.now(UTC)


def validate_queue_name(name: str) -> None:
    """Check a Service Bus queue name: 1-260 letters, digits, ``.``, ``-``, ``_`` or ``/``, starting
    and ending with a letter or digit.

    Raises:
        ValueError: ``name`` is not a valid queue name.
    """
    if not _QUEUE_NAME.fullmatch(name):
        raise ValueError(f"invalid Service Bus queue name {name!r}")


def _seconds(value: float, *, what: str, allow_zero: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = "at least 0" if allow_zero else "greater than 0"
        raise ValueError(f"{what} must be a finite number of seconds {bound}, got {value}")
    return value


def truncate_utf16(text: str, max_units: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_units`` UTF-16 code units long.

    .NET counts string length in UTF-16 code units, so a character outside the Basic Multilingual Plane
    counts as two; a prefix never ends inside such a character.
    """
    if len(text) * 2 <= max_units:  # fast path: no character is longer than two units
        return text
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > max_units:
            return text[:index]
    return text


def _section_bytes(section: object) -> bytes:
    if isinstance(section, bytes | bytearray | memoryview):
        return bytes(section)
    return str(section).encode("utf-8")


def decode_body(body: object, *, message_id: str) -> str:
    """The text of a received message body; never raises.

    A received body is a generator of ``bytes`` data sections (the SDK's shape for AMQP data bodies),
    or for messages sent by other AMQP clients a single value (``bytes``, ``str``, or anything else).
    Sections are joined before decoding, so a UTF-8 character split across two sections survives.
    Bytes that are not UTF-8 are kept as lone surrogates (the ``surrogateescape`` error handler) and
    logged at warning: the consumer's parser turns them back into the original bytes and dead-letters
    the message as ``NotUtf8``. Replacement characters would instead let a mangled name through as
    valid text.

    Args:
        body: ``ServiceBusReceivedMessage.body``.
        message_id: For the log message.

    Returns:
        The body as text ("" for no body).
    """
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    if isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
    elif isinstance(body, Iterable) and not isinstance(body, Mapping):
        data = b"".join(_section_bytes(section) for section in body)
    else:
        # An AMQP value body of another type (a map, a number): its text, for the consumer to reject.
        return str(body)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        logger.warning("body of message %s is not UTF-8; undecodable bytes kept escaped", message_id)
        return data.decode("utf-8", errors="surrogateescape")


def _message_id(message: ReceivedMessageLike) -> str:
    # AMQP allows a non-string message id (uuid, ulong, binary); another sender may also omit it.
    if message.message_id is not None and str(message.message_id):
        return str(message.message_id)
    return f"sequence-{message.sequence_number}"


def _delivery_count(message: ServiceBusReceivedMessage) -> int:
    # The AMQP header counts earlier failed deliveries; the port counts deliveries (first = 1).
    return delivery_count(message, this_copy=(message.delivery_count or 0) + 1)


# --- redelivery with a delay: a scheduled copy that carries the delivery count ---------------------


class ReceivedMessageLike(Protocol):
    """What the redelivery functions read of a received message: the shape of the SDK's
    ``ServiceBusReceivedMessage``, whichever receiver decoded it (this adapter, the Functions extension)."""

    @property
    def message_id(self) -> Any: ...

    @property
    def sequence_number(self) -> int | None: ...

    @property
    def application_properties(self) -> Mapping[Any, Any] | None: ...

    @property
    def body(self) -> Any: ...

    @property
    def correlation_id(self) -> Any: ...

    @property
    def reply_to(self) -> Any: ...

    @property
    def content_type(self) -> str | None: ...

    @property
    def subject(self) -> str | None: ...


DELIVERY_COUNT_PROPERTY = "orderflow-delivery-count"
"""Application property of a redelivered copy: the delivery number its first delivery is (2 or more)."""

ORIGINAL_MESSAGE_ID_PROPERTY = "orderflow-original-message-id"
"""Application property of a redelivered copy: the ``MessageId`` of the message first sent."""

_REDELIVERY_ID_BASE_CHARS = 80  # leaves room for ":redelivery:<n>:<nonce>" within the broker's 128
_NONCE_BYTES = 8
_REDELIVERY_NONCE = re.compile(f"[0-9a-f]{{{2 * _NONCE_BYTES}}}")


def _application_property(message: ReceivedMessageLike, name: str) -> object:
    # Keys arrive as bytes from an AMQP decoder (the Functions extension's) and as str from others, and
    # so may text values.
    properties = message.application_properties or {}
    value = properties.get(name.encode(), properties.get(name))
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def delivery_count(message: ReceivedMessageLike, *, this_copy: int) -> int:
    """Which delivery of the logical message this is, counted from 1 across its redelivered copies.

    Args:
        message: The received message, an original or a copy made by :meth:`ServiceBusQueue.redeliver`.
        this_copy: Deliveries of this very copy, counted from 1 (the broker's count as the receiver
            reads it; 1 where the receiver cannot read it).

    Returns:
        ``this_copy`` for an original; for a copy, its :data:`DELIVERY_COUNT_PROPERTY` plus the
        deliveries of the copy after its first. The property counts only on a message that is a copy:
        a positive integer ``n``, with the ``MessageId`` :func:`redelivery_message_id` gives delivery
        ``n`` of its :data:`ORIGINAL_MESSAGE_ID_PROPERTY`. A sender's own property (a client may set
        any application property) counts as absent, so the count is never lower than the broker's.
    """
    copy = _copy_of(message)
    return (1 if copy is None else copy[1]) + max(1, this_copy) - 1


def _copy_of(message: ReceivedMessageLike) -> tuple[str, int] | None:
    """The original ``MessageId`` and the delivery a genuine copy carries, or None for any other
    message (an original, or a sender's own properties that a copy's id does not bear out)."""
    carried = _application_property(message, DELIVERY_COUNT_PROPERTY)
    original = _application_property(message, ORIGINAL_MESSAGE_ID_PROPERTY)
    if isinstance(carried, bool) or not isinstance(carried, int | str) or not isinstance(original, str):
        return None
    try:
        delivery = int(carried)
    except ValueError:  # not a number, or too many digits to read
        return None
    if delivery < 2 or not original:
        return None
    prefix = redelivery_message_id(original, delivery, nonce="")
    message_id = str(message.message_id or "")
    if not message_id.startswith(prefix) or not _REDELIVERY_NONCE.fullmatch(message_id[len(prefix) :]):
        return None
    return original, delivery


def original_message_id(message: ReceivedMessageLike) -> str:
    """The ``MessageId`` the logical message was first sent with (a copy carries it as a property)."""
    copy = _copy_of(message)
    return _message_id(message) if copy is None else copy[0]


def copy_identity(original: str, delivery: int) -> tuple[str, dict[str, str | int]]:
    """The ``MessageId`` and application properties of a new copy that is delivery ``delivery`` of the
    message first sent as ``original`` (what :func:`redelivery_copy` gives it)."""
    message_id = redelivery_message_id(original, delivery, nonce=secrets.token_hex(_NONCE_BYTES))
    return message_id, {DELIVERY_COUNT_PROPERTY: delivery, ORIGINAL_MESSAGE_ID_PROPERTY: original}


def redelivery_message_id(original: str, delivery: int, *, nonce: str) -> str:
    """The ``MessageId`` of a copy that is delivery ``delivery`` of the message first sent as
    ``original``: unlike the original's, which duplicate detection would drop inside its window, and
    ending in a random ``nonce`` so that no sender can claim it first and have the copy dropped as a
    duplicate. (The SDK's own retries of one send reuse the message, and its id.) At most 128
    characters."""
    base = original
    if len(base) > _REDELIVERY_ID_BASE_CHARS:
        base = hashlib.sha256(original.encode()).hexdigest()[:40]
    return f"{base}:redelivery:{delivery}:{nonce}"


def trace_properties() -> dict[str, str] | None:
    """The application properties that carry the current span's W3C trace context on a message sent:
    ``traceparent`` and ``Diagnostic-Id`` (the property the Functions host and the Azure SDKs read the
    parent of a Service Bus trigger's invocation from), or None while tracing is off."""
    traceparent = tracing.current_traceparent()
    if traceparent is None:
        return None
    return {tracing.TRACEPARENT_HEADER: traceparent, tracing.DIAGNOSTIC_ID_PROPERTY: traceparent}


def redelivery_copy(
    message: ReceivedMessageLike, *, delivery: int, enqueue_at: datetime
) -> ServiceBusMessage:
    """A copy of ``message`` to be delivered as delivery number ``delivery`` at ``enqueue_at`` (UTC).

    The copy keeps the body bytes, content type, correlation id, reply-to, subject and application
    properties, and carries :data:`DELIVERY_COUNT_PROPERTY` and :data:`ORIGINAL_MESSAGE_ID_PROPERTY`;
    its ``MessageId`` is :func:`redelivery_message_id`.
    """
    message_id, identity = copy_identity(original_message_id(message), delivery)
    properties: dict[str | bytes, object] = {
        (key.decode() if isinstance(key, bytes) else key): value
        for key, value in (message.application_properties or {}).items()
    }
    properties.update(identity)
    body = message.body
    data = body if isinstance(body, bytes | str) else b"".join(_section_bytes(part) for part in body)
    return ServiceBusMessage(
        data,
        message_id=message_id,
        correlation_id=None if message.correlation_id is None else str(message.correlation_id),
        reply_to=None if message.reply_to is None else str(message.reply_to),
        content_type=message.content_type or CONTENT_TYPE,
        subject=message.subject,
        application_properties=properties,  # type: ignore[arg-type]
        scheduled_enqueue_time_utc=enqueue_at,
    )


def _lock_of(message: ReceivedMessage) -> ServiceBusReceivedMessage:
    if not isinstance(message.lock_token, ServiceBusReceivedMessage):
        raise ValueError(
            f"message {message.message_id!r} carries no Service Bus lock; was it received from a Service "
            "Bus queue?"
        )
    return message.lock_token


def translate_error(error: AzureError, action: str, queue: str) -> Exception:
    """Map an Azure SDK error to the orderflow hierarchy.

    - ``ServiceBusConnectionError``, ``OperationTimeoutError``, ``ServiceBusServerBusyError``,
      ``ServiceBusCommunicationError`` and ``ServiceBusQuotaExceededError`` (a full queue drains)
      become :class:`~orderflow.errors.TransientError`;
    - ``MessageSizeExceededError`` becomes a :class:`ValueError` saying what to do;
    - any other ``ServiceBusError`` becomes :class:`~orderflow.errors.PermanentError` whose code is the
      error's type name (``MessagingEntityNotFoundError``, ``ServiceBusAuthorizationError``, ...);
    - azure-core errors (the administration client speaks HTTP): connection failures, 408, 429, 5xx
      and a bare ``HttpResponseError`` without a status are transient; other errors (a missing queue,
      a refused credential, 4xx) are permanent with the type name as code.

    Args:
        error: The SDK's exception.
        action: What was being done (``send``, ``receive``, ...).
        queue: The queue's name.

    Returns:
        The exception to raise (``from error``).
    """
    text = f"{action} on Service Bus queue {queue!r} failed: {error.message}"
    if isinstance(error, MessageSizeExceededError):
        return ValueError(
            f"message too large for Service Bus queue {queue!r} ({error.message}); the limit is 256 KB "
            "on the Standard tier (Premium: the queue's configured maximum); store the payload elsewhere "
            "and send a reference"
        )
    if isinstance(error, _TRANSIENT_ERRORS):
        return TransientError(text)
    if isinstance(error, ServiceBusError):
        return PermanentError(type(error).__name__, text)
    if isinstance(error, ServiceRequestError | ServiceResponseError):
        return TransientError(text)
    if isinstance(error, HttpResponseError):
        status = error.status_code
        if status is not None and (status >= 500 or status in (408, 429)):
            return TransientError(text)
        # No status: a bare HttpResponseError is a broken exchange; a subclass names a refusal
        # (ResourceNotFoundError for a missing queue, ClientAuthenticationError, ...).
        if status is None and type(error) is HttpResponseError:
            return TransientError(text)
    return PermanentError(type(error).__name__, text)


def _is_lock_lost(error: Exception) -> bool:
    return isinstance(error, _LOCK_LOST_ERRORS) or type(error) is ServiceBusError


# --- the adapter -----------------------------------------------------------------------------------


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
        clock: Callable[[], datetime] = _utc_now,
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
        self._max_wait_s = _seconds(max_wait_s, what="max_wait_s", allow_zero=False)
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
        delay = _seconds(delay_s, what="delay_s", allow_zero=True)
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
        delay = _seconds(delay_s, what="delay_s", allow_zero=True)
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
        _seconds(lock_s, what="lock_s", allow_zero=False)
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
        message_id = _message_id(message)
        correlation_id = message.correlation_id
        reply_to = message.reply_to
        return ReceivedMessage(
            message_id=message_id,
            body=decode_body(message.body, message_id=message_id),
            delivery_count=_delivery_count(message),
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
        locked = _lock_of(message)
        with self._receiver_lock:
            if self._receiver is None:
                raise ValueError(f"message {message.message_id!r} was not received through {self!r}")
            try:
                operation(self._receiver, locked)
            except MessageAlreadySettled as error:  # a ValueError, not a ServiceBusError
                return error
            except AzureError as error:
                if _is_lock_lost(error):
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
        _seconds(delay_s, what="delay_s", allow_zero=True)
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
        _seconds(lock_s, what="lock_s", allow_zero=False)
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


class ServiceBusQueueFactory:
    """Hands out one :class:`ServiceBusQueue` per name over one Service Bus client; creates no queues.

    Use :meth:`from_connection_string` with the emulator (or a SAS connection string) and
    :meth:`from_namespace` with a ``DefaultAzureCredential`` / managed identity on Azure. Thread-safe.
    """

    messaging_system = "servicebus"
    """The OpenTelemetry ``messaging.system`` of these queues."""

    def __init__(
        self,
        client: ServiceBusClientLike,
        *,
        admin: AdministrationClientLike | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        clock: Callable[[], datetime] = _utc_now,
        send_timeout_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Wrap a client (see the two constructors).

        Args:
            client: A ``ServiceBusClient`` (or a fake of one); closed by :meth:`close`.
            admin: An administration client for :meth:`ServiceBusQueue.approximate_count`, or None.
            max_wait_s: Seconds a receive waits for the first message.
            clock: Current UTC time, for scheduled sends and undated dead letters.
            send_timeout_s: Seconds one send may wait (``QUEUE_READ_TIMEOUT_S``); None: the SDK's default.
            sleep: Waits the given seconds (a dead-letter removal's pause before it tries again).
        """
        self._sleep = sleep
        self._client = client
        self._send_timeout_s = send_timeout_s
        self._admin = admin
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._queues: dict[str, ServiceBusQueue] = {}
        self._dead_letter_receivers: dict[str, ReceiverLike] = {}
        self._lock = threading.Lock()
        self._peek_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ServiceBusQueueFactory(namespace={self._client.fully_qualified_namespace!r}, "
            f"queues={len(self._queues)})"
        )

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        admin_connection_string: str | None = None,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        send_timeout_s: float | None = None,
    ) -> ServiceBusQueueFactory:
        """A factory for a connection string (the emulator's, with ``UseDevelopmentEmulator=true``).

        Args:
            connection_string: The namespace's connection string.
            admin_connection_string: Connection string of the administration endpoint (the emulator
                serves it on another port, 5300); None leaves :meth:`ServiceBusQueue.approximate_count`
                unavailable.
            retry_total: SDK retries of a failed operation.
            max_wait_s: Seconds a receive waits for the first message.
            send_timeout_s: Seconds one send may wait; None: the SDK's default.
        """
        client = ServiceBusClient.from_connection_string(connection_string, retry_total=retry_total)
        admin = (
            None
            if admin_connection_string is None
            else ServiceBusAdministrationClient.from_connection_string(admin_connection_string)
        )
        return cls(client, admin=admin, max_wait_s=max_wait_s, send_timeout_s=send_timeout_s)

    @classmethod
    def from_namespace(
        cls,
        fully_qualified_namespace: str,
        credential: TokenCredential,
        *,
        admin: bool = True,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        send_timeout_s: float | None = None,
    ) -> ServiceBusQueueFactory:
        """A factory for ``<namespace>.servicebus.windows.net`` with an Entra ID credential.

        Args:
            fully_qualified_namespace: The namespace's host name.
            credential: Any ``TokenCredential``, normally ``DefaultAzureCredential`` / a managed
                identity (azure-identity is the caller's import, not this module's).
            admin: Also create an administration client for approximate counts; reading runtime
                properties needs management rights (``Azure Service Bus Data Owner``), not just the
                sender and receiver roles.
            retry_total: SDK retries of a failed operation.
            max_wait_s: Seconds a receive waits for the first message.
            send_timeout_s: Seconds one send may wait; None: the SDK's default.
        """
        client = ServiceBusClient(fully_qualified_namespace, credential, retry_total=retry_total)
        admin_client = (
            ServiceBusAdministrationClient(fully_qualified_namespace, credential) if admin else None
        )
        return cls(client, admin=admin_client, max_wait_s=max_wait_s, send_timeout_s=send_timeout_s)

    def queue(self, name: str) -> ServiceBusQueue:
        """The queue ``name``; the same object on every call. The queue must already exist.

        Raises:
            ValueError: ``name`` is not a valid Service Bus queue name.
        """
        validate_queue_name(name)
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = ServiceBusQueue(
                    name,
                    self._client,
                    admin=self._admin,
                    max_wait_s=self._max_wait_s,
                    clock=self._clock,
                    send_timeout_s=self._send_timeout_s,
                )
                self._queues[name] = queue
            return queue

    def redeliver(
        self, queue_name: str, message: ReceivedMessageLike, *, delivery: int, delay_s: float
    ) -> None:
        """:meth:`ServiceBusQueue.redeliver` on the queue ``queue_name``."""
        self.queue(queue_name).redeliver(message, delivery=delivery, delay_s=delay_s)

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Peek at up to ``max_messages`` dead letters of queue ``name``, oldest first.

        Reads the queue's dead-letter sub-queue from its first sequence number (a receiver's peek
        otherwise resumes after the last message it peeked). Service Bus keeps no dead-lettering time
        that this SDK exposes: ``dead_lettered_at`` is the dead letter's enqueued time, else now.

        Raises:
            ValueError: invalid name, or ``max_messages`` < 1.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request.
        """
        validate_queue_name(name)
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        with self._peek_lock:
            receiver = self._dead_letter_receiver(name)
            try:
                peeked = receiver.peek_messages(max_messages, sequence_number=1)
            except AzureError as error:
                raise translate_error(error, "dead_letters", name) from error
        return [self._dead_letter(message, name) for message in peeked]

    def _dead_letter_receiver(self, name: str) -> ReceiverLike:
        """The PeekLock receiver of ``name``'s dead-letter sub-queue; call under ``_peek_lock``."""
        receiver = self._dead_letter_receivers.get(name)
        if receiver is None:
            receiver = self._client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
            self._dead_letter_receivers[name] = receiver
        return receiver

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """A page of the dead letters of ``name`` by sequence number, peeked (nothing changes); the
        continuation is the next sequence number.

        Raises:
            ValueError: invalid name, ``max_messages`` < 1, or a continuation that is not a sequence number.
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        if continuation is not None and not (continuation.isascii() and continuation.isdigit()):
            raise ValueError("not a continuation of this dead-letter queue")
        start = int(continuation) if continuation is not None else 1
        with self._peek_lock:
            receiver = self._dead_letter_receiver(name)
            try:
                peeked = receiver.peek_messages(max_messages, sequence_number=start)
            except AzureError as error:
                raise translate_error(error, "dead_letter_page", name) from error
        items = [self._dead_letter(message, name) for message in peeked]
        last = peeked[-1].sequence_number if peeked else None
        more = len(peeked) >= max_messages and last is not None
        return DeadLetterPage(items, str(last + 1) if more and last is not None else None)

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """Remove the dead letters of ``name`` that ``select`` picks: found by peeking (which locks
        nothing), then settled by sequence number (see
        :meth:`orderflow.queues.base.DeadLetterQueues.remove_dead_letters`).

        A pass (:meth:`_settle_pass`) receives under PeekLock, completes each target once ``before``
        returned and abandons the rest as soon as it has met every target or gone past the last. A target
        the pass did not receive was held by another operation, or is gone: a peek at its sequence number
        tells which, and one still there is tried again after a short random pause, for at most
        :data:`DEAD_LETTER_RETRY_S` seconds. An abandon adds one to a dead letter's delivery count; the
        dead-letter sub-queue has no delivery limit. Reading (:meth:`dead_letter_page`) peeks, which
        holds nothing, so it is always whole.

        Raises:
            ValueError: invalid name.
            DeadLettersBusy: a target was still there, held by another operation, when the time was up
                (what was removed before stays removed).
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        wanted = self._peek_targets(name, select, most)
        removed: list[DeadLetter] = []
        deadline = time.monotonic() + DEAD_LETTER_RETRY_S
        pauses = RetryPauses(self._sleep)  # two removers must not retry in step
        while wanted:
            self._settle_pass(name, wanted, removed, before)
            if wanted:
                present = self._present(name, set(wanted))
                wanted = {seq: dead for seq, dead in wanted.items() if seq in present}
            if not wanted:
                return removed
            if time.monotonic() >= deadline:
                # Still there and never received: another operation kept it; "not removed" would be untrue.
                raise DeadLettersBusy(name)
            pauses.wait()
        return removed

    def _peek_targets(
        self, name: str, select: Callable[[DeadLetter], bool], most: int | None
    ) -> dict[int, DeadLetter]:
        """The first ``most`` (None: all) dead letters of ``name`` that ``select`` picks, by sequence
        number, among the first :data:`MAX_DEAD_LETTER_SCAN`: peeked, so locked ones are found too and
        none is locked by this."""
        targets: dict[int, DeadLetter] = {}
        start, seen = 1, 0
        while seen < MAX_DEAD_LETTER_SCAN and (most is None or len(targets) < most):
            with self._peek_lock:
                try:
                    peeked = self._dead_letter_receiver(name).peek_messages(32, sequence_number=start)
                except AzureError as error:
                    raise translate_error(error, "remove_dead_letters", name) from error
            for message in peeked[: MAX_DEAD_LETTER_SCAN - seen]:
                dead = self._dead_letter(message, name)
                if message.sequence_number and (most is None or len(targets) < most) and select(dead):
                    targets[message.sequence_number] = dead
            seen += len(peeked)
            if not peeked or peeked[-1].sequence_number is None:
                break
            start = peeked[-1].sequence_number + 1
        return targets

    def _present(self, name: str, sequence_numbers: set[int]) -> set[int]:
        """Which of ``sequence_numbers`` the dead-letter sub-queue of ``name`` still holds, peeked."""
        present: set[int] = set()
        start, last = min(sequence_numbers), max(sequence_numbers)
        while start <= last:
            with self._peek_lock:
                try:
                    peeked = self._dead_letter_receiver(name).peek_messages(32, sequence_number=start)
                except AzureError as error:
                    raise translate_error(error, "remove_dead_letters", name) from error
            numbers = [m.sequence_number for m in peeked if m.sequence_number is not None]
            present |= sequence_numbers.intersection(numbers)
            if not numbers:
                break
            start = max(numbers) + 1
        return present

    def _settle_pass(
        self,
        name: str,
        wanted: dict[int, DeadLetter],
        removed: list[DeadLetter],
        before: Callable[[DeadLetter], None] | None,
    ) -> None:
        """Receive dead letters of ``name`` under PeekLock until every one of ``wanted`` (by sequence
        number) was met, one beyond the last was, the receive ran dry or :data:`MAX_DEAD_LETTER_SCAN`
        were received; complete each wanted one once ``before`` returned (moving it from ``wanted`` to
        ``removed``), and abandon every other one received, also when ``before`` raises."""
        held: list[ServiceBusReceivedMessage] = []
        with self._peek_lock:
            receiver = self._dead_letter_receiver(name)
            try:
                seen = 0
                while wanted and seen < MAX_DEAD_LETTER_SCAN:
                    batch = receiver.receive_messages(max_message_count=32, max_wait_time=self._max_wait_s)
                    if not batch:
                        break
                    seen += len(batch)
                    held += batch  # abandoned in the end unless completed
                    last = max(wanted)
                    for message in batch:
                        seq = message.sequence_number
                        if seq is None or seq not in wanted:
                            continue
                        dead = self._dead_letter(message, name)
                        if before is not None:
                            before(dead)
                        receiver.complete_message(message)
                        held.remove(message)
                        removed.append(dead)
                        del wanted[seq]
                    if any((m.sequence_number or 0) > last for m in batch):
                        break  # past every target: one not met is held by another operation, or gone
            except AzureError as error:
                raise translate_error(error, "remove_dead_letters", name) from error
            finally:
                for message in held:
                    try:
                        receiver.abandon_message(message)
                    except AzureError:  # its lock runs out and it comes back
                        logger.warning("dead letter %s of %s not released", message.sequence_number, name)

    def _dead_letter(self, message: ServiceBusReceivedMessage, source_queue: str) -> DeadLetter:
        message_id = _message_id(message)
        return DeadLetter(
            message_id=message_id,
            body=decode_body(message.body, message_id=message_id),
            reason=message.dead_letter_reason or "",
            description=message.dead_letter_error_description or "",
            source_queue=source_queue,
            delivery_count=_delivery_count(message),
            dead_lettered_at=message.enqueued_time_utc or self._clock(),
            dead_letter_id=str(message.sequence_number or ""),
            correlation_id=None if message.correlation_id is None else str(message.correlation_id),
            reply_to=None if message.reply_to is None else str(message.reply_to),
        )

    def close(self) -> None:
        """Close every queue's sender and receiver, the administration client and the client."""
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        with self._peek_lock:
            receivers, self._dead_letter_receivers = list(self._dead_letter_receivers.values()), {}
        for queue in queues:
            queue.close()
        for receiver in receivers:
            receiver.close()
        if self._admin is not None:
            self._admin.close()
        self._client.close()

    def __enter__(self) -> ServiceBusQueueFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

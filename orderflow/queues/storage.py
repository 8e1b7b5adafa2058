"""Azure Storage queue adapter of the message-queue port (Azurite locally, a storage account on Azure).

Storage queues assign their own message ids and carry nothing but text, so every message is wrapped in
a small JSON envelope that carries the sender's stable id (docs/design.md §3.7)::

    {"messageId": "...", "correlationId": "..." | null, "body": "...", "sentAt": "2024-05-01T12:00:00.000Z"}

Encoding policy: the envelope is sent as plain text (the SDK's default ``NoEncodePolicy``, no base64).
The service wraps message text in XML, so the JSON is made XML-safe: ``json`` already escapes control
characters, and the few characters XML 1.0 forbids that JSON leaves alone (lone surrogates, U+FFFE,
U+FFFF) are written as ``\\uXXXX`` escapes. Other non-ASCII text stays UTF-8, which is compact. Azurite
accepts a message containing U+FFFE and then fails every receive and peek of that queue with a 500, so
this escaping is not cosmetic.

A message whose text is not an envelope (somebody wrote raw text to the queue) is still delivered, with
the storage id as ``message_id`` and the raw text as ``body``, so the consumer can dead-letter it.

Dead letters go to ``<queue>-deadletter`` as a JSON record (see :func:`encode_dead_letter`). Storage
messages are limited to 64 KiB; :data:`MAX_ENVELOPE_BYTES` keeps :data:`DEAD_LETTER_RESERVE_BYTES` of that
free so that every accepted message can later be dead-lettered with its body intact.

The wire helpers in this module are pure functions; :mod:`orderflow.queues.memory` uses them too, so that
both adapters behave the same byte for byte.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential, TokenCredential
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.queue import ExponentialRetry, QueueClient, QueueMessage, QueueServiceClient

from orderflow.errors import (
    ConcurrencyConflict,
    DeadLettersBusy,
    OrderflowError,
    PermanentError,
    TransientError,
)
from orderflow.http_transport import transport_for
from orderflow.queues.base import (
    MAX_DEAD_LETTER_SCAN,
    DeadLetter,
    DeadLetterPage,
    ReceivedMessage,
    RetryPauses,
    dead_letter_queue_name,
)

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024
"""Storage-queue limit on a message's text, in UTF-8 bytes (Azurite checks exactly this)."""

DEAD_LETTER_RESERVE_BYTES = 2048
"""Bytes of every message kept free for the extra fields of its dead-letter record."""

MAX_ENVELOPE_BYTES = MAX_MESSAGE_BYTES - DEAD_LETTER_RESERVE_BYTES
"""Largest envelope :meth:`StorageQueue.send` accepts, in UTF-8 bytes."""

MAX_VISIBILITY_S = 7 * 24 * 3600
"""Longest visibility timeout (lock or delay) Storage queues allow: 7 days, in seconds."""

MAX_RECEIVE_BATCH = 32
"""Most messages one Storage receive or peek request returns."""

MAX_ID_BYTES = 256
"""Most UTF-8 bytes of a message or correlation id kept in a dead-letter record."""

MAX_REASON_BYTES = 256
MAX_DESCRIPTION_BYTES = 1024

DEAD_LETTER_SCAN_LOCK_S = 30
"""Seconds a dead letter received by a page read or a removal stays hidden if it is not released
(the reader crashed): long enough for a re-send, short enough for another operator to retry."""

DEAD_LETTER_SCAN_RETRY_S = 10.0
"""How long a dead-letter page read or removal keeps scanning again while other scans hide part of the
queue, for an empty queue (seconds); :func:`scan_budget_s` adds time per message. Then it raises
:class:`~orderflow.errors.DeadLettersBusy`; docs/operations.md#dead-letters."""

DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S = 0.05
"""Seconds of retry added per dead letter the queue holds: another scan's pass holds the queue for a time
that grows with its size (a receive per 32 messages, a release per message)."""

DEAD_LETTER_SCAN_MAX_RETRY_S = 25.0
"""The most :func:`scan_budget_s` gives (seconds): less than a crashed reader hides its messages for
(:data:`DEAD_LETTER_SCAN_LOCK_S`), and well within an HTTP request's time."""

# Dead-lettering first re-takes the lock for this long (seconds): it proves the lock is still ours and
# leaves time for the two writes that follow.
DEAD_LETTER_LOCK_S = 30

DEFAULT_RETRY_TOTAL = 2
DEFAULT_CONNECTION_TIMEOUT_S = 5
DEFAULT_READ_TIMEOUT_S = 10

_QUEUE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# Characters XML 1.0 forbids that json.dumps(ensure_ascii=False) leaves unescaped (it escapes C0 itself).
_XML_INVALID = re.compile("[\ud800-\udfff\ufffe\uffff]")
_LOCK_LOST_CODES = frozenset({"PopReceiptMismatch", "MessageNotFound"})


@dataclass(frozen=True)
class PopReceipt:
    """The lock token of a message received from a Storage (or in-memory) queue.

    Attributes:
        message_id: The id the queue assigned to the message (not the sender's id).
        pop_receipt: The receipt of the latest receive or visibility update; only the newest works.
    """

    message_id: str
    pop_receipt: str = ""

    def __repr__(self) -> str:
        return f"PopReceipt(message_id={self.message_id!r})"


# --- wire format -------------------------------------------------------------------------------------


def _dumps(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # Inside JSON these characters can only occur in strings, where \uXXXX is a valid escape.
    return _XML_INVALID.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def encode_envelope(body: str, *, message_id: str, correlation_id: str | None, sent_at: datetime) -> str:
    """Wrap a body in the wire envelope.

    Args:
        body: The message body (normally JSON text).
        message_id: The sender's stable id; must not be empty.
        correlation_id: Optional correlation id (the order id).
        sent_at: When the message was sent (UTC).

    Returns:
        The envelope text, XML-safe, at most :data:`MAX_ENVELOPE_BYTES` UTF-8 bytes.

    Raises:
        ValueError: ``message_id`` is empty, or the envelope is larger than :data:`MAX_ENVELOPE_BYTES`.
    """
    if not message_id:
        raise ValueError("message_id must not be empty")
    text = _dumps(
        {
            "messageId": message_id,
            "correlationId": correlation_id,
            "body": body,
            "sentAt": _timestamp(sent_at),
        }
    )
    size = _utf8_size(text)
    if size > MAX_ENVELOPE_BYTES:
        raise ValueError(
            f"message {message_id!r} is too large for a Storage queue: its envelope is {size} bytes, "
            f"the limit is {MAX_ENVELOPE_BYTES} bytes (64 KiB less {DEAD_LETTER_RESERVE_BYTES} bytes "
            "reserved for dead-lettering); store the payload elsewhere and send a reference"
        )
    return text


def decode_message(
    text: str, *, transport_id: str, delivery_count: int, enqueued_at: datetime | None, lock_token: Any
) -> ReceivedMessage:
    """Unwrap an envelope into a :class:`ReceivedMessage`; deliver anything else as raw text.

    Never raises on bad content: a text that is not an envelope becomes a message whose ``message_id``
    is ``transport_id`` and whose ``body`` is the raw text, for the consumer to dead-letter.

    Args:
        text: The message text as stored in the queue.
        transport_id: The id the queue assigned to the message.
        delivery_count: The queue's dequeue count.
        enqueued_at: When the queue accepted the message, if known; else the envelope's ``sentAt``.
        lock_token: The settlement handle to attach.

    Returns:
        The received message.
    """
    envelope = _parse_object(text)
    if envelope is None or not _is_envelope(envelope):
        logger.warning("message %s is not an orderflow envelope; delivering its raw text", transport_id)
        return ReceivedMessage(
            message_id=transport_id,
            body=text,
            delivery_count=delivery_count,
            enqueued_at=enqueued_at,
            lock_token=lock_token,
            transport_id=transport_id,
        )
    return ReceivedMessage(
        message_id=envelope["messageId"],
        body=envelope["body"],
        delivery_count=delivery_count,
        correlation_id=envelope.get("correlationId"),
        enqueued_at=enqueued_at or _parse_timestamp(envelope.get("sentAt")),
        lock_token=lock_token,
        transport_id=transport_id,
    )


def _is_envelope(value: dict[str, Any]) -> bool:
    message_id, correlation_id = value.get("messageId"), value.get("correlationId")
    return (
        isinstance(message_id, str)
        and bool(message_id)
        and isinstance(value.get("body"), str)
        and (correlation_id is None or isinstance(correlation_id, str))
    )


def _parse_object(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds, or None for anything else. Never raises: one poison message
    (nested past the recursion limit, an integer too long to convert) must not fail a whole receive."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, int digit limits
        return None
    return value if isinstance(value, dict) else None


def _truncate_to_fit(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose JSON string form is at most ``max_bytes`` UTF-8 bytes."""

    def fits(length: int) -> bool:
        return _utf8_size(_dumps(text[:length])) <= max_bytes

    if fits(len(text)):
        return text
    low, high = 0, len(text)  # fits(low) is true (or max_bytes < 2), fits(high) is false
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return text[:low]


def encode_dead_letter(
    message: ReceivedMessage,
    *,
    reason: str,
    description: str,
    source_queue: str,
    dead_lettered_at: datetime,
) -> str:
    """Build the dead-letter record of a message.

    The record is ``{"messageId", "correlationId", "reason", "description", "sourceQueue",
    "deliveryCount", "deadLetteredAt", "body"}``. Reason and description are truncated to
    :data:`MAX_REASON_BYTES` and :data:`MAX_DESCRIPTION_BYTES`. A message sent through this module
    always fits with its body intact (see :data:`DEAD_LETTER_RESERVE_BYTES`); only raw text written by
    someone else close to the 64 KiB limit can need its body cut, which is logged as an error and noted
    in the description.

    Args:
        message: The message to dead-letter.
        reason: Short machine-readable reason, e.g. ``InvalidMessage``.
        description: Human-readable detail.
        source_queue: The queue the message came from.
        dead_lettered_at: When it was dead-lettered (UTC).

    Returns:
        The record text, XML-safe, at most :data:`MAX_MESSAGE_BYTES` UTF-8 bytes.
    """
    record: dict[str, Any] = {
        # Ids come from the sender: a raw message can carry ids as large as the queue's limit.
        "messageId": _truncate_to_fit(message.message_id, MAX_ID_BYTES),
        "correlationId": (
            None if message.correlation_id is None else _truncate_to_fit(message.correlation_id, MAX_ID_BYTES)
        ),
        "reason": _truncate_to_fit(reason, MAX_REASON_BYTES),
        "description": _truncate_to_fit(description, MAX_DESCRIPTION_BYTES),
        "sourceQueue": source_queue,
        "deliveryCount": message.delivery_count,
        "deadLetteredAt": _timestamp(dead_lettered_at),
        "body": message.body,
    }
    text = _dumps(record)
    size = _utf8_size(text)
    if size <= MAX_MESSAGE_BYTES:
        return text
    body_size = _utf8_size(message.body)
    record["description"] += f" [body truncated: it was {body_size} bytes]"
    record["body"] = ""
    room = MAX_MESSAGE_BYTES - _utf8_size(_dumps(record)) + 2  # + the two quotes of the empty body
    record["body"] = _truncate_to_fit(message.body, room)
    logger.error(
        "dead letter of message %s from %s is too large (%s bytes); its body was truncated",
        message.message_id,
        source_queue,
        size,
    )
    return _dumps(record)


def decode_dead_letter(
    text: str, *, transport_id: str, source_queue: str, delivery_count: int, enqueued_at: datetime | None
) -> DeadLetter:
    """Parse a dead-letter record; never raises.

    A text that is not a record (written to the dead-letter queue by someone else) is returned with
    reason ``UnreadableDeadLetter`` and the raw text as body.

    Args:
        text: The message text read from the dead-letter queue.
        transport_id: The id the dead-letter queue assigned to it.
        source_queue: The queue whose dead letters these are (used if the record does not say).
        delivery_count: Used if the record does not say.
        enqueued_at: When the dead-letter queue accepted it, used if the record does not say.

    Returns:
        The dead letter.
    """
    record = _parse_object(text) or {}
    message_id = record.get("messageId")
    body = record.get("body")
    reason = record.get("reason")
    if not (isinstance(message_id, str) and isinstance(body, str) and isinstance(reason, str)):
        return DeadLetter(
            message_id=transport_id,
            body=text,
            reason="UnreadableDeadLetter",
            description="the dead-letter queue holds a message that is not a dead-letter record",
            source_queue=source_queue,
            delivery_count=delivery_count,
            dead_lettered_at=enqueued_at or datetime.now(UTC),
            dead_letter_id=transport_id,
        )
    description = record.get("description")
    queue = record.get("sourceQueue")
    count = record.get("deliveryCount")
    correlation = record.get("correlationId")
    return DeadLetter(
        message_id=message_id,
        body=body,
        reason=reason,
        description=description if isinstance(description, str) else "",
        source_queue=queue if isinstance(queue, str) else source_queue,
        delivery_count=count if isinstance(count, int) and not isinstance(count, bool) else delivery_count,
        dead_lettered_at=_parse_timestamp(record.get("deadLetteredAt")) or enqueued_at or datetime.now(UTC),
        dead_letter_id=transport_id,
        correlation_id=correlation if isinstance(correlation, str) else None,
    )


def dead_letter_key(dead: DeadLetter) -> str:
    """The continuation of a page of Storage (or in-memory) dead letters ending with ``dead``: its time
    and id, so the next page starts after it even if it was removed meanwhile."""
    return f"{_timestamp(dead.dead_lettered_at)}|{dead.dead_letter_id}"


def page_of_dead_letters(
    dead_letters: list[DeadLetter], *, max_messages: int, continuation: str | None
) -> DeadLetterPage:
    """The page of ``dead_letters`` (any order) after ``continuation``, oldest first.

    Raises:
        ValueError: ``max_messages`` < 1, or ``continuation`` is not one :func:`dead_letter_key` gave.
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, got {max_messages}")
    if continuation is not None and (
        "|" not in continuation or _parse_timestamp(continuation.partition("|")[0]) is None
    ):
        raise ValueError("not a continuation of this dead-letter queue")
    ordered = sorted(dead_letters, key=dead_letter_key)
    after = [dead for dead in ordered if continuation is None or dead_letter_key(dead) > continuation]
    items = after[:max_messages]
    more = len(after) > max_messages
    return DeadLetterPage(items, dead_letter_key(items[-1]) if more else None)


def validate_queue_name(name: str) -> None:
    """Check a queue name against the Storage rules, including the name of its dead-letter queue.

    Raises:
        ValueError: ``name`` is not 3-63 lowercase letters, digits and single inner hyphens, or is too
            long to have a ``<name>-deadletter`` queue.
    """
    for candidate in (name, dead_letter_queue_name(name)):
        if not (3 <= len(candidate) <= 63 and _QUEUE_NAME.fullmatch(candidate)):
            raise ValueError(
                f"invalid queue name {candidate!r}: use 3-63 lowercase letters, digits and single inner "
                "hyphens (a queue's name plus '-deadletter' must fit too)"
            )


def visibility_seconds(seconds: float, *, minimum: int, what: str) -> int:
    """Round a lock or delay up to the whole seconds Storage queues accept.

    Args:
        seconds: The requested duration, in seconds.
        minimum: The smallest allowed value (1 for a lock, 0 for a delay), in seconds.
        what: The argument's name, for the error message.

    Returns:
        ``seconds`` rounded up, at least ``minimum``.

    Raises:
        ValueError: ``seconds`` is negative, not finite, or longer than 7 days.
    """
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_VISIBILITY_S:
        raise ValueError(f"{what} must be between 0 and {MAX_VISIBILITY_S} seconds (7 days), got {seconds}")
    return max(minimum, math.ceil(seconds))


def receive_batch_size(max_messages: int) -> int:
    """``max_messages`` capped at :data:`MAX_RECEIVE_BATCH`.

    Raises:
        ValueError: ``max_messages`` is less than 1.
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, got {max_messages}")
    return min(max_messages, MAX_RECEIVE_BATCH)


def lock_of(message: ReceivedMessage) -> PopReceipt:
    """The :class:`PopReceipt` of a received message.

    Raises:
        ValueError: the message was not received from a Storage or in-memory queue (no pop receipt).
    """
    if not isinstance(message.lock_token, PopReceipt):
        raise ValueError(f"message {message.message_id!r} carries no pop receipt; was it received?")
    return message.lock_token


def _message_count(client: QueueClient) -> int:
    """The messages of a queue, hidden ones included (Storage's approximate count).

    Raises:
        AzureError: the service failed.
    """
    return client.get_queue_properties().approximate_message_count or 0


def scan_budget_s(count: int) -> float:
    """How long a scan of a dead-letter queue holding ``count`` messages may take turns and passes
    (seconds): :data:`DEAD_LETTER_SCAN_RETRY_S` plus :data:`DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S` per
    message, at most :data:`DEAD_LETTER_SCAN_MAX_RETRY_S`."""
    grown = DEAD_LETTER_SCAN_RETRY_S + max(count, 0) * DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S
    return min(grown, DEAD_LETTER_SCAN_MAX_RETRY_S)


class _ScanTurns:
    """First-come, first-served turns at scanning one queue, within this process.

    Two scans of one dead-letter queue hide each other's messages, so both would retry; in one process
    they need not collide at all, and a fair order keeps a looping reader from starving a removal.
    Scans by other processes still collide, which the passes' retries handle.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._lines: dict[str, deque[object]] = {}

    @contextmanager
    def turn(self, key: str, timeout_s: float) -> Iterator[bool]:
        """Wait up to ``timeout_s`` seconds for the turn at ``key``; yields whether it came (the turn
        is held until the block ends)."""
        me = object()
        with self._changed:
            line = self._lines.setdefault(key, deque())
            line.append(me)
            got = self._changed.wait_for(lambda: line[0] is me, max(timeout_s, 0.0))
        try:
            yield got
        finally:
            with self._changed:
                line.remove(me)
                if not line:
                    del self._lines[key]
                self._changed.notify_all()


_SCAN_TURNS = _ScanTurns()


# --- SDK errors ----------------------------------------------------------------------------------------


def _error_code(error: AzureError) -> str:
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _is_missing_queue(error: AzureError) -> bool:
    """Whether ``error`` says the queue does not exist (what a dead-letter queue never written is)."""
    return isinstance(error, HttpResponseError) and _error_code(error) == "QueueNotFound"


def _is_lock_lost(error: AzureError) -> bool:
    return isinstance(error, HttpResponseError) and _error_code(error) in _LOCK_LOST_CODES


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
        return PermanentError(_error_code(error) or f"http_{status}", text)
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
            ValueError: the envelope is larger than :data:`MAX_ENVELOPE_BYTES`, or ``delay_s`` is out of
                range.
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
                    _error_code(error),
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
            return _message_count(self._client)
        except AzureError as error:
            raise translate_error(error, "approximate_count", self.name) from error


class StorageQueueFactory:
    """Creates :class:`StorageQueue` objects by name, creating each queue on first use when its credential
    may (an account key or identity); with a SAS it only opens queues that exist.

    The SDK's retry policy is cut to ``retry_total`` quick retries (default 2, about 1 s then 3 s)
    instead of its default of three retries 15-24 s apart: consumer loops retry on their own and the
    order's retry budget is end-to-end (docs/design.md §2), so a long hidden retry in the SDK would only hold
    a message lock and a worker thread while the caller cannot react. Transport timeouts are short for
    the same reason (a paused emulator must surface as a :class:`TransientError`, not a minute's hang).

    Use :meth:`from_connection_string` locally (Azurite) and :meth:`from_account_url` with a managed
    identity credential on Azure; a client holding one SAS per queue uses :meth:`from_queue_urls`.
    """

    messaging_system = "azure_storage_queues"
    """The ``messaging.system`` of these queues (OpenTelemetry names no value for Storage queues)."""

    def __init__(
        self,
        service: QueueServiceClient | None,
        *,
        create_queues: bool = True,
        queue_clients: Mapping[str, QueueClient] | None = None,
        creatable: Callable[[str], bool] | None = None,
    ) -> None:
        """Wrap a configured service client, or fixed queue clients (see the constructors).

        Args:
            service: The queue service, or None when only ``queue_clients`` may be used.
            create_queues: Create a queue on its first use. False with a SAS, which may not create one.
            queue_clients: Clients of the only queues this factory opens (each with its own SAS).
            creatable: Which queues may be created on first use (None: every one). Another queue is
                opened as it is: a send to it fails (``PermanentError``) if it does not exist, so no
                queue comes into being because a record or a message named it.
        """
        self._service = service
        self._create_queues = create_queues
        self._creatable = creatable
        self._clients: dict[str, QueueClient] = dict(queue_clients or {})
        self._ensured: set[str] = set()  # queues this factory created (or found existing)
        self._fixed = queue_clients is not None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self._service is None:
            return f"StorageQueueFactory(queues={sorted(self._clients)})"
        return f"StorageQueueFactory(account={self._service.account_name!r})"

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        creatable: Callable[[str], bool] | None = None,
    ) -> StorageQueueFactory:
        """A factory for the account of a connection string (Azurite's, locally).

        Args:
            connection_string: A storage connection string with a ``QueueEndpoint`` or account name,
                with an account key or a ``SharedAccessSignature`` (then queues are never created:
                they must exist, and the SAS decides what may be done with each).
            retry_total: SDK retries of a failed request.
            connection_timeout_s: Seconds to wait for a connection.
            read_timeout_s: Seconds to wait for a response.
            creatable: Which queues may be created on first use (see the constructor).
        """
        service = QueueServiceClient.from_connection_string(
            connection_string,
            **_client_options(
                retry_total, connection_timeout_s, read_timeout_s, url=queue_endpoint(connection_string)
            ),
        )
        fields = {
            part.split("=", 1)[0].strip().lower() for part in connection_string.split(";") if "=" in part
        }
        sas_only = "sharedaccesssignature" in fields and "accountkey" not in fields
        return cls(service, create_queues=not sas_only, creatable=creatable)

    @classmethod
    def from_queue_urls(
        cls,
        urls: Mapping[str, str],
        *,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> StorageQueueFactory:
        """A factory of exactly the queues in ``urls``, each reached with the SAS in its URL.

        What a registered client holds locally (docs/clients.md): a SAS to add to its inbound queue and
        one to read and process its reply queue. No queue is created; any other queue name is refused,
        and so is dead-lettering (the client holds no SAS for a dead-letter queue).

        Args:
            urls: Queue name -> ``https://<account>/<queue>?<sas>`` (locally ``http://127.0.0.1:.../``).
            retry_total / connection_timeout_s / read_timeout_s: As for :meth:`from_connection_string`.
        """
        clients = {
            name: QueueClient.from_queue_url(
                url,
                message_encode_policy=None,
                message_decode_policy=None,
                **_client_options(retry_total, connection_timeout_s, read_timeout_s, url=url),
            )
            for name, url in urls.items()
        }
        return cls(None, create_queues=False, queue_clients=clients)

    @classmethod
    def from_account_url(
        cls,
        account_url: str,
        credential: TokenCredential | AzureNamedKeyCredential | AzureSasCredential,
        *,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> StorageQueueFactory:
        """A factory for ``https://<account>.queue.core.windows.net`` with a credential.

        Args:
            account_url: The queue service endpoint.
            credential: Normally a ``DefaultAzureCredential`` / managed identity (shared keys are disabled).
            retry_total: SDK retries of a failed request.
            connection_timeout_s: Seconds to wait for a connection.
            read_timeout_s: Seconds to wait for a response.
        """
        service = QueueServiceClient(
            account_url,
            credential=credential,
            **_client_options(retry_total, connection_timeout_s, read_timeout_s, url=account_url),
        )
        return cls(service)

    def queue(self, name: str) -> StorageQueue:
        """The queue ``name``, created if missing (its dead-letter queue is created on first use).

        Raises:
            ValueError: ``name`` is not a valid queue name (see :func:`validate_queue_name`).
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused to create the queue.
        """
        validate_queue_name(name)
        client = self._client(name)
        return StorageQueue(
            name,
            client,
            # The dead-letter queue of a queue that may be created may be created too, on first use.
            dead_letter_client=lambda: self._client(
                dead_letter_queue_name(name), create=self._may_create(name)
            ),
        )

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Peek at up to ``max_messages`` (at most 32) dead letters of queue ``name``, oldest first.

        Raises:
            ValueError: invalid name, or ``max_messages`` < 1.
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request.
        """
        validate_queue_name(name)
        batch = receive_batch_size(max_messages)
        client = self._client(dead_letter_queue_name(name), create=False)
        try:
            peeked = client.peek_messages(max_messages=batch)
        except AzureError as error:
            if _is_missing_queue(error):
                return []  # nothing was ever dead-lettered there
            raise translate_error(error, "dead_letters", dead_letter_queue_name(name)) from error
        return [
            decode_dead_letter(
                message.content or "",
                transport_id=message.id,
                source_queue=name,
                delivery_count=message.dequeue_count or 0,
                enqueued_at=message.inserted_on,
            )
            for message in peeked
        ]

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """A page of the dead letters of ``name``, oldest first (by dead-lettering time, then id).

        Storage peeks only the first 32 messages of a queue: when they are all the queue holds (its
        message count, hidden ones included, says so), the page comes from one peek and changes nothing.
        Otherwise the queue is read by :meth:`_scan_dead_letters`, which receives it (each message hidden
        until the pass ends) and releases what it received at once; their dequeue counts grow, which a
        dead letter does not read (its record keeps the delivery count). A dead-letter queue that does
        not exist is an empty page: reading (or removing) dead letters never creates a queue.

        Raises:
            ValueError: invalid name, ``max_messages`` < 1, or a foreign continuation.
            DeadLettersBusy: other scans kept part of the queue hidden for as long as the scan may retry.
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        client = self._client(dead_letter_queue_name(name), create=False)
        try:
            peeked = client.peek_messages(max_messages=MAX_RECEIVE_BATCH)
            count = _message_count(client)
        except AzureError as error:
            if not _is_missing_queue(error):
                raise translate_error(error, "dead_letter_page", dead_letter_queue_name(name)) from error
            peeked, count = [], 0  # nothing was ever dead-lettered there
        whole = count <= len(peeked)
        if whole:
            every = [self._decode_dead_letter(message, name) for message in peeked]
        else:
            every = []

            def keep(dead: DeadLetter) -> bool:
                every.append(dead)
                return False  # read, not removed

            self._scan_dead_letters(name, keep, client=client, count=count, start_pass=every.clear)
        return page_of_dead_letters(every, max_messages=max_messages, continuation=continuation)

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """Receive the dead letters of ``name`` (hidden until the pass ends), delete those ``select``
        picks once ``before`` returned, release the others: see
        :meth:`orderflow.queues.base.DeadLetterQueues.remove_dead_letters`. A message's pop receipt is
        the lock: one held by another remover is not received, so a pass that did not cover the whole
        queue is made again (:meth:`_scan_dead_letters`) and a dead letter another scan hid for a moment
        is still found.

        Raises:
            ValueError: invalid name.
            DeadLettersBusy: no pass covered the queue in time (what was removed before stays removed).
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        client = self._client(dead_letter_queue_name(name), create=False)
        removed: list[DeadLetter] = []

        def visit(dead: DeadLetter) -> bool:
            if (most is not None and len(removed) >= most) or not select(dead):
                return False
            if before is not None:
                before(dead)
            removed.append(dead)
            return True

        self._scan_dead_letters(
            name, visit, client=client, stop=lambda: most is not None and len(removed) >= most
        )
        return removed

    def _decode_dead_letter(self, message: QueueMessage, name: str) -> DeadLetter:
        return decode_dead_letter(
            message.content or "",
            transport_id=message.id,
            source_queue=name,
            delivery_count=message.dequeue_count or 0,
            enqueued_at=message.inserted_on,
        )

    def _scan_dead_letters(
        self,
        name: str,
        visit: Callable[[DeadLetter], bool],
        *,
        client: QueueClient | None = None,
        count: int | None = None,
        stop: Callable[[], bool] = lambda: False,
        start_pass: Callable[[], None] = lambda: None,
    ) -> None:
        """Visit every dead letter of ``name``: in this process's turn (:class:`_ScanTurns`), passes of
        :meth:`_scan_pass` until one covered the queue (or ``stop``), for at most :func:`scan_budget_s`
        of the queue's message count (``count`` when the caller has just read it), turn included.
        ``start_pass`` runs before each pass (a reader forgets what the last one collected).

        Raises:
            DeadLettersBusy: no pass covered the queue in that time (other scans kept part of it hidden).
            TransientError, PermanentError: the service failed.
        """
        dead_letter_queue = dead_letter_queue_name(name)
        client = client or self._client(dead_letter_queue, create=False)
        try:
            count = _message_count(client) if count is None else count
        except AzureError as error:
            if _is_missing_queue(error):
                return  # nothing was ever dead-lettered there, so there is nothing to visit
            raise translate_error(error, "remove_dead_letters", dead_letter_queue) from error
        deadline = time.monotonic() + scan_budget_s(count)
        with _SCAN_TURNS.turn(client.url, deadline - time.monotonic()) as turn:
            if turn and self._scan_passes(
                name, visit, client, stop=stop, start_pass=start_pass, deadline=deadline
            ):
                return
        logger.warning("dead letters of %s not scanned whole: other operations held part of them", name)
        raise DeadLettersBusy(name)

    def _scan_passes(
        self,
        name: str,
        visit: Callable[[DeadLetter], bool],
        client: QueueClient,
        *,
        stop: Callable[[], bool],
        start_pass: Callable[[], None],
        deadline: float,
    ) -> bool:
        """Passes until one is whole (True), or the first that is not once ``deadline`` (monotonic
        seconds) passed (False).

        A pass cannot receive what a concurrent scan holds hidden; the queue's message count (hidden
        ones included) tells such a pass from a whole one, and the pass is tried again after a short
        random pause (two scans that hide each other's targets must not retry in step).
        """
        pauses = RetryPauses()
        while True:
            start_pass()
            if self._scan_pass(name, visit, client, stop):
                return True
            if time.monotonic() >= deadline:
                return False
            pauses.wait()

    def _scan_pass(
        self, name: str, visit: Callable[[DeadLetter], bool], client: QueueClient, stop: Callable[[], bool]
    ) -> bool:
        """Receive dead letters of ``name`` in batches, delete each ``visit`` answers True for, and
        release the rest (visible again at once) when done or when ``visit`` raises.

        Returns:
            Whether the pass is whole: ``stop`` said so, :data:`MAX_DEAD_LETTER_SCAN` messages were met, or
            every message the queue holds was held by this pass when the receives ran dry.
        """
        dead_letter_queue = dead_letter_queue_name(name)
        held: list[QueueMessage] = []
        try:
            seen = 0
            while seen < MAX_DEAD_LETTER_SCAN and not stop():
                batch = list(
                    client.receive_messages(
                        messages_per_page=MAX_RECEIVE_BATCH,
                        max_messages=MAX_RECEIVE_BATCH,
                        visibility_timeout=DEAD_LETTER_SCAN_LOCK_S,
                    )
                )
                if not batch:
                    # Counted while this pass still holds what it received: more means others hold some.
                    return _message_count(client) <= len(held)
                seen += len(batch)
                held += batch  # released in the end unless deleted, even when a visit raises
                for message in batch:
                    if not stop() and visit(self._decode_dead_letter(message, name)):
                        client.delete_message(message.id, message.pop_receipt)
                        held.remove(message)
            return True
        except AzureError as error:
            if not (_is_missing_queue(error) and not held):
                raise translate_error(error, "remove_dead_letters", dead_letter_queue) from error
            return True  # no such queue: nothing was ever dead-lettered there, so there is nothing to visit
        finally:
            self._release(client, held, dead_letter_queue)

    @staticmethod
    def _release(client: QueueClient, held: list[QueueMessage], queue: str) -> None:
        for message in held:
            try:
                client.update_message(message.id, message.pop_receipt, visibility_timeout=0)
            except AzureError as error:  # it comes back when its scan lock runs out
                logger.warning("dead letter %s on %s not released: %s", message.id, queue, _error_code(error))

    def close(self) -> None:
        """Close the service client and every queue client (their HTTP connections)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        if self._service is not None:
            self._service.close()

    def __enter__(self) -> StorageQueueFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _may_create(self, name: str) -> bool:
        return self._create_queues and (self._creatable is None or self._creatable(name))

    def _client(self, name: str, *, create: bool | None = None) -> QueueClient:
        """The client of queue ``name``, the queue created first when ``create`` (None: when
        :meth:`_may_create` says so) and not done before by this factory. Readers of dead letters pass
        False: reading a queue never brings it into being."""
        with self._lock:
            client = self._clients.get(name)
            if client is None:
                if self._service is None or self._fixed:
                    raise PermanentError(
                        "no_credential",
                        f"queue {name!r}: this factory holds credentials for its own queues only",
                    )
                # None, explicitly: the SDK's NoEncodePolicy sends text as-is (see the module docstring).
                client = self._service.get_queue_client(
                    name, message_encode_policy=None, message_decode_policy=None
                )
                self._clients[name] = client
            if name not in self._ensured and (self._may_create(name) if create is None else create):
                try:
                    client.create_queue()
                except ResourceExistsError:
                    pass  # another process (or an earlier run) created it
                except AzureError as error:
                    raise translate_error(error, "create", name) from error
                self._ensured.add(name)
            return client


def queue_service_url(connection_string: str) -> str:
    """The URL of the queue service a connection string names (Azurite's
    ``http://127.0.0.1:10001/devstoreaccount1``, an account's ``https://<account>.queue.core.windows.net/``),
    parsed locally with no network call.

    Raises:
        ValueError: the connection string is malformed.
    """
    return str(QueueServiceClient.from_connection_string(connection_string).url)


def queue_endpoint(connection_string: str) -> str:
    """The ``QueueEndpoint`` of a connection string; '' when it names none (an Azure account name)."""
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "queueendpoint":
            return value.strip()
    return ""


def _client_options(
    retry_total: int, connection_timeout_s: float, read_timeout_s: float, *, url: str = ""
) -> dict[str, Any]:
    # A loopback endpoint (Azurite) gets a session without environment lookups (orderflow.http_transport).
    transport = transport_for(url, connection_timeout_s=connection_timeout_s, read_timeout_s=read_timeout_s)
    return {
        **({"transport": transport} if transport is not None else {}),
        "retry_policy": ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=retry_total, random_jitter_range=1
        ),
        "connection_timeout": connection_timeout_s,
        "read_timeout": read_timeout_s,
    }

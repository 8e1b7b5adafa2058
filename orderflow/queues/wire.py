"""The wire format of Storage queues: the envelope, the dead-letter record and the service's limits.

Storage queues assign their own message ids and carry nothing but text, so every message is wrapped in
a small JSON envelope that carries the sender's stable id (docs/design.md §3.7)::

    {"messageId": "...", "correlationId": "..." | null, "body": "...", "sentAt": "2024-05-01T12:00:00.000Z"}

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

These are pure functions: the in-memory adapter (:mod:`orderflow.queues.memory`) and the local host's
Storage adapter (:mod:`devhost.queues.storage`) both use them, so that they behave the same byte for byte.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orderflow.queues.base import DeadLetter, DeadLetterPage, ReceivedMessage, dead_letter_queue_name

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

_QUEUE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# Characters XML 1.0 forbids that json.dumps(ensure_ascii=False) leaves unescaped (it escapes C0 itself).
_XML_INVALID = re.compile("[\ud800-\udfff\ufffe\uffff]")


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

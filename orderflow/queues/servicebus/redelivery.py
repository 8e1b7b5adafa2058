"""Redelivery with a delay: a scheduled copy of a received message that carries its delivery count, and
the count read back from an original or a copy; the trace context a sent message carries."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage

from orderflow import tracing
from orderflow.queues.servicebus.codec import CONTENT_TYPE, message_id_of, section_bytes
from orderflow.queues.servicebus.sdk import ReceivedMessageLike

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
    return message_id_of(message) if copy is None else copy[0]


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
    data = body if isinstance(body, bytes | str) else b"".join(section_bytes(part) for part in body)
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


def broker_delivery_count(message: ServiceBusReceivedMessage) -> int:
    """Which delivery of the logical message a message received by this adapter is (from 1)."""
    # The AMQP header counts earlier failed deliveries; the port counts deliveries (first = 1).
    return delivery_count(message, this_copy=(message.delivery_count or 0) + 1)

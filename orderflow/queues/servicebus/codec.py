"""What the Service Bus adapter checks and decodes: queue names, durations, dead-letter field lengths and
received bodies and ids."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from orderflow.queues.servicebus.sdk import ReceivedMessageLike

logger = logging.getLogger("orderflow.queues.servicebus")  # the package's one logger, as filters name it

CONTENT_TYPE = "application/json"
"""Content type of every message sent (bodies are JSON envelopes, docs/design.md §5)."""

MAX_DEAD_LETTER_FIELD_CHARS = 4096
"""Longest dead-letter reason or description, in UTF-16 code units.

The limit the .NET and JavaScript Service Bus SDKs enforce before dead-lettering (``Constants.
MaxDeadLetterReasonLength``, ``maxDeadLetterReasonLength``). The Python SDK does not check; staying
within it keeps a dead-letter request from being refused, which would leave the message locked.
"""

_QUEUE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,258}[A-Za-z0-9])?")


def utc_now() -> datetime:
    """The current UTC time."""
    return datetime.now(UTC)


def validate_queue_name(name: str) -> None:
    """Check a Service Bus queue name: 1-260 letters, digits, ``.``, ``-``, ``_`` or ``/``, starting
    and ending with a letter or digit.

    Raises:
        ValueError: ``name`` is not a valid queue name.
    """
    if not _QUEUE_NAME.fullmatch(name):
        raise ValueError(f"invalid Service Bus queue name {name!r}")


def checked_seconds(value: float, *, what: str, allow_zero: bool) -> float:
    """``value``, a duration in seconds, once it is finite and at least 0 (above 0 unless ``allow_zero``).

    Raises:
        ValueError: it is not, naming it ``what``.
    """
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


def section_bytes(section: object) -> bytes:
    """One data section of a body as bytes (text is encoded as UTF-8)."""
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
        data = b"".join(section_bytes(section) for section in body)
    else:
        # An AMQP value body of another type (a map, a number): its text, for the consumer to reject.
        return str(body)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        logger.warning("body of message %s is not UTF-8; undecodable bytes kept escaped", message_id)
        return data.decode("utf-8", errors="surrogateescape")


def message_id_of(message: ReceivedMessageLike) -> str:
    """The message's id as text, or ``sequence-<n>`` when it has none."""
    # AMQP allows a non-string message id (uuid, ulong, binary); another sender may also omit it.
    if message.message_id is not None and str(message.message_id):
        return str(message.message_id)
    return f"sequence-{message.sequence_number}"

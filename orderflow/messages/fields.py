"""What every message shares below the envelope: size and currency limits, the dead-letter reasons a
parse gives, the refusal of invisible characters in text, and the typed fields (order ids and keys,
queue names, clean text)."""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    StringConstraints,
)

MAX_MESSAGE_BYTES = 64 * 1024
"""Largest message body accepted (bytes): the Service Bus Standard tier limit would be 256 KiB;
an order is far smaller, so anything larger is garbage or abuse."""

SUPPORTED_CURRENCIES = frozenset({"USD", "EUR", "GBP"})
"""Currencies the demo payment service settles in."""

# Dead-letter reasons (``InvalidMessage.reason``) of messages refused on receipt.
TOO_LARGE = "TooLarge"
NOT_UTF8 = "NotUtf8"
INVALID_JSON = "InvalidJson"
NOT_AN_OBJECT = "NotAnObject"
MISSING_FIELD = "MissingField"
UNEXPECTED_FIELD = "UnexpectedField"
UNSUPPORTED_SCHEMA_VERSION = "UnsupportedSchemaVersion"
INVALID_FIELD = "InvalidField"
INVALID_VALUE = "InvalidValue"
UNKNOWN_MESSAGE_TYPE = "UnknownMessageType"
RESERVED_REPLY_QUEUE = "ReservedReplyQueue"
REPLY_TO_MISMATCH = "ReplyToMismatch"
REPLY_TO_NOT_REGISTERED = "ReplyToNotRegistered"
OPERATOR_ACTION_NOT_ACCEPTED = "OperatorActionNotAccepted"
REPLY_TO_NOT_A_RESPONSE_QUEUE = "ReplyToNotAResponseQueue"
"""Dead-letter reason of an agent request whose ``replyTo`` is not one of the deployment's response
queues: an agent answers nowhere else, so a forged request cannot make it write to a client's queue."""

PARSE_REASONS = frozenset(
    {
        TOO_LARGE,
        NOT_UTF8,
        INVALID_JSON,
        NOT_AN_OBJECT,
        MISSING_FIELD,
        UNEXPECTED_FIELD,
        UNSUPPORTED_SCHEMA_VERSION,
        INVALID_FIELD,
        INVALID_VALUE,
    }
)
"""Every ``InvalidMessage.reason`` :func:`parse_message` raises (the dead-letter reasons of bad input)."""

SUBMISSION_REASONS = PARSE_REASONS | {
    UNKNOWN_MESSAGE_TYPE,
    OPERATOR_ACTION_NOT_ACCEPTED,
    RESERVED_REPLY_QUEUE,
    REPLY_TO_NOT_REGISTERED,
    REPLY_TO_MISMATCH,
}
"""Every ``InvalidMessage.reason`` a message on a client's inbound queue is dead-lettered with before any
store is touched: the parse reasons, an unknown ``type``, an operator's or reviewer's action (a call to
the operator API, never a message), and a ``replyTo`` that is not the sending client's registered reply
queue."""

_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (dict, "object"),
    (list, "array"),
    (str, "string"),
    (bool, "boolean"),  # before int: bool is an int in Python
    ((int, float, Decimal), "number"),
    (type(None), "null"),
)


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``number`` ...)."""
    for kinds, name in _JSON_TYPES:
        if isinstance(value, kinds):
            return name
    return type(value).__name__


_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories refused in every text field: controls (C0, C1), format characters (zero-width
characters, bidirectional marks, embeddings, overrides and isolates, the BOM, the soft hyphen, tags),
lone surrogates, and line and paragraph separators. They are invisible, or reorder or hide what an
operator reads; a lone surrogate cannot even be written as UTF-8."""

REPLACEMENT_CHARACTER = "\ufffd"
"""U+FFFD: what a lossy decoder leaves in place of bytes it could not read; text holding it was
mangled before it was sent, so it is refused too."""


def forbidden_character(text: str) -> str | None:
    """The first character of ``text`` that no text field may hold (see :data:`_FORBIDDEN_CATEGORIES`
    and :data:`REPLACEMENT_CHARACTER`), or None."""
    if text.isascii() and text.isprintable():
        return None
    for char in text:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES or char == REPLACEMENT_CHARACTER:
            return char
    return None


def printable_text(text: str, *, limit: int) -> str:
    """``text`` made fit for a message's text field: every character :func:`forbidden_character` would
    refuse becomes a space, and the result is cut to ``limit`` characters.

    For text orderflow relays but does not control (a remote service's error message): the message
    carrying it must still validate, or the answer it belongs to would be lost.
    """
    if forbidden_character(text) is not None:
        text = "".join(
            " " if unicodedata.category(c) in _FORBIDDEN_CATEGORIES or c == REPLACEMENT_CHARACTER else c
            for c in text
        )
    return text[:limit]


def describe_character(char: str) -> str:
    """``char`` as a refusal names it: its code point and Unicode name."""
    return f"U+{ord(char):04X} {unicodedata.name(char, '(unnamed)')}"


def _schema_version_is_an_integer(value: Any) -> Any:
    # Literal[1] alone would take true and 1.0, which equal 1 in Python but are not version 1 on the wire.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"schemaVersion must be the integer 1, not {json_type(value)}")
    return value


SchemaVersion = Annotated[Literal[1], BeforeValidator(_schema_version_is_an_integer)]
"""The contract version of every message: the JSON integer ``1``."""

OrderId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")]
ORDER_KEY_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?:[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
"""An order's key, ``{clientId}:{orderId}`` (:func:`orderflow.records.order_key`). An order id without its
client prefix is no key: two clients may use the same order id."""
OrderKey = Annotated[str, StringConstraints(pattern=ORDER_KEY_PATTERN)]
"""Order ids: 1–64 characters of letters, digits, ``_ . -``; no ``:`` (instance ids use it as separator)
and nothing Cosmos DB forbids in an id (``/ \\ ? #``)."""

_QUEUE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?!-)){1,50}[a-z0-9]$")


def _valid_queue_name(value: str) -> str:
    if not _QUEUE_NAME.fullmatch(value) or "--" in value:
        raise ValueError(
            f"{value!r} is not a valid queue name: 3-52 lowercase letters, digits and single hyphens, "
            "starting and ending with a letter or digit"
        )
    return value


QueueName = Annotated[str, AfterValidator(_valid_queue_name)]
"""Queue names valid on both Azure Storage queues and Service Bus: 3–52 lowercase letters, digits and
single hyphens, not starting or ending with a hyphen. 52, not Storage's 63, so that the local
dead-letter queue ``<name>-deadletter`` is a valid name too: a reply queue that could not be
dead-lettered would fail after the order was recorded."""

PLAIN_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")

CleanText = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]

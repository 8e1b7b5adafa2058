"""The ``MessageId`` a message orderflow sends goes under, bounded to what Service Bus accepts.

Logical ids (``{instanceId}:{step}:response``, ``{orderId}:{status}``...) grow with the client id, the
order id, the attempt and the step name; past :data:`MAX_MESSAGE_ID_CHARS` the SDK refuses the message
after the remote effect was applied. :func:`bounded_message_id` keeps an id that fits as it is, and
otherwise gives a deterministic form of exactly that length, so duplicate detection still recognises a
re-sent message.
"""

from __future__ import annotations

import hashlib

MAX_MESSAGE_ID_CHARS = 128
"""Service Bus's limit on a ``MessageId`` (the SDK counts characters; UTF-16 code units on the wire)."""
_DIGEST_CHARS = 64
"""Hex digits of the SHA-256 of the whole logical id that end a bounded form (256 bits)."""


def _units(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (never fewer than its characters)."""
    return len(text.encode("utf-16-le")) // 2


def bounded_message_id(logical_id: str) -> str:
    """The ``MessageId`` to send the message whose logical id is ``logical_id`` under.

    ``logical_id`` itself when it is at most :data:`MAX_MESSAGE_ID_CHARS` UTF-16 code units; otherwise a
    readable prefix of it, ``:`` and the SHA-256 hex digest of the whole of it, at most
    :data:`MAX_MESSAGE_ID_CHARS` units. Deterministic: the same logical id gives the same ``MessageId``
    in every process; two logical ids give two (unless SHA-256 collides).

    Raises:
        ValueError: ``logical_id`` is empty.
    """
    if not logical_id:
        raise ValueError("a message id must not be empty")
    if _units(logical_id) <= MAX_MESSAGE_ID_CHARS:
        return logical_id
    digest = hashlib.sha256(logical_id.encode("utf-8", "surrogatepass")).hexdigest()
    room = MAX_MESSAGE_ID_CHARS - 1 - _DIGEST_CHARS
    prefix = logical_id[:room]
    while _units(prefix) > room:
        prefix = prefix[:-1]
    return f"{prefix}:{digest}"

"""Continuation tokens the stores hand out: a position wrapped with a fingerprint of the query.

The wrapper makes a token usable only with the query that issued it, and makes a garbled token fail
loudly (:class:`InvalidContinuation`) instead of being taken as "start over": cosmosdb-server silently
restarts a scan on a token it cannot parse, which would make a sweep loop forever.
"""

from __future__ import annotations

import base64
import binascii
import json

from orderflow.errors import InvalidContinuation


def encode(prefix: str, fingerprint: str, position: str) -> str:
    """Wrap ``position`` (a server token, or the last id read) for the query ``fingerprint``."""
    payload = json.dumps({"q": fingerprint, "p": position}, separators=(",", ":")).encode("utf-8")
    return prefix + base64.urlsafe_b64encode(payload).decode("ascii")


def decode(prefix: str, token: str, fingerprint: str) -> str:
    """The position inside a token issued by :func:`encode` with the same ``prefix`` and query.

    Raises:
        InvalidContinuation: the token is malformed, foreign, or was issued for a different query.
    """
    if not token.startswith(prefix):
        raise InvalidContinuation("continuation token not issued by this store")
    body = token[len(prefix) :]
    try:
        raw = base64.b64decode(body, altchars=b"-_", validate=True)
        # Only the exact encoding we issued is accepted: lenient base64 would ignore stray
        # characters or data after the padding, letting a tampered token through.
        if base64.urlsafe_b64encode(raw).decode("ascii") != body:
            raise ValueError("non-canonical encoding")
        payload = json.loads(raw)
        token_query, position = payload["q"], payload["p"]
    except (binascii.Error, UnicodeError, ValueError, TypeError, KeyError) as exc:
        raise InvalidContinuation("malformed continuation token") from exc
    if token_query != fingerprint or not isinstance(position, str):
        raise InvalidContinuation("continuation token belongs to a different query")
    return position

"""What the operator API answers: an :class:`OperatorResponse`, and the one refusal type, :class:`Refused`.

Every refusal, whoever decides it (the routing, the token check, an action, a store's failure), is a
:class:`Refused` carrying its HTTP status, error code, message and headers; :meth:`Refused.response` is
the one place it becomes an answer: ``{"error": {"code": ..., "message": ...}}`` with ``ETag`` (the
version of the order read) and ``Retry-After`` when it has them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from operator_api.views import entity_tag
from orderflow.client_text import encodable

RETRY_AFTER_S = 1
"""``Retry-After`` of a 503 caused by a store or the signing keys: seconds."""

JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store"}
"""Headers of every response: JSON, and never cached (an order's record, the caller's refusals)."""


@dataclass(frozen=True)
class OperatorResponse:
    """An operator API response, for the host to send.

    Attributes:
        status: The HTTP status code.
        body: The JSON body.
        headers: Headers besides :data:`JSON_HEADERS` (``WWW-Authenticate``, ``Allow``, ``ETag`` ...); a
            ``Content-Type`` or ``Cache-Control`` here replaces the JSON one.
        raw: The bytes to send instead of ``body`` (a console file), or None.
    """

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None

    def all_headers(self) -> dict[str, str]:
        """Every header to send: :data:`JSON_HEADERS` and :attr:`headers`."""
        return {**JSON_HEADERS, **self.headers}

    def content(self) -> bytes:
        """The bytes to send: :attr:`raw` when set (a console file, or an answer encoded already), else the
        body as UTF-8 JSON, every string made :func:`orderflow.client_text.encodable` (a lone surrogate
        sent as U+FFFD).

        Raises:
            TypeError, ValueError: the body holds what JSON cannot (a bug; the handler answers it 500).
        """
        if self.raw is not None:
            return self.raw
        text = json.dumps(self.body, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a client's lone surrogate: replaced, not a reason to fail
            return encodable(text).encode("utf-8")

    def encoded(self) -> OperatorResponse:
        """This response with :attr:`raw` set to its :meth:`content`: encoded once, where a failure to
        encode is still answered in the error shape."""
        return self if self.raw is not None else replace(self, raw=self.content())


class Refused(Exception):
    """A refused call, and its answer: nothing was written.

    Raised by a route's handler (or the dispatch) and answered by the dispatch; the operator actions
    return it as their outcome's refusal.

    Attributes:
        status: The HTTP status (400 to 503).
        code: ``error.code``, a name to act on (``NotCompensable``, ``PreconditionFailed`` ...).
        message: ``error.message``, for people.
        etag: The store ETag of the order as read, sent as its ``ETag``; None for none.
        retry_after_s: ``Retry-After`` (seconds) of a refusal worth retrying, or None.
        headers: Other headers (``Allow``, ``WWW-Authenticate``).
        details: Other fields of ``error`` (``replayed`` of ``409 AlreadyReplayed``).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        etag: str | None = None,
        retry_after_s: int | None = None,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.etag = etag
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        self.details = dict(details or {})

    def response(self) -> OperatorResponse:
        """The answer: ``{"error": {"code", "message", ...details}}`` with the refusal's headers."""
        headers: dict[str, str] = {}
        if self.etag is not None:
            headers["ETag"] = entity_tag(self.etag)
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(self.retry_after_s)
        body = {"error": {"code": self.code, "message": self.message, **self.details}}
        return OperatorResponse(self.status, body, {**headers, **self.headers})

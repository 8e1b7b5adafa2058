"""A client of the operator API (docs/operator-api.md), for the ``orderflow`` command line and scripts.

It sends a bearer token and reads the API's JSON answer; it decides nothing itself (the API checks the
token, the role and the order's state). The token is never logged, shown or kept in a ``repr``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from orderflow.errors import TransientError
from orderflow.settings.hosts import is_loopback_host

API_PATH = "/api/operator"
"""The API's path under the host's base URL."""
DEFAULT_TIMEOUT_S = 30.0
"""Timeout of one call, seconds."""


@dataclass(frozen=True)
class OperatorAnswer:
    """What the API answered.

    Attributes:
        status: The HTTP status code.
        body: The JSON body (``{"error": {"code", "message"}}`` for a refusal).
        etag: The ``ETag`` header: the version of the order the answer shows, for an ``If-Match``.
    """

    status: int
    body: dict[str, Any]
    etag: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the call did what it asked (a 2xx status)."""
        return 200 <= self.status < 300

    @property
    def error_code(self) -> str | None:
        """The refusal's code (``Forbidden``, ``NotAwaitingReview`` ...), or None."""
        error = self.body.get("error")
        return str(error.get("code")) if isinstance(error, dict) else None

    @property
    def error_message(self) -> str:
        """The refusal's message, or ""."""
        error = self.body.get("error")
        return str(error.get("message", "")) if isinstance(error, dict) else ""


class OperatorApiClient:
    """Calls the operator API with one bearer token.

    Args:
        base_url: The host's base URL: the Function App's (``https://<app>.azurewebsites.net``), or the
            local host's (``http://127.0.0.1:<port>``).
        token: An access token for the API (app role ``orderflow.operator`` or ``orderflow.reviewer``).
        timeout_s: Timeout of one call, seconds.
        transport: An httpx transport to use instead of the network (tests).

    Raises:
        ValueError: ``base_url`` is not https and not on a loopback host: the bearer token would cross
            the network in the clear.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        url = httpx.URL(self.base_url)
        if url.scheme != "https" and not (url.scheme == "http" and is_loopback_host(url.host)):
            raise ValueError("the operator API's URL must be https (plain http only on a loopback host)")
        self._http = httpx.Client(
            base_url=self.base_url + API_PATH,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"OperatorApiClient(base_url={self.base_url[:100]!r})"

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> OperatorApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_order(self, order_id: str) -> OperatorAnswer:
        """``GET /orders/{orderId}``: the order's state record (public view).

        Raises:
            TransientError: the API could not be reached.
        """
        return self._call("GET", f"/orders/{quote(order_id, safe='')}")

    def review(self, order_id: str, *, approve: bool) -> OperatorAnswer:
        """``POST /orders/{orderId}/review``: approve or reject an order awaiting review.

        Raises:
            TransientError: the API could not be reached.
        """
        decision = "approve" if approve else "reject"
        return self._call("POST", f"/orders/{quote(order_id, safe='')}/review", {"decision": decision})

    def compensate(self, order_id: str, *, reason: str | None = None) -> OperatorAnswer:
        """``POST /orders/{orderId}/compensate``: stop and undo an order, or retry a failed compensation.

        Raises:
            TransientError: the API could not be reached.
        """
        body = {"reason": reason} if reason is not None else {}
        return self._call("POST", f"/orders/{quote(order_id, safe='')}/compensate", body)

    def list_orders(self, **filters: str | int | None) -> OperatorAnswer:
        """``GET /orders``: a page of orders; ``filters`` are the query parameters (``state``,
        ``client``, ``workflowVersion``, ``stuckFor``, ``failedSince``, ``limit``, ``continuation``),
        None ones left out.

        Raises:
            TransientError: the API could not be reached.
        """
        params = {name: str(value) for name, value in filters.items() if value is not None}
        return self._call("GET", "/orders", params=params)

    def get_timeline(
        self, order_id: str, *, continuation: str | None = None, limit: int = 10
    ) -> OperatorAnswer:
        """``GET /orders/{orderId}/timeline``: a page of the order's timeline, oldest first.

        Raises:
            TransientError: the API could not be reached.
        """
        params = {"limit": str(limit), **({"continuation": continuation} if continuation else {})}
        return self._call("GET", f"/orders/{quote(order_id, safe='')}/timeline", params=params)

    def act(
        self,
        order_id: str,
        action: str,
        *,
        if_match: str | None = None,
        corrected: Mapping[str, Any] | None = None,
    ) -> OperatorAnswer:
        """``POST /orders/{orderId}/{action}`` (``resubmit``, ``suspend``, ``resume``) with an empty body,
        conditional on ``if_match`` (the ETag of the version seen) when given; ``corrected`` is a
        resubmit's corrected input (``{"input": corrected}``: field name -> value).

        Raises:
            TransientError: the API could not be reached.
        """
        headers = {"If-Match": if_match} if if_match else None
        body: dict[str, Any] = {} if corrected is None else {"input": dict(corrected)}
        return self._call("POST", f"/orders/{quote(order_id, safe='')}/{action}", body, headers=headers)

    def list_dead_letters(
        self, queue: str, *, limit: int = 20, continuation: str | None = None
    ) -> OperatorAnswer:
        """``GET /deadletters/{queue}``: a page of the queue's dead letters, oldest first.

        Raises:
            TransientError: the API could not be reached.
        """
        params = {"limit": str(limit), **({"continuation": continuation} if continuation else {})}
        return self._call("GET", f"/deadletters/{quote(queue, safe='')}", params=params)

    def get_dead_letter(self, queue: str, dead_letter_id: str) -> OperatorAnswer:
        """``GET /deadletters/{queue}/{deadLetterId}``: one dead letter, its body included.

        Raises:
            TransientError: the API could not be reached.
        """
        return self._call("GET", f"/deadletters/{quote(queue, safe='')}/{quote(dead_letter_id, safe='')}")

    def replay_dead_letter(self, queue: str, dead_letter_id: str) -> OperatorAnswer:
        """``POST /deadletters/{queue}/{deadLetterId}/replay``: re-send it to its queue, then delete it.

        Raises:
            TransientError: the API could not be reached.
        """
        path = f"/deadletters/{quote(queue, safe='')}/{quote(dead_letter_id, safe='')}/replay"
        return self._call("POST", path, {})

    def purge_dead_letters(
        self,
        queue: str,
        *,
        dead_letter_id: str | None = None,
        older_than: str | None = None,
        dry_run: bool = False,
    ) -> OperatorAnswer:
        """``POST /deadletters/{queue}/purge``: remove one dead letter by id, or all dead-lettered before
        ``older_than`` (ISO 8601 with an offset); ``dry_run`` only lists them.

        Raises:
            TransientError: the API could not be reached.
        """
        body: dict[str, Any] = {"dryRun": dry_run}
        if dead_letter_id is not None:
            body["deadLetterId"] = dead_letter_id
        if older_than is not None:
            body["olderThan"] = older_than
        return self._call("POST", f"/deadletters/{quote(queue, safe='')}/purge", body)

    def list_alerts(
        self,
        *,
        kind: str | None = None,
        since: str | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> OperatorAnswer:
        """``GET /alerts``: a page of stored alerts, newest first, of one ``kind`` and raised at or after
        ``since`` (ISO 8601 with an offset) when given.

        Raises:
            TransientError: the API could not be reached.
        """
        given = {"kind": kind, "since": since, "limit": str(limit), "continuation": continuation}
        return self._call("GET", "/alerts", params={k: v for k, v in given.items() if v})

    def get_supervisor(self, *, limit: int = 10) -> OperatorAnswer:
        """``GET /supervisor``: the leader, the latest ``limit`` sweeps and the stuck-orders gauge.

        Raises:
            TransientError: the API could not be reached.
        """
        return self._call("GET", "/supervisor", params={"limit": str(limit)})

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> OperatorAnswer:
        try:
            response = self._http.request(method, path, json=body, params=params, headers=headers)
        except httpx.HTTPError as exc:
            # httpx's text names the URL, never the headers: the token is not in it.
            raise TransientError(
                f"the operator API at {self.base_url[:100]} could not be reached: {exc}"
            ) from exc
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict):
            data = {
                "error": {"code": "NotJson", "message": f"HTTP {response.status_code}, not a JSON object"}
            }
        return OperatorAnswer(response.status_code, data, response.headers.get("ETag"))

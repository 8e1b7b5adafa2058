"""The operator API, independent of any web framework: :func:`handle_operator_request`.

Both hosts serve this one function: the Azure Functions HTTP trigger
(``function_host/blueprints/operator_api.py``) and the local host's HTTP server
(``devhost/operator_http.py``) hand it the request's method, path, headers and body and send back the
:class:`OperatorResponse`. The routes (docs/operator-api.md):

- ``GET /api/operator/orders/{orderId}``: the order's state record, its public view
  (:func:`operator_api.views.order_view`); app role ``orderflow.operator`` or ``orderflow.reviewer``;
- ``POST /api/operator/orders/{orderId}/review`` ``{"decision": "approve" | "reject"}``: a reviewer's
  decision (:func:`operator_api.review.review_order`); ``orderflow.reviewer``;
- ``POST /api/operator/orders/{orderId}/compensate`` ``{"reason": "..."}`` (optional): stop and undo an
  order, or retry a failed compensation (:func:`operator_api.compensate.compensate_order`);
  ``orderflow.operator``.

Every request is checked in one order: the route (404, 405), the bearer token (401; 503 while the
signing keys cannot be fetched, or when the API is not configured), the app role (403, recorded), the
order id and the body (400, 413), then the action (404 for an unknown order, 409 when the order is not
in a state for it, 503 while a store is unavailable). Who acts is the verified principal: no body field
names anyone. Errors answer ``{"error": {"code": ..., "message": ...}}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from operator_api.compensate import CompensateAccepted, compensate_order
from operator_api.review import ReviewRecorded, ReviewRefusal, review_order
from operator_api.views import order_view
from orderflow.dependencies import Dependencies
from orderflow.errors import ConcurrencyConflict, InvalidMessage, NotFound, TransientError
from orderflow.messages import (
    TOO_LARGE,
    CleanText,
    Envelope,
    decode_json_object,
    validate_message,
    validate_order_key,
)
from orderflow.operator_auth import (
    OPERATOR_ROLE,
    REVIEWER_ROLE,
    Forbidden,
    Principal,
    SigningKeysUnavailable,
    TokenValidator,
    Unauthenticated,
    authorize,
    http_refusal,
)
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.records import ReviewDecision

logger = logging.getLogger(__name__)

API_PREFIX = "/api/operator"
"""Where the routes are: the Functions host's ``api`` route prefix, then ``operator``."""
MAX_BODY_BYTES = 16 * 1024
"""Largest request body read (bytes); the bodies are a few words."""
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
        headers: Headers besides :data:`JSON_HEADERS` (``WWW-Authenticate``, ``Allow``, ``ETag`` ...).
    """

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def all_headers(self) -> dict[str, str]:
        """Every header to send: :data:`JSON_HEADERS` and :attr:`headers`."""
        return {**JSON_HEADERS, **self.headers}

    def content(self) -> bytes:
        """The body, as UTF-8 JSON."""
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class ReviewBody(Envelope):
    """The body of ``POST .../review``: the decision. Unknown fields are refused."""

    decision: Literal["approve", "reject"]


class CompensateBody(Envelope):
    """The body of ``POST .../compensate``: why, optionally. Unknown fields are refused."""

    reason: CleanText | None = None


def error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> OperatorResponse:
    """An error response: ``{"error": {"code": code, "message": message}}``, with ``headers``."""
    return OperatorResponse(status, {"error": {"code": code, "message": message}}, dict(headers or {}))


Action = Callable[[str, bytes, Principal, Dependencies], OperatorResponse]
"""An action: (order id, body, verified principal, dependencies) -> response."""


@dataclass(frozen=True)
class Route:
    """One route: its name (for logs), method and the app roles of which the caller needs one."""

    name: str
    method: str
    roles: tuple[str, ...]
    action: Action


def _inspect(order_id: str, body: bytes, principal: Principal, deps: Dependencies) -> OperatorResponse:
    try:
        found = deps.states.get(order_id)
    except NotFound:
        return error(404, UNKNOWN_ORDER, f"no order {order_id}")
    return OperatorResponse(200, order_view(found.item), {"ETag": _entity_tag(found.etag)})


def _review(order_id: str, body: bytes, principal: Principal, deps: Dependencies) -> OperatorResponse:
    request = validate_message(ReviewBody, decode_json_object(body))
    outcome = review_order(
        order_id,
        ReviewDecision(request.decision),
        principal,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.CLAIM_TIMEOUT_S,
        clients=deps.settings.clients(),
    )
    etag = {"ETag": _entity_tag(outcome.etag)}
    if not isinstance(outcome, ReviewRecorded):
        status = 403 if outcome.refusal is ReviewRefusal.NOT_PERMITTED else 409
        return error(status, outcome.refusal.value, outcome.detail, etag)
    review = outcome.record.review
    assert review is not None and review.decision is not None
    answer = {"orderId": order_id, "decision": review.decision.value, "decidedBy": review.decided_by}
    return OperatorResponse(200, {**answer, "order": order_view(outcome.record)}, etag)


def _compensate(order_id: str, body: bytes, principal: Principal, deps: Dependencies) -> OperatorResponse:
    request = validate_message(CompensateBody, decode_json_object(body) if body.strip() else {})
    outcome = compensate_order(
        order_id,
        principal,
        reason=request.reason,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.CLAIM_TIMEOUT_S,
    )
    etag = {"ETag": _entity_tag(outcome.etag)}
    if not isinstance(outcome, CompensateAccepted):
        return error(409, outcome.refusal.value, outcome.detail, etag)
    answer = {"orderId": order_id, "outcome": outcome.action.value, "order": order_view(outcome.record)}
    return OperatorResponse(202, answer, etag)


ROUTES: dict[str | None, Route] = {
    None: Route("inspect", "GET", (OPERATOR_ROLE, REVIEWER_ROLE), _inspect),
    "review": Route("review", "POST", (REVIEWER_ROLE,), _review),
    "compensate": Route("compensate", "POST", (OPERATOR_ROLE,), _compensate),
}
"""``/orders/{orderId}`` (None) and ``/orders/{orderId}/<action>``: the route of each."""


def _match(method: str, path: str) -> tuple[Route, str] | OperatorResponse:
    """The route of ``path`` and the order id in it, or the 404 or 405 response."""
    path = path.split("?", 1)[0]
    prefix = API_PREFIX + "/"
    parts = path.removeprefix(prefix).split("/") if path.startswith(prefix) else []
    action = parts[2] if len(parts) == 3 else None
    if len(parts) not in (2, 3) or parts[0] != "orders" or not parts[1] or action not in ROUTES:
        return error(404, "NoSuchRoute", f"no operator API route {path[:200]!r}; see docs/operator-api.md")
    route = ROUTES[action]
    if method.upper() != route.method:
        return error(405, "MethodNotAllowed", f"{route.name} takes {route.method}", {"Allow": route.method})
    return route, parts[1]


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), None)


def _authenticated(
    route: Route, headers: Mapping[str, str], validator: TokenValidator | None
) -> Principal | OperatorResponse:
    """The verified principal with one of the route's roles, or the 401, 403 or 503 response. A refusal
    is logged with the principal's ids when it has been verified, and never with the token."""
    if validator is None:
        return error(503, "NotConfigured", "the operator API is not configured (OPERATOR_TENANT_ID and more)")
    try:
        principal = validator.authenticate(_header(headers, "Authorization"))
    except Unauthenticated as refused:
        logger.info("operator API %s refused: unauthenticated (%s)", route.name, refused.reason)
        status, challenge = http_refusal(refused)
        return error(status, "Unauthenticated", refused.reason, challenge)
    except SigningKeysUnavailable as unavailable:
        logger.warning("operator API %s: %s", route.name, unavailable.detail)
        return error(503, "SigningKeysUnavailable", unavailable.detail, {"Retry-After": str(RETRY_AFTER_S)})
    try:
        authorize(principal, *route.roles)  # records an operator.forbidden event on refusal
    except Forbidden as refused:
        needed = " or ".join(refused.roles)
        logger.warning(
            "operator API %s refused: principal %s lacks %s", route.name, principal.audit_id, needed
        )
        status, challenge = http_refusal(refused)
        return error(status, "Forbidden", f"requires the app role {needed}", challenge)
    return principal


def handle_operator_request(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    deps: Dependencies,
    validator: TokenValidator | None,
) -> OperatorResponse:
    """Answer one operator API request.

    Args:
        method: The HTTP method.
        path: The URL path (``/api/operator/orders/o-1/review``); a query string is ignored.
        headers: The request headers (names in any case): ``Authorization: Bearer <token>`` is read.
        body: The raw body (JSON for the POST routes; empty is ``{}`` for compensate).
        deps: The host's dependencies.
        validator: Checks bearer tokens; None when the API is not configured
            (:func:`orderflow.operator_auth.validator_from_settings`).

    Returns:
        The response; every refusal is one, never an exception (see the module docstring). Unexpected
        errors propagate: the host answers 500.
    """
    matched = _match(method, path)
    if isinstance(matched, OperatorResponse):
        return matched
    route, order_id = matched
    principal = _authenticated(route, headers, validator)
    if isinstance(principal, OperatorResponse):
        return principal
    if len(body) > MAX_BODY_BYTES:
        return error(413, TOO_LARGE, f"the body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
    try:
        return route.action(validate_order_key(order_id), body, principal, deps)
    except InvalidMessage as invalid:
        if invalid.reason == UNKNOWN_ORDER:
            return error(404, UNKNOWN_ORDER, f"no order {order_id}")
        return error(400, invalid.reason, invalid.description)
    except (TransientError, ConcurrencyConflict) as unavailable:
        logger.warning("operator API %s of %s: %s", route.name, order_id, unavailable.detail)
        return error(503, "Unavailable", "try again shortly", {"Retry-After": str(RETRY_AFTER_S)})


def _entity_tag(etag: str | None) -> str:
    """``etag`` as an HTTP entity tag: quoted once (the stores' ETags may carry their quotes already)."""
    return f'"{(etag or "").strip(chr(34))}"'

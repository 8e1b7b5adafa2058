"""The operator API, independent of any web framework: :func:`handle_operator_request`.

Both hosts serve this one function: the Azure Functions HTTP trigger
(``function_host/blueprints/operator_api.py``) and the local host's HTTP server
(``devhost/operator_http.py``) hand it the request's method, path, headers and body and send back the
:class:`~operator_api.answers.OperatorResponse`. The routes are declared in :data:`operator_api.routes.ROUTES`
(docs/operator-api.md).

Every request is checked in one order: the route (404, 405), then, on a route that takes a token, the
bearer token (401; 503 while the signing keys cannot be fetched, or when the API is not configured), the
app role (403, recorded), the body's size (413), the query, the order id and the body (400), then the
action (404 for an unknown order, 409 when the order is not in a state for it, 503 while a store is
unavailable). Who acts is the verified principal: no body field names anyone. Every refusal is a
:class:`~operator_api.answers.Refused`, answered ``{"error": {"code": ..., "message": ...}}`` in one
place; the failures of the layers below are mapped to one here (:func:`refusal_of`). Every answer is
encoded here, inside that error handling, as UTF-8 JSON: a client's lone surrogate is sent as U+FFFD
(:func:`orderflow.client_text.encodable`), and a body that cannot be encoded at all is a ``500`` in the
error shape, never the host's bare one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import parse_qsl

from operator_api import routes
from operator_api.answers import RETRY_AFTER_S, OperatorResponse, Refused
from operator_api.deadletters import UNKNOWN_QUEUE
from operator_api.routing import Call, OperatorApiSections, Route, header, match
from orderflow.dependencies import Dependencies
from orderflow.errors import (
    ConcurrencyConflict,
    DeadLettersBusy,
    InvalidContinuation,
    InvalidMessage,
    TransientError,
)
from orderflow.messages import TOO_LARGE, validate_order_key
from orderflow.operator_auth import (
    Forbidden,
    Principal,
    SigningKeysUnavailable,
    TokenValidator,
    Unauthenticated,
    authorize,
    http_refusal,
)
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.protocol.conditional import StaleVersion

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024
"""Largest request body read (bytes); the bodies are a few words."""


def handle_operator_request(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    deps: Dependencies,
    sections: OperatorApiSections,
    validator: TokenValidator | None,
    query: str = "",
) -> OperatorResponse:
    """Answer one operator API request.

    Args:
        method: The HTTP method.
        path: The URL path as sent, percent-encoded (``/api/operator/orders/acme:o-1/review``), perhaps
            with its query string.
        headers: The request headers (names in any case): ``Authorization: Bearer <token>`` and
            ``If-Match`` are read.
        body: The raw body (JSON for the POST routes; empty is ``{}``).
        deps: The host's dependencies.
        sections: The settings sections the routes read (:class:`OperatorApiSections`).
        validator: Checks bearer tokens; None when the API is not configured
            (:func:`orderflow.operator_auth.validator_from_settings`).
        query: The URL's query string (``state=Error&limit=10``), if not in ``path``.

    Returns:
        The response, encoded already (:meth:`OperatorResponse.encoded`: the host sends its
        :meth:`~OperatorResponse.content`); every refusal is one, never an exception (see the module
        docstring). An unexpected exception, in an action or in encoding its answer, is logged with its
        traceback and answered ``500 InternalError`` in the error shape (:func:`internal_error`), never
        propagated to the host.
    """
    try:
        return _answer(
            method, path, headers, body, deps=deps, sections=sections, validator=validator, query=query
        ).encoded()
    except Exception:  # a bug: the caller still gets the documented JSON shape, the log the traceback
        logger.exception("operator API %s %s failed", method, path.partition("?")[0][:200])
        return internal_error().encoded()


def internal_error() -> OperatorResponse:
    """``500 InternalError`` in the error shape, naming nothing of the failure (the log does)."""
    return Refused(500, "InternalError", "the operator API failed; the failure is logged").response()


def _answer(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    deps: Dependencies,
    sections: OperatorApiSections,
    validator: TokenValidator | None,
    query: str,
) -> OperatorResponse:
    """:func:`handle_operator_request`, but for the exception it does not expect."""
    bare = path.partition("?")[0]
    try:
        route, params = match(routes.ROUTES, method, bare)
        if not route.roles:  # the document, the console's sign-in settings and files: no token, no data
            return route.handler(Call(bare, params), deps, sections)
        principal = _authenticated(route, headers, validator)
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, TOO_LARGE, f"the body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
    except Refused as refused:
        return refused.response()
    order_id = params.get("orderId")
    try:
        query_params = _query(path, query)
        key = None if order_id is None else validate_order_key(order_id)
        return route.handler(Call(bare, params, key, body, principal, query_params, headers), deps, sections)
    except Refused as refused:
        return refused.response()
    except Exception as failed:
        mapped = refusal_of(failed, route, order_id)
        if mapped is None:
            raise
        return mapped.response()


def refusal_of(failed: Exception, route: Route, order_id: str | None) -> Refused | None:
    """The refusal that answers a failure of the layers below a route's handler, or None for a bug.

    ``InvalidMessage`` is 400 (404 ``UnknownOrder`` or ``UnknownQueue``), ``InvalidContinuation`` 400,
    ``StaleVersion`` 412 with the current ``ETag``, and a store or queue that is unavailable 503 with
    ``Retry-After`` (logged; ``DeadLettersBusy`` says why, the operator can act on it).
    """
    if isinstance(failed, InvalidMessage):
        if failed.reason == UNKNOWN_ORDER:
            return Refused(404, UNKNOWN_ORDER, f"no order {order_id}")
        status = 404 if failed.reason == UNKNOWN_QUEUE else 400
        return Refused(status, failed.reason, failed.description)
    if isinstance(failed, InvalidContinuation):
        return Refused(400, "InvalidContinuation", failed.detail)
    if isinstance(failed, StaleVersion):
        message = "the order changed since the version you saw: read it again and decide again"
        return Refused(412, "PreconditionFailed", message, etag=failed.etag)
    if isinstance(failed, DeadLettersBusy):
        logger.warning("operator API %s: %s", route.name, failed.detail)
        return Refused(503, "Unavailable", failed.detail, retry_after_s=RETRY_AFTER_S)
    if isinstance(failed, TransientError | ConcurrencyConflict):
        logger.warning("operator API %s of %s: %s", route.name, order_id, failed.detail)
        return Refused(503, "Unavailable", "try again shortly", retry_after_s=RETRY_AFTER_S)
    return None


def _authenticated(route: Route, headers: Mapping[str, str], validator: TokenValidator | None) -> Principal:
    """The verified principal with one of the route's roles. A refusal is logged with the principal's ids
    when it has been verified, and never with the token.

    Raises:
        Refused: 401, 403, or 503 (not configured; the signing keys unavailable).
    """
    if validator is None:
        raise Refused(
            503, "NotConfigured", "the operator API is not configured (OPERATOR_TENANT_ID and more)"
        )
    try:
        principal = validator.authenticate(header(headers, "Authorization"))
    except Unauthenticated as refused:
        logger.info("operator API %s refused: unauthenticated (%s)", route.name, refused.reason)
        status, challenge = http_refusal(refused)
        raise Refused(status, "Unauthenticated", refused.reason, headers=challenge) from None
    except SigningKeysUnavailable as unavailable:
        logger.warning("operator API %s: %s", route.name, unavailable.detail)
        raise Refused(
            503, "SigningKeysUnavailable", unavailable.detail, retry_after_s=RETRY_AFTER_S
        ) from None
    try:
        authorize(principal, *route.roles)  # records an operator.forbidden event on refusal
    except Forbidden as refused:
        needed = " or ".join(refused.roles)
        logger.warning(
            "operator API %s refused: principal %s lacks %s", route.name, principal.audit_id, needed
        )
        status, challenge = http_refusal(refused)
        raise Refused(status, "Forbidden", f"requires the app role {needed}", headers=challenge) from None
    return principal


def _query(path: str, query: str) -> dict[str, str]:
    """The query parameters (of ``query``, else of ``path``).

    Raises:
        InvalidMessage: a parameter given twice (``InvalidValue``).
    """
    inline = path.partition("?")[2]
    params: dict[str, str] = {}
    for name, value in parse_qsl(query or inline, keep_blank_values=True):
        if name in params:
            raise InvalidMessage("InvalidValue", f"query parameter {name!r} given more than once")
        params[name] = value
    return params

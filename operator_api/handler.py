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
  ``orderflow.operator``;
- ``POST /api/operator/orders/{orderId}/resubmit`` (``If-Match``; ``{"input": {...}}`` optional): a new
  attempt of an ``Error`` order, with corrected input for its failed step when given
  (:func:`operator_api.resubmit.resubmit_order`); ``orderflow.operator``;
- ``GET /api/operator/queues``: the deployment's queues whose dead letters may be read
  (:func:`operator_api.deadletters.deployment_queues`); ``orderflow.operator``; the ``deadletters``
  routes read, replay and purge them (:mod:`operator_api.deadletters`);
- ``GET /api/operator/alerts`` (``kind``, ``since``, paged) and ``GET /api/operator/supervisor``: the
  stored alerts and the supervisor's status (:mod:`operator_api.alerts`); either role;
- ``GET /api/operator/activity`` (``since``, ``bucketS``, ``buckets``): alerts, dead letters, recoveries
  and the stuck-orders gauge over time, bucketed (:mod:`operator_api.activity`); either role;
- ``GET /api/operator/console-config``: how the console signs operators in (settings, no secret), no
  token;
- ``GET /api/operator/console/...``: the web console's static files (:mod:`operator_api.console`), no
  token.

Every request is checked in one order: the route (404, 405), the bearer token (401; 503 while the
signing keys cannot be fetched, or when the API is not configured), the app role (403, recorded), the
order id and the body (400, 413), then the action (404 for an unknown order, 409 when the order is not
in a state for it, 503 while a store is unavailable). Who acts is the verified principal: no body field
names anyone. Errors answer ``{"error": {"code": ..., "message": ...}}``. Every answer is encoded here,
inside that error handling, as UTF-8 JSON: a client's lone surrogate is sent as U+FFFD
(:func:`orderflow.client_text.encodable`), and a body that cannot be encoded at all is a ``500`` in the
error shape, never the host's bare one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, unquote

from operator_api.activity import activity, activity_window
from operator_api.alerts import alert_query, list_alerts, supervisor_status
from operator_api.compensate import CompensateAccepted, compensate_order
from operator_api.console import console_file
from operator_api.corrections import INPUT_NOT_CORRECTABLE, INVALID_INPUT
from operator_api.deadletters import (
    NO_SUCH_DEAD_LETTER,
    UNKNOWN_QUEUE,
    NotReplayed,
    deployment_queue,
    deployment_queues,
    find_dead_letter,
    purge_dead_letters,
    replay_dead_letter,
    validate_dead_letter_id,
)
from operator_api.listing import list_orders, list_query
from operator_api.openapi import openapi_document
from operator_api.resubmit import resubmit_order
from operator_api.review import ReviewRecorded, ReviewRefusal, review_order
from operator_api.schemas import (
    CompensateBody,
    ConsoleConfig,
    DeadLetterList,
    EmptyBody,
    PreviousReplay,
    PurgeAnswer,
    PurgeBody,
    QueueAnswer,
    QueueList,
    ReplayAnswer,
    ResubmitBody,
    ReviewBody,
)
from operator_api.suspension import set_suspension
from operator_api.views import dead_letter_answer, entity_tag, order_view, timeline_page
from orderflow.client_text import encodable
from orderflow.dependencies import Dependencies
from orderflow.errors import (
    ConcurrencyConflict,
    DeadLettersBusy,
    InvalidContinuation,
    InvalidMessage,
    NotFound,
    TransientError,
)
from orderflow.messages import (
    TOO_LARGE,
    decode_json_object,
    validate_message,
    validate_order_key,
)
from orderflow.operator_actions import NOT_RESUBMITTABLE
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
from orderflow.protocol.conditional import StaleVersion
from orderflow.queues.base import DeadLetterQueues
from orderflow.records import ReviewDecision, format_utc
from orderflow.settings import Settings

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
        """The bytes to send: :attr:`raw` when set (a console file, or an answer
        :func:`handle_operator_request` encoded already), else the body as UTF-8 JSON, every string
        made :func:`orderflow.client_text.encodable` (a lone surrogate sent as U+FFFD).

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


def error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> OperatorResponse:
    """An error response: ``{"error": {"code": code, "message": message}}``, with ``headers``."""
    return OperatorResponse(status, {"error": {"code": code, "message": message}}, dict(headers or {}))


@dataclass(frozen=True)
class Call:
    """One authenticated call, as an action gets it.

    Attributes:
        order_id: The order key of an order's route (validated), None for the list.
        body: The raw body.
        principal: The verified caller.
        query: The query parameters (each given once).
        headers: The request headers (names in any case).
        segments: The route's other path segments, decoded (a queue name, a dead letter id).
    """

    order_id: str | None
    body: bytes
    principal: Principal
    query: Mapping[str, str]
    headers: Mapping[str, str]
    segments: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The order key of an order's route."""
        assert self.order_id is not None, "a route of one order"
        return self.order_id

    def if_match(self) -> str | None:
        """The ``If-Match`` header, if given."""
        return _header(self.headers, "If-Match")


Action = Callable[[Call, Dependencies], OperatorResponse]
"""An action: (the call, dependencies) -> response."""


@dataclass(frozen=True)
class Route:
    """One route: its name (for logs), method and the app roles of which the caller needs one."""

    name: str
    method: str
    roles: tuple[str, ...]
    action: Action


def _inspect(call: Call, deps: Dependencies) -> OperatorResponse:
    try:
        found = deps.states.get(call.key)
    except NotFound:
        return error(404, UNKNOWN_ORDER, f"no order {call.key}")
    return OperatorResponse(200, order_view(found.item), {"ETag": entity_tag(found.etag)})


def _timeline(call: Call, deps: Dependencies) -> OperatorResponse:
    limit = _limit(call.query, "limit", default=10, most=100)
    unexpected = sorted(set(call.query) - {"limit", "continuation"})
    if unexpected:
        raise InvalidMessage("UnexpectedField", f"unknown query parameter {unexpected[0]!r}")
    try:
        found = deps.states.get(call.key)
    except NotFound:
        return error(404, UNKNOWN_ORDER, f"no order {call.key}")
    page = deps.states.history(call.key, max_item_count=limit, continuation=call.query.get("continuation"))
    answer = timeline_page(found.item, page)
    return OperatorResponse(200, answer.to_body(), {"ETag": entity_tag(found.etag)})


def _list(call: Call, deps: Dependencies) -> OperatorResponse:
    query, limit, continuation = list_query(call.query, deps.clock.now())
    listed = list_orders(deps.states, query, limit=limit, continuation=continuation)
    return OperatorResponse(200, listed.to_body())


def _review(call: Call, deps: Dependencies) -> OperatorResponse:
    request = validate_message(ReviewBody, decode_json_object(call.body))
    outcome = review_order(
        call.key,
        ReviewDecision(request.decision),
        call.principal,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.CLAIM_TIMEOUT_S,
        clients=deps.settings.clients(),
    )
    etag = {"ETag": entity_tag(outcome.etag)}
    if not isinstance(outcome, ReviewRecorded):
        status = 403 if outcome.refusal is ReviewRefusal.NOT_PERMITTED else 409
        return error(status, outcome.refusal.value, outcome.detail, etag)
    review = outcome.record.review
    assert review is not None and review.decision is not None
    answer = {"orderId": call.key, "decision": review.decision.value, "decidedBy": review.decided_by}
    return OperatorResponse(200, {**answer, "order": order_view(outcome.record)}, etag)


def _compensate(call: Call, deps: Dependencies) -> OperatorResponse:
    request = validate_message(CompensateBody, decode_json_object(call.body) if call.body.strip() else {})
    outcome = compensate_order(
        call.key,
        call.principal,
        reason=request.reason,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.CLAIM_TIMEOUT_S,
        if_match=call.if_match(),
    )
    etag = {"ETag": entity_tag(outcome.etag)}
    if not isinstance(outcome, CompensateAccepted):
        return error(409, outcome.refusal.value, outcome.detail, etag)
    answer = {"orderId": call.key, "outcome": outcome.action.value, "order": order_view(outcome.record)}
    return OperatorResponse(202, answer, etag)


def _no_body(call: Call) -> None:
    if call.body.strip():
        validate_message(EmptyBody, decode_json_object(call.body))


RESUBMIT_REFUSAL_STATUS = {NOT_RESUBMITTABLE: 409, INPUT_NOT_CORRECTABLE: 409, INVALID_INPUT: 422}
"""The status of each resubmit refusal: the order's state (409), or a corrected value that is not one
(422: the body is well formed, its content is not)."""


def _resubmit(call: Call, deps: Dependencies) -> OperatorResponse:
    request = validate_message(ResubmitBody, decode_json_object(call.body) if call.body.strip() else {})
    seen = call.if_match()
    if seen is None:
        return error(428, "PreconditionRequired", "resubmit takes If-Match: the ETag of the order you saw")
    outcome = resubmit_order(
        call.key,
        call.principal,
        if_match=seen,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.CLAIM_TIMEOUT_S,
        retry_budget=deps.settings.RETRY_BUDGET,
        corrected=request.input,
        orders=deps.orders,
    )
    etag = {"ETag": entity_tag(outcome.etag)}
    if outcome.action is None:
        code = outcome.code or NOT_RESUBMITTABLE
        return error(RESUBMIT_REFUSAL_STATUS[code], code, outcome.refusal or "", etag)
    answer = {"orderId": call.key, "outcome": outcome.action.value, "order": order_view(outcome.record)}
    return OperatorResponse(202, answer, etag)


def _suspension(suspend: bool) -> Action:
    def act(call: Call, deps: Dependencies) -> OperatorResponse:
        _no_body(call)
        outcome = set_suspension(
            call.key,
            call.principal,
            suspend=suspend,
            if_match=call.if_match(),
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
        )
        etag = {"ETag": entity_tag(outcome.etag)}
        if outcome.refusal is not None:
            return error(409, outcome.refusal, outcome.detail or "", etag)
        answer = {
            "orderId": call.key,
            "outcome": "Suspended" if suspend else "Resumed",
            "order": order_view(outcome.record),
        }
        return OperatorResponse(200, answer, etag)

    return act


def _only(query: Mapping[str, str], *names: str) -> None:
    unexpected = sorted(set(query) - set(names))
    if unexpected:
        raise InvalidMessage("UnexpectedField", f"unknown query parameter {unexpected[0]!r}")


def _dead_letter_queues(deps: Dependencies) -> DeadLetterQueues | OperatorResponse:
    if deps.dead_letters is None:
        return error(503, "NotConfigured", "this host reads no dead-letter queues")
    return deps.dead_letters


def _queue_list(call: Call, deps: Dependencies) -> OperatorResponse:
    _only(call.query)
    queues = [QueueAnswer(name=q.name, kind=q.kind, owner=q.owner) for q in deployment_queues(deps.settings)]
    return OperatorResponse(200, QueueList(queues=queues).to_body())


def _dead_letter_list(call: Call, deps: Dependencies) -> OperatorResponse:
    _only(call.query, "limit", "continuation")
    limit = _limit(call.query, "limit", default=20, most=100)
    queues = _dead_letter_queues(deps)
    if isinstance(queues, OperatorResponse):
        return queues
    name = deployment_queue(deps.settings, call.segments[0])
    try:
        page = queues.dead_letter_page(name, max_messages=limit, continuation=call.query.get("continuation"))
    except ValueError as invalid:
        return error(400, "InvalidContinuation", str(invalid))
    answer = DeadLetterList(
        queue=name,
        dead_letters=[dead_letter_answer(d, name, deps.settings) for d in page.items],
        continuation=page.continuation,
    )
    return OperatorResponse(200, answer.to_body())


def _dead_letter_show(call: Call, deps: Dependencies) -> OperatorResponse:
    _only(call.query)
    queues = _dead_letter_queues(deps)
    if isinstance(queues, OperatorResponse):
        return queues
    name = deployment_queue(deps.settings, call.segments[0])
    found = find_dead_letter(queues, name, validate_dead_letter_id(call.segments[1]))
    if found is None:
        return error(404, NO_SUCH_DEAD_LETTER, f"no dead letter {call.segments[1]} on {name}")
    return OperatorResponse(200, dead_letter_answer(found, name, deps.settings).to_body())


def _dead_letter_replay(call: Call, deps: Dependencies) -> OperatorResponse:
    _no_body(call)
    _only(call.query)
    queues = _dead_letter_queues(deps)
    if isinstance(queues, OperatorResponse):
        return queues
    name, dead_letter_id = call.segments[0], validate_dead_letter_id(call.segments[1])
    replayed = replay_dead_letter(
        name,
        dead_letter_id,
        call.principal,
        dead_letters=queues,
        queues=deps.queues,
        states=deps.states,
        replays=deps.alerts,
        clock=deps.clock,
        settings=deps.settings,
    )
    if isinstance(replayed, NotReplayed):
        return _not_replayed(replayed, name, dead_letter_id)
    answer = ReplayAnswer(
        queue=name,
        replay_message_id=replayed.message_id,
        order_id=replayed.order_id,
        replayed_by=call.principal.audit_id,
        dead_letter=dead_letter_answer(replayed.dead_letter, name, deps.settings),
    )
    return OperatorResponse(200, answer.to_body())


def _not_replayed(refused: NotReplayed, name: str, dead_letter_id: str) -> OperatorResponse:
    """``404 NoSuchDeadLetter``, or ``409 AlreadyReplayed`` with the replay that won as ``error.replayed``."""
    previous = refused.previous
    if previous is None:
        return error(404, NO_SUCH_DEAD_LETTER, f"no dead letter {dead_letter_id} on {name}")
    message = (
        f"dead letter {dead_letter_id} on {name} was already replayed by {previous.by} at "
        f"{format_utc(previous.at)}, as message {previous.replay_message_id}"
    )
    replayed = PreviousReplay(
        by=previous.by,
        by_name=previous.by_name,
        at=previous.at,
        replay_message_id=previous.replay_message_id,
        order_id=previous.order_id,
    )
    return OperatorResponse(
        409, {"error": {"code": refused.reason, "message": message, "replayed": replayed.to_body()}}
    )


def _dead_letter_purge(call: Call, deps: Dependencies) -> OperatorResponse:
    _only(call.query)
    request = validate_message(PurgeBody, decode_json_object(call.body) if call.body.strip() else {})
    queues = _dead_letter_queues(deps)
    if isinstance(queues, OperatorResponse):
        return queues
    name = call.segments[0]
    purged = purge_dead_letters(
        name,
        call.principal,
        dead_letter_id=None
        if request.dead_letter_id is None
        else validate_dead_letter_id(request.dead_letter_id),
        older_than=request.older_than,
        dry_run=request.dry_run,
        dead_letters=queues,
        settings=deps.settings,
    )
    answer = PurgeAnswer(
        queue=name,
        dry_run=purged.dry_run,
        count=len(purged.dead_letters),
        dead_letters=[dead_letter_answer(d, name, deps.settings) for d in purged.dead_letters],
    )
    return OperatorResponse(200, answer.to_body())


def _alerts(call: Call, deps: Dependencies) -> OperatorResponse:
    query, limit, continuation = alert_query(call.query)
    if deps.alerts is None:
        return error(503, "NotConfigured", "this host keeps no alerts")
    listed = list_alerts(deps.alerts, query, limit=limit, continuation=continuation)
    return OperatorResponse(200, listed.to_body())


def _supervisor(call: Call, deps: Dependencies) -> OperatorResponse:
    if deps.alerts is None:
        return error(503, "NotConfigured", "this host keeps no supervisor status")
    status = supervisor_status(deps.alerts, call.query, now=deps.clock.now())
    return OperatorResponse(200, status.to_body())


def _activity(call: Call, deps: Dependencies) -> OperatorResponse:
    window = activity_window(call.query, now=deps.clock.now())
    if deps.alerts is None:
        return error(503, "NotConfigured", "this host keeps no alerts or sweep tallies")
    answer = activity(window, alerts=deps.alerts, dead_letters=deps.dead_letters, settings=deps.settings)
    return OperatorResponse(200, answer.to_body())


BOTH_ROLES = (OPERATOR_ROLE, REVIEWER_ROLE)

ROUTES: dict[str | None, Route] = {
    None: Route("inspect", "GET", BOTH_ROLES, _inspect),
    "timeline": Route("timeline", "GET", BOTH_ROLES, _timeline),
    "review": Route("review", "POST", (REVIEWER_ROLE,), _review),
    "compensate": Route("compensate", "POST", (OPERATOR_ROLE,), _compensate),
    "resubmit": Route("resubmit", "POST", (OPERATOR_ROLE,), _resubmit),
    "suspend": Route("suspend", "POST", (OPERATOR_ROLE,), _suspension(True)),
    "resume": Route("resume", "POST", (OPERATOR_ROLE,), _suspension(False)),
}
"""``/orders/{orderId}`` (None) and ``/orders/{orderId}/<action>``: the route of each."""

LIST_ROUTE = Route("list", "GET", BOTH_ROLES, _list)
"""``/orders``: the order list."""

OPERATOR_ONLY = (OPERATOR_ROLE,)

PLANE_ROUTES: dict[tuple[str, int, str | None], Route] = {
    ("queues", 1, None): Route("queues", "GET", OPERATOR_ONLY, _queue_list),
    ("deadletters", 2, None): Route("deadletters.list", "GET", OPERATOR_ONLY, _dead_letter_list),
    ("deadletters", 3, "purge"): Route("deadletters.purge", "POST", OPERATOR_ONLY, _dead_letter_purge),
    ("deadletters", 3, None): Route("deadletters.show", "GET", OPERATOR_ONLY, _dead_letter_show),
    ("deadletters", 4, "replay"): Route("deadletters.replay", "POST", OPERATOR_ONLY, _dead_letter_replay),
    ("alerts", 1, None): Route("alerts", "GET", BOTH_ROLES, _alerts),
    ("supervisor", 1, None): Route("supervisor", "GET", BOTH_ROLES, _supervisor),
    ("activity", 1, None): Route("activity", "GET", BOTH_ROLES, _activity),
}
"""Routes outside ``/orders``, by (first segment, number of segments, last segment or None for any):
``/queues``, ``/deadletters/{queue}``, ``/deadletters/{queue}/purge``, ``/deadletters/{queue}/{id}``,
``/deadletters/{queue}/{id}/replay``, ``/alerts``, ``/supervisor`` and ``/activity``. The segments
between the first and a fixed last are the call's :attr:`Call.segments`."""

OPENAPI_PATH = API_PREFIX + "/openapi.json"
"""The OpenAPI document (:mod:`operator_api.openapi`), served without a token: it describes the routes
and says nothing about any order."""

CONSOLE_CONFIG_PATH = API_PREFIX + "/console-config"
"""How the console signs operators in (:class:`operator_api.schemas.ConsoleConfig`), served without a token:
the page needs it before it has one, and it holds no secret."""

CONSOLE_PATH = API_PREFIX + "/console"
"""The web console's files (:mod:`operator_api.console`), served without a token: they hold no data; the
page's own calls carry the operator's token."""


def _console_config(settings: Settings) -> ConsoleConfig:
    sign_in = settings.console_sign_in()
    if sign_in is None:
        return ConsoleConfig(authority=None, client_id=None, scope=None)
    authority, client_id, scope = sign_in
    return ConsoleConfig(authority=authority, client_id=client_id, scope=scope)


def _console(method: str, path: str, settings: Settings) -> OperatorResponse:
    """A console file, the redirect of the bare console path to its folder, or the 404 or 405."""
    if method.upper() != "GET":
        return error(405, "MethodNotAllowed", "the console's files take GET", {"Allow": "GET"})
    if path == CONSOLE_PATH:  # the page's relative module paths need the trailing "/"
        return OperatorResponse(308, {}, {"Location": CONSOLE_PATH + "/"})
    authority = _console_config(settings).authority
    found = console_file(path.removeprefix(CONSOLE_PATH + "/"), authority=authority)
    if found is None:
        return error(404, "NoSuchRoute", f"no console file {path[:200]!r}")
    content, headers = found
    return OperatorResponse(200, {}, headers, raw=content)


def _limit(query: Mapping[str, str], name: str, *, default: int, most: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= most:
        raise InvalidMessage("InvalidValue", f"{name}: a whole number from 1 to {most}")
    return int(text)


def _match(method: str, path: str) -> tuple[Route, str | None, tuple[str, ...]] | OperatorResponse:
    """The route of ``path`` and the order id in it (None for the list), or the 404 or 405 response."""
    prefix = API_PREFIX + "/"
    # Split first, then decode each segment: "a:o-1%2Freview" is one (invalid) key, not a route.
    parts = [unquote(p) for p in path.removeprefix(prefix).split("/")] if path.startswith(prefix) else []
    action = parts[2] if len(parts) == 3 else None
    segments: tuple[str, ...] = ()
    plane = _plane_route(method, parts)
    if parts == ["orders"]:
        route, order_id = LIST_ROUTE, None
    elif len(parts) in (2, 3) and parts[0] == "orders" and parts[1] and action in ROUTES:
        route, order_id = ROUTES[action], parts[1]
    elif plane is not None:
        (route, segments), order_id = plane, None
    else:
        return error(404, "NoSuchRoute", f"no operator API route {path[:200]!r}; see docs/operator-api.md")
    if method.upper() != route.method:
        return error(405, "MethodNotAllowed", f"{route.name} takes {route.method}", {"Allow": route.method})
    return route, order_id, segments


def _plane_route(method: str, parts: list[str]) -> tuple[Route, tuple[str, ...]] | None:
    """The :data:`PLANE_ROUTES` route of ``parts`` (a fixed last segment first, when the method fits) and
    its segments, or None."""
    if not parts or not all(parts):
        return None
    fixed = PLANE_ROUTES.get((parts[0], len(parts), parts[-1]))
    if fixed is not None and fixed.method == method.upper():
        return fixed, tuple(parts[1:-1])
    route = PLANE_ROUTES.get((parts[0], len(parts), None))
    if route is not None:
        return route, tuple(parts[1:])
    return (fixed, tuple(parts[1:-1])) if fixed is not None else None


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


def _query(path: str, query: str) -> tuple[str, dict[str, str]]:
    """The path without its query string, and the query parameters (of ``query``, else of ``path``).

    Raises:
        InvalidMessage: a parameter given twice (``InvalidValue``).
    """
    path, _, inline = path.partition("?")
    params: dict[str, str] = {}
    for name, value in parse_qsl(query or inline, keep_blank_values=True):
        if name in params:
            raise InvalidMessage("InvalidValue", f"query parameter {name!r} given more than once")
        params[name] = value
    return path, params


def handle_operator_request(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    deps: Dependencies,
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
        return _answer(method, path, headers, body, deps=deps, validator=validator, query=query).encoded()
    except Exception:  # a bug: the caller still gets the documented JSON shape, the log the traceback
        logger.exception("operator API %s %s failed", method, path.partition("?")[0][:200])
        return internal_error().encoded()


def internal_error() -> OperatorResponse:
    """``500 InternalError`` in the error shape, naming nothing of the failure (the log does)."""
    return error(500, "InternalError", "the operator API failed; the failure is logged")


def _answer(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    deps: Dependencies,
    validator: TokenValidator | None,
    query: str,
) -> OperatorResponse:
    """:func:`handle_operator_request`, but for the exception it does not expect."""
    bare = path.partition("?")[0]
    unauthenticated = _public(method, bare, deps.settings)
    if unauthenticated is not None:
        return unauthenticated
    matched = _match(method, bare)
    if isinstance(matched, OperatorResponse):
        return matched
    route, order_id, segments = matched
    principal = _authenticated(route, headers, validator)
    if isinstance(principal, OperatorResponse):
        return principal
    if len(body) > MAX_BODY_BYTES:
        return error(413, TOO_LARGE, f"the body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
    try:
        _, params = _query(path, query)
        key = None if order_id is None else validate_order_key(order_id)
        return route.action(Call(key, body, principal, params, headers, segments), deps)
    except InvalidMessage as invalid:
        if invalid.reason == UNKNOWN_ORDER:
            return error(404, UNKNOWN_ORDER, f"no order {order_id}")
        if invalid.reason == UNKNOWN_QUEUE:
            return error(404, UNKNOWN_QUEUE, invalid.description)
        return error(400, invalid.reason, invalid.description)
    except InvalidContinuation as invalid:
        return error(400, "InvalidContinuation", invalid.detail)
    except StaleVersion as stale:
        message = "the order changed since the version you saw: read it again and decide again"
        return error(412, "PreconditionFailed", message, {"ETag": entity_tag(stale.etag)})
    except DeadLettersBusy as busy:  # a transient error whose cause the operator can act on: say it
        logger.warning("operator API %s: %s", route.name, busy.detail)
        return error(503, "Unavailable", busy.detail, {"Retry-After": str(RETRY_AFTER_S)})
    except (TransientError, ConcurrencyConflict) as unavailable:
        logger.warning("operator API %s of %s: %s", route.name, order_id, unavailable.detail)
        return error(503, "Unavailable", "try again shortly", {"Retry-After": str(RETRY_AFTER_S)})


def _public(method: str, bare: str, settings: Settings) -> OperatorResponse | None:
    """The answer to a path that needs no token (the OpenAPI document, the console's configuration and
    files), else None."""
    if bare in (OPENAPI_PATH, CONSOLE_CONFIG_PATH):
        if method.upper() != "GET":
            return error(405, "MethodNotAllowed", "it takes GET", {"Allow": "GET"})
        if bare == CONSOLE_CONFIG_PATH:
            return OperatorResponse(200, _console_config(settings).to_body())
        return OperatorResponse(200, openapi_document())
    if bare == CONSOLE_PATH or bare.startswith(CONSOLE_PATH + "/"):
        return _console(method, bare, settings)
    return None

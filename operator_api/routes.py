"""The operator API's routes, each declared once: :data:`ROUTES` (docs/operator-api.md).

The dispatch (:func:`operator_api.handler.handle_operator_request`) finds a request's route here, and the
OpenAPI document (:func:`openapi_document`, served by one of them) is generated from the same
declarations (:mod:`operator_api.openapi`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from operator_api import order_routes, plane_routes
from operator_api.activity import DEFAULT_BUCKET_S, DEFAULT_BUCKETS, MAX_BUCKET_S, MAX_BUCKETS, MIN_BUCKET_S
from operator_api.alerts import MAX_SWEEPS, SWEEPS_SHOWN
from operator_api.answers import OperatorResponse
from operator_api.openapi import document_of
from operator_api.routing import API_PREFIX, Call, OperatorApiSections, Param, Route
from operator_api.schemas import (
    ActionAnswer,
    ActivityAnswer,
    AlertList,
    CompensateBody,
    ConsoleConfig,
    DeadLetterAnswer,
    DeadLetterList,
    EmptyBody,
    OrderList,
    PurgeAnswer,
    PurgeBody,
    QueueList,
    ReplayAnswer,
    ResubmitBody,
    ReviewAnswer,
    ReviewBody,
    SupervisorStatus,
    TimelinePage,
)
from orderflow.alerts import ALERT_KINDS
from orderflow.dependencies import Dependencies
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.records import ProcessState, StateRecord

CONSOLE_PATH = API_PREFIX + "/console"
"""The web console's files (:mod:`operator_api.console`), served without a token: they hold no data; the
page's own calls carry the operator's token."""

CONSOLE_CONFIG_PATH = API_PREFIX + "/console-config"
"""How the console signs operators in (:class:`operator_api.schemas.ConsoleConfig`), served without a
token: the page needs it before it has one, and it holds no secret."""

BOTH = (OPERATOR_ROLE, REVIEWER_ROLE)
OPERATOR = (OPERATOR_ROLE,)
REVIEWER = (REVIEWER_ROLE,)

IF_MATCH = Param(
    "If-Match",
    {"type": "string"},
    "The ETag of the order as the operator saw it, one strong tag; 412 when it changed since, "
    "and for a weak tag (W/...), * or a list.",
    where="header",
)
CONTINUATION = Param("continuation", {"type": "string"}, "the previous page's token")
PAGE = (
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "orders per page (50)"),
    CONTINUATION,
)
"""``limit`` (described, as everywhere it pages, as the order list's) and ``continuation``."""

LIST = (
    Param("state", {"type": "string"}, "comma-separated: " + ", ".join(s.value for s in ProcessState)),
    Param("client", {"type": "string"}, "the client id"),
    Param("workflowVersion", {"type": "string"}, "a workflow version (order-v3)"),
    Param("stuckFor", {"type": "integer", "minimum": 1}, "seconds since its last write"),
    Param("failedSince", {"type": "string", "format": "date-time"}, "last written at or after"),
    *PAGE,
)
ALERTS = (
    Param("kind", {"type": "string", "enum": sorted(ALERT_KINDS)}, "one alert kind"),
    Param("since", {"type": "string", "format": "date-time"}, "raised at or after"),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "alerts per page (50)"),
    CONTINUATION,
)
SWEEPS = Param(
    "limit", {"type": "integer", "minimum": 1, "maximum": MAX_SWEEPS}, f"sweeps listed ({SWEEPS_SHOWN})"
)
WINDOW = (
    Param(
        "since",
        {"type": "string", "format": "date-time"},
        "the first bucket's start, a whole minute (default: the window whose last bucket holds now)",
    ),
    Param(
        "bucketS",
        {"type": "integer", "minimum": MIN_BUCKET_S, "maximum": MAX_BUCKET_S, "multipleOf": MIN_BUCKET_S},
        f"seconds per bucket ({DEFAULT_BUCKET_S})",
    ),
    Param(
        "buckets",
        {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS},
        f"buckets ({DEFAULT_BUCKETS}); bucketS * buckets at most 24 h",
    ),
)

NOTHING_WRITTEN = "refused; nothing written"
ACTION_REFUSALS = ((409, NOTHING_WRITTEN), (412, NOTHING_WRITTEN))
"""An action on one order: the order is not in a state for it (409); ``If-Match`` is stale (412)."""


def _openapi(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /openapi.json`` (no token): the document of these routes; it says nothing about any order."""
    return OperatorResponse(200, openapi_document())


ORDERS = "/orders/{orderId}"

ORDER_ROUTES = (
    Route(
        "list", "GET", "/orders", BOTH, order_routes.list_,
        summary="List orders", model=OrderList, answered="a page", parameters=LIST,
    ),
    Route(
        "inspect", "GET", ORDERS, BOTH, order_routes.inspect,
        summary="An order's view", model=StateRecord, answered="the order",
    ),
    Route(
        "timeline", "GET", ORDERS + "/timeline", BOTH, order_routes.timeline,
        summary="An order's timeline, paged", model=TimelinePage, answered="a page", parameters=PAGE,
    ),
    Route(
        "review", "POST", ORDERS + "/review", REVIEWER, order_routes.review,
        summary="A reviewer's decision", model=ReviewAnswer, answered="the decision in force",
        body=ReviewBody, refusals=((409, NOTHING_WRITTEN),),
    ),
    Route(
        "compensate", "POST", ORDERS + "/compensate", OPERATOR, order_routes.compensate,
        summary="Stop and undo, or retry a failed compensation",
        status=202, model=ActionAnswer, answered="accepted",
        body=CompensateBody, parameters=(IF_MATCH,), refusals=ACTION_REFUSALS,
    ),
    Route(
        "resubmit", "POST", ORDERS + "/resubmit", OPERATOR, order_routes.resubmit,
        summary="A new attempt of an Error order, with corrected input for its failed step if given; a "
        "compensation retry",
        status=202, model=ActionAnswer, answered="accepted",
        body=ResubmitBody,
        parameters=(IF_MATCH,),  # not required in the document: its absence is answered 428
        refusals=(
            *ACTION_REFUSALS,
            (422, "a corrected value the order's field does not take"),
            (428, NOTHING_WRITTEN),
        ),
    ),
    Route(
        "suspend", "POST", ORDERS + "/suspend", OPERATOR, order_routes.suspension(True),
        summary="Suspend", model=ActionAnswer, answered="accepted",
        body=EmptyBody, parameters=(IF_MATCH,), refusals=ACTION_REFUSALS,
    ),
    Route(
        "resume", "POST", ORDERS + "/resume", OPERATOR, order_routes.suspension(False),
        summary="Resume", model=ActionAnswer, answered="accepted",
        body=EmptyBody, parameters=(IF_MATCH,), refusals=ACTION_REFUSALS,
    ),
)  # fmt: skip
"""The routes about orders: (name, method, path, roles, handler), then what the document says of it."""

QUEUE = "/deadletters/{queue}"
ALREADY_REPLAYED = "AlreadyReplayed: another replay removed it; error.replayed says whose and when"

PLANE_ROUTES = (
    Route(
        "queues", "GET", "/queues", OPERATOR, plane_routes.queue_list,
        summary="The deployment's queues whose dead letters may be read",
        model=QueueList, answered="every one",
    ),
    Route(
        "deadletters.list", "GET", QUEUE, OPERATOR, plane_routes.dead_letter_list,
        summary="A queue's dead letters, paged", model=DeadLetterList, answered="a page", parameters=PAGE,
    ),
    Route(
        "deadletters.purge", "POST", QUEUE + "/purge", OPERATOR, plane_routes.dead_letter_purge,
        summary="Remove dead letters: one by id, or all older than a time; a dry run lists them",
        model=PurgeAnswer, answered="removed, or would be", body=PurgeBody,
    ),
    Route(
        "deadletters.show", "GET", QUEUE + "/{deadLetterId}", OPERATOR, plane_routes.dead_letter_show,
        summary="A dead letter", model=DeadLetterAnswer, answered="the dead letter",
    ),
    Route(
        "deadletters.replay", "POST", QUEUE + "/{deadLetterId}/replay", OPERATOR,
        plane_routes.dead_letter_replay,
        summary="Re-send a dead letter to its queue under a replay message id, and delete it",
        model=ReplayAnswer, answered="re-sent", body=EmptyBody, refusals=((409, ALREADY_REPLAYED),),
    ),
    Route(
        "console-config", "GET", "/console-config", (), plane_routes.console_config,
        summary="How the web console signs operators in (no token; no secret)",
        model=ConsoleConfig, answered="the sign-in, or all null: paste a token", not_allowed="it takes GET",
    ),
    Route(
        "activity", "GET", "/activity", BOTH, plane_routes.activity_over_time,
        summary="Alerts, dead letters, recoveries and the stuck-orders gauge over time, bucketed",
        model=ActivityAnswer, answered="every bucket of the window", parameters=WINDOW,
    ),
    Route(
        "alerts", "GET", "/alerts", BOTH, plane_routes.alerts,
        summary="Stored alerts, newest first, paged", model=AlertList, answered="a page", parameters=ALERTS,
    ),
    Route(
        "supervisor", "GET", "/supervisor", BOTH, plane_routes.supervisor,
        summary="The supervisor: its leader, latest sweeps and the stuck-orders gauge",
        model=SupervisorStatus, answered="the status", parameters=(SWEEPS,),
    ),
)  # fmt: skip
"""The routes beside the orders: queues, dead letters, alerts, the supervisor, activity, the console's
sign-in settings."""

UNDOCUMENTED = (
    Route(
        "openapi", "GET", "/openapi.json", (), _openapi,
        documented=False, not_allowed="it takes GET",
    ),
    Route(
        "console", "GET", "/console", (), plane_routes.console_folder,
        status=308, documented=False, not_allowed="the console's files take GET",
    ),
    Route(
        "console", "GET", "/console/{*file}", (), plane_routes.console,
        documented=False, not_allowed="the console's files take GET",
    ),
)  # fmt: skip
"""The routes the OpenAPI document leaves out: the document itself and the web console's files."""

ROUTES = (*ORDER_ROUTES, *PLANE_ROUTES, *UNDOCUMENTED)
"""Every route. A route with no roles reads no token (nor the body or the query)."""


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`ROUTES` (the same object on every call: do not change it)."""
    return document_of(ROUTES)

"""The operator API's OpenAPI 3.1 document, generated from the pydantic models of its bodies and answers
(:mod:`operator_api.schemas`) and of the state record (the order view), served at
``GET /api/operator/openapi.json``.

The order view's schema is the state record's serialization schema without the fields the view leaves
out (:data:`operator_api.views.PLUMBING`, ``review.responseQueue``); records keep fields of newer schema
versions, so every object schema admits properties it does not name.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from operator_api.activity import DEFAULT_BUCKET_S, DEFAULT_BUCKETS, MAX_BUCKET_S, MAX_BUCKETS, MIN_BUCKET_S
from operator_api.alerts import MAX_SWEEPS, SWEEPS_SHOWN
from operator_api.schemas import (
    ActionAnswer,
    ActivityAnswer,
    AlertList,
    CompensateBody,
    ConsoleConfig,
    DeadLetterAnswer,
    DeadLetterList,
    EmptyBody,
    ErrorAnswer,
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
from operator_api.views import PLUMBING
from orderflow.alerts import ALERT_KINDS
from orderflow.records import ProcessState, StateRecord

REF = "#/components/schemas/{model}"
ORDER_VIEW = "OrderView"

_REFUSALS = {
    "400": "a malformed order key, query parameter or body",
    "401": "no bearer token, or one that fails a check",
    "403": "the token lacks the route's app role",
    "404": "no such order, queue or dead letter",
    "405": "another method",
    "413": "a body over 16 KiB",
    "500": "an unexpected failure of the API itself (code InternalError, logged with its traceback)",
    "503": "a store or the signing keys are unavailable: retry",
}


def _schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [
        StateRecord,
        ErrorAnswer,
        OrderList,
        TimelinePage,
        ActionAnswer,
        ReviewAnswer,
        ReviewBody,
        CompensateBody,
        EmptyBody,
        ResubmitBody,
        DeadLetterAnswer,
        DeadLetterList,
        ReplayAnswer,
        PurgeBody,
        PurgeAnswer,
        AlertList,
        QueueList,
        SupervisorStatus,
        ActivityAnswer,
        ConsoleConfig,
    ]
    _, document = models_json_schema([(model, "serialization") for model in models], ref_template=REF)
    schemas: dict[str, Any] = document["$defs"]
    view = schemas.pop(StateRecord.__name__)
    plumbing = {StateRecord.model_fields[name].alias or name for name in PLUMBING}
    view["properties"] = {k: v for k, v in view["properties"].items() if k not in plumbing}
    view["required"] = [name for name in view.get("required", []) if name not in plumbing]
    view["title"] = ORDER_VIEW
    schemas[ORDER_VIEW] = view
    review = schemas["ReviewState"]
    review["properties"].pop("responseQueue")
    review["required"] = [name for name in review["required"] if name != "responseQueue"]
    for answer in ("ActionAnswer", "ReviewAnswer"):
        schemas[answer]["properties"]["order"] = {"$ref": REF.format(model=ORDER_VIEW)}
    return schemas


def _ref(model: str) -> dict[str, Any]:
    return {"$ref": REF.format(model=model)}


def _json(model: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _operation(
    summary: str,
    answers: dict[str, tuple[str, str]],
    *,
    refusals: tuple[str, ...] = (),
    body: str | None = None,
    parameters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    responses = {status: _json(model, text) for status, (model, text) in answers.items()}
    for status in (*_REFUSALS, *refusals):
        responses.setdefault(status, _json("ErrorAnswer", _REFUSALS.get(status, "refused; nothing written")))
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    return operation


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "The ETag of the order as the operator saw it, one strong tag; 412 when it changed since, "
    "and for a weak tag (W/...), * or a list.",
}

_LIST_PARAMETERS = [
    _query("state", {"type": "string"}, "comma-separated: " + ", ".join(s.value for s in ProcessState)),
    _query("client", {"type": "string"}, "the client id"),
    _query("workflowVersion", {"type": "string"}, "a workflow version (order-v3)"),
    _query("stuckFor", {"type": "integer", "minimum": 1}, "seconds since its last write"),
    _query("failedSince", {"type": "string", "format": "date-time"}, "last written at or after"),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "orders per page (50)"),
    _query("continuation", {"type": "string"}, "the previous page's token"),
]


def _action(
    summary: str, *, refusals: tuple[str, ...], if_match: bool, status: str = "202"
) -> dict[str, Any]:
    operation = _operation(
        summary, {status: ("ActionAnswer", "accepted")}, refusals=refusals, body="EmptyBody"
    )
    operation["parameters"] = [{**IF_MATCH, "required": True}] if if_match else [IF_MATCH]
    return operation


def _paths() -> dict[str, Any]:
    order = "/api/operator/orders/{orderId}"
    key = {"name": "orderId", "in": "path", "required": True, "schema": {"type": "string"}}
    resubmit = _action(
        "A new attempt of an Error order, with corrected input for its failed step if given; a "
        "compensation retry",
        refusals=("409", "412", "422", "428"),
        if_match=True,
    )
    resubmit["parameters"] = [{**IF_MATCH, "required": False}]  # its absence is answered 428
    resubmit["requestBody"]["content"]["application/json"]["schema"] = _ref("ResubmitBody")
    resubmit["responses"]["422"]["description"] = "a corrected value the order's field does not take"
    compensate = _action(
        "Stop and undo, or retry a failed compensation", refusals=("409", "412"), if_match=False
    )
    compensate["requestBody"]["content"]["application/json"]["schema"] = _ref("CompensateBody")
    paths: dict[str, Any] = {
        "/api/operator/orders": {
            "get": _operation("List orders", {"200": ("OrderList", "a page")}, parameters=_LIST_PARAMETERS)
        },
        order: {"get": _operation("An order's view", {"200": (ORDER_VIEW, "the order")})},
        order + "/timeline": {
            "get": _operation(
                "An order's timeline, paged",
                {"200": ("TimelinePage", "a page")},
                parameters=[_LIST_PARAMETERS[5], _LIST_PARAMETERS[6]],
            )
        },
        order + "/review": {
            "post": _operation(
                "A reviewer's decision",
                {"200": ("ReviewAnswer", "the decision in force")},
                refusals=("409",),
                body="ReviewBody",
            )
        },
        order + "/compensate": {"post": compensate},
        order + "/resubmit": {"post": resubmit},
        order + "/suspend": {
            "post": _action("Suspend", refusals=("409", "412"), if_match=False, status="200")
        },
        order + "/resume": {"post": _action("Resume", refusals=("409", "412"), if_match=False, status="200")},
    }
    for path, item in paths.items():
        if path.startswith(order):
            item["parameters"] = [key]
    return {**paths, **_dead_letter_paths(), **_plane_paths()}


def _plane_paths() -> dict[str, Any]:
    alerts = [
        _query("kind", {"type": "string", "enum": sorted(ALERT_KINDS)}, "one alert kind"),
        _query("since", {"type": "string", "format": "date-time"}, "raised at or after"),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "alerts per page (50)"),
        _LIST_PARAMETERS[6],
    ]
    sweeps = _query(
        "limit", {"type": "integer", "minimum": 1, "maximum": MAX_SWEEPS}, f"sweeps listed ({SWEEPS_SHOWN})"
    )
    window = [
        _query(
            "since",
            {"type": "string", "format": "date-time"},
            "the first bucket's start, a whole minute (default: the window whose last bucket holds now)",
        ),
        _query(
            "bucketS",
            {"type": "integer", "minimum": MIN_BUCKET_S, "maximum": MAX_BUCKET_S, "multipleOf": MIN_BUCKET_S},
            f"seconds per bucket ({DEFAULT_BUCKET_S})",
        ),
        _query(
            "buckets",
            {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS},
            f"buckets ({DEFAULT_BUCKETS}); bucketS * buckets at most 24 h",
        ),
    ]
    console_config = {
        "summary": "How the web console signs operators in (no token; no secret)",
        "security": [],
        "responses": {"200": _json("ConsoleConfig", "the sign-in, or all null: paste a token")},
    }
    return {
        "/api/operator/console-config": {"get": console_config},
        "/api/operator/activity": {
            "get": _operation(
                "Alerts, dead letters, recoveries and the stuck-orders gauge over time, bucketed",
                {"200": ("ActivityAnswer", "every bucket of the window")},
                parameters=window,
            )
        },
        "/api/operator/alerts": {
            "get": _operation(
                "Stored alerts, newest first, paged", {"200": ("AlertList", "a page")}, parameters=alerts
            )
        },
        "/api/operator/supervisor": {
            "get": _operation(
                "The supervisor: its leader, latest sweeps and the stuck-orders gauge",
                {"200": ("SupervisorStatus", "the status")},
                parameters=[sweeps],
            )
        },
    }


def _dead_letter_paths() -> dict[str, Any]:
    queue = "/api/operator/deadletters/{queue}"
    name = {"name": "queue", "in": "path", "required": True, "schema": {"type": "string"}}
    dead_letter = {"name": "deadLetterId", "in": "path", "required": True, "schema": {"type": "string"}}
    paths: dict[str, Any] = {
        "/api/operator/queues": {
            "get": _operation(
                "The deployment's queues whose dead letters may be read", {"200": ("QueueList", "every one")}
            )
        },
        queue: {
            "get": _operation(
                "A queue's dead letters, paged",
                {"200": ("DeadLetterList", "a page")},
                parameters=[_LIST_PARAMETERS[5], _LIST_PARAMETERS[6]],
            ),
            "parameters": [name],
        },
        queue + "/purge": {
            "post": _operation(
                "Remove dead letters: one by id, or all older than a time; a dry run lists them",
                {"200": ("PurgeAnswer", "removed, or would be")},
                body="PurgeBody",
            ),
            "parameters": [name],
        },
        queue + "/{deadLetterId}": {
            "get": _operation("A dead letter", {"200": ("DeadLetterAnswer", "the dead letter")}),
            "parameters": [name, dead_letter],
        },
        queue + "/{deadLetterId}/replay": {
            "post": _operation(
                "Re-send a dead letter to its queue under a replay message id, and delete it",
                {
                    "200": ("ReplayAnswer", "re-sent"),
                    "409": (
                        "ErrorAnswer",
                        "AlreadyReplayed: another replay removed it; error.replayed says whose and when",
                    ),
                },
                body="EmptyBody",
            ),
            "parameters": [name, dead_letter],
        },
    }
    return paths


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the operator API (the same object on every call: do not change it)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "orderflow operator API", "version": "1"},
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
    }

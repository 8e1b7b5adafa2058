"""The operator API's OpenAPI 3.1 document, generated from its routes (:data:`operator_api.routes.ROUTES`:
each documented route's answer, parameters, body and refusals) and from the pydantic models they name
(:mod:`operator_api.schemas`, and the state record for the order view): :func:`document_of`, served at
``GET /api/operator/openapi.json`` (:func:`operator_api.routes.openapi_document`).

The order view's schema is the state record's serialization schema without the fields the view leaves
out (:data:`operator_api.views.PLUMBING`, ``review.responseQueue``); records keep fields of newer schema
versions, so every object schema admits properties it does not name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from operator_api.routing import API_PREFIX, Route
from operator_api.schemas import ErrorAnswer
from operator_api.views import PLUMBING
from orderflow.records import StateRecord

REF = "#/components/schemas/{model}"
ORDER_VIEW = "OrderView"
"""The order view's schema: the state record's (a route's ``model`` ``StateRecord``) less its plumbing."""

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
"""What every route that takes a token may answer besides its own refusals."""


def _schemas(routes: tuple[Route, ...]) -> dict[str, Any]:
    models: list[type[BaseModel]] = [StateRecord, ErrorAnswer]
    for route in routes:
        models += [model for model in (route.model, route.body) if model is not None and model not in models]
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


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    name = ORDER_VIEW if model is StateRecord else model.__name__
    return {"$ref": REF.format(model=name)}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _operation(route: Route) -> dict[str, Any]:
    """The OpenAPI operation of ``route``: its answer, its refusals (those of every route with a token
    first), its parameters and its body."""
    assert route.model is not None, f"a documented route says what it answers: {route.name}"
    operation: dict[str, Any] = {"summary": route.summary}
    if not route.roles:
        operation["security"] = []
    responses = {str(route.status): _json(route.model, route.answered)}
    refusals = [*(_REFUSALS.items() if route.roles else ()), *((str(s), text) for s, text in route.refusals)]
    for status, text in refusals:
        responses.setdefault(status, _json(ErrorAnswer, text))
    operation["responses"] = responses
    if route.parameters:
        operation["parameters"] = [parameter.spec() for parameter in route.parameters]
    if route.body is not None:
        schema = {"schema": _ref(route.body)}
        operation["requestBody"] = {"required": False, "content": {"application/json": schema}}
    return operation


def _paths(routes: tuple[Route, ...]) -> dict[str, Any]:
    """Every route's operation under its path; a path's variables (strings) on the path."""
    paths: dict[str, Any] = {}
    for route in routes:
        item = paths.setdefault(API_PREFIX + route.path, {})
        item[route.method.lower()] = _operation(route)
        if route.variables:
            item["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in route.variables
            ]
    return paths


def document_of(routes: tuple[Route, ...]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``: the :attr:`~operator_api.routing.Route.documented` ones."""
    routes = tuple(route for route in routes if route.documented)
    return {
        "openapi": "3.1.0",
        "info": {"title": "orderflow operator API", "version": "1"},
        "components": {
            "schemas": _schemas(routes),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
        },
        "security": [{"bearer": []}],
        "paths": _paths(routes),
    }

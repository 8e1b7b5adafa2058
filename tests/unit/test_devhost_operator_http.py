"""The local host's operator API: it reads no more of a request body than the handler can take, and routes
on the path as sent."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import devhost.operator_http as operator_http
from operator_api.handler import MAX_BODY_BYTES, handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.clock import FakeClock
from orderflow.workflows import ORDER_V1
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps, submit_and_claim

pytestmark = pytest.mark.unit


def test_an_anonymous_huge_body_is_refused_without_being_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[int] = []
    handle = handle_operator_request

    def recording(method: str, path: str, headers: Any, body: bytes, **deps: Any) -> Any:
        handed.append(len(body))
        return handle(method, path, headers, body, **deps)

    monkeypatch.setattr(operator_http, "handle_operator_request", recording)
    built = memory_deps(FakeClock())
    app = operator_http.create_operator_app(built, OperatorApiSections.of(built.settings), None)
    huge = b"{" + b" " * (8 * 1024 * 1024) + b"}"

    with TestClient(app) as http:
        answered = http.post("/api/operator/orders/a:o-1/review", content=huge)
        small = http.post("/api/operator/orders/a:o-1/review", content=b'{"decision": "approve"}')

    # Not configured: every call is refused, the huge one like the small one.
    assert (answered.status_code, small.status_code) == (503, 503)
    assert handed == [MAX_BODY_BYTES + 1, len(b'{"decision": "approve"}')]


def test_an_encoded_slash_in_a_key_makes_no_route(trusted: TrustedIssuer) -> None:
    # The attack: "a:o-1%2Freview" decoded before routing would be the review route of a:o-1.
    deps = memory_deps(FakeClock())
    submit_and_claim(deps, definition=ORDER_V1, order_id="a:o-1")
    etag = deps.states.get("a:o-1").etag
    app = operator_http.create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator)

    with TestClient(app) as http:
        smuggled = http.post(
            "/api/operator/orders/a:o-1%2Freview", headers=trusted.reviewer(), json={"decision": "approve"}
        )
        dotted = http.get("/api/operator/orders/a:o-1/..%2Fa:o-2", headers=trusted.operator())
        encoded_colon = http.get("/api/operator/orders/a%3Ao-1", headers=trusted.operator())

    assert (smuggled.status_code, smuggled.json()["error"]["code"]) == (405, "MethodNotAllowed")
    assert dotted.status_code == 404
    assert (encoded_colon.status_code, encoded_colon.json()["orderId"]) == (200, "a:o-1")
    assert deps.states.get("a:o-1").etag == etag


def test_the_consoles_files_and_its_sign_in_code_make_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    # FastAPI traces each request through the global provider once tracing is on; the console's sign-in
    # lands on the console's URL with the authorization code in its query.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    built = memory_deps(FakeClock())
    app = operator_http.create_operator_app(built, OperatorApiSections.of(built.settings), None)

    with TestClient(app) as http:
        page = http.get("/api/operator/console/?code=secret-code&state=s-1")
        script = http.get("/api/operator/console/main.js")
        listed = http.get("/api/operator/orders?state=Pending")

    assert (page.status_code, script.status_code, listed.status_code) == (200, 200, 503)
    spans = exporter.get_finished_spans()
    assert [(s.name, (s.attributes or {}).get("url.path")) for s in spans] == [
        ("GET /{path}", "/api/operator/orders")
    ]  # one request span for the API call, no operation spans
    assert not any("secret-code" in str(s.attributes) for s in spans)


def test_an_unexpected_failure_is_answered_500_in_the_error_shape(
    trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = memory_deps(FakeClock())

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug below the handler")

    monkeypatch.setattr(deps.states, "query", broken)
    app = operator_http.create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator)

    with TestClient(app, raise_server_exceptions=False) as http:
        answer = http.get("/api/operator/orders?state=Error", headers=trusted.reviewer())

    assert (answer.status_code, answer.headers["content-type"]) == (500, "application/json; charset=utf-8")
    assert answer.json()["error"]["code"] == "InternalError"


def test_a_method_no_route_lists_is_answered_as_the_handler_answers_any_other(trusted: TrustedIssuer) -> None:
    deps = memory_deps(FakeClock())
    submit_and_claim(deps, definition=ORDER_V1, order_id="a:o-1")
    app = operator_http.create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator)

    with TestClient(app) as http:
        unknown_path = http.request("FOO", "/api/operator/nope", headers=trusted.operator())
        traced = http.request("TRACE", "/api/operator/orders/a:o-1", headers=trusted.operator())

    assert (unknown_path.status_code, unknown_path.json()["error"]["code"]) == (404, "NoSuchRoute")
    assert (traced.status_code, traced.json()["error"]["code"]) == (405, "MethodNotAllowed")
    assert traced.headers["allow"] == "GET"

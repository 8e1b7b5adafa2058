"""The local host's operator API reads no more of a request body than the handler can take."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

import devhost.operator_http as operator_http
from operator_api.handler import MAX_BODY_BYTES, handle_operator_request
from orderflow.clock import FakeClock
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.unit


def test_an_anonymous_huge_body_is_refused_without_being_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[int] = []
    handle = handle_operator_request

    def recording(method: str, path: str, headers: Any, body: bytes, **deps: Any) -> Any:
        handed.append(len(body))
        return handle(method, path, headers, body, **deps)

    monkeypatch.setattr(operator_http, "handle_operator_request", recording)
    app = operator_http.create_operator_app(memory_deps(FakeClock()), None)
    huge = b"{" + b" " * (8 * 1024 * 1024) + b"}"

    with TestClient(app) as http:
        answered = http.post("/api/operator/orders/a:o-1/review", content=huge)
        small = http.post("/api/operator/orders/a:o-1/review", content=b'{"decision": "approve"}')

    # Not configured: every call is refused, the huge one like the small one.
    assert (answered.status_code, small.status_code) == (503, 503)
    assert handed == [MAX_BODY_BYTES + 1, len(b'{"decision": "approve"}')]

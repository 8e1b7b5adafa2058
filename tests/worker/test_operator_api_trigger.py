"""The operator API's HTTP trigger as the worker runs it: ``RpcHttp`` in, ``RpcHttp`` out, real tokens.

Each invocation carries the ``TypedData.http`` the Functions host sends for an HTTP trigger (method, URL,
headers, body, the route's parameters); the worker decodes it into ``func.HttpRequest`` and encodes the
trigger's ``func.HttpResponse`` as the return value the host answers with. The bearer tokens are minted by
the local issuer and checked against its JWKS, served on loopback; the app's stores are in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from devhost.local_issuer import local_object_id
from function_host.blueprints import operator_api as operator_api_blueprint
from orderflow.contracts import StartStepInput, StepResult
from orderflow.dependencies import Dependencies
from orderflow.messages import ReviewDecisionMessage, parse_message
from orderflow.records import ProcessState, ReviewDecision
from orderflow.settings import Settings
from orderflow.workflows import ORDER_V2
from tests.activity_json import start_step
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENTS, received, submit_and_claim
from tests.worker.appdeps import app_dependencies
from tests.worker.rpc import protos
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

HOST = "https://orderflow-func.azurewebsites.net"
ORDER = "/api/operator/orders/a:o-1"
RESPONSES = "agent-responses"


@pytest.fixture
def deps(monkeypatch: pytest.MonkeyPatch, trusted: TrustedIssuer) -> Iterator[Dependencies]:
    """The trigger's dependencies and token check as ``function_host.wiring`` builds them, in memory and
    trusting the local issuer; o-1 is paused for review before its charge."""
    wired, _, _ = app_dependencies()
    wired = replace(
        wired, settings=Settings.load(env={}, HOST_ID="", REVIEW_AMOUNT_ABOVE=500.0, CLIENTS=TEST_CLIENTS)
    )
    monkeypatch.setattr(operator_api_blueprint, "dependencies", lambda: wired)
    monkeypatch.setattr(operator_api_blueprint, "token_validator", lambda: trusted.validator)
    submit_and_claim(wired, definition=ORDER_V2, amount="1000.50")
    reserved = StepResult(step="reserve_inventory", result={"reservationId": "r-1"}, calls=1)
    for step, completed in (("reserve_inventory", None), ("charge_payment", reserved)):
        start_step(
            StartStepInput(
                order_id="a:o-1",
                instance_id="a:o-1:1",
                workflow_version=ORDER_V2.version,
                step=step,
                timeout_s=8,
                completed=completed,
                response_queue=RESPONSES,
            ).to_payload(),
            wired,
        )
    assert wired.states.get("a:o-1").item.process_state is ProcessState.AWAITING_REVIEW
    yield wired


def http_request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> Any:
    """The trigger's ``TypedData``, as the host sends an HTTP request (the route's ``{*path}`` among its
    parameters)."""
    return protos.TypedData(
        http=protos.RpcHttp(
            method=method,
            url=f"{HOST}{path}",
            headers={"host": HOST.removeprefix("https://"), **{k.lower(): v for k, v in headers.items()}},
            body=protos.TypedData(bytes=body),
            params={"path": path.removeprefix("/api/operator/")},
        )
    )


def answer(worker: FunctionsWorker, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    """Invoke ``operator_api`` and return the HTTP response the worker hands the host."""
    raw = b"" if body is None else json.dumps(body).encode()
    response = worker.invoke("operator_api", {"req": http_request(method, path, headers, raw)})
    assert failure(response) is None
    return response.return_value.http


def header(http: Any, name: str) -> str:
    """A response header, by name in any case (as HTTP reads them)."""
    [value] = [v for k, v in http.headers.items() if k.lower() == name.lower()]
    return str(value)


def body_of(http: Any) -> dict[str, Any]:
    kind = http.body.WhichOneof("data")
    content = http.body.bytes if kind == "bytes" else http.body.string.encode()
    data: dict[str, Any] = json.loads(content)
    return data


def test_without_a_token_the_trigger_answers_401_and_records_nothing(
    worker: FunctionsWorker, deps: Dependencies
) -> None:
    etag = deps.states.get("a:o-1").etag

    http = answer(
        worker, "POST", f"{ORDER}/review", {"Content-Type": "application/json"}, {"decision": "approve"}
    )

    assert http.status_code == "401"
    assert header(http, "WWW-Authenticate") == 'Bearer realm="orderflow"'
    assert body_of(http)["error"]["code"] == "Unauthenticated"
    assert deps.states.get("a:o-1").etag == etag


def test_an_operator_token_cannot_review(
    worker: FunctionsWorker, deps: Dependencies, trusted: TrustedIssuer
) -> None:
    etag = deps.states.get("a:o-1").etag

    http = answer(worker, "POST", f"{ORDER}/review", trusted.operator("otto"), {"decision": "approve"})

    assert http.status_code == "403"
    assert 'error="insufficient_scope"' in header(http, "WWW-Authenticate")
    assert deps.states.get("a:o-1").etag == etag
    assert received(deps.queues.queue(RESPONSES)) == []


def test_a_reviewer_token_approves_and_the_record_names_its_principal(
    worker: FunctionsWorker, deps: Dependencies, trusted: TrustedIssuer
) -> None:
    http = answer(worker, "POST", f"{ORDER}/review", trusted.reviewer("rita"), {"decision": "approve"})

    assert http.status_code == "200", body_of(http)
    assert header(http, "Content-Type") == "application/json; charset=utf-8"
    found = deps.states.get("a:o-1")
    assert header(http, "ETag") == found.etag  # the store's ETag is quoted already: sent once quoted
    rita = f"{trusted.issuer.tenant_id}/{local_object_id('rita')}"
    review = found.item.review
    assert review is not None
    assert (review.decision, review.decided_by, review.decided_by_name) == (
        ReviewDecision.APPROVE,
        rita,
        "rita",
    )
    assert body_of(http)["decidedBy"] == rita
    [forwarded] = received(deps.queues.queue(RESPONSES))
    assert parse_message(ReviewDecisionMessage, forwarded.body).reviewer == rita


def test_either_role_inspects_the_order(
    worker: FunctionsWorker, deps: Dependencies, trusted: TrustedIssuer
) -> None:
    http = answer(worker, "GET", ORDER, trusted.operator("otto"))

    assert http.status_code == "200"
    view = body_of(http)
    assert (view["orderId"], view["processState"]) == ("a:o-1", "AwaitingReview")
    assert "replyTo" not in view

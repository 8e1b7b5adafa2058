"""The operator API against its own OpenAPI document (operator_api.openapi), with schemathesis.

The document is served by the API; schemathesis loads it from the local host's in-process ASGI app
(``devhost.operator_http``) and sends generated requests with a valid token holding both app roles, over
stores that hold orders in several states (so the list, the views and the actions answer with data, not
only refusals). Every answer must be no server error and conform to the document: status code, content
type, headers and body schema.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.testclient import TestClient

from devhost.operator_http import create_operator_app
from operator_api.routes import ROUTES, openapi_document
from operator_api.routing import API_PREFIX, OperatorApiSections
from orderflow.alerts import alert_doc
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.records import ProcessState
from orderflow.workflows import ORDER_V1, ORDER_V2
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import SweepReport
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENT, memory_deps, submit_and_claim
from tests.unit.test_corrections import shipment_refused

pytestmark = pytest.mark.unit

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def seeded() -> HostDeps:
    """Orders ``a:o-1`` (running), ``a:o-2`` (Error) and ``a:o-3`` (order-v2, Pending, unclaimed)."""
    deps = memory_deps(FakeClock())
    submit_and_claim(deps, definition=ORDER_V1, order_id="a:o-1")
    submit_and_claim(deps, definition=ORDER_V1, order_id="a:o-2")
    found = deps.states.get("a:o-2")
    failed = found.item.model_copy(deep=True)
    failed.process_state, failed.locked_by = ProcessState.ERROR, None
    deps.states.replace(failed, etag=found.etag)
    submit_and_claim(deps, definition=ORDER_V2, order_id="a:o-3")
    inbound = deps.queues.queue(TEST_CLIENT.inbound_queue)
    inbound.send('{"orderId": "o-9"}', message_id="m-9")
    [message] = inbound.receive()
    inbound.dead_letter(message, reason="InvalidMessage", description="for the list and show routes")
    assert deps.alerts is not None
    now = deps.clock.now()
    deps.alerts.add(
        alert_doc("order_gave_up", {"order_id": "a:o-2", "reason": "too_many_failures"}, at=now, host="h1")
    )
    swept = sweep_doc(SweepReport(scanned=3), started=now, ended=now, host_id="h1", leadership="lease")
    record_sweep(deps.alerts, swept)  # a sweep document and its minute's tally: /supervisor, /activity
    return deps


@pytest.fixture
def api(trusted: TrustedIssuer) -> Any:
    built = seeded()
    app = create_operator_app(built, OperatorApiSections.of(built.settings), trusted.validator)
    return schemathesis.openapi.from_asgi("/api/operator/openapi.json", app)


def test_the_api_answers_every_generated_request_as_its_document_says(
    api: Any, trusted: TrustedIssuer
) -> None:
    headers = trusted.bearer("otto", OPERATOR_ROLE, REVIEWER_ROLE)
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == 17

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def answers_as_documented(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        answers_as_documented()


def test_the_document_is_served_without_a_token_and_names_every_route(trusted: TrustedIssuer) -> None:
    built = seeded()
    client = TestClient(create_operator_app(built, OperatorApiSections.of(built.settings), trusted.validator))

    served = client.get("/api/operator/openapi.json")

    assert served.status_code == 200 and served.json() == openapi_document()
    paths = set(openapi_document()["paths"])
    actions = {"review", "compensate", "resubmit", "suspend", "resume", "timeline"}
    dead_letters = "/api/operator/deadletters/{queue}"
    assert paths == {
        "/api/operator/orders",
        "/api/operator/orders/{orderId}",
        *(f"/api/operator/orders/{{orderId}}/{action}" for action in actions),
        dead_letters,
        dead_letters + "/purge",
        dead_letters + "/{deadLetterId}",
        dead_letters + "/{deadLetterId}/replay",
        "/api/operator/queues",
        "/api/operator/alerts",
        "/api/operator/supervisor",
        "/api/operator/activity",
        "/api/operator/console-config",
    }
    view = openapi_document()["components"]["schemas"]["OrderView"]["properties"]
    assert "timeline" in view and not {"replyTo", "pendingReply", "id"} & set(view)


def test_a_corrected_resubmit_and_its_answer_are_as_the_document_says(trusted: TrustedIssuer) -> None:
    deps = seeded()
    seen = shipment_refused(deps, "a:o-4")
    document = openapi_document()
    body = {"input": {"carrier": "AIR"}}
    resubmit = document["paths"]["/api/operator/orders/{orderId}/resubmit"]["post"]
    requested = resubmit["requestBody"]["content"]["application/json"]["schema"]

    answer = TestClient(
        create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator)
    ).post(
        "/api/operator/orders/a:o-4/resubmit",
        json=body,
        headers={**trusted.bearer("otto", OPERATOR_ROLE), "If-Match": seen.etag},
    )

    assert answer.status_code == 202, answer.text
    assert answer.json()["order"]["corrections"][0]["input"] == {"carrier": "AIR"}
    # The body and the answer validate against the document's own schemas (refs resolved within it).
    Draft202012Validator({**document, **requested}).validate(body)
    Draft202012Validator({**document, "$ref": "#/components/schemas/ActionAnswer"}).validate(answer.json())
    for status in ("409", "412", "422", "428"):
        assert resubmit["responses"][status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorAnswer"
        }
    assert not Draft202012Validator({**document, **requested}).is_valid({"input": {}})


def test_a_replay_that_lost_its_race_is_answered_as_the_document_says(trusted: TrustedIssuer) -> None:
    deps = seeded()
    [dead] = deps.queues.dead_letter_page(TEST_CLIENT.inbound_queue).items  # type: ignore[attr-defined]
    path = f"/api/operator/deadletters/{TEST_CLIENT.inbound_queue}/{dead.dead_letter_id}/replay"
    client = TestClient(create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator))
    document = openapi_document()
    replay = document["paths"]["/api/operator/deadletters/{queue}/{deadLetterId}/replay"]["post"]

    first = client.post(path, headers=trusted.bearer("otto", OPERATOR_ROLE))
    second = client.post(path, headers=trusted.bearer("olga", OPERATOR_ROLE))

    assert (first.status_code, second.status_code) == (200, 409)
    assert second.json()["error"]["replayed"]["by"] == first.json()["replayedBy"]
    declared = replay["responses"]["409"]["content"]["application/json"]["schema"]
    assert declared == {"$ref": "#/components/schemas/ErrorAnswer"}
    validator = Draft202012Validator({**document, **declared})
    validator.validate(second.json())
    assert not validator.is_valid({"error": {"code": "AlreadyReplayed", "message": "", "replayed": {}}})


def test_the_document_has_one_operation_per_documented_route_and_no_other() -> None:
    document = openapi_document()
    declared = {(API_PREFIX + route.path, route.method.lower()) for route in ROUTES if route.documented}
    operations = {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }

    assert operations == declared and len(declared) == 17
    assert {route.path for route in ROUTES if not route.documented} == {
        "/openapi.json",
        "/console",
        "/console/{*file}",
    }
    for route in ROUTES:
        if route.documented:
            responses = document["paths"][API_PREFIX + route.path][route.method.lower()]["responses"]
            assert {str(status) for status, _ in route.refusals} <= set(responses), route.name
            assert str(route.status) in responses, route.name

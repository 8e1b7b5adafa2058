"""The operator API's handler (operator_api.handler) over the in-memory stores, with real bearer tokens.

Tokens are minted by the local issuer and checked against its JWKS on loopback (``tests/operator_tokens``).
Each refusal is checked to leave the record exactly as it was (the same ETag) and to send nothing; each
accepted call to record the verified principal, never a name from the body.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import jwt
import pytest

from devhost.local_issuer import LocalIssuer, local_object_id
from operator_api.answers import OperatorResponse
from operator_api.compensate import OPERATOR_DECISION
from operator_api.handler import MAX_BODY_BYTES, handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.clock import FakeClock
from orderflow.contracts import FinishOrderInput, Outcome, StartStepInput, StepResult
from orderflow.messages import ReviewDecisionMessage, parse_message
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE, TokenValidator
from orderflow.records import ReviewDecision
from orderflow.settings import Settings
from orderflow.workflows import ORDER_V1, ORDER_V2
from tests.activity_json import finish_order, start_step
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer, local_issuer, other_key, signing_key
from tests.unit.fakes import memory_deps, received, submit_and_claim

pytestmark = pytest.mark.unit

RESERVE, CHARGE = "reserve_inventory", "charge_payment"
RESERVED = StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1)
ORDER = "/api/operator/orders/a:o-1"
RESPONSES = "agent-responses-h1"


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock(), REVIEW_AMOUNT_ABOVE=500.0, REVIEW_TIMEOUT_S=60.0, CLAIM_TIMEOUT_S=30.0)


def call(
    deps: HostDeps,
    validator: TokenValidator | None,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> OperatorResponse:
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return handle_operator_request(
        method,
        path,
        headers or {},
        raw,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=validator,
    )


def start(deps: HostDeps, step: str, *, version: str = ORDER_V2.version, **changes: Any) -> Any:
    fields: dict[str, Any] = {
        "order_id": "a:o-1",
        "instance_id": "a:o-1:1",
        "workflow_version": version,
        "step": step,
        "timeout_s": 8,
        "response_queue": RESPONSES,
        **changes,
    }
    return start_step(StartStepInput(**fields).to_payload(), deps)


def awaiting_review(deps: HostDeps) -> None:
    """o-1 (client-a's, 1000.50) paused for review before the charge; its replies so far taken."""
    submit_and_claim(deps, definition=ORDER_V2, amount="1000.50")
    start(deps, RESERVE)
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "awaiting_review"
    received(deps.queues.queue("client-a"))


def running(deps: HostDeps) -> None:
    """o-1 (order-v1) with its first step running."""
    submit_and_claim(deps, definition=ORDER_V1, amount="100.00")
    start(deps, RESERVE, version=ORDER_V1.version)
    received(deps.queues.queue("client-a"))


def audit_id(name: str, issuer: LocalIssuer | None = None) -> str:
    return f"{(issuer or local_issuer()).tenant_id}/{local_object_id(name)}"


def code(response: OperatorResponse) -> str:
    return str(response.body["error"]["code"])


def assert_untouched(deps: HostDeps, etag: str) -> None:
    assert deps.states.get("a:o-1").etag == etag
    assert received(deps.queues.queue(RESPONSES)) == []
    assert received(deps.queues.queue("client-a")) == []


# --- who is calling: each refusal leaves the record as it was ---------------------------------------


def forged_tokens(trusted: TrustedIssuer) -> dict[str, str]:
    """Tokens no one the API trusts signed, each with a reviewer's claims."""
    genuine = trusted.issuer.mint(name="rita", roles=[REVIEWER_ROLE])
    header, _claims, signature = genuine.split(".")
    claims = jwt.decode(genuine, options={"verify_signature": False})
    edited = jwt.utils.base64url_encode(json.dumps({**claims, "roles": [OPERATOR_ROLE]}).encode()).decode()
    impostor = LocalIssuer(other_key())
    return {
        "edited payload": f"{header}.{edited}.{signature}",
        "another key under the trusted key id": jwt.encode(
            claims, other_key(), algorithm="RS256", headers={"kid": trusted.issuer.key_id}
        ),
        "another key": impostor.mint(name="rita", roles=[REVIEWER_ROLE]),
    }


def test_a_call_without_a_token_is_401_with_a_challenge(deps: HostDeps, trusted: TrustedIssuer) -> None:
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag

    response = call(deps, trusted.validator, "POST", f"{ORDER}/review", {}, {"decision": "approve"})

    assert (response.status, code(response)) == (401, "Unauthenticated")
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="orderflow"'
    assert_untouched(deps, etag)


@pytest.mark.parametrize(
    "token",
    ["wrong audience", "expired", "edited payload", "another key under the trusted key id", "another key"],
)
def test_a_token_the_api_does_not_trust_is_401(deps: HostDeps, trusted: TrustedIssuer, token: str) -> None:
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag
    other_audience = LocalIssuer(signing_key(), audience="api://someone-else")
    tokens = {
        **forged_tokens(trusted),
        "wrong audience": other_audience.mint(name="rita", roles=[REVIEWER_ROLE]),
        "expired": trusted.issuer.mint(name="rita", roles=[REVIEWER_ROLE], now=time.time() - 7200),
    }

    response = call(
        deps,
        trusted.validator,
        "POST",
        f"{ORDER}/review",
        {"Authorization": f"Bearer {tokens[token]}"},
        {"decision": "approve"},
    )

    assert (response.status, code(response)) == (401, "Unauthenticated")
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="orderflow", error="invalid_token"')
    assert tokens[token] not in json.dumps(response.body)
    assert_untouched(deps, etag)


def test_a_token_without_the_role_is_403_recorded_and_logged_by_object_id(
    deps: HostDeps, trusted: TrustedIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag
    headers = trusted.bearer("carl")  # signed in, but no app role: a client's user, say

    with telemetry.recording() as events, caplog.at_level(logging.INFO, logger="operator_api"):
        response = call(deps, trusted.validator, "POST", f"{ORDER}/review", headers, {"decision": "approve"})

    assert (response.status, code(response)) == (403, "Forbidden")
    assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]
    assert events["operator.forbidden"] == 1
    [logged] = [r.getMessage() for r in caplog.records if r.name == "operator_api.handler"]
    assert audit_id("carl") in logged
    assert headers["Authorization"].split()[1] not in caplog.text
    assert_untouched(deps, etag)


def test_a_reviewer_cannot_compensate_and_an_operator_cannot_review(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag

    compensated = call(deps, trusted.validator, "POST", f"{ORDER}/compensate", trusted.reviewer(), {})
    reviewed = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.operator(), {"decision": "approve"}
    )

    assert (compensated.status, reviewed.status) == (403, 403)
    assert "orderflow.operator" in compensated.body["error"]["message"]
    assert "orderflow.reviewer" in reviewed.body["error"]["message"]
    assert_untouched(deps, etag)


def test_when_the_signing_keys_cannot_be_fetched_the_answer_is_503(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    awaiting_review(deps)
    unreachable = {**trusted.settings, "OPERATOR_JWKS_URI": "http://127.0.0.1:9/keys"}
    validator = TokenValidator.from_section(Settings.load(env={}, **unreachable).operator_api)

    response = call(deps, validator, "POST", f"{ORDER}/review", trusted.reviewer(), {"decision": "approve"})

    assert (response.status, code(response), response.headers["Retry-After"]) == (
        503,
        "SigningKeysUnavailable",
        "1",
    )


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("exp", lambda now: str(now + 3600)),
        ("exp", lambda now: f"{now + 3600}.0"),
        ("exp", lambda now: True),
        ("exp", lambda now: None),
        ("exp", lambda now: 10**40),
        ("nbf", str),
        ("iat", str),
        ("iat", lambda now: float("inf")),
    ],
    ids=[
        "exp-string",
        "exp-float-string",
        "exp-true",
        "exp-null",
        "exp-huge",
        "nbf-string",
        "iat-string",
        "iat-inf",
    ],
)
def test_a_time_claim_that_is_not_a_number_is_401_never_500(
    deps: HostDeps, trusted: TrustedIssuer, claim: str, value: Any
) -> None:
    # Signed by the trusted key: only the claim's type is wrong.
    claims = jwt.decode(
        trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE]), options={"verify_signature": False}
    )
    claims[claim] = value(int(time.time()))
    token = jwt.encode(claims, signing_key(), algorithm="RS256", headers={"kid": trusted.issuer.key_id})
    running(deps)

    response = call(deps, trusted.validator, "GET", ORDER, {"Authorization": f"Bearer {token}"})

    assert (response.status, code(response)) == (401, "Unauthenticated")
    reason = f"no {claim} claim" if value(0) is None else f"malformed {claim} claim"
    assert response.body["error"]["message"] == reason
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="orderflow", error="invalid_token"')


def test_an_api_that_is_not_configured_refuses_every_call(deps: HostDeps, trusted: TrustedIssuer) -> None:
    response = call(deps, None, "GET", ORDER, trusted.operator())

    assert (response.status, code(response)) == (503, "NotConfigured")


# --- review ----------------------------------------------------------------------------------------


def test_a_reviewer_approves_and_the_record_holds_the_verified_principal(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    awaiting_review(deps)

    response = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer("rita"), {"decision": "approve"}
    )

    assert response.status == 200, response.body
    found = deps.states.get("a:o-1")
    review = found.item.review
    assert review is not None
    assert (review.decision, review.decided_by, review.decided_by_name) == (
        ReviewDecision.APPROVE,
        audit_id("rita"),
        "rita",
    )
    assert response.body["decidedBy"] == audit_id("rita")
    assert response.headers["ETag"] == found.etag  # the store's ETag is quoted already: sent once quoted
    [forwarded] = received(deps.queues.queue(RESPONSES))
    message = parse_message(ReviewDecisionMessage, forwarded.body)
    assert (message.instance_id, message.decision, message.reviewer) == (
        "a:o-1:1",
        "approve",
        audit_id("rita"),
    )
    assert forwarded.message_id == "a:o-1:charge_payment:review"


def test_a_body_cannot_name_the_reviewer(deps: HostDeps, trusted: TrustedIssuer) -> None:
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag

    response = call(
        deps,
        trusted.validator,
        "POST",
        f"{ORDER}/review",
        trusted.reviewer("rita"),
        {"decision": "approve", "reviewer": "the-ceo"},
    )

    assert (response.status, code(response)) == (400, "UnexpectedField")
    assert_untouched(deps, etag)


def test_the_first_decision_wins(deps: HostDeps, trusted: TrustedIssuer) -> None:
    awaiting_review(deps)
    first = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer("rita"), {"decision": "approve"}
    )
    received(deps.queues.queue(RESPONSES))
    etag = deps.states.get("a:o-1").etag

    other = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer("rex"), {"decision": "reject"}
    )
    same_by_another = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer("rex"), {"decision": "approve"}
    )

    assert first.status == 200
    assert (other.status, code(other), same_by_another.status) == (409, "AlreadyDecided", 409)
    assert audit_id("rita") in other.body["error"]["message"]
    assert_untouched(deps, etag)
    review = deps.states.get("a:o-1").item.review
    assert review is not None and (review.decision, review.decided_by) == ("approve", audit_id("rita"))


def test_the_same_decision_again_is_forwarded_again_and_writes_nothing(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    awaiting_review(deps)
    call(deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer("rita"), {"decision": "reject"})
    received(deps.queues.queue(RESPONSES))
    etag = deps.states.get("a:o-1").etag

    again = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer("rita"), {"decision": "reject"}
    )

    assert again.status == 200
    assert deps.states.get("a:o-1").etag == etag
    assert len(received(deps.queues.queue(RESPONSES))) == 1


def test_an_order_not_awaiting_review_is_409(deps: HostDeps, trusted: TrustedIssuer) -> None:
    running(deps)
    etag = deps.states.get("a:o-1").etag

    response = call(
        deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer(), {"decision": "approve"}
    )

    assert (response.status, code(response)) == (409, "NotAwaitingReview")
    assert "order is Processing" in response.body["error"]["message"]
    assert_untouched(deps, etag)


# --- compensate ------------------------------------------------------------------------------------


def test_an_operator_stops_a_running_order_and_the_audit_names_the_verified_principal(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    running(deps)

    response = call(
        deps,
        trusted.validator,
        "POST",
        f"{ORDER}/compensate",
        trusted.operator("otto"),
        {"reason": "dispute"},
    )

    assert (response.status, response.body["outcome"]) == (202, "StopRequested")
    record = deps.states.get("a:o-1").item
    assert (record.stop_requested_by, record.stop_requested_by_name) == (
        f"operator:{audit_id('otto')}",
        "otto",
    )
    assert record.last_error is not None
    # The client's replies quote lastError: it says an operator stopped the order, not who or why.
    assert (record.last_error.code, record.last_error.message) == (
        OPERATOR_DECISION,
        "an operator stopped the order",
    )
    assert record.stop_reason == "dispute"
    assert audit_id("otto") not in record.last_error.message
    stopped = finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=RESERVED,
        ).to_payload(),
        deps,
    )
    assert stopped == {"outcome": "stopped", "cause": OPERATOR_DECISION}


def test_compensating_a_finished_order_is_409(deps: HostDeps, trusted: TrustedIssuer) -> None:
    running(deps)
    finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=RESERVED,
        ).to_payload(),
        deps,
    )
    received(deps.queues.queue("client-a"))
    etag = deps.states.get("a:o-1").etag

    response = call(deps, trusted.validator, "POST", f"{ORDER}/compensate", trusted.operator(), b"")

    assert (response.status, code(response)) == (409, "NotCompensable")
    assert response.body["error"]["message"] == "order is Processed"
    assert_untouched(deps, etag)


# --- inspect, routes, bodies -------------------------------------------------------------------------


@pytest.mark.parametrize("role", [OPERATOR_ROLE, REVIEWER_ROLE])
def test_either_role_inspects_an_order_and_sees_its_public_view(
    deps: HostDeps, trusted: TrustedIssuer, role: str
) -> None:
    awaiting_review(deps)
    found = deps.states.get("a:o-1")

    response = call(deps, trusted.validator, "GET", ORDER, trusted.bearer("ida", role))

    assert response.status == 200
    assert response.headers["ETag"] == found.etag  # the store's ETag is quoted already: sent once quoted
    view = response.body
    assert (view["orderId"], view["processState"], view["review"]["step"]) == (
        "a:o-1",
        "AwaitingReview",
        CHARGE,
    )
    assert not {"id", "replyTo", "pendingReply"} & set(view)
    assert "responseQueue" not in view["review"]
    assert view["steps"][RESERVE]["status"] == "Completed"


def test_an_unknown_order_is_404_for_every_action(deps: HostDeps, trusted: TrustedIssuer) -> None:
    path = "/api/operator/orders/a:no-such-order"
    answers = [
        call(deps, trusted.validator, "GET", path, trusted.operator()),
        call(deps, trusted.validator, "POST", f"{path}/review", trusted.reviewer(), {"decision": "approve"}),
        call(deps, trusted.validator, "POST", f"{path}/compensate", trusted.operator(), {}),
    ]

    assert [(a.status, code(a)) for a in answers] == [(404, "UnknownOrder")] * 3


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", f"{ORDER}/review", 405),
        ("DELETE", ORDER, 405),
        ("POST", ORDER, 405),
        ("POST", "/api/operator/orders", 405),
        ("GET", "/api/operator/orders/a:o-1/history", 404),
        ("GET", "/api/operator/orders/", 404),
        ("GET", f"{ORDER}/", 404),
        ("POST", f"{ORDER}/approve", 404),
        ("GET", "/api/operator/clients/c-1", 404),
        ("GET", "/api/orders/a:o-1", 404),
    ],
)
def test_other_methods_and_paths(
    deps: HostDeps, trusted: TrustedIssuer, method: str, path: str, status: int
) -> None:
    response = call(deps, trusted.validator, method, path, trusted.operator())

    assert response.status == status
    if status == 405:
        assert response.headers["Allow"] in ("GET", "POST")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"decision": "maybe"}, "InvalidValue"),
        ({}, "MissingField"),
        (b"{not json", "InvalidJson"),
        (b"[]", "NotAnObject"),
        (b'{"decision": "approve", "decision": "reject"}', "InvalidJson"),
    ],
)
def test_a_bad_body_is_400_and_writes_nothing(
    deps: HostDeps, trusted: TrustedIssuer, body: Any, reason: str
) -> None:
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag

    response = call(deps, trusted.validator, "POST", f"{ORDER}/review", trusted.reviewer(), body)

    assert (response.status, code(response)) == (400, reason)
    assert_untouched(deps, etag)


def test_an_order_id_without_its_client_prefix_is_refused_and_writes_nothing(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    # The attack: name an order by its bare id, hoping to reach whichever client's order has that id.
    awaiting_review(deps)
    etag = deps.states.get("a:o-1").etag
    bare = "/api/operator/orders/o-1"

    answers = [
        call(deps, trusted.validator, "GET", bare, trusted.operator()),
        call(deps, trusted.validator, "POST", f"{bare}/review", trusted.reviewer(), {"decision": "approve"}),
        call(deps, trusted.validator, "POST", f"{bare}/compensate", trusted.operator(), {}),
    ]

    assert [(a.status, code(a)) for a in answers] == [(400, "InvalidField")] * 3
    assert all("'<client id>:<order id>'" in a.body["error"]["message"] for a in answers)
    assert_untouched(deps, etag)


def test_an_invalid_order_id_and_an_oversized_body(deps: HostDeps, trusted: TrustedIssuer) -> None:
    bad_id = call(deps, trusted.validator, "GET", "/api/operator/orders/a:o:1", trusted.operator())
    huge = call(
        deps,
        trusted.validator,
        "POST",
        f"{ORDER}/compensate",
        trusted.operator(),
        b" " * (MAX_BODY_BYTES + 1),
    )

    assert (bad_id.status, code(bad_id)) == (400, "InvalidField")
    assert (huge.status, code(huge)) == (413, "TooLarge")


def test_responses_are_json_and_never_cached(deps: HostDeps, trusted: TrustedIssuer) -> None:
    response = call(deps, trusted.validator, "GET", ORDER, {})

    assert response.all_headers()["Content-Type"] == "application/json; charset=utf-8"
    assert response.all_headers()["Cache-Control"] == "no-store"
    assert json.loads(response.content()) == response.body

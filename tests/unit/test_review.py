"""Human review over the in-memory stores: the pause, the decision's two routes (the operator API, then
the waiting attempt), the first decision wins."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import jwt
import pytest

from devhost.local_issuer import local_object_id
from intake.submission import handle_intake_message
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orchestrators.listener import Delivery, handle_response
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.contracts import RecordReviewInput, StartStepInput, StepResult
from orderflow.operator_auth import REVIEWER_ROLE
from orderflow.orchestration import InstanceStatus
from orderflow.records import ProcessState, ReviewDecision
from orderflow.settings import Settings
from orderflow.workflows import ORDER_V1, ORDER_V2
from supervisor.recovery import Recovery
from tests.activity_json import record_review, start_step
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer, signing_key
from tests.unit.fakes import TEST_CLIENT, memory_deps, received, recover_once, submit_and_claim

pytestmark = pytest.mark.unit

RESERVE, CHARGE = "reserve_inventory", "charge_payment"
RESERVED = StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(clock: FakeClock) -> HostDeps:
    return memory_deps(clock, REVIEW_AMOUNT_ABOVE=500.0, REVIEW_TIMEOUT_S=60.0, CLAIM_TIMEOUT_S=30.0)


@pytest.fixture
def decide(deps: HostDeps, trusted: TrustedIssuer) -> Callable[..., OperatorResponse]:
    """A reviewer's decision on o-1 through the operator API, with a reviewer's token for ``reviewer``."""

    def call(decision: str, reviewer: str = "ana") -> OperatorResponse:
        return handle_operator_request(
            "POST",
            "/api/operator/orders/a:o-1/review",
            trusted.reviewer(reviewer),
            json.dumps({"decision": decision}).encode(),
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
        )

    return call


def reviewer_id(trusted: TrustedIssuer, name: str) -> str:
    return f"{trusted.issuer.tenant_id}/{local_object_id(name)}"


def submitted_and_claimed(deps: HostDeps, amount: str = "1000.50") -> None:
    submit_and_claim(deps, definition=ORDER_V2, amount=amount)
    received(deps.queues.queue("client-a"))


def start(deps: HostDeps, step: str, completed: StepResult | None = None, **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "order_id": "a:o-1",
        "instance_id": "a:o-1:1",
        "workflow_version": ORDER_V2.version,
        "step": step,
        "timeout_s": 8,
        "completed": completed,
        "response_queue": "agent-responses-h1",
        **changes,
    }
    return start_step(StartStepInput(**fields).to_payload(), deps)


def test_a_large_order_pauses_before_the_charge_and_tells_the_client(
    deps: HostDeps, clock: FakeClock
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)

    result = start(deps, CHARGE, completed=RESERVED)

    assert (result["outcome"], result["reviewDefault"]) == ("awaiting_review", "reject")
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.AWAITING_REVIEW
    assert record.review is not None
    assert (record.review.step, record.review.deadline, record.review.response_queue) == (
        CHARGE,
        clock.now() + timedelta(seconds=60),
        "agent-responses-h1",
    )
    assert result["completeBy"] == record.review.deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert record.steps[RESERVE].status.value == "Completed"  # recorded in the same write
    assert received(deps.queues.queue("agent-payment")) == []  # nothing charged yet
    [reply] = [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]
    assert (reply["status"], reply["reason"]) == ("AwaitingReview", "amount_above_review_threshold")
    etag = deps.states.get("a:o-1").etag
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "awaiting_review"  # a re-run writes nothing
    assert deps.states.get("a:o-1").etag == etag


def test_small_orders_and_order_v1_are_not_reviewed(deps: HostDeps) -> None:
    submitted_and_claimed(deps, amount="100.00")
    start(deps, RESERVE)
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "started"
    assert start(deps, CHARGE, workflow_version=ORDER_V1.version)["outcome"] == "started"


def test_a_reviewers_decision_is_recorded_and_forwarded_to_the_waiting_attempt(
    deps: HostDeps, decide: Callable[..., OperatorResponse], trusted: TrustedIssuer
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=RESERVED)

    result = decide("approve")

    assert result.status == 200
    ana = reviewer_id(trusted, "ana")
    review = deps.states.get("a:o-1").item.review
    assert review is not None and (review.decision, review.decided_by) == (ReviewDecision.APPROVE, ana)
    [forwarded] = received(deps.queues.queue("agent-responses-h1"))
    assert forwarded.message_id == "a:o-1:charge_payment:review"
    assert json.loads(forwarded.body)["instanceId"] == "a:o-1:1"

    class Client:
        raised: list[tuple[str, str, dict[str, Any]]] = []

        def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
            return True

        def get_status(self, instance_id: str) -> InstanceStatus:
            return InstanceStatus(running=True, custom_status="review:charge_payment")

        def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
            self.raised.append((instance_id, name, payload))

    client = Client()
    assert handle_response(forwarded.body, client=client) is Delivery.RAISED
    assert client.raised == [("a:o-1:1", "ReviewDecision", {"decision": "approve", "reviewer": ana})]


def test_the_first_decision_wins_over_the_default_at_the_deadline(
    deps: HostDeps, decide: Callable[..., OperatorResponse]
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=RESERVED)
    decide("approve")

    # The orchestration's timer fired meanwhile and applies the default: the approval stays in force.
    result = record_review(
        RecordReviewInput(
            order_id="a:o-1", instance_id="a:o-1:1", step=CHARGE, decision="reject", decided_by="deadline"
        ).to_payload(),
        deps,
    )

    assert result == {"outcome": "review_recorded", "decision": "approve"}
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.PROCESSING
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "started"  # approved: the charge starts
    late = decide("reject")
    assert (late.status, late.body["error"]["code"]) == (409, "NotAwaitingReview")
    assert late.body["error"]["message"].startswith("order is Processing, not awaiting review")


def test_an_attempt_that_died_awaiting_review_is_recovered_and_the_next_one_finds_the_decision(
    deps: HostDeps, clock: FakeClock, decide: Callable[..., OperatorResponse]
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=RESERVED)
    decide("reject")
    clock.advance(60 + 31)  # the deadline and its grace pass: nobody recorded the decision

    assert recover_once(deps, "a:o-1", clock) is (Recovery.REQUEUED)
    clock.advance(60)
    assert (
        claim(
            deps.states,
            deps.states.get("a:o-1"),
            clock,
            deps.settings.starter,
            deps.settings.steps,
            host_id=deps.settings.queues.HOST_ID,
        )
        is not None
    )

    result = start(deps, CHARGE, completed=RESERVED, instance_id="a:o-1:2")

    assert result == {"outcome": "review_rejected"}


def test_a_decision_for_an_attempt_that_died_is_acted_on_within_the_grace_not_the_deadline(
    deps: HostDeps, clock: FakeClock, decide: Callable[..., OperatorResponse]
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=RESERVED)
    decide("approve")  # its owner died: nobody raises the event

    record = deps.states.get("a:o-1").item
    assert record.complete_by == clock.now() + timedelta(seconds=deps.settings.starter.CLAIM_TIMEOUT_S)
    # Far before the 60 s review deadline + grace.
    clock.advance(deps.settings.starter.CLAIM_TIMEOUT_S + deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S + 1)
    assert recover_once(deps, "a:o-1", clock) is (Recovery.REQUEUED)
    clock.advance(60)
    assert (
        claim(
            deps.states,
            deps.states.get("a:o-1"),
            clock,
            deps.settings.starter,
            deps.settings.steps,
            host_id=deps.settings.queues.HOST_ID,
        )
        is not None
    )
    assert start(deps, CHARGE, completed=RESERVED, instance_id="a:o-1:2")["outcome"] == "started"  # approved


def test_a_cancel_of_an_order_awaiting_review_does_not_wait_for_the_deadline(
    deps: HostDeps, clock: FakeClock
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=RESERVED)
    cancel = json.dumps({"schemaVersion": 1, "type": "CancelOrder", "orderId": "o-1"})
    handle_intake_message(
        cancel,
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )

    clock.advance(deps.settings.starter.CLAIM_TIMEOUT_S + deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S + 1)
    recover_once(deps, "a:o-1", clock)

    assert deps.states.get("a:o-1").item.process_state is ProcessState.COMPENSATING


def test_a_reviewer_cannot_approve_an_order_submitted_under_their_own_principal(
    clock: FakeClock, trusted: TrustedIssuer
) -> None:
    # Client a's app runs as the principal "ana" also holds: her approval of its order is refused.
    clients = json.dumps([{"id": "a", "replyQueue": "client-a", "principalId": local_object_id("ana")}])
    deps = memory_deps(clock, REVIEW_AMOUNT_ABOVE=500.0, REVIEW_TIMEOUT_S=60.0, CLIENTS=clients)
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "awaiting_review"
    before = deps.states.get("a:o-1")

    def decide(decision: str, reviewer: str) -> OperatorResponse:
        body = json.dumps({"decision": decision}).encode()
        path = "/api/operator/orders/a:o-1/review"
        headers = trusted.reviewer(reviewer)
        return handle_operator_request(
            "POST",
            path,
            headers,
            body,
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
        )

    own = decide("approve", "ana")

    assert (own.status, own.body["error"]["code"]) == (403, "ReviewNotPermitted")
    assert deps.states.get("a:o-1").etag == before.etag
    assert received(deps.queues.queue("agent-responses-h1")) == []
    other = decide("approve", "rita")
    assert other.status == 200
    review = deps.states.get("a:o-1").item.review
    assert review is not None and review.decided_by == reviewer_id(trusted, "rita")


def own_principal_token(trusted: TrustedIssuer, name: str, object_id: str) -> dict[str, str]:
    """A reviewer's ``Authorization`` header for ``name`` whose ``oid`` is written as ``object_id``, signed
    by the trusted key (as a token issued by the tenant would be)."""
    genuine = trusted.issuer.mint(name=name, roles=[REVIEWER_ROLE])
    claims = {**jwt.decode(genuine, options={"verify_signature": False}), "oid": object_id}
    token = jwt.encode(claims, signing_key(), algorithm="RS256", headers={"kid": trusted.issuer.key_id})
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "written",
    [
        lambda guid: guid,
        lambda guid: guid.upper(),
        lambda guid: "{" + guid + "}",
        lambda guid: "{" + guid.upper() + "}",
        lambda guid: "urn:uuid:" + guid,
        lambda guid: guid.replace("-", ""),
    ],
    ids=["exact", "upper-case", "braces", "braces-upper-case", "urn", "no-hyphens"],
)
@pytest.mark.parametrize(
    "registered", [str.lower, lambda guid: "{" + guid.upper() + "}"], ids=["lower", "braced"]
)
def test_an_own_principal_written_in_another_form_is_still_refused_its_approval(
    clock: FakeClock, trusted: TrustedIssuer, written: Callable[[str], str], registered: Callable[[str], str]
) -> None:
    ana = local_object_id("ana")
    clients = json.dumps([{"id": "a", "replyQueue": "client-a", "principalId": registered(ana)}])
    deps = memory_deps(clock, REVIEW_AMOUNT_ABOVE=500.0, REVIEW_TIMEOUT_S=60.0, CLIENTS=clients)
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "awaiting_review"
    before = deps.states.get("a:o-1")
    body = json.dumps({"decision": "approve"}).encode()
    headers = own_principal_token(trusted, "ana", written(ana))

    own = handle_operator_request(
        "POST",
        "/api/operator/orders/a:o-1/review",
        headers,
        body,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )

    assert (own.status, own.body["error"]["code"]) == (403, "ReviewNotPermitted")
    assert deps.states.get("a:o-1").etag == before.etag
    assert received(deps.queues.queue("agent-responses-h1")) == []


def test_a_token_whose_object_id_is_no_guid_is_refused_before_any_decision(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "awaiting_review"
    before = deps.states.get("a:o-1")
    body = json.dumps({"decision": "approve"}).encode()
    headers = own_principal_token(trusted, "ana", "ana")

    refused = handle_operator_request(
        "POST",
        "/api/operator/orders/a:o-1/review",
        headers,
        body,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )

    assert (refused.status, refused.body["error"]["code"]) == (401, "Unauthenticated")
    assert refused.body["error"]["message"] == "malformed oid claim"
    assert deps.states.get("a:o-1").etag == before.etag


def test_an_order_whose_client_is_no_longer_registered_cannot_be_approved(
    clock: FakeClock, trusted: TrustedIssuer
) -> None:
    deps = memory_deps(clock, REVIEW_AMOUNT_ABOVE=500.0, REVIEW_TIMEOUT_S=60.0)
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    assert start(deps, CHARGE, completed=RESERVED)["outcome"] == "awaiting_review"
    # The registry changed: client a is gone, so nobody can say whose principal submitted the order.
    settings = Settings.load({}, **{**deps.settings.values(), "CLIENTS": '[{"id": "b"}]'})
    unregistered = replace(deps, settings=settings)
    before = deps.states.get("a:o-1")
    body = json.dumps({"decision": "approve"}).encode()
    path = "/api/operator/orders/a:o-1/review"

    approved = handle_operator_request(
        "POST",
        path,
        trusted.reviewer("rita"),
        body,
        deps=unregistered,
        sections=OperatorApiSections.of(unregistered.settings),
        validator=trusted.validator,
    )

    assert (approved.status, approved.body["error"]["code"]) == (403, "ReviewNotPermitted")
    assert deps.states.get("a:o-1").etag == before.etag

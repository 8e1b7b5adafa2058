"""A client cannot act as a reviewer or an operator by putting their actions on its inbound queue.

Anyone who may send to the orders queue is a client; a reviewer's decision and an operator's compensate
are calls to the authenticated operator API (docs/operator-api.md). Each test is an attack that worked
while the queue took those messages, with the name a body field anyone could type: now the message is
dead-lettered ``OperatorActionNotAccepted`` before anything is read or written, and no reply is sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from intake.submission import handle_intake_message
from orderflow.clock import FakeClock
from orderflow.contracts import StartStepInput, StepResult
from orderflow.errors import InvalidMessage
from orderflow.messages import OPERATOR_ACTION_NOT_ACCEPTED, SUBMISSION_REASONS
from orderflow.records import ProcessState
from orderflow.workflows import ORDER_V1, ORDER_V2
from tests.activity_json import start_step
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, memory_deps, received, submit_and_claim

pytestmark = pytest.mark.unit

RESERVE, CHARGE = "reserve_inventory", "charge_payment"


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock(), REVIEW_AMOUNT_ABOVE=500.0, REVIEW_TIMEOUT_S=60.0, CLAIM_TIMEOUT_S=30.0)


def start(deps: HostDeps, step: str, *, version: str, completed: StepResult | None = None) -> Any:
    return start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=version,
            step=step,
            timeout_s=8,
            completed=completed,
            response_queue="agent-responses-h1",
        ).to_payload(),
        deps,
    )


def on_the_orders_queue(deps: HostDeps, body: dict[str, Any]) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as refused:
        handle_intake_message(
            json.dumps(body),
            client=TEST_CLIENT,
            orders=deps.orders,
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
            steps=deps.settings.steps,
            starter=deps.settings.starter,
            queue_names=deps.settings.queues,
        )
    return refused.value


def test_a_client_cannot_approve_an_order_awaiting_review_on_the_orders_queue(deps: HostDeps) -> None:
    submit_and_claim(deps, definition=ORDER_V2, amount="1000.50")
    start(deps, RESERVE, version=ORDER_V2.version)
    reserved = StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1)
    assert start(deps, CHARGE, version=ORDER_V2.version, completed=reserved)["outcome"] == "awaiting_review"
    received(deps.queues.queue("client-a"))
    before = deps.states.get("a:o-1")

    approval = {"schemaVersion": 1, "type": "ReviewDecision", "orderId": "a:o-1", "decision": "approve"}

    error = on_the_orders_queue(deps, {**approval, "reviewer": "head-of-payments"})

    assert error.reason == OPERATOR_ACTION_NOT_ACCEPTED
    assert "operator API" in error.description
    after = deps.states.get("a:o-1")
    assert after.etag == before.etag  # nothing recorded
    assert after.item.review is not None and after.item.review.decision is None
    assert received(deps.queues.queue("agent-responses-h1")) == []  # nothing forwarded to the attempt
    assert received(deps.queues.queue("client-a")) == []  # no reply
    # Still paused: the charge does not start.
    assert start(deps, CHARGE, version=ORDER_V2.version, completed=reserved)["outcome"] == "awaiting_review"
    assert received(deps.queues.queue("agent-payment")) == []


def test_a_client_cannot_compensate_another_clients_order_under_a_typed_operator_name(
    deps: HostDeps,
) -> None:
    submit_and_claim(deps, definition=ORDER_V1, amount="100.00")  # client-a's order
    start(deps, RESERVE, version=ORDER_V1.version)
    received(deps.queues.queue("client-a"))
    before = deps.states.get("a:o-1")

    error = on_the_orders_queue(
        deps, {"schemaVersion": 1, "type": "CompensateOrder", "orderId": "a:o-1", "operator": "ops"}
    )

    assert error.reason == OPERATOR_ACTION_NOT_ACCEPTED
    after = deps.states.get("a:o-1")
    assert after.etag == before.etag
    assert (after.item.process_state, after.item.stop_requested_by, after.item.cancel_requested_at) == (
        ProcessState.PROCESSING,
        None,
        None,
    )
    assert received(deps.queues.queue("client-a")) == []


def test_the_refusal_comes_before_the_body_is_read_as_an_action(deps: HostDeps) -> None:
    # Not even a valid action: the type alone decides, and no order needs to exist.
    for kind in ("ReviewDecision", "CompensateOrder"):
        error = on_the_orders_queue(deps, {"type": kind, "orderId": "no-such-order", "extra": True})
        assert error.reason == OPERATOR_ACTION_NOT_ACCEPTED


def test_the_reason_is_one_of_the_submission_reasons() -> None:
    assert OPERATOR_ACTION_NOT_ACCEPTED == "OperatorActionNotAccepted"
    assert OPERATOR_ACTION_NOT_ACCEPTED in SUBMISSION_REASONS

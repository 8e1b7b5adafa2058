"""An operator's decision to compensate (operator_api.compensate, through the operator API's handler) over
the in-memory stores."""

from __future__ import annotations

import json

import pytest

from devhost.local_issuer import local_object_id
from operator_api.answers import OperatorResponse
from operator_api.compensate import OPERATOR_DECISION
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.contracts import (
    BeginCompensationInput,
    FinishCompensationInput,
    FinishOrderInput,
    Outcome,
    StartStepInput,
    StartUndoInput,
    StepError,
    StepResult,
    UndoResult,
)
from orderflow.records import ProcessState
from orderflow.workflows import ORDER_V1
from tests.activity_json import begin_compensation, finish_compensation, finish_order, start_step, start_undo
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps, received, submit_and_claim

pytestmark = pytest.mark.unit

RESERVE = "reserve_inventory"


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock(), CLAIM_TIMEOUT_S=30.0)


def compensate(deps: HostDeps, trusted: TrustedIssuer, reason: str | None = "dispute") -> OperatorResponse:
    """An operator's (``ops``) decision to compensate o-1, through the operator API."""
    return handle_operator_request(
        "POST",
        "/api/operator/orders/a:o-1/compensate",
        trusted.operator("ops"),
        json.dumps({"reason": reason} if reason else {}).encode(),
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )


def running(deps: HostDeps) -> None:
    submit_and_claim(deps, definition=ORDER_V1)
    start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step=RESERVE,
            timeout_s=8,
            response_queue="r-q",
        ).to_payload(),
        deps,
    )
    received(deps.queues.queue("client-a"))


def test_an_operator_stops_a_running_order_and_it_ends_compensated_not_cancelled(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    running(deps)

    result = compensate(deps, trusted)

    assert (result.status, result.body["outcome"]) == (202, "StopRequested")
    record = deps.states.get("a:o-1").item
    assert (record.stop_requested_by, record.last_error.code if record.last_error else None) == (
        f"operator:{trusted.issuer.tenant_id}/{local_object_id('ops')}",
        OPERATOR_DECISION,
    )
    # The owner's next write refuses to go on, naming the operator's decision as the cause.
    stopped = finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    assert stopped == {"outcome": "stopped", "cause": OPERATOR_DECISION}


def test_a_failed_compensation_is_retried_by_an_operator(deps: HostDeps, trusted: TrustedIssuer) -> None:
    running(deps)
    begin_compensation(
        BeginCompensationInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            timeout_s=8,
            error=StepError(step="charge_payment", kind="permanent", code="card_declined", message="no"),
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    undo = StartUndoInput(
        order_id="a:o-1",
        instance_id="a:o-1:1",
        workflow_version=ORDER_V1.version,
        step=RESERVE,
        timeout_s=8,
        response_queue="r-q",
    )
    start_undo(undo.to_payload(), deps)
    failure = StepError(step=f"{RESERVE}:undo", kind="permanent", code="undo_refused", message="refused")
    finish_compensation(
        FinishCompensationInput(
            order_id="a:o-1", instance_id="a:o-1:1", workflow_version=ORDER_V1.version, failed=failure
        ).to_payload(),
        deps,
    )
    assert deps.states.get("a:o-1").item.process_state is ProcessState.COMPENSATION_FAILED
    received(deps.queues.queue("client-a"))

    assert compensate(deps, trusted, None).body["outcome"] == "CompensationRetried"

    record = deps.states.get("a:o-1").item
    assert (
        record.process_state,
        record.locked_by,
        record.compensation_failures,
        record.compensation_error,
    ) == (
        ProcessState.COMPENSATING,
        None,
        0,
        None,
    )
    won = claim(
        deps.states,
        deps.states.get("a:o-1"),
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None and won.item.locked_by == "a:o-1:2"
    start_undo(undo.model_copy(update={"instance_id": "a:o-1:2"}).to_payload(), deps)
    finish_compensation(
        FinishCompensationInput(
            order_id="a:o-1",
            instance_id="a:o-1:2",
            workflow_version=ORDER_V1.version,
            undone=(UndoResult(step=RESERVE, result={"undone": "true"}, calls=1),),
        ).to_payload(),
        deps,
    )
    assert deps.states.get("a:o-1").item.process_state is ProcessState.COMPENSATED
    [reply] = [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]
    assert (reply["status"], reply["reason"]) == ("Compensated", "card_declined")


def test_an_operator_cannot_compensate_a_finished_order(deps: HostDeps, trusted: TrustedIssuer) -> None:
    running(deps)
    finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    etag = deps.states.get("a:o-1").etag

    refused = compensate(deps, trusted)
    assert (refused.status, refused.body["error"]["message"]) == (409, "order is Processed")
    assert deps.states.get("a:o-1").etag == etag

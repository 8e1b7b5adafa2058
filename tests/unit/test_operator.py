"""An operator's decision to compensate (intake.operator) over the in-memory stores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from intake.operator import OPERATOR_DECISION
from intake.submission import IntakeOutcome, handle_intake_message
from orchestrators.starter import claim
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
from orderflow.dependencies import Dependencies
from orderflow.messages import CompensateOrder
from orderflow.records import ProcessState
from orderflow.workflows import ORDER_V1
from tests.activity_json import begin_compensation, finish_compensation, finish_order, start_step, start_undo
from tests.unit.fakes import TEST_CLIENT, memory_deps, received, submit_and_claim

pytestmark = pytest.mark.unit

RESERVE = "reserve_inventory"


@pytest.fixture
def deps() -> Dependencies:
    return memory_deps(FakeClock(), CLAIM_TIMEOUT_S=30.0)


def submit(deps: Dependencies, body: str) -> Any:
    return handle_intake_message(
        body,
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        settings=deps.settings,
    )


def decision(reason: str | None = "dispute") -> str:
    return CompensateOrder(
        schema_version=1, type="CompensateOrder", order_id="o-1", operator="ops", reason=reason
    ).to_json()


def running(deps: Dependencies) -> None:
    submit_and_claim(deps, definition=ORDER_V1)
    start_step(
        StartStepInput(
            order_id="o-1",
            instance_id="o-1:1",
            workflow_version=ORDER_V1.version,
            step=RESERVE,
            timeout_s=8,
            response_queue="r-q",
        ).to_payload(),
        deps,
    )
    received(deps.queues.queue("client-a"))


def test_an_operator_stops_a_running_order_and_it_ends_compensated_not_cancelled(deps: Dependencies) -> None:
    running(deps)

    result = submit(deps, decision())

    assert (result.outcome, result.reason) == (IntakeOutcome.OPERATOR, "the owner stops and compensates")
    record = deps.states.get("o-1").item
    assert (record.stop_requested_by, record.last_error.code if record.last_error else None) == (
        "operator:ops",
        OPERATOR_DECISION,
    )
    # The owner's next write refuses to go on, naming the operator's decision as the cause.
    stopped = finish_order(
        FinishOrderInput(
            order_id="o-1",
            instance_id="o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    assert stopped == {"outcome": "stopped", "cause": OPERATOR_DECISION}


def test_a_failed_compensation_is_retried_by_an_operator(deps: Dependencies) -> None:
    running(deps)
    begin_compensation(
        BeginCompensationInput(
            order_id="o-1",
            instance_id="o-1:1",
            workflow_version=ORDER_V1.version,
            timeout_s=8,
            error=StepError(step="charge_payment", kind="permanent", code="card_declined", message="no"),
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    undo = StartUndoInput(
        order_id="o-1",
        instance_id="o-1:1",
        workflow_version=ORDER_V1.version,
        step=RESERVE,
        timeout_s=8,
        response_queue="r-q",
    )
    start_undo(undo.to_payload(), deps)
    failure = StepError(step=f"{RESERVE}:undo", kind="permanent", code="undo_refused", message="refused")
    finish_compensation(
        FinishCompensationInput(
            order_id="o-1", instance_id="o-1:1", workflow_version=ORDER_V1.version, failed=failure
        ).to_payload(),
        deps,
    )
    assert deps.states.get("o-1").item.process_state is ProcessState.COMPENSATION_FAILED
    received(deps.queues.queue("client-a"))

    assert submit(deps, decision(None)).reason == "compensation retried"

    record = deps.states.get("o-1").item
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
    won = claim(deps.states, deps.states.get("o-1"), deps.clock, deps.settings)
    assert won is not None and won.item.locked_by == "o-1:2"
    start_undo(undo.model_copy(update={"instance_id": "o-1:2"}).to_payload(), deps)
    finish_compensation(
        FinishCompensationInput(
            order_id="o-1",
            instance_id="o-1:2",
            workflow_version=ORDER_V1.version,
            undone=(UndoResult(step=RESERVE, result={"undone": "true"}, calls=1),),
        ).to_payload(),
        deps,
    )
    assert deps.states.get("o-1").item.process_state is ProcessState.COMPENSATED
    [reply] = [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]
    assert (reply["status"], reply["reason"]) == ("Compensated", "card_declined")


def test_an_operator_cannot_compensate_a_finished_order(deps: Dependencies) -> None:
    running(deps)
    finish_order(
        FinishOrderInput(
            order_id="o-1",
            instance_id="o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    etag = deps.states.get("o-1").etag

    assert submit(deps, decision()).reason == "order is Processed"
    assert deps.states.get("o-1").etag == etag

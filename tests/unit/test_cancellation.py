"""Client cancellation over the in-memory stores: the request, the owner's reaction, the refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from intake.cancellation import CancelOutcome, CancelResult, handle_cancel
from intake.submission import IntakeOutcome, handle_intake_message
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.contracts import (
    CANCELLED_BY_CLIENT,
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
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.errors import InvalidMessage
from orderflow.messages import CancelOrder
from orderflow.records import ProcessState, StateRecord
from orderflow.stores.base import Versioned
from orderflow.stores.memory import InMemoryStateStore
from orderflow.workflows import ORDER_V1
from supervisor.recovery import Recovery
from tests.activity_json import begin_compensation, finish_compensation, finish_order, start_step, start_undo
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body, received, recover_once

pytestmark = pytest.mark.unit

RESERVE, CHARGE, SHIP = "reserve_inventory", "charge_payment", "create_shipment"
CANCEL = CancelOrder(schema_version=1, type="CancelOrder", order_id="o-1", reason="changed my mind").to_json()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(clock: FakeClock) -> HostDeps:
    return memory_deps(clock, SUPERVISOR_MAX_FAILURES=3, CLAIM_TIMEOUT_S=30.0)


def submit(deps: HostDeps) -> None:
    handle_intake_message(
        order_body("a:o-1"),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        definition=ORDER_V1,
    )


def claimed(deps: HostDeps) -> StateRecord:
    won = claim(
        deps.states,
        deps.states.get("a:o-1"),
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None
    return won.item


def start(deps: HostDeps, step: str, completed: StepResult | None = None) -> dict[str, Any]:
    return start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step=step,
            timeout_s=8,
            completed=completed,
            response_queue="r-q",
        ).to_payload(),
        deps,
    )


def cancel(deps: HostDeps, body: str = CANCEL) -> CancelResult:
    """Send the cancel through the submission path, as the hosts do."""
    result = handle_intake_message(
        body,
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )
    assert result.outcome is IntakeOutcome.CANCEL and result.cancel is not None
    return result.cancel


def replies(deps: HostDeps) -> list[tuple[str, str | None]]:
    return [
        (r["status"], r["reason"])
        for r in map(json.loads, (m.body for m in received(deps.queues.queue("client-a"))))
    ]


def test_an_order_nothing_was_done_for_is_cancelled_at_once(deps: HostDeps) -> None:
    submit(deps)
    replies(deps)

    result = cancel(deps)

    assert result.outcome is CancelOutcome.CANCELLED
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.CANCELLED
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code, record.last_error.message) == (
        "cancelled",
        CANCELLED_BY_CLIENT,
        "changed my mind",
    )
    assert replies(deps) == [("Cancelled", CANCELLED_BY_CLIENT)]
    assert (
        claim(
            deps.states,
            deps.states.get("a:o-1"),
            deps.clock,
            deps.settings.starter,
            deps.settings.steps,
            host_id=deps.settings.queues.HOST_ID,
        )
        is None
    )


def test_a_running_order_stops_at_its_next_step_and_is_undone_then_cancelled(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    start(deps, RESERVE)
    replies(deps)

    assert cancel(deps).outcome is CancelOutcome.REQUESTED
    assert deps.states.get("a:o-1").item.process_state is ProcessState.PROCESSING  # the owner decides
    assert cancel(deps).outcome is CancelOutcome.ALREADY_REQUESTED

    # The reservation completed; the owner's next step start finds the request and starts nothing.
    etag = deps.states.get("a:o-1").etag
    started = start(
        deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1)
    )
    assert started == {"outcome": "stopped", "cause": "cancelled_by_client"}
    assert deps.states.get("a:o-1").etag == etag
    assert received(deps.queues.queue("agent-payment")) == []

    begun = begin_compensation(
        BeginCompensationInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            timeout_s=8,
            error=StepError(step=CHARGE, kind="cancelled", code=CANCELLED_BY_CLIENT, message="cancelled"),
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )
    assert begun["undoStages"] == [[RESERVE]]
    start_undo(
        StartUndoInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step=RESERVE,
            timeout_s=8,
            response_queue="r-q",
        ).to_payload(),
        deps,
    )
    finished = finish_compensation(
        FinishCompensationInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            undone=(UndoResult(step=RESERVE, result={"undone": "true"}, calls=1),),
        ).to_payload(),
        deps,
    )
    assert finished["processState"] == "Cancelled"
    assert deps.states.get("a:o-1").item.process_state is ProcessState.CANCELLED
    assert replies(deps) == [("Cancelled", CANCELLED_BY_CLIENT)]


def test_a_cancel_during_the_last_reversible_step_stops_the_order_from_finishing(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    start(deps, RESERVE)
    cancel(deps)

    finished = finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
            completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        ).to_payload(),
        deps,
    )

    assert finished == {"outcome": "stopped", "cause": "cancelled_by_client"}
    assert deps.states.get("a:o-1").item.process_state is ProcessState.PROCESSING


def test_a_cancel_past_the_point_of_no_return_is_refused(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    start(deps, SHIP, completed=StepResult(step=CHARGE, result={"chargeId": "c-1"}, calls=1))
    replies(deps)
    before = deps.states.get("a:o-1")

    result = cancel(deps)

    assert (result.outcome, result.reason) == (CancelOutcome.REFUSED, PAST_POINT_OF_NO_RETURN)
    assert deps.states.get("a:o-1").etag == before.etag  # nothing written
    assert replies(deps) == [("CancelRefused", PAST_POINT_OF_NO_RETURN)]


def test_a_cancel_that_races_the_start_of_the_irreversible_step_sees_it_and_is_refused(
    deps: HostDeps,
) -> None:
    submit(deps)
    claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    replies(deps)

    class OwnerWritesBetween(InMemoryStateStore):
        """The owner starts the shipment between the cancel's read and its conditional write."""

        raced = False

        def get(self, order_id: str) -> Versioned[StateRecord]:
            found = deps.states.get(order_id)
            if not self.raced:
                self.raced = True
                start(deps, SHIP, completed=StepResult(step=CHARGE, result={"chargeId": "c-1"}, calls=1))
            return found

        def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
            return deps.states.replace(record, etag=etag)

    result = handle_cancel(
        CANCEL, client=TEST_CLIENT, states=OwnerWritesBetween(), queues=deps.queues, clock=deps.clock
    )

    assert (result.outcome, result.reason) == (CancelOutcome.REFUSED, PAST_POINT_OF_NO_RETURN)
    record = deps.states.get("a:o-1").item
    assert record.cancel_requested_at is None
    assert record.steps[SHIP].status.value == "Running"


def test_a_settled_order_cannot_be_cancelled(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
        ).to_payload(),
        deps,
    )
    replies(deps)

    assert cancel(deps).reason == "order is Processed"
    assert replies(deps) == [("CancelRefused", "order is Processed")]


def test_a_cancel_of_an_unknown_order_is_dead_lettered(deps: HostDeps) -> None:
    with pytest.raises(InvalidMessage) as raised:
        cancel(deps)
    assert raised.value.reason == "UnknownOrder"


def test_a_malformed_cancel_is_dead_lettered_with_its_reason(deps: HostDeps) -> None:
    with pytest.raises(InvalidMessage) as raised:
        cancel(deps, json.dumps({"schemaVersion": 1, "type": "CancelOrder", "orderId": "o-1", "extra": 1}))
    assert raised.value.reason == "UnexpectedField"


def test_an_expired_attempt_of_a_cancelled_order_is_handed_to_compensation(
    deps: HostDeps, clock: FakeClock
) -> None:
    submit(deps)
    claimed(deps)
    start(deps, RESERVE)
    cancel(deps)
    settings = deps.settings
    # It died mid-step.
    clock.advance(
        settings.steps.STEP_TIMEOUT_S
        + settings.starter.START_LATENCY_S
        + settings.alerts.CLOCK_SKEW_TOLERANCE_S
        + 1
    )

    outcome = recover_once(deps, "a:o-1", clock)

    assert outcome is Recovery.REQUEUED
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.locked_by) == (ProcessState.COMPENSATING, None)
    assert record.last_error is not None and record.last_error.code == CANCELLED_BY_CLIENT
    resumed = claim(
        deps.states,
        deps.states.get("a:o-1"),
        clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert resumed is not None and resumed.item.process_state is ProcessState.COMPENSATING

"""The compensation activities and the supervisor's compensation path, over the in-memory stores.

Each test drives the activities the way the orchestration does (docs/design.md §4), with a fake clock.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from orderflow import telemetry
from orderflow.attempts import claim, start_attempt
from orderflow.clock import FakeClock
from orderflow.contracts import (
    BeginCompensationInput,
    FinishCompensationInput,
    OrchestrationInput,
    StartStepInput,
    StartUndoInput,
    StepError,
    StepResult,
    UndoResult,
)
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.errors import IllegalTransition
from orderflow.records import ProcessState, StateRecord, StepStatus, UndoStatus
from orderflow.workflows import CURRENT_WORKFLOW, ORDER_V1, ORDER_V2
from supervisor.recovery import Recovery
from tests.activity_json import begin_compensation, finish_compensation, start_step, start_undo
from tests.host_deps import HostDeps
from tests.unit.fakes import memory_deps, received, recover_once, submit_and_claim

pytestmark = pytest.mark.unit

RESERVE, CHARGE, SHIP = "reserve_inventory", "charge_payment", "create_shipment"
DECLINED = StepError(step=CHARGE, kind="permanent", code="card_declined", message="card declined", calls=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(clock: FakeClock) -> HostDeps:
    return memory_deps(clock, SUPERVISOR_MAX_FAILURES=3, CLAIM_TIMEOUT_S=30.0, AGENT_MAX_CALLS_PER_STEP=4)


def submitted_and_claimed(deps: HostDeps) -> StateRecord:
    return submit_and_claim(deps, definition=ORDER_V1)


def start(deps: HostDeps, step: str, completed: StepResult | None = None, instance: str = "a:o-1:1") -> None:
    result = start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id=instance,
            workflow_version=ORDER_V1.version,
            step=step,
            timeout_s=8,
            completed=completed,
            response_queue="r-q",
        ).to_payload(),
        deps,
    )
    assert result["outcome"] == "started"


def begin(deps: HostDeps, instance: str = "a:o-1:1", **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "order_id": "a:o-1",
        "instance_id": instance,
        "workflow_version": ORDER_V1.version,
        "timeout_s": 8,
        **changes,
    }
    return begin_compensation(BeginCompensationInput(**fields).to_payload(), deps)


def undo(
    deps: HostDeps, step: str, instance: str = "a:o-1:1", workflow_version: str = ORDER_V1.version
) -> dict[str, Any]:
    return start_undo(
        StartUndoInput(
            order_id="a:o-1",
            instance_id=instance,
            workflow_version=workflow_version,
            step=step,
            timeout_s=8,
            response_queue="r-q",
        ).to_payload(),
        deps,
    )


def finish(deps: HostDeps, instance: str = "a:o-1:1", **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "order_id": "a:o-1",
        "instance_id": instance,
        "workflow_version": ORDER_V1.version,
        **changes,
    }
    return finish_compensation(FinishCompensationInput(**fields).to_payload(), deps)


def start_input_for(record: StateRecord) -> OrchestrationInput:
    """The input the starter gives the attempt it starts for ``record``."""
    started: dict[str, Any] = {}

    class Client:
        def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
            started.update(payload)
            return True

    start_attempt(Client(), record, response_queue="r-q", step_timeout_s=8)  # type: ignore[arg-type]
    return OrchestrationInput.model_validate(started)


def reserved_then_declined(deps: HostDeps) -> dict[str, Any]:
    """Reserve succeeds; the charge is declined; the orchestration begins compensating."""
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    return begin(deps, error=DECLINED)


def replies(deps: HostDeps) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]


def test_begin_records_the_cause_and_returns_only_steps_that_may_have_had_an_effect(
    deps: HostDeps,
) -> None:
    result = reserved_then_declined(deps)

    assert (result["outcome"], result["undoStages"]) == ("compensation_begun", [[RESERVE]])
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.COMPENSATING
    assert record.last_error is not None and record.last_error.code == "card_declined"
    # The declined charge applied nothing: it gets no entry; the reservation's entry holds its id.
    assert [(e.step, e.undo, e.undo_key, e.data, e.outcome_known) for e in record.compensation_log] == [
        (RESERVE, "release", "a:o-1:reserve_inventory:undo", {"reservationId": "r-1"}, True)
    ]
    assert record.steps[CHARGE].status is StepStatus.FAILED


def test_a_step_whose_attempt_died_mid_call_is_undone_by_its_key(deps: HostDeps, clock: FakeClock) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    # The charge's outcome was never recorded (the attempt died); the order gives up and compensates.
    result = begin(deps)

    assert result["undoStages"] == [[CHARGE], [RESERVE]]  # order-v1: one at a time, in reverse
    entry = next(e for e in deps.states.get("a:o-1").item.compensation_log if e.step == CHARGE)
    assert (entry.outcome_known, entry.data, entry.undo) == (False, {}, "refund")

    received(deps.queues.queue("agent-payment"))
    assert undo(deps, CHARGE)["outcome"] == "undo_started"
    (request,) = received(deps.queues.queue("agent-payment"))
    body = json.loads(request.body)
    assert request.message_id == "a:o-1:1:charge_payment:undo"
    assert (body["step"], body["operation"], body["idempotencyKey"]) == (
        "charge_payment:undo",
        "refund",
        "a:o-1:charge_payment:undo",
    )
    # Addressed by the forward call's key: the service refunds it, or tombstones it if it never arrived.
    assert body["payload"] == {"forwardKey": "a:o-1:charge_payment"}


def test_undos_spend_no_retry_budget_and_a_rerun_writes_nothing(deps: HostDeps, clock: FakeClock) -> None:
    reserved_then_declined(deps)
    spent = deps.states.get("a:o-1").item.retry_budget.spent
    received(deps.queues.queue("agent-inventory"))

    first = undo(deps, RESERVE)
    etag = deps.states.get("a:o-1").etag
    clock.advance(2)
    again = undo(deps, RESERVE)

    assert first["completeBy"] == again["completeBy"]
    stored = deps.states.get("a:o-1")
    assert stored.etag == etag
    assert stored.item.retry_budget.spent == spent
    assert stored.item.steps[RESERVE].status is StepStatus.COMPENSATING
    requests = received(deps.queues.queue("agent-inventory"))
    assert [m.message_id for m in requests] == ["a:o-1:1:reserve_inventory:undo"] * 2  # same id: a duplicate
    body = json.loads(requests[0].body)
    assert body["payload"] == {"forwardKey": "a:o-1:reserve_inventory", "reservationId": "r-1"}
    assert body["maxCalls"] == deps.settings.steps.AGENT_MAX_CALLS_PER_STEP


def test_finish_compensated_records_the_last_undo_and_replies_with_the_cause(deps: HostDeps) -> None:
    reserved_then_declined(deps)
    undo(deps, RESERVE)
    replies(deps)

    result = finish(deps, undone=(UndoResult(step=RESERVE, result={"undone": "true"}, calls=1),))

    assert result["processState"] == "Compensated"
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.COMPENSATED
    assert record.pending_reply is None  # sent
    assert [(e.status, e.undo_result) for e in record.compensation_log] == [
        (UndoStatus.COMPENSATED, {"undone": "true"})
    ]
    assert record.steps[RESERVE].status is StepStatus.COMPENSATED
    assert record.attempt_history[-1].outcome == "Compensated"
    [reply] = replies(deps)
    assert (reply["status"], reply["reason"]) == ("Compensated", "card_declined")


def test_finish_refuses_compensated_while_an_entry_is_not_undone(deps: HostDeps) -> None:
    reserved_then_declined(deps)

    with pytest.raises(IllegalTransition, match="still has"):
        finish(deps)
    assert deps.states.get("a:o-1").item.process_state is ProcessState.COMPENSATING


def test_an_undo_that_fails_for_good_ends_compensation_failed_with_an_alert(deps: HostDeps) -> None:
    reserved_then_declined(deps)
    undo(deps, RESERVE)
    replies(deps)
    failure = StepError(
        step=f"{RESERVE}:undo", kind="permanent", code="unknown_reservation", message="no such", calls=2
    )

    with telemetry.recording() as counted:
        finish(deps, failed=failure)

    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert record.compensation_log[0].status == UndoStatus.FAILED
    assert record.steps[RESERVE].status is StepStatus.COMPENSATION_FAILED
    assert record.compensation_error is not None and record.compensation_error.code == "unknown_reservation"
    assert record.last_error is not None and record.last_error.code == "card_declined"  # the cause is kept
    assert counted["alert.compensation_failed"] == 1
    [reply] = replies(deps)
    assert (reply["status"], reply["reason"]) == ("CompensationFailed", "unknown_reservation")


def test_past_a_point_of_no_return_the_order_is_not_compensated(deps: HostDeps) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    start(deps, SHIP, completed=StepResult(step=CHARGE, result={"chargeId": "c-1"}, calls=1))
    replies(deps)

    # The shipment's outcome is unknown (its attempt died): it may have been dispatched.
    result = begin(deps)

    assert result == {"outcome": "past_point_of_no_return"}
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.ERROR
    assert record.last_error is not None and record.last_error.code == PAST_POINT_OF_NO_RETURN
    assert all(entry.status == UndoStatus.PENDING for entry in record.compensation_log)
    [reply] = replies(deps)
    assert (reply["status"], reply["reason"]) == ("Failed", PAST_POINT_OF_NO_RETURN)


def test_a_stale_attempt_cannot_start_an_undo(deps: HostDeps, clock: FakeClock) -> None:
    reserved_then_declined(deps)
    clock.advance(
        9 + deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S
    )  # the compensating attempt's completeBy passes
    assert recover_once(deps, "a:o-1", clock) is (Recovery.REQUEUED)
    clock.advance(60)
    won = claim(
        deps.states,
        deps.states.get("a:o-1"),
        clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None and won.item.locked_by == "a:o-1:2"

    stale = undo(deps, RESERVE, instance="a:o-1:1")

    assert stale["outcome"] == "fenced"
    assert begin(deps, instance="a:o-1:2")["undoStages"] == [[RESERVE]]  # the new attempt resumes


def test_supervisor_unlocks_an_expired_compensation_then_fails_it_at_the_threshold(
    deps: HostDeps, clock: FakeClock
) -> None:
    reserved_then_declined(deps)
    replies(deps)
    outcomes = []
    for attempt in range(2, 2 + deps.settings.supervisor.SUPERVISOR_MAX_FAILURES):
        clock.advance(9 + deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S)
        outcomes.append(recover_once(deps, "a:o-1", clock))
        record = deps.states.get("a:o-1").item
        if record.process_state is not ProcessState.COMPENSATING:
            break
        assert record.locked_by is None and record.next_attempt_at is not None
        clock.advance(60)
        won = claim(
            deps.states,
            deps.states.get("a:o-1"),
            clock,
            deps.settings.starter,
            deps.settings.steps,
            host_id=deps.settings.queues.HOST_ID,
        )
        assert won is not None and won.item.process_state is ProcessState.COMPENSATING
        begin(deps, instance=f"a:o-1:{attempt}")

    assert outcomes == [Recovery.REQUEUED, Recovery.REQUEUED, Recovery.GAVE_UP]
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert record.compensation_failures == 3
    assert record.failure_count == 0  # forward failures are counted apart
    assert record.compensation_error is not None and record.compensation_error.code == "complete_by_expired"
    [reply] = replies(deps)
    assert reply["status"] == "CompensationFailed"
    assert record.complete_by is None and record.pending_reply is None
    assert clock.now() - record.updated_at < timedelta(seconds=1)


def test_a_record_compensates_with_the_workflow_version_it_started_with(deps: HostDeps) -> None:
    # The record started on order-v1 (undo one step at a time); a later version (refund and release
    # in parallel) is the current one now. The attempt resumes with the record's version.
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    record = deps.states.get("a:o-1").item
    assert (record.workflow_version, CURRENT_WORKFLOW.version) == ("order-v1", "order-v3")

    resumed = start_input_for(record)
    assert resumed.workflow_version == "order-v1"
    assert begin(deps, workflow_version=resumed.workflow_version)["undoStages"] == [[CHARGE], [RESERVE]]


def test_order_v2_undoes_the_charge_and_the_reservation_in_one_stage(deps: HostDeps) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    # The charge's outcome is unknown (its attempt died): both undos go out in one stage.
    assert begin(deps, workflow_version=ORDER_V2.version)["undoStages"] == [[CHARGE, RESERVE]]
    received(deps.queues.queue("agent-payment"))
    received(deps.queues.queue("agent-inventory"))
    undo(deps, CHARGE, workflow_version=ORDER_V2.version)
    undo(deps, RESERVE, workflow_version=ORDER_V2.version)
    assert [m.message_id for m in received(deps.queues.queue("agent-payment"))] == [
        "a:o-1:1:charge_payment:undo"
    ]
    assert [m.message_id for m in received(deps.queues.queue("agent-inventory"))] == [
        "a:o-1:1:reserve_inventory:undo"
    ]
    both = (
        UndoResult(step=CHARGE, result={"undone": "true"}, calls=1),
        UndoResult(step=RESERVE, result={"undone": "true"}, calls=1),
    )
    assert finish(deps, undone=both, workflow_version=ORDER_V2.version)["processState"] == "Compensated"
    assert [e.status for e in deps.states.get("a:o-1").item.compensation_log] == ["Compensated"] * 2


def test_every_undo_of_a_stage_that_failed_for_good_is_reported(deps: HostDeps) -> None:
    submitted_and_claimed(deps)
    start(deps, RESERVE)
    start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1))
    begin(deps, workflow_version=ORDER_V2.version)
    undo(deps, CHARGE, workflow_version=ORDER_V2.version)
    undo(deps, RESERVE, workflow_version=ORDER_V2.version)

    def refused(step: str) -> StepError:
        return StepError(step=f"{step}:undo", kind="permanent", code="undo_refused", message="refused")

    finish(deps, workflow_version=ORDER_V2.version, failed=refused(CHARGE), also_failed=(refused(RESERVE),))

    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert {e.step: e.status for e in record.compensation_log} == {
        CHARGE: UndoStatus.FAILED,
        RESERVE: UndoStatus.FAILED,
    }
    assert {record.steps[s].status for s in (CHARGE, RESERVE)} == {StepStatus.COMPENSATION_FAILED}
    assert record.compensation_error is not None
    assert record.compensation_error.message == "refused (also failed: reserve_inventory)"

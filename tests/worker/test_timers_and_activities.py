"""The supervisor's timer trigger and the orchestration's seven activities, as the worker runs them.

The supervisor gets a ``timerTrigger`` as the host sends it; each activity gets an ``activityTrigger``
carrying the input the orchestrator sends it. Where the orchestrator runs the order-v1 workflow of
``tests/unit/test_df_replay.py``, that input is taken from the actions the worker's own orchestrator
returns for that test's histories (the exact JSON text azure-functions-durable wrote), so an activity is
fed what the orchestration asks for; the review decision, which needs order-v2, is built from its contract
(``orderflow/contracts.py``). Each test asserts the activity's ``return_value`` as the worker encodes it
(``TypedData.json``) and what the activity did to the in-memory state store and queues.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from devhost.settings import LocalSettings
from function_host.blueprints import activities as activities_blueprint
from function_host.blueprints import supervisor as supervisor_blueprint
from orderflow.clock import FakeClock
from orderflow.contracts import RecordReviewInput, StartStepInput, StepResult
from orderflow.messages import AgentRequest, StatusReply, parse_message
from orderflow.records import ProcessState, StateRecord, StepStatus, UndoStatus
from orderflow.workflows import ORDER_V1, ORDER_V2, WorkflowDefinition
from tests.activity_json import start_step
from tests.df_history import HistoryBuilder
from tests.host_deps import HostDeps
from tests.unit.fakes import received, submit_and_claim
from tests.unit.test_df_replay import (
    CHARGE,
    RESERVE,
    SHIP,
    STEP_TIMEOUT,
    T0,
    at,
    charge_refused,
    compensating,
    happy_path,
    response,
    run_step_named,
    undo_response,
    waiting_on_first_step,
    z,
)
from tests.worker.appdeps import app_dependencies
from tests.worker.durable_http import DurableExtension
from tests.worker.rpc import protos
from tests.worker.test_orchestrator import run_episode
from tests.worker.triggers import activity_trigger, timer_trigger
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

INSTANCE = "a:o-1:1"


def wire(monkeypatch: pytest.MonkeyPatch, deps: HostDeps) -> HostDeps:
    """Make ``deps`` what the activity and supervisor triggers use, as ``function_host.wiring`` would."""
    for module in (activities_blueprint, supervisor_blueprint):
        monkeypatch.setattr(module, "dependencies", lambda: deps)
        monkeypatch.setattr(module, "app_settings", lambda: deps.settings)
    return deps


@pytest.fixture
def deps(monkeypatch: pytest.MonkeyPatch) -> HostDeps:
    """The activities' and the supervisor's dependencies, in memory, on a fake clock at ``T0``."""
    return wire(monkeypatch, replace(app_dependencies()[0], clock=FakeClock(T0)))


@pytest.fixture(scope="module")
def extension() -> Iterator[DurableExtension]:
    """The extension's HTTP API, which the supervisor's durable client binding reaches (the history
    purge of its retention pass)."""
    server = DurableExtension(())
    try:
        yield server
    finally:
        server.stop()


def run_supervisor(worker: FunctionsWorker, extension: DurableExtension, deps: HostDeps) -> Any:
    """Invoke the supervisor's timer trigger now, with its durable client binding."""
    every = timedelta(seconds=LocalSettings.load({}).SUPERVISOR_INTERVAL_S)
    now = deps.clock.now()
    return worker.invoke(
        "supervisor",
        {
            "timer": timer_trigger(now - every, every=every),
            "client": protos.TypedData(string=extension.client_binding()),
        },
    )


def clock(deps: HostDeps) -> FakeClock:
    assert isinstance(deps.clock, FakeClock)
    return deps.clock


def claimed(deps: HostDeps, definition: WorkflowDefinition = ORDER_V1) -> StateRecord:
    """Order o-1 submitted on ``definition`` and claimed by attempt 1 (its first step started)."""
    return submit_and_claim(deps, definition=definition)


def stored(deps: HostDeps) -> StateRecord:
    return deps.states.get("a:o-1").item


def orchestrator_calls(worker: FunctionsWorker, builder: HistoryBuilder) -> list[tuple[str, str]]:
    """Each activity the worker's orchestrator calls over the builder's history: name and input text."""
    state = json.loads(run_episode(worker, builder).json)
    calls: list[tuple[str, str]] = []

    def collect(action: dict[str, Any]) -> None:
        if "functionName" in action:
            calls.append((action["functionName"], action["input"]))
        for child in action.get("compoundActions", []):
            collect(child)

    for group in state["actions"]:
        for action in group:
            collect(action)
    return calls


def run_activity(worker: FunctionsWorker, name: str, input_text: str) -> dict[str, Any]:
    """Invoke activity ``name`` with the input text the orchestrator sent; its decoded return value."""
    response = worker.invoke(name, {"payload": activity_trigger(input_text)})
    assert failure(response) is None
    assert response.return_value.WhichOneof("data") == "json"
    result: dict[str, Any] = json.loads(response.return_value.json)
    return result


def run_all(worker: FunctionsWorker, calls: list[tuple[str, str]]) -> None:
    """Run the calls the orchestrator made before the one a test looks at."""
    for name, input_text in calls:
        assert run_activity(worker, name, input_text)["outcome"] != "fenced"


def written(outcome: str, **fields: Any) -> dict[str, Any]:
    """An activity's result as the worker returns it: the case ``outcome`` with its ``fields``."""
    return {"outcome": outcome, **fields}


def requests(deps: HostDeps, agent: str) -> list[AgentRequest]:
    queue = deps.queues.queue(deps.settings.queues.agent_queue(agent))
    return [parse_message(AgentRequest, message.body) for message in received(queue)]


def replies(deps: HostDeps) -> list[StatusReply]:
    return [parse_message(StatusReply, message.body) for message in received(deps.queues.queue("client-a"))]


def budget_left(deps: HostDeps) -> int:
    return stored(deps).retry_budget.remaining


# --- the supervisor ----------------------------------------------------------------------------------------


def test_the_supervisor_trigger_requeues_an_attempt_whose_complete_by_passed(
    worker: FunctionsWorker, extension: DurableExtension, deps: HostDeps
) -> None:
    claimed(deps)
    received(deps.queues.queue("client-a"))  # the submission's Received reply
    before = stored(deps)
    assert (before.process_state, before.failure_count, before.locked_by) == (
        ProcessState.PROCESSING,
        0,
        INSTANCE,
    )
    assert before.complete_by is not None
    # Past completeBy by more than the clock skew the supervisor allows for.
    overdue_s = (before.complete_by - T0).total_seconds() + deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S + 1
    now = clock(deps).advance(overdue_s)

    response = run_supervisor(worker, extension, deps)

    assert failure(response) is None
    after = stored(deps)
    assert (after.process_state, after.failure_count, after.locked_by) == (
        ProcessState.PENDING,
        before.failure_count + 1,
        None,
    )
    assert (after.complete_by, after.updated_at) == (None, now)
    assert after.next_attempt_at == now + timedelta(
        seconds=deps.settings.supervisor.SUPERVISOR_BACKOFF_INITIAL_S
    )
    assert after.last_error is not None
    assert (after.last_error.kind, after.last_error.code, after.last_error.step, after.last_error.at) == (
        "timeout",
        "complete_by_expired",
        RESERVE,
        now,
    )
    [tenure] = after.attempt_history
    assert (tenure.instance_id, tenure.outcome, tenure.ended_at, tenure.expired_complete_by) == (
        INSTANCE,
        "recovered",
        now,
        before.complete_by,
    )
    recovery = {
        "process_state",
        "failure_count",
        "locked_by",
        "complete_by",
        "next_attempt_at",
        "updated_at",
        "last_error",
        "attempt_history",
        "timeline",
        "timeline_seq",
    }
    # Nothing else: the steps, the budget, the attempt number and the compensation log stay as they were.
    assert after.model_dump(exclude=recovery) == before.model_dump(exclude=recovery)
    entry = after.timeline[-1]
    assert (entry.role, entry.action, entry.from_state, entry.to_state, entry.error_code) == (
        "supervisor",
        "recover",
        ProcessState.PROCESSING,
        ProcessState.PENDING,
        "complete_by_expired",
    )
    assert replies(deps) == []


def test_the_supervisor_trigger_leaves_an_attempt_within_its_complete_by_alone(
    worker: FunctionsWorker, extension: DurableExtension, deps: HostDeps
) -> None:
    claimed(deps)
    before = stored(deps)
    clock(deps).advance(1)

    response = run_supervisor(worker, extension, deps)

    assert failure(response) is None
    assert stored(deps) == before


# --- the forward activities ------------------------------------------------------------------------------


def test_start_step_of_the_step_the_claim_started_only_sends_its_request(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    [(name, input_text)] = orchestrator_calls(worker, waiting_on_first_step())[:1]
    before = stored(deps)
    assert before.complete_by is not None

    result = run_activity(worker, name, input_text)

    assert (name, json.loads(input_text)["step"]) == ("start_step", RESERVE)
    assert result == written("started", completeBy=z(before.complete_by), remainingCalls=budget_left(deps))
    assert stored(deps) == before  # the claim's write already started it
    [request] = requests(deps, "inventory")
    assert (request.request_id, request.idempotency_key, request.reply_to, request.operation) == (
        f"{INSTANCE}:{RESERVE}",
        f"a:o-1:{RESERVE}",
        "agent-responses",
        "reserve",
    )
    assert request.payload == {"items": [{"sku": "10", "quantity": 5}]}


def test_start_step_records_the_previous_step_then_starts_the_next_with_its_deadline(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    answered = waiting_on_first_step().episode(at(5)).event_raised(f"{RESERVE}:response", response(RESERVE))
    first, (name, input_text) = orchestrator_calls(worker, answered)
    run_all(worker, [first])
    requests(deps, "inventory")
    now = clock(deps).advance(6)

    result = run_activity(worker, name, input_text)

    assert json.loads(input_text)["completed"] == {
        "step": RESERVE,
        "result": {f"{RESERVE}Id": f"{RESERVE}-1"},
        "calls": 1,
    }
    assert result == written("started", completeBy=z(now + STEP_TIMEOUT), remainingCalls=budget_left(deps))
    record = stored(deps)
    assert (record.steps[RESERVE].status, record.steps[RESERVE].result) == (
        StepStatus.COMPLETED,
        {f"{RESERVE}Id": f"{RESERVE}-1"},
    )
    assert [(entry.step, entry.undo, entry.undo_key) for entry in record.compensation_log] == [
        (RESERVE, "release", f"a:o-1:{RESERVE}:undo")
    ]
    assert (record.steps[CHARGE].status, record.steps[CHARGE].last_instance) == (StepStatus.RUNNING, INSTANCE)
    assert (record.process_state, record.locked_by, record.complete_by) == (
        ProcessState.PROCESSING,
        INSTANCE,
        now + STEP_TIMEOUT,
    )
    [request] = requests(deps, "payment")
    assert (request.request_id, request.idempotency_key, request.operation) == (
        f"{INSTANCE}:{CHARGE}",
        f"a:o-1:{CHARGE}",
        "charge",
    )


def test_finish_order_records_the_last_step_and_the_outcome_then_replies(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    received(deps.queues.queue("client-a"))
    *earlier, (name, input_text) = orchestrator_calls(worker, happy_path())
    run_all(worker, earlier)
    now = clock(deps).advance(26)

    result = run_activity(worker, name, input_text)

    assert (name, json.loads(input_text)["outcome"]) == ("finish_order", "Processed")
    assert result == written("finished", remainingCalls=budget_left(deps))
    record = stored(deps)
    assert (record.process_state, record.complete_by, record.pending_reply) == (
        ProcessState.PROCESSED,
        None,
        None,
    )
    assert [record.steps[step].status for step in (RESERVE, CHARGE, SHIP)] == [StepStatus.COMPLETED] * 3
    assert record.attempt_history[-1].outcome == "Processed"
    [reply] = replies(deps)
    assert (reply.order_id, reply.status.value, reply.at) == ("o-1", "Processed", now)


def test_record_step_failure_hands_the_order_to_the_supervisor_now(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    failed = response(
        RESERVE,
        outcome="failed",
        errorKind="transient",
        errorCode="transient_exhausted",
        errorMessage="503 from inventory",
        result={},
        calls=3,
    )
    answered = waiting_on_first_step().episode(at(5)).event_raised(f"{RESERVE}:response", failed)
    first, (name, input_text) = orchestrator_calls(worker, answered)
    run_all(worker, [first])
    before = stored(deps)

    result = run_activity(worker, name, input_text)

    assert name == "record_step_failure"
    assert result == written("failure_recorded", remainingCalls=deps.settings.steps.RETRY_BUDGET - 3)
    record = stored(deps)
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code, record.last_error.step, record.last_error.at) == (
        "transient",
        "transient_exhausted",
        RESERVE,
        at(5),
    )
    # completeBy is the failure's time: the supervisor's next sweep recovers the order.
    assert (record.process_state, record.locked_by, record.complete_by) == (
        ProcessState.PROCESSING,
        INSTANCE,
        at(5),
    )
    assert before.retry_budget.spent != record.retry_budget.spent == 3


def test_record_review_records_the_decision_and_returns_the_order_to_processing(
    worker: FunctionsWorker, deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Orders above REVIEW_AMOUNT_ABOVE (o-1 is 1000.50) await a person's decision before order-v2's charge.
    settings = deps.settings.replace(**{"REVIEW_AMOUNT_ABOVE": 500.0})
    review_deps = wire(monkeypatch, replace(deps, settings=settings))
    claimed(review_deps, ORDER_V2)
    start = StartStepInput(
        order_id="a:o-1",
        instance_id=INSTANCE,
        workflow_version=ORDER_V2.version,
        step=CHARGE,
        timeout_s=30,
        completed=StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1),
        response_queue="agent-responses",
    )
    assert start_step(start.to_payload(), review_deps)["outcome"] == "awaiting_review"
    assert stored(deps).process_state is ProcessState.AWAITING_REVIEW
    now = clock(deps).advance(40)
    decision = RecordReviewInput(
        order_id="a:o-1", instance_id=INSTANCE, step=CHARGE, decision="approve", decided_by="ana"
    )

    result = run_activity(worker, "record_review", json.dumps(decision.to_payload()))

    assert result == written("review_recorded", decision="approve")
    record = stored(deps)
    assert record.review is not None
    assert (
        record.review.step,
        record.review.decision,
        record.review.decided_by,
        record.review.decided_at,
    ) == (
        CHARGE,
        "approve",
        "ana",
        now,
    )
    assert (record.process_state, record.complete_by) == (
        ProcessState.PROCESSING,
        now + timedelta(seconds=deps.settings.starter.CLAIM_TIMEOUT_S),
    )


# --- the compensation activities -------------------------------------------------------------------------


def undone_reservation() -> HistoryBuilder:
    """Reserve done, charge declined, compensation begun, the reservation's undo answered (test_df_replay)."""
    begun = (
        charge_refused()
        .task_scheduled("begin_compensation", 4)
        .episode(at(16))
        .task_completed(4, compensating([RESERVE]))
    )
    undoing = run_step_named(begun, "start_undo", task_id=5, completed_at=at(17))
    return undoing.episode(at(20)).event_raised(f"{RESERVE}:undo:response", undo_response(RESERVE))


def test_begin_compensation_records_the_cause_and_returns_the_steps_to_undo(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    calls = orchestrator_calls(worker, undone_reservation())
    assert [name for name, _ in calls] == [
        "start_step",
        "start_step",
        "begin_compensation",
        "start_undo",
        "finish_compensation",
    ]
    run_all(worker, calls[:2])
    now = clock(deps).advance(16)

    result = run_activity(worker, *calls[2])

    assert result == written("compensation_begun", undoStages=[[RESERVE]])
    record = stored(deps)
    assert (record.process_state, record.locked_by, record.complete_by) == (
        ProcessState.COMPENSATING,
        INSTANCE,
        now + STEP_TIMEOUT,
    )
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code, record.last_error.step) == (
        "permanent",
        "card_declined",
        CHARGE,
    )
    # The declined charge had no effect: only the reservation has an entry to undo.
    assert record.steps[CHARGE].status is StepStatus.FAILED
    assert [entry.step for entry in record.compensation_log] == [RESERVE]


def test_start_undo_marks_the_entry_compensating_and_sends_the_undo_request(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    calls = orchestrator_calls(worker, undone_reservation())
    run_all(worker, calls[:3])
    requests(deps, "inventory")
    now = clock(deps).advance(17)

    result = run_activity(worker, *calls[3])

    assert result == written("undo_started", completeBy=z(now + STEP_TIMEOUT))
    record = stored(deps)
    [entry] = record.compensation_log
    assert (entry.status, record.steps[RESERVE].status, record.complete_by) == (
        UndoStatus.COMPENSATING,
        StepStatus.COMPENSATING,
        now + STEP_TIMEOUT,
    )
    [request] = requests(deps, "inventory")
    assert (request.request_id, request.step, request.operation, request.idempotency_key) == (
        f"{INSTANCE}:{RESERVE}:undo",
        f"{RESERVE}:undo",
        "release",
        f"a:o-1:{RESERVE}:undo",
    )
    assert request.payload == {"forwardKey": f"a:o-1:{RESERVE}", f"{RESERVE}Id": f"{RESERVE}-1"}


def test_finish_compensation_records_the_undo_and_ends_compensated_with_the_cause(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    received(deps.queues.queue("client-a"))
    calls = orchestrator_calls(worker, undone_reservation())
    run_all(worker, calls[:4])
    now = clock(deps).advance(20)

    result = run_activity(worker, *calls[4])

    assert result == written("compensation_finished", processState="Compensated")
    record = stored(deps)
    [entry] = record.compensation_log
    assert (entry.status, entry.undo_result, entry.undone_at) == (
        UndoStatus.COMPENSATED,
        {"undone": "true"},
        now,
    )
    assert (record.process_state, record.complete_by, record.pending_reply) == (
        ProcessState.COMPENSATED,
        None,
        None,
    )
    assert record.steps[RESERVE].status is StepStatus.COMPENSATED
    [reply] = replies(deps)
    assert (reply.status.value, reply.reason) == ("Compensated", "card_declined")


def test_an_activity_of_an_attempt_that_no_longer_owns_the_record_changes_nothing(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    claimed(deps)
    received(deps.queues.queue("client-a"))
    *_, (name, input_text) = orchestrator_calls(worker, happy_path())
    superseded = json.loads(input_text) | {"instanceId": "a:o-1:0"}
    before = stored(deps)

    result = run_activity(worker, name, json.dumps(superseded))

    assert (name, result["outcome"]) == ("finish_order", "fenced")
    assert stored(deps) == before
    assert replies(deps) == []

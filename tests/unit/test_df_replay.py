"""The order workflow replayed by azure-functions-durable's own executor over hand-built histories.

Each test builds the history the Durable Functions extension would send (:mod:`tests.df_history`), runs
the real orchestrator function (:func:`durable_functions_orchestrator` over
:func:`orchestrators.workflow.order_workflow`) through ``Orchestrator(fn).handle(...)`` and compares
the whole orchestrator state it returns (``isDone``, ``actions``, ``output``, ``customStatus``) with the
expected JSON. Activity inputs travel as JSON strings; they are decoded before comparing so a failure
shows which field differs.

Task ids follow the SDK's sequence numbers: every activity attempt and timer takes the next number, in
the order the workflow yields them; an external-event task is identified by its name.

The payload shape is the current extension's (replay schema V3: ``upperSchemaVersionNew`` = 2, timer
durations present) unless a test says otherwise. Under V2+ the SDK wraps a with-retry activity in a
``WhenAll`` action and a race in a ``WhenAny`` action.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Generator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from azure.durable_functions import DurableOrchestrationContext, Orchestrator
from durabletask import task as dt

from devhost.durabletask_adapter import durabletask_orchestrator
from function_host.durable import (
    DurableFunctionsWorkflowContext,
    durable_functions_orchestrator,
    is_task_failure,
    retry_options_for,
)
from orchestrators.context import ActivityFailed, ActivityRetry
from orchestrators.workflow import order_workflow
from orderflow.contracts import ORDER_WORKFLOW
from orderflow.errors import OrderflowError
from tests.df_history import HistoryBuilder

pytestmark = pytest.mark.unit

ORDER_ID = "a:o-1"
INSTANCE = "a:o-1:1"
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
STEP_TIMEOUT = timedelta(seconds=30)
ORCHESTRATOR = durable_functions_orchestrator(order_workflow)

RESERVE, CHARGE, SHIP = "reserve_inventory", "charge_payment", "create_shipment"
LEGACY_V1: dict[str, Any] = {"upper_schema_version": None, "upper_schema_version_new": None}
"""Builder options for the payload of an extension that predates replay schema V2."""

FINISHED: dict[str, Any] = {"outcome": "finished", "remainingCalls": 9}
"""``finish_order``'s result: the outcome written."""
COMPENSATED: dict[str, Any] = {"outcome": "compensation_finished", "processState": "Compensated"}
"""``finish_compensation``'s result: every entry undone."""
FAILURE_RECORDED: dict[str, Any] = {"outcome": "failure_recorded", "remainingCalls": 9}
"""``record_step_failure``'s result: the failure written."""


def applied(complete_by: datetime, activity: str = "start_step") -> dict[str, Any]:
    """``start_step``'s result (or ``start_undo``'s): started, with the completeBy it wrote (where the timer
    must fire)."""
    if activity == "start_undo":
        return {"outcome": "undo_started", "completeBy": z(complete_by)}
    return {"outcome": "started", "completeBy": z(complete_by), "remainingCalls": 9}


# ---------------------------------------------------------------------------------------------------
# Inputs and history helpers


def start_input(**changes: Any) -> dict[str, Any]:
    """An :class:`OrchestrationInput` as the starter sends it (camelCase JSON)."""
    payload: dict[str, Any] = {
        "orderId": ORDER_ID,
        "attempt": 1,
        "workflowVersion": "order-v1",
        "completedSteps": [],
        "responseQueue": "agent-responses",
        "maxCalls": 10,
        "stepTimeoutS": STEP_TIMEOUT.total_seconds(),
    }
    payload.update(changes)
    return payload


def response(step: str, *, request_id: str | None = None, **changes: Any) -> dict[str, Any]:
    """An agent response event payload as the listener raises it (camelCase JSON)."""
    rid = request_id if request_id is not None else f"{INSTANCE}:{step}"
    payload: dict[str, Any] = {
        "schemaVersion": 1,
        "requestId": rid,
        "eventId": f"{rid}:response",
        "eventName": f"{step}:response",
        "orderId": ORDER_ID,
        "instanceId": INSTANCE,
        "step": step,
        "outcome": "succeeded",
        "errorKind": None,
        "errorCode": None,
        "errorMessage": None,
        "result": {f"{step}Id": f"{step}-1"},
        "calls": 1,
        "completedAt": "2025-01-02T03:04:06.000000Z",
    }
    payload.update(changes)
    return payload


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def z(moment: datetime) -> str:
    """A time as the SDK and the contracts write it (``...ffffffZ``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def history(**builder_options: Any) -> HistoryBuilder:
    """A history whose first episode (at ``T0``) started the order workflow with :func:`start_input`."""
    return HistoryBuilder(INSTANCE, T0, **builder_options).started(start_input(), name=ORDER_WORKFLOW)


def run_step(
    builder: HistoryBuilder, *, task_id: int, scheduled_at: datetime, completed_at: datetime
) -> HistoryBuilder:
    """Schedule ``start_step`` (task ``task_id``), complete it at ``completed_at`` and record the race timer.

    The activity writes ``completeBy`` = its own clock + the step timeout (here ``completed_at`` + the
    timeout) and returns it; the timer (task ``task_id + 1``) fires there, however long the activity
    waited after ``scheduled_at``.
    """
    assert scheduled_at <= completed_at
    return (
        builder.task_scheduled("start_step", task_id)
        .episode(completed_at)
        .task_completed(task_id, applied(completed_at + STEP_TIMEOUT))
        .timer_created(task_id + 1, completed_at + STEP_TIMEOUT)
    )


def run_step_named(
    builder: HistoryBuilder, name: str, *, task_id: int, completed_at: datetime
) -> HistoryBuilder:
    """Schedule activity ``name`` (task ``task_id``), complete it at ``completed_at`` with a completeBy of
    ``completed_at`` + the step timeout, and record the race timer (task ``task_id + 1``) there."""
    return (
        builder.task_scheduled(name, task_id)
        .episode(completed_at)
        .task_completed(task_id, applied(completed_at + STEP_TIMEOUT, name))
        .timer_created(task_id + 1, completed_at + STEP_TIMEOUT)
    )


def replay(builder: HistoryBuilder) -> dict[str, Any]:
    """Run the orchestrator over the builder's history; the returned state with activity inputs decoded."""
    context = DurableOrchestrationContext.from_json(builder.build_context_json())
    state = cast(dict[str, Any], json.loads(Orchestrator(ORCHESTRATOR).handle(context)))
    for episode in state["actions"]:
        for action in episode:
            _decode_inputs(action)
    return state


def _decode_inputs(action: dict[str, Any]) -> None:
    if isinstance(action.get("input"), str):
        action["input"] = json.loads(action["input"])
    for child in action.get("compoundActions", []):
        _decode_inputs(child)


# ---------------------------------------------------------------------------------------------------
# Expected actions (replay schema V3)

RETRY_OPTIONS = {"firstRetryIntervalInMilliseconds": 1000, "maxNumberOfAttempts": 4}


def with_retry(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A state-write activity: ``CallActivityWithRetry`` wrapped by the SDK in a ``WhenAll`` (type 12)."""
    return {
        "actionType": 12,
        "compoundActions": [
            {"actionType": 1, "functionName": name, "input": payload, "retryOptions": RETRY_OPTIONS}
        ],
    }


def start_step(
    step: str, completed: dict[str, Any] | None = None, *, fallback: bool = False
) -> dict[str, Any]:
    """The ``start_step`` action of ``step`` with its timeout and the previous step's result (on the
    step's fallback provider when ``fallback``)."""
    return with_retry(
        "start_step",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "workflowVersion": "order-v1",
            "step": step,
            "timeoutS": STEP_TIMEOUT.total_seconds(),
            "completed": completed,
            "responseQueue": "agent-responses",
            "fallback": fallback,
        },
    )


def step_result(step: str) -> dict[str, Any]:
    """The ``completed`` summary the next write carries for a step answered by :func:`response`."""
    return {"step": step, "result": {f"{step}Id": f"{step}-1"}, "calls": 1}


def race(step: str, deadline: datetime | None, *, canceled: bool = False) -> dict[str, Any]:
    """``WhenAny`` (type 11) of the step's response event and its timer.

    ``deadline`` None: a re-wait after an ignored event, where only the new event wait is a new action
    (the timer is the one already scheduled).
    """
    children: list[dict[str, Any]] = [
        {"actionType": 6, "externalEventName": f"{step}:response", "reason": "ExternalEvent"}
    ]
    if deadline is not None:
        children.append({"actionType": 5, "fireAt": z(deadline), "isCanceled": canceled})
    return {"actionType": 11, "compoundActions": children}


def state(
    actions: list[dict[str, Any]], status: str, *, output: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The whole orchestrator state: done exactly when there is an output."""
    expected: dict[str, Any] = {
        "isDone": output is not None,
        "schemaVersion": 2,
        "actions": [actions],
        "customStatus": status,
    }
    if output is not None:
        expected["output"] = output
    return expected


def finish_order(outcome: str, *, completed: Any = None, error: Any = None) -> dict[str, Any]:
    """The ``finish_order`` action."""
    return with_retry(
        "finish_order",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "workflowVersion": "order-v1",
            "outcome": outcome,
            "completed": completed,
            "error": error,
        },
    )


def begin_compensation(*, error: Any = None, completed: Any = None) -> dict[str, Any]:
    """The ``begin_compensation`` action."""
    return with_retry(
        "begin_compensation",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "workflowVersion": "order-v1",
            "timeoutS": STEP_TIMEOUT.total_seconds(),
            "error": error,
            "completed": completed,
        },
    )


def start_undo(step: str, undone: tuple[Any, ...] = (), version: str = "order-v1") -> dict[str, Any]:
    """The ``start_undo`` action of ``step``, with the previous stage's undo results."""
    return with_retry(
        "start_undo",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "workflowVersion": version,
            "step": step,
            "timeoutS": STEP_TIMEOUT.total_seconds(),
            "undone": list(undone),
            "responseQueue": "agent-responses",
        },
    )


def finish_compensation(
    *, undone: tuple[Any, ...] = (), failed: Any = None, version: str = "order-v1"
) -> dict[str, Any]:
    """The ``finish_compensation`` action."""
    return with_retry(
        "finish_compensation",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "workflowVersion": version,
            "undone": list(undone),
            "failed": failed,
            "alsoFailed": [],
        },
    )


def compensating(*stages: list[str]) -> dict[str, Any]:
    """``begin_compensation``'s result: Compensating, with the stages to undo (each a list of steps)."""
    return {"outcome": "compensation_begun", "undoStages": list(stages)}


def undo_response(step: str, **changes: Any) -> dict[str, Any]:
    """The agent's answer to the undo of ``step`` (the pseudo-step ``{step}:undo``)."""
    return response(f"{step}:undo", **{"result": {"undone": "true"}, **changes})


def undo_result(step: str) -> dict[str, Any]:
    """The ``undone`` summary the next write carries for an undo answered by :func:`undo_response`."""
    return {"step": step, "result": {"undone": "true"}, "calls": 1}


# The first step's race: start_step at T0 (task 0), completed at T0+1 s, timer 1 at T0+31 s.
DEADLINE_1 = at(1) + STEP_TIMEOUT


def waiting_on_first_step() -> HistoryBuilder:
    """History up to the first step's race: the instance waits for the reserve response or the timer."""
    return run_step(history(), task_id=0, scheduled_at=T0, completed_at=at(1))


# ---------------------------------------------------------------------------------------------------
# (a) first episode


def test_first_episode_publishes_the_step_then_starts_it_with_its_timeout() -> None:
    result = replay(history())

    assert result == state([start_step(RESERVE)], "waiting:reserve_inventory")


def test_after_start_step_the_response_event_races_a_timer_at_the_deadline() -> None:
    result = replay(waiting_on_first_step())

    assert result == state([start_step(RESERVE), race(RESERVE, DEADLINE_1)], "waiting:reserve_inventory")


def test_a_resumed_attempt_skips_the_steps_an_earlier_attempt_completed() -> None:
    builder = HistoryBuilder(INSTANCE, T0).started(start_input(completedSteps=[RESERVE]), name=ORDER_WORKFLOW)

    assert replay(builder) == state([start_step(CHARGE)], "waiting:charge_payment")


# ---------------------------------------------------------------------------------------------------
# (a') the first step started by the claim, its request sent by the starter

CLAIMED_DEADLINE = at(34)
"""The completeBy the claim wrote for the step it started (its timeout plus the start-up allowance)."""


def claimed(step: str = RESERVE, **changes: Any) -> HistoryBuilder:
    """A history whose input names ``step`` as started by the claim, its request already sent."""
    payload = start_input(firstStep={"step": step, "completeBy": z(CLAIMED_DEADLINE)}, **changes)
    return HistoryBuilder(INSTANCE, T0).started(payload, name=ORDER_WORKFLOW)


def test_a_step_the_claim_started_is_waited_for_at_once_without_a_start_step() -> None:
    assert replay(claimed()) == state([race(RESERVE, CLAIMED_DEADLINE)], "waiting:reserve_inventory")


def test_an_answer_raised_before_the_first_episode_is_buffered_and_wins() -> None:
    # The listener raised the answer while the instance was still pending: the extension hands it over
    # in the same first episode as the start, and the SDK buffers it until the wait.
    builder = claimed().event_raised("reserve_inventory:response", response(RESERVE))

    assert replay(builder) == state(
        [
            race(RESERVE, CLAIMED_DEADLINE, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
        ],
        "waiting:charge_payment",
    )


def test_the_claimed_step_s_timer_fires_at_the_claim_s_complete_by_and_ends_without_writing() -> None:
    builder = (
        claimed()
        .timer_created(0, CLAIMED_DEADLINE)
        .episode(CLAIMED_DEADLINE)
        .timer_fired(0, CLAIMED_DEADLINE)
    )

    result = replay(builder)

    assert result["isDone"] is True
    assert result["output"] == {"outcome": "timeout", "step": RESERVE}
    assert result["actions"] == [[race(RESERVE, CLAIMED_DEADLINE)]]


def test_a_claimed_step_that_is_not_the_first_to_run_is_left_to_its_activity() -> None:
    # An input whose claimed step is not the attempt's first is not trusted for any step: each is
    # started by its activity, which finds what the record says.
    builder = claimed(CHARGE)

    assert replay(builder) == state([start_step(RESERVE)], "waiting:reserve_inventory")


# ---------------------------------------------------------------------------------------------------
# (b) the response wins the race


def test_matching_response_cancels_the_timer_and_starts_the_next_step_with_the_result() -> None:
    builder = (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )

    assert replay(builder) == state(
        [
            start_step(RESERVE),
            race(RESERVE, DEADLINE_1, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
        ],
        "waiting:charge_payment",
    )


def test_response_raised_before_start_step_completed_is_buffered_and_wins() -> None:
    # The agent can answer before the extension has processed start_step's completion: the event is
    # then in history before TaskCompleted and the SDK buffers it until the workflow waits.
    builder = (
        history()
        .task_scheduled("start_step", 0)
        .episode(at(1))
        .event_raised("reserve_inventory:response", response(RESERVE))
        .task_completed(0, applied(DEADLINE_1))
    )

    assert replay(builder) == state(
        [
            start_step(RESERVE),
            race(RESERVE, DEADLINE_1, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
        ],
        "waiting:charge_payment",
    )


def test_a_response_raised_through_the_client_arrives_as_its_json_text_and_still_wins() -> None:
    # DurableOrchestrationClient.raise_event encodes the payload twice and the extension stores the
    # string it parses: the event's Input is the response's JSON text, itself JSON-encoded.
    builder = (
        waiting_on_first_step()
        .episode(at(5))
        .event_raised("reserve_inventory:response", json.dumps(response(RESERVE)))
    )

    assert replay(builder) == state(
        [
            start_step(RESERVE),
            race(RESERVE, DEADLINE_1, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
        ],
        "waiting:charge_payment",
    )


# ---------------------------------------------------------------------------------------------------
# (c) the timer wins


def test_timer_wins_ends_the_instance_without_any_write() -> None:
    builder = waiting_on_first_step().episode(DEADLINE_1).timer_fired(1, DEADLINE_1)

    result = replay(builder)

    assert result == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1)],
        "waiting:reserve_inventory",
        output={"outcome": "timeout", "step": RESERVE},
    )


def test_response_after_the_timer_fired_in_the_same_episode_is_not_used() -> None:
    builder = (
        waiting_on_first_step()
        .episode(DEADLINE_1)
        .timer_fired(1, DEADLINE_1)
        .event_raised("reserve_inventory:response", response(RESERVE))
    )

    assert replay(builder)["output"] == {"outcome": "timeout", "step": RESERVE}
    assert replay(builder)["actions"] == [[start_step(RESERVE), race(RESERVE, DEADLINE_1)]]


# ---------------------------------------------------------------------------------------------------
# (d) stray, late and duplicated responses


def test_response_with_another_request_id_leaves_only_the_timer() -> None:
    stale = response(RESERVE, request_id=f"{ORDER_ID}:0:{RESERVE}")  # a superseded attempt's request
    builder = waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", stale)

    # No new wait on the same event name (DF would hand the stray event to it again): only the
    # step's timer is still pending.
    assert replay(builder) == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1)], "waiting:reserve_inventory"
    )


def test_malformed_response_payload_leaves_only_the_timer() -> None:
    builder = waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", {"x": 1})

    assert replay(builder) == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1)], "waiting:reserve_inventory"
    )


def test_after_a_stray_response_the_attempt_ends_at_its_deadline_without_writing() -> None:
    stale = response(RESERVE, request_id=f"{ORDER_ID}:0:{RESERVE}")
    builder = (
        waiting_on_first_step()
        .episode(at(5))
        .event_raised("reserve_inventory:response", stale)
        .episode(at(7))
        .event_raised("reserve_inventory:response", response(RESERVE))
        .episode(DEADLINE_1)
        .timer_fired(1, DEADLINE_1)
    )

    assert replay(builder) == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1)],
        "waiting:reserve_inventory",
        output={"outcome": "timeout", "step": RESERVE},
    )


def test_duplicate_response_after_the_step_completed_is_ignored() -> None:
    answered = (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )
    with_duplicate = (
        copy.deepcopy(answered).episode(at(6)).event_raised("reserve_inventory:response", response(RESERVE))
    )

    # The SDK finds no task waiting on the name and keeps the event aside with this warning.
    with pytest.warns(UserWarning, match="Potential duplicate Task completion for TaskId: reserve_inventory"):
        result = replay(with_duplicate)

    assert result == replay(answered)


def test_cancelled_timer_that_fires_later_does_not_disturb_the_next_step() -> None:
    # The extension cannot delete a durable timer: the cancelled one may still fire while the next
    # step waits. It must neither end the instance nor count as the next step's timeout.
    builder = (
        run_step(
            waiting_on_first_step()
            .episode(at(5))
            .event_raised("reserve_inventory:response", response(RESERVE)),
            task_id=2,
            scheduled_at=at(5),
            completed_at=at(6),
        )
        .episode(DEADLINE_1)
        .timer_fired(1, DEADLINE_1)
    )

    assert replay(builder) == state(
        [
            start_step(RESERVE),
            race(RESERVE, DEADLINE_1, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
            race(CHARGE, at(36)),
        ],
        "waiting:charge_payment",
    )


def test_stray_response_buffered_before_the_wait_cannot_loop() -> None:
    # DF re-delivers a buffered event to every later wait of the same name; the workflow never waits
    # on that name again, so the stray is consumed once and the step's timer decides.
    stale = response(RESERVE, request_id=f"{ORDER_ID}:0:{RESERVE}")
    builder = (
        history()
        .task_scheduled("start_step", 0)
        .episode(at(1))
        .event_raised("reserve_inventory:response", stale)
        .task_completed(0, applied(DEADLINE_1))
    )

    assert replay(builder) == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1)], "waiting:reserve_inventory"
    )


# ---------------------------------------------------------------------------------------------------
# (e) agent failures


def test_permanent_error_on_the_first_step_compensates_with_nothing_to_undo() -> None:
    failed = response(
        RESERVE,
        outcome="failed",
        errorKind="permanent",
        errorCode="out_of_stock",
        errorMessage="sku X1 is out of stock",
        result={},
        calls=2,
    )
    answered = waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", failed)
    error = {
        "step": RESERVE,
        "kind": "permanent",
        "code": "out_of_stock",
        "message": "sku X1 is out of stock",
        "calls": 2,
    }
    expected_actions = [
        start_step(RESERVE),
        race(RESERVE, DEADLINE_1, canceled=True),
        begin_compensation(error=error),
    ]

    assert replay(answered) == state(expected_actions, "compensating")

    # The refused step had no effect: nothing to undo, the compensation finishes at once.
    begun = answered.task_scheduled("begin_compensation", 2).episode(at(6)).task_completed(2, compensating())
    finished = begun.task_scheduled("finish_compensation", 3).episode(at(7)).task_completed(3, COMPENSATED)
    assert replay(finished) == state(
        [*expected_actions, finish_compensation()],
        "compensating",
        output={"outcome": "Compensated", "step": None},
    )


def test_transient_error_records_a_retryable_failure_for_the_supervisor() -> None:
    failed = response(
        RESERVE,
        outcome="failed",
        errorKind="transient",
        errorCode="transient_exhausted",
        errorMessage="503 from inventory",
        result={},
        calls=3,
    )
    answered = waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", failed)
    record = with_retry(
        "record_step_failure",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "error": {
                "step": RESERVE,
                "kind": "transient",
                "code": "transient_exhausted",
                "message": "503 from inventory",
                "calls": 3,
            },
            "at": z(at(5)),
        },
    )
    finished = (
        answered.task_scheduled("record_step_failure", 2).episode(at(6)).task_completed(2, FAILURE_RECORDED)
    )

    assert replay(finished) == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1, canceled=True), record],
        "waiting:reserve_inventory",
        output={"outcome": "retryable", "step": RESERVE},
    )


# ---------------------------------------------------------------------------------------------------
# (f) happy path


def happy_path(finish_result: dict[str, Any] = FINISHED, **builder_options: Any) -> HistoryBuilder:
    """All three steps answered; ``finish_order`` (task 6) scheduled at T0+25 s, answered at T0+26 s."""
    builder = run_step(history(**builder_options), task_id=0, scheduled_at=T0, completed_at=at(1))
    builder = builder.episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    builder = run_step(builder, task_id=2, scheduled_at=at(5), completed_at=at(6))
    builder = builder.episode(at(15)).event_raised("charge_payment:response", response(CHARGE))
    builder = run_step(builder, task_id=4, scheduled_at=at(15), completed_at=at(16))
    builder = builder.episode(at(25)).event_raised("create_shipment:response", response(SHIP))
    return builder.task_scheduled("finish_order", 6).episode(at(26)).task_completed(6, finish_result)


HAPPY_ACTIONS = [
    start_step(RESERVE),
    race(RESERVE, DEADLINE_1, canceled=True),
    start_step(CHARGE, completed=step_result(RESERVE)),
    race(CHARGE, at(36), canceled=True),
    start_step(SHIP, completed=step_result(CHARGE)),
    race(SHIP, at(46), canceled=True),
    finish_order("Processed", completed=step_result(SHIP)),
]


def test_happy_path_runs_three_steps_and_finishes_processed_with_the_last_result() -> None:
    assert replay(happy_path()) == state(
        HAPPY_ACTIONS, "waiting:create_shipment", output={"outcome": "Processed", "step": None}
    )


# ---------------------------------------------------------------------------------------------------
# (g) fenced writes


FENCED: dict[str, Any] = {"outcome": "fenced", "reason": "lockedBy o-1:2"}


def test_fenced_start_step_ends_the_instance_as_fenced() -> None:
    builder = history().task_scheduled("start_step", 0).episode(at(1)).task_completed(0, FENCED)

    assert replay(builder) == state(
        [start_step(RESERVE)],
        "waiting:reserve_inventory",
        output={"outcome": "fenced", "step": RESERVE},
    )


EXHAUSTED: dict[str, Any] = {"outcome": "budget_exhausted"}


def test_a_spent_retry_budget_compensates_without_waiting() -> None:
    builder = history().task_scheduled("start_step", 0).episode(at(1)).task_completed(0, EXHAUSTED)
    error = {
        "step": RESERVE,
        "kind": "budget_exhausted",
        "code": "retry_budget_exhausted",
        "message": "the order's end-to-end retry budget is spent",
        "calls": 0,
    }

    assert replay(builder) == state([start_step(RESERVE), begin_compensation(error=error)], "compensating")


def test_fenced_finish_order_ends_the_instance_as_fenced() -> None:
    assert replay(happy_path(finish_result=FENCED)) == state(
        HAPPY_ACTIONS, "waiting:create_shipment", output={"outcome": "fenced", "step": None}
    )


# ---------------------------------------------------------------------------------------------------
# (h) activity failures


def failing_start_step(failures: int, *, final_timer: bool) -> HistoryBuilder:
    """``start_step`` failing ``failures`` times, with the extension's retry timer after each failure.

    Ids: attempt k is task 2k, the retry timer after it 2k+1 (the SDK numbers both).
    """
    builder = history()
    now = T0
    for attempt in range(failures):
        builder.task_scheduled("start_step", 2 * attempt)
        now += timedelta(seconds=1)
        builder.episode(now).task_failed(
            2 * attempt,
            "Activity function 'start_step' failed: StoreUnavailable",
            "[transient] state store unavailable",
        )
        if attempt < failures - 1 or final_timer:
            builder.timer_created(2 * attempt + 1, now + timedelta(seconds=1))
            now += timedelta(seconds=1)
            builder.episode(now).timer_fired(2 * attempt + 1, now)
    return builder


def test_failed_state_write_is_retried_by_the_extension_not_the_workflow() -> None:
    result = replay(failing_start_step(2, final_timer=True))

    assert result == state([start_step(RESERVE)], "waiting:reserve_inventory")


def test_state_write_failing_every_attempt_counts_as_not_applied() -> None:
    # The SDK reports the failure once the retry timer after the last (4th) attempt has fired.
    assert replay(failing_start_step(4, final_timer=False))["isDone"] is False

    result = replay(failing_start_step(4, final_timer=True))

    assert result == state(
        [start_step(RESERVE)],
        "waiting:reserve_inventory",
        output={"outcome": "fenced", "step": RESERVE},
    )


def test_is_task_failure_accepts_only_the_sdks_plain_exception() -> None:
    assert is_task_failure(Exception("Activity function 'x' failed \n details"))
    for programming_error in (
        TypeError("x"),
        KeyError("x"),
        ValueError("x"),
        ActivityFailed("x"),
        OrderflowError("x"),
        RecursionError("x"),
    ):
        assert not is_task_failure(programming_error)


# ---------------------------------------------------------------------------------------------------
# Adapter details


def test_retry_options_keep_attempts_and_first_interval_only() -> None:
    options = retry_options_for(
        ActivityRetry(first_interval_s=1.5, max_attempts=5, backoff=3.0, max_interval_s=9)
    )

    assert options.to_json() == {"firstRetryIntervalInMilliseconds": 1500, "maxNumberOfAttempts": 5}
    assert retry_options_for(ActivityRetry(first_interval_s=0.0001)).first_retry_interval_in_milliseconds == 1


@pytest.mark.parametrize("designator", ["Z", ""], ids=["aware", "naive"])
def test_naive_and_aware_history_timestamps_give_the_same_deadlines(designator: str) -> None:
    # dateutil parses "...Z" as aware (tzutc) and a bare timestamp as naive; both mean UTC. With the
    # V3 timer durations present the SDK compares fireAt with its clock, which fails on mixed kinds.
    text = waiting_on_first_step().build_context_json()
    if not designator:
        text = text.replace('Z"', '"')
    context = DurableOrchestrationContext.from_json(text)
    wrapped = DurableFunctionsWorkflowContext(context)
    assert wrapped.current_utc_datetime == T0
    assert wrapped.current_utc_datetime.tzinfo is UTC

    result = json.loads(Orchestrator(ORCHESTRATOR).handle(DurableOrchestrationContext.from_json(text)))

    assert result["actions"][0][1]["compoundActions"][1] == {
        "actionType": 5,
        "fireAt": z(DEADLINE_1),
        "isCanceled": False,
    }
    assert json.loads(result["actions"][0][0]["compoundActions"][0]["input"])["timeoutS"] == 30.0


def test_legacy_v1_payload_lists_each_yield_as_its_own_action_group() -> None:
    builder = run_step(history(**LEGACY_V1), task_id=0, scheduled_at=T0, completed_at=at(1))
    builder.episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))

    result = replay(builder)

    v3 = [start_step(RESERVE), race(RESERVE, DEADLINE_1, canceled=True)]
    assert "schemaVersion" not in result
    assert result["actions"] == [
        v3[0]["compoundActions"],
        v3[1]["compoundActions"],
        start_step(CHARGE, completed=step_result(RESERVE))["compoundActions"],
    ]


# ---------------------------------------------------------------------------------------------------
# Determinism


HISTORIES: dict[str, Callable[[], HistoryBuilder]] = {
    "first_episode": history,
    "racing": waiting_on_first_step,
    "happy_path": happy_path,
    "timer_wins": lambda: waiting_on_first_step().episode(DEADLINE_1).timer_fired(1, DEADLINE_1),
    "failing_write": lambda: failing_start_step(4, final_timer=True),
    "legacy_v1_happy_path": lambda: happy_path(**LEGACY_V1),
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_replaying_a_history_twice_gives_identical_actions(name: str) -> None:
    builder = HISTORIES[name]()
    text = builder.build_context_json()

    first = Orchestrator(ORCHESTRATOR).handle(DurableOrchestrationContext.from_json(text))
    second = Orchestrator(ORCHESTRATOR).handle(DurableOrchestrationContext.from_json(text))

    assert first == second


def _without_cancel_flags(actions: Any) -> Any:
    if isinstance(actions, list):
        return [_without_cancel_flags(item) for item in actions]
    if isinstance(actions, dict):
        return {k: _without_cancel_flags(v) for k, v in actions.items() if k != "isCanceled"}
    return actions


def test_each_episode_replays_the_previous_episodes_actions_first() -> None:
    # What the extension checks on every replay: the actions already in history come back, in order, with
    # the same inputs (only a timer's cancel flag may flip). A clock read or a random id in the workflow
    # would change an input between episodes and fail here.
    previous: list[Any] = []
    for prefix in happy_path().episodes():
        actions = _without_cancel_flags(replay(prefix)["actions"][0])
        assert actions[: len(previous)] == previous
        previous = actions
    assert len(previous) == len(HAPPY_ACTIONS)


# ---------------------------------------------------------------------------------------------------
# One body, two runtimes


class _FakeDurableTaskContext:
    """The part of ``durabletask.task.OrchestrationContext`` the workflow's first two decisions touch."""

    def __init__(self, instance_id: str, now: datetime) -> None:
        self.instance_id = instance_id
        self.current_utc_datetime = now.replace(tzinfo=None)  # durabletask's clock is naive UTC
        self.is_replaying = False
        self.custom_status: str | None = None
        self.activities: list[tuple[str, Any, dt.RetryPolicy | None]] = []
        self.timers: list[datetime] = []
        self.waits: list[str] = []

    def set_custom_status(self, status: str) -> None:
        self.custom_status = status

    def call_activity(self, name: str, *, input: Any, retry_policy: dt.RetryPolicy | None) -> dt.Task[Any]:
        self.activities.append((name, input, retry_policy))
        return dt.CompletableTask()

    def create_timer(self, fire_at: datetime) -> dt.Task[Any]:
        self.timers.append(fire_at)
        return dt.CompletableTask()

    def wait_for_external_event(self, name: str) -> dt.Task[Any]:
        self.waits.append(name)
        return dt.CompletableTask()


def test_both_adapters_run_order_workflow_to_the_same_decisions() -> None:
    # The Azure host and the local host register their adapter over the same body; for the same input
    # and clock they must make the same first decisions: the same status, the same start_step input,
    # then a race of the same event against a timer at the same deadline.
    df_state = replay(waiting_on_first_step())
    df_start = df_state["actions"][0][0]["compoundActions"][0]
    df_race = df_state["actions"][0][1]["compoundActions"]

    fake = _FakeDurableTaskContext(INSTANCE, T0)
    orchestrator = durabletask_orchestrator(order_workflow)
    generator = cast(
        Generator[Any, Any, Any], orchestrator(cast(dt.OrchestrationContext, fake), start_input())
    )
    next(generator)
    [(name, payload, policy)] = fake.activities
    assert (name, payload) == (df_start["functionName"], df_start["input"])
    assert fake.custom_status == df_state["customStatus"]
    assert policy is not None and policy.max_number_of_attempts == RETRY_OPTIONS["maxNumberOfAttempts"]

    generator.send(applied(DEADLINE_1))
    assert fake.waits == [df_race[0]["externalEventName"]]
    assert [z(fire_at.replace(tzinfo=UTC)) for fire_at in fake.timers] == [df_race[1]["fireAt"]]

    assert orchestrator.__name__ == ORCHESTRATOR.__name__ == ORDER_WORKFLOW


# ---------------------------------------------------------------------------------------------------
# Where the step's deadline comes from


def test_the_timer_fires_at_the_complete_by_start_step_wrote_not_at_the_scheduling_time() -> None:
    # start_step waited 20 s in the runtime's work queue before it ran: the agent still gets the whole
    # step timeout, and the timer agrees with the record's completeBy.
    late = T0 + timedelta(seconds=20) + STEP_TIMEOUT
    builder = history().task_scheduled("start_step", 0).episode(at(20)).task_completed(0, applied(late))

    assert replay(builder) == state([start_step(RESERVE), race(RESERVE, late)], "waiting:reserve_inventory")


# ---------------------------------------------------------------------------------------------------
# (i) compensation


def charge_refused() -> HistoryBuilder:
    """Reserve answered at T0+5 s; charge (task 2) refused permanently at T0+15 s."""
    builder = (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )
    builder = run_step(builder, task_id=2, scheduled_at=at(5), completed_at=at(6))
    declined = response(
        CHARGE,
        outcome="failed",
        errorKind="permanent",
        errorCode="card_declined",
        errorMessage="card declined",
        result={},
        calls=1,
    )
    return builder.episode(at(15)).event_raised("charge_payment:response", declined)


DECLINED = {
    "step": CHARGE,
    "kind": "permanent",
    "code": "card_declined",
    "message": "card declined",
    "calls": 1,
}
UNDO_DEADLINE = at(17) + STEP_TIMEOUT


def test_a_permanent_error_after_a_completed_step_undoes_it_then_finishes_compensated() -> None:
    begun = (
        charge_refused()
        .task_scheduled("begin_compensation", 4)
        .episode(at(16))
        .task_completed(4, compensating([RESERVE]))
    )
    undoing = run_step_named(begun, "start_undo", task_id=5, completed_at=at(17))
    answered = undoing.episode(at(20)).event_raised("reserve_inventory:undo:response", undo_response(RESERVE))
    expected = [
        start_step(RESERVE),
        race(RESERVE, DEADLINE_1, canceled=True),
        start_step(CHARGE, completed=step_result(RESERVE)),
        race(CHARGE, at(36), canceled=True),
        # The reservation's completion is recorded in the same write that begins the compensation.
        begin_compensation(error=DECLINED, completed=step_result(RESERVE)),
        start_undo(RESERVE),
        race(f"{RESERVE}:undo", UNDO_DEADLINE, canceled=True),
        finish_compensation(undone=(undo_result(RESERVE),)),
    ]

    assert replay(answered) == state(expected, "waiting:reserve_inventory:undo")

    done = answered.task_scheduled("finish_compensation", 7).episode(at(21)).task_completed(7, COMPENSATED)
    assert replay(done) == state(
        expected, "waiting:reserve_inventory:undo", output={"outcome": "Compensated", "step": None}
    )


def test_an_undo_timeout_ends_the_attempt_without_writing_for_the_supervisor() -> None:
    begun = (
        charge_refused()
        .task_scheduled("begin_compensation", 4)
        .episode(at(16))
        .task_completed(4, compensating([RESERVE]))
    )
    undoing = run_step_named(begun, "start_undo", task_id=5, completed_at=at(17))
    timed_out = undoing.episode(UNDO_DEADLINE).timer_fired(6, UNDO_DEADLINE)

    result = replay(timed_out)

    assert result["output"] == {"outcome": "timeout", "step": f"{RESERVE}:undo"}
    assert result["actions"][0][-1] == race(f"{RESERVE}:undo", UNDO_DEADLINE)


def test_a_permanent_undo_failure_finishes_compensation_failed() -> None:
    begun = (
        charge_refused()
        .task_scheduled("begin_compensation", 4)
        .episode(at(16))
        .task_completed(4, compensating([RESERVE]))
    )
    undoing = run_step_named(begun, "start_undo", task_id=5, completed_at=at(17))
    refused = undo_response(
        RESERVE,
        outcome="failed",
        errorKind="permanent",
        errorCode="unknown_reservation",
        errorMessage="no such",
        result={},
    )
    answered = undoing.episode(at(20)).event_raised("reserve_inventory:undo:response", refused)
    failed = {
        "step": f"{RESERVE}:undo",
        "kind": "permanent",
        "code": "unknown_reservation",
        "message": "no such",
        "calls": 1,
    }

    assert replay(answered)["actions"][0][-1] == finish_compensation(failed=failed)
    done = answered.task_scheduled("finish_compensation", 7).episode(at(21)).task_completed(7, COMPENSATED)
    assert replay(done)["output"] == {"outcome": "CompensationFailed", "step": f"{RESERVE}:undo"}


def test_a_resumed_compensation_runs_no_step_and_undoes_what_is_left_in_reverse_order() -> None:
    builder = HistoryBuilder(INSTANCE, T0).started(start_input(compensate=True), name=ORDER_WORKFLOW)

    # First decision: begin (idempotent for a record already Compensating), nothing else.
    assert replay(builder) == state([begin_compensation()], "compensating")

    begun = (
        builder.task_scheduled("begin_compensation", 0)
        .episode(at(1))
        .task_completed(0, compensating([CHARGE], [RESERVE]))
    )
    first = run_step_named(begun, "start_undo", task_id=1, completed_at=at(2))
    first = first.episode(at(3)).event_raised("charge_payment:undo:response", undo_response(CHARGE))
    assert replay(first) == state(
        [
            begin_compensation(),
            start_undo(CHARGE),
            race(f"{CHARGE}:undo", at(2) + STEP_TIMEOUT, canceled=True),
            # The refund is recorded by the write that starts releasing the reservation.
            start_undo(RESERVE, undone=(undo_result(CHARGE),)),
        ],
        "waiting:reserve_inventory:undo",
    )


def test_a_compensation_that_finds_a_point_of_no_return_ends_as_error() -> None:
    builder = HistoryBuilder(INSTANCE, T0).started(start_input(compensate=True), name=ORDER_WORKFLOW)
    error = {"outcome": "past_point_of_no_return"}
    ended = builder.task_scheduled("begin_compensation", 0).episode(at(1)).task_completed(0, error)

    assert replay(ended) == state(
        [begin_compensation()], "compensating", output={"outcome": "Error", "step": None}
    )


def test_a_parallel_stage_starts_every_undo_before_waiting_and_finishes_after_all_answers() -> None:
    # order-v2 undoes the refund and the release in one stage: both requests go out, then one timer at
    # the later deadline races both answers; the answers may come in any order.
    builder = HistoryBuilder(INSTANCE, T0).started(
        start_input(compensate=True, workflowVersion="order-v2"), name=ORDER_WORKFLOW
    )
    begun = (
        builder.task_scheduled("begin_compensation", 0)
        .episode(at(1))
        .task_completed(0, compensating([CHARGE, RESERVE]))
    )
    started = (
        begun.task_scheduled("start_undo", 1)
        .episode(at(2))
        .task_completed(1, applied(at(2) + STEP_TIMEOUT, "start_undo"))
        .task_scheduled("start_undo", 2)
        .episode(at(3))
        .task_completed(2, applied(at(3) + STEP_TIMEOUT, "start_undo"))
        .timer_created(3, at(3) + STEP_TIMEOUT)
    )
    waiting = replay(started)
    flat = [a for a in waiting["actions"][0]]
    assert flat[1:3] == [start_undo(CHARGE, version="order-v2"), start_undo(RESERVE, version="order-v2")]
    assert waiting["customStatus"] == "waiting:charge_payment:undo,reserve_inventory:undo"
    race_all = flat[3]["compoundActions"]
    assert [a.get("externalEventName") for a in race_all] == [
        "charge_payment:undo:response",
        "reserve_inventory:undo:response",
        None,
    ]
    assert race_all[2]["fireAt"] == z(at(3) + STEP_TIMEOUT)  # the later of the two deadlines
    assert waiting["isDone"] is False

    one = (
        copy.deepcopy(started)
        .episode(at(4))
        .event_raised("reserve_inventory:undo:response", undo_response(RESERVE))
    )
    assert replay(one)["actions"][0][-1]["actionType"] == 11  # still racing the charge's answer and the timer
    assert "finish_compensation" not in json.dumps(replay(one)["actions"])

    both = one.episode(at(5)).event_raised("charge_payment:undo:response", undo_response(CHARGE))
    actions = replay(both)["actions"][0]
    # Both recorded by the one write that finishes, in the stage's order.
    assert actions[-1] == finish_compensation(
        undone=(undo_result(CHARGE), undo_result(RESERVE)), version="order-v2"
    )
    done = both.task_scheduled("finish_compensation", 4).episode(at(6)).task_completed(4, COMPENSATED)
    assert replay(done)["output"] == {"outcome": "Compensated", "step": None}


# ---------------------------------------------------------------------------------------------------
# (j) client cancellation

CANCELLED_RESULT: dict[str, Any] = {"outcome": "stopped", "cause": "cancelled_by_client"}
CANCEL_ERROR = {
    "step": CHARGE,
    "kind": "cancelled",
    "code": "cancelled_by_client",
    "message": "the client cancelled the order",
    "calls": 0,
}


def test_a_cancel_seen_by_the_next_step_start_compensates_what_was_done() -> None:
    answered = (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )
    refused = answered.task_scheduled("start_step", 2).episode(at(6)).task_completed(2, CANCELLED_RESULT)

    result = replay(refused)

    assert result == state(
        [
            start_step(RESERVE),
            race(RESERVE, DEADLINE_1, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
            # The reservation's completion is recorded as compensation begins, then undone.
            begin_compensation(error=CANCEL_ERROR, completed=step_result(RESERVE)),
        ],
        "compensating",
    )


def test_a_cancel_seen_by_the_finishing_write_compensates_every_step() -> None:
    refused = happy_path(finish_result=CANCELLED_RESULT)

    actions = replay(refused)["actions"][0]

    assert actions[:-1] == HAPPY_ACTIONS
    assert actions[-1] == begin_compensation(
        error={**CANCEL_ERROR, "step": SHIP}, completed=step_result(SHIP)
    )


# ---------------------------------------------------------------------------------------------------
# (k) human review

REVIEW_DEADLINE = at(100)
AWAITING: dict[str, Any] = {
    "outcome": "awaiting_review",
    "completeBy": z(REVIEW_DEADLINE),
    "reviewDefault": "reject",
}


def awaiting_review(result: dict[str, Any] = AWAITING) -> HistoryBuilder:
    """Reserve answered at T0+5 s; the charge's start (task 2) finds the order must await review
    (``result``: that start's result, awaiting review by default)."""
    answered = (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )
    return (
        answered.task_scheduled("start_step", 2)
        .episode(at(6))
        .task_completed(2, result)
        .timer_created(3, REVIEW_DEADLINE)
    )


def record_review(decision: str, decided_by: str) -> dict[str, Any]:
    """The ``record_review`` action of the charge."""
    return with_retry(
        "record_review",
        {
            "orderId": ORDER_ID,
            "instanceId": INSTANCE,
            "step": CHARGE,
            "decision": decision,
            "decidedBy": decided_by,
        },
    )


def review_race(*, canceled: bool = False) -> dict[str, Any]:
    """``WhenAny`` of the ``ReviewDecision`` event and the review deadline's timer."""
    return {
        "actionType": 11,
        "compoundActions": [
            {"actionType": 6, "externalEventName": "ReviewDecision", "reason": "ExternalEvent"},
            {"actionType": 5, "fireAt": z(REVIEW_DEADLINE), "isCanceled": canceled},
        ],
    }


FIRST_STEP_ACTIONS = [start_step(RESERVE), race(RESERVE, DEADLINE_1, canceled=True)]
CHARGE_START = start_step(CHARGE, completed=step_result(RESERVE))


def test_an_order_awaiting_review_waits_for_the_decision_or_the_deadline() -> None:
    assert replay(awaiting_review()) == state(
        [*FIRST_STEP_ACTIONS, CHARGE_START, review_race()], "review:charge_payment"
    )


def test_an_approved_review_is_recorded_then_the_step_starts() -> None:
    decided = (
        awaiting_review()
        .episode(at(30))
        .event_raised("ReviewDecision", {"decision": "approve", "reviewer": "ana"})
    )
    recorded = (
        decided.task_scheduled("record_review", 4)
        .episode(at(31))
        .task_completed(4, {"outcome": "review_recorded", "decision": "approve"})
    )

    assert replay(recorded) == state(
        [
            *FIRST_STEP_ACTIONS,
            CHARGE_START,
            review_race(canceled=True),
            record_review("approve", "ana"),
            CHARGE_START,
        ],
        "waiting:charge_payment",
    )


def test_a_review_decision_raised_through_the_client_is_read_from_its_json_text() -> None:
    decided = (
        awaiting_review()
        .episode(at(30))
        .event_raised("ReviewDecision", json.dumps({"decision": "approve", "reviewer": "ana"}))
    )

    assert replay(decided)["actions"] == [
        [*FIRST_STEP_ACTIONS, CHARGE_START, review_race(canceled=True), record_review("approve", "ana")]
    ]


def test_a_rejected_review_compensates_what_was_done() -> None:
    decided = (
        awaiting_review()
        .episode(at(30))
        .event_raised("ReviewDecision", {"decision": "reject", "reviewer": "ana"})
    )
    recorded = (
        decided.task_scheduled("record_review", 4)
        .episode(at(31))
        .task_completed(4, {"outcome": "review_recorded", "decision": "reject"})
    )
    rejected = {
        "step": CHARGE,
        "kind": "rejected",
        "code": "review_rejected",
        "message": "the review of this step was rejected",
        "calls": 0,
    }

    assert replay(recorded)["actions"][0][-1] == begin_compensation(
        error=rejected, completed=step_result(RESERVE)
    )


def test_a_review_that_times_out_takes_the_default() -> None:
    timed_out = awaiting_review().episode(REVIEW_DEADLINE).timer_fired(3, REVIEW_DEADLINE)

    assert replay(timed_out)["actions"][0][-1] == record_review("reject", "deadline")


def test_the_decision_in_force_is_the_one_recorded_first() -> None:
    # The reviewer approved through the submission path just before the deadline fired here: the
    # default (reject) loses to the approval already in the record, and the step starts.
    timed_out = awaiting_review().episode(REVIEW_DEADLINE).timer_fired(3, REVIEW_DEADLINE)
    recorded = (
        timed_out.task_scheduled("record_review", 4)
        .episode(at(101))
        .task_completed(4, {"outcome": "review_recorded", "decision": "approve"})
    )

    assert replay(recorded)["actions"][0][-1] == CHARGE_START


# ---------------------------------------------------------------------------------------------------
# (l) fallback provider


def test_a_step_its_provider_refuses_is_tried_on_the_fallback_provider_before_compensating() -> None:
    v3 = HistoryBuilder(INSTANCE, T0).started(start_input(workflowVersion="order-v3"), name=ORDER_WORKFLOW)
    builder = run_step(v3, task_id=0, scheduled_at=T0, completed_at=at(1))
    builder = builder.episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    builder = run_step(builder, task_id=2, scheduled_at=at(5), completed_at=at(6))
    builder = builder.episode(at(15)).event_raised("charge_payment:response", response(CHARGE))
    builder = run_step(builder, task_id=4, scheduled_at=at(15), completed_at=at(16))
    refused = response(
        SHIP,
        outcome="failed",
        errorKind="permanent",
        errorCode="unknown_carrier",
        errorMessage="no",
        result={},
    )
    builder = builder.episode(at(20)).event_raised("create_shipment:response", refused)

    waiting = replay(builder)
    fallback_start = {
        **start_step(SHIP, completed=step_result(CHARGE), fallback=True),
    }
    fallback_start["compoundActions"][0]["input"]["workflowVersion"] = "order-v3"
    assert waiting["actions"][0][-1] == fallback_start
    assert waiting["customStatus"] == "waiting:create_shipment:fallback"

    builder = run_step(builder, task_id=6, scheduled_at=at(20), completed_at=at(21))
    shipped = response(f"{SHIP}:fallback", result={"shipmentId": "s-9", "carrier": "MAIL"})
    done = builder.episode(at(25)).event_raised("create_shipment:fallback:response", shipped)
    actions = replay(done)["actions"][0]
    finish = actions[-1]["compoundActions"][0]
    assert finish["functionName"] == "finish_order"
    assert finish["input"]["outcome"] == "Processed"
    assert finish["input"]["completed"] == {
        "step": SHIP,
        "result": {"shipmentId": "s-9", "carrier": "MAIL"},
        "calls": 1,
    }


def shipment_kept_on_its_fallback() -> HistoryBuilder:
    """An order-v3 attempt whose ``start_step`` of the shipment says the request went to the fallback
    provider (an earlier attempt moved the step there), at T0+16 s."""
    v3 = HistoryBuilder(INSTANCE, T0).started(start_input(workflowVersion="order-v3"), name=ORDER_WORKFLOW)
    builder = run_step(v3, task_id=0, scheduled_at=T0, completed_at=at(1))
    builder = builder.episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    builder = run_step(builder, task_id=2, scheduled_at=at(5), completed_at=at(6))
    builder = builder.episode(at(15)).event_raised("charge_payment:response", response(CHARGE))
    return (
        builder.task_scheduled("start_step", 4)
        .episode(at(16))
        .task_completed(4, {**applied(at(16) + STEP_TIMEOUT), "fallback": True})
        .timer_created(5, at(16) + STEP_TIMEOUT)
    )


def test_a_step_an_earlier_attempt_left_on_its_fallback_waits_for_the_fallback_provider() -> None:
    # Every attempt starts a step on its provider; the record keeps a step an earlier attempt moved to
    # its fallback provider there, and start_step says so: the request went to the fallback provider, so
    # the attempt waits for its answer, and a refusal there is the last (no fallback is left).
    shipped = response(f"{SHIP}:fallback", result={"shipmentId": "s-9", "carrier": "MAIL"})
    done = (
        shipment_kept_on_its_fallback()
        .episode(at(20))
        .event_raised("create_shipment:fallback:response", shipped)
    )

    finish = replay(done)["actions"][0][-1]["compoundActions"][0]
    assert (finish["functionName"], finish["input"]["outcome"]) == ("finish_order", "Processed")
    assert finish["input"]["completed"]["result"] == {"shipmentId": "s-9", "carrier": "MAIL"}

    refused = response(
        f"{SHIP}:fallback",
        outcome="failed",
        errorKind="permanent",
        errorCode="no_mail",
        errorMessage="no",
        result={},
    )
    refusal = (
        shipment_kept_on_its_fallback()
        .episode(at(20))
        .event_raised("create_shipment:fallback:response", refused)
    )
    begun = replay(refusal)["actions"][0][-1]["compoundActions"][0]
    assert (begun["functionName"], begun["input"]["error"]["code"]) == ("begin_compensation", "no_mail")


# ---------------------------------------------------------------------------------------------------
# (l) the ends of a compensation


def refused_first_step() -> HistoryBuilder:
    """The first step refused for good (a permanent error) at T0+5 s."""
    failed = response(
        RESERVE,
        outcome="failed",
        errorKind="permanent",
        errorCode="out_of_stock",
        errorMessage="x",
        result={},
    )
    return waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", failed)


def test_a_compensation_begun_and_finished_ends_compensated() -> None:
    begun = refused_first_step().task_scheduled("begin_compensation", 2).episode(at(6))
    begun = begun.task_completed(2, {"outcome": "compensation_begun", "undoStages": []})
    finished = begun.task_scheduled("finish_compensation", 3).episode(at(7))
    finished = finished.task_completed(3, {"outcome": "compensation_finished", "processState": "Compensated"})

    assert replay(finished)["output"] == {"outcome": "Compensated", "step": None}


def test_a_point_of_no_return_found_by_begin_compensation_ends_the_attempt_in_error() -> None:
    begun = refused_first_step().task_scheduled("begin_compensation", 2).episode(at(6))
    begun = begun.task_completed(2, {"outcome": "past_point_of_no_return"})

    assert replay(begun)["output"] == {"outcome": "Error", "step": None}


def test_a_review_rejected_before_the_start_compensates() -> None:
    answered = waiting_on_first_step().episode(at(5))
    answered = answered.event_raised("reserve_inventory:response", response(RESERVE))
    rejected = answered.task_scheduled("start_step", 2).episode(at(6))
    rejected = rejected.task_completed(2, {"outcome": "review_rejected"})

    assert replay(rejected)["actions"][0][-1]["compoundActions"][0]["functionName"] == "begin_compensation"


def test_an_undo_runs_to_compensated() -> None:
    builder = charge_refused().task_scheduled("begin_compensation", 4).episode(at(16))
    builder = (
        builder.task_completed(4, compensating([RESERVE])).task_scheduled("start_undo", 5).episode(at(17))
    )
    builder = builder.task_completed(5, {"outcome": "undo_started", "completeBy": z(UNDO_DEADLINE)})
    builder = builder.timer_created(6, UNDO_DEADLINE).episode(at(20))
    builder = builder.event_raised("reserve_inventory:undo:response", undo_response(RESERVE))
    builder = builder.task_scheduled("finish_compensation", 7).episode(at(21)).task_completed(7, COMPENSATED)

    assert replay(builder)["output"] == {"outcome": "Compensated", "step": None}


def test_a_recorded_failure_ends_the_attempt_as_retryable() -> None:
    failed = response(
        RESERVE, outcome="failed", errorKind="transient", errorCode="t", errorMessage="503", result={}
    )

    def recorded(result: dict[str, Any]) -> HistoryBuilder:
        answered = waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", failed)
        return answered.task_scheduled("record_step_failure", 2).episode(at(6)).task_completed(2, result)

    assert replay(recorded({"outcome": "failure_recorded", "remainingCalls": 3}))["output"] == {
        "outcome": "retryable",
        "step": RESERVE,
    }

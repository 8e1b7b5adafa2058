"""The order orchestrator as the worker runs it, one episode of one order at a time.

Each invocation carries the ``orchestrationTrigger`` data the Durable extension sends a Python worker: the
extension's ``OrchestrationContextToString`` builds a JSON document (history, input, instance id, the
replay-schema fields) and hands the host a string, which the host sends as ``TypedData.string``. The
worker decodes it with ``azure.functions``' ``OrchestrationTriggerConverter``, the app's orchestrator
(azure-functions-durable's ``Orchestrator`` over the workflow adapter) replays it, and the converter
encodes the orchestrator state it returns as ``TypedData.json``: what is asserted is that state, as
the extension would read it.

Histories are built with :class:`tests.df_history.HistoryBuilder` through the helpers of
``tests/unit/test_df_replay.py``, which replays the same histories through the SDK's executor without the
worker; :func:`test_every_episode_of_an_order_is_what_the_replay_executor_decides` holds the two paths to
the same answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.durable_functions import DurableOrchestrationContext, Orchestrator

from orderflow.contracts import ORDER_WORKFLOW
from tests.df_history import HistoryBuilder
from tests.unit.test_df_replay import (
    CHARGE,
    DEADLINE_1,
    HAPPY_ACTIONS,
    INSTANCE,
    ORCHESTRATOR,
    RESERVE,
    SHIP,
    STEP_TIMEOUT,
    at,
    finish_order,
    happy_path,
    history,
    race,
    replay,
    response,
    start_step,
    state,
    step_result,
    waiting_on_first_step,
    z,
)
from tests.worker.rpc import protos
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

EXTENSION_SCHEMA: dict[str, Any] = {
    "upperSchemaVersion": 1,
    "upperSchemaVersionNew": 3,
    "defaultHttpAsyncRequestSleepTimeMillseconds": 30000,
}
"""What the current extension adds to the context: replay schema V2 and V4 (the SDK, which knows V3 at most,
runs V3) and the HTTP polling interval (field name spelled as the extension spells it)."""


def orchestration_trigger(builder: HistoryBuilder) -> Any:
    """The trigger's ``TypedData`` for the builder's history, as the host sends it (a string)."""
    context = json.loads(builder.build_context_json())
    context.update(EXTENSION_SCHEMA)
    return protos.TypedData(string=json.dumps(context))


def run_episode(worker: FunctionsWorker, builder: HistoryBuilder) -> Any:
    """Invoke the orchestrator on the builder's history; the worker's ``return_value``."""
    response = worker.invoke(ORDER_WORKFLOW, {"context": orchestration_trigger(builder)})
    assert failure(response) is None
    return response.return_value


def episode(worker: FunctionsWorker, builder: HistoryBuilder) -> dict[str, Any]:
    """The orchestrator state the worker returns for the builder's history, activity inputs decoded."""
    returned = run_episode(worker, builder)
    assert returned.WhichOneof("data") == "json"
    decoded: dict[str, Any] = json.loads(returned.json)
    for group in decoded["actions"]:
        for action in group:
            _decode_inputs(action)
    return decoded


def _decode_inputs(action: dict[str, Any]) -> None:
    if isinstance(action.get("input"), str):
        action["input"] = json.loads(action["input"])
    for child in action.get("compoundActions", []):
        _decode_inputs(child)


def new_actions(result: dict[str, Any], before: dict[str, Any]) -> list[dict[str, Any]]:
    """The actions ``result`` adds to those of the previous episode ``before``."""
    [actions] = result["actions"]
    [earlier] = before["actions"]
    return list(actions[len(earlier) :])


def test_the_first_episode_calls_start_step_with_the_first_step_and_its_timeout(
    worker: FunctionsWorker,
) -> None:
    result = episode(worker, history())

    assert (result["isDone"], result["schemaVersion"], result["customStatus"]) == (
        False,
        2,
        "waiting:reserve_inventory",
    )
    [[call]] = result["actions"]
    # A state write: CallActivityWithRetry (1) inside the WhenAll (12) the SDK wraps it in under V3.
    assert call["actionType"] == 12
    [activity] = call["compoundActions"]
    assert (activity["actionType"], activity["functionName"]) == (1, "start_step")
    assert activity["retryOptions"] == {"firstRetryIntervalInMilliseconds": 1000, "maxNumberOfAttempts": 4}
    assert activity["input"] == {
        "orderId": "a:o-1",
        "instanceId": INSTANCE,
        "workflowVersion": "order-v1",
        "step": RESERVE,
        "timeoutS": STEP_TIMEOUT.total_seconds(),
        "completed": None,
        "responseQueue": "agent-responses",
        "fallback": False,
    }


def test_the_started_step_races_its_response_event_against_a_timer_at_its_complete_by(
    worker: FunctionsWorker,
) -> None:
    result = episode(worker, waiting_on_first_step())

    [wait] = new_actions(result, episode(worker, history()))
    assert result["isDone"] is False
    # WhenAny (11) of WaitForExternalEvent (6) named {step}:{phase} and CreateTimer (5) at completeBy.
    assert wait == {
        "actionType": 11,
        "compoundActions": [
            {"actionType": 6, "externalEventName": "reserve_inventory:response", "reason": "ExternalEvent"},
            {"actionType": 5, "fireAt": z(DEADLINE_1), "isCanceled": False},
        ],
    }


def answered_first_step() -> HistoryBuilder:
    """The first step's response raised at T0+5 s, while the instance waits (as in test_df_replay)."""
    return (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )


def test_when_the_response_wins_the_losing_timer_is_cancelled_and_the_next_step_starts(
    worker: FunctionsWorker,
) -> None:
    result = episode(worker, answered_first_step())

    [[start, wait, following]] = result["actions"]
    assert start == start_step(RESERVE)
    # azure-functions-durable 1.7.0 cancels a timer by flagging its CreateTimer action, not by a new one.
    assert wait["compoundActions"][1] == {"actionType": 5, "fireAt": z(DEADLINE_1), "isCanceled": True}
    assert following == start_step(CHARGE, completed=step_result(RESERVE))
    assert (result["isDone"], result["customStatus"]) == (False, "waiting:charge_payment")


def test_the_worker_returns_what_test_df_replay_expects_of_the_replay_executor(
    worker: FunctionsWorker,
) -> None:
    builder = answered_first_step()
    # The expectation of test_df_replay's test_matching_response_cancels_the_timer_and_starts_the_next_step.
    expected = state(
        [
            start_step(RESERVE),
            race(RESERVE, DEADLINE_1, canceled=True),
            start_step(CHARGE, completed=step_result(RESERVE)),
        ],
        "waiting:charge_payment",
    )

    assert episode(worker, builder) == expected == replay(builder)


def test_when_the_timer_wins_the_orchestration_ends_without_writing(worker: FunctionsWorker) -> None:
    timed_out = waiting_on_first_step().episode(DEADLINE_1).timer_fired(1, DEADLINE_1)

    result = episode(worker, timed_out)

    assert result == state(
        [start_step(RESERVE), race(RESERVE, DEADLINE_1)],
        "waiting:reserve_inventory",
        output={"outcome": "timeout", "step": RESERVE},
    )


def test_the_last_episode_finishes_the_order_and_completes_the_orchestration(
    worker: FunctionsWorker,
) -> None:
    result = episode(worker, happy_path())

    assert (result["isDone"], result["output"]) == (True, {"outcome": "Processed", "step": None})
    assert result["actions"][0][-1] == finish_order("Processed", completed=step_result(SHIP))
    assert result == state(HAPPY_ACTIONS, "waiting:create_shipment", output=result["output"])


def test_every_episode_of_an_order_is_what_the_replay_executor_decides(worker: FunctionsWorker) -> None:
    episodes = happy_path().episodes()

    through_worker = [json.loads(run_episode(worker, builder).json) for builder in episodes]
    through_replay = [replay_raw(builder) for builder in episodes]

    assert len(episodes) == 8
    assert through_worker == through_replay
    assert [state["isDone"] for state in through_worker] == [False] * 7 + [True]


def replay_raw(builder: HistoryBuilder) -> Any:
    """The replay executor's state for the builder's history, activity inputs left as the SDK wrote them."""
    context = DurableOrchestrationContext.from_json(builder.build_context_json())
    return json.loads(Orchestrator(ORCHESTRATOR).handle(context))

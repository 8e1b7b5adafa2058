"""The durable-client calls of the starter and the response listener, as the worker runs them.

Both triggers take a ``durableClient`` binding: the worker hands azure-functions-durable's middleware the
binding's JSON, which becomes a ``DurableOrchestrationClient`` whose HTTP calls reach the extension's HTTP
API, here :class:`tests.worker.durable_http.DurableExtension` on a loopback port. What is asserted is
what the extension would receive (method, path, query, body) and what the host would receive in return
(the Service Bus settlement, the copies scheduled for a retry), and the state records the starter writes.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devhost.settings import LocalSettings
from function_host.blueprints import orchestrators as orchestrators_blueprint
from function_host.blueprints import supervisor as supervisor_blueprint
from intake.submission import handle_intake_message
from orderflow.clock import FakeClock
from orderflow.contracts import ORDER_WORKFLOW, OrchestrationInput
from orderflow.messages import AgentOutcome, AgentResponse
from orderflow.queues.servicebus import DELIVERY_COUNT_PROPERTY
from orderflow.records import ProcessState, StepStatus, format_utc
from orderflow.workflows import CURRENT_WORKFLOW
from tests.host_deps import HostDeps
from tests.servicebus_wire import HostMessage
from tests.unit.fakes import TEST_CLIENT, order_body, received
from tests.unit.test_df_replay import CHARGE, DEADLINE_1, RESERVE, at, race, start_step, waiting_on_first_step
from tests.worker.appdeps import NOW, RecordingServiceBusClient, app_dependencies
from tests.worker.durable_http import SERVER_ERROR, DurableExtension, Fault, HttpRequest, Instance
from tests.worker.rpc import protos
from tests.worker.settlement import SettlementCall, SettlementServer
from tests.worker.test_orchestrator import episode
from tests.worker.test_servicebus_triggers import as_delivered, binding, metadata
from tests.worker.triggers import timer_trigger
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
FIRST_STEP = CURRENT_WORKFLOW.steps[0].name
STATUS_QUERY: dict[str, str] = {}
"""The status query's parameters: the client asks for no history and no input (all default False)."""


@pytest.fixture
def app(
    monkeypatch: pytest.MonkeyPatch, settlement: SettlementServer
) -> tuple[HostDeps, RecordingServiceBusClient]:
    """The scheduler triggers' dependencies, in memory, on a fake clock at :data:`START`."""
    deps, redelivery, client = app_dependencies()
    deps = replace(deps, clock=FakeClock(START))
    monkeypatch.setattr(orchestrators_blueprint, "dependencies", lambda: deps)
    monkeypatch.setattr(orchestrators_blueprint, "app_settings", lambda: deps.settings)
    monkeypatch.setattr(orchestrators_blueprint, "redelivery", lambda: redelivery)
    settlement.service.take()
    return deps, client


def client_data(extension: DurableExtension) -> Any:
    """The ``durableClient`` binding's ``TypedData``: the extension's JSON, as a string."""
    return protos.TypedData(string=extension.client_binding())


def submit(deps: HostDeps, order_id: str = "a:o-1") -> None:
    """Record a valid order: its document and a ``Pending``, unlocked state record."""
    handle_intake_message(
        order_body(order_id),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )


def run_starter(worker: FunctionsWorker, extension: DurableExtension) -> None:
    every = timedelta(seconds=10)
    response = worker.invoke(
        "starter",
        {"timer": timer_trigger(START - every, every=every), "client": client_data(extension)},
    )
    assert failure(response) is None


def status_query(instance_id: str) -> HttpRequest:
    return HttpRequest("GET", f"/durabletask/instances/{instance_id}", STATUS_QUERY, None, b"")


def request_line(request: HttpRequest) -> tuple[str, str, dict[str, str]]:
    return request.method, request.path, request.query


# --- the starter -----------------------------------------------------------------------------------------


def test_the_starter_checks_then_starts_the_claimed_attempt_under_its_instance_id(
    worker: FunctionsWorker, extension: DurableExtension, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, _ = app
    submit(deps)

    run_starter(worker, extension)

    status, start = extension.take()
    assert status == status_query("a:o-1:1")
    assert request_line(start) == ("POST", f"/durabletask/orchestrators/{ORDER_WORKFLOW}/a:o-1:1", {})
    assert start.content_type == "application/json"
    record = deps.states.get("a:o-1").item
    assert record.complete_by is not None
    # The client JSON-encodes the input, then its HTTP layer encodes that text again: the extension
    # parses the body once and keeps the input's JSON text, which the orchestration context carries.
    assert json.loads(start.json()) == {
        "orderId": "a:o-1",
        "attempt": 1,
        "workflowVersion": CURRENT_WORKFLOW.version,
        "completedSteps": [],
        "responseQueue": deps.settings.queues.AGENT_RESPONSES_QUEUE,
        "maxCalls": deps.settings.steps.RETRY_BUDGET - deps.settings.steps.AGENT_MAX_CALLS_PER_STEP,
        "stepTimeoutS": deps.settings.steps.STEP_TIMEOUT_S,
        "compensate": False,
        "firstStep": {"step": FIRST_STEP, "completeBy": format_utc(record.complete_by)},
    }
    assert OrchestrationInput.model_validate_json(start.json()).attempt == record.attempt == 1
    assert extension.instances["a:o-1:1"].name == ORDER_WORKFLOW
    assert (record.process_state, record.locked_by) == (ProcessState.PROCESSING, "a:o-1:1")
    assert record.steps[FIRST_STEP].status is StepStatus.RUNNING
    # Then the claim-started step's request, answered on the deployment's response queue.
    [sent] = received(deps.queues.queue(deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent)))
    request = json.loads(sent.body)
    assert (sent.message_id, request["instanceId"], request["replyTo"]) == (
        f"a:o-1:1:{FIRST_STEP}",
        "a:o-1:1",
        deps.settings.queues.AGENT_RESPONSES_QUEUE,
    )


def test_the_starter_starts_nothing_when_the_attempts_instance_exists(
    worker: FunctionsWorker, extension: DurableExtension, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, _ = app
    submit(deps)
    extension.instances["a:o-1:1"] = Instance(name=ORDER_WORKFLOW, runtime_status="Running")

    run_starter(worker, extension)

    # Durable Functions 1.x start_new would replace it (docs/design.md §7): only the status is asked.
    assert extension.take() == [status_query("a:o-1:1")]
    assert deps.states.get("a:o-1").item.locked_by == "a:o-1:1"


def test_the_starter_makes_no_request_when_nothing_is_pending(
    worker: FunctionsWorker, extension: DurableExtension, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    run_starter(worker, extension)

    assert extension.take() == []


def test_a_failed_status_query_starts_nothing_and_leaves_the_claim_to_the_supervisor(
    worker: FunctionsWorker, extension: DurableExtension, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, _ = app
    submit(deps)
    extension.fail_next("status", Fault(500, SERVER_ERROR))
    every = timedelta(seconds=10)

    response = worker.invoke(
        "starter",
        {"timer": timer_trigger(START - every, every=every), "client": client_data(extension)},
    )

    # Starting after a status that was not read could replace an existing instance (docs/design.md §7).
    assert extension.take() == [status_query("a:o-1:1")]
    assert "TransientError" in (failure(response) or "")
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.locked_by) == (ProcessState.PROCESSING, "a:o-1:1")
    assert record.complete_by is not None


# --- the response listener -------------------------------------------------------------------------------


def agent_response(step: str = FIRST_STEP, *, instance_id: str = "a:o-1:1") -> AgentResponse:
    return AgentResponse(
        request_id=f"{instance_id}:{step}",
        event_id=f"{instance_id}:{step}:response",
        event_name=f"{step}:response",
        order_id="a:o-1",
        instance_id=instance_id,
        step=step,
        outcome=AgentOutcome.SUCCEEDED,
        result={"reservationId": "r-1"},
        calls=1,
        completed_at=START,
    )


def waiting_instance(extension: DurableExtension, step: str = FIRST_STEP) -> Instance:
    instance = Instance(name=ORDER_WORKFLOW, runtime_status="Running", custom_status=f"waiting:{step}")
    extension.instances["a:o-1:1"] = instance
    return instance


def listen(
    worker: FunctionsWorker, extension: DurableExtension, settlement: SettlementServer, message: HostMessage
) -> list[SettlementCall]:
    """Invoke the listener with ``message``; the settlements the host received."""
    response = worker.invoke(
        "response_listener",
        {"message": binding(message), "client": client_data(extension)},
        trigger_metadata=metadata(message),
    )
    assert failure(response) is None
    return settlement.service.take()


def response_message(response: AgentResponse) -> HostMessage:
    return HostMessage(
        response.to_json().encode(), message_id=response.event_id, correlation_id=response.order_id
    )


def test_the_listener_raises_the_response_as_the_steps_event_and_completes_the_message(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    _, client = app
    instance = waiting_instance(extension)
    message = response_message(agent_response())

    calls = listen(worker, extension, settlement, message)

    status, raised = extension.take()
    assert status == status_query("a:o-1:1")
    event = f"{FIRST_STEP}:response"
    assert request_line(raised) == ("POST", f"/durabletask/instances/a:o-1:1/raiseEvent/{event}", {})
    assert raised.content_type == "application/json"
    payload = json.loads(raised.json())  # encoded twice by the client, like a start's input
    assert (payload["requestId"], payload["eventName"], payload["instanceId"]) == (
        f"a:o-1:1:{FIRST_STEP}",
        event,
        "a:o-1:1",
    )
    assert payload == agent_response().model_dump(mode="json", by_alias=True)
    assert instance.events == [(event, raised.json())]
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    assert client.senders == {}


def test_a_response_for_an_instance_that_has_not_run_yet_is_retried_then_raised_once_it_waits(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    # The answer to the request the starter sent can arrive while the instance is still Pending, with no
    # custom status: raised then, the Azure Storage backend can discard it (Azure/durabletask#720).
    deps, client = app
    instance = Instance(name=ORDER_WORKFLOW, runtime_status="Pending", custom_status=None)
    extension.instances["a:o-1:1"] = instance
    message = response_message(agent_response())

    first = listen(worker, extension, settlement, message)
    [copy] = client.senders[deps.settings.queues.AGENT_RESPONSES_QUEUE].sent
    assert extension.take() == [status_query("a:o-1:1")]  # no raise
    assert first == [SettlementCall("complete", str(message.lock_token))]
    assert copy.scheduled_enqueue_time_utc == NOW + timedelta(seconds=1)

    instance.runtime_status, instance.custom_status = "Running", f"waiting:{FIRST_STEP}"
    second = listen(worker, extension, settlement, as_delivered(copy, delivery_count=1))

    status, raised = extension.take()
    assert (status, request_line(raised)[1]) == (
        status_query("a:o-1:1"),
        f"/durabletask/instances/a:o-1:1/raiseEvent/{FIRST_STEP}:response",
    )
    assert instance.events == [(f"{FIRST_STEP}:response", raised.json())]
    assert [call.verb for call in second] == ["complete"]


def test_a_response_for_a_finished_instance_is_completed_without_a_raise(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    _, client = app
    waiting_instance(extension).runtime_status = "Completed"
    message = response_message(agent_response())

    calls = listen(worker, extension, settlement, message)

    assert extension.take() == [status_query("a:o-1:1")]
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    assert client.senders == {}


def test_a_response_for_an_unknown_instance_is_completed_without_a_raise(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    message = response_message(agent_response())

    calls = listen(worker, extension, settlement, message)

    assert extension.take() == [status_query("a:o-1:1")]
    assert calls == [SettlementCall("complete", str(message.lock_token))]


def test_a_raise_refused_as_gone_is_retried_once_and_then_dropped_by_the_status_check(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    deps, client = app
    instance = waiting_instance(extension)
    # The instance finishes between the status query and the raise: the extension answers 410 Gone.
    extension.fail_next("raise", Fault(410))
    message = response_message(agent_response())

    first = listen(worker, extension, settlement, message)
    [copy] = client.senders[deps.settings.queues.AGENT_RESPONSES_QUEUE].sent
    instance.runtime_status = "Completed"
    second = listen(worker, extension, settlement, as_delivered(copy, delivery_count=1))

    # The SDK raises for a 410; the listener retries it as the next delivery, which finds it finished.
    assert [request.method for request in extension.take()] == ["GET", "POST", "GET"]
    assert first == [SettlementCall("complete", str(message.lock_token))]
    assert copy.scheduled_enqueue_time_utc == NOW + timedelta(seconds=1)
    assert copy.application_properties is not None
    assert copy.application_properties[DELIVERY_COUNT_PROPERTY] == 2
    assert [call.verb for call in second] == ["complete"]
    assert len(client.senders[deps.settings.queues.AGENT_RESPONSES_QUEUE].sent) == 1
    assert instance.events == []


def test_a_raise_that_fails_with_a_server_error_is_redelivered_after_a_backoff(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    deps, client = app
    instance = waiting_instance(extension)
    extension.fail_next("raise", Fault(500, SERVER_ERROR))
    message = response_message(agent_response())

    calls = listen(worker, extension, settlement, message)

    assert [request_line(request)[:2] for request in extension.take()] == [
        ("GET", "/durabletask/instances/a:o-1:1"),
        ("POST", f"/durabletask/instances/a:o-1:1/raiseEvent/{FIRST_STEP}:response"),
    ]
    # The copy first, then the original completed: Service Bus has no delayed abandon.
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    [copy] = client.senders[deps.settings.queues.AGENT_RESPONSES_QUEUE].sent
    assert re.fullmatch(
        rf"{re.escape(message.message_id)}:redelivery:2:[0-9a-f]{{16}}", copy.message_id or ""
    )
    assert copy.scheduled_enqueue_time_utc == NOW + timedelta(seconds=1)
    assert b"".join(copy.body) == message.body
    assert instance.events == []


def test_a_status_query_that_fails_with_a_server_error_is_redelivered_not_dropped(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    deps, client = app
    instance = waiting_instance(extension)
    # The extension could not read the instance (its storage is unreachable): a 500 with its error
    # document, which the SDK's get_status returns as a status without a runtime status.
    extension.fail_next("status", Fault(500, SERVER_ERROR))
    message = response_message(agent_response())

    calls = listen(worker, extension, settlement, message)

    assert extension.take() == [status_query("a:o-1:1")]
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    [copy] = client.senders[deps.settings.queues.AGENT_RESPONSES_QUEUE].sent
    assert copy.scheduled_enqueue_time_utc == NOW + timedelta(seconds=1)
    assert instance.events == []


def test_the_raised_response_wins_the_race_in_the_form_the_extension_hands_the_orchestrator(
    worker: FunctionsWorker,
    extension: DurableExtension,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
) -> None:
    instance = waiting_instance(extension)
    listen(worker, extension, settlement, response_message(agent_response()))
    [(event, stored)] = instance.events
    # The extension stores the parsed body as the event's Input (Json.NET, unindented): for the client's
    # twice-encoded body that is a JSON string holding the response's JSON, so the orchestrator's SDK
    # decodes the event to that string, not to an object.
    assert isinstance(stored, str)
    answered = waiting_on_first_step().episode(at(5)).event_raised(event, stored)

    result = episode(worker, answered)

    [[_, wait, following]] = result["actions"]
    assert wait == race(RESERVE, DEADLINE_1, canceled=True)
    assert following == start_step(
        CHARGE, completed={"step": RESERVE, "result": {"reservationId": "r-1"}, "calls": 1}
    )


# --- the supervisor's history purge ----------------------------------------------------------------------


def test_the_supervisor_purges_the_history_of_instances_that_ended_before_the_retention_period(
    worker: FunctionsWorker,
    extension: DurableExtension,
    app: tuple[HostDeps, RecordingServiceBusClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps, _ = app
    monkeypatch.setattr(supervisor_blueprint, "dependencies", lambda: deps)
    monkeypatch.setattr(supervisor_blueprint, "app_settings", lambda: deps.settings)
    retention = timedelta(seconds=deps.settings.supervisor.COMPENSATION_LOG_RETENTION_S)
    old = (START - retention - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    young = (START - retention + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for instance_id, runtime_status, created in [
        ("a:o-1:1", "Completed", old),
        ("a:o-2:1", "Failed", old),
        ("a:o-3:1", "Running", old),
        ("a:o-4:1", "Completed", young),
    ]:
        extension.instances[instance_id] = Instance(
            name=ORDER_WORKFLOW, runtime_status=runtime_status, created_time=created
        )
    every = timedelta(seconds=LocalSettings.load({}).SUPERVISOR_INTERVAL_S)

    response = worker.invoke(
        "supervisor", {"timer": timer_trigger(START - every, every=every), "client": client_data(extension)}
    )

    assert failure(response) is None
    [purge] = extension.take()
    assert (purge.method, purge.path) == ("DELETE", "/durabletask/instances/")
    assert purge.query["createdTimeTo"] == (START - retention).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert purge.query["runtimeStatus"] == "Completed,Failed,Terminated"
    assert set(extension.instances) == {"a:o-3:1", "a:o-4:1"}

"""The Service Bus triggers as the worker runs them: SDK-type binding data in, settlement calls out.

Each invocation carries the ``model_binding_data`` the Functions host sends for a
``ServiceBusReceivedMessage`` parameter (``tests.servicebus_wire``); the worker decodes it with
``azurefunctions-extensions-bindings-servicebus`` and hands the trigger the extension's
``ServiceBusMessageActions``, whose settlements reach the loopback Settlement server. What is asserted
is what the host would receive: the exact settlement calls, and the copies scheduled on Service Bus.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from function_host.blueprints import agents as agents_blueprint
from function_host.blueprints import intake as intake_blueprint
from function_host.blueprints import orchestrators as orchestrators_blueprint
from orderflow.clock import SystemClock
from orderflow.errors import NotFound, TransientError
from orderflow.messages import AgentRequest, AgentResponse, parse_message
from orderflow.queues.servicebus import DELIVERY_COUNT_PROPERTY, ORIGINAL_MESSAGE_ID_PROPERTY, copy_identity
from orderflow.records import ProcessState
from orderflow.workflows import CURRENT_WORKFLOW
from tests.host_deps import HostDeps
from tests.servicebus_wire import BINDING_CONTENT_TYPE, BINDING_SOURCE, HostMessage
from tests.unit.fakes import order_body
from tests.worker.appdeps import (
    NOW,
    UNUSED_DURABLE_CLIENT,
    RecordingServiceBusClient,
    RemoteServices,
    app_dependencies,
    remote_service,
    serve,
)
from tests.worker.rpc import protos
from tests.worker.settlement import SettlementCall, SettlementServer
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

FIRST_STEP = CURRENT_WORKFLOW.steps[0]


@pytest.fixture
def remote() -> Iterator[RemoteServices]:
    yield from serve()


@pytest.fixture
def app(
    monkeypatch: pytest.MonkeyPatch, settlement: SettlementServer, remote: RemoteServices
) -> Iterator[tuple[HostDeps, RecordingServiceBusClient]]:
    """The triggers' dependencies as ``function_host.wiring`` would wire them on Azure, in memory; the
    submission records orders and claims none (its claim: ``test_submission_trigger``)."""
    deps, redelivery, client = app_dependencies(CLAIM_ON_SUBMIT="false")
    for module in (intake_blueprint, agents_blueprint, orchestrators_blueprint):
        monkeypatch.setattr(module, "dependencies", lambda: deps)
        monkeypatch.setattr(module, "app_settings", lambda: deps.settings)
    for module in (intake_blueprint, orchestrators_blueprint):  # agents never retry (NoRetry)
        monkeypatch.setattr(module, "redelivery", lambda: redelivery)
    monkeypatch.setattr(agents_blueprint, "_service", lambda name: remote_service(name, remote.url))
    agents_blueprint._taken.cache_clear()
    settlement.service.take()
    yield deps, client
    agents_blueprint._taken.cache_clear()


def binding(message: HostMessage) -> Any:
    """The trigger's ``TypedData``, as the host sends it."""
    return protos.TypedData(
        model_binding_data=protos.ModelBindingData(
            version="1.0", source=BINDING_SOURCE, content_type=BINDING_CONTENT_TYPE, content=message.content()
        )
    )


def metadata(message: HostMessage) -> dict[str, Any]:
    """Some of the trigger metadata the host sends beside the binding data."""
    return {
        "MessageId": protos.TypedData(string=message.message_id),
        "DeliveryCount": protos.TypedData(json=str(message.delivery_count)),
        "LockToken": protos.TypedData(string=str(message.lock_token)),
    }


def deliver(
    worker: FunctionsWorker, function: str, message: HostMessage, settlement: SettlementServer
) -> list[SettlementCall]:
    """Invoke ``function`` with ``message`` (and a submission's durable client binding); the settlements
    the host received."""
    inputs: dict[str, Any] = {"message": binding(message)}
    if function.startswith("submission_"):
        inputs["client"] = protos.TypedData(string=UNUSED_DURABLE_CLIENT)
    response = worker.invoke(function, inputs, trigger_metadata=metadata(message))
    assert failure(response) is None
    return settlement.service.take()


def as_delivered(copy: Any, *, delivery_count: int = 1) -> HostMessage:
    """A scheduled copy as the host would receive it when it comes due."""
    properties = copy.application_properties or {}
    return HostMessage(
        body=b"".join(copy.body),
        message_id=copy.message_id,
        delivery_count=delivery_count,
        correlation_id=copy.correlation_id,
        reply_to=copy.reply_to,
        application_properties={
            key.encode() if isinstance(key, str) else key: value for key, value in properties.items()
        },
    )


# --- submission ------------------------------------------------------------------------------------------


def test_a_valid_order_is_recorded_and_completed(
    worker: FunctionsWorker, settlement: SettlementServer, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, _ = app
    message = HostMessage(
        order_body("a:o-1", reply_to="client-a").encode(), message_id="a:o-1", reply_to="client-a"
    )

    calls = deliver(worker, "submission_a", message, settlement)

    assert calls == [SettlementCall("complete", str(message.lock_token))]
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.reply_to) == (ProcessState.PENDING, "client-a")
    assert deps.orders.get("a:o-1").order_id == "a:o-1"


def test_invalid_json_is_dead_lettered_with_its_reason(
    worker: FunctionsWorker, settlement: SettlementServer, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, client = app
    message = HostMessage(b'{"orderId": "a:o-1",', message_id="garbage")

    [call] = deliver(worker, "submission_a", message, settlement)

    assert (call.verb, call.lock_token, call.reason) == ("deadletter", str(message.lock_token), "InvalidJson")
    assert call.description
    assert client.senders == {}
    with pytest.raises(NotFound):
        deps.states.get("a:o-1")


def order_store_down(deps: HostDeps, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every order-store write fails as an unavailable Cosmos DB does."""

    def down(*args: object, **kwargs: object) -> None:
        raise TransientError("order store unavailable")

    monkeypatch.setattr(deps.orders, "create", down)


def test_a_transient_failure_is_redelivered_after_a_backoff_as_the_next_delivery(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps, client = app
    order_store_down(deps, monkeypatch)
    message = HostMessage(
        order_body("a:o-1", reply_to="client-a").encode(), message_id="a:o-1", reply_to="client-a"
    )

    calls = deliver(worker, "submission_a", message, settlement)

    # The copy first, then the original completed: never an immediate abandon.
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    [copy] = client.senders["orders-a"].sent
    assert re.fullmatch(r"a:o-1:redelivery:2:[0-9a-f]{16}", copy.message_id or "")
    assert copy.scheduled_enqueue_time_utc == NOW + timedelta(seconds=1)
    assert (copy.reply_to, b"".join(copy.body)) == ("client-a", message.body)
    assert copy.application_properties == {DELIVERY_COUNT_PROPERTY: 2, ORIGINAL_MESSAGE_ID_PROPERTY: "a:o-1"}


def test_redeliveries_back_off_and_end_in_a_dead_letter_at_the_delivery_limit(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps, client = app
    order_store_down(deps, monkeypatch)
    message = HostMessage(order_body("a:o-1").encode(), message_id="a:o-1")
    sent = client.get_queue_sender("orders-a").sent
    delays: list[float] = []
    for _ in range(deps.settings.consumers.MAX_DELIVERY_COUNT - 1):
        assert [call.verb for call in deliver(worker, "submission_a", message, settlement)] == ["complete"]
        scheduled = sent[-1].scheduled_enqueue_time_utc
        assert scheduled is not None
        delays.append((scheduled - NOW).total_seconds())
        message = as_delivered(sent[-1])

    [last] = deliver(worker, "submission_a", message, settlement)

    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert [(copy.message_id or "").rsplit(":", 1)[0] for copy in sent] == [
        f"a:o-1:redelivery:{n}" for n in range(2, 11)
    ]
    assert len({copy.message_id for copy in sent}) == 9
    assert (last.verb, last.reason) == ("deadletter", "MaxDeliveryCountExceeded")
    assert last.description == "TransientError: [transient] order store unavailable"


# --- agents ----------------------------------------------------------------------------------------------


def agent_request(deps: HostDeps, *, seconds_left: float = 20.0, max_calls: int = 4) -> AgentRequest:
    return AgentRequest(
        request_id=f"a:o-1:1:{FIRST_STEP.name}",
        order_id="a:o-1",
        instance_id="a:o-1:1",
        step=FIRST_STEP.name,
        operation=FIRST_STEP.operation,
        idempotency_key=f"a:o-1:{FIRST_STEP.name}",
        deadline=SystemClock().now() + timedelta(seconds=seconds_left),
        reply_to=deps.settings.queues.response_queue(),
        payload={"items": [{"sku": "10", "quantity": 5}]},
        max_calls=max_calls,
    )


def responses(deps: HostDeps) -> list[AgentResponse]:
    received = deps.queues.queue(deps.settings.queues.response_queue()).receive(max_messages=32, lock_s=30)
    return [parse_message(AgentResponse, message.body) for message in received]


def test_an_agent_retries_a_transient_fault_with_backoff_within_its_reservation(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    remote: RemoteServices,
) -> None:
    deps, client = app
    remote.script.failures = 2
    request = agent_request(deps)
    message = HostMessage(request.to_json().encode(), message_id=request.request_id, correlation_id="a:o-1")

    calls = deliver(worker, f"agent_{FIRST_STEP.agent}", message, settlement)

    assert calls == [SettlementCall("complete", str(message.lock_token))]
    assert [(path, key) for path, key, _ in remote.script.requests] == [
        ("/inventory/reservations", f"a:o-1:{FIRST_STEP.name}")
    ] * 3
    [response] = responses(deps)
    assert (response.outcome.value, response.calls, response.result) == (
        "succeeded",
        3,
        {"reservationId": "r-1"},
    )
    assert client.senders == {}
    # AGENT_BACKOFF_INITIAL_S is 0.05 here: each retry waited at least that long after the failure.
    arrived = remote.script.arrived
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrived)]
    assert len(gaps) == 2
    assert min(gaps) >= 0.045


def test_an_agent_spends_no_more_than_its_reservation_on_a_service_that_stays_down(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    remote: RemoteServices,
) -> None:
    deps, _ = app
    remote.script.failures = 100
    request = agent_request(deps, max_calls=3)
    message = HostMessage(request.to_json().encode(), message_id=request.request_id)

    calls = deliver(worker, f"agent_{FIRST_STEP.agent}", message, settlement)

    assert [call.verb for call in calls] == ["complete"]
    assert len(remote.script.requests) == 3
    [response] = responses(deps)
    assert (response.outcome.value, response.error_kind, response.calls) == ("failed", "budget_exhausted", 3)


def test_an_agent_whose_response_cannot_be_sent_completes_its_request_and_leaves_the_step_to_its_timer(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    remote: RemoteServices,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps, client = app
    request = agent_request(deps)
    message = HostMessage(request.to_json().encode(), message_id=f"{request.request_id}:request")
    responses_queue = deps.queues.queue(deps.settings.queues.response_queue())

    def unreachable(*args: object, **kwargs: object) -> None:
        raise TransientError("agent-responses unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(responses_queue, "send", unreachable)
        calls = deliver(worker, f"agent_{FIRST_STEP.agent}", message, settlement)

    # Neither a copy nor an abandon: the broker would redeliver it as a first delivery, which calls again.
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    assert client.senders == {}
    assert len(remote.script.requests) == 1
    assert responses(deps) == []


def test_an_agent_request_the_broker_redelivers_makes_its_calls_within_the_reservation_once(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    remote: RemoteServices,
) -> None:
    # A copy made by an earlier orderflow version, or a lock lost mid-call: its count says redelivery.
    deps, _ = app
    request = agent_request(deps, max_calls=3)
    copy_id, identity = copy_identity(f"{request.request_id}:request", 2)
    message = HostMessage(
        request.to_json().encode(), message_id=copy_id, application_properties=dict(identity)
    )

    calls = deliver(worker, f"agent_{FIRST_STEP.agent}", message, settlement)

    assert [call.verb for call in calls] == ["complete"]
    assert remote.script.requests == []


@pytest.mark.parametrize("agent", ["courier", "inventory", "payment", "shipping"])
def test_every_agent_trigger_dead_letters_a_body_that_is_not_a_request(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    agent: str,
) -> None:
    message = HostMessage(json.dumps([1, 2, 3]).encode())

    [call] = deliver(worker, f"agent_{agent}", message, settlement)

    assert (call.verb, call.reason) == ("deadletter", "NotAnObject")


def test_the_response_listener_dead_letters_a_body_that_is_not_a_response(
    worker: FunctionsWorker, settlement: SettlementServer, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    client_binding = protos.TypedData(
        string=json.dumps(
            {
                "taskHubName": "orderflow",
                "creationUrls": {},
                "managementUrls": {},
                "baseUrl": "http://127.0.0.1:9/runtime/webhooks/durabletask",
                "requiredQueryStringParameters": "",
                "rpcBaseUrl": "http://127.0.0.1:9/durabletask/",
            }
        )
    )
    message = HostMessage(b"not json")

    response = worker.invoke(
        "response_listener",
        {"message": binding(message), "client": client_binding},
        trigger_metadata=metadata(message),
    )

    assert failure(response) is None
    [call] = settlement.service.take()
    assert (call.verb, call.reason) == ("deadletter", "InvalidJson")

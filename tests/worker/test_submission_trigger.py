"""The submission trigger with its durable client binding, as the worker runs it: a new order is recorded,
claimed, and its attempt's instance started through the Durable Functions extension's HTTP API
(:class:`tests.worker.durable_http.DurableExtension`) before the message is completed; a duplicate starts
nothing; a start the extension refuses leaves the claimed record to the supervisor."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from function_host.blueprints import intake as intake_blueprint
from orderflow.contracts import ORDER_WORKFLOW
from orderflow.records import ProcessState, StepStatus
from orderflow.workflows import CURRENT_WORKFLOW
from tests.host_deps import HostDeps
from tests.servicebus_wire import HostMessage
from tests.unit.fakes import order_body, received
from tests.worker.appdeps import app_dependencies
from tests.worker.durable_http import SERVER_ERROR, DurableExtension, Fault, HttpRequest
from tests.worker.rpc import protos
from tests.worker.settlement import SettlementCall, SettlementServer
from tests.worker.test_servicebus_triggers import binding, metadata
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

FIRST_STEP = CURRENT_WORKFLOW.steps[0]


@pytest.fixture
def deps(monkeypatch: pytest.MonkeyPatch, settlement: SettlementServer) -> Iterator[HostDeps]:
    """The intake trigger's dependencies as ``function_host.wiring`` would wire them on Azure, in memory."""
    wired, redelivery, _ = app_dependencies()
    monkeypatch.setattr(intake_blueprint, "dependencies", lambda: wired)
    monkeypatch.setattr(intake_blueprint, "app_settings", lambda: wired.settings)
    monkeypatch.setattr(intake_blueprint, "redelivery", lambda: redelivery)
    intake_blueprint._admission.cache_clear()
    settlement.service.take()
    yield wired
    intake_blueprint._admission.cache_clear()


def submit(
    worker: FunctionsWorker, extension: DurableExtension, settlement: SettlementServer, message: HostMessage
) -> list[SettlementCall]:
    """Invoke ``submission_a`` with ``message`` and the durable client binding; the host's settlements."""
    inputs: dict[str, Any] = {
        "message": binding(message),
        "client": protos.TypedData(string=extension.client_binding()),
    }
    response = worker.invoke("submission_a", inputs, trigger_metadata=metadata(message))
    assert failure(response) is None
    return settlement.service.take()


def order_message() -> HostMessage:
    return HostMessage(order_body("a:o-1").encode(), message_id="a:o-1", reply_to="client-a")


def starts(requests: list[HttpRequest]) -> list[str]:
    """The paths of the start requests among ``requests``."""
    return [r.path for r in requests if r.method == "POST" and "/orchestrators/" in r.path]


def test_a_new_order_is_claimed_and_its_instance_started_by_its_submission(
    worker: FunctionsWorker, extension: DurableExtension, settlement: SettlementServer, deps: HostDeps
) -> None:
    message = order_message()

    calls = submit(worker, extension, settlement, message)

    assert calls == [SettlementCall("complete", str(message.lock_token))]
    assert starts(extension.take()) == [f"/durabletask/orchestrators/{ORDER_WORKFLOW}/a:o-1:1"]
    assert extension.instances["a:o-1:1"].name == ORDER_WORKFLOW
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.locked_by, record.attempt) == (ProcessState.PROCESSING, "a:o-1:1", 1)
    assert record.steps[FIRST_STEP.name].status is StepStatus.RUNNING
    # The first step's request, answered on the deployment's one response queue.
    [sent] = received(deps.queues.queue(deps.settings.queues.agent_queue(FIRST_STEP.agent)))
    request = json.loads(sent.body)
    assert (request["instanceId"], request["replyTo"]) == (
        "a:o-1:1",
        deps.settings.queues.AGENT_RESPONSES_QUEUE,
    )
    # The client heard of its order first.
    [reply] = received(deps.queues.queue("client-a"))
    assert json.loads(reply.body)["status"] == "Received"


def test_a_duplicate_delivery_starts_nothing_more(
    worker: FunctionsWorker, extension: DurableExtension, settlement: SettlementServer, deps: HostDeps
) -> None:
    submit(worker, extension, settlement, order_message())
    extension.take()
    before = deps.states.get("a:o-1")

    again = order_message()
    calls = submit(worker, extension, settlement, again)

    assert calls == [SettlementCall("complete", str(again.lock_token))]
    assert extension.take() == []  # not even a status query
    assert deps.states.get("a:o-1") == before


def test_a_start_the_extension_refuses_completes_the_message_and_leaves_the_claim_to_the_supervisor(
    worker: FunctionsWorker, extension: DurableExtension, settlement: SettlementServer, deps: HostDeps
) -> None:
    extension.fail_next("start", Fault(500, SERVER_ERROR))
    message = order_message()

    calls = submit(worker, extension, settlement, message)

    # The order is on record and claimed: the message is done with; the supervisor recovers the attempt
    # at its completeBy, as after a starter that died between its claim and its start.
    assert calls == [SettlementCall("complete", str(message.lock_token))]
    assert starts(extension.take()) == [f"/durabletask/orchestrators/{ORDER_WORKFLOW}/a:o-1:1"]
    assert "a:o-1:1" not in extension.instances
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.locked_by) == (ProcessState.PROCESSING, "a:o-1:1")
    assert record.complete_by is not None
    # No request was sent for an instance that does not exist.
    assert received(deps.queues.queue(deps.settings.queues.agent_queue(FIRST_STEP.agent))) == []

"""The Service Bus triggers as the worker runs them, traced: the host's trace context reaches the role.

The worker library builds the function's ``azure.functions.Context`` from the invocation's
``RpcTraceContext`` (the host's activity for the invocation, itself a child of the message's
``Diagnostic-Id``); the trigger hands its ``trace_parent`` to the role, whose span is its child. Spans
are recorded in this process (the worker runs here) with an in-memory exporter (``tests.spans``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from function_host.blueprints import agents as agents_blueprint
from function_host.blueprints import intake as intake_blueprint
from orderflow import tracing
from tests.host_deps import HostDeps
from tests.servicebus_wire import HostMessage
from tests.spans import recorded_spans
from tests.unit.fakes import order_body
from tests.worker.appdeps import (
    UNUSED_DURABLE_CLIENT,
    RecordingServiceBusClient,
    RemoteServices,
    app_dependencies,
    remote_service,
    serve,
)
from tests.worker.rpc import protos
from tests.worker.settlement import SettlementCall, SettlementServer
from tests.worker.test_servicebus_triggers import FIRST_STEP, agent_request, binding, metadata
from tests.worker.worker import FunctionsWorker, failure

pytestmark = pytest.mark.unit

HOST = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
"""The host's activity for the invocation."""

SENDER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
"""The span that sent the message, named in its body."""


@pytest.fixture
def remote() -> Iterator[RemoteServices]:
    yield from serve()


@pytest.fixture
def app(
    monkeypatch: pytest.MonkeyPatch, settlement: SettlementServer, remote: RemoteServices
) -> Iterator[tuple[HostDeps, RecordingServiceBusClient]]:
    deps, redelivery, client = app_dependencies(CLAIM_ON_SUBMIT="false")  # the submission's span alone
    for module in (intake_blueprint, agents_blueprint):
        monkeypatch.setattr(module, "dependencies", lambda: deps)
        monkeypatch.setattr(module, "app_settings", lambda: deps.settings)
    monkeypatch.setattr(intake_blueprint, "redelivery", lambda: redelivery)
    monkeypatch.setattr(agents_blueprint, "_service", lambda name: remote_service(name, remote.url))
    agents_blueprint._taken.cache_clear()
    settlement.service.take()
    yield deps, client
    agents_blueprint._taken.cache_clear()


def test_a_submission_invoked_with_a_trace_context_is_its_child_and_the_record_keeps_the_trace(
    worker: FunctionsWorker, settlement: SettlementServer, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, _ = app
    message = HostMessage(order_body("a:o-1").encode(), message_id="a:o-1", reply_to="client-a")

    with recorded_spans() as exporter:
        response = worker.invoke(
            "submission_a",
            {"message": binding(message), "client": protos.TypedData(string=UNUSED_DURABLE_CLIENT)},
            trigger_metadata=metadata(message),
            trace_parent=HOST,
        )

    assert failure(response) is None
    assert settlement.service.take() == [SettlementCall("complete", str(message.lock_token))]
    (span,) = exporter.get_finished_spans()
    assert span.name == tracing.SUBMISSION
    assert span.parent is not None
    assert tracing.format_traceparent(span.parent) == HOST
    assert (span.attributes or {})[tracing.ORDER_ID] == "a:o-1"
    assert deps.states.get("a:o-1").item.traceparent == tracing.format_traceparent(span.context)


def invoke_agent(worker: FunctionsWorker, deps: HostDeps, *, sender: str, host: str) -> None:
    request = agent_request(deps).model_copy(update={"traceparent": sender})
    message = HostMessage(request.to_json().encode(), message_id=request.request_id, correlation_id="a:o-1")
    response = worker.invoke(
        f"agent_{FIRST_STEP.agent}",
        {"message": binding(message)},
        trigger_metadata=metadata(message),
        trace_parent=host,
    )
    assert failure(response) is None


def test_an_agent_invoked_in_the_senders_trace_is_the_hosts_child_and_its_call_carries_its_own_span(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    app: tuple[HostDeps, RecordingServiceBusClient],
    remote: RemoteServices,
) -> None:
    deps, _ = app
    host = f"00-{SENDER[3:35]}-{HOST[36:52]}-01"  # the host continued the sender's trace (Diagnostic-Id)

    with recorded_spans() as exporter:
        invoke_agent(worker, deps, sender=SENDER, host=host)

    spans = {span.name: span for span in exporter.get_finished_spans()}
    agent = spans[tracing.AGENT]
    assert agent.parent is not None
    assert tracing.format_traceparent(agent.parent) == host
    assert list(agent.links) == []
    (call,) = [span for name, span in spans.items() if name.startswith("POST ")]
    assert call.parent is not None
    assert call.parent.span_id == agent.context.span_id
    assert remote.script.traceparents == [tracing.format_traceparent(call.context)]


def test_an_agent_invoked_in_another_trace_keeps_the_senders_and_links_the_hosts(
    worker: FunctionsWorker, settlement: SettlementServer, app: tuple[HostDeps, RecordingServiceBusClient]
) -> None:
    deps, _ = app

    with recorded_spans() as exporter:
        invoke_agent(worker, deps, sender=SENDER, host=HOST)

    (agent,) = [span for span in exporter.get_finished_spans() if span.name == tracing.AGENT]
    assert agent.parent is not None
    assert tracing.format_traceparent(agent.parent) == SENDER
    assert [tracing.format_traceparent(link.context) for link in agent.links] == [HOST]

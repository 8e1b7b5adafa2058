"""The trace context orderflow reads from messages, headers and the Functions host: parsed leniently,
never a reason to refuse a message, and a malformed one starts a new trace (hypothesis); spans off by
default; the parent an Azure trigger's ``context.trace_context`` gives."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from function_host.trace_context import trigger_traceparent
from intake.submission import IntakeOutcome, handle_intake_message
from orchestrators.starter import run_starter_pass
from orderflow import tracing
from orderflow.clock import FakeClock
from orderflow.messages import AgentResponse, SubmitOrder, parse_message
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.queues.servicebus import trace_properties
from orderflow.settings import Settings
from orderflow.stores.base import StateStore
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.spans import recorded_spans
from tests.unit.fakes import TEST_CLIENT, TEST_CLIENTS, RecordingClient, memory_deps, order_body, sweep_once
from tests.unit.test_df_replay import RESERVE, at, replay, response, waiting_on_first_step

pytestmark = pytest.mark.unit

PROPERTIES = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{SPAN_ID}-01"

HEX = "0123456789abcdef"

REPO = Path(__file__).resolve().parents[2]


def hex_text(size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=HEX, min_size=size, max_size=size)


version_00 = st.builds(
    lambda trace_id, span_id, flags: f"00-{trace_id}-{span_id}-{flags}",
    hex_text(32).filter(lambda t: set(t) != {"0"}),
    hex_text(16).filter(lambda s: set(s) != {"0"}),
    hex_text(2),
)
"""Every valid version-00 traceparent."""


def mangled(value: str) -> st.SearchStrategy[str]:
    """``value`` with one character replaced, inserted or removed: almost always malformed."""
    return st.integers(0, len(value)).flatmap(
        lambda i: st.one_of(
            st.characters().map(lambda c: value[:i] + c + value[i + 1 :]),
            st.characters().map(lambda c: value[:i] + c + value[i:]),
            st.just(value[:i] + value[i + 1 :]),
        )
    )


anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
    st.text(alphabet=HEX + "-", max_size=80),
    version_00,
    version_00.flatmap(mangled),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)
"""What a sender may put in a ``traceparent`` field: any JSON value, text close to a valid one."""


# --- the parser ---------------------------------------------------------------------------------------


@PROPERTIES
@given(version_00)
def test_a_valid_traceparent_is_read_exactly_and_written_back_the_same(value: str) -> None:
    context = tracing.parse_traceparent(value)

    assert context is not None
    assert (f"{context.trace_id:032x}", f"{context.span_id:016x}", context.is_remote) == (
        value[3:35],
        value[36:52],
        True,
    )
    assert tracing.format_traceparent(context) == value
    assert tracing.valid_traceparent(value) == value


@PROPERTIES
@given(anything)
def test_anything_else_is_none_or_a_valid_context_and_never_raises(value: Any) -> None:
    context = tracing.parse_traceparent(value)

    if context is not None:
        assert context.is_valid
        assert isinstance(value, str)
        assert tracing.valid_traceparent(value) == tracing.format_traceparent(context)


@pytest.mark.parametrize(
    "value",
    [
        "",
        VALID.upper(),
        f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid
        f"00-{'0' * 32}-{SPAN_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero span id
        f"00-{TRACE_ID}-{SPAN_ID}-01-extra",  # version 00 has exactly four fields
        f"00-{TRACE_ID}-{SPAN_ID}-01\n",
        f" {VALID}",
        f"00-{TRACE_ID[:-1]}-{SPAN_ID}-01",
        f"01-{TRACE_ID}-{SPAN_ID}-01-" + "x" * 500,  # longer than anything worth reading
        42,
        None,
    ],
)
def test_malformed_values_are_refused(value: object) -> None:
    assert tracing.parse_traceparent(value) is None


def test_a_later_version_is_read_without_its_extra_fields() -> None:
    assert tracing.valid_traceparent(f"01-{TRACE_ID}-{SPAN_ID}-01-future") == VALID


# --- in a message ----------------------------------------------------------------------------------------


def response_body(**changes: Any) -> str:
    body: dict[str, Any] = {
        "schemaVersion": 1,
        "requestId": "a:o-1:1:reserve_inventory",
        "eventId": "a:o-1:1:reserve_inventory:response",
        "eventName": "reserve_inventory:response",
        "orderId": "a:o-1",
        "instanceId": "a:o-1:1",
        "step": "reserve_inventory",
        "outcome": "succeeded",
        "completedAt": "2026-01-01T00:00:00.000000Z",
    }
    body.update(changes)
    return json.dumps(body)


@PROPERTIES
@given(anything)
def test_a_message_with_any_traceparent_parses_and_keeps_only_a_valid_one(value: Any) -> None:
    response = parse_message(AgentResponse, response_body(traceparent=value))

    assert response.traceparent == tracing.valid_traceparent(value)
    assert response.order_id == "a:o-1"
    again = parse_message(AgentResponse, response.to_json())
    assert again == response


def test_a_message_without_a_traceparent_is_sent_without_one() -> None:
    response = parse_message(AgentResponse, response_body())

    assert response.traceparent is None
    assert "traceparent" not in json.loads(response.to_json())
    assert "traceparent" not in response.model_dump(by_alias=True)


def test_the_trace_context_is_not_part_of_an_orders_content() -> None:
    plain = parse_message(SubmitOrder, order_body())
    traced = parse_message(SubmitOrder, order_body(traceparent=VALID))

    assert traced.traceparent == VALID
    assert traced.immutable_content() == plain.immutable_content()


def submit(body: str, clock: FakeClock, states: StateStore) -> IntakeOutcome:
    return handle_intake_message(
        body,
        client=TEST_CLIENT,
        orders=InMemoryOrderStore(),
        states=states,
        queues=InMemoryQueueFactory(),
        clock=clock,
        steps=Settings.load({}, CLIENTS=TEST_CLIENTS).steps,
        starter=Settings.load({}, CLIENTS=TEST_CLIENTS).starter,
        queue_names=Settings.load({}, CLIENTS=TEST_CLIENTS).queues,
    ).outcome


@PROPERTIES
@given(anything)
def test_a_malformed_or_absent_traceparent_starts_a_new_trace_and_the_order_is_recorded(value: Any) -> None:
    clock = FakeClock()
    states = InMemoryStateStore()
    body = order_body("a:o-1", traceparent=value) if value is not None else order_body("a:o-1")

    with recorded_spans() as exporter:
        outcome = submit(body, clock, states)

    assert outcome is IntakeOutcome.ACCEPTED
    record = states.get("a:o-1").item
    parent = tracing.parse_traceparent(value)
    if parent is not None and not parent.trace_flags.sampled:
        # The sender's "not sampled" is honoured (the SDK's parent-based sampler): no span is exported,
        # but the order stays in the sender's trace.
        assert exporter.get_finished_spans() == ()
        recorded = tracing.parse_traceparent(record.traceparent)
        assert recorded is not None
        assert recorded.trace_id == parent.trace_id
        return
    (span,) = exporter.get_finished_spans()
    assert span.name == tracing.SUBMISSION
    assert record.traceparent == tracing.format_traceparent(span.context)
    if parent is None:
        assert span.parent is None  # a new trace
    else:
        assert span.parent is not None
        assert tracing.format_traceparent(span.parent) == tracing.valid_traceparent(value)
        assert span.context.trace_id == span.parent.trace_id


# --- spans ---------------------------------------------------------------------------------------------


def test_off_by_default_a_span_records_and_propagates_nothing() -> None:
    assert not tracing.enabled()
    with tracing.span(tracing.AGENT, parent=VALID) as span:
        assert span is tracing.NOT_RECORDING
        assert tracing.current_traceparent() is None
        assert trace_properties() is None


def test_the_transport_parent_of_the_messages_trace_is_the_parent() -> None:
    host = f"00-{TRACE_ID}-{'b' * 16}-01"  # the host's span for the invocation, in the sender's trace

    with recorded_spans() as exporter, tracing.span(tracing.AGENT, parent=VALID, transport_parent=host):
        sent = trace_properties()
    (span,) = exporter.get_finished_spans()

    assert span.parent is not None
    assert tracing.format_traceparent(span.parent) == host
    assert list(span.links) == []
    assert sent == {
        "traceparent": tracing.format_traceparent(span.context),
        "Diagnostic-Id": tracing.format_traceparent(span.context),
    }


def test_a_transport_parent_of_another_trace_is_a_link_and_the_order_keeps_its_trace() -> None:
    host = f"00-{'a' * 32}-{'b' * 16}-01"

    with recorded_spans() as exporter, tracing.span(tracing.AGENT, parent=VALID, transport_parent=host):
        pass
    (span,) = exporter.get_finished_spans()

    assert span.parent is not None
    assert tracing.format_traceparent(span.parent) == VALID
    assert [tracing.format_traceparent(link.context) for link in span.links] == [host]


def test_a_transport_parent_alone_is_the_parent() -> None:
    host = f"00-{'a' * 32}-{'b' * 16}-01"

    with recorded_spans() as exporter, tracing.span(tracing.AGENT, parent=None, transport_parent=host):
        pass
    (span,) = exporter.get_finished_spans()

    assert span.parent is not None
    assert tracing.format_traceparent(span.parent) == host


def test_a_malformed_transport_parent_falls_back_to_the_messages() -> None:
    with recorded_spans() as exporter, tracing.span(tracing.AGENT, parent=VALID, transport_parent="garbage"):
        pass
    (span,) = exporter.get_finished_spans()

    assert span.parent is not None
    assert tracing.format_traceparent(span.parent) == VALID
    assert list(span.links) == []


def test_an_exception_is_recorded_on_the_span_and_raised() -> None:
    with recorded_spans() as exporter, pytest.raises(RuntimeError), tracing.span(tracing.CLAIM):
        raise RuntimeError("store down")
    (span,) = exporter.get_finished_spans()

    assert span.status.status_code.name == "ERROR"
    assert [event.name for event in span.events] == ["exception"]


def test_order_attributes_take_the_attempt_from_the_instance_id() -> None:
    assert tracing.order_attributes("a:o-1", "a:o-1:3", step="charge_payment", gone=None) == {
        tracing.ORDER_ID: "a:o-1",
        tracing.INSTANCE_ID: "a:o-1:3",
        tracing.ATTEMPT: 3,
        tracing.STEP: "charge_payment",
    }


def test_an_unknown_exporter_is_logged_and_traces_stay_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="orderflow.tracing"):
        assert tracing.configure_tracing("orderflow-test", exporter="jaeger") is False

    assert "OTEL_TRACES_EXPORTER='jaeger' is not console, otlp or none" in caplog.text
    assert not tracing.enabled()


def test_no_exporter_leaves_tracing_off() -> None:
    assert tracing.configure_tracing("orderflow-test", exporter="none") is False
    assert not tracing.enabled()


# --- the Functions host's trace context ------------------------------------------------------------------


def test_an_azure_triggers_trace_context_is_read_from_the_invocation_context() -> None:
    context = SimpleNamespace(trace_context=SimpleNamespace(trace_parent=VALID, trace_state=""))

    assert trigger_traceparent(context) == VALID  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "context",
    [
        None,
        SimpleNamespace(),
        SimpleNamespace(trace_context=None),
        SimpleNamespace(trace_context=SimpleNamespace(trace_parent="")),
        SimpleNamespace(trace_context=SimpleNamespace(trace_parent="00-xyz")),
    ],
)
def test_no_or_a_malformed_trace_context_gives_none(context: Any) -> None:
    assert trigger_traceparent(context) is None


# --- export --------------------------------------------------------------------------------------------


def test_the_console_exporter_writes_each_span_as_one_json_line_on_stderr() -> None:
    # A process of its own: the global tracer provider can be set only once per process.
    script = (
        "from orderflow import telemetry, tracing\n"
        "assert telemetry.configure_telemetry('orderflow-test') is False\n"
        "with tracing.span(tracing.CLAIM, attributes=tracing.order_attributes('a:o-1', 'a:o-1:2')):\n"
        "    print(tracing.current_traceparent())\n"
    )
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    env.pop("APPLICATIONINSIGHTS_CONNECTION_STRING", None)
    env.pop("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", None)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    (line,) = [line for line in done.stderr.splitlines() if line.startswith("{")]
    span = json.loads(line)
    traceparent = done.stdout.strip()
    assert (span["name"], span["attributes"]) == (
        tracing.CLAIM,
        {tracing.ORDER_ID: "a:o-1", tracing.INSTANCE_ID: "a:o-1:2", tracing.ATTEMPT: 2},
    )
    assert span["context"]["trace_id"] == "0x" + traceparent[3:35]
    assert span["resource"]["attributes"]["service.name"] == "orderflow-test"


# --- orchestrator replays ------------------------------------------------------------------------------


def test_replaying_the_orchestrator_opens_no_span() -> None:
    # Durable Functions' own executor replays the history: the first step started, its response raised.
    history = (
        waiting_on_first_step().episode(at(5)).event_raised("reserve_inventory:response", response(RESERVE))
    )

    with recorded_spans() as exporter:
        result = replay(history)

    assert [action["functionName"] for action in flat_actions(result) if "functionName" in action] == [
        "start_step",
        "start_step",
    ]
    assert exporter.get_finished_spans() == ()


def flat_actions(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every action of an orchestrator state, the compound ones (WhenAll, WhenAny) opened."""
    found: list[dict[str, Any]] = []

    def walk(action: Any) -> None:
        if isinstance(action, list):
            for inner in action:
                walk(inner)
        elif isinstance(action, dict):
            found.append(action)
            walk(action.get("compoundActions", []))

    walk(state["actions"])
    return found


# --- a recovered attempt --------------------------------------------------------------------------------


def test_a_recovered_attempt_is_a_child_of_the_submission_linked_to_the_attempt_before() -> None:
    clock = FakeClock()
    deps = memory_deps(clock)
    client = RecordingClient()

    def starter_pass() -> None:
        run_starter_pass(
            states=deps.states,
            client=client,
            clock=clock,
            starter=deps.settings.starter,
            steps=deps.settings.steps,
            scans=deps.settings.scans,
            queue_names=deps.settings.queues,
            response_queue=deps.settings.queues.response_queue(),
            capacity=10,
        )

    with recorded_spans() as exporter:
        submit(order_body("a:o-1"), clock, deps.states)
        starter_pass()
        clock.advance(
            deps.settings.starter.CLAIM_TIMEOUT_S + deps.settings.steps.STEP_TIMEOUT_S + 600
        )  # attempt 1 died
        sweep_once(deps, clock)
        clock.advance(3600)  # past the re-queue's backoff
        starter_pass()

    spans = exporter.get_finished_spans()
    (submission,) = [s for s in spans if s.name == tracing.SUBMISSION]
    first, second = [s for s in spans if s.name == tracing.CLAIM]
    (recovery,) = [s for s in spans if s.name == tracing.RECOVERY]
    assert client.started == ["a:o-1:1", "a:o-1:2"]
    assert {s.context.trace_id for s in spans} == {submission.context.trace_id}
    for span in (first, recovery, second):
        assert span.parent is not None
        assert span.parent.span_id == submission.context.span_id
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert [link.context.span_id for link in recovery.links] == [first.context.span_id]
    assert (recovery.attributes or {})[tracing.OUTCOME] == "requeued"
    history = deps.states.get("a:o-1").item.attempt_history
    assert [entry.traceparent for entry in history] == [
        tracing.format_traceparent(first.context),
        tracing.format_traceparent(second.context),
    ]

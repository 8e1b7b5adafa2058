"""Tracing end to end: an order's spans form one trace, submission to reply, over the real adapters.

The whole system runs in the test process (``tests.harness``): the devhost's loops, the durabletask
worker and its backend, the demo services over HTTP; ``deps`` runs each test on the in-memory adapters
and on the local emulators (cosmosdb-server, Azurite), so the trace context crosses real Storage queue
messages and a real state store. Spans are recorded with an in-memory exporter (``tests.spans``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

import devhost.durabletask_adapter
from devhost.emulators import LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from orchestrators.context import WorkflowContext
from orchestrators.workflow import order_workflow
from orderflow import tracing
from orderflow.attempts import ClaimOutcome
from orderflow.messages import AgentRequest, parse_message
from orderflow.records import ProcessState
from orderflow.workflows import workflow_for
from tests.harness import running_system
from tests.host_deps import HostDeps
from tests.spans import of_order, parent_of, recorded_spans

pytestmark = pytest.mark.integration

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attribute(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def test_an_order_is_one_trace_from_submission_to_reply_and_orders_never_share_one(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: Counter[str] = Counter()

    def counted(ctx: WorkflowContext, payload: dict[str, Any]) -> Generator[Any, Any, Any]:
        # Every execution of the orchestrator, replays included: the spans must not follow them.
        runs["replays" if ctx.is_replaying else "first runs"] += 1
        return (yield from order_workflow(ctx, payload))

    monkeypatch.setattr(devhost.durabletask_adapter, "order_workflow", counted)
    with recorded_spans() as exporter, running_system(deps) as system:
        ids = system.submit_all(["tpch-1", "tpch-3"])  # both in flight at once
        records = system.wait_settled(ids)
        audit = system.audit()
    spans = list(exporter.get_finished_spans())
    key, other = system.key("tpch-1"), system.key("tpch-3")
    record = records["tpch-1"]
    assert record.process_state is ProcessState.PROCESSED
    steps = [step.name for step in workflow_for(record.workflow_version).steps]

    mine = of_order(spans, key)
    (trace_id,) = {s.context.trace_id for s in mine if s.context is not None}
    (other_trace_id,) = {s.context.trace_id for s in of_order(spans, other) if s.context is not None}
    assert trace_id != other_trace_id
    # Every span of the trace names this order: nothing of the other order leaked into it.
    in_trace = [s for s in spans if s.context is not None and s.context.trace_id == trace_id]
    assert sorted(s.context.span_id for s in in_trace if s.context) == sorted(
        s.context.span_id for s in mine if s.context
    )

    (submission,) = named(mine, tracing.SUBMISSION)
    assert (submission.kind, submission.parent) == (SpanKind.CONSUMER, None)
    assert record.traceparent == tracing.format_traceparent(submission.context)
    # The submission's fast path and a starter's sweep may both try the new record: its ETag decides, and
    # the loser's span says it claimed nothing. Either way one claim won, under the submission.
    claims = named(mine, tracing.CLAIM)
    (claim,) = [c for c in claims if attribute(c, tracing.OUTCOME) != ClaimOutcome.NOT_CLAIMED]
    assert all(parent_of(c, mine) is submission for c in claims) and len(claims) <= 2
    assert record.attempt_history[0].traceparent == tracing.format_traceparent(claim.context)

    # One span per step the orchestration started, though the orchestrator ran (and was replayed) many
    # more times; the first step's request the starter sent, under the claim's span.
    starts = named(mine, tracing.ACTIVITY_PREFIX + "start_step")
    assert sorted(attribute(s, tracing.STEP) for s in starts) == sorted(steps[1:])
    assert all(parent_of(s, mine) is claim for s in starts)
    assert runs["replays"] > len(steps)

    agents = named(mine, tracing.AGENT)
    assert len(agents) == len(steps)
    assert all(parent_of(a, mine) in [claim, *starts] and a.kind is SpanKind.CONSUMER for a in agents)
    (first_agent,) = [a for a in agents if parent_of(a, mine) is claim]
    assert attribute(first_agent, tracing.STEP) == steps[0]
    calls = [s for s in mine if s.kind is SpanKind.CLIENT]
    assert len(calls) == len(steps)
    assert {parent_of(c, mine) for c in calls} == set(agents)
    assert all(200 <= attribute(c, "http.response.status_code") < 300 for c in calls)
    responses = named(mine, tracing.RESPONSE)
    assert len(responses) == len(steps)
    assert {parent_of(r, mine) for r in responses} == set(agents)
    assert {attribute(r, tracing.OUTCOME) for r in responses} == {"raised"}

    (finish,) = named(mine, tracing.ACTIVITY_PREFIX + "finish_order")
    assert parent_of(finish, mine) is claim
    (reply,) = named(mine, tracing.REPLY)
    assert (parent_of(reply, mine), reply.kind, attribute(reply, "orderflow.status")) == (
        finish,
        SpanKind.PRODUCER,
        "Processed",
    )
    for span in mine:
        if span is not submission:
            assert (attribute(span, tracing.INSTANCE_ID), attribute(span, tracing.ATTEMPT)) == (f"{key}:1", 1)

    # The W3C header reached the remote service: each call's own span is the parent it was told.
    for step in steps:
        (received,) = audit["keys"][f"{key}:{step}"]["received"]
        (call,) = [c for c in calls if attribute(parent_of(c, mine) or c, tracing.STEP) == step]
        assert received["traceparent"] == tracing.format_traceparent(call.context)


def test_the_trace_context_crosses_an_azurite_queue_message(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    queues = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
    queue = queues.queue(unique_name)
    request = AgentRequest(
        request_id="c:o-1:1:reserve_inventory",
        order_id="c:o-1",
        instance_id="c:o-1:1",
        step="reserve_inventory",
        operation="reserve",
        idempotency_key="c:o-1:reserve_inventory",
        deadline=datetime.now(UTC) + timedelta(minutes=1),
        reply_to="agent-responses",
        payload={},
        max_calls=1,
        traceparent=TRACEPARENT,
    )

    queue.send(request.to_json(), message_id=request.request_id)
    (received,) = queue.receive(max_messages=1, lock_s=30)
    queue.complete(received)

    assert parse_message(AgentRequest, received.body).traceparent == TRACEPARENT
    with (
        recorded_spans() as exporter,
        tracing.span(tracing.AGENT, parent=parse_message(AgentRequest, received.body).traceparent),
    ):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is not None
    assert tracing.format_traceparent(span.parent) == TRACEPARENT

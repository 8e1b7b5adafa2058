"""Telemetry bytes per order: an envelope's weight and values, which of a devhost's envelopes the worker on
Azure would send too, and an order's telemetry told by its trace; then the real Azure Monitor exporter
posting to the local ingestion endpoint."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from azure.monitor.opentelemetry.exporter import AzureMonitorLogExporter, AzureMonitorTraceExporter
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from bench.orderflow_runs.telemetry import (
    TRACK_PATH,
    Envelope,
    IngestionStub,
    bytes_by_kind,
    envelope_of,
    orders_telemetry,
    value_bytes,
    worker_side,
)

pytestmark = pytest.mark.unit

DEPENDENCY: dict[str, Any] = {
    "name": "Microsoft.ApplicationInsights.RemoteDependency",
    "iKey": "k",
    "tags": {"ai.operation.id": "t1", "ai.operation.parentId": "p1", "ai.cloud.role": "é"},
    "time": "2026-12-08T00:00:00Z",
    "data": {
        "baseData": {"ver": 2, "name": "ContainerProxy.replace_item", "id": "s1", "success": True},
        "baseType": "RemoteDependencyData",
    },
    "sampleRate": 100.0,
}


def test_an_envelope_weighs_its_json_and_its_values_without_their_names() -> None:
    # Values: "k" 1, the time 20, 100.0 5; tags "t1" 2, "p1" 2, "é" 2 bytes; baseData's name 27, "s1" 2
    # and True 4 (its version is a schema's, the envelope's name and type are the Type column).
    assert value_bytes(DEPENDENCY) == 1 + 20 + 5 + 2 + 2 + 2 + 27 + 2 + 4
    envelope = envelope_of(DEPENDENCY)
    compact = json.dumps(DEPENDENCY, separators=(",", ":"), ensure_ascii=False).encode()
    assert envelope == Envelope(
        "RemoteDependencyData", "ContainerProxy.replace_item", len(compact), 65, "t1", "s1", "p1"
    )
    properties = {**DEPENDENCY["data"]["baseData"], "properties": {"a": "b"}, "measurements": {}}
    with_properties = {**DEPENDENCY, "data": {**DEPENDENCY["data"], "baseData": properties}}
    assert value_bytes(with_properties) == 65 + len('{"a":"b"}')  # a dynamic column, names and all


def _span(
    name: str, span_id: str, parent: str = "", trace: str = "t", kind: str = "RemoteDependencyData"
) -> Envelope:
    return Envelope(kind, name, 100, 60, trace, span_id, parent)


def test_the_hosts_work_and_everything_under_it_is_left_out_whatever_order_it_came_in() -> None:
    envelopes = [
        _span("GET /devstoreaccount1/q/messages", "h1", parent="r1"),  # exported before its parent
        _span("QueueClient.receive_messages", "r1"),
        _span("orderflow.agent", "a1", kind="RequestData"),
        _span("POST /devstoreaccount1/q/messages", "h2", parent="s1"),
        _span("QueueClient.send_message", "s1", parent="a1"),
        _span("orchestration_event:charge_payment:response", "d1", parent="a1"),
        _span("activity:start_step", "d2", parent="d1", kind="RequestData"),
        _span("orderflow.activity.start_step", "o1", parent="d2"),
        Envelope("MessageData", "agent.done outcome=succeeded", 90, 50, "t", "", "a1"),
        Envelope("MetricData", "", 600, 300),
    ]
    # The receive and its HTTP call are the trigger's; durabletask's spans are the Durable extension's,
    # and so is what ran under them; the send stands for the worker's Service Bus send.
    assert worker_side(envelopes) == [False, False, True, True, True, False, False, False, True, False]


def test_a_parent_cycle_ends_the_walk_up() -> None:
    # Two spans each naming the other as parent (a corrupt export): neither is the host's, and the walk
    # stops where it has been.
    looped = [_span("orderflow.claim", "a", parent="b"), _span("ContainerProxy.read_item", "b", parent="a")]
    assert worker_side(looped) == [True, True]


def test_an_orders_telemetry_is_what_carries_the_trace_of_its_submission() -> None:
    ours = [
        _span("orderflow.submission", "x", trace="o1", kind="RequestData"),
        _span("orderflow.claim", "y", trace="o1"),
    ]
    idle = [
        _span("QueueClient.receive_messages", "z", trace="idle"),
        _span("ContainerProxy.query_items", "q", trace="timer"),
    ]
    assert orders_telemetry([*ours, *idle]) == ours
    assert orders_telemetry(idle) == []


def test_bytes_per_order_by_kind_and_name() -> None:
    envelopes = [
        Envelope("RequestData", "orderflow.agent", 1_000, 500, "t", "a"),
        Envelope("RemoteDependencyData", "PUT /dbs/x/colls/orderstate/docs/y", 1_200, 600, "t", "b", "a"),
        Envelope("MessageData", "step.start order_id=o", 900, 400, "t", "", "a"),
        Envelope("RemoteDependencyData", "QueueClient.delete_message", 800, 300, "t", "c", "a"),
        Envelope("MetricData", "", 600, 300),
    ]
    figures = bytes_by_kind(envelopes, 2)
    assert figures["items"] == {"MessageData": 0.5, "RemoteDependencyData": 0.5, "RequestData": 0.5}
    assert figures["bytes"] == {"MessageData": 450.0, "RemoteDependencyData": 600.0, "RequestData": 500.0}
    assert figures["value_bytes"] == {
        "MessageData": 200.0,
        "RemoteDependencyData": 300.0,
        "RequestData": 250.0,
    }
    assert figures["bytes_by_name"] == {
        "http: PUT": 600.0,
        "orderflow.agent": 500.0,
        "log: step.start": 450.0,
    }
    assert figures["total_bytes"] == 1_550.0
    assert figures["host_side"] == {"items": 0.5, "bytes": 400.0}
    with pytest.raises(ValueError, match="positive"):
        bytes_by_kind(envelopes, 0)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[IngestionStub]:
    # Neither Microsoft's statsbeat nor the exporter's own counts of what it sent, which it would post
    # on its own schedule, after the stub is gone.
    monkeypatch.setenv("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")
    monkeypatch.setenv("APPLICATIONINSIGHTS_SDKSTATS_DISABLED", "true")
    with IngestionStub() as running:
        yield running


def test_the_real_exporter_posts_spans_and_log_records_that_the_stub_weighs(stub: IngestionStub) -> None:
    options: dict[str, Any] = {"connection_string": stub.connection_string, "disable_offline_storage": True}
    tracer_provider = TracerProvider()
    trace_exporter = AzureMonitorTraceExporter(tracer_provider=tracer_provider, **options)
    tracer_provider.add_span_processor(SimpleSpanProcessor(trace_exporter))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(AzureMonitorLogExporter(**options)))
    handler = LoggingHandler(logger_provider=logger_provider)
    log = logging.getLogger("bench-telemetry-test")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with tracer_provider.get_tracer("t").start_as_current_span("orderflow.submission") as span:
            log.info("order.received order_id=o1")
            trace_id = format(span.get_span_context().trace_id, "032x")
    finally:
        log.removeHandler(handler)
        tracer_provider.shutdown()
        logger_provider.shutdown()
    received = [e for e in stub.envelopes() if e.base_type != "MetricData"]
    assert {(e.base_type, e.name, e.operation_id) for e in received} == {
        ("RemoteDependencyData", "orderflow.submission", trace_id),
        ("MessageData", "order.received order_id=o1", trace_id),
    }
    assert all(0 < e.value_bytes < e.size for e in received)
    assert orders_telemetry(received) == received


def test_the_stub_takes_gzip_and_plain_posts_to_the_track_path_and_refuses_any_other(
    stub: IngestionStub,
) -> None:
    base = stub.connection_string.split("IngestionEndpoint=", 1)[1].rstrip("/")
    body = json.dumps([DEPENDENCY]).encode()
    with httpx.Client(base_url=base) as client:
        plain = client.post(TRACK_PATH, content=body)
        zipped = client.post(TRACK_PATH, content=gzip.compress(body), headers={"Content-Encoding": "gzip"})
        other = client.post("/v2/track", content=body)
    assert (plain.status_code, zipped.status_code, other.status_code) == (200, 200, 404)
    assert plain.json() == {"itemsReceived": 1, "itemsAccepted": 1, "errors": []}
    assert other.json()["itemsReceived"] == 0
    assert stub.envelopes() == [envelope_of(DEPENDENCY), envelope_of(DEPENDENCY)]

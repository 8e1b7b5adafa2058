"""Operator telemetry: metrics derived from events and alerts, flattened log fields, and export setup.

Metrics are read back through the OpenTelemetry SDK's ``InMemoryMetricReader`` on a ``MeterProvider``
injected with :func:`orderflow.telemetry.use_meter_provider` (the global provider is never set here).
The Azure Monitor distro is never really configured: ``configure_azure_monitor`` is replaced by a fake
that records its calls, so nothing is sent anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from enum import StrEnum
from typing import Any

import azure.monitor.opentelemetry
import pytest
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from intake.submission import handle_intake_message
from orderflow import telemetry
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.telemetry import export as telemetry_export
from supervisor.sweep import run_sweep
from tests.unit.fakes import TEST_CLIENT, order_body

pytestmark = pytest.mark.unit

FAKE_CONNECTION_STRING = (
    "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=http://127.0.0.1:9/"
)

Point = tuple[dict[str, Any], float]


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """A fresh in-memory metric reader behind the telemetry module's instruments."""
    metric_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[metric_reader])
    telemetry.use_meter_provider(provider)
    try:
        yield metric_reader
    finally:
        telemetry.use_meter_provider(None)
        provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[Point]:
    """The data points of metric ``name`` of the ``orderflow`` meter: (attributes, value)."""
    data = reader.get_metrics_data()
    found: list[Point] = []
    if data is None:
        return found
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != telemetry.METER_NAME:
                continue
            for metric in scope_metrics.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    found.append((dict(point.attributes or {}), point.value))
    return found


def series(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    """The values of metric ``name`` by attribute set (attributes as sorted (key, value) pairs)."""
    return {tuple(sorted(attributes.items())): value for attributes, value in points(reader, name)}


def total(reader: InMemoryMetricReader, name: str) -> float:
    return sum(value for _, value in points(reader, name))


# --- counters ------------------------------------------------------------------------------------------


def test_each_recovery_event_adds_one_to_the_recoveries_counter(reader: InMemoryMetricReader) -> None:
    for n in range(5):
        telemetry.event(
            "recovery", order_id=f"o-{n}", instance_id=f"o-{n}:1", attempt=1, failure_count=1, step="charge"
        )
    assert total(reader, telemetry.RECOVERIES) == 5
    # One series: the order and instance ids are never metric attributes.
    assert points(reader, telemetry.RECOVERIES) == [({"step": "charge"}, 5)]


def test_budget_exhausted_events_are_counted_by_step(reader: InMemoryMetricReader) -> None:
    telemetry.event("budget.exhausted", order_id="a:o-1", instance_id="a:o-1:2", step="reserve")
    telemetry.event("budget.exhausted", order_id="a:o-2", instance_id="a:o-2:1", step="reserve")
    telemetry.event("budget.exhausted", order_id="a:o-3", instance_id="a:o-3:1", step="charge")
    assert series(reader, telemetry.BUDGET_EXHAUSTED) == {(("step", "charge"),): 1, (("step", "reserve"),): 2}


def test_dead_letters_carry_the_queue_from_events_and_the_max_delivery_alert(
    reader: InMemoryMetricReader,
) -> None:
    telemetry.event("message.dead_lettered", queue="orders", reason="InvalidJson", message_id="m-1")
    telemetry.event("message.dead_lettered", queue="orders", reason="InvalidJson", message_id="m-2")
    telemetry.alert("max_delivery_count", queue="agent-payment", message_id="m-3")
    assert series(reader, telemetry.DEAD_LETTERS) == {
        (("queue", "agent-payment"), ("reason", telemetry.MAX_DELIVERY_COUNT_REASON)): 1,
        (("queue", "orders"), ("reason", "InvalidJson")): 2,
    }


def test_every_alert_counts_under_its_name(reader: InMemoryMetricReader) -> None:
    gave_up = {"attempt": 6, "step": "charge", "reason": "too_many_failures"}
    telemetry.alert("order_gave_up", order_id="a:o-1", instance_id="a:o-1:6", **gave_up)
    telemetry.alert("order_gave_up", order_id="a:o-2", instance_id="a:o-2:6", **gave_up)
    telemetry.alert("order_gave_up", order_id="a:o-5", step="charge", reason="retry_budget_exhausted")
    telemetry.alert("order_failed", order_id="a:o-3", instance_id="a:o-3:1", step="ship", code="no_carrier")
    telemetry.alert("conflicting_order", order_id="a:o-4")
    assert series(reader, telemetry.ALERTS) == {
        (("alert", "conflicting_order"),): 1,
        (("alert", "order_failed"),): 1,
        (("alert", "order_gave_up"),): 3,
    }
    assert series(reader, telemetry.GAVE_UP) == {
        (("reason", "retry_budget_exhausted"), ("step", "charge")): 1,
        (("reason", "too_many_failures"), ("step", "charge")): 2,
    }
    assert points(reader, telemetry.ORDERS_FAILED) == [({"step": "ship"}, 1)]


def test_a_missing_step_is_left_out_of_the_attributes(reader: InMemoryMetricReader) -> None:
    telemetry.alert("order_gave_up", order_id="a:o-1", step=None)
    assert points(reader, telemetry.GAVE_UP) == [({}, 1)]


def test_other_events_update_no_metric_but_are_still_counted_in_process(
    reader: InMemoryMetricReader,
) -> None:
    with telemetry.recording() as counted:
        telemetry.event("claim", order_id="a:o-1", instance_id="a:o-1:1", attempt=1)
        telemetry.event("step.start", order_id="a:o-1", instance_id="a:o-1:1", step="reserve")
        telemetry.alert("order_gave_up", order_id="a:o-1")
    telemetry.event("claim", order_id="a:o-2", instance_id="a:o-2:1", attempt=1)  # after the scope
    assert counted == {"claim": 1, "step.start": 1, "alert.order_gave_up": 1}
    assert total(reader, telemetry.RECOVERIES) == 0
    assert total(reader, telemetry.DEAD_LETTERS) == 0


# --- stuck orders gauge --------------------------------------------------------------------------------


def test_record_stuck_orders_sets_the_gauge_to_the_last_value(reader: InMemoryMetricReader) -> None:
    assert points(reader, telemetry.STUCK_ORDERS) == []  # nothing reported before a sweep
    telemetry.record_stuck_orders(7)
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 7)]
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 7)]  # reported at every collection
    telemetry.record_stuck_orders(0)
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 0)]


def test_a_stale_stuck_orders_value_stops_being_reported(
    reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(telemetry, "_monotonic", lambda: now[0])
    telemetry.record_stuck_orders(3)
    now[0] += telemetry.STUCK_ORDERS_STALE_S
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 3)]
    now[0] += 1
    assert points(reader, telemetry.STUCK_ORDERS) == []
    telemetry.record_stuck_orders(1)
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 1)]


def test_a_negative_stuck_orders_count_is_refused(reader: InMemoryMetricReader) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        telemetry.record_stuck_orders(-1)


def test_a_sweep_reports_the_expired_orders_it_found(reader: InMemoryMetricReader) -> None:
    clock = FakeClock()
    settings = Settings.load({}, CLAIM_TIMEOUT_S=30.0)
    states, orders, queues = InMemoryStateStore(), InMemoryOrderStore(), InMemoryQueueFactory()
    for order_id in ("a:o-1", "a:o-2", "a:o-3"):
        handle_intake_message(
            order_body(order_id),
            client=TEST_CLIENT,
            orders=orders,
            states=states,
            queues=queues,
            clock=clock,
            steps=settings.steps,
            starter=settings.starter,
            queue_names=settings.queues,
        )
        assert (
            claim(
                states,
                states.get(order_id),
                clock,
                settings.starter,
                settings.steps,
                host_id=settings.queues.HOST_ID,
            )
            is not None
        )
    clock.advance(31)  # every claim's completeBy passes

    report = run_sweep(
        states=states,
        queues=queues,
        clock=clock,
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
    )

    assert len(report.requeued) == 3
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 3)]
    assert total(reader, telemetry.RECOVERIES) == 3
    run_sweep(
        states=states,
        queues=queues,
        clock=clock,
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
    )  # nothing expired any more
    assert points(reader, telemetry.STUCK_ORDERS) == [({}, 0)]


# --- log records ---------------------------------------------------------------------------------------


class Outcome(StrEnum):
    CREATED = "created"


def test_an_event_record_carries_the_flattened_correlation_fields(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="orderflow.events"):
        telemetry.event(
            "claim", order_id="a:o-1", instance_id="a:o-1:2", attempt=2, outcome=Outcome.CREATED, step=None
        )
    (record,) = [r for r in caplog.records if r.name == "orderflow.events"]
    message = "claim order_id=a:o-1 instance_id=a:o-1:2 attempt=2 outcome=created step=None"
    assert record.getMessage() == message
    attributes = vars(record)
    assert attributes["event"] == "claim"
    assert "fields" not in attributes  # only flattened: a handler exports every attribute
    assert attributes["orderflow.order_id"] == "a:o-1"
    assert attributes["orderflow.instance_id"] == "a:o-1:2"
    assert attributes["orderflow.attempt"] == 2
    assert attributes["orderflow.outcome"] == "created" and type(attributes["orderflow.outcome"]) is str
    assert "orderflow.step" not in attributes  # None is left out


def test_an_alert_record_carries_the_flattened_fields_at_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="orderflow.alerts"):
        telemetry.alert("order_failed", order_id="a:o-9", instance_id="a:o-9:1", step="ship")
    (record,) = [r for r in caplog.records if r.name == "orderflow.alerts"]
    assert record.levelno == logging.ERROR
    assert vars(record)["event"] == "alert.order_failed"
    assert vars(record)["orderflow.order_id"] == "a:o-9"
    assert vars(record)["orderflow.step"] == "ship"


def test_exported_log_records_have_the_fields_as_individual_attributes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the distro's logging handler exports, configured as the Functions worker configures it on
    Azure (``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY``): no processor of orderflow's own."""
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(logger_provider=provider)
    orderflow_logger = logging.getLogger(telemetry.LOGGER_NAME)
    orderflow_logger.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="orderflow.events"):
            telemetry.event("recovery", order_id="a:o-1", instance_id="a:o-1:3", attempt=3, step=None)
    finally:
        orderflow_logger.removeHandler(handler)
        provider.shutdown()
    (exported,) = exporter.get_finished_logs()
    attributes = dict(exported.log_record.attributes or {})
    assert attributes["event"] == "recovery"
    assert attributes["orderflow.order_id"] == "a:o-1"
    assert attributes["orderflow.instance_id"] == "a:o-1:3"
    assert attributes["orderflow.attempt"] == 3
    assert "fields" not in attributes  # exported flattened, not as one nested value
    assert "orderflow.step" not in attributes


# --- configure_telemetry -------------------------------------------------------------------------------


class FakeConfigure:
    """Stands in for ``configure_azure_monitor``: records the keyword arguments of each call."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.error = error

    def __call__(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error


@pytest.fixture
def fake_configure(monkeypatch: pytest.MonkeyPatch) -> FakeConfigure:
    """A fake distro, a process that has not configured telemetry yet, and no telemetry settings."""
    fake = FakeConfigure()
    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", fake)
    monkeypatch.setattr(telemetry_export, "_configured", False)
    monkeypatch.delenv(telemetry.CONNECTION_STRING_ENV, raising=False)
    monkeypatch.delenv(telemetry.FUNCTIONS_WORKER_TELEMETRY_ENV, raising=False)
    return fake


def test_configure_without_a_connection_string_does_nothing(fake_configure: FakeConfigure) -> None:
    assert telemetry.configure_telemetry("orderflow-test") is False
    assert telemetry.configure_telemetry("orderflow-test", "") is False
    assert fake_configure.calls == []
    assert telemetry_export._configured is False


def test_configure_with_a_connection_string_configures_the_distro_once(fake_configure: FakeConfigure) -> None:
    assert telemetry.configure_telemetry("orderflow-test", FAKE_CONNECTION_STRING) is True
    assert telemetry.configure_telemetry("orderflow-test", FAKE_CONNECTION_STRING) is True
    assert telemetry.configure_telemetry("orderflow-other") is True
    (call,) = fake_configure.calls
    assert call["connection_string"] == FAKE_CONNECTION_STRING
    assert call["logger_name"] == "orderflow"
    assert call["resource"].attributes["service.name"] == "orderflow-test"
    # Nothing the Functions worker's own configuration of the distro (on Azure) would lack.
    assert set(call) == {"connection_string", "logger_name", "resource"}


def test_configure_reads_the_connection_string_from_the_environment(
    fake_configure: FakeConfigure, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CONNECTION_STRING_ENV, FAKE_CONNECTION_STRING)
    assert telemetry.configure_telemetry("orderflow-devhost") is True
    (call,) = fake_configure.calls
    assert call["connection_string"] == FAKE_CONNECTION_STRING


def test_configure_leaves_a_functions_worker_configured_distro_alone(
    fake_configure: FakeConfigure, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.FUNCTIONS_WORKER_TELEMETRY_ENV, "true")
    monkeypatch.setenv(telemetry.CONNECTION_STRING_ENV, FAKE_CONNECTION_STRING)
    assert telemetry.configure_telemetry("orderflow-functions") is True
    assert fake_configure.calls == []


def test_a_refused_configuration_is_logged_and_may_be_retried(
    fake_configure: FakeConfigure, caplog: pytest.LogCaptureFixture
) -> None:
    fake_configure.error = ValueError("Invalid instrumentation key")
    with caplog.at_level(logging.ERROR, logger="orderflow.telemetry"):
        assert telemetry.configure_telemetry("orderflow-test", "InstrumentationKey=bad") is False
    assert "could not be configured" in caplog.text
    fake_configure.error = None
    assert telemetry.configure_telemetry("orderflow-test", FAKE_CONNECTION_STRING) is True
    assert len(fake_configure.calls) == 2

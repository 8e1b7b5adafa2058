"""The template and host.json are what the cost model prices (``bench/cost``, docs/deploy.md "The
configuration and why"): trace sampling, the alert rules' evaluation frequencies and series, always-ready
instances, the Durable task hub's partitions, the Service Bus triggers' receives and the host's log
levels. Each check runs on the real files and on a mutated copy that must fail it; the sampling test
shows that only traces are sampled, never orderflow's events, alerts or metrics.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from azure.monitor.opentelemetry._constants import (
    ENABLE_TRACE_BASED_SAMPLING_ARG,
    FIXED_PERCENTAGE_SAMPLER,
    SAMPLING_RATIO_ARG,
)
from azure.monitor.opentelemetry._utils.configurations import _get_configurations
from azure.monitor.opentelemetry.exporter import ApplicationInsightsSampler
from azure.monitor.opentelemetry.exporter.export.logs._processor import _AzureBatchLogRecordProcessor
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from bench.cost.inputs import (
    CHOSEN,
    FLEX_GROUPS,
    ORDER_PATH_GROUPS,
    READY_DURABLE,
    READY_PATH,
    always_ready_setting,
)
from function_host.blueprints.intake import submission_function_name
from orderflow import telemetry
from orderflow.clients import parse_clients
from tests.infra.bicep_model import Template
from tests.infra.test_app_against_infra import PARAMS, ROOT, _app, app_settings
from tests.infra.test_azd_template import ENV as AZD_ENV
from tests.infra.test_azd_template import deploy as azd_deploy

pytestmark = pytest.mark.unit

SAMPLER_SETTINGS = ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG")
FREQUENCY_MINUTES = {"PT5M": 5, "PT15M": 15}


def _deploy(infra: Path, **params: Any) -> Template:
    return Template(infra / "main.bicep", {**PARAMS, **params})


@pytest.fixture(scope="module")
def main() -> Template:
    return _deploy(ROOT / "infra")


# --- trace sampling -------------------------------------------------------------------------------


def sampler_env(template: Template) -> dict[str, str]:
    """The app settings the Azure Monitor distro (and the Functions host) read their sampler from."""
    settings = app_settings(template)
    missing = [name for name in SAMPLER_SETTINGS if name not in settings]
    assert not missing, f"the template does not set {missing}: traces are kept at the distro's default"
    return {name: str(settings[name]) for name in SAMPLER_SETTINGS}


def distro_configuration(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``configure_azure_monitor`` (called by the Functions worker with only a connection string and
    a logger name) makes of ``env``."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dict(_get_configurations(logger_name=telemetry.LOGGER_NAME))


def check_trace_sampling(template: Template) -> None:
    env = sampler_env(template)
    assert env["OTEL_TRACES_SAMPLER"] == FIXED_PERCENTAGE_SAMPLER, env
    assert float(env["OTEL_TRACES_SAMPLER_ARG"]) == CHOSEN.trace_sampling, env


def test_the_template_samples_traces_at_the_priced_share(
    main: Template, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_trace_sampling(main)
    configuration = distro_configuration(sampler_env(main), monkeypatch)
    assert configuration[SAMPLING_RATIO_ARG] == CHOSEN.trace_sampling
    # Log records are kept whatever their trace's sampling decision.
    assert configuration[ENABLE_TRACE_BASED_SAMPLING_ARG] is False


class LogExport:
    """An in-memory export of the ``orderflow`` loggers' records through the distro's log processor."""

    def __init__(self) -> None:
        self.exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
        self.providers: list[LoggerProvider] = []
        self.handlers: list[logging.Handler] = []

    def install(self, trace_based: bool) -> None:
        """Export through the processor the distro builds with ``enable_trace_based_sampling_for_logs``
        set to ``trace_based``."""
        provider = LoggerProvider()
        options = {ENABLE_TRACE_BASED_SAMPLING_ARG: trace_based}
        provider.add_log_record_processor(_AzureBatchLogRecordProcessor(self.exporter, options))
        handler = LoggingHandler(logger_provider=provider)
        logging.getLogger(telemetry.LOGGER_NAME).addHandler(handler)
        self.providers.append(provider)
        self.handlers.append(handler)

    def events(self) -> list[Any]:
        """The ``event`` attribute of every record exported so far."""
        for provider in self.providers:
            provider.force_flush()
        return [(r.log_record.attributes or {}).get("event") for r in self.exporter.get_finished_logs()]


@pytest.fixture
def exported_logs() -> Iterator[LogExport]:
    export = LogExport()
    root = logging.getLogger(telemetry.LOGGER_NAME)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield export
    finally:
        root.setLevel(level)
        for handler in export.handlers:
            root.removeHandler(handler)


@contextmanager
def unsampled_trace(ratio: float) -> Iterator[None]:
    """Inside a span the distro's sampler at ``ratio`` drops (the first of its traces it drops)."""
    tracer = TracerProvider(sampler=ApplicationInsightsSampler(sampling_ratio=ratio)).get_tracer("t")
    for _ in range(1000):
        with tracer.start_as_current_span("hop") as span:
            if not span.get_span_context().trace_flags.sampled:
                yield
                return
    raise AssertionError(f"no trace dropped in 1,000 at ratio {ratio}")


def _counted(reader: InMemoryMetricReader) -> dict[str, float]:
    metrics = reader.get_metrics_data()
    assert metrics is not None
    return {
        metric.name: sum(getattr(point, "value", 0) for point in metric.data.data_points)
        for resource in metrics.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_only_traces_are_sampled_never_events_alerts_or_metrics(
    main: Template, monkeypatch: pytest.MonkeyPatch, exported_logs: LogExport
) -> None:
    configuration = distro_configuration(sampler_env(main), monkeypatch)
    ratio = configuration[SAMPLING_RATIO_ARG]
    tracer = TracerProvider(sampler=ApplicationInsightsSampler(sampling_ratio=ratio)).get_tracer("t")
    kept = 0
    for _ in range(2000):
        with tracer.start_as_current_span("hop") as span:
            kept += int(span.get_span_context().trace_flags.sampled)
    assert kept / 2000 == pytest.approx(ratio, abs=0.03)

    exported_logs.install(configuration[ENABLE_TRACE_BASED_SAMPLING_ARG])
    reader = InMemoryMetricReader()
    telemetry.use_meter_provider(MeterProvider(metric_readers=[reader]))
    try:
        with unsampled_trace(ratio):
            telemetry.event("step.sent", order_id="demo:o-1", step="reserve_inventory")
            telemetry.alert("compensation_failed", order_id="demo:o-1")
        events = exported_logs.events()
        assert events == ["step.sent", "alert.compensation_failed"]
        assert _counted(reader).get(telemetry.ALERTS) == 1
    finally:
        telemetry.use_meter_provider(None)


def test_with_trace_based_log_sampling_the_events_of_a_dropped_trace_would_go(
    exported_logs: LogExport,
) -> None:
    exported_logs.install(True)
    with unsampled_trace(CHOSEN.trace_sampling):
        telemetry.event("step.sent", order_id="demo:o-1", step="reserve_inventory")
    assert exported_logs.events() == []


# --- alert rules ----------------------------------------------------------------------------------


def check_alert_rules(template: Template) -> None:
    log_rules = [
        r
        for r in template.all_resources()
        if r.type == "Microsoft.Insights/scheduledQueryRules" and not r.existing
    ]
    frequencies = Counter(FREQUENCY_MINUTES[r.properties["evaluationFrequency"]] for r in log_rules)
    assert frequencies == Counter({5: CHOSEN.log_alerts_5min, 15: CHOSEN.log_alerts_15min}), frequencies
    for rule in log_rules:
        window = FREQUENCY_MINUTES[rule.properties["windowSize"]]
        # Evaluated once per window: a rule evaluated less often than its window would miss data.
        assert FREQUENCY_MINUTES[rule.properties["evaluationFrequency"]] == window, rule.ref.name
    queues = {
        r.ref.name.rsplit("/", 1)[-1]
        for r in template.all_resources()
        if r.type == "Microsoft.ServiceBus/namespaces/queues"
    }
    series = 0
    for rule in template.all_resources():
        if rule.type != "Microsoft.Insights/metricAlerts":
            continue
        for criterion in rule.properties["criteria"]["allOf"]:
            (split,) = criterion["dimensions"]
            named = set(split["values"]) & queues
            series += len(named) if split["operator"] == "Include" else len(queues - named)
    assert series == CHOSEN.metric_alert_series, series


def test_the_alert_rules_are_the_ones_the_model_prices(main: Template) -> None:
    check_alert_rules(main)


# --- always ready ---------------------------------------------------------------------------------


def _function_names(template: Template) -> set[str]:
    """The app's functions the template's app registers: the blueprints' fixed names and each
    registered client's submission (``submission_<client>``)."""
    texts = [p.read_text() for p in (ROOT / "function_host" / "blueprints").glob("*.py")]
    fixed = {name for text in texts for name in re.findall(r'function_name\("(\w+)"\)', text)}
    clients = parse_clients(str(app_settings(template)["CLIENTS"]))
    return fixed | {submission_function_name(client) for client in clients}


def always_ready_of(template: Template) -> list[dict[str, Any]]:
    return list(_app(template).properties["functionAppConfig"]["scaleAndConcurrency"]["alwaysReady"])


def check_always_ready_is_off_by_default(template: Template) -> None:
    assert always_ready_of(template) == [], "always-ready instances bill all month: off unless asked"


def test_no_group_is_always_ready_unless_the_parameter_names_it(main: Template) -> None:
    check_always_ready_is_off_by_default(main)


@pytest.mark.parametrize("config", [READY_DURABLE, READY_PATH], ids=lambda c: c.name)
def test_the_priced_always_ready_rows_deploy_one_instance_per_group_they_name(config: Any) -> None:
    setting = always_ready_setting(config)
    template = _deploy(ROOT / "infra", alwaysReady=setting)
    ready = always_ready_of(template)
    assert ready == [{"name": name, "instanceCount": 1} for name in setting.split(",")]
    functions = _function_names(template)
    for entry in ready:
        group = entry["name"]
        assert group == "durable" or group.removeprefix("function:") in functions, group


@pytest.mark.parametrize(
    ("env", "ready"),
    [
        ({}, []),
        ({"ALWAYS_READY": "durable"}, [{"name": "durable", "instanceCount": 1}]),
        ({"ALWAYS_READY": " "}, []),
        (
            {"ALWAYS_READY": "durable, function:starter"},
            [{"name": "durable", "instanceCount": 1}, {"name": "function:starter", "instanceCount": 1}],
        ),
    ],
)
def test_azd_takes_the_always_ready_groups_from_the_environment(
    env: dict[str, str], ready: list[dict[str, Any]]
) -> None:
    assert always_ready_of(azd_deploy({**AZD_ENV, **env})) == ready


def test_every_group_of_the_model_has_its_flex_name() -> None:
    assert set(FLEX_GROUPS) >= ORDER_PATH_GROUPS | {"starter", "supervisor"}
    assert always_ready_setting(READY_DURABLE) == "durable"
    functions = _function_names(_deploy(ROOT / "infra"))
    assert {name.removeprefix("function:") for name in FLEX_GROUPS.values()} - {"durable"} <= functions


# --- host.json: the task hub and the Service Bus triggers -----------------------------------------


def check_host_json(root: Path) -> None:
    host = json.loads((root / "host.json").read_text())
    levels = host["logging"]["logLevel"]
    expected = "Information" if CHOSEN.host_info_logs else "Warning"
    assert levels["Function"] == levels["Host.Triggers.DurableTask"] == expected, levels
    extensions = host["extensions"]
    provider = extensions["durableTask"]["storageProvider"]
    assert provider.get("partitionCount", 4) == CHOSEN.control_queues, provider
    service_bus = extensions["serviceBus"]
    assert service_bus["maxConcurrentCalls"] == CHOSEN.sb_concurrent_calls, service_bus
    hours, minutes, seconds = service_bus["clientRetryOptions"]["tryTimeout"].split(":")
    try_timeout = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    assert try_timeout == CHOSEN.sb_try_timeout_s, service_bus


def test_host_json_has_the_priced_control_queues_and_service_bus_receives() -> None:
    check_host_json(ROOT)


# --- each check fails on a template that breaks it ------------------------------------------------

STUCK_ORDERS_RULE = (
    "found orders Processing past completeBy (orderflow.stuck_orders).'\n    severity: 2\n    enabled: true\n"
    "    scopes: [\n      appInsights.id\n    ]\n"
)

MUTATIONS: list[tuple[str, str, str, Callable[[Template], None]]] = [
    (
        "modules/functionapp.bicep",
        "        { name: 'OTEL_TRACES_SAMPLER', value: 'microsoft.fixed_percentage' }\n",
        "",
        check_trace_sampling,
    ),
    (
        "modules/functionapp.bicep",
        "{ name: 'OTEL_TRACES_SAMPLER_ARG', value: '0.1' }",
        "{ name: 'OTEL_TRACES_SAMPLER_ARG', value: '1.0' }",
        check_trace_sampling,
    ),
    (
        "modules/alerts.bicep",
        STUCK_ORDERS_RULE + "    evaluationFrequency: 'PT15M'",
        STUCK_ORDERS_RULE + "    evaluationFrequency: 'PT5M'",
        check_alert_rules,
    ),
    ("modules/alerts.bicep", "operator: 'Exclude'", "operator: 'Include'", check_alert_rules),
    (
        "modules/functionapp.bicep",
        "        alwaysReady: [for group in alwaysReadyGroups: {",
        "        alwaysReady: [for group in ['durable']: {",
        check_always_ready_is_off_by_default,
    ),
]


@pytest.mark.parametrize(
    ("file", "old", "new", "check"),
    MUTATIONS,
    ids=[f"{m[3].__name__}:{m[0]}:{i}" for i, m in enumerate(MUTATIONS)],
)
def test_a_mutated_template_fails_its_check(
    tmp_path: Path, file: str, old: str, new: str, check: Callable[[Template], None]
) -> None:
    infra = tmp_path / "infra"
    shutil.copytree(ROOT / "infra", infra)
    target = infra / file
    text = target.read_text()
    assert text.count(old) == 1, f"the mutation's text is not in {file} exactly once"
    target.write_text(text.replace(old, new))
    check(_deploy(ROOT / "infra"))  # the original passes
    with pytest.raises(AssertionError):
        check(_deploy(infra))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("logging", "logLevel", "Host.Triggers.DurableTask"), "Information"),
        (("extensions", "durableTask", "storageProvider", "partitionCount"), None),
        (("extensions", "serviceBus", "maxConcurrentCalls"), 16),
        (("extensions", "serviceBus", "clientRetryOptions", "tryTimeout"), "00:01:00"),
    ],
)
def test_a_mutated_host_json_fails_its_check(tmp_path: Path, path: tuple[str, ...], value: Any) -> None:
    host = json.loads((ROOT / "host.json").read_text())
    *parents, name = path
    section = host
    for parent in parents:
        section = section[parent]
    if value is None:
        del section[name]
    else:
        section[name] = value
    (tmp_path / "host.json").write_text(json.dumps(host))
    with pytest.raises(AssertionError):
        check_host_json(tmp_path)

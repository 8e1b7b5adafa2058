"""The Azure Functions app as the host sees it: binding metadata, host.json and the example settings.

``function_app`` is imported with the real azure-functions and azure-functions-durable packages, and
each function's ``get_function_json()`` (what the worker reports to the host when it indexes the app)
is checked against what the roles expect: names, triggers, queues, schedules, connections, settlement
mode, durable client bindings. Every ``%NAME%`` a binding or host.json refers to must be a setting the
app documents, with a value in ``local.settings.example.json``, so a renamed setting or a new agent
without a trigger fails here rather than at ``func start``. The example is the emulators' (``func
start`` against docker-compose.yml, docs/functions.md): it holds their published secrets only, and
Azure refuses it.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azurefunctions.extensions.bindings import servicebus

import function_app
from activities.table import ACTIVITIES as TABLE
from devhost.settings import LocalSettings
from function_host.azure_policy import check_azure
from orderflow.bindings import ServiceBindings
from orderflow.contracts import (
    BEGIN_COMPENSATION,
    FINISH_COMPENSATION,
    FINISH_ORDER,
    ORDER_WORKFLOW,
    RECORD_REVIEW,
    RECORD_STEP_FAILURE,
    START_STEP,
    START_UNDO,
)
from orderflow.queues.servicebus import DEFAULT_RETRY_TOTAL
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting
from orderflow.workflows import WORKFLOWS, agent_names

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SETTING_REFERENCE = re.compile(r"%([^%]+)%")

HOST_ONLY_KEYS = frozenset(
    {"FUNCTIONS_WORKER_RUNTIME", "AzureWebJobsStorage", "AzureWebJobsFeatureFlags", "TASK_HUB_NAME"}
)
"""Keys of the example ``Values`` that the Functions host reads and orderflow's Settings do not."""

LOCAL_HOST_KEYS = frozenset(LocalSettings.model_fields)
"""Keys of the example ``Values`` only the local host reads (:class:`devhost.settings.LocalSettings`)."""

CHANGED_FROM_DEFAULT = frozenset(
    {
        "COSMOS_ENDPOINT",
        "COSMOS_KEY",
        "COSMOS_VERIFY_TLS",
        "SERVICEBUS",
        "HOST_ID",
        "AGENT_RESPONSES_PER_HOST",
        "MAX_SUBMISSION_BACKLOG",
        "CLIENTS",
        "SERVICE_BINDINGS",
    }
)
"""Settings whose example value deliberately differs from the Settings default: the emulators'
connections, the single response queue of the Functions app (no host id, no response queue per host),
no backlog ceiling, because the Service Bus emulator's queue counts cannot be read (docs/functions.md),
one registered client, whose two queues the Service Bus emulator declares, and the demo services'
bindings (none by default)."""

COSMOS_EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)
SERVICE_BUS_EMULATOR = (
    "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
    "UseDevelopmentEmulator=true;"
)
"""The emulators' published development secrets, the only ones the example may hold."""

AGENTS = sorted(
    {step.agent for workflow in WORKFLOWS.values() for step in workflow.steps}
    | {
        step.fallback_agent
        for workflow in WORKFLOWS.values()
        for step in workflow.steps
        if step.fallback_agent
    }
)
"""Every agent a deployed workflow definition sends requests to, fallback providers included."""

SERVICE_BUS_QUEUES: dict[str, str] = {
    "submission_a": "orders-a",  # one per registered client (CLIENTS: tests/conftest.py), its inbound queue
    "response_listener": "%AGENT_RESPONSES_QUEUE%",
    **{f"agent_{agent}": f"%AGENT_QUEUE_PREFIX%{agent}" for agent in AGENTS},
}
"""Service Bus triggered function -> the queue name its binding must carry."""

TIMER_SCHEDULES = {"starter": "%STARTER_SCHEDULE%", "supervisor": "%SUPERVISOR_SCHEDULE%"}
ACTIVITIES = (
    START_STEP,
    FINISH_ORDER,
    RECORD_STEP_FAILURE,
    BEGIN_COMPENSATION,
    START_UNDO,
    FINISH_COMPENSATION,
    RECORD_REVIEW,
)
DURABLE_CLIENTS = frozenset({"submission_a", "starter", "response_listener", "supervisor"})
"""Functions with a durable client binding: the submission (of the one registered client) and the starter
start instances, the listener raises events on them, the supervisor's retention pass purges the history
of ended ones."""
HTTP_FUNCTIONS = {"operator_api": "operator/{*path}"}
"""HTTP triggered function -> its route (under the host's ``api`` prefix)."""


# --- helpers -----------------------------------------------------------------------------------------


def _index_app() -> dict[str, func.Function]:
    """The app's functions as the worker indexes them, by name.

    ``get_functions()`` remembers the names it has seen (to reject duplicates), so indexing the same app
    twice in one process fails; the worker indexes once per process, and so does each test module,
    starting from a clean record.
    """
    function_app.app.functions_bindings = None
    return {function.get_function_name(): function for function in function_app.app.get_functions()}


REGISTERED = _index_app()
FUNCTIONS = {name: json.loads(function.get_function_json()) for name, function in REGISTERED.items()}
"""Function name -> the function.json the worker reports for it."""


def _bindings(name: str, binding_type: str) -> list[dict[str, Any]]:
    return [binding for binding in FUNCTIONS[name]["bindings"] if binding["type"] == binding_type]


def _only_binding(name: str, binding_type: str) -> dict[str, Any]:
    [binding] = _bindings(name, binding_type)
    return binding


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _references(value: object) -> set[str]:
    return {name for text in _strings(value) for name in SETTING_REFERENCE.findall(text)}


def _resolve(text: str, values: Mapping[str, str]) -> str:
    return SETTING_REFERENCE.sub(lambda match: values[match.group(1)], text)


def _timespan(text: str) -> timedelta:
    """A host.json time span, ``[d.]hh:mm:ss[.fff]``."""
    match = re.fullmatch(r"(?:(\d+)\.)?(\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)", text)
    assert match, f"not a time span: {text!r}"
    days, hours, minutes, seconds = match.groups()
    return timedelta(days=int(days or 0), hours=int(hours), minutes=int(minutes), seconds=float(seconds))


def _iso_duration(text: str) -> timedelta:
    """An ISO 8601 duration of hours, minutes and seconds (``PT1H``, ``PT30S``), as the emulator takes."""
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", text)
    assert match and text != "PT", f"not an ISO 8601 time duration: {text!r}"
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def _load_json(relative: str) -> dict[str, Any]:
    data = json.loads((REPO / relative).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return _load_json("local.settings.example.json")


@pytest.fixture(scope="module")
def values(example: dict[str, Any]) -> dict[str, str]:
    found = example["Values"]
    assert isinstance(found, dict)
    return found


@pytest.fixture(scope="module")
def host() -> dict[str, Any]:
    return _load_json("host.json")


@pytest.fixture(scope="module")
def example_settings(values: dict[str, str]) -> Settings:
    """The settings the Functions app reads under ``func start`` with the example's Values."""
    return Settings.load(env=values)


# --- the functions and their bindings -----------------------------------------------------------------


def test_the_app_registers_exactly_the_role_functions() -> None:
    expected = {
        ORDER_WORKFLOW,
        *ACTIVITIES,
        "starter",
        "supervisor",
        *SERVICE_BUS_QUEUES,
        *HTTP_FUNCTIONS,
    }
    assert set(FUNCTIONS) == expected
    assert len(FUNCTIONS) == 17
    assert ACTIVITIES == (
        "start_step",
        "finish_order",
        "record_step_failure",
        "begin_compensation",
        "start_undo",
        "finish_compensation",
        "record_review",
    )
    assert ORDER_WORKFLOW == "order_workflow"


def test_every_function_has_exactly_one_trigger() -> None:
    for name, function_json in FUNCTIONS.items():
        triggers = [b for b in function_json["bindings"] if b["type"].endswith("Trigger")]
        assert len(triggers) == 1, name
        outputs = [b for b in function_json["bindings"] if b["direction"] != "IN"]
        # An HTTP trigger answers through its return value; nothing else writes an output binding.
        assert outputs == (
            [{"direction": "OUT", "type": "http", "name": "$return"}] if name in HTTP_FUNCTIONS else []
        )
        assert function_json["scriptFile"] == "function_app.py"


def test_the_orchestrator_binds_its_context() -> None:
    assert FUNCTIONS[ORDER_WORKFLOW]["bindings"] == [
        {"direction": "IN", "type": "orchestrationTrigger", "name": "context"}
    ]


@pytest.mark.parametrize("name", ACTIVITIES)
def test_activities_bind_their_payload(name: str) -> None:
    assert FUNCTIONS[name]["bindings"] == [{"direction": "IN", "type": "activityTrigger", "name": "payload"}]


@pytest.mark.parametrize(("name", "queue"), sorted(SERVICE_BUS_QUEUES.items()))
def test_service_bus_triggers_use_peek_lock_with_manual_settlement(name: str, queue: str) -> None:
    binding = _only_binding(name, "serviceBusTrigger")
    assert binding == {
        "direction": "IN",
        "type": "serviceBusTrigger",
        "name": "message",
        "connection": "SERVICEBUS",
        "queueName": queue,
        "autoCompleteMessages": False,
    }
    # One message per invocation (no "cardinality": "many"), no sessions: settle_trigger_message
    # settles exactly the message it was given.
    assert "cardinality" not in binding and "isSessionsEnabled" not in binding


@pytest.mark.parametrize("name", sorted(SERVICE_BUS_QUEUES))
def test_service_bus_triggers_take_the_sdk_message_and_its_actions(name: str) -> None:
    # The worker resolves parameter types with typing.get_type_hints; with the extension's types it
    # passes a ServiceBusReceivedMessage (not func.ServiceBusMessage) and the settlement client.
    hints = typing.get_type_hints(REGISTERED[name].get_user_function())
    assert hints["message"] is servicebus.ServiceBusReceivedMessage
    assert hints["message_actions"] is servicebus.ServiceBusMessageActions


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_of_every_workflow_has_a_trigger_on_its_request_queue(
    agent: str, example_settings: Settings, values: dict[str, str]
) -> None:
    listening = {
        _resolve(_only_binding(name, "serviceBusTrigger")["queueName"], values): name
        for name in SERVICE_BUS_QUEUES
    }
    assert listening.get(example_settings.queues.agent_queue(agent)) == f"agent_{agent}"


def test_no_agent_trigger_listens_for_an_agent_no_workflow_uses() -> None:
    agent_functions = {name.removeprefix("agent_") for name in FUNCTIONS if name.startswith("agent_")}
    assert (
        agent_functions
        == set(AGENTS)
        == set(agent_names())
        == {"inventory", "payment", "shipping", "courier"}
    )


def test_every_activity_of_the_roles_table_has_its_trigger_and_nothing_else_does() -> None:
    activity_functions = {
        name for name, f in FUNCTIONS.items() if any(b["type"] == "activityTrigger" for b in f["bindings"])
    }
    assert activity_functions == {activity.name for activity in TABLE} == set(ACTIVITIES)


def test_no_function_is_registered_through_globals() -> None:
    # A trigger is a function a reader can find by its name, not an entry written into a module's globals.
    sources = [REPO / "function_app.py", *sorted((REPO / "function_host").rglob("*.py"))]
    assert len(sources) > 10
    offending = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "globals()[" in line
    ]
    assert offending == []


@pytest.mark.parametrize(("name", "schedule"), sorted(TIMER_SCHEDULES.items()))
def test_timers_run_on_their_schedule_setting_and_not_on_startup(name: str, schedule: str) -> None:
    assert _only_binding(name, "timerTrigger") == {
        "direction": "IN",
        "type": "timerTrigger",
        "name": "timer",
        "schedule": schedule,
        "runOnStartup": False,
    }


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_durable_client_bindings_only_where_the_roles_start_signal_or_purge_instances(name: str) -> None:
    clients = _bindings(name, "durableClient")
    if name in DURABLE_CLIENTS:
        # No taskHub or connection override: the client talks to host.json's %TASK_HUB_NAME%.
        assert clients == [{"direction": "IN", "type": "durableClient", "name": "client"}]
    else:
        assert clients == []


def test_the_only_http_endpoint_is_the_operator_api_and_it_takes_a_bearer_token_not_a_key() -> None:
    # Function keys are shared secrets, not identities: the operator API checks an Entra bearer token
    # itself, so its trigger is anonymous; anything else HTTP would default to function keys.
    assert function_app.app.auth_level is func.AuthLevel.FUNCTION
    http = {name: b for name, f in FUNCTIONS.items() for b in f["bindings"] if b["type"] == "httpTrigger"}
    assert set(http) == set(HTTP_FUNCTIONS)
    assert http["operator_api"] == {
        "direction": "IN",
        "type": "httpTrigger",
        "name": "req",
        "methods": ["GET", "POST", "DELETE", "HEAD", "PATCH", "PUT", "OPTIONS"],
        "authLevel": "ANONYMOUS",
        "route": HTTP_FUNCTIONS["operator_api"],
    }


def test_every_binding_setting_is_a_documented_setting_with_an_example_value(values: dict[str, str]) -> None:
    referenced = _references([f["bindings"] for f in FUNCTIONS.values()])
    assert referenced == {
        "AGENT_RESPONSES_QUEUE",
        "AGENT_QUEUE_PREFIX",
        "STARTER_SCHEDULE",
        "SUPERVISOR_SCHEDULE",
    }
    assert referenced <= set(Settings.fields())
    assert referenced <= set(values)


def test_the_service_bus_connection_resolves_in_the_example(values: dict[str, str]) -> None:
    connections = {b["connection"] for f in FUNCTIONS.values() for b in f["bindings"] if "connection" in b}
    assert connections == {"SERVICEBUS"}
    # The host takes a non-blank SERVICEBUS as the connection string, before SERVICEBUS__*: the emulator.
    assert values["SERVICEBUS"] == SERVICE_BUS_EMULATOR
    assert values["SERVICEBUS__fullyQualifiedNamespace"] == ""
    assert values["SERVICEBUS__credential"] == values["SERVICEBUS__clientId"] == ""


# --- local.settings.example.json ------------------------------------------------------------------------


def test_example_has_every_setting_and_nothing_unknown(
    example: dict[str, Any], values: dict[str, str]
) -> None:
    assert example["IsEncrypted"] is False
    assert set(Settings.fields()) | LOCAL_HOST_KEYS <= set(values)
    assert set(values) - set(Settings.fields()) - LOCAL_HOST_KEYS == HOST_ONLY_KEYS
    assert LocalSettings.load(values) == LocalSettings.load({})  # the example leaves them at their defaults
    assert all(isinstance(value, str) for value in values.values())


def test_example_configures_the_python_worker_and_azurite(values: dict[str, str]) -> None:
    assert values["FUNCTIONS_WORKER_RUNTIME"] == "python"
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"
    assert values["AzureWebJobsFeatureFlags"] == "EnableWorkerIndexing"
    # Only the HTTP streaming extension needs init indexing; the Service Bus extension does not.
    assert "PYTHON_ENABLE_INIT_INDEXING" not in values


def test_example_task_hub_name_is_valid_for_the_azure_storage_provider(values: dict[str, str]) -> None:
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]{2,44}", values["TASK_HUB_NAME"])


def test_example_holds_only_the_emulators_published_secrets(values: dict[str, str]) -> None:
    assert values["COSMOS_KEY"] == COSMOS_EMULATOR_KEY
    assert values["SERVICEBUS"] == SERVICE_BUS_EMULATOR
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"  # Azurite's well-known account
    assert values["STORAGE_CONNECTION_STRING"] == ""  # the Functions app keeps no storage of its own
    for name, value in values.items():
        if name not in {"COSMOS_KEY", "SERVICEBUS"}:
            assert not re.search(r"(AccountKey|SharedAccessKey|AccessKey)=", value, re.IGNORECASE), name


def test_example_settings_are_the_emulators_and_validate_as_the_functions_app(
    example_settings: Settings,
) -> None:
    assert example_settings.queues.HOST_ID == ""
    # One shared response queue on Azure: agents answer where response_listener listens.
    assert (
        example_settings.queues.response_queue()
        == example_settings.queues.AGENT_RESPONSES_QUEUE
        == "agent-responses"
    )
    # The Cosmos DB emulator of docker-compose.yml: https (the SDK insists), its self-signed certificate.
    assert example_settings.connections.COSMOS_ENDPOINT == "https://localhost:8081/"
    assert example_settings.connections.COSMOS_VERIFY_TLS is False
    # The demo services on loopback, every step's operation bound, without tokens (a local Functions
    # host's credential cannot get the demo's: they run with --allow-anonymous); refused on Azure.
    assert example_settings.agents.binding_refusals(azure=False) == []
    bindings = ServiceBindings.parse(example_settings.agents.SERVICE_BINDINGS).services
    assert {binding.base_url for binding in bindings.values()} == {"http://127.0.0.1:8082"}
    assert {binding.auth.mode for binding in bindings.values()} == {"none"}
    assert (example_settings.steps.STEP_TIMEOUT_S, example_settings.consumers.QUEUE_LOCK_S) == (8.0, 30.0)
    assert example_settings.consumers.MAX_DELIVERY_COUNT == 10
    for schedule in (
        example_settings.starter.STARTER_SCHEDULE,
        example_settings.supervisor.SUPERVISOR_SCHEDULE,
    ):
        assert len(schedule.split()) == 6, "Functions timers take six-field NCRONTAB (with seconds)"


def test_the_example_is_refused_on_azure(example_settings: Settings) -> None:
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(example_settings)
    assert refused.value.setting == "COSMOS_ENDPOINT"  # the emulator, on loopback


def test_example_values_equal_the_defaults_except_where_deliberate(example_settings: Settings) -> None:
    defaults = Settings.load(env={})
    differing = {
        name for name in Settings.fields() if example_settings.values()[name] != defaults.values()[name]
    }
    assert differing == CHANGED_FROM_DEFAULT


# --- host.json --------------------------------------------------------------------------------------------


def test_host_json_uses_the_v4_extension_bundle(host: dict[str, Any]) -> None:
    assert host["version"] == "2.0"
    assert host["extensionBundle"] == {
        "id": "Microsoft.Azure.Functions.ExtensionBundle",
        "version": "[4.*, 5.0.0)",
    }


def test_host_json_names_the_task_hub_by_setting(host: dict[str, Any], values: dict[str, str]) -> None:
    assert host["extensions"]["durableTask"]["hubName"] == "%TASK_HUB_NAME%"
    assert _references(host) == {"TASK_HUB_NAME"}
    assert _references(host) <= set(values)
    # Durable queue polling must not back off past a step's deadline (the default backs off to 30 s).
    polling = _timespan(host["extensions"]["durableTask"]["storageProvider"]["maxQueuePollingInterval"])
    assert polling < timedelta(seconds=Settings.load({}).steps.STEP_TIMEOUT_S)


def test_host_json_service_bus_settles_manually_without_prefetch(host: dict[str, Any]) -> None:
    service_bus = host["extensions"]["serviceBus"]
    assert service_bus["autoCompleteMessages"] is False
    assert service_bus["prefetchCount"] == 0
    assert service_bus["maxConcurrentCalls"] == 8


def test_host_json_lock_renewal_outlasts_a_step_and_the_lock(host: dict[str, Any]) -> None:
    settings = Settings.load({})
    step_timeouts = [settings.steps.STEP_TIMEOUT_S] + [
        step.timeout_s for workflow in WORKFLOWS.values() for step in workflow.steps if step.timeout_s
    ]
    renewal = _timespan(host["extensions"]["serviceBus"]["maxAutoLockRenewalDuration"])
    assert renewal == timedelta(minutes=2)
    # The local consumers renew for as long as the host does (devhost.lock_renewal).
    assert renewal == timedelta(seconds=LocalSettings.load({}).QUEUE_MAX_LOCK_RENEWAL_S)
    assert renewal > timedelta(seconds=max(step_timeouts))
    assert renewal > timedelta(seconds=settings.consumers.QUEUE_LOCK_S)
    assert renewal <= _timespan(host["functionTimeout"]) == timedelta(minutes=5)


def test_host_json_sdk_retries_are_few_and_exponential(host: dict[str, Any]) -> None:
    retry = host["extensions"]["serviceBus"]["clientRetryOptions"]
    assert retry["mode"] == "exponential"
    # The same small SDK retry count as orderflow's own Service Bus clients.
    assert retry["maxRetries"] == DEFAULT_RETRY_TOTAL == 2
    assert _timespan(retry["delay"]) < _timespan(retry["maxDelay"]) <= timedelta(seconds=5)
    assert _timespan(retry["tryTimeout"]) < timedelta(seconds=Settings.load({}).consumers.QUEUE_LOCK_S)


def test_host_json_logging_holds_only_what_applies_under_open_telemetry(host: dict[str, Any]) -> None:
    assert host["telemetryMode"] == "OpenTelemetry"
    # The host ignores logging.applicationInsights (sampling among it) in this mode: none is set.
    assert set(host["logging"]) == {"logLevel"}
    levels = host["logging"]["logLevel"]
    assert levels["default"] == "Warning"
    assert levels["DurableTask.Core"] == levels["DurableTask.AzureStorage"] == "Warning"
    # Each execution's start and end and Durable's tracking events are never sampled: off (docs/deploy.md).
    assert levels["Function"] == levels["Host.Triggers.DurableTask"] == "Warning"
    # The Application Insights SDK mode's request and aggregate-metric categories: nothing reads them here.
    assert not {"Host.Results", "Host.Aggregator"} & set(levels)
    guide = " ".join((REPO / "docs" / "operations.md").read_text(encoding="utf-8").split())
    assert "samplingSettings" in guide and "Sampling** on" not in guide
    for category in levels:
        assert f"`{category}" in guide, f"docs/operations.md does not say why {category}"


# --- the Service Bus emulator's configuration (docker-compose.yml mounts it; no test runs it) -----------


def test_emulator_declares_every_queue_the_app_uses(example_settings: Settings) -> None:
    config = _load_json("emulators/servicebus-config.json")["UserConfig"]
    [namespace] = config["Namespaces"]
    assert namespace["Name"] == "sbemulatorns"
    queues = {queue["Name"]: queue["Properties"] for queue in namespace["Queues"]}
    app_queues = {
        *(client.inbound_queue for client in example_settings.clients.clients()),
        example_settings.queues.AGENT_RESPONSES_QUEUE,
        *(example_settings.queues.agent_queue(agent) for agent in AGENTS),
    }
    assert set(queues) == app_queues | {client.reply_queue for client in example_settings.clients.clients()}
    for name, properties in queues.items():
        assert properties["MaxDeliveryCount"] == example_settings.consumers.MAX_DELIVERY_COUNT, name
        assert _iso_duration(properties["LockDuration"]) >= timedelta(
            seconds=example_settings.consumers.QUEUE_LOCK_S
        )
        assert properties["RequiresDuplicateDetection"] is True, name
        assert _iso_duration(properties["DuplicateDetectionHistoryTimeWindow"]) >= timedelta(minutes=1)
        assert properties["DeadLetteringOnMessageExpiration"] is True, name
        assert properties["RequiresSession"] is False, name
        # The emulator's ceiling; Azure queues get days (docs/operations.md, Queues).
        assert _iso_duration(properties["DefaultMessageTimeToLive"]) == timedelta(hours=1)


def test_compose_mounts_that_configuration_and_says_tests_do_not_run_it() -> None:
    compose = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    assert "./emulators/servicebus-config.json:/ServiceBus_Emulator/ConfigFiles/Config.json" in compose
    assert "NOT EXERCISED BY THIS REPOSITORY'S TESTS" in compose

"""The app against its infrastructure: what ``infra/main.bicep`` deploys is what orderflow reads and needs.

The templates are evaluated (``tests/infra/bicep_model.py``, over pycep-parser) for one set of azd
parameters, and checked against the app itself: its ``Settings`` fields, its bindings' ``%NAME%``
references and connection names, its agents, its client registry, its Cosmos DB queries. Each check is
a function raising AssertionError, run on the real templates and, where cheap, on a mutated copy that
must fail it.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from demo.services.auth import AgentAuth
from demo.services.bindings import demo_bindings, demo_bindings_json
from devhost.settings import LocalSettings
from function_host.azure_policy import check_azure, host_connection_refusals
from function_host.wiring import load_settings
from operator_api.deadletters import deployment_queues
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.alerts import ALERT_TTL_S, ALERTS_CONTAINER, ALERTS_PARTITION_KEY_PATH
from orderflow.bindings import ServiceBindings
from orderflow.clients import parse_clients
from orderflow.clock import FakeClock
from orderflow.consumer import redelivery_delay_s
from orderflow.errors import PermanentError
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.queues.base import dead_letter_queue_name
from orderflow.queues.memory import InMemoryQueue, InMemoryQueueFactory
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting
from orderflow.stores.base import AlertQuery, StateQuery
from orderflow.stores.cosmos import (
    BREAKER_PARTITION_KEY_PATH,
    HISTORY_CONTAINER,
    PARTITION_KEY_PATH,
    alert_query_sql,
    replay_query_sql,
    state_query_sql,
)
from orderflow.stores.memory import InMemoryAlertStore, InMemoryOrderStore, InMemoryStateStore
from orderflow.workflows import agent_names
from tests.host_deps import HostDeps
from tests.infra.bicep_model import TENANT_ID, Resource, ResourceRef, Runtime, Template
from tests.operator_tokens import TrustedIssuer

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEMO_CLIENT = "11111111-2222-4333-8444-555555555555"
PARAMS = {
    "environmentName": "dev",
    "location": "westeurope",
    "serviceBindings": demo_bindings_json("https://services.example.com"),
    "operatorApiAudience": "22222222-3333-4444-8555-666666666666",
    "demoClientPrincipalId": DEMO_CLIENT,
    "principalId": "33333333-4444-4555-8666-777777777777",
}

ROLE = {
    "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "Azure Service Bus Data Owner": "090c5cfd-751d-490a-894a-3ce6f1109419",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
}
SENDER, RECEIVER, OWNER = (ROLE[f"Azure Service Bus Data {r}"] for r in ("Sender", "Receiver", "Owner"))
COSMOS_DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"

LEFT_AT_DEFAULT = {
    # The console's sign-in: the tenant's Entra authority and the API's .default scope (check_azure).
    "CONSOLE_AUTHORITY": "the tenant's Entra v2.0 authority by default; another is refused on Azure",
    "CONSOLE_SCOPE": "the operator API's <audience>/.default by default",
    # Refused on Azure (function_host.azure_policy.check_azure): identity is the only way in.
    "STORAGE_CONNECTION_STRING": "refused on Azure",
    "COSMOS_KEY": "refused on Azure",
    "SERVICEBUS": "refused on Azure",
    "COSMOS_VERIFY_TLS": "true by default; false is refused on Azure",
    "OPERATOR_ISSUER": "defaults to the tenant's Entra issuer, the only one accepted on Azure",
    "OPERATOR_JWKS_URI": "defaults to the tenant's Entra keys, the only ones accepted on Azure",
    # Read only by the local host and its loops.
    "AGENT_RESPONSES_PER_HOST": "the Functions host takes false whatever it says (function_host.wiring)",
    "QUEUE_CONNECTION_TIMEOUT_S": "local Storage queues (Azure: the Service Bus bindings)",
    # Circuit breakers: the defaults are the production values (docs/operations.md, "Circuit breakers").
    "BREAKER_ENABLED": "on by default, the production choice",
    "BREAKER_FAILURES_TO_OPEN": "default tolerates random transient faults and opens on an outage",
    "BREAKER_OPEN_S": "default probe cadence of an outage",
    "BREAKER_OPEN_MAX_S": "default cap of the probe backoff",
    "BREAKER_PROBE_LEASE_S": "default fits the default claim deadline",
    "BREAKER_MAX_WAIT_S": "default bounds an order's wait to minutes",
    "BREAKER_CACHE_S": "default read cadence of a breaker per host",
    # Defaults chosen against the defaults of the deadlines they must stay below (Settings refuses a
    # timeout that is not shorter than its role's deadline).
    "QUEUE_READ_TIMEOUT_S": "default fits the default step deadline",
    "STORE_CONNECTION_TIMEOUT_S": "default fits the default step and claim deadlines",
    "STORE_READ_TIMEOUT_S": "default fits the default step and claim deadlines",
    "STORE_OPERATION_TIMEOUT_S": "default fits the default step and claim deadlines",
    "OPERATOR_JWKS_TIMEOUT_S": "default fits the default operator API timeout",
    "OPERATOR_API_TIMEOUT_S": "the CLI's wait, not the app's",
    "SCAN_MAX_PAGES": "default bounds every sweep",
    "SCAN_MAX_S": "default bounds every sweep",
    "SCAN_MAX_EMPTY_PAGES": "default bounds every sweep",
}
"""Settings the template leaves at their defaults on purpose, and why (every other one it sets)."""


def _deploy(infra: Path, **params: Any) -> Template:
    return Template(infra / "main.bicep", {**PARAMS, **params})


@pytest.fixture(scope="module")
def main() -> Template:
    return _deploy(ROOT / "infra")


def _of_type(template: Template, type_: str, *, existing: bool = False) -> list[Resource]:
    return [r for r in template.all_resources() if r.type == type_ and r.existing == existing]


def _site(template: Template, service: str) -> Resource:
    """The Function App of azd service ``service`` (``api``: orderflow; ``demo-services``)."""
    sites = _of_type(template, "Microsoft.Web/sites")
    (site,) = [s for s in sites if s.body["tags"].get("azd-service-name") == service]
    return site


def _app(template: Template) -> Resource:
    return _site(template, "api")


def app_settings(template: Template) -> dict[str, Any]:
    """The Function App's settings, by name (values may be :class:`Runtime`)."""
    entries = _app(template).properties["siteConfig"]["appSettings"]
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), f"app settings set twice: {names}"
    return {entry["name"]: entry["value"] for entry in entries}


def _identity(template: Template) -> ResourceRef:
    """orderflow's own identity: the one its Function App runs as."""
    (identity_id,) = _app(template).body["identity"]["userAssignedIdentities"]
    identities = _of_type(template, "Microsoft.ManagedIdentity/userAssignedIdentities")
    (identity,) = [i for i in identities if i.ref.id == identity_id]
    return identity.ref


def _app_principal(template: Template) -> Runtime:
    return Runtime(_identity(template), ("properties", "principalId"))


def _concrete(value: Any) -> str:
    """A value as Azure would fill it in at deployment, for the app's own checks."""
    if not isinstance(value, Runtime):
        text = str(value)
        host = r"\[[^\]]*/sites/([^/\]:]+):properties\.defaultHostName\]"
        text = re.sub(host, r"\1.azurewebsites.net", text)
        return re.sub(r"\[[^\]]*:properties\.clientId\]", "44444444-5555-4666-8777-888888888888", text)
    prop = value.path[-1]
    if prop == "documentEndpoint":
        return f"https://{value.ref.name}.documents.azure.com:443/"
    if prop == "clientId":
        return "44444444-5555-4666-8777-888888888888"
    if prop == "defaultHostName":
        return f"{value.ref.name}.azurewebsites.net"
    if prop == "ConnectionString":
        return "InstrumentationKey=55555555-6666-4777-8888-999999999999;IngestionEndpoint=https://x.in.applicationinsights.azure.com/"
    raise AssertionError(f"no concrete value for {value}")


# --- settings -------------------------------------------------------------------------------------


def _binding_references() -> set[str]:
    texts = [p.read_text() for p in (ROOT / "function_host" / "blueprints").glob("*.py")]
    texts.append((ROOT / "host.json").read_text())
    return {name for text in texts for name in re.findall(r"%([A-Za-z_][A-Za-z0-9_]*)%", text)}


def _connections() -> set[str]:
    texts = [p.read_text() for p in (ROOT / "function_host" / "blueprints").glob("*.py")]
    return {name for text in texts for name in re.findall(r'connection="([^"]+)"', text)}


def check_settings_cover_the_app(template: Template) -> None:
    settings = app_settings(template)
    fields = set(Settings.fields())
    set_by_template = fields & set(settings)
    unexplained = sorted(fields - set_by_template - set(LEFT_AT_DEFAULT))
    assert not unexplained, f"Settings neither set nor left at default on purpose: {unexplained}"
    assert not set_by_template & set(LEFT_AT_DEFAULT), sorted(set_by_template & set(LEFT_AT_DEFAULT))
    missing = {name for name in _binding_references() if name not in settings}
    assert not missing, f"bindings reference unset settings: {sorted(missing)}"
    for connection in _connections() | {"AzureWebJobsStorage"}:
        host = "__fullyQualifiedNamespace" if connection != "AzureWebJobsStorage" else "__accountName"
        for suffix in (host, "__credential", "__clientId"):
            assert f"{connection}{suffix}" in settings, f"{connection}{suffix} is not set"
        assert settings[f"{connection}__credential"] == "managedidentity"
        assert settings[f"{connection}__clientId"] == Runtime(_identity(template), ("properties", "clientId"))


def check_app_starts_with_them(template: Template) -> None:
    env = {name: _concrete(value) for name, value in app_settings(template).items()}
    assert not list(host_connection_refusals(env))
    settings = Settings.load(env=env)
    try:
        check_azure(settings)
    except UnsafeAzureSetting as refused:
        raise AssertionError(f"the app refuses to start on Azure: {refused}") from None
    assert settings.operator_api.operator_audiences(), (
        "the operator API is configured from the audience parameter"
    )


def test_every_setting_the_app_reads_is_set(main: Template) -> None:
    check_settings_cover_the_app(main)
    check_app_starts_with_them(main)


def test_outputs_named_like_settings_hold_the_app_settings(main: Template) -> None:
    settings = app_settings(main)
    outputs = main.outputs()
    shared = set(outputs) & set(settings)
    assert {"COSMOS_ENDPOINT", "SERVICEBUS__fullyQualifiedNamespace", "CLIENTS", "TASK_HUB_NAME"} <= shared
    for name in shared:
        assert outputs[name] == settings[name], name


_SECRET = re.compile(r"(accountkey|sharedaccesskey|sharedaccesssignature|password|secret)=", re.IGNORECASE)


def check_no_secret_in_settings(template: Template) -> None:
    for name, value in app_settings(template).items():
        text = _concrete(value)
        assert not _SECRET.search(text), f"{name} holds a secret"
        if isinstance(value, Runtime):
            # Only identifiers and endpoints come from resources: never a key listing.
            assert value.path[-1] in ("clientId", "documentEndpoint", "ConnectionString"), name
    (insights,) = _of_type(template, "Microsoft.Insights/components")
    # The connection string's instrumentation key authenticates nothing once local auth is off.
    assert insights.properties["DisableLocalAuth"] is True
    (workspace,) = _of_type(template, "Microsoft.OperationalInsights/workspaces")
    assert workspace.properties["features"]["disableLocalAuth"] is True  # no workspace shared keys
    assert app_settings(template)["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == (
        f"ClientId={Runtime(_identity(template), ('properties', 'clientId'))};Authorization=AAD"
    )


def test_no_app_setting_holds_a_key(main: Template) -> None:
    check_no_secret_in_settings(main)
    text = "".join(p.read_text() for p in (ROOT / "infra").rglob("*.bicep"))
    assert not re.search(r"\blist(Keys|ConnectionStrings|AccountSas)\b", text)


# --- queues ---------------------------------------------------------------------------------------


def _queues(template: Template) -> dict[str, Resource]:
    return {q.ref.name: q for q in _of_type(template, "Microsoft.ServiceBus/namespaces/queues")}


def _duration_s(iso: str) -> float:
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", iso)
    assert match, iso
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _expected_queues(settings: Settings) -> set[str]:
    agents = {settings.queues.agent_queue(agent) for agent in agent_names()}
    clients = {q for c in settings.clients.clients() for q in (c.inbound_queue, c.reply_queue)}
    return agents | {settings.queues.AGENT_RESPONSES_QUEUE} | clients


def check_queues(template: Template) -> None:
    settings = Settings.load(env={k: _concrete(v) for k, v in app_settings(template).items()})
    queues = _queues(template)
    assert set(queues) == _expected_queues(settings)
    for name, queue in queues.items():
        p = queue.properties
        assert p["requiresDuplicateDetection"] is True, name
        assert 60 <= _duration_s(p["duplicateDetectionHistoryTimeWindow"]) <= 3600, name
        assert p["deadLetteringOnMessageExpiration"] is True, name
        assert _duration_s(p["defaultMessageTimeToLive"]) >= 86400, name
        lock = _duration_s(p["lockDuration"])
        assert (
            lock
            == settings.consumers.QUEUE_LOCK_S
            > settings.steps.STEP_TIMEOUT_S + settings.starter.START_LATENCY_S
        ), name
        assert p["maxDeliveryCount"] == settings.consumers.MAX_DELIVERY_COUNT, name
        assert not p.get("requiresSession"), name
    (namespace,) = _of_type(template, "Microsoft.ServiceBus/namespaces")
    assert namespace.body["sku"]["name"] in ("Standard", "Premium")  # duplicate detection
    assert namespace.properties["disableLocalAuth"] is True
    assert namespace.properties["minimumTlsVersion"] == "1.2"


def test_every_queue_the_app_uses_is_declared(main: Template) -> None:
    check_queues(main)


class TemplateQueues(InMemoryQueueFactory):
    """In-memory queues holding exactly ``names`` (and their dead-letter queues): any other name is
    refused as Service Bus refuses a queue the namespace does not have."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.created = names | {dead_letter_queue_name(name) for name in names}

    def queue(self, name: str) -> InMemoryQueue:
        if name not in self.created:
            raise PermanentError("MessagingEntityNotFoundError", f"queue {name!r} does not exist")
        return super().queue(name)


def _deployed_settings(template: Template) -> Settings:
    """The settings the Functions host runs with under the template's app settings, and nothing else."""
    return load_settings({name: _concrete(value) for name, value in app_settings(template).items()})


def check_host_id_names_the_app(template: Template) -> None:
    settings = _deployed_settings(template)
    assert _app(template).ref.name == settings.queues.HOST_ID, "HOST_ID does not name the app"
    assert settings.queues.response_queue() == settings.queues.AGENT_RESPONSES_QUEUE in _queues(template)


def test_the_deployment_queues_are_the_queues_the_template_creates(main: Template) -> None:
    check_host_id_names_the_app(main)
    settings = _deployed_settings(main)
    listed = [queue.name for queue in deployment_queues(settings.clients, settings.queues)]
    (demo,) = settings.clients.clients()
    agents = sorted(settings.queues.agent_queue(agent) for agent in agent_names())
    assert listed == [demo.inbound_queue, *agents, settings.queues.AGENT_RESPONSES_QUEUE]
    assert set(listed) <= set(_queues(main)), "a queue the operator API reads is not created"


def test_the_operator_api_charts_and_lists_the_queues_under_the_template_settings(
    main: Template, trusted: TrustedIssuer
) -> None:
    settings = _deployed_settings(main)
    queues = TemplateQueues(set(_queues(main)))
    clock = FakeClock(datetime.now(UTC))  # the in-memory queues stamp dead letters with the machine's time
    deps = HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=queues,
        clock=clock,
        settings=settings,
        dead_letters=queues,
        alerts=InMemoryAlertStore(clock=clock),
    )
    responses = queues.queue(settings.queues.AGENT_RESPONSES_QUEUE)
    responses.send('{"orderId": "demo:o-1"}', message_id="m-1")
    [message] = responses.receive()
    responses.dead_letter(message, reason="InvalidMessage", description="for the chart")
    headers = trusted.bearer("otto", OPERATOR_ROLE)

    def get(route: str) -> Any:
        answer = handle_operator_request(
            "GET",
            route,
            headers,
            b"",
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
        )
        assert answer.status == 200, (route, answer.body)
        return answer.body

    activity = get("/api/operator/activity")
    assert [bucket["deadLetters"] for bucket in activity["buckets"]][-1] == 1
    assert sum(bucket["deadLetters"] for bucket in activity["buckets"]) == 1
    assert activity["complete"]["deadLetters"] is True
    listed = [queue["name"] for queue in get("/api/operator/queues")["queues"]]
    assert listed == [queue.name for queue in deployment_queues(settings.clients, settings.queues)]
    page = get(f"/api/operator/deadletters/{settings.queues.AGENT_RESPONSES_QUEUE}")
    assert [item["messageId"] for item in page["deadLetters"]] == ["m-1"]


# What main.bicep's queue comment says of each setting the queue properties were chosen against, and
# the number it states: each must be the setting's default and what the template deploys.
QUEUE_COMMENT_NUMBERS = {
    "QUEUE_LOCK_S": ("lockDuration 30 s (QUEUE_LOCK_S)", 30),
    "STEP_TIMEOUT_S": ("STEP_TIMEOUT_S 8 s", 8),
    "START_LATENCY_S": ("START_LATENCY_S 5 s", 5),
    "MAX_DELIVERY_COUNT": ("maxDeliveryCount 10 (MAX_DELIVERY_COUNT)", 10),
    "RETRY_BUDGET": ("RETRY_BUDGET (24 calls)", 24),
    "REPLY_GRACE_S": ("REPLY_GRACE_S 30 s", 30),
}


def _host_lock_renewal_s() -> float:
    text = (ROOT / "host.json").read_text()
    match = re.search(r'"maxAutoLockRenewalDuration":\s*"(\d+):(\d+):(\d+)"', text)
    assert match, "host.json sets no maxAutoLockRenewalDuration"
    hours, minutes, seconds = (int(g) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def check_retry_budget_numbers(template: Template) -> None:
    """The queue properties against the numbers the retry budget rests on (main.bicep's comment)."""
    comment = " ".join(template.path.read_text().replace("//", " ").split())
    deployed = app_settings(template)
    settings = Settings.load(env={k: _concrete(v) for k, v in deployed.items()})
    for name, (said, number) in QUEUE_COMMENT_NUMBERS.items():
        assert said in comment, f"the comment no longer says {said!r}"
        assert Settings.fields()[name].default == number, f"{name} defaults to other than {number}"
        assert settings.values()[name] == number, f"the template deploys {name} other than {number}"
    # The host's lock renewal, which the local consumers match (a local host's setting, not the app's).
    assert "the host renews it for up to 2 min beyond" in comment, "the comment no longer says 2 min"
    assert _host_lock_renewal_s() == LocalSettings.load({}).QUEUE_MAX_LOCK_RENEWAL_S == 120
    # The broker dead-letters only after orderflow's own consumer has (with its reason and alert).
    redeliveries = [redelivery_delay_s(n) for n in range(1, settings.consumers.MAX_DELIVERY_COUNT)]
    assert (len(redeliveries), max(redeliveries), sum(redeliveries)) == (9, 30.0, 151.0)  # "about 2.5 min"
    for name, queue in _queues(template).items():
        p = queue.properties
        assert p["maxDeliveryCount"] >= settings.consumers.MAX_DELIVERY_COUNT, name
        lock = _duration_s(p["lockDuration"])
        assert (
            lock
            == settings.consumers.QUEUE_LOCK_S
            >= settings.steps.STEP_TIMEOUT_S + settings.starter.START_LATENCY_S
        ), name
        assert sum(redeliveries) < _duration_s(p["defaultMessageTimeToLive"]) == 14 * 86400, name


def test_queue_properties_hold_the_retry_budget_numbers(main: Template) -> None:
    check_retry_budget_numbers(main)


# --- role assignments -----------------------------------------------------------------------------


def _role_assignments(template: Template) -> list[tuple[ResourceRef, str, Any]]:
    found = []
    for assignment in _of_type(template, "Microsoft.Authorization/roleAssignments"):
        scope = assignment.body.get("scope")
        assert isinstance(scope, ResourceRef), f"{assignment.symbol}: no resource scope"
        role = str(assignment.properties["roleDefinitionId"]).rsplit("/", 1)[-1]
        assert re.fullmatch(r"[0-9a-f-]{36}", assignment.ref.name), f"{assignment.symbol}: name is no guid()"
        found.append((scope, role, assignment.properties["principalId"]))
    names = [a.ref.name for a in _of_type(template, "Microsoft.Authorization/roleAssignments")]
    assert len(names) == len(set(names)), "two role assignments share a name"
    return found


def check_service_bus_roles(template: Template) -> None:
    app = _app_principal(template)
    settings = Settings.load(env={k: _concrete(v) for k, v in app_settings(template).items()})
    assignments = _role_assignments(template)
    assert set(ROLE.values()) >= {role for _, role, _ in assignments}, "a role that is not a named built-in"
    on_bus = [a for a in assignments if a[0].type.startswith("Microsoft.ServiceBus/")]
    assert all(scope.type == "Microsoft.ServiceBus/namespaces/queues" for scope, _, _ in on_bus), (
        "a Service Bus role above queue scope"
    )
    # The deployer's roles on the demo client's queues, when asked for: check_deployer_roles.
    asked = template.params.get("grantDeployerDemoClientAccess")
    deployer = template.params["principalId"] if asked else None
    held = {(scope.name, role, principal) for scope, role, principal in on_bus if principal != deployer}
    # Data Owner on every queue the app has a trigger on: receive and send, and the Manage right the
    # scale controller reads the queue length with (target-based scaling; docs/deploy.md#roles).
    triggered = _triggered_queues(settings)
    for queue in {settings.queues.agent_queue(a) for a in agent_names()} | {
        settings.queues.AGENT_RESPONSES_QUEUE
    }:
        assert queue in triggered
        assert {(r, p) for q, r, p in held if q == queue} == {(OWNER, app)}, queue
    for client in settings.clients.clients():
        assert client.inbound_queue in triggered and client.reply_queue not in triggered
        inbound = {(r, p) for q, r, p in held if q == client.inbound_queue}
        reply = {(r, p) for q, r, p in held if q == client.reply_queue}
        mine = {(SENDER, client.principal_id)} if client.principal_id else set()
        assert inbound == {(OWNER, app), *mine}, client.inbound_queue
        assert reply == {(SENDER, app), *([(RECEIVER, client.principal_id)] if client.principal_id else [])}
        assert {(q, r) for q, r, p in held if p == client.principal_id} <= {
            (client.inbound_queue, SENDER),
            (client.reply_queue, RECEIVER),
        }
    assert {q for q, r, p in held if r == OWNER} == triggered, "Data Owner beyond the triggered queues"
    assert {p for q, r, p in held if r == OWNER} == {app}


def _triggered_queues(settings: Settings) -> set[str]:
    """The queues with a Service Bus trigger (function_host/blueprints: agents, intake, orchestrators)."""
    triggers = (ROOT / "function_host" / "blueprints").glob("*.py")
    text = "".join(p.read_text() for p in triggers)
    # One written out per agent, the response listener's, and the per-client one of register_client_triggers.
    expected = len(agent_names()) + 2
    assert text.count("service_bus_queue_trigger(") == expected, "a trigger was added: name its queues here"
    agents = {settings.queues.agent_queue(a) for a in agent_names()}
    return (
        agents
        | {settings.queues.AGENT_RESPONSES_QUEUE}
        | {c.inbound_queue for c in settings.clients.clients()}
    )


def check_deployer_roles(template: Template) -> None:
    """The deployer holds the demo client's two queue roles when the template is asked to give them, and
    nothing else on Service Bus; the client's own principal and the registry are unchanged by it."""
    granted = bool(template.params.get("grantDeployerDemoClientAccess"))
    settings = Settings.load(env={k: _concrete(v) for k, v in app_settings(template).items()})
    (demo,) = settings.clients.clients()
    deployer = template.params["principalId"]
    on_bus = {
        (scope.name, role)
        for scope, role, principal in _role_assignments(template)
        if principal == deployer and scope.type.startswith("Microsoft.ServiceBus/")
    }
    expected = {(demo.inbound_queue, SENDER), (demo.reply_queue, RECEIVER)} if granted else set()
    assert on_bus == expected
    assert demo.principal_id == DEMO_CLIENT != deployer


def test_role_assignments_are_scoped_to_queues(main: Template) -> None:
    check_service_bus_roles(main)
    (demo,) = parse_clients(str(main.output("CLIENTS")))
    assert demo.principal_id == DEMO_CLIENT  # the client's roles above were checked for this principal


def test_no_backlog_ceiling_keeps_the_scaling_roles(tmp_path: Path) -> None:
    template = _deploy(ROOT / "infra", maxSubmissionBacklog=0)
    check_service_bus_roles(template)  # Data Owner on the triggered queues still: the scale controller's
    assert app_settings(template)["MAX_SUBMISSION_BACKLOG"] == "0"


def test_other_roles_of_the_app_identity(main: Template) -> None:
    app = _app_principal(main)
    assignments = _role_assignments(main)
    (storage,) = _of_type(main, "Microsoft.Storage/storageAccounts")
    (insights,) = _of_type(main, "Microsoft.Insights/components")
    on_storage = {(role, p) for scope, role, p in assignments if scope == storage.ref}
    assert on_storage == {(ROLE[name], app) for name in ROLE if name.startswith("Storage ")}
    assert {(role, p) for scope, role, p in assignments if scope == insights.ref} == {
        (ROLE["Monitoring Metrics Publisher"], app)
    }
    (cosmos_role,) = _of_type(main, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments")
    (account,) = _of_type(main, "Microsoft.DocumentDB/databaseAccounts")
    assert cosmos_role.properties == {
        "roleDefinitionId": f"{account.ref.id}/sqlRoleDefinitions/{COSMOS_DATA_CONTRIBUTOR}",
        "principalId": app,
        "scope": f"{account.ref.id}/dbs/{app_settings(main)['COSMOS_DATABASE']}",
    }


# --- the demo services ----------------------------------------------------------------------------

DEMO_SERVICES_CLIENT = "66666666-7777-4888-8999-aaaaaaaaaaaa"
DEMO = {
    "deployDemoServices": True,
    "demoServicesClientId": DEMO_SERVICES_CLIENT,
    "grantDeployerDemoClientAccess": True,
    "serviceBindings": "",
}
"""A demo environment: the demo services deployed and bound, the deployer given the demo client's roles."""


@pytest.fixture(scope="module")
def demo() -> Template:
    return _deploy(ROOT / "infra", **DEMO)


def _site_settings(site: Resource) -> dict[str, str]:
    entries = site.properties["siteConfig"]["appSettings"]
    return {entry["name"]: _concrete(entry["value"]) for entry in entries}


def check_service_bindings(template: Template) -> None:
    """SERVICE_BINDINGS binds every agent to the deployed demo services, as demo.services.bindings binds a
    local run, with tokens for the audience the services check (demo.services.hosted)."""
    services = _site(template, "demo-services")
    url = f"https://{services.ref.name}.azurewebsites.net"
    deployed = ServiceBindings.parse(_concrete(app_settings(template)["SERVICE_BINDINGS"]))
    scope = f"api://{DEMO_SERVICES_CLIENT}/.default"
    assert deployed == demo_bindings(url, scope=scope)
    assert set(deployed.services) == set(agent_names())
    hosted = _site_settings(services)
    assert hosted["DEMO_SERVICES_TENANT_ID"] == TENANT_ID
    auth = AgentAuth.entra(hosted["DEMO_SERVICES_TENANT_ID"], hosted["DEMO_SERVICES_AUDIENCE"])
    assert scope.removesuffix("/.default") in auth.audience
    assert _concrete(template.output("DEMO_SERVICES_ENDPOINT")) == url
    assert template.output("DEMO_SERVICES_SCOPE") == scope


def test_a_demo_environment_binds_the_agents_to_the_deployed_demo_services(demo: Template) -> None:
    check_service_bindings(demo)
    check_app_starts_with_them(demo)
    check_settings_cover_the_app(demo)
    check_no_secret_in_settings(demo)


def test_the_deployer_holds_the_demo_client_roles_only_when_asked(main: Template, demo: Template) -> None:
    check_deployer_roles(demo)
    check_service_bus_roles(demo)
    check_deployer_roles(main)  # not asked: nothing
    without = _deploy(ROOT / "infra", **{**DEMO, "grantDeployerDemoClientAccess": False})
    check_deployer_roles(without)


def test_the_demo_services_hold_no_role_on_orderflow_and_orderflow_none_on_them(demo: Template) -> None:
    services = _site(demo, "demo-services")
    (identity_id,) = services.body["identity"]["userAssignedIdentities"]
    identities = {i.ref.id: i.ref for i in _of_type(demo, "Microsoft.ManagedIdentity/userAssignedIdentities")}
    principal = Runtime(identities[identity_id], ("properties", "principalId"))
    assert principal != _app_principal(demo)
    held = {(scope.type, scope.name, role) for scope, role, p in _role_assignments(demo) if p == principal}
    accounts = _of_type(demo, "Microsoft.Storage/storageAccounts")
    (own_storage,) = [s for s in accounts if s.ref.name.startswith("stdemo")]
    (insights,) = _of_type(demo, "Microsoft.Insights/components")
    assert held == {
        (own_storage.ref.type, own_storage.ref.name, ROLE["Storage Blob Data Owner"]),
        (insights.ref.type, insights.ref.name, ROLE["Monitoring Metrics Publisher"]),
    }
    app = _app_principal(demo)
    assert not [scope for scope, _, p in _role_assignments(demo) if p == app and scope == own_storage.ref]
    scale = services.properties["functionAppConfig"]["scaleAndConcurrency"]
    assert scale["maximumInstanceCount"] == 1  # one ledger in memory
    check_hosting_of(services)


def test_a_production_environment_deploys_no_demo_services_and_takes_its_bindings(main: Template) -> None:
    assert [site.ref.name for site in _of_type(main, "Microsoft.Web/sites")] == [_app(main).ref.name]
    assert app_settings(main)["SERVICE_BINDINGS"] == PARAMS["serviceBindings"]
    assert (main.output("DEMO_SERVICES_ENDPOINT"), main.output("DEMO_SERVICES_SCOPE")) == ("", "")


# --- stores and hosting ---------------------------------------------------------------------------


def _state_query_fields() -> set[str]:
    everything = StateQuery(
        process_states=(ProcessState.PENDING,),
        unlocked=True,
        client_id="a",
        complete_by_before=None,
        ready_at=None,
        reply_pending=True,
    )
    sql, _ = state_query_sql(everything)
    return set(re.findall(r"c\.(\w+)", sql)) | {
        "completeBy",
        "nextAttemptAt",
        "updatedAt",
        "dataPurgeVersion",
    }


def check_cosmos(template: Template) -> None:
    (account,) = _of_type(template, "Microsoft.DocumentDB/databaseAccounts")
    assert account.properties["disableLocalAuth"] is True
    containers = {
        c.ref.names[1:]: c.properties["resource"]
        for c in _of_type(template, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
    }
    database = app_settings(template)["COSMOS_DATABASE"]
    assert set(containers) == {
        (database, "orders"),
        (database, "orderstate"),
        (database, "breakers"),
        (database, HISTORY_CONTAINER),
        (database, ALERTS_CONTAINER),
    }
    special = {"breakers": BREAKER_PARTITION_KEY_PATH, ALERTS_CONTAINER: ALERTS_PARTITION_KEY_PATH}
    for (_, name), resource in containers.items():
        assert resource["partitionKey"]["paths"] == [special.get(name, PARTITION_KEY_PATH)]
    check_alerts_container(containers[(database, ALERTS_CONTAINER)])
    policy = containers[(database, "orderstate")]["indexingPolicy"]
    excluded = {p["path"].split("/")[1] for p in policy["excludedPaths"]}
    assert not excluded & _state_query_fields(), "a queried field is not indexed"
    composites = {tuple(p["path"].lstrip("/") for p in index) for index in policy["compositeIndexes"]}
    # Equality (or IN) first, the query's one range filter last (orderflow.stores.cosmos.state_query_sql).
    assert composites >= {
        ("processState", "completeBy"),  # supervisor sweep
        ("processState", "nextAttemptAt"),  # starter
        ("clientId", "processState"),  # admission, per client
        ("processState", "updatedAt"),  # retention, the operator API's order list
        ("clientId", "processState", "updatedAt"),  # the order list, by client
        ("workflowVersion", "processState", "updatedAt"),  # the order list, by workflow version
    }


def check_alerts_container(resource: dict[str, Any]) -> None:
    # Bounded: the default time-to-live is the app's, and no document outlives it unless it says so.
    assert resource["defaultTtl"] == ALERT_TTL_S
    policy = resource["indexingPolicy"]
    included = {p["path"] for p in policy["includedPaths"]}
    query = AlertQuery(kind="k", exclude_kinds=("x", "y"), since=datetime.now(UTC))
    sql, _ = alert_query_sql(query, "2026-01-01")
    assert {f"/{name}/?" for name in re.findall(r"c\.(\w+)", sql)} <= included, (
        "a queried field is not indexed"
    )
    for lookup in (
        {"dead_letter_id": "7", "replay_message_id": None},
        {"dead_letter_id": None, "replay_message_id": "m"},
    ):
        replays, _ = replay_query_sql("q", **lookup)
        assert {f"/{name}/?" for name in re.findall(r"c\.(\w+)", replays)} <= included, (
            "a field a replay record is looked up by is not indexed"
        )
    composites = {tuple((p["path"], p["order"]) for p in index) for index in policy["compositeIndexes"]}
    assert (("/kind", "ascending"), ("/at", "descending")) in composites  # WHERE kind = ... ORDER BY at DESC


def test_the_stores_the_app_expects(main: Template) -> None:
    check_cosmos(main)


def check_hosting(template: Template) -> None:
    plans = _of_type(template, "Microsoft.Web/serverfarms")
    assert len(plans) == len(_of_type(template, "Microsoft.Web/sites"))  # Flex Consumption: one app a plan
    assert all(plan.body["sku"] == {"name": "FC1", "tier": "FlexConsumption"} for plan in plans)
    check_hosting_of(_app(template))
    policies = _of_type(template, "Microsoft.Web/sites/basicPublishingCredentialsPolicies")
    sites = len(_of_type(template, "Microsoft.Web/sites"))
    assert (
        sorted((p.ref.name, p.properties["allow"]) for p in policies)
        == [("ftp", False)] * sites + [("scm", False)] * sites
    )
    for storage in _of_type(template, "Microsoft.Storage/storageAccounts"):
        p = storage.properties
        assert (p["allowSharedKeyAccess"], p["allowBlobPublicAccess"], p["minimumTlsVersion"]) == (
            False,
            False,
            "TLS1_2",
        )


def check_hosting_of(site: Resource) -> None:
    """One Function App: Python on the supported versions, identity-based deployment, HTTPS and TLS 1.2."""
    config = site.properties["functionAppConfig"]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low, high = (int(v.split(".")[1]) for v in re.findall(r"3\.\d+", requires))
    assert config["runtime"]["name"] == "python"
    assert low <= int(config["runtime"]["version"].split(".")[1]) < high
    auth = config["deployment"]["storage"]["authentication"]
    (identity,) = site.body["identity"]["userAssignedIdentities"]
    assert auth == {"type": "UserAssignedIdentity", "userAssignedIdentityResourceId": identity}
    assert site.body["identity"]["type"] == "UserAssigned"
    assert site.properties["httpsOnly"] is True
    site_config = site.properties["siteConfig"]
    assert (site_config["minTlsVersion"], site_config["scmMinTlsVersion"], site_config["ftpsState"]) == (
        "1.2",
        "1.2",
        "Disabled",
    )


def test_flex_consumption_app_and_its_storage(main: Template, demo: Template) -> None:
    check_hosting(main)
    check_hosting(demo)


# --- each check fails on a template that breaks it ------------------------------------------------

MUTATIONS: list[tuple[str, str, str, Callable[[Template], None]]] = [
    (
        "modules/functionapp.bicep",
        "{ name: 'AGENT_RESPONSES_QUEUE', value: agentResponsesQueue }\n",
        "",
        check_settings_cover_the_app,
    ),
    (
        "modules/functionapp.bicep",
        "name: 'SERVICEBUS__credential', value: 'managedidentity'",
        "name: 'SERVICEBUS__credential', value: 'connectionstring'",
        check_settings_cover_the_app,
    ),
    (
        "modules/functionapp.bicep",
        "value: serviceBindings }",
        "value: '{}' }",
        check_app_starts_with_them,
    ),
    (
        "modules/functionapp.bicep",
        "value: 'ClientId=${identityClientId};Authorization=AAD' }",
        "value: 'Password=hunter2' }",
        check_no_secret_in_settings,
    ),
    (
        "main.bicep",
        "duplicateDetectionWindow: 'PT10M'",
        "duplicateDetectionWindow: 'PT10S'",
        check_queues,
    ),
    ("main.bicep", "lockDuration: 'PT${queueLockSeconds}S'", "lockDuration: 'PT5S'", check_queues),
    ("main.bicep", "  'shipping'\n", "", check_queues),
    ("main.bicep", "var maxDeliveryCount = 10", "var maxDeliveryCount = 5", check_retry_budget_numbers),
    ("main.bicep", "RETRY_BUDGET (24 calls)", "RETRY_BUDGET (20 calls)", check_retry_budget_numbers),
    (
        "modules/servicebus.bicep",
        "maxDeliveryCount: maxDeliveryCount\n",
        "maxDeliveryCount: 3\n",
        check_retry_budget_numbers,
    ),
    ("modules/servicebus.bicep", "disableLocalAuth: true", "disableLocalAuth: false", check_queues),
    (
        "modules/client.bicep",
        "(reply.id, principalId, serviceBusDataReceiver)\n  scope: reply",
        "(reply.id, principalId, serviceBusDataReceiver)\n  scope: inbound",
        check_service_bus_roles,
    ),
    (
        "modules/client.bicep",
        "(reply.id, appPrincipalId, serviceBusDataSender)\n  scope: reply",
        "(reply.id, appPrincipalId, serviceBusDataSender)\n  scope: inbound",
        check_service_bus_roles,
    ),
    (
        "modules/roles.bicep",
        "(queues[i].id, appPrincipalId, serviceBusDataOwner)\n  scope: queues[i]",
        "(queues[i].id, appPrincipalId, serviceBusDataOwner)\n  scope: namespace",
        check_service_bus_roles,
    ),
    # Receive rights only on the agent queues: the scale controller could not read their length.
    (
        "modules/roles.bicep",
        "roleDefinitions', serviceBusDataOwner)",
        "roleDefinitions', '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0')",
        check_service_bus_roles,
    ),
    (
        "modules/client.bicep",
        "(inbound.id, appPrincipalId, serviceBusDataOwner)\n  scope: inbound",
        "(reply.id, appPrincipalId, serviceBusDataOwner)\n  scope: reply",
        check_service_bus_roles,
    ),
    ("modules/cosmos.bicep", "path: '/lastError/*'", "path: '/clientId/*'", check_cosmos),
    (
        "modules/cosmos.bicep",
        "              path: '/nextAttemptAt'",
        "              path: '/attempt'",
        check_cosmos,
    ),
    ("modules/cosmos.bicep", "disableLocalAuth: true", "disableLocalAuth: false", check_cosmos),
    ("modules/functionapp.bicep", "ftpsState: 'Disabled'", "ftpsState: 'FtpsOnly'", check_hosting),
    ("modules/functionapp.bicep", "scmMinTlsVersion: '1.2'", "scmMinTlsVersion: '1.0'", check_hosting),
    ("modules/storage.bicep", "allowSharedKeyAccess: false", "allowSharedKeyAccess: true", check_hosting),
    (
        "modules/monitoring.bicep",
        "disableLocalAuth: true",
        "disableLocalAuth: false",
        check_no_secret_in_settings,
    ),
    ("modules/functionapp.bicep", "name: 'FC1'", "name: 'Y1'", check_hosting),
    ("modules/functionapp.bicep", "{ name: 'HOST_ID', value: appName }\n", "", check_host_id_names_the_app),
]


DEMO_MUTATIONS: list[tuple[str, str, str, Callable[[Template], None]]] = [
    (
        "main.bicep",
        "  courier: union(demoServiceBinding, { operations: demoOperations.courier })\n",
        "",
        check_service_bindings,
    ),
    ("main.bicep", "path: '/payments/refunds'", "path: '/payments/refund'", check_service_bindings),
    ("main.bicep", "mode: 'entra'", "mode: 'none'", check_service_bindings),
    (
        "modules/demoservices.bicep",
        "output scope string = 'api://${audienceClientId}/.default'",
        "output scope string = 'api://orderflow-demo-services/.default'",
        check_service_bindings,
    ),
    (
        "modules/demoservices.bicep",
        "{ name: 'DEMO_SERVICES_AUDIENCE', value: audienceClientId }",
        "{ name: 'DEMO_SERVICES_AUDIENCE', value: 'orderflow-demo-services' }",
        check_service_bindings,
    ),
    (
        "modules/client.bicep",
        "(reply.id, deployerPrincipalId, serviceBusDataReceiver)\n  scope: reply",
        "(reply.id, deployerPrincipalId, serviceBusDataReceiver)\n  scope: inbound",
        check_deployer_roles,
    ),
    (
        "modules/client.bicep",
        "roleDefinitions', serviceBusDataSender)\n    principalId: deployerPrincipalId",
        "roleDefinitions', serviceBusDataOwner)\n    principalId: deployerPrincipalId",
        check_deployer_roles,
    ),
    ("main.bicep", "grantDeployerDemoClientAccess ? principalId : ''", "''", check_deployer_roles),
]
"""Mutations checked in a demo environment (:data:`DEMO`)."""


@pytest.mark.parametrize(
    ("file", "old", "new", "check"),
    DEMO_MUTATIONS,
    ids=[f"{m[3].__name__}:{m[0]}:{i}" for i, m in enumerate(DEMO_MUTATIONS)],
)
def test_a_mutated_demo_template_fails_its_check(
    tmp_path: Path, file: str, old: str, new: str, check: Callable[[Template], None]
) -> None:
    infra = tmp_path / "infra"
    shutil.copytree(ROOT / "infra", infra)
    target = infra / file
    text = target.read_text()
    assert text.count(old) == 1, f"the mutation's text is not in {file} exactly once"
    target.write_text(text.replace(old, new))
    check(_deploy(ROOT / "infra", **DEMO))  # the original passes
    with pytest.raises((AssertionError, ValueError)):
        check(_deploy(infra, **DEMO))


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

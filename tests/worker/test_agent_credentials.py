"""An agent's credentialed call through the worker: its Service Bus trigger, an ``entra`` service binding,
and the real demo services requiring tokens.

The agent trigger runs in the worker as on Azure, where ``function_host.blueprints.agents`` binds each
agent by ``SERVICE_BINDINGS`` and takes its tokens from ``azure_credential`` (the app's managed identity)
through ``CachedTokens``. The one seam replaced is that credential: here it is the devhost's
:class:`~devhost.service_credential.LocalAgentCredential`, which mints the token Entra would issue for
the binding's scope, signed by a local issuer's key. The demo services (``python -m demo.services``, a
process on loopback, :mod:`tests.worker.demo_services`) trust that key only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from azure.core.credentials import AccessTokenInfo
from cryptography.hazmat.primitives.asymmetric import rsa

from demo.services.bindings import (
    DEMO_SERVICES_AUDIENCE,
    DEMO_SERVICES_SCOPE,
    demo_bindings,
    demo_bindings_json,
)
from devhost.local_issuer import LocalIssuer, ensure_signing_key
from devhost.service_credential import LOCAL_AGENTS_CLIENT_ID, LocalAgentCredential
from function_host.blueprints import agents as agents_blueprint
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.bindings import AGENT_ROLE
from orderflow.clock import SystemClock
from orderflow.errors import SERVICE_AUTH_REFUSED
from orderflow.messages import AgentOutcome, AgentRequest, AgentResponse, parse_message
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryAlertStore
from orderflow.workflows import WORKFLOWS, agent_names
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.servicebus_wire import HostMessage
from tests.worker.appdeps import app_dependencies
from tests.worker.demo_services import demo_services
from tests.worker.operator_http import OperatorCall, wire_operator_api
from tests.worker.settlement import SettlementCall, SettlementServer
from tests.worker.test_servicebus_triggers import deliver
from tests.worker.worker import FunctionsWorker

pytestmark = pytest.mark.unit

SKU, QUANTITY = "10", 2
"""What each request reserves: SKU 10 is in the fixture's stock."""
LINE = {"sku": SKU, "quantity": QUANTITY}


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, rsa.RSAPrivateKey]:
    """A local issuer's key file (mode 0600) and its key: the demo services trust it, the agents sign
    with it."""
    path = tmp_path_factory.mktemp("local-issuer") / "signing-key.pem"
    return path, ensure_signing_key(path)


@pytest.fixture(scope="module")
def services(signing_key: tuple[Path, rsa.RSAPrivateKey]) -> Iterator[str]:
    """The demo services' URL; they accept only tokens of the module's key."""
    with demo_services(signing_key[0]) as url:
        yield url


@pytest.fixture(scope="module")
def reports(services: str) -> Iterator[httpx.Client]:
    """A client of the services' own endpoints (audit, stock), which check no token."""
    with httpx.Client(base_url=services, timeout=10) as client:
        yield client


@dataclass
class IssuedTokens:
    """The agents' credential, keeping every token it hands out."""

    credential: LocalAgentCredential
    issued: list[str] = field(default_factory=list)

    def get_token_info(self, *scopes: str) -> AccessTokenInfo:
        info = self.credential.get_token_info(*scopes)
        self.issued.append(info.token)
        return info


def agent_dependencies(url: str, *, scope: str) -> HostDeps:
    """The agents' dependencies in memory, with every agent bound to the demo services at ``url`` by tokens
    for ``scope`` (``SERVICE_BINDINGS`` as ``demo.services.bindings`` writes it), and an alert store."""
    deps, _, _ = app_dependencies()
    bindings = demo_bindings_json(url, scope=scope)
    settings = Settings.load(
        env={}, HOST_ID="", AGENT_BACKOFF_INITIAL_S=0.05, AGENT_BACKOFF_MAX_S=0.1, SERVICE_BINDINGS=bindings
    )
    return replace(deps, settings=settings, alerts=InMemoryAlertStore())


Wire = Callable[[HostDeps, IssuedTokens], None]
"""Wires the agents' triggers on these dependencies and this credential."""


@pytest.fixture
def wire_agents(monkeypatch: pytest.MonkeyPatch, settlement: SettlementServer) -> Iterator[Wire]:
    """Wires the agents' triggers on given dependencies and credential, at the seams ``function_host.wiring``
    fills on Azure; the alerts the worker raises meanwhile are kept in the dependencies' store (as its
    alert sink keeps them). The worker process's caches of services and tokens start and end empty."""
    sinks: list[telemetry.AlertSinkFn | None] = []

    def wire(deps: HostDeps, credential: IssuedTokens) -> None:
        assert deps.alerts is not None
        monkeypatch.setattr(agents_blueprint, "dependencies", lambda: deps)
        monkeypatch.setattr(agents_blueprint, "app_settings", lambda: deps.settings)
        monkeypatch.setattr(agents_blueprint, "azure_credential", lambda connections: credential)
        sinks.append(telemetry.use_alert_sink(AlertSink(deps.alerts, deps.clock, "func-1", window_s=3600)))

    caches = (agents_blueprint._tokens, agents_blueprint._service, agents_blueprint._taken)
    for cached in caches:
        cached.cache_clear()
    settlement.service.take()
    yield wire
    for cached in caches:
        cached.cache_clear()
    for previous in reversed(sinks):
        telemetry.use_alert_sink(previous)


@dataclass(frozen=True)
class Forward:
    """An agent's forward call: its trigger's agent, the step and operation, the payload the step sends
    (``orderflow.step_requests.request_payload``), the field of the service's answer naming the effect, and
    the idempotency key's suffix after ``{orderId}:{step}``."""

    agent: str
    step: str
    operation: str
    payload: dict[str, Any]
    effect: str
    key_suffix: str = ""


CHARGE = {"customerId": "1", "amount": "10.00", "currency": "USD", "clientId": "a"}
"""A charge customer 1 of the fixture can pay, twice in each test."""

FORWARD = {
    forward.agent: forward
    for forward in (
        Forward("inventory", "reserve_inventory", "reserve", {"items": [LINE]}, "reservationId"),
        Forward("payment", "charge_payment", "charge", CHARGE, "chargeId"),
        Forward("shipping", "create_shipment", "ship", {"carrier": "TRUCK", "items": [LINE]}, "shipmentId"),
        # The fallback carrier: the same step, under the step's fallback key, with the carrier it posts by.
        Forward(
            "courier",
            "create_shipment",
            "ship",
            {"carrier": "MAIL", "items": [LINE]},
            "shipmentId",
            ":fallback",
        ),
    )
}
"""Every agent's forward call, as its step asks it of the demo services."""


def test_every_agent_of_the_workflows_has_a_forward_call_here() -> None:
    assert sorted(FORWARD) == agent_names()
    steps = {(s.agent, s.name, s.operation) for d in WORKFLOWS.values() for s in d.steps}
    steps |= {
        (s.fallback_agent, s.name, s.operation)
        for d in WORKFLOWS.values()
        for s in d.steps
        if s.fallback_agent
    }
    assert {(f.agent, f.step, f.operation) for f in FORWARD.values()} <= steps


def agent_request(deps: HostDeps, forward: Forward) -> AgentRequest:
    """A request of ``forward`` for a new order (keys of its own: the services outlive a test)."""
    order_id = f"a:{uuid.uuid4().hex[:12]}"
    return AgentRequest(
        request_id=f"{order_id}:1:{forward.step}",
        order_id=order_id,
        instance_id=f"{order_id}:1",
        step=forward.step,
        operation=forward.operation,
        idempotency_key=f"{order_id}:{forward.step}{forward.key_suffix}",
        deadline=SystemClock().now() + timedelta(seconds=20),
        reply_to=deps.settings.queues.response_queue(),
        payload=forward.payload,
        max_calls=3,
    )


def perform(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    deps: HostDeps,
    forward: Forward = FORWARD["inventory"],
) -> tuple[AgentRequest, AgentResponse]:
    """Deliver a request of ``forward`` to its agent's trigger; the request and the one response."""
    request = agent_request(deps, forward)
    message = HostMessage(request.to_json().encode(), message_id=request.request_id)

    calls = deliver(worker, f"agent_{forward.agent}", message, settlement)

    assert calls == [SettlementCall("complete", str(message.lock_token))]
    queue = deps.queues.queue(deps.settings.queues.response_queue())
    [response] = [parse_message(AgentResponse, m.body) for m in queue.receive(max_messages=32)]
    return request, response


def available(reports: httpx.Client) -> int:
    """SKU 10's available stock at the services."""
    answer = reports.get(f"/stock/{SKU}").json()
    return int(answer["available"])


def calls_at(reports: httpx.Client) -> int:
    """Every call the services took in (past the token check), all keys together."""
    return int(reports.get("/audit").json()["calls_total"])


@pytest.mark.parametrize("agent", sorted(FORWARD))
def test_every_agent_calls_its_service_with_a_token_for_its_audience_and_role(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    wire_agents: Wire,
    services: str,
    reports: httpx.Client,
    signing_key: tuple[Path, rsa.RSAPrivateKey],
    agent: str,
) -> None:
    deps = agent_dependencies(services, scope=DEMO_SERVICES_SCOPE)
    tokens = IssuedTokens(LocalAgentCredential(signing_key[1]))
    wire_agents(deps, tokens)
    forward = FORWARD[agent]

    request, response = perform(worker, settlement, deps, forward)
    _, later = perform(worker, settlement, deps, forward)

    assert (response.outcome, response.calls, response.error_code) == (AgentOutcome.SUCCEEDED, 1, None)
    assert response.result[forward.effect] and later.outcome is AgentOutcome.SUCCEEDED
    audit = reports.get(f"/audit/{request.idempotency_key}").json()
    assert (audit["calls"], audit["effects"]) == (1, 1)
    # One token for both invocations (the worker process caches it), accepted by the service: for its
    # audience, with the agents' role, from the app's identity.
    [token] = tokens.issued
    claims = jwt.decode(
        token,
        signing_key[1].public_key(),
        algorithms=["RS256"],
        audience=DEMO_SERVICES_AUDIENCE,
        issuer=LocalIssuer(signing_key[1]).issuer,
    )
    assert (claims["roles"], claims["azp"]) == ([AGENT_ROLE], LOCAL_AGENTS_CLIENT_ID)
    assert claims["exp"] > time.time()
    # The same call without a token is refused: the services checked the one they were sent.
    bare = reports.post(
        demo_bindings(services).services[agent].operations[forward.operation].path,
        json={"orderId": request.order_id, **forward.payload},
        headers={"Idempotency-Key": f"{request.idempotency_key}:bare"},
    )
    assert (bare.status_code, bare.json()["error"]) == (401, "invalid_token")


REFUSED_CREDENTIALS: dict[str, tuple[str, dict[str, Any], int, str]] = {
    "another audience": ("api://orderflow-elsewhere/.default", {}, 401, "invalid_token"),
    "expired": (DEMO_SERVICES_SCOPE, {"clock": lambda: time.time() - 7200}, 401, "invalid_token"),
    "without the agents' role": (DEMO_SERVICES_SCOPE, {"roles": ()}, 403, "missing_role"),
}
"""Credential -> (the binding's scope, how the credential mints, the services' status and code)."""


@pytest.mark.parametrize("case", sorted(REFUSED_CREDENTIALS))
def test_a_refused_token_is_the_service_auth_refused_alert_not_a_business_refusal(
    worker: FunctionsWorker,
    settlement: SettlementServer,
    wire_agents: Wire,
    services: str,
    reports: httpx.Client,
    signing_key: tuple[Path, rsa.RSAPrivateKey],
    monkeypatch: pytest.MonkeyPatch,
    trusted: TrustedIssuer,
    case: str,
) -> None:
    scope, minting, status, code = REFUSED_CREDENTIALS[case]
    deps = agent_dependencies(services, scope=scope)
    tokens = IssuedTokens(LocalAgentCredential(signing_key[1], **minting))
    wire_agents(deps, tokens)
    stock, taken_in = available(reports), calls_at(reports)

    request, response = perform(worker, settlement, deps)

    # One call, refused before the service's idempotency layer: no effect, the key still free.
    assert len(tokens.issued) == 1
    assert (calls_at(reports), available(reports)) == (taken_in, stock)
    # Transient, so the supervisor retries it like an outage; never permanent, which would compensate.
    assert (response.outcome, response.error_kind, response.error_code) == (
        AgentOutcome.FAILED,
        "transient",
        SERVICE_AUTH_REFUSED,
    )
    assert response.calls == 1
    # The operator sees the alert, through the operator API's trigger in the same worker.
    wire_operator_api(monkeypatch, deps, trusted)
    listed = OperatorCall(worker, deps, trusted)("GET", "/alerts", trusted.operator())
    [alert] = listed.body["alerts"]
    assert (alert["kind"], alert["orderId"], alert["instanceId"]) == (
        SERVICE_AUTH_REFUSED,
        request.order_id,
        request.instance_id,
    )
    assert alert["details"]["dependency"] == "inventory"
    assert (alert["details"]["status"], alert["details"]["code"]) == (status, code)
    # The refused token was dropped: the next invocation asks the credential for a new one.
    perform(worker, settlement, deps)
    assert len(tokens.issued) == 2

"""A whole orderflow system in the test process: demo services, one devhost (its operator API on loopback
too), a client.

The stores and queues are either the in-memory adapters (fast, for unit-level flows) or the real
local emulators (Cosmos DB API on cosmosdb-server, Storage queues on Azurite). The orchestrations run
on durabletask's in-memory backend with the real worker; the agents call the demo services over HTTP.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from demo.faults import FaultPlan
from demo.services.app import create_app
from demo.services.auth import AgentAuth
from demo.services.bindings import demo_bindings_json
from demo.tpch import Catalog, load_catalog
from devhost.emulators import LocalEndpoints
from devhost.host import DevHost
from devhost.http_transport import transport_for
from devhost.local_issuer import LocalIssuer
from devhost.queues.factory import StorageQueueFactory
from devhost.roles import ALL_ROLES
from devhost.service_credential import LocalAgentCredential
from devhost.serving import serve_in_thread, server_url, stop
from devhost.settings import load_settings
from orderflow.clients import RegisteredClient
from orderflow.clock import SystemClock
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.queues.base import DeadLetterQueues, QueueFactory
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import StateRecord, order_key
from orderflow.settings import Settings
from orderflow.stores.base import AlertStore, OrderStore, StateStore
from orderflow.stores.cosmos import CosmosStores
from orderflow.stores.memory import InMemoryAlertStore, InMemoryOrderStore, InMemoryStateStore
from orderflow_client.client import OrderflowClient
from tests.dev_host import dev_host
from tests.host_deps import HostDeps
from tests.operator_tokens import local_issuer as tests_issuer
from tests.operator_tokens import signing_key

TPCH_FIXTURE = Path(__file__).parent / "data" / "tpch"

FAST_SETTINGS: dict[str, Any] = {
    "STARTER_INTERVAL_S": 0.05,
    "SUPERVISOR_INTERVAL_S": 0.2,
    "SUPERVISOR_BACKOFF_INITIAL_S": 0.2,
    "SUPERVISOR_BACKOFF_MAX_S": 1.0,
    "STEP_TIMEOUT_S": 1.5,
    "CLAIM_TIMEOUT_S": 3.0,
    "START_LATENCY_S": 0.5,
    # Remote calls end before the short deadlines above (Settings refuses them otherwise).
    "STORE_CONNECTION_TIMEOUT_S": 1.0,
    "STORE_READ_TIMEOUT_S": 1.0,
    "STORE_OPERATION_TIMEOUT_S": 1.2,
    "QUEUE_READ_TIMEOUT_S": 1.2,
    "POLL_INTERVAL_S": 0.02,
    "POLL_MAX_INTERVAL_S": 0.1,
    "AGENT_BACKOFF_INITIAL_S": 0.05,
    "AGENT_BACKOFF_MAX_S": 0.2,
}
"""Short cadences and deadlines so that timeouts and recoveries happen within a test's seconds."""


@dataclass
class System:
    """A running system and handles to inspect it."""

    host: DevHost
    deps: HostDeps
    client: OrderflowClient
    catalog: Catalog
    services_url: str

    @property
    def api_url(self) -> str:
        """Base URL of the devhost's operator API (the ``api`` role)."""
        assert self.host.api_url is not None, "the devhost runs no api role"
        return self.host.api_url

    def key(self, order_id: str) -> str:
        """The key the client's order ``order_id`` is stored under."""
        return order_key(self.deps.settings.queues.HOST_ID, order_id)

    def other_client(self, name: str) -> tuple[RegisteredClient, OrderflowClient]:
        """The registered client ``name`` of :func:`running_system`'s ``more_clients``, and a client on
        its own two queues."""
        registered = self.deps.settings.clients.clients().get(f"{name}-{self.deps.settings.queues.HOST_ID}")
        sdk = OrderflowClient(
            self.deps.queues, reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
        )
        return registered, sdk

    def record(self, order_id: str) -> StateRecord:
        """The state record of the client's order ``order_id``."""
        return self.deps.states.get(self.key(order_id)).item

    def audit(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.services_url}/audit", timeout=5).json()
        return result

    def set_faults(self, plan: FaultPlan) -> None:
        httpx.put(f"{self.services_url}/faults", json=plan.model_dump(), timeout=5).raise_for_status()

    def submit_all(self, order_ids: list[str] | None = None) -> list[str]:
        ids = []
        for order in self.catalog.orders:
            if order_ids is None or order.order_id in order_ids:
                ids.append(self.client.submit(order.to_submission(self.client.reply_queue)))
        return ids

    def wait_settled(self, order_ids: list[str], *, timeout_s: float = 30.0) -> dict[str, StateRecord]:
        """Poll the state store until every order is settled; fail with the unsettled ones."""
        deadline = time.monotonic() + timeout_s
        records: dict[str, StateRecord] = {}
        while time.monotonic() < deadline:
            records = {}
            for order_id in order_ids:
                try:
                    records[order_id] = self.record(order_id)
                except Exception:  # not yet submitted
                    continue
            if len(records) == len(order_ids) and all(
                r.process_state in SETTLED_STATES for r in records.values()
            ):
                return records
            time.sleep(0.1)
        states = {oid: (r.process_state.value, r.attempt) for oid, r in records.items()}
        raise AssertionError(f"not settled within {timeout_s} s: {states}")

    def wait_until(self, predicate: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except Exception:  # e.g. the record does not exist yet
                pass
            time.sleep(0.05)
        raise AssertionError("condition not met in time")


def local_dependencies(
    states: StateStore,
    orders: OrderStore,
    queues: QueueFactory,
    dead_letters: DeadLetterQueues | None = None,
    alerts: AlertStore | None = None,
) -> HostDeps:
    """The container of a test's adapters, on the system clock and the default settings (a running
    system, and a test that needs other settings, replace them)."""
    return HostDeps(
        states=states,
        orders=orders,
        queues=queues,
        clock=SystemClock(),
        settings=Settings.load({}),
        dead_letters=dead_letters,
        alerts=alerts,
    )


def memory_dependencies() -> tuple[HostDeps, Callable[[], None]]:
    queues = InMemoryQueueFactory()
    deps = local_dependencies(
        InMemoryStateStore(), InMemoryOrderStore(), queues, queues, InMemoryAlertStore()
    )
    return deps, lambda: None


def emulator_dependencies(endpoints: LocalEndpoints) -> tuple[HostDeps, Callable[[], None]]:
    stores = CosmosStores.connect(
        endpoints.cosmos_endpoint,
        key=endpoints.cosmos_key,
        database="db" + uuid.uuid4().hex[:10],
        verify_tls=False,
        transport=transport_for(endpoints.cosmos_endpoint),
    )
    queues = StorageQueueFactory.from_connection_string(endpoints.storage_connection_string)
    return local_dependencies(stores.state, stores.orders, queues, queues, stores.alerts), stores.close


def key_file_auth() -> AgentAuth:
    """The demo services' check trusting the local issuer's key file: the key a devhost process started
    with ``SERVICE_BINDINGS`` from :func:`demo.services.bindings.demo_bindings_json` signs its tokens with."""
    return AgentAuth.trusting(LocalIssuer.from_key_file())


@contextmanager
def running_system(
    deps: HostDeps,
    *,
    faults: FaultPlan | None = None,
    roles: tuple[str, ...] = ALL_ROLES,
    stock_divisor: int = 1,
    api_port: int = 0,
    local_issuer: LocalIssuer | None = None,
    operator_settings: Mapping[str, str] | None = None,
    more_clients: Sequence[str] = (),
    more_bindings: Mapping[str, Any] | None = None,
    **settings: Any,
) -> Iterator[System]:
    """Start demo services on the fixture catalog and one devhost with ``roles`` on ``deps`` (with the
    fast settings and ``settings``); stop both after. The devhost's operator API listens on ``api_port``
    (0: a free one), trusts the tokens ``operator_settings`` (``OPERATOR_*``) name, and serves
    ``local_issuer``'s JWKS, if given. Besides the system's client, one client is registered for each
    name in ``more_clients`` (:meth:`System.other_client`). ``SERVICE_BINDINGS`` binds every agent to the
    demo services, and each agent of ``more_bindings`` (agent -> binding, as JSON) as it says."""
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=stock_divisor)
    # The services require the agents' tokens, as in the demo: signed by the session's local key.
    auth = AgentAuth.trusting(tests_issuer())
    server, thread = serve_in_thread(create_app(catalog, faults or FaultPlan(), auth=auth))
    url = server_url(server)
    host_id = "h" + uuid.uuid4().hex[:8]
    # Queues of its own: the emulators are shared by every test of the session.
    # One registered client of its own: inbound queue orders-<host id>, reply queue client-<host id>;
    # each of more_clients as <name>-<host id>, on orders-<name>-<host id> and replies-<name>-<host id>.
    registry = [{"id": host_id, "replyQueue": f"client-{host_id}"}]
    registry += [{"id": f"{name}-{host_id}"} for name in more_clients]
    isolation = {
        "CLIENTS": json.dumps(registry),
        "AGENT_QUEUE_PREFIX": f"agent-{host_id}-",
    }
    config, local = load_settings(
        {},
        **{
            **FAST_SETTINGS,
            **isolation,
            "SERVICE_BINDINGS": json.dumps({**json.loads(demo_bindings_json(url)), **(more_bindings or {})}),
            "HOST_ID": host_id,
            **(operator_settings or {}),
            **settings,
        },
    )
    deps = replace(deps, settings=config, local=local)
    credential = LocalAgentCredential(signing_key())
    host = dev_host(deps, roles, api_port=api_port, local_issuer=local_issuer, service_credential=credential)
    host.start()
    registered = config.clients.clients().get(host_id)
    client = OrderflowClient(
        deps.queues, reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
    )
    try:
        yield System(host, deps, client, catalog, url)
    finally:
        host.stop()
        stop(server, thread)

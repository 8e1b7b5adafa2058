"""The running demo system (:func:`demo_system` starts and stops it) and how a driver submits orders to
it and waits for them to settle (:func:`submit_and_settle`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import httpx
from azure.core.exceptions import AzureError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from demo.config import (
    DATA_DIR,
    DEMO_CLIENT,
    DEMO_OUTSTANDING,
    DEMO_REFUND_POLICY,
    DEMO_WORKFLOW_SETTINGS,
    console,
    stock_divisor_for,
)
from demo.faults import FaultPlan
from demo.fleet import Fleet, devhost_specs, host_env, start_demo_services
from demo.tpch import (
    Catalog,
    DemoOrder,
    ensure_dataset,
    load_catalog,
)
from devhost.client_credentials import ClientCredentials, issue_client_credentials
from devhost.durabletask_backend import free_port
from devhost.emulators import LocalEmulators, LocalEndpoints, start_local_emulators
from devhost.local_issuer import LocalIssuer, ensure_signing_key
from devhost.queues.factory import StorageQueueFactory
from orderflow.clients import RegisteredClient
from orderflow.errors import TransientError
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import StateRecord
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery, StateStore
from orderflow.stores.cosmos import CosmosStores
from orderflow_client.client import FINAL_STATUSES, OrderflowClient


class StateReader(Protocol):
    """What a driver reads its state records from: the stores' ``state``."""

    @property
    def state(self) -> StateStore: ...


class DemoTarget(Protocol):
    """What a driver submits to and reports on: the local :class:`DemoSystem`, or a deployment
    (:class:`demo.azure.Deployment`).

    Attributes:
        catalog: The run's TPC-H orders.
        stores: The state records.
        services_url: The demo services' base URL.
        services_auth: How their reporting routes are called (None: no token).
    """

    @property
    def catalog(self) -> Catalog: ...

    @property
    def stores(self) -> StateReader: ...

    @property
    def services_url(self) -> str: ...

    @property
    def services_auth(self) -> httpx.Auth | None: ...


@dataclass
class DemoSystem:
    """What :func:`demo_system` started, for a driver to submit to and inspect.

    Attributes:
        run_dir: The run's log directory.
        catalog: The TPC-H orders of the run and the stock they draw on.
        endpoints: Azurite's and cosmosdb-server's connection details.
        services_url: Base URL of the demo services.
        env: The devhost processes' environment (:func:`demo.fleet.host_env` plus the driver's additions,
            and the registered clients as ``CLIENTS``).
        stores: The state and order stores, for the driver's own reads.
        fleet: The devhost processes.
        clients: The registered clients, in order.
        api_url: Base URL of the operator API (the first devhost process serves it); tokens for it come
            from ``python -m devhost.local_issuer login``.
        emulators: Azurite's and cosmosdb-server's processes (the chaos run pauses them).
        services_auth: None: the local demo services' reporting routes check no token (loopback only).
    """

    run_dir: Path
    catalog: Catalog
    endpoints: LocalEndpoints
    services_url: str
    env: dict[str, str]
    stores: CosmosStores
    fleet: Fleet
    clients: tuple[RegisteredClient, ...]
    api_url: str
    emulators: LocalEmulators | None = None
    services_auth: httpx.Auth | None = None

    def client_credentials(self, client: RegisteredClient) -> ClientCredentials:
        """What the devhost issues ``client``: a SAS for each of its two queues, nothing else."""
        return issue_client_credentials(self.endpoints.storage_connection_string, client)

    def client_queues(self, client: RegisteredClient) -> StorageQueueFactory:
        """A queue factory with ``client``'s credentials only (its inbound and reply queues)."""
        return self.client_credentials(client).queues()

    def sdk_client(self, client: RegisteredClient) -> OrderflowClient:
        """The client SDK of ``client``, on its own credentials."""
        return OrderflowClient(
            self.client_queues(client), reply_queue=client.reply_queue, orders_queue=client.inbound_queue
        )


@contextmanager
def demo_system(
    *,
    orders: int,
    processes: int,
    faults: FaultPlan,
    run_dir: Path,
    extra_env: Mapping[str, str] | None = None,
    client_ids: Sequence[str] = (DEMO_CLIENT,),
    process_env: Mapping[str, Mapping[str, str]] | None = None,
    host_module: str = "devhost",
) -> Iterator[DemoSystem]:
    """Start the emulators, the demo services and the devhost processes; stop them all on exit.

    The first devhost process serves the operator API on a free loopback port, with the local token
    issuer's JWKS: the local signing key is made if there is none yet (``.data/local-issuer``), and every
    process gets the ``OPERATOR_*`` settings that trust it.

    Args:
        orders: TPC-H orders the run will submit (the first ``orders`` by order key).
        processes: devhost processes (see :func:`demo.fleet.devhost_specs`).
        faults: Faults the demo services inject.
        run_dir: Where the children's logs go.
        extra_env: Variables added to every devhost process's environment (over the demo's, and its
            workflow, :data:`demo.config.DEMO_WORKFLOW_SETTINGS`).
        client_ids: The clients registered (``CLIENTS``), each with its default queues.
        process_env: Variables of one devhost process only, by its name (``devhost-agents``), over the
            others.
        host_module: What the devhost processes run with ``python -m`` (see :class:`demo.fleet.Fleet`).

    Raises:
        RuntimeError: a child process did not start.
    """
    data_dir = ensure_dataset(DATA_DIR)
    divisor = stock_divisor_for(orders)
    catalog = load_catalog(data_dir, orders=orders, stock_divisor=divisor)
    with ExitStack() as stack:
        emulators = start_local_emulators()
        stack.callback(emulators.stop)
        endpoints = emulators.endpoints
        services = start_demo_services(
            data_dir, run_dir, orders=orders, stock_divisor=divisor, faults=faults, refunds=DEMO_REFUND_POLICY
        )
        stack.callback(services.stop)
        services_url = services.ready_line.rsplit(" ", 1)[-1]
        env = host_env(endpoints, services_url)
        issuer = LocalIssuer(ensure_signing_key())
        api_port = free_port()
        env.update(issuer.operator_settings(f"http://127.0.0.1:{api_port}{issuer.jwks_path}"))
        env.update(DEMO_WORKFLOW_SETTINGS)
        env.update(extra_env or {})
        env["CLIENTS"] = json.dumps([{"id": client_id} for client_id in client_ids])
        registered = tuple(Settings.load(env).clients.clients())
        # Create the containers once, before several hosts race to.
        stores = CosmosStores.connect(endpoints.cosmos_endpoint, key=endpoints.cosmos_key, verify_tls=False)
        stack.callback(stores.close)
        specs = [
            replace(spec, env=tuple(sorted((process_env or {}).get(spec.name, {}).items())))
            for spec in devhost_specs(processes, api_port=api_port)
        ]
        fleet = Fleet(specs, env, run_dir, host_module=host_module)
        stack.callback(fleet.stop)
        api_url = f"http://127.0.0.1:{api_port}"
        yield DemoSystem(
            run_dir, catalog, endpoints, services_url, env, stores, fleet, registered, api_url, emulators
        )


@dataclass
class Settling:
    """How submitting and settling went.

    Attributes:
        submitted: Orders submitted.
        timed_out: The orders had not all settled within the budget.
        elapsed_s: Seconds from the first submission to the last order settled (or to the budget's end).
        owners: The reply queue of the client that submitted each order, by order id.
    """

    submitted: int
    timed_out: bool
    elapsed_s: float
    owners: dict[str, str]


def submit_and_settle(
    system: DemoTarget,
    clients: Sequence[OrderflowClient],
    *,
    budget_s: float,
    outstanding: int = DEMO_OUTSTANDING,
    status: Callable[[], str] | None = None,
    others: Sequence[str] = (),
    settled_count: Callable[[int], int] | None = None,
) -> Settling:
    """Submit the catalog's orders through ``clients`` (in turn) and wait, with progress bars, until they
    have all settled or ``budget_s`` seconds pass. Every client's reply queue is drained meanwhile. The
    clients only submit: none ever cancels an order.

    Args:
        system: The running system.
        clients: The clients; order *i* goes through client *i mod len(clients)*.
        budget_s: Seconds to wait for the orders to settle.
        outstanding: Most orders kept submitted but not yet settled (client-side flow control).
        status: Called every tick for a line shown under the progress bars (what the chaos is doing).
        others: Ids of registered clients whose orders are not the catalog's (the chaos intruder): their
            settled orders are not counted.
        settled_count: How many of the catalog's orders have settled, given the last count (default:
            the store's settled records of every client but ``others``, counted every 2 s).
    """
    if not clients:
        raise ValueError("at least one client is needed")
    stores = system.stores
    count = settled_count or (lambda last: _count_settled(stores.state, others, last))
    started = time.monotonic()
    owners: dict[str, str] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        submitting = progress.add_task("submitting", total=len(system.catalog.orders))
        settling = progress.add_task("settled", total=len(system.catalog.orders))
        # The clients keep at most ``outstanding`` orders unsettled, as a well-behaved client would: a
        # burst of thousands queued at once makes every step wait in queues past its deadline, and
        # measures recovery instead of processing.
        pending = list(system.catalog.orders)
        submitted = 0
        deadline = started + budget_s
        settled = 0
        next_count = 0.0
        timed_out = True
        while time.monotonic() < deadline:
            if time.monotonic() >= next_count:
                # A COUNT scans the store on cosmosdb-server: every 2 s is plenty for a progress bar.
                settled = count(settled)
                next_count = time.monotonic() + 2.0
            submitted += _submit_some(clients, pending, owners, room=outstanding - (submitted - settled))
            progress.update(submitting, completed=submitted)
            progress.update(settling, completed=settled)
            if status is not None:
                progress.update(settling, description=f"settled  {status()}")
            _drain_replies(clients)
            if not pending and settled >= submitted:
                timed_out = False
                break
            time.sleep(0.5)
    return Settling(
        submitted=len(system.catalog.orders) - len(pending),
        timed_out=timed_out,
        elapsed_s=time.monotonic() - started,
        owners=owners,
    )


def _count_settled(states: StateStore, others: Sequence[str], last: int) -> int:
    """:func:`catalog_settled`, or ``last`` while the store is unreachable (a chaos outage)."""
    try:
        return catalog_settled(states, others)
    except (TransientError, AzureError):
        return last


def _submit_some(
    clients: Sequence[OrderflowClient], pending: list[DemoOrder], owners: dict[str, str], *, room: int
) -> int:
    """Submit up to ``room`` of ``pending`` (taken from its front), the next client in turn for each
    (by the count in ``owners``); returns how many. A send the queue refuses as transient (a chaos
    outage) stops the batch: that order stays first in ``pending``, and is sent again next tick under the
    same id (a submission that did reach the queue is a duplicate its consumer drops)."""
    sent = 0
    while pending and sent < room:
        client = clients[len(owners) % len(clients)]
        try:
            order_id = client.submit(pending[0].to_submission(client.reply_queue))
        except TransientError:
            break
        pending.pop(0)
        owners[order_id] = client.reply_queue
        sent += 1
    return sent


def _drain_replies(clients: Sequence[OrderflowClient]) -> None:
    """Receive every client's replies there are now (replies arrive faster than one batch per tick);
    a client whose queue is unreachable (a chaos outage) is read next tick."""
    for client in clients:
        try:
            while client.poll():
                pass
        except TransientError:
            continue


def catalog_settled(states: StateStore, others: Sequence[str] = ()) -> int:
    """Settled orders of every client but ``others`` (client ids), by COUNT queries."""
    settled = StateQuery(process_states=tuple(SETTLED_STATES))
    return states.count(settled) - sum(states.count(replace(settled, client_id=c)) for c in others)


def await_final_replies(
    clients: Sequence[OrderflowClient], owners: Mapping[str, str], *, timeout_s: float
) -> None:
    """Poll every client until each has a final reply for every order it submitted, or ``timeout_s``
    seconds pass (one deadline for all clients)."""
    deadline = time.monotonic() + timeout_s
    for client in clients:
        mine = [oid for oid, queue in owners.items() if queue == client.reply_queue]
        client.wait_for(mine, timeout_s=max(0.0, deadline - time.monotonic()))


def missing_final_replies(
    records: Mapping[str, StateRecord], owners: Mapping[str, str], clients: Sequence[OrderflowClient]
) -> int:
    """Settled orders whose final status did not reach the client that submitted them."""
    latest = {client.reply_queue: client.replies.latest for client in clients}
    missing = 0
    for order_id, record in records.items():
        if record.process_state not in SETTLED_STATES:
            continue
        reply = latest.get(owners.get(order_id, ""), {}).get(order_id)
        if reply is None or reply.status not in FINAL_STATUSES:
            missing += 1
    return missing

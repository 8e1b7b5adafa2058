"""``orderflow demo --azure`` (``make demo-azure``): the demo's TPC-H orders against a running deployment,
reported as ``make demo`` reports them.

The deployment is named by its settings, as azd leaves them (``azd env get-values``, or
``.azure/<environment>/.env``), or as a flat JSON object (``--env-file``): ``CLIENTS`` (the registered
client whose queues the orders go to), the queues, the state store and the demo services. The transport
follows the settings, so the same code runs on Azure and on the local host:

* the client's two queues: on Azure, Service Bus at ``SERVICEBUS__fullyQualifiedNamespace`` with
  ``DefaultAzureCredential`` (the deployer holds Data Sender on the inbound queue and Data Receiver on the
  reply queue); locally, ``STORAGE_CONNECTION_STRING``'s account, through a SAS for each of the two
  queues, as a client holds them;
* the state records: ``COSMOS_ENDPOINT`` with the same credential on Azure (Cosmos DB Data Reader, which
  ``GRANT_DEPLOYER_READ_ACCESS`` grants), with ``COSMOS_KEY`` locally;
* the demo services' audit and facts: ``DEMO_SERVICES_ENDPOINT``, with bearer tokens for
  ``DEMO_SERVICES_SCOPE`` on Azure (the app role ``Orderflow.DemoDriver``), without a token locally
  (their reporting routes listen on loopback only).

Each run's order ids carry a tag of their own (``tpch-1-<tag>``): a deployment outlives runs, and an order
id submitted again would be the earlier order, not a new one.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Generator, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from demo.config import DATA_DIR, REPORT_PATH, console, settle_budget_s
from demo.outcome import INVARIANTS, build_report, print_summary, write_report
from demo.system import submit_and_settle
from demo.tpch import DEFAULT_STOCK_DIVISOR, Catalog, ensure_dataset, load_catalog
from orderflow.clients import RegisteredClient
from orderflow.settings import Settings
from orderflow.stores.base import StateStore
from orderflow.stores.cosmos import CosmosStores
from orderflow_client.client import OrderflowClient

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

AZURE_CLOCK_SLACK_S = 2.0
"""Seconds the demo services' clock and the hosts' stamps of the store's time may differ on Azure (the
template's ``CLOCK_SKEW_TOLERANCE_S``): the attempts check counts a time later only beyond it."""

_LINE = re.compile(r'^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(?:"((?:[^"\\]|\\.)*)"|(.*))\s*$')


def parse_env_text(text: str) -> dict[str, str]:
    """The settings of ``azd env get-values`` output (``NAME="value"`` lines, ``\\"`` and ``\\\\``
    escaped), or of a flat JSON object (``local.settings.json``'s ``Values`` too).

    Raises:
        ValueError: a line is neither blank, a comment nor ``NAME=value``; or JSON that is no object.
    """
    if text.lstrip().startswith("{"):
        values = json.loads(text)
        found = values.get("Values", values) if isinstance(values, dict) else None
        if not isinstance(found, dict):
            raise ValueError("not a JSON object of settings")
        return {str(k): str(v) for k, v in found.items()}
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"line {number} is not NAME=value")
        quoted, bare = match.group(2), match.group(3)
        env[match.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare.strip()
    return env


def azd_env_file(root: Path, environment: str | None = None) -> Path:
    """``.azure/<environment>/.env`` under ``root``: the environment named, else azd's default one
    (``.azure/config.json``'s ``defaultEnvironment``).

    Raises:
        FileNotFoundError: there is no azd environment (``azd env new`` / ``azd up`` first).
    """
    if environment is None:
        config = root / ".azure" / "config.json"
        if not config.is_file():
            raise FileNotFoundError(f"no azd environment: {config} is missing (azd up first)")
        environment = str(json.loads(config.read_text(encoding="utf-8")).get("defaultEnvironment") or "")
    path = root / ".azure" / environment / ".env"
    if not environment or not path.is_file():
        raise FileNotFoundError(f"no azd environment file {path} (azd up first)")
    return path


class BearerAuth(httpx.Auth):
    """An ``Authorization: Bearer`` header from ``credential`` for ``scope`` on every request (azure-identity
    caches the token and refreshes it before it expires)."""

    def __init__(self, credential: TokenCredential, scope: str) -> None:
        self._credential = credential
        self._scope = scope

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Sign ``request``."""
        request.headers["Authorization"] = f"Bearer {self._credential.get_token(self._scope).token}"
        yield request


@dataclass
class _Stores:
    state: StateStore


@dataclass
class Deployment:
    """A running deployment as the demo drivers read it (:func:`demo.system.submit_and_settle`,
    :func:`demo.outcome.build_report`).

    Attributes:
        catalog: The run's TPC-H orders (ids tagged per run).
        stores: ``.state``: the state store, read for the settled count and the report.
        services_url: The demo services' base URL.
        services_auth: How their reporting routes are called (None: no token, loopback only).
        client: The registered client's SDK, on its two queues.
    """

    catalog: Catalog
    stores: _Stores
    services_url: str
    services_auth: httpx.Auth | None
    client: OrderflowClient


def tagged(catalog: Catalog, tag: str) -> Catalog:
    """``catalog`` with every order id suffixed ``-<tag>``."""
    orders = [replace(order, order_id=f"{order.order_id}-{tag}") for order in catalog.orders]
    return replace(catalog, orders=orders)


def _client(settings: Settings, client_id: str | None) -> RegisteredClient:
    clients = list(settings.clients.clients())
    chosen = [c for c in clients if client_id in (None, c.client_id)]
    if client_id is not None and not chosen:
        raise ValueError(f"--client {client_id!r} is not a registered client (CLIENTS)")
    if len(chosen) != 1:
        raise ValueError(f"--client is needed: CLIENTS registers {len(clients)} clients")
    return chosen[0]


def deployment_settings(
    env: Mapping[str, str], client_id: str | None = None
) -> tuple[Settings, RegisteredClient, str]:
    """The settings ``env`` holds, the registered client the run submits as, and the demo services' URL.

    Raises:
        ValueError: a setting is malformed, ``client_id`` is not registered (or is needed among several),
            or ``DEMO_SERVICES_ENDPOINT`` is not set.
    """
    settings = Settings.load(dict(env))
    client = _client(settings, client_id)
    services_url = env.get("DEMO_SERVICES_ENDPOINT", "").strip().rstrip("/")
    if not services_url:
        raise ValueError("DEMO_SERVICES_ENDPOINT is not set: deploy with DEPLOY_DEMO_SERVICES=true")
    return settings, client, services_url


def _azure_credential() -> TokenCredential:
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415 (only a deployment needs it)

    return DefaultAzureCredential(exclude_managed_identity_credential=True)


@contextmanager
def connect(
    env: Mapping[str, str], catalog: Catalog, *, client_id: str | None = None
) -> Iterator[Deployment]:
    """The deployment ``env`` names, connected as the module docstring's table says; closed on exit.

    Raises:
        ValueError: a setting the run needs is missing (named), or ``client_id`` is not registered.
    """
    settings, client, services_url = deployment_settings(env, client_id)
    local = bool(settings.connections.STORAGE_CONNECTION_STRING.strip())
    credential = None if local and settings.connections.COSMOS_KEY else _azure_credential()
    with ExitStack() as stack:
        if local:
            from devhost.client_credentials import issue_client_credentials  # noqa: PLC0415 (local only)

            connection = settings.connections.STORAGE_CONNECTION_STRING
            queues: Any = issue_client_credentials(connection, client).queues()
        else:
            queues = _service_bus(settings, credential)
        stack.callback(queues.close)
        stores = _state_store(settings, credential)
        stack.callback(stores.close)
        scope = env.get("DEMO_SERVICES_SCOPE", "").strip()
        auth = BearerAuth(credential, scope) if scope and credential is not None else None
        sdk = OrderflowClient(queues, reply_queue=client.reply_queue, orders_queue=client.inbound_queue)
        yield Deployment(catalog, _Stores(stores.state), services_url, auth, sdk)


def _service_bus(settings: Settings, credential: TokenCredential | None) -> Any:
    from orderflow.queues.servicebus import ServiceBusQueueFactory  # noqa: PLC0415 (Azure only)

    namespace = settings.connections.SERVICEBUS__fullyQualifiedNamespace.strip()
    if not namespace or credential is None:
        raise ValueError("SERVICEBUS__fullyQualifiedNamespace (or STORAGE_CONNECTION_STRING) is not set")
    # No administration client: the deployer holds the client's two data roles, not Manage.
    return ServiceBusQueueFactory.from_namespace(namespace, credential, admin=False)


def _state_store(settings: Settings, credential: TokenCredential | None) -> CosmosStores:
    connections = settings.connections
    if connections.COSMOS_KEY:
        from devhost.wiring import connect_stores  # noqa: PLC0415 (the local emulator's key)

        return connect_stores(connections)
    if not connections.COSMOS_ENDPOINT or credential is None:
        raise ValueError("COSMOS_ENDPOINT is not set")
    return CosmosStores.connect(
        connections.COSMOS_ENDPOINT, credential=credential, database=connections.COSMOS_DATABASE
    )


def run_azure_demo(
    env: Mapping[str, str],
    *,
    orders: int,
    timeout_s: float | None = None,
    client_id: str | None = None,
    report_path: Path = REPORT_PATH,
    tag: str | None = None,
) -> dict[str, Any]:
    """Submit ``orders`` TPC-H orders to the deployment ``env`` names, watch them settle, print and write
    the report (the keys of ``make demo``'s; ``processes`` and ``kills`` are 0: the platform runs the
    hosts). Returns the report.

    Raises:
        ValueError: a setting is missing (:func:`connect`).
        OrderflowError: a queue or store could not be reached.
    """
    deployment_settings(env, client_id)  # refused before the data set is generated
    tag = tag or secrets.token_hex(3)
    catalog = tagged(
        load_catalog(ensure_dataset(DATA_DIR), orders=orders, stock_divisor=DEFAULT_STOCK_DIVISOR), tag
    )
    console.print(f"[bold]orderflow demo --azure[/bold]: {orders} TPC-H orders, run tag {tag}")
    with connect(env, catalog, client_id=client_id) as target:
        console.print(
            f"client {target.client.orders_queue} -> {target.client.reply_queue}; "
            f"demo services {target.services_url}"
        )
        # Settled as the client sees it, by final replies on its reply queue: the store holds other runs.
        ids = [order.order_id for order in catalog.orders]
        settling = submit_and_settle(
            target,
            [target.client],
            budget_s=settle_budget_s(orders, timeout_s),
            settled_count=lambda _: target.client.replies.settled(ids),
        )
        slack = AZURE_CLOCK_SLACK_S if target.services_auth is not None else 1.0
        report, mismatched = build_report(
            target, [target.client], settling, processes=0, kills=0, clock_slack_s=slack
        )
    write_report(report, report_path)
    print_summary(report, mismatched, title="orderflow demo --azure")
    console.print(f"report written to {report_path}")
    return report


def failed_invariants(report: Mapping[str, Any]) -> list[str]:
    """The report's invariants (:data:`demo.outcome.INVARIANTS`) that are not 0."""
    return [key for key in INVARIANTS if report.get(key)]

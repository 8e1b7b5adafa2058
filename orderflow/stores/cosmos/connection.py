"""Connecting to a Cosmos DB account: the client, the database and its containers (created when
missing with a key), and the stores over them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from azure.core.credentials import TokenCredential
from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.cosmos import CosmosClient, DatabaseProxy, PartitionKey

from orderflow.alerts import ALERT_TTL_S, ALERTS_CONTAINER, ALERTS_PARTITION_KEY_PATH
from orderflow.sdk_transport import shared_transport
from orderflow.stores.cosmos.alerts import CosmosAlertStore
from orderflow.stores.cosmos.container import translated
from orderflow.stores.cosmos.documents import CosmosBreakerStore, CosmosOrderStore
from orderflow.stores.cosmos.state import CosmosStateStore

logger = logging.getLogger("orderflow.stores.cosmos")  # the package's one logger, as filters name it

PARTITION_KEY_PATH = "/orderId"
"""Partition key path of every container (docs/design.md §2)."""

HISTORY_CONTAINER = "orderhistory"
"""Container of the timeline entries moved out of state records (append-only, partition key
``/orderId``; :mod:`orderflow.timeline`)."""
BREAKER_PARTITION_KEY_PATH = "/id"
"""Partition key path of the breakers container: a document per dependency, read by its id."""


@dataclass
class CosmosStores:
    """Both Cosmos DB stores over one client; close it (or use ``with``) when done.

    Attributes:
        client: The SDK client, shared by both stores.
        database: The database holding both containers.
        state: The state store (``orderstate`` container by default).
        orders: The order store (``orders`` container by default).
        breakers: The circuit breakers' documents (``breakers`` container by default).
        alerts: The alerts and sweep documents (``alerts`` container by default).
    """

    client: CosmosClient
    database: DatabaseProxy
    state: CosmosStateStore
    orders: CosmosOrderStore
    breakers: CosmosBreakerStore
    alerts: CosmosAlertStore

    @classmethod
    def connect(
        cls,
        endpoint: str,
        *,
        key: str | None = None,
        credential: TokenCredential | None = None,
        database: str = "orderflow",
        verify_tls: bool = True,
        state_container: str = "orderstate",
        orders_container: str = "orders",
        breakers_container: str = "breakers",
        history_container: str = HISTORY_CONTAINER,
        alerts_container: str = ALERTS_CONTAINER,
        connection_timeout: float | None = None,
        read_timeout: float | None = None,
        operation_timeout: float | None = None,
        create_if_missing: bool | None = None,
        transport: HttpTransport[HttpRequest, HttpResponse] | None = None,
    ) -> CosmosStores:
        """Connect to a Cosmos DB account and open (by default with a key: create) both containers.

        Args:
            endpoint: Account endpoint, ``https://...``.
            key: Account key (local emulator). Exactly one of ``key`` and ``credential`` is required.
            credential: An Entra ID token credential (``DefaultAzureCredential`` or any
                ``TokenCredential``) for Azure.
            database: Database id.
            verify_tls: Verify the server certificate; False only for the local emulator's
                self-signed certificate.
            state_container: Container id of the state records.
            orders_container: Container id of the order documents.
            breakers_container: Container id of the circuit breakers' documents (partition key ``/id``).
            history_container: Container id of the timeline entries moved out of state records.
            alerts_container: Container id of the alerts and sweep documents (partition key ``/day``,
                default time-to-live :data:`orderflow.alerts.ALERT_TTL_S`).
            connection_timeout: Seconds to wait for a connection (SDK default when None).
            read_timeout: Seconds to wait for an answer on an open connection (SDK default, 65 s, when
                None). Without it a hung (or SIGSTOPped) server holds a point read for over a minute;
                with 2 s the SDK gives up, after its own retries, in about 10 s (measured locally).
            operation_timeout: Seconds one operation may take in all, the SDK's retries included
                (``STORE_OPERATION_TIMEOUT_S``); then it raises :class:`TransientError`. None: no bound
                beyond the two above.
            create_if_missing: Create the database and containers (partition key ``/orderId``) if
                absent. Defaults to True with a key and False with a token credential, because Cosmos
                DB's data-plane RBAC cannot create databases or containers (infrastructure does).
            transport: The HTTP transport under the SDK's pipeline (the local host passes a lean one for
                a loopback emulator, :mod:`devhost.http_transport`); None: the process's shared one
                (:func:`orderflow.sdk_transport.shared_transport`: azure-core's ``RequestsTransport`` over
                one session that reads the environment's proxies and CA bundle once).

        Returns:
            The connected stores.

        Raises:
            ValueError: not exactly one of ``key`` and ``credential`` was given.
            TransientError: the account could not be reached.
            PermanentError: the account refused (for example 401/403).
        """
        if (key is None) == (credential is None):
            raise ValueError("pass exactly one of key= and credential=")
        options: dict[str, Any] = {}
        if not verify_tls:
            options["connection_verify"] = False
        if connection_timeout is not None:
            options["connection_timeout"] = connection_timeout
        if read_timeout is not None:
            options["read_timeout"] = read_timeout
        options["transport"] = transport if transport is not None else shared_transport()
        if create_if_missing is None:
            create_if_missing = key is not None
        auth: str | TokenCredential
        if key is not None:
            auth = key
        else:
            assert credential is not None  # checked above
            auth = credential
        with translated("Cosmos DB account", endpoint):
            client = CosmosClient(endpoint, credential=auth, **options)
            try:
                if create_if_missing:
                    db = client.create_database_if_not_exists(id=database)
                    pk = PartitionKey(path=PARTITION_KEY_PATH)
                    state = db.create_container_if_not_exists(id=state_container, partition_key=pk)
                    orders = db.create_container_if_not_exists(id=orders_container, partition_key=pk)
                    breakers = db.create_container_if_not_exists(
                        id=breakers_container, partition_key=PartitionKey(path=BREAKER_PARTITION_KEY_PATH)
                    )
                    history = db.create_container_if_not_exists(id=history_container, partition_key=pk)
                    alerts = db.create_container_if_not_exists(
                        id=alerts_container,
                        partition_key=PartitionKey(path=ALERTS_PARTITION_KEY_PATH),
                        default_ttl=ALERT_TTL_S,
                    )
                else:
                    db = client.get_database_client(database)
                    state = db.get_container_client(state_container)
                    orders = db.get_container_client(orders_container)
                    breakers = db.get_container_client(breakers_container)
                    history = db.get_container_client(history_container)
                    alerts = db.get_container_client(alerts_container)
            except BaseException:
                client.close()
                raise
        logger.info("connected to Cosmos DB database %s at %s", database, endpoint)
        return cls(
            client,
            db,
            CosmosStateStore(state, history=history, operation_timeout_s=operation_timeout),
            CosmosOrderStore(orders, operation_timeout_s=operation_timeout),
            CosmosBreakerStore(breakers, operation_timeout_s=operation_timeout),
            CosmosAlertStore(alerts, operation_timeout_s=operation_timeout),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(database={self.database.id!r})"

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    def __enter__(self) -> CosmosStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

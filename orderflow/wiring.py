"""Build the real adapters from :class:`Settings`: one place that turns settings into connections."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict

from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport

from orderflow.queues.servicebus import ServiceBusQueueFactory
from orderflow.settings import Settings, on_azure
from orderflow.settings.azure import check_azure
from orderflow.stores.cosmos import CosmosStores

if TYPE_CHECKING:
    from azure.identity import DefaultAzureCredential


class StoreTimeouts(TypedDict):
    """The timeout keywords of :meth:`CosmosStores.connect`, in seconds."""

    connection_timeout: float
    read_timeout: float
    operation_timeout: float


def store_timeouts(settings: Settings) -> StoreTimeouts:
    """The keyword arguments of :meth:`CosmosStores.connect` that bound every store call:
    ``STORE_CONNECTION_TIMEOUT_S``, ``STORE_READ_TIMEOUT_S`` and ``STORE_OPERATION_TIMEOUT_S``."""
    return StoreTimeouts(
        connection_timeout=settings.connections.STORE_CONNECTION_TIMEOUT_S,
        read_timeout=settings.connections.STORE_READ_TIMEOUT_S,
        operation_timeout=settings.connections.STORE_OPERATION_TIMEOUT_S,
    )


def connect_stores(
    settings: Settings, *, transport: HttpTransport[HttpRequest, HttpResponse] | None = None
) -> CosmosStores:
    """The Cosmos DB state and order stores from ``COSMOS_ENDPOINT`` / ``COSMOS_KEY`` (an emulator's key:
    the database and containers are created when missing), over ``transport`` (None: azure-core's
    default; see :meth:`CosmosStores.connect`).

    Raises:
        ValueError: the endpoint or key is empty (managed identity comes with the Azure host).
    """
    if not settings.connections.COSMOS_ENDPOINT or not settings.connections.COSMOS_KEY:
        raise ValueError("COSMOS_ENDPOINT and COSMOS_KEY must be set")
    if not settings.connections.COSMOS_VERIFY_TLS:
        # Verification is off by the operator's choice (the emulator's self-signed certificate):
        # urllib3 would otherwise warn on every request.
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    return CosmosStores.connect(
        settings.connections.COSMOS_ENDPOINT,
        key=settings.connections.COSMOS_KEY,
        database=settings.connections.COSMOS_DATABASE,
        verify_tls=settings.connections.COSMOS_VERIFY_TLS,
        transport=transport,
        **store_timeouts(settings),
    )


def azure_credential(settings: Settings) -> DefaultAzureCredential:
    """The ``DefaultAzureCredential`` of orderflow's own clients, with the user-assigned identity named.

    ``SERVICEBUS__clientId`` first (the identity the host's SERVICEBUS connection uses), then
    ``AZURE_CLIENT_ID``. With neither, azure-identity uses the system-assigned identity on Azure and
    the developer's sign-in locally. It is a ``TokenCredential`` for the Azure SDKs and, through
    ``get_token_info``, the agents' :class:`orderflow.bindings.TokenSource`.
    """
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415 (only identity connections need it)

    client_id = (
        settings.connections.SERVICEBUS__clientId.strip() or settings.connections.AZURE_CLIENT_ID.strip()
    )
    if client_id:
        return DefaultAzureCredential(managed_identity_client_id=client_id)
    # Passing None would hide an AZURE_CLIENT_ID that only the process environment holds.
    return DefaultAzureCredential()


def connect_azure(
    settings: Settings, *, environ: Mapping[str, str] | None = None
) -> tuple[CosmosStores, ServiceBusQueueFactory]:
    """The Functions app's adapters: Cosmos DB for both stores, Service Bus for every queue.

    Identity by default, one ``DefaultAzureCredential`` (:func:`azure_credential`) for both. An
    emulator's secret only where the settings name one: ``COSMOS_KEY`` for Cosmos DB (containers are
    then created) and ``SERVICEBUS`` for Service Bus, which wins over
    ``SERVICEBUS__fullyQualifiedNamespace`` as it does for the Functions host's triggers. On Azure
    (:func:`~orderflow.settings.on_azure` of ``environ``, default ``os.environ``) the settings are
    checked first, so only identity gets through.

    Raises:
        UnsafeAzureSetting: on Azure, a setting with no safe value there.
        ValueError: ``COSMOS_ENDPOINT``, or both ``SERVICEBUS`` and its namespace, are empty.
    """
    if on_azure(environ):
        check_azure(settings)
    connection_string = settings.connections.SERVICEBUS.strip()
    namespace = settings.connections.SERVICEBUS__fullyQualifiedNamespace.strip()
    if not settings.connections.COSMOS_ENDPOINT.strip():
        raise ValueError("COSMOS_ENDPOINT is not set")
    if not connection_string and not namespace:
        raise ValueError("SERVICEBUS__fullyQualifiedNamespace (or SERVICEBUS, for the emulator) is not set")
    needs_identity = not settings.connections.COSMOS_KEY.strip() or not connection_string
    credential = azure_credential(settings) if needs_identity else None
    if settings.connections.COSMOS_KEY.strip():
        stores = connect_stores(settings)
    else:
        assert credential is not None
        # Data-plane RBAC cannot create databases or containers: infrastructure does.
        stores = CosmosStores.connect(
            settings.connections.COSMOS_ENDPOINT,
            credential=credential,
            database=settings.connections.COSMOS_DATABASE,
            verify_tls=settings.connections.COSMOS_VERIFY_TLS,
            **store_timeouts(settings),
        )
    try:
        if connection_string:
            # No administration client: azure-servicebus's speaks https only, the emulator no TLS.
            queues = ServiceBusQueueFactory.from_connection_string(
                connection_string, send_timeout_s=settings.connections.QUEUE_READ_TIMEOUT_S
            )
        else:
            assert credential is not None
            queues = ServiceBusQueueFactory.from_namespace(
                namespace, credential, send_timeout_s=settings.connections.QUEUE_READ_TIMEOUT_S
            )
    except BaseException:
        stores.close()
        raise
    return stores, queues

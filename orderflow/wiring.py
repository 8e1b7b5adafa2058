"""Build the real adapters from the connections section: one place that turns settings into connections
(the Azure host adds its start-up policy: ``function_host.wiring.connect_azure``)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, TypedDict

from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport

from orderflow.settings import Connections
from orderflow.stores.cosmos import CosmosStores

if TYPE_CHECKING:
    from azure.identity import DefaultAzureCredential


class StoreTimeouts(TypedDict):
    """The timeout keywords of :meth:`CosmosStores.connect`, in seconds."""

    connection_timeout: float
    read_timeout: float
    operation_timeout: float


def store_timeouts(connections: Connections) -> StoreTimeouts:
    """The keyword arguments of :meth:`CosmosStores.connect` that bound every store call:
    ``STORE_CONNECTION_TIMEOUT_S``, ``STORE_READ_TIMEOUT_S`` and ``STORE_OPERATION_TIMEOUT_S``."""
    return StoreTimeouts(
        connection_timeout=connections.STORE_CONNECTION_TIMEOUT_S,
        read_timeout=connections.STORE_READ_TIMEOUT_S,
        operation_timeout=connections.STORE_OPERATION_TIMEOUT_S,
    )


def connect_stores(
    connections: Connections, *, transport: HttpTransport[HttpRequest, HttpResponse] | None = None
) -> CosmosStores:
    """The Cosmos DB state and order stores from ``COSMOS_ENDPOINT`` / ``COSMOS_KEY`` (an emulator's key:
    the database and containers are created when missing), over ``transport`` (None: the process's
    shared one; see :meth:`CosmosStores.connect`).

    Raises:
        ValueError: the endpoint or key is empty (managed identity comes with the Azure host).
    """
    if not connections.COSMOS_ENDPOINT or not connections.COSMOS_KEY:
        raise ValueError("COSMOS_ENDPOINT and COSMOS_KEY must be set")
    if not connections.COSMOS_VERIFY_TLS:
        # Verification is off by the operator's choice (the emulator's self-signed certificate):
        # urllib3 would otherwise warn on every request.
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    return CosmosStores.connect(
        connections.COSMOS_ENDPOINT,
        key=connections.COSMOS_KEY,
        database=connections.COSMOS_DATABASE,
        verify_tls=connections.COSMOS_VERIFY_TLS,
        transport=transport,
        **store_timeouts(connections),
    )


def azure_credential(connections: Connections) -> DefaultAzureCredential:
    """The ``DefaultAzureCredential`` of orderflow's own clients, with the user-assigned identity named.

    ``SERVICEBUS__clientId`` first (the identity the host's SERVICEBUS connection uses), then
    ``AZURE_CLIENT_ID``. With neither, azure-identity uses the system-assigned identity on Azure and
    the developer's sign-in locally. It is a ``TokenCredential`` for the Azure SDKs and, through
    ``get_token_info``, the agents' :class:`orderflow.bindings.TokenSource`.
    """
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415 (only identity connections need it)

    client_id = connections.SERVICEBUS__clientId.strip() or connections.AZURE_CLIENT_ID.strip()
    if client_id:
        return DefaultAzureCredential(managed_identity_client_id=client_id)
    # Passing None would hide an AZURE_CLIENT_ID that only the process environment holds.
    return DefaultAzureCredential()

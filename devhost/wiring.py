"""The local host's adapters from :class:`Settings`: Storage queues (Azurite) and the Cosmos DB
emulator's stores, each over the lean loopback transport (:mod:`devhost.http_transport`)."""

from __future__ import annotations

from devhost.http_transport import transport_for
from devhost.queues.factory import StorageQueueFactory
from orderflow import wiring
from orderflow.settings import Settings
from orderflow.stores.cosmos import CosmosStores


def connect_queues(settings: Settings) -> StorageQueueFactory:
    """Storage queues (Azurite locally) from ``STORAGE_CONNECTION_STRING``, with the
    ``QUEUE_CONNECTION_TIMEOUT_S`` and ``QUEUE_READ_TIMEOUT_S`` timeouts. Only the deployment's own
    queues are created on first use (:meth:`orderflow.settings.Clients.is_deployment_queue`).

    Raises:
        ValueError: the setting is empty.
    """
    if not settings.connections.STORAGE_CONNECTION_STRING:
        raise ValueError("STORAGE_CONNECTION_STRING is not set")
    return StorageQueueFactory.from_connection_string(
        settings.connections.STORAGE_CONNECTION_STRING,
        connection_timeout_s=settings.connections.QUEUE_CONNECTION_TIMEOUT_S,
        read_timeout_s=settings.connections.QUEUE_READ_TIMEOUT_S,
        creatable=settings.clients.is_deployment_queue,
    )


def connect_stores(settings: Settings) -> CosmosStores:
    """The Cosmos DB state and order stores as :func:`orderflow.wiring.connect_stores` connects them,
    over a :class:`~devhost.http_transport.LoopbackTransport` when ``COSMOS_ENDPOINT`` is a loopback
    emulator (azure-core's default transport otherwise).

    Raises:
        ValueError: the endpoint or key is empty.
    """
    transport = transport_for(
        settings.connections.COSMOS_ENDPOINT,
        connection_timeout_s=settings.connections.STORE_CONNECTION_TIMEOUT_S,
        read_timeout_s=settings.connections.STORE_READ_TIMEOUT_S,
    )
    return wiring.connect_stores(settings, transport=transport)

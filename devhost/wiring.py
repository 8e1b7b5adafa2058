"""The local host's adapters from the connections section: Storage queues (Azurite) and the Cosmos DB
emulator's stores, each over the lean loopback transport (:mod:`devhost.http_transport`)."""

from __future__ import annotations

from devhost.http_transport import transport_for
from devhost.queues.factory import StorageQueueFactory
from orderflow import wiring
from orderflow.settings import Clients, Connections
from orderflow.stores.cosmos import CosmosStores


def connect_queues(connections: Connections, clients: Clients) -> StorageQueueFactory:
    """Storage queues (Azurite locally) from ``STORAGE_CONNECTION_STRING``, with the
    ``QUEUE_CONNECTION_TIMEOUT_S`` and ``QUEUE_READ_TIMEOUT_S`` timeouts. Only the deployment's own
    queues are created on first use (:meth:`orderflow.settings.Clients.is_deployment_queue`).

    Raises:
        ValueError: the setting is empty.
    """
    if not connections.STORAGE_CONNECTION_STRING:
        raise ValueError("STORAGE_CONNECTION_STRING is not set")
    return StorageQueueFactory.from_connection_string(
        connections.STORAGE_CONNECTION_STRING,
        connection_timeout_s=connections.QUEUE_CONNECTION_TIMEOUT_S,
        read_timeout_s=connections.QUEUE_READ_TIMEOUT_S,
        creatable=clients.is_deployment_queue,
    )


def connect_stores(connections: Connections) -> CosmosStores:
    """The Cosmos DB state and order stores as :func:`orderflow.wiring.connect_stores` connects them,
    over a :class:`~devhost.http_transport.LoopbackTransport` when ``COSMOS_ENDPOINT`` is a loopback
    emulator (the process's shared transport otherwise, :mod:`orderflow.sdk_transport`).

    Raises:
        ValueError: the endpoint or key is empty.
    """
    transport = transport_for(
        connections.COSMOS_ENDPOINT,
        connection_timeout_s=connections.STORE_CONNECTION_TIMEOUT_S,
        read_timeout_s=connections.STORE_READ_TIMEOUT_S,
    )
    return wiring.connect_stores(connections, transport=transport)

"""Build the real adapters from :class:`Settings`: one place that turns settings into connections."""

from __future__ import annotations

import warnings

from orderflow.queues.servicebus import ServiceBusQueueFactory
from orderflow.queues.storage import StorageQueueFactory
from orderflow.settings import Settings
from orderflow.stores.cosmos import CosmosStores


def connect_queues(settings: Settings) -> StorageQueueFactory:
    """Storage queues (Azurite locally) from ``STORAGE_CONNECTION_STRING``.

    Raises:
        ValueError: the setting is empty.
    """
    if not settings.STORAGE_CONNECTION_STRING:
        raise ValueError("STORAGE_CONNECTION_STRING is not set")
    return StorageQueueFactory.from_connection_string(settings.STORAGE_CONNECTION_STRING)


def connect_stores(settings: Settings) -> CosmosStores:
    """The Cosmos DB state and order stores from ``COSMOS_ENDPOINT`` / ``COSMOS_KEY``.

    Raises:
        ValueError: the endpoint or key is empty (managed identity comes with the Azure host).
    """
    if not settings.COSMOS_ENDPOINT or not settings.COSMOS_KEY:
        raise ValueError("COSMOS_ENDPOINT and COSMOS_KEY must be set")
    if not settings.COSMOS_VERIFY_TLS:
        # Verification is off by the operator's choice (the emulator's self-signed certificate):
        # urllib3 would otherwise warn on every request.
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    return CosmosStores.connect(
        settings.COSMOS_ENDPOINT,
        key=settings.COSMOS_KEY,
        database=settings.COSMOS_DATABASE,
        verify_tls=settings.COSMOS_VERIFY_TLS,
    )


def connect_azure(settings: Settings) -> tuple[CosmosStores, ServiceBusQueueFactory]:
    """The Azure adapters, with identity-based connections only (``DefaultAzureCredential``).

    Cosmos DB at ``COSMOS_ENDPOINT`` (data-plane RBAC; the containers come from infrastructure;
    ``COSMOS_KEY`` only for the emulator) and Service Bus at ``SERVICEBUS__fullyQualifiedNamespace``.

    Raises:
        ValueError: a required setting is empty.
    """
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415 (only the Azure host needs it)

    if not settings.COSMOS_ENDPOINT or not settings.SERVICEBUS__fullyQualifiedNamespace:
        raise ValueError("COSMOS_ENDPOINT and SERVICEBUS__fullyQualifiedNamespace must be set")
    credential = DefaultAzureCredential()
    # A key only for the Cosmos DB emulator; on Azure the account's local auth is disabled.
    stores = CosmosStores.connect(
        settings.COSMOS_ENDPOINT,
        key=settings.COSMOS_KEY or None,
        credential=None if settings.COSMOS_KEY else credential,
        database=settings.COSMOS_DATABASE,
        verify_tls=settings.COSMOS_VERIFY_TLS,
    )
    queues = ServiceBusQueueFactory.from_namespace(settings.SERVICEBUS__fullyQualifiedNamespace, credential)
    return stores, queues

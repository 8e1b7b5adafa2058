"""The connections section: where the stores and queues are, how orderflow authenticates to them, and
how long one call to either may take."""

from __future__ import annotations

import base64
import binascii

from pydantic import Field, field_validator

from orderflow.settings.base import Section


class Connections(Section):
    """Connections: the state store (Cosmos DB), the queues (Service Bus; Storage queues locally), the
    identity both are reached with, and the timeouts of one call to either. Read by the adapters."""

    STORAGE_CONNECTION_STRING: str = Field(
        "",
        description="Azure Storage connection string (local: Azurite, UseDevelopmentStorage=true or the "
        "devhost's). Queues and the supervisor lease of the local host and the CLI; the Functions app keeps "
        "no storage of its own, so it is refused on Azure.",
    )
    COSMOS_ENDPOINT: str = Field(
        "",
        description="Cosmos DB account endpoint, https (local: cosmosdb-server or the Cosmos DB emulator). "
        "Required; a loopback address is refused on Azure.",
    )
    COSMOS_KEY: str = Field(
        "",
        description="Cosmos DB account key, for an emulator only (its published key). Empty (default): "
        "managed identity with data-plane RBAC, where the containers must already exist. Refused on Azure.",
    )
    COSMOS_DATABASE: str = Field("orderflow", description="Cosmos DB database name.")
    COSMOS_VERIFY_TLS: bool = Field(
        True,
        description="Verify the Cosmos TLS certificate; false only for a local emulator's self-signed "
        "certificate (refused on Azure).",
    )
    SERVICEBUS: str = Field(
        "",
        description="Service Bus connection string of the SERVICEBUS connection, for the Service Bus "
        "emulator (Endpoint=sb://localhost;...;UseDevelopmentEmulator=true;). As for the Functions host, "
        "a non-blank value wins and SERVICEBUS__fullyQualifiedNamespace is not read. Empty (default): "
        "identity. Refused on Azure.",
    )
    SERVICEBUS__fullyQualifiedNamespace: str = Field(
        "",
        description="Service Bus namespace host name (<namespace>.servicebus.windows.net) of the "
        "identity-based SERVICEBUS connection, for the Functions triggers and orderflow's own client. "
        "Required on Azure.",
    )
    SERVICEBUS__credential: str = Field(
        "",
        description="'managedidentity' makes the host's SERVICEBUS connection use the user-assigned "
        "identity SERVICEBUS__clientId names. Empty (default): the system-assigned identity on Azure, "
        "your own sign-in locally. Read by the Functions host; on Azure orderflow refuses a client id "
        "without it.",
    )
    SERVICEBUS__clientId: str = Field(
        "",
        description="Client id of the user-assigned managed identity of the SERVICEBUS connection; "
        "orderflow's own credential uses it too, before AZURE_CLIENT_ID. Empty (default): none.",
    )
    AZURE_CLIENT_ID: str = Field(
        "",
        description="Client id of the user-assigned managed identity DefaultAzureCredential uses (Cosmos DB "
        "and Service Bus) when SERVICEBUS__clientId is empty. Empty (default): the system-assigned identity.",
    )
    STORE_CONNECTION_TIMEOUT_S: float = Field(
        2.0,
        gt=0,
        description="Seconds the Cosmos DB client waits to open a connection (the SDK's own default is 5). "
        "At most STORE_OPERATION_TIMEOUT_S.",
    )
    STORE_READ_TIMEOUT_S: float = Field(
        2.0,
        gt=0,
        description="Seconds the Cosmos DB client waits for an answer on an open connection (the SDK's own "
        "default is 65: a hung store would hold a loop for over a minute). At most "
        "STORE_OPERATION_TIMEOUT_S.",
    )
    STORE_OPERATION_TIMEOUT_S: float = Field(
        2.5,
        gt=0,
        description="Seconds one store operation may take in all, the SDK's own retries included (its "
        "absolute timeout); then it fails as transient and the caller's loop retries. Must be shorter than "
        "STEP_TIMEOUT_S, CLAIM_TIMEOUT_S and SCAN_MAX_S, the deadlines the roles that call the store work "
        "to; a refusal at start-up says which.",
    )
    QUEUE_CONNECTION_TIMEOUT_S: float = Field(
        2.0,
        gt=0,
        description="Seconds the Storage queue client (Azurite locally) waits to open a connection.",
    )
    QUEUE_READ_TIMEOUT_S: float = Field(
        2.5,
        gt=0,
        description="Seconds a queue operation waits for the service's answer: the Storage queue client's "
        "read timeout locally, the Service Bus send timeout on Azure. Must be shorter than STEP_TIMEOUT_S "
        "and than half of QUEUE_LOCK_S (a lock renewal, sent when half the lock is left, must return "
        "before the lock runs out).",
    )

    @field_validator("COSMOS_KEY")
    @classmethod
    def _cosmos_key_is_base64(cls, key: str) -> str:
        # Found here, for every host and the CLI, not as the SDK's bare "Incorrect padding" on the first
        # request. The message never holds the key: it is a secret.
        if key.strip():
            try:
                base64.b64decode(key.strip(), validate=True)
            except binascii.Error:
                raise ValueError(
                    "should be base64: the Cosmos DB account key as the portal or the emulator gives it"
                ) from None
        return key

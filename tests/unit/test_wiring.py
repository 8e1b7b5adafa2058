"""The Functions app's clients, built by ``connect_azure`` at the SDK boundary: real SDK clients, no network.

The azure-servicebus ``ServiceBusClient`` opens no connection until it is used, so it is built as it
is. The azure-cosmos ``CosmosClient`` reads the account on construction, so its HTTP transport is a
recording stand-in that answers with a minimal account and resource: the requests it sees (and the
``Authorization`` header the SDK signed each with) are what a Cosmos DB emulator or account would
see. ``DefaultAzureCredential`` is the real class, with only its token handed out locally, so no
credential source (managed identity endpoint, Azure CLI) is ever asked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import azure.identity
import pytest
import requests
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.pipeline.transport import HttpRequest, HttpTransport, RequestsTransportResponse
from azure.cosmos import CosmosClient
from azure.servicebus import ServiceBusClient
from azure.servicebus._base_handler import ServiceBusSharedKeyCredential

import orderflow.queues.servicebus.factory as servicebus_adapter
import orderflow.stores.cosmos.connection as cosmos_adapter
from demo.services.bindings import demo_bindings_json
from devhost.lease.blob import LeaderLease
from devhost.settings import LocalSettings
from devhost.wiring import connect_queues
from function_host.wiring import connect_azure
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting

pytestmark = pytest.mark.unit

COSMOS_EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)
REPO = Path(__file__).resolve().parents[2]
EMULATORS: dict[str, str] = json.loads((REPO / "local.settings.example.json").read_text(encoding="utf-8"))[
    "Values"
]
"""The example settings, ``func start`` against docker-compose.yml's emulators: the Cosmos DB emulator's
published key, the Service Bus emulator's connection string, Azurite for the host's task hub."""

CLIENT_ID = "6d1f0b9e-0000-4000-8000-000000000001"
OTHER_CLIENT_ID = "6d1f0b9e-0000-4000-8000-000000000002"
IDENTITY = {
    "COSMOS_ENDPOINT": "https://orderflow-cosmos.documents.azure.com:443/",
    "SERVICEBUS__fullyQualifiedNamespace": "orderflow-bus.servicebus.windows.net",
    "SERVICE_BINDINGS": demo_bindings_json("https://orderflow-services.azurewebsites.net"),
}
"""Azure settings with a system-assigned identity."""

ON_AZURE = {"WEBSITE_SITE_NAME": "orderflow-func", "WEBSITE_INSTANCE_ID": "8ef3a1c0d6"}
LOCAL: dict[str, str] = {}


# --- recording stand-ins at the SDK boundary -----------------------------------------------------------


@dataclass
class CosmosTransport(HttpTransport[HttpRequest, RequestsTransportResponse]):
    """Answers every request the azure-cosmos SDK sends with a minimal account or resource, and records it."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, path, auth type) of each request; auth type ``master`` (a key) or ``aad`` (a token)."""

    def __enter__(self) -> CosmosTransport:
        return self

    def __exit__(self, *args: object) -> None:
        return None

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def send(self, request: HttpRequest, **kwargs: Any) -> RequestsTransportResponse:
        url = urlsplit(request.url)
        auth = dict(part.split("=", 1) for part in unquote(request.headers["authorization"]).split("&"))
        self.seen.append((request.method, url.path, auth["type"]))
        endpoint = f"{url.scheme}://{url.netloc}/"
        if url.path == "/":
            location = {"name": "local", "databaseAccountEndpoint": endpoint}
            body: dict[str, Any] = {
                "id": "account",
                "writableLocations": [location],
                "readableLocations": [location],
                "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
            }
        else:
            resource = url.path.strip("/")
            body = {
                "id": resource.rsplit("/", 1)[-1],
                "_rid": "rid",
                "_self": resource,
                "partitionKey": {"paths": ["/orderId"], "kind": "Hash"},
            }
        response = requests.Response()
        response.status_code = 200
        response._content = json.dumps(body).encode()
        response.headers["Content-Type"] = "application/json"
        response.url = request.url
        return RequestsTransportResponse(request, response)


class LocalTokenCredential(azure.identity.DefaultAzureCredential):
    """The real ``DefaultAzureCredential``, built as orderflow builds it, handing out a local token."""

    built: list[LocalTokenCredential] = []

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kwargs = kwargs
        LocalTokenCredential.built.append(self)

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("token", int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo("token", int(time.time()) + 3600)


class RecordedServiceBusClient(ServiceBusClient):
    """The real ``ServiceBusClient``, remembered when the adapter builds one."""

    built: list[RecordedServiceBusClient] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        RecordedServiceBusClient.built.append(self)


@dataclass
class Sdk:
    cosmos: CosmosTransport
    cosmos_clients: list[Any]
    service_bus_clients: list[RecordedServiceBusClient]
    credentials: list[LocalTokenCredential]


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sdk]:
    transport = CosmosTransport()
    cosmos_clients: list[Any] = []

    def cosmos_client(url: str, credential: Any, **options: Any) -> Any:
        # The adapter's own transport (a loopback endpoint's session) gives way to the recording one.
        options.pop("transport", None)
        client = CosmosClient(url, credential=credential, transport=transport, **options)
        cosmos_clients.append(client)
        return client

    monkeypatch.setattr(cosmos_adapter, "CosmosClient", cosmos_client)
    monkeypatch.setattr(servicebus_adapter, "ServiceBusClient", RecordedServiceBusClient)
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", LocalTokenCredential)
    RecordedServiceBusClient.built = []
    LocalTokenCredential.built = []
    yield Sdk(transport, cosmos_clients, RecordedServiceBusClient.built, LocalTokenCredential.built)
    for client in cosmos_clients:
        client.close()
    for service_bus in RecordedServiceBusClient.built:
        service_bus.close()


# --- the emulators ---------------------------------------------------------------------------------------


def test_the_emulator_settings_build_every_client_with_the_emulators_secrets_and_no_identity(
    sdk: Sdk,
) -> None:
    stores, queues = connect_azure(Settings.load(EMULATORS), environ=LOCAL)

    # Service Bus: the emulator's string, parsed by the SDK: a shared key, and no TLS.
    [service_bus] = sdk.service_bus_clients
    assert service_bus.fully_qualified_namespace == "localhost"
    assert isinstance(service_bus._credential, ServiceBusSharedKeyCredential)
    assert service_bus._config.use_tls is False  # what UseDevelopmentEmulator=true turns off
    assert repr(queues) == "ServiceBusQueueFactory(namespace='localhost', queues=0)"

    # Cosmos DB: the emulator's key signs every request, its self-signed certificate goes unchecked, and
    # the database and both containers are created (a key may create them).
    [cosmos] = sdk.cosmos_clients
    assert cosmos.client_connection.url_connection == "https://localhost:8081/"
    assert cosmos.client_connection.master_key == COSMOS_EMULATOR_KEY
    assert cosmos.client_connection.aad_credentials is None
    assert cosmos.client_connection.connection_policy.DisableSSLVerification is True
    assert {auth for _, _, auth in sdk.cosmos.seen} == {"master"}
    paths = {path for _, path, _ in sdk.cosmos.seen}
    assert {"/dbs/orderflow/", "/dbs/orderflow/colls/orderstate/", "/dbs/orderflow/colls/orders/"} <= paths
    assert stores.database.id == "orderflow"

    assert sdk.credentials == []  # nothing asked for an identity


def test_the_local_storage_clients_take_azurite_as_use_development_storage() -> None:
    # The Functions app keeps no storage of its own (its supervisor is a singleton timer, not a lease);
    # the local host and the CLI do, and take Azurite's shorthand.
    settings = Settings.load({"STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
    queues = connect_queues(settings.connections, settings.clients)
    assert repr(queues) == "StorageQueueFactory(account='devstoreaccount1')"
    assert queues._service is not None
    assert queues._service.url == "http://127.0.0.1:10001/devstoreaccount1/"
    lease = LeaderLease.from_connection_string(
        settings.connections.STORAGE_CONNECTION_STRING, LocalSettings.load({}).SUPERVISOR_LEASE_BLOB
    )
    assert lease.blob.url == "http://127.0.0.1:10000/devstoreaccount1/orderflow-leases/supervisor"
    assert lease.blob.credential.account_name == "devstoreaccount1"


# --- identity ----------------------------------------------------------------------------------------------


def test_identity_settings_build_every_client_on_one_default_azure_credential_and_no_key(sdk: Sdk) -> None:
    settings = Settings.load(
        {
            **IDENTITY,
            "SERVICEBUS__credential": "managedidentity",
            "SERVICEBUS__clientId": CLIENT_ID,
            "AZURE_CLIENT_ID": OTHER_CLIENT_ID,
        }
    )
    connect_azure(settings, environ=ON_AZURE)

    # One DefaultAzureCredential, for the user-assigned identity the SERVICEBUS connection names.
    [credential] = sdk.credentials
    assert isinstance(credential, azure.identity.DefaultAzureCredential)
    assert credential.kwargs == {"managed_identity_client_id": CLIENT_ID}

    [service_bus] = sdk.service_bus_clients
    assert service_bus.fully_qualified_namespace == "orderflow-bus.servicebus.windows.net"
    assert service_bus._credential is credential
    assert service_bus._config.use_tls is True

    [cosmos] = sdk.cosmos_clients
    assert cosmos.client_connection.aad_credentials is credential
    assert cosmos.client_connection.master_key is None
    assert cosmos.client_connection.connection_policy.DisableSSLVerification is False
    # Only the account is read, with a token: data-plane RBAC creates no database or container.
    assert sdk.cosmos.seen and {(method, path, auth) for method, path, auth in sdk.cosmos.seen} == {
        ("GET", "/", "aad")
    }


@pytest.mark.parametrize(
    ("identity", "kwargs"),
    [
        ({"AZURE_CLIENT_ID": OTHER_CLIENT_ID}, {"managed_identity_client_id": OTHER_CLIENT_ID}),
        ({}, {}),  # the system-assigned identity (or AZURE_CLIENT_ID as the environment holds it)
    ],
)
def test_the_credential_names_azure_client_id_or_no_identity_at_all(
    sdk: Sdk, identity: dict[str, str], kwargs: dict[str, str]
) -> None:
    connect_azure(Settings.load({**IDENTITY, **identity}), environ=ON_AZURE)
    [credential] = sdk.credentials
    assert credential.kwargs == kwargs


def test_the_emulators_cosmos_key_with_a_service_bus_identity_shares_nothing(sdk: Sdk) -> None:
    # Locally, one emulator beside a real namespace: the key for Cosmos DB, a credential for Service Bus.
    settings = Settings.load(
        {**EMULATORS, "SERVICEBUS": "", "SERVICEBUS__fullyQualifiedNamespace": "x.servicebus.windows.net"}
    )
    connect_azure(settings, environ=LOCAL)
    [credential] = sdk.credentials
    assert sdk.service_bus_clients[0]._credential is credential
    assert sdk.cosmos_clients[0].client_connection.aad_credentials is None


# --- what is refused ----------------------------------------------------------------------------------------


def test_on_azure_the_emulator_settings_are_refused_before_any_client_is_built(sdk: Sdk) -> None:
    with pytest.raises(UnsafeAzureSetting) as refused:
        connect_azure(Settings.load({**IDENTITY, **EMULATORS}), environ=ON_AZURE)
    assert refused.value.setting == "COSMOS_ENDPOINT"
    assert (sdk.cosmos.seen, sdk.service_bus_clients, sdk.credentials) == ([], [], [])


def test_on_azure_missing_service_bindings_are_refused(sdk: Sdk) -> None:
    with pytest.raises(
        UnsafeAzureSetting, match=r"^SERVICE_BINDINGS courier: no mapping for operation 'cancel'$"
    ):
        defaults_for_the_services = {k: v for k, v in IDENTITY.items() if k != "SERVICE_BINDINGS"}
        connect_azure(Settings.load(defaults_for_the_services), environ=ON_AZURE)
    assert (sdk.cosmos.seen, sdk.service_bus_clients, sdk.credentials) == ([], [], [])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"SERVICEBUS__fullyQualifiedNamespace": "x.servicebus.windows.net"}, "COSMOS_ENDPOINT is not set"),
        (
            {"COSMOS_ENDPOINT": "https://localhost:8081/"},
            r"SERVICEBUS__fullyQualifiedNamespace \(or SERVICEBUS",
        ),
    ],
)
def test_off_azure_a_missing_connection_is_named(sdk: Sdk, values: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        connect_azure(Settings.load(values), environ=LOCAL)
    assert sdk.cosmos.seen == []

"""The Azure start-up policy: the settings that have no safe value on Azure, refused before the
Functions app serves anything (:func:`check_azure`; ``function_app`` runs it through
:func:`function_host.startup.check_start_up`). On Azure identity is the only way in (no connection
string, no key, no unverified TLS) and no address of the developer's machine is reachable."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from orderflow.settings import Connections, OperatorApi, Settings
from orderflow.settings.hosts import UnsafeAzureSetting, is_host_name, is_loopback_host
from orderflow.settings.operator_api import (
    ENTRA_LOGIN_HOST,
    OPERATOR_API_SETTINGS,
    entra_issuer,
    entra_jwks_uri,
    entra_v1_issuer,
    is_entra_https,
)

HOST_CONNECTION_NAMES = ("SERVICEBUS", "AzureWebJobsSERVICEBUS", "CUSTOMCONNSTR_SERVICEBUS")
"""Where the Functions host finds the ``SERVICEBUS`` connection's secret, in any letter case: the app
setting of that name, the ``AzureWebJobs`` prefixed one and the App Service connection string. On
Azure none may be set: the triggers connect with ``SERVICEBUS__fullyQualifiedNamespace`` and identity."""

_STORAGE_SECRETS = ("accountkey=", "sharedaccesssignature=", "usedevelopmentstorage=")
_NO_STORAGE_SECRET_ON_AZURE = (
    "holds a key, a SAS or the storage emulator: on Azure the host's storage takes the managed identity "
    "(AzureWebJobsStorage__accountName); remove it"
)


def host_connection_refusals(environ: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """The Functions host's own connection settings in ``environ`` that hold a secret (or the emulator),
    which on Azure only identity may replace: a ``SERVICEBUS`` connection string under any of the names
    the host reads (:data:`HOST_CONNECTION_NAMES`), and an ``AzureWebJobsStorage`` with an account key,
    a SAS or the storage emulator (identity: ``AzureWebJobsStorage__accountName``).

    Yields:
        ``(setting, reason)`` for each; the reason never quotes the value.
    """
    secret_names = {name.lower() for name in HOST_CONNECTION_NAMES}
    for name, value in environ.items():
        if name.lower() in secret_names and name != "SERVICEBUS" and value.strip():
            yield name, _NO_CONNECTION_STRING_ON_AZURE
        elif name.lower() == "azurewebjobsstorage" and any(
            mark in value.replace(" ", "").lower() for mark in _STORAGE_SECRETS
        ):
            yield name, _NO_STORAGE_SECRET_ON_AZURE


def _url_refusal(value: str, *, schemes: tuple[str, ...], expected: str) -> str | None:
    """Why ``value`` is no endpoint on Azure (empty, not a URL of ``schemes``, loopback), or None.

    Only the host is quoted: a URL may carry credentials.
    """
    text = value.strip()
    if not text:
        return f"is empty: set {expected}"
    try:
        parts = urlsplit(text)
        scheme, host = parts.scheme, parts.hostname
        _ = parts.port  # raises on a port outside 0-65535
    except ValueError:
        scheme, host = "", None
    if scheme not in ("http", "https", *schemes) or not host:
        return f"is not an {' or '.join(schemes)} URL: set {expected}"
    if is_loopback_host(host):
        return f"names {host}, a loopback address where nothing of orderflow listens on Azure: set {expected}"
    if scheme not in schemes:
        return f"is not an {' or '.join(schemes)} URL: set {expected}"
    if not is_host_name(host):
        return f"has a host that is not a DNS name or an address: set {expected}"
    return None


_NO_STORAGE_ON_AZURE = (
    "is set: the Functions app keeps no storage of its own (the task hub is the host's AzureWebJobsStorage), "
    "so it holds a key nobody needs; remove it"
)
_NO_KEY_ON_AZURE = (
    "is set: on Azure the app reaches Cosmos DB with its managed identity and the account takes no key; "
    "remove it"
)
_NO_CONNECTION_STRING_ON_AZURE = (
    "is a connection string: on Azure the triggers and orderflow connect with the managed identity; "
    "remove it and set SERVICEBUS__fullyQualifiedNamespace"
)
_CLIENT_ID_NEEDS_MANAGED_IDENTITY = (
    "is not 'managedidentity' while SERVICEBUS__clientId is set: the triggers would not use that "
    "user-assigned identity, orderflow's own client would"
)


def check_azure(settings: Settings) -> None:
    """Refuse, at start-up on Azure (:func:`orderflow.settings.on_azure`), the settings that have no safe
    value there.

    Raises:
        UnsafeAzureSetting: the first such setting, in the order of the sections and their fields.
    """
    for setting, reason in azure_refusals(settings):
        raise UnsafeAzureSetting(setting, reason)


def azure_refusals(settings: Settings) -> Iterator[tuple[str, str]]:
    """Every setting with no safe value on Azure, ``(setting, reason)``, in the order of the sections;
    a reason never quotes a secret."""
    connections = settings.connections
    if connections.STORAGE_CONNECTION_STRING.strip():
        yield "STORAGE_CONNECTION_STRING", _NO_STORAGE_ON_AZURE
    cosmos = "the account endpoint, https://<account>.documents.azure.com:443/"
    if refusal := _url_refusal(connections.COSMOS_ENDPOINT, schemes=("https",), expected=cosmos):
        yield "COSMOS_ENDPOINT", refusal
    if connections.COSMOS_KEY.strip():
        yield "COSMOS_KEY", _NO_KEY_ON_AZURE
    if not connections.COSMOS_VERIFY_TLS:
        yield "COSMOS_VERIFY_TLS", "is false: certificates go unchecked only against a local emulator"
    if connections.SERVICEBUS.strip():
        yield "SERVICEBUS", _NO_CONNECTION_STRING_ON_AZURE
    yield from _unsafe_service_bus_identity(connections)
    for refusal in settings.agents.binding_refusals(azure=True):
        yield "SERVICE_BINDINGS", refusal
    yield from _unsafe_operator_api(settings.operator_api)


def _unsafe_service_bus_identity(connections: Connections) -> Iterator[tuple[str, str]]:
    name = "SERVICEBUS__fullyQualifiedNamespace"
    namespace = connections.SERVICEBUS__fullyQualifiedNamespace.strip()
    expected = "the namespace host name, <namespace>.servicebus.windows.net"
    if not namespace:
        yield name, f"is empty: set {expected}"
    elif any(mark in namespace for mark in "/:;=") or not (
        is_loopback_host(namespace) or is_host_name(namespace)
    ):
        # Not quoted: a connection string pasted here would carry its key.
        yield name, f"is not a host name: set {expected}"
    elif is_loopback_host(namespace):
        yield name, f"names {namespace}, a loopback address (the local emulator): set {expected}"
    credential = connections.SERVICEBUS__credential.strip().lower()
    if connections.SERVICEBUS__clientId.strip() and credential != "managedidentity":
        yield "SERVICEBUS__credential", _CLIENT_ID_NEEDS_MANAGED_IDENTITY


def _unsafe_operator_api(api: OperatorApi) -> Iterator[tuple[str, str]]:
    # Not configured at all is safe: the operator API then refuses every call.
    configured = [name for name in OPERATOR_API_SETTINGS if getattr(api, name).strip()]
    if not configured:
        return
    tenant = api.OPERATOR_TENANT_ID
    if not tenant:
        yield "OPERATOR_TENANT_ID", f"is empty while {configured[0]} is set: set the Entra tenant id"
        return
    if not api.operator_audiences():
        yield "OPERATOR_AUDIENCE", "is empty: set the operator API's client id or application ID URI"
    # Neither value is quoted: what to set helps more than what is wrong.
    if api.operator_issuer() not in (entra_issuer(tenant), entra_v1_issuer(tenant)):
        yield "OPERATOR_ISSUER", f"is not the Entra issuer: set {entra_issuer(tenant)} or leave it empty"
    if not is_entra_https(api.operator_jwks_uri()):
        keys = entra_jwks_uri(tenant)
        yield "OPERATOR_JWKS_URI", f"is not https at {ENTRA_LOGIN_HOST}: set {keys} or leave it empty"
    if api.CONSOLE_AUTHORITY.strip() and not is_entra_https(api.CONSOLE_AUTHORITY):
        yield "CONSOLE_AUTHORITY", f"is not https at {ENTRA_LOGIN_HOST}: leave it empty"

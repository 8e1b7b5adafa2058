"""Every setting orderflow reads, in one typed structure.

Precedence, highest first: keyword arguments to :meth:`Settings.load` (tests, the devhost CLI), then
environment variables (Azure app settings / ``local.settings.json`` ``Values``), then the defaults
below. Setting names are the environment variable names, identical across Bicep app settings,
``local.settings.json`` and this module. Durations are seconds; times are UTC.

The defaults suit a developer's machine. On Azure (:func:`on_azure`) some have no safe value, and
:meth:`Settings.check_azure` refuses them at start-up: identity is the only way in there (no
connection string, no key, no unverified TLS) and no address of the developer's machine is reachable.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import socket
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orderflow.clients import ClientRegistry, RegisteredClient, parse_clients
from orderflow.queues.base import DEAD_LETTER_SUFFIX

MAX_DURATION_S = 315_360_000.0
"""Longest duration any ``*_S`` setting may have: ten years, far within what a ``timedelta`` holds."""

AZURE_PLATFORM_VARIABLES = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")
"""Variables the App Service / Functions platform sets on every instance and Core Tools never sets.

``WEBSITE_INSTANCE_ID`` is what the Functions host itself tests for App Service; Linux Consumption
instances have none, but every plan sets ``WEBSITE_SITE_NAME`` (the app's name). ``func start`` sets
``WEBSITE_HOSTNAME`` (``localhost:7071``) and ``AZURE_FUNCTIONS_ENVIRONMENT``, so neither is a sign.
"""


def on_azure(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs on the App Service / Functions platform (default: ``os.environ``)."""
    source = os.environ if environ is None else environ
    return any(source.get(name, "").strip() for name in AZURE_PLATFORM_VARIABLES)


_SECRET_SETTINGS = ("KEY", "CONNECTION_STRING", "SECRET", "PASSWORD")
"""Parts of setting names whose values are never printed (and ``SERVICEBUS``, a connection string)."""

_EXPECTED = {
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "string_type": "text",
}
"""What a setting should be, by pydantic error type, in words."""


class TimeoutBound(NamedTuple):
    """A remote call's timeout setting and the deadline it must end within.

    Attributes:
        timeout: The timeout setting's name.
        deadline: The deadline setting's name.
        fraction: Share of the deadline the timeout must stay below (a lock renewal has half a lock).
        strict: Whether the timeout must be shorter (True) or may equal the bound (False).
        why: Why, in a few words, for the refusal.
    """

    timeout: str
    deadline: str
    fraction: float
    strict: bool
    why: str


TIMEOUT_BOUNDS: tuple[TimeoutBound, ...] = (
    TimeoutBound(
        "STORE_CONNECTION_TIMEOUT_S", "STORE_OPERATION_TIMEOUT_S", 1.0, False, "a store operation includes it"
    ),
    TimeoutBound(
        "STORE_READ_TIMEOUT_S", "STORE_OPERATION_TIMEOUT_S", 1.0, False, "a store operation includes it"
    ),
    TimeoutBound(
        "STORE_OPERATION_TIMEOUT_S",
        "STEP_TIMEOUT_S",
        1.0,
        True,
        "a step's store writes end within its deadline",
    ),
    TimeoutBound(
        "STORE_OPERATION_TIMEOUT_S",
        "CLAIM_TIMEOUT_S",
        1.0,
        True,
        "a claimed order's first write ends in time",
    ),
    TimeoutBound("STORE_OPERATION_TIMEOUT_S", "SCAN_MAX_S", 1.0, True, "a scan's page ends within the scan"),
    TimeoutBound("QUEUE_READ_TIMEOUT_S", "STEP_TIMEOUT_S", 1.0, True, "a step's request is sent within it"),
    TimeoutBound(
        "QUEUE_READ_TIMEOUT_S", "QUEUE_LOCK_S", 0.5, True, "a lock renewal sent at half-lock returns in time"
    ),
    TimeoutBound(
        "OPERATOR_JWKS_TIMEOUT_S", "OPERATOR_API_TIMEOUT_S", 1.0, True, "the caller hears the answer"
    ),
)
"""Every remote-call timeout checked against the deadline of the role that makes the call (at start-up,
by :class:`Settings`). An agent's HTTP call needs no entry: each is capped by the time left to its step's
deadline when it starts (``AGENT_CALL_TIMEOUT_S``)."""


def timeout_refusals(values: Mapping[str, float]) -> Iterator[str]:
    """Why each timeout in ``values`` that breaks a :data:`TIMEOUT_BOUNDS` entry is refused, one line each,
    e.g. ``STORE_OPERATION_TIMEOUT_S (2.5 s) must be shorter than STEP_TIMEOUT_S (1.5 s): ...``."""
    for bound in TIMEOUT_BOUNDS:
        timeout, deadline = values[bound.timeout], values[bound.deadline] * bound.fraction
        if timeout < deadline or (not bound.strict and timeout == deadline):
            continue
        share = "half of " if bound.fraction == 0.5 else ""
        relation = "shorter than" if bound.strict else "at most"
        yield (
            f"{bound.timeout} ({timeout:g} s) must be {relation} {share}{bound.deadline} "
            f"({values[bound.deadline]:g} s): {bound.why}"
        )


def describe_invalid_settings(exc: ValidationError) -> str:
    """One line about the first invalid setting in ``exc``: its name, its value (unless secret) and what
    it should be, e.g. ``STEP_TIMEOUT_S='abc' is not valid: it should be a number of seconds``."""
    problems = exc.errors()
    first = problems[0]
    if not first["loc"]:
        # A check across settings (TIMEOUT_BOUNDS): its message names them, with values that are no secret.
        return str(first["msg"]).removeprefix("Value error, ")
    name = str(first["loc"][0])
    if name == "SERVICEBUS" or any(part in name for part in _SECRET_SETTINGS):
        shown = f"{name} (value not shown)"
    else:
        shown = f"{name}={' '.join(repr(first['input']).split())[:80]}"
    expected = _EXPECTED.get(first["type"])
    if expected is not None:
        if expected.endswith("number") and name.endswith("_S"):
            expected += " of seconds"  # every *_S setting is a duration in seconds
        problem = f"it should be {expected}"
    else:  # "Input should be greater than or equal to 0", "String should match pattern ..."
        message = (
            str(first["msg"]).removeprefix("Value error, ").removeprefix("Input ").removeprefix("String ")
        )
        problem = f"it {message}" if message.startswith("should") else message
    others = len(problems) - 1
    more = f" (and {others} more invalid setting{'s' if others > 1 else ''})" if others else ""
    return f"{shown} is not valid: {problem}{more}"


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


class UnsafeAzureSetting(ValueError):
    """A setting whose value has no safe meaning on Azure. The message is one line naming the setting,
    and never holds a secret's value.

    Attributes:
        setting: The setting's name.
    """

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        super().__init__(f"{setting} {reason}")


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Names of this machine: ``localhost`` and the aliases Linux distributions put in ``/etc/hosts``."""

_DNS_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")
"""An ASCII DNS host name (what an Azure endpoint's host is)."""


def _normalised_host(host: str) -> str:
    # NFKC first, as IDNA does: fullwidth and enclosed letters and digits resolve as their ASCII forms.
    return unicodedata.normalize("NFKC", host.strip()).strip("[]").rstrip(".").lower()


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost`` (and ``*.localhost``, and the ``/etc/hosts``
    aliases ``localhost.localdomain``, ``ip6-localhost``, ``ip6-loopback``), 127.0.0.0/8 in any form
    the resolver accepts (``127.1``, ``2130706433``), ``::1``, an IPv4-mapped loopback, or an
    unspecified address (``0.0.0.0``, ``::``), which connects to this machine too; in any Unicode
    spelling that normalises to one of these (``ｌｏｃａｌｈｏｓｔ``). A name that only DNS maps to a
    loopback address is not recognised."""
    name = _normalised_host(host)
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except (OSError, UnicodeError):  # not an address; or not text (undecodable bytes)
            return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def is_host_name(host: str) -> bool:
    """Whether ``host`` is an ASCII DNS name or an IP address (an Azure endpoint's host is one)."""
    name = host.strip().strip("[]")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return _DNS_NAME.fullmatch(name.rstrip(".").lower()) is not None
    return True


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

ENTRA_LOGIN_HOST = "login.microsoftonline.com"
"""Microsoft Entra ID's sign-in host (global Azure): a tenant's v2.0 issuer and its signing keys are there."""

_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

_OPERATOR_API_SETTINGS = ("OPERATOR_TENANT_ID", "OPERATOR_AUDIENCE", "OPERATOR_ISSUER", "OPERATOR_JWKS_URI")
"""The settings that configure the operator API's token check; with none of them set it refuses every call."""


def entra_issuer(tenant_id: str) -> str:
    """The ``iss`` of a v2.0 access token of Entra tenant ``tenant_id``."""
    return f"https://{ENTRA_LOGIN_HOST}/{tenant_id}/v2.0"


def entra_v1_issuer(tenant_id: str) -> str:
    """The ``iss`` of a v1.0 access token of Entra tenant ``tenant_id``."""
    return f"https://sts.windows.net/{tenant_id}/"


def entra_jwks_uri(tenant_id: str) -> str:
    """Where Entra tenant ``tenant_id`` publishes the keys that sign its tokens (its JWKS)."""
    return f"https://{ENTRA_LOGIN_HOST}/{tenant_id}/discovery/v2.0/keys"


def _is_entra_https(url: str) -> bool:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # a port outside 0-65535
        return False
    return (
        parts.scheme == "https"
        and parts.hostname == ENTRA_LOGIN_HOST
        and port in (None, 443)
        and parts.username is None
    )


class Settings(BaseModel):
    """orderflow's configuration. Each field's description documents its unit, default and why."""

    # NaN and infinity are never a duration or a count: they would fail later, in every loop.
    # Inputs stay out of error texts: a mistyped key must not reach a log.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, hide_input_in_errors=True)

    # --- connections -------------------------------------------------------------------------
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
    SERVICE_BINDINGS: str = Field(
        "{}",
        description="JSON object: for each agent (inventory, payment, shipping, courier), the remote service "
        'it calls: baseUrl, auth ({"mode": "entra", "scope": ...} or {"mode": "none", '
        '"reason": ...}), timeoutS, connectTimeoutS, and per operation the request (method, path template, '
        "result fields); see docs/extending.md, 'Service bindings'. Empty (default): none, and a host "
        "running agents refuses to start until every step's operation has a mapping.",
    )

    # --- remote-call timeouts -----------------------------------------------------------------
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
    OPERATOR_JWKS_TIMEOUT_S: float = Field(
        5.0,
        gt=0,
        description="Seconds the operator API waits for its token signing keys (the JWKS) to be fetched: "
        "the timeout of one fetch, and the longest any request waits on one (then 503). A token whose key "
        "is cached never waits. Must be shorter than OPERATOR_API_TIMEOUT_S, so a caller hears the refusal "
        "instead of timing out.",
    )
    OPERATOR_API_TIMEOUT_S: float = Field(
        30.0,
        gt=0,
        description="Seconds the orderflow CLI waits for one call of the operator API.",
    )

    # --- queues ------------------------------------------------------------------------------
    AGENT_QUEUE_PREFIX: str = Field(
        "agent-", description="Request queue of agent NAME is PREFIX+NAME (agent-inventory ...)."
    )
    AGENT_RESPONSES_QUEUE: str = Field(
        "agent-responses",
        description="Response queue. Locally each devhost process appends its host id, because an "
        "orchestration lives only in the process that claimed it (docs/design.md §1).",
    )
    HOST_ID: str = Field("local", description="This process's host id (lowercase letters, digits, '-').")
    AGENT_RESPONSES_PER_HOST: bool = Field(
        True,
        description="Whether this process consumes a response queue of its own, AGENT_RESPONSES_QUEUE-"
        "<HOST_ID> (a devhost process: its orchestrations live in it alone), rather than the shared "
        "AGENT_RESPONSES_QUEUE. The Functions host always takes false: its task hub is shared and its "
        "response trigger listens on AGENT_RESPONSES_QUEUE (function_host.wiring.load_settings).",
    )
    CLIENTS: str = Field(
        "",
        description="The client registry, a JSON list: one object per client, "
        '{"id": "acme", "inboundQueue": "orders-acme", "replyQueue": "replies-acme", "maxInFlight": 500, '
        '"principalId": "<Entra object id>"}; only id is required (a slug of lowercase letters, digits and '
        "hyphens, at most 32); the queues default to orders-<id> and replies-<id>; maxInFlight (default: "
        "none) is the client's own ceiling on orders in flight, beside MAX_IN_FLIGHT_ORDERS. A client is "
        "identified by the inbound queue its message arrives on and answered on its reply queue only "
        "(docs/clients.md). Ids and queues must be unique, and none of orderflow's own queues. Empty "
        "(default): no client, nothing is consumed.",
    )

    # --- scheduler ---------------------------------------------------------------------------
    STARTER_SCHEDULE: str = Field(
        "*/5 * * * * *",
        description="NCRONTAB schedule of the starter's timer trigger on Azure (every 5 s). Pending orders "
        "wait at most this long to be claimed.",
    )
    SUPERVISOR_SCHEDULE: str = Field(
        "*/30 * * * * *",
        description="NCRONTAB schedule of the supervisor's timer trigger on Azure (every 30 s). Timer "
        "triggers are singletons per app, so one sweep runs at a time.",
    )
    STARTER_INTERVAL_S: float = Field(
        0.5, gt=0, description="Seconds between starter sweeps for Pending records."
    )
    STARTER_BATCH: int = Field(
        32,
        ge=1,
        description="Most records one starter sweep claims; bounds the work per tick and the backlog "
        "held by one process.",
    )
    CLAIM_TIMEOUT_S: float = Field(
        30.0,
        gt=0,
        description="completeBy set by a claim that starts no step (a compensation to resume, or a first "
        "step that needs a decision first): time the new orchestration has to make its first write before "
        "the supervisor may recover the order.",
    )
    START_LATENCY_S: float = Field(
        5.0,
        ge=0,
        description="Seconds added to the completeBy of the step a claim starts (the attempt's first step, "
        "started in the claim's own write): the time the new orchestration may take to be scheduled and "
        "send its request, so a slow start does not eat the step's own time.",
    )
    STARTER_SENDS_FIRST_REQUEST: bool = Field(
        True,
        description="The starter sends the agent request of the step a claim started, once the instance is "
        "scheduled, and the orchestration only waits for its answer (default true; docs/design.md §3.2): one "
        "activity, one orchestration episode and one point read per order fewer. Set it false before "
        "rolling a deployment back to a version that predates it, whose orchestrations refuse an input "
        "naming that step (firstStep); instances then start their first step themselves.",
    )
    STEP_TIMEOUT_S: float = Field(
        8.0,
        gt=0,
        description="Default completeBy of one remote step (seconds). The durable timer of the race "
        "fires then; the agent starts no call after it.",
    )
    WORKFLOW_VERSION: str = Field(
        "",
        description="Workflow definition new orders start with (e.g. 'order-v2'); empty (default) for "
        "the latest deployed. Records in flight keep the version they started with.",
    )
    REVIEW_AMOUNT_ABOVE: float = Field(
        0.0,
        ge=0,
        description="Orders whose amount is above this pause for a person's review (AwaitingReview) "
        "before a step that asks for it (order-v2: the charge). 0 (default) disables review.",
    )
    REVIEW_TIMEOUT_S: float = Field(
        86_400.0,
        gt=0,
        description="Seconds a review may take (default one day); at the deadline REVIEW_DEFAULT applies.",
    )
    REVIEW_DEFAULT: str = Field(
        "reject",
        pattern="^(approve|reject)$",
        description="Decision taken when a review's deadline passes: 'reject' (default: no payment is "
        "taken without a person's approval; the order is compensated) or 'approve'.",
    )
    MAX_IN_FLIGHT_PER_HOST: int = Field(
        64,
        ge=1,
        description="Most orchestrations one devhost process runs at once; the starter claims no more. "
        "A step's deadline is a latency budget: claiming more than the host can move within it turns "
        "load into timeouts and recoveries, so the backlog waits as Pending instead.",
    )
    WORKER_THREADS: int = Field(
        32,
        ge=1,
        description="Thread pool of the local durabletask worker, shared by orchestrator episodes and "
        "activities. Activities wait on the stores and queues, so more threads than cores pay off.",
    )
    DURABLETASK_BACKEND: Literal["process", "in-process"] = Field(
        "process",
        description="Local host only: where a devhost process runs its durabletask in-memory backend. "
        "'process' (default): a child process of its own, which ends with the devhost (even a killed "
        "one), so the backend's gRPC server does not share the devhost's interpreter lock; "
        "'in-process': threads of the devhost itself. Either way each devhost process has its own "
        "backend. Unused on Azure: the Durable Functions extension runs outside the Python worker.",
    )

    # --- admission control -------------------------------------------------------------------
    MAX_IN_FLIGHT_ORDERS: int = Field(
        10_000,
        ge=0,
        description="Ceiling on orders in flight (Pending + Processing) across the system; above it new "
        "submissions are answered Rejected with a retry-after. 0 disables the check. 10,000 is minutes "
        "of work at the tens to low hundreds of orders/s a scheduler process moves (docs/design.md §8): "
        "more in flight adds no throughput, only time spent Pending and records for every supervisor "
        "sweep, while the in-flight COUNT stays a cheap aggregate. Processes admit against a cached count, "
        "so the ceiling can be overshot by what the other processes admit in one ADMISSION_REFRESH_S.",
    )
    MAX_SUBMISSION_BACKLOG: int = Field(
        5_000,
        ge=0,
        description="Ceiling on messages waiting in each client's inbound queue (orders-<id>), per client; "
        "while a client's queue holds more, its new orders are answered Rejected (cheaply, so the excess "
        "drains fast). 0 disables the check. 5,000 is about a minute of submissions for one consumer "
        "process (each costs two creates and a reply): an order further back would wait longer than its "
        "client should be left without an answer.",
    )
    ADMISSION_REFRESH_S: float = Field(
        5.0,
        ge=0,
        description="Seconds between reads of the in-flight count and the queue backlog by one process "
        "(one COUNT query and one queue-properties call per period, not per message); also the base of a "
        "rejection's retry-after. The starter's cadence, so claims are seen about as fast as they happen.",
    )

    # --- agents ------------------------------------------------------------------------------
    AGENT_CALL_TIMEOUT_S: float = Field(
        5.0,
        gt=0,
        description="HTTP timeout of one remote call, further capped by the time left to the deadline.",
    )
    AGENT_BACKOFF_INITIAL_S: float = Field(
        0.2, ge=0, description="First retry delay of an agent (exponential)."
    )
    AGENT_BACKOFF_MAX_S: float = Field(2.0, ge=0, description="Largest retry delay of an agent.")
    AGENT_CONCURRENCY: int = Field(16, ge=1, description="Requests one agent process handles at once.")
    AGENT_MAX_CALLS_PER_STEP: int = Field(
        4,
        ge=1,
        description="Calls one attempt of a step may make: reserved from the order's retry budget when the "
        "step starts (in the same write), the unused ones returned when its outcome is recorded. An attempt "
        "that dies keeps its whole reservation spent, so the budget is never exceeded, only used up sooner.",
    )
    RETRY_BUDGET: int = Field(
        24, ge=1, description="End-to-end limit of remote calls per order across all attempts and steps."
    )

    # --- circuit breakers --------------------------------------------------------------------
    BREAKER_ENABLED: bool = Field(
        True,
        description="A circuit breaker per remote dependency (each agent's service), shared by every host "
        "through a document per dependency in the breakers container (default true; docs/operations.md). "
        "While it is open, steps on that dependency are not started and agents make no call to it: the "
        "order waits, its retry budget unspent, and one probe at a time tests the dependency. Off: every "
        "order retries a dead dependency on its own budget.",
    )
    BREAKER_FAILURES_TO_OPEN: int = Field(
        10,
        ge=1,
        description="Transient failures in a row, with no success between them, that one host sees from "
        "a dependency before it opens the dependency's breaker for every host (default 10: random faults "
        "at a rate of 30% make ten in a row about once in 170,000 calls).",
    )
    BREAKER_OPEN_S: float = Field(
        15.0,
        gt=0,
        description="Seconds a breaker stays open once it opens, before one probe may test the dependency "
        "(default 15). Each failed probe re-opens it for twice as long as the time before, up to "
        "BREAKER_OPEN_MAX_S.",
    )
    BREAKER_OPEN_MAX_S: float = Field(
        240.0,
        gt=0,
        description="Longest a breaker stays open between probes, seconds (default 240).",
    )
    BREAKER_PROBE_LEASE_S: float = Field(
        30.0,
        gt=0,
        description="Seconds the one probe of a half-open breaker holds it (default 30, about a claim's "
        "completeBy): the step started as the probe must reach its agent and call within it. No other "
        "order calls the dependency meanwhile; a probe that dies frees it when the lease ends.",
    )
    BREAKER_MAX_WAIT_S: float = Field(
        900.0,
        gt=0,
        description="Longest an order waits for an open breaker, seconds from its first wait (default "
        "900). Past it the order stops waiting: it is compensated with lastError unavailable / "
        "dependency_unavailable and an alert, as the supervisor does with an order that keeps failing.",
    )
    BREAKER_CACHE_S: float = Field(
        1.0,
        ge=0,
        description="Seconds a host reuses a breaker document it read before reading it again (default "
        "1): one read per dependency per host per period, not one per call. A breaker another host "
        "opens is seen within this time.",
    )

    # --- supervisor --------------------------------------------------------------------------
    SUPERVISOR_INTERVAL_S: float = Field(
        2.0,
        gt=0,
        description="Seconds between sweeps. Recovery latency is at most this plus the step timeout.",
    )
    SUPERVISOR_PAGE_SIZE: int = Field(100, ge=1, description="max_item_count of each sweep query page.")
    SUPERVISOR_MAX_RECORDS: int = Field(500, ge=1, description="Most records one sweep examines.")
    SCAN_MAX_PAGES: int = Field(
        50,
        ge=1,
        description="Most query pages one pass of a scanning loop reads (the supervisor's sweep, the "
        "starter, the reply relay, retention), beside its record bound: a store that keeps answering "
        "pages with nothing on them cannot hold the loop. A pass cut short here is over: the next one "
        "starts from the first page (a sweep, with a new cutoff).",
    )
    SCAN_MAX_EMPTY_PAGES: int = Field(
        10,
        ge=1,
        description="Empty pages in a row, each with a new continuation token, after which a pass stops "
        "and reports an anomaly (a warning and the orderflow.scan_anomalies metric; for the supervisor's "
        "sweep also the scan_anomaly alert); the next pass starts from the first page. Cosmos DB may "
        "return a few such pages in a cross-partition query, up to one per partition range: keep it above "
        "the state container's physical partition count.",
    )
    SCAN_MAX_S: float = Field(
        10.0,
        gt=0,
        description="Most seconds one pass of a scanning loop runs before it stops at the next page "
        "boundary (the next pass starts from the first page): the supervisor's sweep runs on the thread "
        "that renews its lease and re-sends owed replies, which must not wait behind it.",
    )
    SUPERVISOR_MAX_FAILURES: int = Field(
        6,
        ge=1,
        description="failureCount at which the supervisor gives up an order's forward progress: it is "
        "compensated (Compensating + alert).",
    )
    SUPERVISOR_BACKOFF_INITIAL_S: float = Field(
        1.0, ge=0, description="nextAttemptAt delay after the first recovery; doubles per failure."
    )
    REPLY_GRACE_S: float = Field(
        30.0,
        ge=0,
        description="Seconds a final reply may stay owed (pendingReply) before the supervisor re-sends it: "
        "long enough for the writer to send and clear it itself, so the relay re-sends only after a failure.",
    )
    SUPERVISOR_BACKOFF_MAX_S: float = Field(30.0, ge=0, description="Largest nextAttemptAt delay.")
    SUPERVISOR_EXTENDED_BACKOFF_AFTER: int = Field(
        4,
        ge=1,
        description="failureCount from which a re-queued order waits SUPERVISOR_EXTENDED_BACKOFF_S instead "
        "of the exponential backoff (default 4). The first recoveries are usually a crashed worker or a "
        "blip and are retried within seconds; an order that timed out this often is waiting on an outage "
        "that seconds will not fix. With SUPERVISOR_MAX_FAILURES=6, failures 4 and 5 wait the extended "
        "period and the 6th gives up. A value >= SUPERVISOR_MAX_FAILURES disables the extended backoff.",
    )
    SUPERVISOR_EXTENDED_BACKOFF_S: float = Field(
        60.0,
        ge=0,
        description="Seconds an order waits before its next claim once failureCount reached "
        "SUPERVISOR_EXTENDED_BACKOFF_AFTER (default 60): twice SUPERVISOR_BACKOFF_MAX_S, long enough for "
        "a restarted dependency or a throttled store to recover, short enough that an order still gives "
        "up (compensated, with an alert) within minutes rather than hours.",
    )
    CLOCK_SKEW_TOLERANCE_S: float = Field(
        2.0,
        ge=0,
        description="How far a host's clock may be from the state store's before the host alerts "
        "clock_skew: when it is certainly more than half of this away (default 2 s; NTP keeps hosts within "
        "milliseconds). No deadline depends on it: every host writes and compares deadlines on the state "
        "store's time, measured on its own writes; the host's own clock still times its durable timers.",
    )
    POISON_FAILURES: int = Field(
        3,
        ge=0,
        description="Consecutive attempts of an order that fail the same way (the same step and the same "
        "error code, as the attempt recorded it; expiries and the agents' transient codes never count, "
        "a workflow_error of the orchestration's own code does) after which the supervisor holds the "
        "order for an "
        "operator instead of re-queueing it: Pending and suspended (suspendedBy "
        "supervisor:poison-guard), lastError repeated_failure and a poison_order alert. Not while "
        "workflow_version_failing is raised for that failure (it is then systemic: a dependency down or "
        "a broken version). 0 disables the guard.",
    )
    POISON_VERSION_ORDERS: int = Field(
        5,
        ge=1,
        description="Orders of one workflow version whose attempts failed at the same step with the same "
        "error code within POISON_VERSION_WINDOW_S, as one supervisor saw them, at which it raises "
        "workflow_version_failing (once per window).",
    )
    POISON_VERSION_WINDOW_S: float = Field(
        600.0,
        gt=0,
        description="Window of POISON_VERSION_ORDERS, seconds (default 10 minutes). A local supervisor "
        "keeps it across sweeps, in memory; an Azure timer sweep keeps it for one sweep only.",
    )
    SUPERVISOR_LEASE_ENABLED: bool = Field(
        True,
        description="Local hosts elect one sweeping supervisor through a blob lease (default true). Off, "
        "every supervisor sweeps: still correct, since each recovery is a conditional write, only more "
        "work. Azure ignores it: the supervisor's timer trigger is already a singleton.",
    )
    SUPERVISOR_LEASE_S: int = Field(
        15,
        ge=15,
        le=60,
        description="Period of the supervisor lease, seconds (Storage allows 15-60; default 15, the "
        "shortest). A stand-by takes over at most one period after a dead leader's last renewal, plus its "
        "own SUPERVISOR_INTERVAL_S polling; the leader renews every third of a period and stops acting as "
        "leader a fifth of a period before its lease could expire, so a shorter period is faster take-over "
        "at no cost in safety.",
    )
    SUPERVISOR_LEASE_BLOB: str = Field(
        "orderflow-leases/supervisor",
        pattern=r"^[a-z0-9](?:-?[a-z0-9]){2,62}/.+$",
        description="The lease blob as 'container/blob' in the STORAGE_CONNECTION_STRING account, created "
        "on first use. Every supervisor of one deployment must name the same blob; deployments sharing a "
        "storage account must name different ones.",
    )

    COMPENSATION_LOG_RETENTION_S: float = Field(
        2_592_000.0,
        ge=0,
        description="Seconds a finished order (Processed, Compensated, Cancelled) keeps its payment and "
        "customer data after its last change before the supervisor purges it: the effect ids and amounts "
        "of its compensation log and step results, its error and reply texts, and its order document's "
        "customer id, name, amount and items. Statuses, keys, the content hash and times stay "
        "(docs/data.md). Default 30 days; 0 never purges. CompensationFailed and Error orders keep "
        "theirs until an operator resolves them; the period starts then.",
    )
    DEAD_LETTER_RETENTION_S: float = Field(
        1_209_600.0,
        ge=0,
        description="Seconds a dead letter is kept after it was dead-lettered before the supervisor's "
        "retention pass deletes it: a dead letter holds the whole message, customer and payment data "
        "included, and neither queue service expires one (docs/data.md). Default 14 days; at most "
        "COMPENSATION_LOG_RETENTION_S, and not 0 unless that is 0 too (0 never deletes).",
    )

    # --- consumers ---------------------------------------------------------------------------
    QUEUE_LOCK_S: float = Field(
        30.0,
        gt=0,
        description="Lock (visibility timeout) a local consumer takes on a received message, renewed while "
        "its handler runs (QUEUE_MAX_LOCK_RENEWAL_S). On Azure the queue's own LockDuration applies.",
    )
    MAX_DELIVERY_COUNT: int = Field(
        10,
        ge=1,
        description="Deliveries after which a message that keeps failing is dead-lettered "
        "(Service Bus maxDeliveryCount).",
    )
    QUEUE_MAX_LOCK_RENEWAL_S: float = Field(
        120.0,
        ge=0,
        description="Longest time a local consumer keeps renewing a message's lock while its handler runs "
        "(renewed each time half of QUEUE_LOCK_S is left): host.json's maxAutoLockRenewalDuration, with "
        "which the Functions host does the same for Service Bus on Azure (2 minutes). A handler still "
        "running then has its message abandoned for redelivery, with a warning, and what it settles later is "
        "discarded. 0 disables renewal: a message then stays locked QUEUE_LOCK_S only.",
    )
    POLL_INTERVAL_S: float = Field(0.2, gt=0, description="Sleep of a consumer loop after an empty receive.")
    WAKEUP_DIR: str = Field(
        "",
        description="Local host only: a directory the devhost processes of one machine share, where each "
        "binds a Unix datagram socket; a process that sends to a queue tells the others, and their idle "
        "loop of that queue receives at once instead of at its next poll (the queue stays the source of "
        "truth; a lost wake-up costs one poll); a submission's new record wakes the other processes' "
        "starters the same way. Empty (default): no wake-ups across processes. The demo, "
        "chaos and bench fleets set it to their run directory. Unused on Azure: Service Bus triggers "
        "receive each message as it arrives.",
    )
    POLL_MAX_INTERVAL_S: float = Field(
        0.8,
        gt=0,
        description="Longest sleep of a consumer loop whose queue stays empty (the sleep doubles from "
        "POLL_INTERVAL_S). Idle polling is most of a local emulator's load; keep it well below a step's "
        "deadline, since an idle response queue answers its first message this late.",
    )

    # --- alerts ------------------------------------------------------------------------------
    ALERT_WINDOW_S: int = Field(
        3600,
        ge=1,
        le=86_400,
        description="Seconds of one alert-counting window (default 3600, one hour; at most a day). The "
        "alerts of a kind a client can raise at will (conflicting_order, max_delivery_count) are counted "
        "into one stored alert per kind, client (the queue the message arrived on) and window, with a "
        "count and its first and last times, instead of one stored alert each. Windows start at UTC "
        "midnight; a longer window keeps fewer alerts, a shorter one dates the counts more closely.",
    )

    # --- operator API ------------------------------------------------------------------------
    OPERATOR_TENANT_ID: str = Field(
        "",
        description="Directory (tenant) id, a GUID, of the Microsoft Entra tenant whose access tokens the "
        "operator API accepts: a token's tid must equal it. Empty (default): the operator API is not "
        "configured and refuses every call. Locally the devhost sets the local issuer's.",
    )
    OPERATOR_AUDIENCE: str = Field(
        "",
        description="What a token's aud must be: the client id of the operator API's app registration "
        "(what v2.0 access tokens carry) or its application ID URI (api://...), or both, comma-separated. "
        "Required once OPERATOR_TENANT_ID is set.",
    )
    OPERATOR_ISSUER: str = Field(
        "",
        description="What a token's iss must be, exactly. Empty (default): the tenant's v2.0 issuer, "
        "https://login.microsoftonline.com/<OPERATOR_TENANT_ID>/v2.0. https://sts.windows.net/<tenant>/ "
        "accepts the tenant's v1.0 tokens instead; on Azure no other issuer is accepted.",
    )
    OPERATOR_JWKS_URI: str = Field(
        "",
        description="URL of the JSON Web Key Set a token's signature is checked against. Empty (default): "
        "the tenant's, https://login.microsoftonline.com/<OPERATOR_TENANT_ID>/discovery/v2.0/keys. On "
        "Azure it must be https at login.microsoftonline.com.",
    )
    OPERATOR_TOKEN_LEEWAY_S: float = Field(
        60.0,
        ge=0,
        le=300,
        description="Seconds of clock skew allowed when a token's exp, nbf and iat are checked (default "
        "60; at most 300, the skew Microsoft's own token libraries allow).",
    )

    CONSOLE_CLIENT_ID: str = Field(
        "",
        description="Client id of the app registration the web console signs operators in with (its "
        "single-page application redirect URI is the console's URL; the operator API's own registration "
        "will do). Empty (default): the console offers only the paste-a-token form.",
    )
    CONSOLE_AUTHORITY: str = Field(
        "",
        description="The console's sign-in authority, whose /.well-known/openid-configuration names the "
        "authorize and token endpoints. Empty (default): the tenant's, "
        "https://login.microsoftonline.com/<OPERATOR_TENANT_ID>/v2.0. Must be https; on Azure at "
        "login.microsoftonline.com.",
    )
    CONSOLE_SCOPE: str = Field(
        "",
        description="The scope the console asks a token for. Empty (default): "
        "<the first OPERATOR_AUDIENCE>/.default, as api://<client id>/.default when the audience is a "
        "bare client id.",
    )

    _clients: ClientRegistry = PrivateAttr(default_factory=lambda: ClientRegistry(()))

    @field_validator("SERVICE_BINDINGS")
    @classmethod
    def _bindings_parse(cls, value: str) -> str:
        from orderflow.bindings import ServiceBindings  # noqa: PLC0415 (it imports this module)

        ServiceBindings.parse(value)  # ValueError, one line naming what is wrong
        return value

    @field_validator("CONSOLE_AUTHORITY")
    @classmethod
    def _console_authority_is_https(cls, text: str) -> str:
        # The console sends the code and its verifier there: never over plain http.
        if text.strip() and not text.strip().startswith("https://"):
            raise ValueError("CONSOLE_AUTHORITY must be an https URL (or empty)")
        return text

    @field_validator("CLIENTS")
    @classmethod
    def _clients_are_valid(cls, text: str, info: ValidationInfo) -> str:
        # The queue settings are declared before CLIENTS, so they are validated already (when valid).
        queues = {name: info.data[name] for name in _QUEUE_SETTINGS if name in info.data}
        ClientRegistry(parse_clients(text), reserved=lambda name: reserved_queue_name(name, **queues))
        return text

    def model_post_init(self, context: Any, /) -> None:
        """Build the client registry once (the ``CLIENTS`` text was checked by its validator), and refuse
        quotas that would let the clients together exceed ``MAX_IN_FLIGHT_ORDERS``.

        Raises:
            ValueError: the registry's ``maxInFlight`` values add up to more than the global ceiling, or
                leave less than one order each to the clients without one.
        """
        self._clients = ClientRegistry(parse_clients(self.CLIENTS), reserved=self.reserved_queue)
        ceiling, registry = self.MAX_IN_FLIGHT_ORDERS, self._clients
        unset = sum(1 for c in registry if c.max_in_flight is None)
        if ceiling > 0 and len(registry) and _fair_share(ceiling, registry, unset) < (1 if unset else 0):
            total = sum(c.max_in_flight or 0 for c in registry)
            short = f"leave less than one order each for the {unset} without one" if unset else "exceed it"
            raise ValueError(
                f"CLIENTS: the clients' maxInFlight values add up to {total}, which under "
                f"MAX_IN_FLIGHT_ORDERS ({ceiling}) {short}: lower them or raise the ceiling, so that no "
                "client can fill the system for the others"
            )

    @field_validator("*")
    @classmethod
    def _durations_fit_a_timedelta(cls, value: Any, info: ValidationInfo) -> Any:
        # 1e308 seconds passes every lower bound, then overflows the first deadline computed from it.
        is_duration = bool(info.field_name and info.field_name.endswith("_S"))
        if is_duration and isinstance(value, float | int) and value > MAX_DURATION_S:
            raise ValueError(f"should be at most {MAX_DURATION_S:.0f} seconds (ten years)")
        return value

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

    @field_validator("OPERATOR_TENANT_ID")
    @classmethod
    def _tenant_is_a_guid(cls, tenant: str) -> str:
        # Entra's tid claim is the tenant's GUID in lowercase; a domain name or 'common' never matches it.
        text = tenant.strip().lower()
        if text and not _GUID.fullmatch(text):
            raise ValueError(
                "should be the directory (tenant) id, a GUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), not a "
                "domain name, 'common' or 'organizations'"
            )
        return text

    @model_validator(mode="after")
    def _timeouts_end_before_their_deadlines(self) -> Settings:
        values = {name: float(getattr(self, name)) for bound in TIMEOUT_BOUNDS for name in bound[:2]}
        for refusal in timeout_refusals(values):
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _dead_letters_go_no_later_than_the_data(self) -> Settings:
        # A dead letter holds the order's whole body: keeping it longer would outlive the purge.
        data, dead = self.COMPENSATION_LOG_RETENTION_S, self.DEAD_LETTER_RETENTION_S
        if data > 0 and (dead == 0 or dead > data):
            raise ValueError(
                f"DEAD_LETTER_RETENTION_S ({dead:g}) must be more than 0 and at most "
                f"COMPENSATION_LOG_RETENTION_S ({data:g}): a dead letter holds the customer and payment "
                "data the retention purge removes from the stores"
            )
        return self

    def check_azure(self) -> None:
        """Refuse, at start-up on Azure (:func:`on_azure`), the settings that have no safe value there.

        Raises:
            UnsafeAzureSetting: the first such setting, in the order the fields are declared.
        """
        for setting, reason in self._unsafe_on_azure():
            raise UnsafeAzureSetting(setting, reason)

    def binding_refusals(self, *, azure: bool) -> list[str]:
        """Why ``SERVICE_BINDINGS`` cannot serve the deployed workflows, one line each, each starting with
        the service's name (:func:`orderflow.bindings.binding_refusals`); a value that does not parse is
        refused at load already."""
        from orderflow.bindings import ServiceBindings, binding_refusals  # noqa: PLC0415 (it imports this module)
        from orderflow.workflows import WORKFLOWS  # noqa: PLC0415

        return list(
            binding_refusals(ServiceBindings.parse(self.SERVICE_BINDINGS), WORKFLOWS.values(), azure=azure)
        )

    def check_bindings(self, *, azure: bool) -> None:
        """Refuse, at the start of a host that runs agents, bindings that cannot serve the workflows.

        Raises:
            UnsafeAzureSetting: the first refusal, one line (``SERVICE_BINDINGS <service>: <why>``).
        """
        for refusal in self.binding_refusals(azure=azure):
            raise UnsafeAzureSetting("SERVICE_BINDINGS", refusal)

    def _unsafe_on_azure(self) -> Iterator[tuple[str, str]]:
        if self.STORAGE_CONNECTION_STRING.strip():
            yield "STORAGE_CONNECTION_STRING", _NO_STORAGE_ON_AZURE
        cosmos = "the account endpoint, https://<account>.documents.azure.com:443/"
        if refusal := _url_refusal(self.COSMOS_ENDPOINT, schemes=("https",), expected=cosmos):
            yield "COSMOS_ENDPOINT", refusal
        if self.COSMOS_KEY.strip():
            yield "COSMOS_KEY", _NO_KEY_ON_AZURE
        if not self.COSMOS_VERIFY_TLS:
            yield "COSMOS_VERIFY_TLS", "is false: certificates go unchecked only against a local emulator"
        if self.SERVICEBUS.strip():
            yield "SERVICEBUS", _NO_CONNECTION_STRING_ON_AZURE
        yield from self._unsafe_service_bus_identity()
        for refusal in self.binding_refusals(azure=True):
            yield "SERVICE_BINDINGS", refusal
        yield from self._unsafe_operator_api()

    def _unsafe_service_bus_identity(self) -> Iterator[tuple[str, str]]:
        name = "SERVICEBUS__fullyQualifiedNamespace"
        namespace = self.SERVICEBUS__fullyQualifiedNamespace.strip()
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
        credential = self.SERVICEBUS__credential.strip().lower()
        if self.SERVICEBUS__clientId.strip() and credential != "managedidentity":
            yield "SERVICEBUS__credential", _CLIENT_ID_NEEDS_MANAGED_IDENTITY

    def _unsafe_operator_api(self) -> Iterator[tuple[str, str]]:
        # Not configured at all is safe: the operator API then refuses every call.
        configured = [name for name in _OPERATOR_API_SETTINGS if getattr(self, name).strip()]
        if not configured:
            return
        tenant = self.OPERATOR_TENANT_ID
        if not tenant:
            yield "OPERATOR_TENANT_ID", f"is empty while {configured[0]} is set: set the Entra tenant id"
            return
        if not self.operator_audiences():
            yield "OPERATOR_AUDIENCE", "is empty: set the operator API's client id or application ID URI"
        # Neither value is quoted: what to set helps more than what is wrong.
        if self.operator_issuer() not in (entra_issuer(tenant), entra_v1_issuer(tenant)):
            yield "OPERATOR_ISSUER", f"is not the Entra issuer: set {entra_issuer(tenant)} or leave it empty"
        if not _is_entra_https(self.operator_jwks_uri()):
            keys = entra_jwks_uri(tenant)
            yield "OPERATOR_JWKS_URI", f"is not https at {ENTRA_LOGIN_HOST}: set {keys} or leave it empty"
        if self.CONSOLE_AUTHORITY.strip() and not _is_entra_https(self.CONSOLE_AUTHORITY):
            yield "CONSOLE_AUTHORITY", f"is not https at {ENTRA_LOGIN_HOST}: leave it empty"

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``env`` (default: ``os.environ``) and keyword overrides.

        Only environment variables named like a field are read; others are ignored.

        Raises:
            pydantic.ValidationError: a value has the wrong type.
        """
        source = os.environ if env is None else env
        values: dict[str, Any] = {name: source[name] for name in cls.model_fields if name in source}
        values.update(overrides)
        return cls.model_validate(values)

    def agent_queue(self, agent: str) -> str:
        """Request queue name of an agent."""
        return f"{self.AGENT_QUEUE_PREFIX}{agent}"

    def is_response_queue(self, name: str) -> bool:
        """Whether ``name`` is one of this deployment's agent response queues: ``AGENT_RESPONSES_QUEUE``,
        or a host's ``AGENT_RESPONSES_QUEUE-<host id>`` (a host id of lowercase letters, digits and
        hyphens), never a dead-letter queue."""
        if name == self.AGENT_RESPONSES_QUEUE:
            return True
        host = name.removeprefix(f"{self.AGENT_RESPONSES_QUEUE}-")
        return (
            host != name
            and not name.endswith(DEAD_LETTER_SUFFIX)
            and re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", host) is not None
        )

    def response_queue(self) -> str:
        """Response queue of this host: ``AGENT_RESPONSES_QUEUE-<HOST_ID>`` for a devhost process
        (``AGENT_RESPONSES_PER_HOST`` and a host id), else the shared ``AGENT_RESPONSES_QUEUE``."""
        if self.AGENT_RESPONSES_PER_HOST and self.HOST_ID:
            return f"{self.AGENT_RESPONSES_QUEUE}-{self.HOST_ID}"
        return self.AGENT_RESPONSES_QUEUE

    def operator_audiences(self) -> tuple[str, ...]:
        """The audiences a token of the operator API may carry (``OPERATOR_AUDIENCE``, split on commas)."""
        return tuple(part.strip() for part in self.OPERATOR_AUDIENCE.split(",") if part.strip())

    def operator_issuer(self) -> str:
        """The issuer a token of the operator API must carry: ``OPERATOR_ISSUER``, else the v2.0 issuer of
        ``OPERATOR_TENANT_ID``, else "" (not configured)."""
        if self.OPERATOR_ISSUER.strip():
            return self.OPERATOR_ISSUER.strip()
        return entra_issuer(self.OPERATOR_TENANT_ID) if self.OPERATOR_TENANT_ID else ""

    def operator_jwks_uri(self) -> str:
        """Where the operator API's token signing keys are: ``OPERATOR_JWKS_URI``, else the JWKS of
        ``OPERATOR_TENANT_ID`` at Entra, else "" (not configured)."""
        if self.OPERATOR_JWKS_URI.strip():
            return self.OPERATOR_JWKS_URI.strip()
        return entra_jwks_uri(self.OPERATOR_TENANT_ID) if self.OPERATOR_TENANT_ID else ""

    def console_sign_in(self) -> tuple[str, str, str] | None:
        """The console's interactive sign-in, ``(authority, client id, scope)``, or None when
        ``CONSOLE_CLIENT_ID``, or the tenant and audience the defaults come from, are not set."""
        client_id = self.CONSOLE_CLIENT_ID.strip()
        authority = self.CONSOLE_AUTHORITY.strip().rstrip("/")
        if not authority and self.OPERATOR_TENANT_ID:
            authority = entra_issuer(self.OPERATOR_TENANT_ID)
        scope = self.CONSOLE_SCOPE.strip()
        if not scope and self.operator_audiences():
            audience = self.operator_audiences()[0]
            scope = f"{audience if '://' in audience else 'api://' + audience}/.default"
        if not (client_id and authority and scope):
            return None
        return authority, client_id, scope

    def client_quota(self, client: RegisteredClient) -> int:
        """The most orders ``client`` may have in flight: its ``maxInFlight``, else an equal share of what
        the registry's ``maxInFlight`` values leave of ``MAX_IN_FLIGHT_ORDERS`` (0: no quota, only
        when the global ceiling is off too).

        The settings refuse a registry whose quotas would exceed the global ceiling, so the quotas add
        up to at most ``MAX_IN_FLIGHT_ORDERS``: no client can fill the system for the others.
        """
        if client.max_in_flight is not None:
            return client.max_in_flight
        registry = self.clients()
        unset = sum(1 for c in registry if c.max_in_flight is None)
        return _fair_share(self.MAX_IN_FLIGHT_ORDERS, registry, unset)

    def is_deployment_queue(self, name: str) -> bool:
        """Whether ``name`` is one of the deployment's queues: one of orderflow's own
        (:meth:`reserved_queue`), a registered client's inbound or reply queue, or the dead-letter queue
        (``<queue>-deadletter``) of one of these that is not itself a dead-letter queue. Only these are
        ever created locally; a reply queue an earlier record names, ``x-deadletter-deadletter``, or any
        other, is not. The operator API's dead-letter routes take fewer: only the queues orderflow
        consumes (``operator_api.deadletters.deployment_queues``)."""
        if name.endswith(DEAD_LETTER_SUFFIX):
            source = name.removesuffix(DEAD_LETTER_SUFFIX)
            return not source.endswith(DEAD_LETTER_SUFFIX) and self.is_deployment_queue(source)
        registry = self.clients()
        return (
            self.reserved_queue(name) is not None
            or registry.for_inbound_queue(name) is not None
            or registry.is_reply_queue(name)
        )

    def clients(self) -> ClientRegistry:
        """The client registry of ``CLIENTS``."""
        return self._clients

    def client(self, client_id: str) -> RegisteredClient:
        """The registered client ``client_id``.

        Raises:
            KeyError: no such client in ``CLIENTS``.
        """
        return self._clients.get(client_id)

    def reserved_queue(self, name: str) -> str | None:
        """What ``name`` is among orderflow's own queues, or None when it may be a client's queue.

        See :func:`reserved_queue_name`; returns e.g. ``"a dead-letter queue"``.
        """
        return reserved_queue_name(
            name,
            AGENT_QUEUE_PREFIX=self.AGENT_QUEUE_PREFIX,
            AGENT_RESPONSES_QUEUE=self.AGENT_RESPONSES_QUEUE,
        )


def _fair_share(ceiling: int, registry: ClientRegistry, unset: int) -> int:
    """What the explicit quotas leave of ``ceiling``, split among the ``unset`` clients without one
    (all of it when every client has one; 0 when the ceiling is off)."""
    if ceiling <= 0:
        return 0
    left = ceiling - sum(c.max_in_flight or 0 for c in registry)
    return left // unset if unset else left


_QUEUE_SETTINGS = ("AGENT_QUEUE_PREFIX", "AGENT_RESPONSES_QUEUE")
"""The settings that name orderflow's own queues (:func:`reserved_queue_name`)."""


def reserved_queue_name(
    name: str,
    *,
    AGENT_QUEUE_PREFIX: str = "agent-",  # noqa: N803 (the settings' own names)
    AGENT_RESPONSES_QUEUE: str = "agent-responses",  # noqa: N803
) -> str | None:
    """What ``name`` is among orderflow's own queues, or None when it may be a client's queue.

    Reserved, from the same settings the hosts name their queues by: the response queue and every
    host's (``AGENT_RESPONSES_QUEUE`` and ``AGENT_RESPONSES_QUEUE-<hostid>``), every name starting with
    ``AGENT_QUEUE_PREFIX`` (agent request queues, present and future) and every local dead-letter queue
    (``<queue>-deadletter``). A status reply sent to one of them would be taken for a request, or read by
    nobody.

    Returns:
        A short description such as ``"a dead-letter queue"``, or None.
    """
    if name == AGENT_RESPONSES_QUEUE or name.startswith(f"{AGENT_RESPONSES_QUEUE}-"):
        return "an agent response queue (AGENT_RESPONSES_QUEUE)"
    if name.endswith(DEAD_LETTER_SUFFIX):
        return "a dead-letter queue"
    if AGENT_QUEUE_PREFIX and name.startswith(AGENT_QUEUE_PREFIX):
        return f"an agent request queue (AGENT_QUEUE_PREFIX {AGENT_QUEUE_PREFIX!r})"
    return None

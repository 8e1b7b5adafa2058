"""Service bindings: how each remote service an agent calls is reached, configured as data.

``SERVICE_BINDINGS`` holds a JSON object, one binding per agent name (``inventory``, ``payment``, ...)::

    {"payment": {
        "baseUrl": "https://payments.example.com",
        "auth": {"mode": "entra", "scope": "api://payments/.default"},
        "timeoutS": 10, "connectTimeoutS": 3,
        "operations": {
            "charge": {"method": "POST", "path": "/charges", "result": ["chargeId", "amount"]},
            "refund": {"method": "POST", "path": "/charges/by-key/{forwardKey}/refund",
                       "result": ["undone", "refundId"]}}}}

Each operation a workflow step names (its forward ``operation`` and its ``undo``) maps to one request:
method, a path template and the result fields kept from the JSON answer. The path may hold the
placeholders ``{orderId}``, ``{idempotencyKey}`` and, for an undo, ``{forwardKey}`` (each URL-quoted).
The body is always ``{"orderId", **payload}`` and the key goes in the ``Idempotency-Key`` header.

``auth`` is ``{"mode": "entra", "scope": ...}`` (a bearer token for that scope from the host's credential:
the managed identity on Azure, the local issuer locally) or ``{"mode": "none", "reason": ...}``, which
must say why, and on Azure is accepted only for a private host (:func:`is_private_host`).

Start-up refuses (:func:`binding_refusals`), one line each: a binding with plain http to a public host,
no authentication on Azure without a reason or to a public host, a loopback URL on Azure, and a step
whose operation (forward or undo) has no mapping.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from string import Formatter
from typing import Annotated, Literal, Protocol
from urllib.parse import quote, urlsplit

from azure.core.credentials import AccessTokenInfo
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from orderflow.settings.hosts import is_host_name, is_loopback_host
from orderflow.workflows import WorkflowDefinition

AGENT_ROLE = "Orderflow.Agent"
"""The app role a service grants orderflow's identity (the ``roles`` claim of the agents' tokens): a
service bound with ``entra`` accepts its calls only from a token holding it."""

PLACEHOLDERS = frozenset({"orderId", "idempotencyKey", "forwardKey"})
"""The names a path template may hold in braces."""

PRIVATE_SUFFIXES = (".internal", ".local", ".localhost", ".home.arpa", ".lan")
"""Host name endings reserved for, or by convention kept to, private networks (RFC 6762, RFC 8375,
``.internal`` as ICANN reserved it for private use)."""


def is_private_host(host: str) -> bool:
    """Whether ``host`` stays inside a private network: a loopback, private (RFC 1918, RFC 4193) or
    link-local address; a single-label name (a container or cluster service name); or a name ending in
    one of :data:`PRIVATE_SUFFIXES`; or an app of an internal Container Apps environment
    (``<app>.internal.<env>.<region>.azurecontainerapps.io``, resolved inside its VNet only). Any other
    name is public: nothing says it stays inside."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if not name:
        return False
    if is_loopback_host(name):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        labels = name.split(".")
        internal_app = name.endswith(".azurecontainerapps.io") and "internal" in labels[1:-2]
        return len(labels) == 1 or name.endswith(PRIVATE_SUFFIXES) or internal_app
    return address.is_private or address.is_link_local


class _Data(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class EntraAuth(_Data):
    """A bearer token for ``scope`` (``api://<app>/.default``) from the host's credential."""

    mode: Literal["entra"]
    scope: str = Field(min_length=1, max_length=300)


class NoAuth(_Data):
    """No credential at all: ``reason`` says why that is safe (a private network, a service without auth)."""

    mode: Literal["none"]
    reason: str = Field(min_length=1, max_length=300)


class OperationBinding(_Data):
    """The request one operation makes: ``method`` ``baseUrl`` + ``path``, keeping ``result`` fields."""

    method: Literal["POST", "PUT", "PATCH"] = "POST"
    path: str = Field(min_length=1, max_length=500)
    result: tuple[str, ...] = ()

    @field_validator("path")
    @classmethod
    def _path_template(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"path {path!r} must start with '/'")
        try:
            names = {name for _, name, _, _ in Formatter().parse(path) if name is not None}
        except ValueError as exc:
            raise ValueError(f"path {path!r} is no template: {exc}") from None
        unknown = names - PLACEHOLDERS
        if unknown:
            raise ValueError(f"path {path!r} names {sorted(unknown)}; allowed: {sorted(PLACEHOLDERS)}")
        return path

    def path_for(self, *, order_id: str, idempotency_key: str, forward_key: str | None) -> str:
        """The path with its placeholders filled in, each URL-quoted (``/`` too)."""
        values = {"orderId": order_id, "idempotencyKey": idempotency_key, "forwardKey": forward_key or ""}
        return self.path.format(**{name: quote(value, safe="") for name, value in values.items()})


class ServiceBinding(_Data):
    """One remote service: where it answers, how to authenticate, its timeouts and operations.

    Attributes:
        base_url: ``https://host[:port][/prefix]``; ``http`` only to a private host.
        auth: :class:`EntraAuth` or :class:`NoAuth`; required (no default).
        timeout_s: Most seconds one call may take (the step's deadline may cut it shorter).
        connect_timeout_s: Most seconds to open a connection.
        operations: Operation name -> :class:`OperationBinding`.
    """

    base_url: str = Field(min_length=1, max_length=500)
    auth: Annotated[EntraAuth | NoAuth, Field(discriminator="mode")]
    timeout_s: float = Field(10.0, gt=0, le=300)
    connect_timeout_s: float = Field(3.0, gt=0, le=60)
    operations: dict[str, OperationBinding] = Field(min_length=1)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        try:
            parts = urlsplit(url)
            _ = parts.port  # raises on a port outside 0-65535
        except ValueError:
            raise ValueError("baseUrl is not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("baseUrl is not an http(s) URL without query")
        if not is_host_name(parts.hostname):
            raise ValueError("baseUrl's host is not an ASCII DNS name or an address")
        if parts.username or parts.password:
            raise ValueError("baseUrl carries credentials: put them in auth, never in the URL")
        return url.rstrip("/")

    @property
    def host(self) -> str:
        """The base URL's host."""
        return urlsplit(self.base_url).hostname or ""


class ServiceBindings(_Data):
    """Every service binding, by agent name (the ``SERVICE_BINDINGS`` setting's JSON)."""

    services: dict[str, ServiceBinding]

    @classmethod
    def parse(cls, text: str) -> ServiceBindings:
        """Read ``SERVICE_BINDINGS``.

        Raises:
            ValueError: not a JSON object of bindings; the message is one line naming what is wrong.
        """
        try:
            raw = json.loads(text or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"SERVICE_BINDINGS is not JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(raw, dict):
            raise ValueError("SERVICE_BINDINGS is not a JSON object of service name -> binding")
        try:
            return cls(services=raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"][1:])
            raise ValueError(f"SERVICE_BINDINGS {where}: {first['msg']}") from None

    def to_json(self) -> str:
        """The setting's text."""
        return json.dumps(
            {name: b.model_dump(mode="json", by_alias=True) for name, b in self.services.items()},
            separators=(",", ":"),
        )


def binding_refusals(
    bindings: ServiceBindings, workflows: Iterable[WorkflowDefinition], *, azure: bool
) -> Iterator[str]:
    """Why these bindings cannot serve these workflows, one line each starting with the service's name
    (none: they can); :func:`orderflow.settings.workflow.check_bindings` raises the first.

    Args:
        bindings: The parsed ``SERVICE_BINDINGS``.
        workflows: Every deployed workflow version: each step's forward and undo operation, on its agent
            and on its fallback agent, must have a mapping.
        azure: Whether the host runs on Azure (no credential-less or loopback bindings there).
    """
    for name, binding in sorted(bindings.services.items()):
        yield from _binding_refusals(name, binding, azure=azure)
    missing: set[tuple[str, str]] = set()
    for definition in workflows:
        for step in definition.steps:
            operations = [step.operation, *([step.undo] if step.undo else [])]
            for agent in (step.agent, *([step.fallback_agent] if step.fallback_agent else [])):
                for operation in operations:
                    bound = bindings.services.get(agent)
                    if bound is None or operation not in bound.operations:
                        missing.add((agent, operation))
    for agent, operation in sorted(missing):
        yield f"{agent}: no mapping for operation {operation!r}"


def _binding_refusals(name: str, binding: ServiceBinding, *, azure: bool) -> Iterator[str]:
    scheme, host = urlsplit(binding.base_url).scheme, binding.host
    private = is_private_host(host)
    if scheme == "http" and not private:
        yield f"{name}: plain http to {host}, a public host: use https"
    if not azure:
        return
    if is_loopback_host(host):
        yield f"{name}: {host} is a loopback address, where nothing answers on Azure"
    if isinstance(binding.auth, NoAuth) and not private:
        yield f"{name}: auth none to {host}, a public host: use entra (only a private host may go without)"


class TokenSource(Protocol):
    """The credential seam: azure-identity's ``SupportsTokenInfo`` (``ManagedIdentityCredential``,
    ``DefaultAzureCredential``) or a local stand-in."""

    def get_token_info(self, *scopes: str) -> AccessTokenInfo:
        """A token for ``scopes`` (raises ``azure.core.exceptions.ClientAuthenticationError`` on failure)."""
        ...


REFRESH_MARGIN_S = 300.0
"""Seconds before expiry a token is refreshed when its credential gives no ``refresh_on``."""


class CachedTokens:
    """Bearer tokens per scope, reused until their ``refresh_on`` (or :data:`REFRESH_MARGIN_S` before
    ``expires_on``), then fetched anew; thread-safe, one fetch at a time.

    A refresh that fails while the cached token is still valid returns that token (the next call tries
    again); with no valid token left the credential's error propagates.

    Args:
        credential: Where tokens come from.
        clock: Epoch seconds (tests pass a fake).
    """

    def __init__(self, credential: TokenSource, *, clock: Callable[[], float] = time.time) -> None:
        self._credential = credential
        self._clock = clock
        self._tokens: dict[str, AccessTokenInfo] = {}
        self._lock = threading.Lock()

    def token(self, scope: str) -> str:
        """The bearer token for ``scope``."""
        with self._lock:
            now = self._clock()
            cached = self._tokens.get(scope)
            if cached is not None and now < _refresh_at(cached):
                return cached.token
            try:
                fresh = self._credential.get_token_info(scope)
            except Exception:
                if cached is not None and now < cached.expires_on - 30:
                    return cached.token
                raise
            self._tokens[scope] = fresh
            return fresh.token

    def forget(self, scope: str) -> None:
        """Drop ``scope``'s token (a service refused it): the next call fetches a new one."""
        with self._lock:
            self._tokens.pop(scope, None)


def _refresh_at(info: AccessTokenInfo) -> float:
    if info.refresh_on is not None:
        return min(float(info.refresh_on), info.expires_on - 30.0)
    return info.expires_on - REFRESH_MARGIN_S

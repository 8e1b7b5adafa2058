"""The operator API section: which Microsoft Entra tenant's tokens the operator API accepts, the
console's sign-in, and the API's timeouts; with the Entra addresses derived from a tenant id."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from orderflow.settings.base import Section

ENTRA_LOGIN_HOST = "login.microsoftonline.com"
"""Microsoft Entra ID's sign-in host (global Azure): a tenant's v2.0 issuer and its signing keys are there."""

_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

OPERATOR_API_SETTINGS = ("OPERATOR_TENANT_ID", "OPERATOR_AUDIENCE", "OPERATOR_ISSUER", "OPERATOR_JWKS_URI")
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


def is_entra_https(url: str) -> bool:
    """Whether ``url`` is https at :data:`ENTRA_LOGIN_HOST` (default port, no user name)."""
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


class OperatorApi(Section):
    """Operator API: the Entra tenant, audience, issuer and keys a token is checked against, the
    console's sign-in, and the API's timeouts. Read by the operator API, its token validator and the
    CLI."""

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

    @field_validator("CONSOLE_AUTHORITY")
    @classmethod
    def _console_authority_is_https(cls, text: str) -> str:
        # The console sends the code and its verifier there: never over plain http.
        if text.strip() and not text.strip().startswith("https://"):
            raise ValueError("CONSOLE_AUTHORITY must be an https URL (or empty)")
        return text

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

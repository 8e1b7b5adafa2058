"""What a bearer token must be and say: the header's form, the size, algorithm and claim limits, the
policy it is checked against, and the checks that turn verified claims into a principal."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from orderflow.entra_ids import guid_or_none
from orderflow.operator_auth.principal import (
    Principal,
    Unauthenticated,
)
from orderflow.settings import OperatorApi

ALLOWED_ALGORITHMS = ("RS256",)
"""The only signing algorithm accepted: what Entra ID signs access tokens with."""
REQUIRED_CLAIMS = ("iss", "aud", "exp", "nbf", "iat", "sub", "oid", "tid")
"""Claims every Entra access token carries and a token without one of them is refused for."""
TIME_CLAIMS = ("exp", "nbf", "iat")
"""Claims that are times: RFC 7519 NumericDates, JSON numbers of seconds since 1970-01-01T00:00:00Z UTC."""
MAX_NUMERIC_DATE = 253_402_300_799
"""The latest time a time claim may name, seconds since the epoch: 9999-12-31T23:59:59Z."""

MAX_TOKEN_LIFETIME_S = 24 * 3600
"""The longest ``exp - iat`` accepted, seconds. Entra access tokens live 60-90 minutes by default and at
most about a day; a token valid for longer can only have been minted by whoever holds a signing key, and
would outlive any revocation of the principal's role."""
MAX_TOKEN_CHARS = 16_384
"""Longest token read at all. Entra tokens are a few kilobytes; this bounds the work a caller can cause."""
JWKS_CACHE_S = 3600.0
"""Seconds a fetched key set is reused before it is fetched again."""
JWKS_REFRESH_COOLDOWN_S = 30.0
"""Least seconds between two fetches of the key set caused by an unknown ``kid``."""
JWKS_FETCH_TIMEOUT_S = 5.0
"""Timeout of one key set fetch, seconds, and the longest a request waits on a fetch."""
UNKNOWN_KEY_ID_TTL_S = 300.0
"""Seconds a key id that a fetched key set lacked is refused without a refetch. Entra publishes a new key
weeks before it signs with it, so a genuine key id is in the set long before any token names it."""
MAX_KEY_ID_CHARS = 256
"""Longest ``kid`` read at all: Entra's are under 50 characters, and unknown ones are remembered."""


_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 6750 §2.1 ``b64token``: what a bearer token may be made of."""


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value.

    Raises:
        Unauthenticated: no header, another scheme, no token (all without an RFC 6750 error code), or a
            value that cannot be a token (too long, characters outside RFC 6750's ``b64token``).
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if not scheme:
        raise Unauthenticated("no bearer token", error=None)
    if scheme.lower() != "bearer":
        raise Unauthenticated("not a bearer token", error=None)
    token = token.strip()
    if not token:
        raise Unauthenticated("no bearer token", error=None)
    if len(token) > MAX_TOKEN_CHARS:
        raise Unauthenticated("token too long")
    if not _TOKEN68.fullmatch(token):
        raise Unauthenticated("malformed token")
    return token


@dataclass(frozen=True)
class TokenPolicy:
    """What a token must satisfy.

    Attributes:
        issuer: The exact ``iss``.
        audiences: The accepted ``aud`` values (the token's must be one of them).
        tenant_id: The exact ``tid``.
        jwks_uri: Where the signing keys are (http or https).
        leeway_s: Clock skew allowed on ``exp``, ``nbf`` and ``iat``, seconds.
    """

    issuer: str
    audiences: tuple[str, ...]
    tenant_id: str
    jwks_uri: str
    leeway_s: float = 60.0

    @classmethod
    def from_section(cls, api: OperatorApi) -> TokenPolicy:
        """The policy of ``OPERATOR_TENANT_ID``, ``OPERATOR_AUDIENCE``, ``OPERATOR_ISSUER``,
        ``OPERATOR_JWKS_URI`` and ``OPERATOR_TOKEN_LEEWAY_S``.

        Raises:
            ValueError: the operator API is not configured (no tenant or no audience).
        """
        if not api.OPERATOR_TENANT_ID or not api.operator_audiences():
            raise ValueError(
                "the operator API is not configured: set OPERATOR_TENANT_ID and OPERATOR_AUDIENCE"
            )
        return cls(
            issuer=api.operator_issuer(),
            audiences=api.operator_audiences(),
            tenant_id=api.OPERATOR_TENANT_ID,
            jwks_uri=api.operator_jwks_uri(),
            leeway_s=api.OPERATOR_TOKEN_LEEWAY_S,
        )


def check_claims(claims: Mapping[str, Any], policy: TokenPolicy) -> None:
    """The checks the library leaves to its caller, on claims whose signature and times it verified.

    Raises:
        Unauthenticated: another issuer or tenant, an audience list, or a lifetime over a day.
    """
    if claims.get("iss") != policy.issuer:  # the library compares too; exact equality is the rule
        raise Unauthenticated("wrong issuer")
    tenant = guid_or_none(claims.get("tid"))
    if tenant is None or tenant != guid_or_none(policy.tenant_id):
        raise Unauthenticated("wrong tenant")
    if not isinstance(claims.get("aud"), str):
        raise Unauthenticated("wrong audience")  # Entra names one audience; a list is not its token
    # exp and iat are numbers: validate_token checked this very payload before the key lookup.
    if claims["exp"] - claims["iat"] > MAX_TOKEN_LIFETIME_S:
        raise Unauthenticated("token lifetime too long")


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a token whose signature is not checked yet: only ever read to refuse it early."""
    try:
        return dict(jwt.decode(token, options={"verify_signature": False}))
    except jwt.PyJWTError:
        raise Unauthenticated("malformed token") from None


def check_time_claims(claims: Mapping[str, Any]) -> None:
    """Refuse a token whose ``exp``, ``nbf`` or ``iat`` is not a number of seconds from 1970 to the year 9999
    (a numeric string, a boolean, a non-finite or huge number ...). An absent or null one is left to the
    required-claims check, which names it.

    Raises:
        Unauthenticated: ``malformed <claim> claim``.
    """
    for name in TIME_CLAIMS:
        value = claims.get(name)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value <= MAX_NUMERIC_DATE
        ):
            raise Unauthenticated(f"malformed {name} claim")


def token_key_id(token: str) -> str:
    """The ``kid`` of a token whose header names an allowed algorithm."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Unauthenticated("malformed token") from None
    if header.get("alg") not in ALLOWED_ALGORITHMS:
        raise Unauthenticated("signing algorithm not allowed")
    key_id = header.get("kid")
    if not isinstance(key_id, str) or not key_id:
        raise Unauthenticated("no key id")
    if len(key_id) > MAX_KEY_ID_CHARS:
        raise Unauthenticated("unknown signing key")
    return key_id


def claim_name(claim: str) -> str:
    """``claim`` as a refusal may name it: itself when orderflow requires it, else ``required``."""
    # Only a claim orderflow requires is named (never text of the token's own).
    return claim if claim in REQUIRED_CLAIMS else "required"


def _text_claim(claims: Mapping[str, Any], *names: str) -> str:
    """The first of ``names`` that is a non-empty string claim, or ""."""
    for name in names:
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _guid_claim(claims: Mapping[str, Any], *names: str) -> str:
    """The first of ``names`` that is a non-empty string claim, as a canonical GUID.

    Raises:
        Unauthenticated: none is (``no <first name> claim``), or it is no GUID (``malformed <name> claim``).
    """
    for name in names:
        value = claims.get(name)
        if value is None or value == "":
            continue
        guid = guid_or_none(value) if isinstance(value, str) else None
        if guid is None:
            raise Unauthenticated(f"malformed {name} claim")
        return guid
    raise Unauthenticated(f"no {names[0]} claim")


def principal_from_claims(claims: Mapping[str, Any], policy: TokenPolicy) -> Principal:
    """The principal verified claims name, checked against ``policy``.

    Raises:
        Unauthenticated: a claim is missing or not of its form.
    """
    object_id = _guid_claim(claims, "oid")
    roles = claims.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
        raise Unauthenticated("malformed roles claim")
    # An access token names the application it was issued to (azp, v2.0; appid, v1.0); an ID token
    # names none and carries a nonce. Only access tokens are credentials for an API.
    if not _text_claim(claims, "azp", "appid") or "nonce" in claims:
        raise Unauthenticated("not an access token")
    return Principal(
        object_id=object_id,
        tenant_id=policy.tenant_id,
        subject=_text_claim(claims, "sub"),
        roles=frozenset(roles),
        app_id=_guid_claim(claims, "azp", "appid"),
        display_name=_text_claim(claims, "name", "preferred_username"),
    )

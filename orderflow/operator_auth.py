"""Who is calling the operator API, proven by a bearer token, and whether they may do what they ask.

On Azure the tokens are Microsoft Entra ID access tokens for the operator API's app registration;
locally ``devhost.local_issuer`` mints tokens of the same shape with a local key, and this same code
checks them against that key's JWKS. :class:`TokenValidator` turns an ``Authorization`` header into a
verified :class:`Principal`; :func:`authorize` checks an app role. The checks follow Microsoft's
"Access tokens in the Microsoft identity platform" (section "Validate tokens",
https://learn.microsoft.com/entra/identity-platform/access-tokens), its claims reference
(https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference) and "Add app roles
to your application and receive them in the token"
(https://learn.microsoft.com/entra/identity-platform/howto-add-app-roles-in-apps):

- the signature, RS256 only (``none``, HMAC and everything else are refused before any key is looked
  up, so a public key can never serve as an HMAC secret), by the key the header's ``kid`` names in the
  configured JWKS; the token's own ``jku``, ``x5u`` or ``jwk`` headers are never followed. Keys roll over
  without notice (https://learn.microsoft.com/entra/identity-platform/signing-key-rollover): the key set
  is cached (:class:`orderflow.signing_keys.SigningKeys`): a token whose key is cached never waits for a
  fetch, one fetch at a time serves every request that needs it, nobody waits on it longer than
  ``OPERATOR_JWKS_TIMEOUT_S``, and an unknown ``kid`` refetches the set at most once per
  :data:`JWKS_REFRESH_COOLDOWN_S` and, once a fetched set lacked it, not again for
  :data:`UNKNOWN_KEY_ID_TTL_S`: made-up key ids turn neither into a stream of requests to the tenant nor
  into a wait for anyone else;
- ``iss`` exactly the configured issuer (v1.0 tokens, ``https://sts.windows.net/<tenant>/``, only when
  that is the one configured), ``aud`` a single string, one of the configured audiences, ``exp``, ``nbf``
  and ``iat`` numbers (never strings or booleans, checked before any key is looked up or any arithmetic)
  within the configured leeway and ``exp - iat`` at most :data:`MAX_TOKEN_LIFETIME_S`, ``tid`` the
  configured tenant, and every claim of :data:`REQUIRED_CLAIMS` present;
- ``oid``, ``tid`` and ``azp`` (or ``appid``) read as GUIDs (:mod:`orderflow.entra_ids`): a principal is
  kept and compared in one canonical form (:meth:`Principal.may_be`), whatever form the token wrote.

A refusal is :class:`Unauthenticated` (401, with the ``WWW-Authenticate`` challenge of RFC 6750 §3),
:class:`Forbidden` (403) or, when the signing keys cannot be fetched, :class:`SigningKeysUnavailable`
(503: the caller's token may be fine). :func:`http_refusal` is the one mapping of the three onto a
response. Reasons are a few fixed words: they never quote the token or a part of it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from orderflow import telemetry
from orderflow.entra_ids import guid_or_none
from orderflow.errors import ErrorKind, OrderflowError, TransientError
from orderflow.settings import Settings
from orderflow.signing_keys import KeySetUnavailable, SigningKeys, UnknownKeyId

logger = logging.getLogger(__name__)

OPERATOR_ROLE = "orderflow.operator"
"""App role of an operator: list, inspect, resubmit, suspend, compensate, replay dead letters."""
REVIEWER_ROLE = "orderflow.reviewer"
"""App role of a reviewer: decide an order paused for review."""
ROLES = (OPERATOR_ROLE, REVIEWER_ROLE)
"""Every app role the operator API checks (the ``value`` of each app role of its app registration)."""

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

REALM = "orderflow"
"""The ``realm`` of the ``WWW-Authenticate`` challenge."""

_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 6750 §2.1 ``b64token``: what a bearer token may be made of."""
_CHALLENGE_TEXT = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
"""Characters RFC 6750 §3 does not allow in ``error_description`` (quotes, backslashes, non-ASCII)."""


@dataclass(frozen=True)
class Principal:
    """A caller the operator API has verified.

    Attributes:
        object_id: ``oid``: the user's (or the calling service principal's) object id in the tenant,
            the same for every app; what audit fields record and what two principals are compared by.
        tenant_id: ``tid``: the tenant that issued the token.
        subject: ``sub``: the principal as this API sees it (pairwise per app in Entra).
        roles: ``roles``: the app roles granted to the principal (none if the claim is absent).
        app_id: ``azp`` (v2.0) or ``appid`` (v1.0): the client application that asked for the token.
        display_name: ``name``, else ``preferred_username``: for showing only; never an identity.
    """

    object_id: str
    tenant_id: str
    subject: str
    roles: frozenset[str]
    app_id: str = ""
    display_name: str = ""

    def has_role(self, role: str) -> bool:
        """Whether the token granted app role ``role``."""
        return role in self.roles

    def may_be(self, principal_id: str) -> bool:
        """Whether ``principal_id`` (an object id, e.g. a client's ``principalId``) may name this principal:
        the same GUID in any written form. An id of either that is not a GUID cannot be told apart from
        the other, so it counts as the same: a rule refusing a principal its own orders refuses then."""
        mine, theirs = guid_or_none(self.object_id), guid_or_none(principal_id)
        return mine is None or theirs is None or mine == theirs

    @property
    def audit_id(self) -> str:
        """Who acted, as audit fields record it: ``<tenant id>/<object id>``, the verified ids (the tenant
        too, since an object id is unique only within its tenant). Never the display name."""
        return f"{self.tenant_id}/{self.object_id}"

    def audit_fields(self) -> dict[str, str]:
        """What an audit record says about who acted: the verified ids, and the name for people to read."""
        return {
            "principalId": self.object_id,
            "tenantId": self.tenant_id,
            "appId": self.app_id,
            "displayName": self.display_name,
        }


class Unauthenticated(OrderflowError):
    """The request does not prove who is calling: no bearer token, or one that fails a check (401).

    Attributes:
        reason: A few fixed words on what failed (``token expired``); never any part of the token.
        error: The RFC 6750 error code: ``invalid_token``, or None when the request carried no bearer
            token at all (RFC 6750 §3.1: then the challenge names no error).
    """

    kind = ErrorKind.UNAUTHENTICATED

    def __init__(self, reason: str, *, error: str | None = "invalid_token") -> None:
        self.reason = reason
        self.error = error
        super().__init__(reason)

    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` header value of the 401 response."""
        return www_authenticate(error=self.error, description=self.reason if self.error else "")


class Forbidden(OrderflowError):
    """A verified principal asked for an action its app roles do not allow (403).

    Attributes:
        principal_id: The principal's object id.
        role: The app role the action needs (the first, when any of several would do).
        roles: Every app role that would allow the action.
    """

    kind = ErrorKind.FORBIDDEN

    def __init__(self, principal: Principal, role: str, *alternatives: str) -> None:
        self.principal_id = principal.object_id
        self.role = role
        self.roles = (role, *alternatives)
        super().__init__(f"principal {principal.object_id} does not have {self._needed()}")

    def _needed(self) -> str:
        if len(self.roles) == 1:
            return f"the app role {self.role}"
        return f"any of the app roles {', '.join(self.roles)}"

    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` header value of the 403 response (RFC 6750 ``insufficient_scope``)."""
        return www_authenticate(error="insufficient_scope", description=f"requires {self._needed()}")


class SigningKeysUnavailable(TransientError):
    """The signing keys could not be fetched or were unusable: the token could not be checked (503)."""


def www_authenticate(*, error: str | None = None, description: str = "") -> str:
    """A ``Bearer`` challenge (RFC 6750 §3): ``Bearer realm="orderflow", error="...",
    error_description="..."``; ``error`` and ``error_description`` only when given. Characters the RFC
    does not allow in the description are dropped."""
    parts = [f'realm="{REALM}"']
    if error:
        parts.append(f'error="{error}"')
    if description:
        parts.append(f'error_description="{_CHALLENGE_TEXT.sub("", description)}"')
    return "Bearer " + ", ".join(parts)


def http_refusal(error: Unauthenticated | Forbidden | SigningKeysUnavailable) -> tuple[int, dict[str, str]]:
    """The HTTP status and headers that answer a refused operator API request.

    Returns:
        ``(401, {"WWW-Authenticate": ...})``, ``(403, {"WWW-Authenticate": ...})`` or ``(503, {})``.
    """
    if isinstance(error, Unauthenticated):
        return 401, {"WWW-Authenticate": error.www_authenticate()}
    if isinstance(error, Forbidden):
        return 403, {"WWW-Authenticate": error.www_authenticate()}
    return 503, {}


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
    def from_settings(cls, settings: Settings) -> TokenPolicy:
        """The policy of ``OPERATOR_TENANT_ID``, ``OPERATOR_AUDIENCE``, ``OPERATOR_ISSUER``,
        ``OPERATOR_JWKS_URI`` and ``OPERATOR_TOKEN_LEEWAY_S``.

        Raises:
            ValueError: the operator API is not configured (no tenant or no audience).
        """
        if not settings.OPERATOR_TENANT_ID or not settings.operator_audiences():
            raise ValueError(
                "the operator API is not configured: set OPERATOR_TENANT_ID and OPERATOR_AUDIENCE"
            )
        return cls(
            issuer=settings.operator_issuer(),
            audiences=settings.operator_audiences(),
            tenant_id=settings.OPERATOR_TENANT_ID,
            jwks_uri=settings.operator_jwks_uri(),
            leeway_s=settings.OPERATOR_TOKEN_LEEWAY_S,
        )


class TokenValidator:
    """Checks bearer tokens against one :class:`TokenPolicy`; safe to share between threads.

    One per process: it holds the cached signing keys.

    Args:
        policy: What a token must satisfy.
        refresh_cooldown_s: Least seconds between key set fetches an unknown ``kid`` causes.
        cache_s: Seconds a fetched key set is used before it is refetched (in the background).
        fetch_timeout_s: Timeout of one fetch, seconds.
        wait_s: Longest a request waits on a fetch, seconds (default ``fetch_timeout_s``).
        unknown_key_ttl_s: Seconds a ``kid`` that a fetched key set lacked is refused without a refetch.
        monotonic: The clock of the key set's times, seconds (``time.monotonic``).

    Raises:
        ValueError: ``policy.jwks_uri`` is not an http or https URL.
    """

    def __init__(
        self,
        policy: TokenPolicy,
        *,
        refresh_cooldown_s: float = JWKS_REFRESH_COOLDOWN_S,
        cache_s: float = JWKS_CACHE_S,
        fetch_timeout_s: float = JWKS_FETCH_TIMEOUT_S,
        wait_s: float | None = None,
        unknown_key_ttl_s: float = UNKNOWN_KEY_ID_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not policy.jwks_uri.lower().startswith(("http://", "https://")):
            raise ValueError("the JWKS URI (OPERATOR_JWKS_URI) is not an http or https URL")
        self.policy = policy
        self._keys = SigningKeys(
            policy.jwks_uri,
            fetch_timeout_s=fetch_timeout_s,
            wait_s=fetch_timeout_s if wait_s is None else wait_s,
            cache_s=cache_s,
            refresh_cooldown_s=refresh_cooldown_s,
            unknown_key_ttl_s=unknown_key_ttl_s,
            monotonic=monotonic,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenValidator:
        """A validator of :meth:`TokenPolicy.from_settings`.

        Raises:
            ValueError: the operator API is not configured, or its JWKS URI is not http(s).
        """
        return cls(TokenPolicy.from_settings(settings), fetch_timeout_s=settings.OPERATOR_JWKS_TIMEOUT_S)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal an ``Authorization`` header value proves.

        Raises:
            Unauthenticated: no bearer token, or a token that fails a check.
            SigningKeysUnavailable: the signing keys could not be fetched.
        """
        return self.validate_token(bearer_token(authorization))

    def validate_token(self, token: str) -> Principal:
        """The principal a bearer token proves.

        Raises:
            Unauthenticated: the token fails a check.
            SigningKeysUnavailable: the signing keys could not be fetched.
        """
        if len(token) > MAX_TOKEN_CHARS:
            raise Unauthenticated("token too long")
        key_id = _key_id(token)
        _check_time_claims(_unverified_claims(token))  # before a key is looked up, or fetched
        claims = self._verified_claims(token, self._signing_key(key_id))
        return _principal(claims, self.policy)

    def _signing_key(self, key_id: str) -> RSAPublicKey:
        # A failure to get a usable key set is the endpoint's (503), never the caller's.
        try:
            jwk = self._keys.get(key_id)
        except UnknownKeyId:
            raise Unauthenticated("unknown signing key") from None
        except KeySetUnavailable as unavailable:
            raise SigningKeysUnavailable(unavailable.detail) from None
        if not isinstance(jwk.key, RSAPublicKey):
            raise Unauthenticated("the signing key is not an RSA key")
        return jwk.key

    def _verified_claims(self, token: str, key: RSAPublicKey) -> dict[str, Any]:
        # The library's messages and exceptions are not passed on (`from None`): some quote the token.
        policy = self.policy
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALLOWED_ALGORITHMS),
                audience=list(policy.audiences),
                issuer=policy.issuer,
                leeway=policy.leeway_s,
                options={"require": list(REQUIRED_CLAIMS), "enforce_minimum_key_length": True},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("token not yet valid") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("wrong audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("wrong issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"no {_claim_name(exc.claim)} claim") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("bad signature") from None
        except jwt.InvalidAlgorithmError:
            raise Unauthenticated("signing algorithm not allowed") from None
        except (jwt.InvalidTokenError, jwt.InvalidKeyError):
            raise Unauthenticated("invalid token") from None
        _check_claims(claims, policy)
        return claims


def _check_claims(claims: Mapping[str, Any], policy: TokenPolicy) -> None:
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


def _unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a token whose signature is not checked yet: only ever read to refuse it early."""
    try:
        return dict(jwt.decode(token, options={"verify_signature": False}))
    except jwt.PyJWTError:
        raise Unauthenticated("malformed token") from None


def _check_time_claims(claims: Mapping[str, Any]) -> None:
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


def _key_id(token: str) -> str:
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


def _claim_name(claim: str) -> str:
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


def _principal(claims: Mapping[str, Any], policy: TokenPolicy) -> Principal:
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


def authorize(principal: Principal, role: str, *alternatives: str) -> None:
    """Refuse, and record, a principal without app role ``role`` (or any of ``alternatives``).

    A refusal is an ``operator.forbidden`` event (:func:`orderflow.telemetry.event`) with the principal's
    object id and tenant and the role (the roles, comma-separated, when any of several would do).

    Raises:
        Forbidden: ``principal`` has none of the roles.
        ValueError: a role is not one of :data:`ROLES` (a programming error).
    """
    for needed in (role, *alternatives):
        if needed not in ROLES:
            raise ValueError(f"unknown app role {needed!r}; the operator API's roles are {', '.join(ROLES)}")
    if not any(principal.has_role(needed) for needed in (role, *alternatives)):
        telemetry.event(
            "operator.forbidden",
            principal_id=principal.object_id,
            tenant_id=principal.tenant_id,
            role=",".join((role, *alternatives)),
        )
        raise Forbidden(principal, role, *alternatives)


def known_roles(roles: Iterable[str]) -> tuple[str, ...]:
    """``roles`` when each is one of :data:`ROLES`, sorted and without repeats.

    Raises:
        ValueError: one is not (naming it and the known ones).
    """
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown app role {unknown[0]!r}: choose from {', '.join(ROLES)}")
    return tuple(sorted(set(roles)))


def validator_from_settings(settings: Settings) -> TokenValidator | None:
    """The token validator of the ``OPERATOR_*`` settings, or None when neither ``OPERATOR_TENANT_ID`` nor
    ``OPERATOR_AUDIENCE`` is set: the operator API is not configured, and refuses every call.

    Raises:
        ValueError: the settings configure the API only in part, or name a JWKS URI that is not http(s).
    """
    if not settings.OPERATOR_TENANT_ID.strip() and not settings.operator_audiences():
        return None
    validator = TokenValidator.from_settings(settings)
    unknown = sorted(client.client_id for client in settings.clients() if client.principal_id is None)
    if unknown:
        # Self-approval is refused by the submitter's principalId: without one it cannot be told.
        logger.warning(
            "clients without a principalId: %s; a reviewer holding such a client's identity could approve "
            "its orders (set principalId in CLIENTS, docs/clients.md)",
            ", ".join(unknown),
        )
    return validator

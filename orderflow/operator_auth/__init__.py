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

The package's modules: :mod:`.principal` (roles, the principal, refusals), :mod:`.claims` (the
token's form and claim checks) and :mod:`.validator` (signature verification and the validator).
"""

from __future__ import annotations

from orderflow.operator_auth.claims import (
    ALLOWED_ALGORITHMS,
    JWKS_CACHE_S,
    JWKS_FETCH_TIMEOUT_S,
    JWKS_REFRESH_COOLDOWN_S,
    MAX_KEY_ID_CHARS,
    MAX_NUMERIC_DATE,
    MAX_TOKEN_CHARS,
    MAX_TOKEN_LIFETIME_S,
    REQUIRED_CLAIMS,
    TIME_CLAIMS,
    UNKNOWN_KEY_ID_TTL_S,
    TokenPolicy,
    bearer_token,
)
from orderflow.operator_auth.principal import (
    OPERATOR_ROLE,
    REALM,
    REVIEWER_ROLE,
    ROLES,
    Forbidden,
    Principal,
    SigningKeysUnavailable,
    Unauthenticated,
    authorize,
    http_refusal,
    known_roles,
    www_authenticate,
)
from orderflow.operator_auth.validator import TokenValidator, validator_from_settings

__all__ = [
    "ALLOWED_ALGORITHMS",
    "JWKS_CACHE_S",
    "JWKS_FETCH_TIMEOUT_S",
    "JWKS_REFRESH_COOLDOWN_S",
    "MAX_KEY_ID_CHARS",
    "MAX_NUMERIC_DATE",
    "MAX_TOKEN_CHARS",
    "MAX_TOKEN_LIFETIME_S",
    "OPERATOR_ROLE",
    "REALM",
    "REQUIRED_CLAIMS",
    "REVIEWER_ROLE",
    "ROLES",
    "TIME_CLAIMS",
    "UNKNOWN_KEY_ID_TTL_S",
    "Forbidden",
    "Principal",
    "SigningKeysUnavailable",
    "TokenPolicy",
    "TokenValidator",
    "Unauthenticated",
    "authorize",
    "bearer_token",
    "http_refusal",
    "known_roles",
    "validator_from_settings",
    "www_authenticate",
]

"""The token validator: a bearer token's signature verified against the cached signing keys, then its
claims checked; built from the ``OPERATOR_*`` settings."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from orderflow.operator_auth.claims import (
    ALLOWED_ALGORITHMS,
    JWKS_CACHE_S,
    JWKS_FETCH_TIMEOUT_S,
    JWKS_REFRESH_COOLDOWN_S,
    MAX_TOKEN_CHARS,
    REQUIRED_CLAIMS,
    UNKNOWN_KEY_ID_TTL_S,
    TokenPolicy,
    bearer_token,
    check_claims,
    check_time_claims,
    claim_name,
    principal_from_claims,
    token_key_id,
    unverified_claims,
)
from orderflow.operator_auth.principal import (
    Principal,
    SigningKeysUnavailable,
    Unauthenticated,
)
from orderflow.settings import Clients, OperatorApi
from orderflow.signing_keys import KeySetUnavailable, SigningKeys, UnknownKeyId

logger = logging.getLogger("orderflow.operator_auth")  # the package's one logger, as filters name it


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
    def from_section(cls, api: OperatorApi) -> TokenValidator:
        """A validator of :meth:`TokenPolicy.from_section`.

        Raises:
            ValueError: the operator API is not configured, or its JWKS URI is not http(s).
        """
        return cls(TokenPolicy.from_section(api), fetch_timeout_s=api.OPERATOR_JWKS_TIMEOUT_S)

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
        key_id = token_key_id(token)
        check_time_claims(unverified_claims(token))  # before a key is looked up, or fetched
        claims = self._verified_claims(token, self._signing_key(key_id))
        return principal_from_claims(claims, self.policy)

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
            raise Unauthenticated(f"no {claim_name(exc.claim)} claim") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("bad signature") from None
        except jwt.InvalidAlgorithmError:
            raise Unauthenticated("signing algorithm not allowed") from None
        except (jwt.InvalidTokenError, jwt.InvalidKeyError):
            raise Unauthenticated("invalid token") from None
        check_claims(claims, policy)
        return claims


def validator_from_settings(api: OperatorApi, clients: Clients) -> TokenValidator | None:
    """The token validator of the ``OPERATOR_*`` settings, or None when neither ``OPERATOR_TENANT_ID`` nor
    ``OPERATOR_AUDIENCE`` is set: the operator API is not configured, and refuses every call.

    Raises:
        ValueError: the settings configure the API only in part, or name a JWKS URI that is not http(s).
    """
    if not api.OPERATOR_TENANT_ID.strip() and not api.operator_audiences():
        return None
    validator = TokenValidator.from_section(api)
    unknown = sorted(client.client_id for client in clients.clients() if client.principal_id is None)
    if unknown:
        # Self-approval is refused by the submitter's principalId: without one it cannot be told.
        logger.warning(
            "clients without a principalId: %s; a reviewer holding such a client's identity could approve "
            "its orders (set principalId in CLIENTS, docs/clients.md)",
            ", ".join(unknown),
        )
    return validator

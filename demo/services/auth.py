"""The demo services' caller check: only orderflow's agents, with a valid bearer token, may call them.

A call to a service endpoint (inventory, payments, shipping) must carry ``Authorization: Bearer <JWT>``
signed RS256 by the trusted key, with this service's ``iss`` and ``aud``, not expired (nor before its
``nbf``), and the app role :data:`orderflow.bindings.AGENT_ROLE` in ``roles``: the checks an Entra-protected
API makes on an app-only token. Locally the key is the devhost's local issuer's
(:mod:`devhost.local_issuer`), whose tokens the agents get through
:class:`devhost.service_credential.LocalAgentCredential`. On Azure (:meth:`AgentAuth.entra`) the keys are
the tenant's, read from its JWKS, the issuer is ``https://login.microsoftonline.com/<tenant>/v2.0`` and the
audience the services' app registration (its client id, or ``api://<client id>``); the reporting routes
then take a token too, with the app role :data:`DEMO_DRIVER_ROLE`. Refusals, before anything else is read:

* 401 ``invalid_token`` (with ``WWW-Authenticate: Bearer``): no token, not a bearer token, a bad
  signature, another issuer, tenant (``tid``, on Azure) or audience, an audience list, times that are not
  numbers, expired or not yet valid;
* 403 ``missing_role``: a valid token without the agents' app role.

Locally the reporting endpoints (audit, facts, stock, faults, health) are the demo drivers' instruments
and are not checked: the services listen on loopback only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import Request
from fastapi.responses import JSONResponse

from demo.services.bindings import DEMO_SERVICES_AUDIENCE
from orderflow.bindings import AGENT_ROLE
from orderflow.operator_auth import MAX_TOKEN_LIFETIME_S

if TYPE_CHECKING:
    from devhost.local_issuer import LocalIssuer

LEEWAY_S = 60
"""Seconds of clock difference allowed on ``exp`` and ``nbf``."""

DEMO_DRIVER_ROLE = "Orderflow.DemoDriver"
"""The app role the reporting and steering routes take on Azure: the deployer running make demo-azure."""

MANAGED_IDENTITY_LIFETIME_S = 25 * 3600
"""The longest ``exp - iat`` accepted of Entra's tokens: a managed identity's live 24 hours, and Entra
stamps ``iat`` minutes before it issues a token; an hour's margin."""

ENTRA_AUTHORITY = "https://login.microsoftonline.com"
"""Where Entra ID's tenants issue tokens and publish their keys."""


def entra_issuer(tenant_id: str) -> str:
    """``iss`` of a tenant's v2.0 access tokens."""
    return f"{ENTRA_AUTHORITY}/{tenant_id}/v2.0"


def entra_jwks_uri(tenant_id: str) -> str:
    """The tenant's signing keys (JWKS) for v2.0 tokens."""
    return f"{ENTRA_AUTHORITY}/{tenant_id}/discovery/v2.0/keys"


class CallerRefused(Exception):
    """A call the check refuses: ``status`` 401 or 403 and the error ``code``."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        super().__init__(f"{status} {code}: {detail}")

    def response(self) -> JSONResponse:
        """The refusal as the services answer it (an auth refusal says nothing of the request itself,
        hence ``permanent: false``)."""
        headers = {"WWW-Authenticate": f'Bearer error="{self.code}"'} if self.status == 401 else None
        body = {"error": self.code, "permanent": False, "detail": self.detail}
        return JSONResponse(status_code=self.status, content=body, headers=headers)


class AgentAuth:
    """Checks the bearer token of a call (see the module docstring).

    Args:
        public_key: The issuer's signing key (public part), or a JWKS client that finds it by the
            token's ``kid``.
        issuer: The ``iss`` accepted.
        audience: The ``aud`` accepted, or several (any one of them).
        role: The app role required.
        max_lifetime_s: The longest ``exp - iat`` accepted, seconds.
        tenant_id: The ``tid`` required (Entra's tokens name their tenant), or None: no ``tid`` check and
            no ``nbf`` required (the local issuer's tokens).
    """

    def __init__(
        self,
        public_key: rsa.RSAPublicKey | jwt.PyJWKClient,
        *,
        issuer: str,
        audience: str | Sequence[str] = DEMO_SERVICES_AUDIENCE,
        role: str = AGENT_ROLE,
        max_lifetime_s: float = MAX_TOKEN_LIFETIME_S,
        tenant_id: str | None = None,
    ) -> None:
        self._key = public_key
        self.tenant_id = tenant_id
        self.issuer = issuer
        self.audience = audience
        self.role = role
        self.max_lifetime_s = max_lifetime_s

    @classmethod
    def entra(
        cls, tenant_id: str, client_id: str, *, role: str = AGENT_ROLE, keys: jwt.PyJWKClient | None = None
    ) -> AgentAuth:
        """The check of an Entra-protected API: tokens of ``tenant_id``'s v2.0 issuer, signed by its keys
        (``keys``: its JWKS, cached), for the app registration ``client_id`` (v2.0 tokens carry the client
        id, v1.0 ones the app ID URI ``api://<client id>``), with app role ``role``.

        Raises:
            ValueError: ``tenant_id`` or ``client_id`` is empty.
        """
        if not tenant_id.strip() or not client_id.strip():
            raise ValueError("the demo services need a tenant id and their app registration's client id")
        jwks = keys or jwt.PyJWKClient(entra_jwks_uri(tenant_id), cache_keys=True, lifespan=3600, timeout=10)
        audiences = (client_id, f"api://{client_id}")
        return cls(
            jwks,
            issuer=entra_issuer(tenant_id),
            audience=audiences,
            role=role,
            max_lifetime_s=MANAGED_IDENTITY_LIFETIME_S,
            tenant_id=tenant_id,
        )

    @classmethod
    def trusting(cls, issuer: LocalIssuer, *, audience: str = DEMO_SERVICES_AUDIENCE) -> AgentAuth:
        """The check that accepts ``issuer``'s tokens for ``audience``."""
        return cls(issuer.public_key(), issuer=issuer.issuer, audience=audience)

    def claims(self, authorization: str | None) -> dict[str, Any]:
        """The verified claims of the ``Authorization`` header's token.

        Raises:
            CallerRefused: 401 or 403, as the module docstring says.
        """
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise CallerRefused(401, "invalid_token", "a bearer token is required")
        try:
            key = self._signing_key(token.strip())
            claims: dict[str, Any] = jwt.decode(
                token.strip(),
                key,
                algorithms=["RS256"],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": self._required()},
            )
        except jwt.ExpiredSignatureError:
            raise CallerRefused(401, "invalid_token", "the token has expired") from None
        except jwt.InvalidAudienceError:
            wanted = self.audience if isinstance(self.audience, str) else " or ".join(self.audience)
            raise CallerRefused(401, "invalid_token", f"the token is not for {wanted}") from None
        except jwt.InvalidIssuerError:
            raise CallerRefused(401, "invalid_token", "the token is from another issuer") from None
        except jwt.PyJWTError as exc:
            raise CallerRefused(401, "invalid_token", f"the token is invalid: {type(exc).__name__}") from None
        self._check_shape(claims)
        if claims["exp"] - claims["iat"] > self.max_lifetime_s:
            # Entra's access tokens live an hour (a managed identity's a day); a longer one was minted by
            # a signing key's holder.
            raise CallerRefused(401, "invalid_token", "the token's lifetime is too long")
        roles = claims.get("roles")
        if not isinstance(roles, list) or self.role not in roles:
            raise CallerRefused(403, "missing_role", f"the caller lacks the app role {self.role}")
        return claims

    def _required(self) -> list[str]:
        """The claims a token must carry: Entra's access tokens always carry ``nbf`` and ``tid`` too."""
        required = ["exp", "iat", "iss", "aud"]
        return [*required, "nbf", "tid"] if self.tenant_id is not None else required

    def _check_shape(self, claims: dict[str, Any]) -> None:
        """Refuse signed claims of the wrong shape: times that are not numbers (PyJWT reads ``"123"`` as
        one), an audience list (an access token has one audience), another tenant's ``tid``.

        Raises:
            CallerRefused: 401 ``invalid_token``.
        """
        times = [claims[name] for name in ("exp", "iat", "nbf") if name in claims]
        if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in times):
            raise CallerRefused(401, "invalid_token", "the token's times are not numbers")
        if not isinstance(claims["aud"], str):
            raise CallerRefused(401, "invalid_token", "the token must name one audience")
        if self.tenant_id is not None and claims.get("tid") != self.tenant_id:
            raise CallerRefused(401, "invalid_token", "the token is from another tenant")

    def _signing_key(self, token: str) -> Any:
        """The key ``token`` must be signed with: the one key, or the JWKS's key of its ``kid``.

        Raises:
            jwt.PyJWTError: no key of the JWKS has the token's ``kid``, or the JWKS cannot be read.
        """
        if isinstance(self._key, jwt.PyJWKClient):
            return self._key.get_signing_key_from_jwt(token).key
        return self._key

    async def __call__(self, request: Request) -> None:
        """The FastAPI dependency of the service routers: raises :class:`CallerRefused`."""
        self.claims(request.headers.get("authorization"))

"""The demo services' caller check: only orderflow's agents, with a valid bearer token, may call them.

A call to a service endpoint (inventory, payments, shipping) must carry ``Authorization: Bearer <JWT>``
signed RS256 by the trusted key, with this service's ``iss`` and ``aud``, not expired (nor before its
``nbf``), and the app role :data:`orderflow.bindings.AGENT_ROLE` in ``roles``: the checks an Entra-protected
API makes on an app-only token. Locally the key is the devhost's local issuer's
(:mod:`devhost.local_issuer`), whose tokens the agents get through
:class:`devhost.service_credential.LocalAgentCredential`. Refusals, before anything else is read:

* 401 ``invalid_token`` (with ``WWW-Authenticate: Bearer``): no token, not a bearer token, a bad
  signature, another issuer or audience, expired or not yet valid;
* 403 ``missing_role``: a valid token without the agents' app role.

The reporting endpoints (audit, facts, stock, faults, health) are the demo drivers' instruments and are
not checked: the services listen on loopback only.
"""

from __future__ import annotations

from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import Request
from fastapi.responses import JSONResponse

from demo.services.bindings import DEMO_SERVICES_AUDIENCE
from devhost.local_issuer import LocalIssuer
from orderflow.bindings import AGENT_ROLE
from orderflow.operator_auth import MAX_TOKEN_LIFETIME_S

LEEWAY_S = 60
"""Seconds of clock difference allowed on ``exp`` and ``nbf``."""


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
        public_key: The issuer's signing key (public part).
        issuer: The ``iss`` accepted.
        audience: The ``aud`` accepted.
        role: The app role required.
    """

    def __init__(
        self,
        public_key: rsa.RSAPublicKey,
        *,
        issuer: str,
        audience: str = DEMO_SERVICES_AUDIENCE,
        role: str = AGENT_ROLE,
    ) -> None:
        self._key = public_key
        self.issuer = issuer
        self.audience = audience
        self.role = role

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
            claims: dict[str, Any] = jwt.decode(
                token.strip(),
                self._key,
                algorithms=["RS256"],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise CallerRefused(401, "invalid_token", "the token has expired") from None
        except jwt.InvalidAudienceError:
            raise CallerRefused(401, "invalid_token", f"the token is not for {self.audience}") from None
        except jwt.InvalidIssuerError:
            raise CallerRefused(401, "invalid_token", "the token is from another issuer") from None
        except jwt.PyJWTError as exc:
            raise CallerRefused(401, "invalid_token", f"the token is invalid: {type(exc).__name__}") from None
        lifetime = claims["exp"] - claims["iat"]
        if not isinstance(lifetime, int | float) or lifetime > MAX_TOKEN_LIFETIME_S:
            # Entra's access tokens live about an hour; a longer one was minted by a signing key's holder.
            raise CallerRefused(401, "invalid_token", "the token's lifetime is too long")
        roles = claims.get("roles")
        if not isinstance(roles, list) or self.role not in roles:
            raise CallerRefused(403, "missing_role", f"the caller lacks the app role {self.role}")
        return claims

    async def __call__(self, request: Request) -> None:
        """The FastAPI dependency of the service routers: raises :class:`CallerRefused`."""
        self.claims(request.headers.get("authorization"))

"""The agents' credential on the local host: tokens for a service binding's scope from the local issuer.

On Azure the agents' :class:`orderflow.bindings.CachedTokens` wrap the app's managed identity
(azure-identity); locally they wrap :class:`LocalAgentCredential`, which mints the token Entra would
issue to the app for the scope: audience the scope's resource (``api://x/.default`` -> ``api://x``),
the app role :data:`orderflow.bindings.AGENT_ROLE`, signed by the local issuer's key
(:mod:`devhost.local_issuer`), which the demo services trust. Nothing here is accepted on Azure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from azure.core.credentials import AccessTokenInfo
from cryptography.hazmat.primitives.asymmetric import rsa

from agents.services import HttpRemoteService
from devhost.local_issuer import DEFAULT_LIFETIME_S, KEY_FILE, LocalIssuer, ensure_signing_key
from orderflow.bindings import AGENT_ROLE, CachedTokens, EntraAuth, ServiceBindings, TokenSource
from orderflow.settings import Agents
from orderflow.settings.workflow import check_bindings
from orderflow.workflows import agent_names

LOCAL_AGENTS_CLIENT_ID = "5b7c2f8e-3d0a-4f6e-9a51-2c8e0d4b7f13"
"""``azp`` of the agents' local tokens: the client id of orderflow's (local) app identity."""
LOCAL_AGENTS_NAME = "orderflow-agents"
"""The local identity's name (its ``oid`` is derived from it, as a user's is)."""


def audience_of(scope: str) -> str:
    """The audience a token for ``scope`` carries: the scope without its ``/.default`` suffix."""
    return scope.removesuffix("/.default")


class LocalAgentCredential:
    """A ``SupportsTokenInfo`` credential whose tokens the local issuer signs (see the module docstring).

    Args:
        key: The local issuer's signing key.
        lifetime_s: Seconds a token lives.
        roles: App roles of the tokens (tests leave the agent's role out to be refused).
        clock: Epoch seconds of issue (tests pass a fake).
    """

    def __init__(
        self,
        key: rsa.RSAPrivateKey,
        *,
        lifetime_s: int = DEFAULT_LIFETIME_S,
        roles: tuple[str, ...] = (AGENT_ROLE,),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self._lifetime_s = lifetime_s
        self._roles = roles
        self._clock = clock

    @classmethod
    def from_key_file(cls, path: Path = KEY_FILE) -> LocalAgentCredential:
        """The credential of the local issuer's key at ``path`` (made if missing)."""
        return cls(ensure_signing_key(path))

    def get_token_info(self, *scopes: str) -> AccessTokenInfo:
        """A token for the one scope asked (ValueError for none or several, as a managed identity does)."""
        if len(scopes) != 1:
            raise ValueError("a token is asked for exactly one scope")
        issuer = LocalIssuer(self._key, audience=audience_of(scopes[0]), client_id=LOCAL_AGENTS_CLIENT_ID)
        now = int(self._clock())
        token = issuer.mint(name=LOCAL_AGENTS_NAME, roles=self._roles, lifetime_s=self._lifetime_s, now=now)
        # Refresh at half-life, as azure-identity does for tokens of more than two hours.
        return AccessTokenInfo(token, now + self._lifetime_s, refresh_on=now + self._lifetime_s // 2)


def agent_services(agents: Agents, credential: TokenSource | None = None) -> list[HttpRemoteService]:
    """One :class:`HttpRemoteService` per agent, as ``SERVICE_BINDINGS`` binds it.

    Args:
        agents: ``SERVICE_BINDINGS``.
        credential: Where the ``entra`` bindings' tokens come from; None: :class:`LocalAgentCredential`
            of the local issuer's key file, made only if some binding needs it.

    Raises:
        UnsafeAzureSetting: the bindings cannot serve the deployed workflows (first refusal, one line).
    """
    check_bindings(agents, azure=False)
    bindings = ServiceBindings.parse(agents.SERVICE_BINDINGS)
    tokens: CachedTokens | None = None
    if any(isinstance(bindings.services[name].auth, EntraAuth) for name in agent_names()):
        tokens = CachedTokens(credential if credential is not None else LocalAgentCredential.from_key_file())
    return [HttpRemoteService(name, bindings.services[name], tokens=tokens) for name in agent_names()]

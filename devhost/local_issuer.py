"""The local stand-in for Microsoft Entra ID: a signing key, its JWKS, and access tokens of Entra's shape.

The operator API checks every token with :mod:`orderflow.operator_auth`, on Azure against the tenant's
keys and locally against this module's: the same code and the same settings, filled in by
:meth:`LocalIssuer.operator_settings`. The key is an RSA key generated on first use into
:data:`KEY_FILE` (``.data/local-issuer/``, git-ignored; mode 0600) and reused after. Tokens carry the
claims of an Entra v2.0 access token (``iss``, ``aud``, ``tid``, ``oid``, ``sub``, ``azp``, ``roles``,
``name``, ``preferred_username``, ``iat``, ``nbf``, ``exp``, ``ver``, ``kid`` in the header) with a local
tenant, API and client id, and :data:`LOCAL_ISSUER`, an identifier in the reserved ``.localhost`` domain
that is never fetched.

Nothing minted here is accepted on Azure: ``function_host.azure_policy.check_azure`` allows only the
tenant's Entra issuer and JWKS there, and the commands below refuse to run on the platform.

``python -m devhost.local_issuer login --role orderflow.reviewer --name alice`` prints a token (or
writes it, mode 0600, with ``--out``); ``python -m devhost.local_issuer serve`` publishes the JWKS on
loopback and prints the settings that trust it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import jwt
import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from devhost.cli import SERVER_STOP_SIGNALS, fail, stop_signals_interrupt
from devhost.emulators import REPO_ROOT
from orderflow.operator_auth import ROLES, known_roles
from orderflow.settings import on_azure

if TYPE_CHECKING:
    from fastapi import FastAPI

KEY_FILE = REPO_ROOT / ".data" / "local-issuer" / "signing-key.pem"
"""Where the local signing key is kept: under ``.data/`` (git-ignored), beside the demo's data set."""

LOCAL_TENANT_ID = "ac0e3a2e-6b49-4102-b93a-531091415656"
"""``tid`` of local tokens: the local tenant, a GUID like every Entra tenant id."""
LOCAL_API_CLIENT_ID = "084b0e28-87b8-4c96-a75e-8e9dedc1b69c"
"""``aud`` of local tokens: the client id of the operator API's (local) app registration."""
LOCAL_CLI_CLIENT_ID = "c92f4f07-f3db-4860-b3fe-382587d03cc0"
"""``azp`` of local tokens: the client id of the application that signed in (the CLI)."""
LOCAL_ISSUER = f"https://login.orderflow.localhost/{LOCAL_TENANT_ID}/v2.0"
"""``iss`` of local tokens, shaped like Entra's ``https://login.microsoftonline.com/<tenant>/v2.0``."""
LOCAL_USER_DOMAIN = "orderflow.localhost"
"""Domain of local users' ``preferred_username`` (``alice@orderflow.localhost``)."""

DEFAULT_LIFETIME_S = 3600
"""Lifetime of a local token: an hour, within Entra's 60-90 minutes."""
MAX_LIFETIME_S = 86_400
"""Longest lifetime ``login`` mints: a day."""
KEY_BITS = 2048
"""RSA key size: Entra's, and the least ``operator_auth`` accepts."""
_USERS = uuid.UUID("8a95b8d9-ff93-48bd-99c6-27f14ea738c0")
"""Namespace of local users' object ids: a name always maps to the same ``oid``."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def local_object_id(name: str) -> str:
    """The ``oid`` of local user ``name``: the same for every login, as a user's object id is."""
    return str(uuid.uuid5(_USERS, name))


def ensure_signing_key(path: Path = KEY_FILE) -> rsa.RSAPrivateKey:
    """The local signing key at ``path``, generated (mode 0600) if there is none yet.

    Two processes starting at once end up with the same key: a new key is written to a file of its own
    and linked into place only if no key is there yet.

    Raises:
        ValueError: the file exists but others may read it (mode not 0600 or stricter), or it holds no
            RSA private key.
    """
    with contextlib.suppress(FileNotFoundError):
        return _read_key(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(pem)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(draft, path)  # never replaces a key: another process's, made meanwhile, wins
        except FileExistsError:
            return _read_key(path)
    finally:
        draft.unlink(missing_ok=True)
    return key


def _read_key(path: Path) -> rsa.RSAPrivateKey:
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ValueError(f"{path} may be read by others (mode {mode:o}): chmod 600 it, or delete it")
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"{path} holds no RSA private key: delete it to have a new one made")
    return key


class LocalIssuer:
    """Mints access tokens with Entra's v2.0 claims, signed by a local key, and publishes its JWKS.

    Args:
        key: The signing key.
        issuer: ``iss`` of the tokens.
        tenant_id: ``tid`` of the tokens.
        audience: ``aud`` of the tokens (the operator API's client id).
        client_id: ``azp`` of the tokens (the signed-in application's client id).
    """

    def __init__(
        self,
        key: rsa.RSAPrivateKey,
        *,
        issuer: str = LOCAL_ISSUER,
        tenant_id: str = LOCAL_TENANT_ID,
        audience: str = LOCAL_API_CLIENT_ID,
        client_id: str = LOCAL_CLI_CLIENT_ID,
    ) -> None:
        self._key = key
        self.issuer = issuer
        self.tenant_id = tenant_id
        self.audience = audience
        self.client_id = client_id
        public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        self._public = {"kty": "RSA", "n": public["n"], "e": public["e"]}
        # RFC 7638 thumbprint: the same key always has the same kid.
        canonical = json.dumps(self._public, separators=(",", ":"), sort_keys=True).encode()
        self.key_id = _b64url(hashlib.sha256(canonical).digest())

    @classmethod
    def from_key_file(cls, path: Path = KEY_FILE) -> LocalIssuer:
        """The issuer of the key at ``path`` (generated if missing; see :func:`ensure_signing_key`)."""
        return cls(ensure_signing_key(path))

    def __repr__(self) -> str:
        return f"LocalIssuer(issuer={self.issuer!r}, key_id={self.key_id!r})"

    def public_key(self) -> rsa.RSAPublicKey:
        """The public half of the signing key: what a service checks this issuer's signatures with."""
        return self._key.public_key()

    @property
    def jwks_path(self) -> str:
        """The path the JWKS is served at: Entra's, ``/<tenant>/discovery/v2.0/keys``."""
        return f"/{self.tenant_id}/discovery/v2.0/keys"

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set document: the public key, for signatures, RS256."""
        return {"keys": [{**self._public, "use": "sig", "alg": "RS256", "kid": self.key_id}]}

    def mint(
        self,
        *,
        name: str,
        roles: Sequence[str] = (),
        lifetime_s: int = DEFAULT_LIFETIME_S,
        now: float | None = None,
    ) -> str:
        """A signed access token for local user ``name`` with app roles ``roles``.

        Args:
            name: The user's name: ``name``, and ``preferred_username`` ``<name>@orderflow.localhost``;
                the ``oid`` is :func:`local_object_id` of it.
            roles: App roles (``roles`` claim; left out when empty, as Entra does).
            lifetime_s: Seconds from ``now`` to ``exp``.
            now: Issue time, epoch seconds (default: the current time).
        """
        issued = int(time.time() if now is None else now)
        object_id = local_object_id(name)
        claims: dict[str, Any] = {
            "aud": self.audience,
            "iss": self.issuer,
            "iat": issued,
            "nbf": issued,
            "exp": issued + lifetime_s,
            "azp": self.client_id,
            "azpacr": "0",
            "name": name,
            "oid": object_id,
            "preferred_username": f"{name}@{LOCAL_USER_DOMAIN}",
            # Entra's sub is pairwise: the same user has another sub in another app.
            "sub": _b64url(hashlib.sha256(f"{object_id}:{self.client_id}".encode()).digest()),
            "tid": self.tenant_id,
            "uti": secrets.token_urlsafe(16),
            "ver": "2.0",
        }
        if roles:
            claims["roles"] = list(roles)
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.key_id, "typ": "JWT"})

    def operator_settings(self, jwks_uri: str) -> dict[str, str]:
        """The settings under which the operator API trusts this issuer's tokens.

        Args:
            jwks_uri: Where :meth:`jwks` is served (``http://127.0.0.1:<port>`` + :attr:`jwks_path`).
        """
        return {
            "OPERATOR_TENANT_ID": self.tenant_id,
            "OPERATOR_AUDIENCE": self.audience,
            "OPERATOR_ISSUER": self.issuer,
            "OPERATOR_JWKS_URI": jwks_uri,
        }


def create_jwks_app(issuer: LocalIssuer) -> FastAPI:
    """An ASGI app that serves ``issuer``'s JWKS at :attr:`LocalIssuer.jwks_path` (for the devhost)."""
    # The web framework is the local host's, not the issuer's: minting and the JWKS document need
    # neither it nor a server (the worker-driven tests mint tokens where FastAPI is not installed).
    from fastapi import FastAPI  # noqa: PLC0415

    app = FastAPI(title="orderflow local issuer", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get(issuer.jwks_path)
    def keys() -> dict[str, Any]:
        return issuer.jwks()

    return app


# --- commands -----------------------------------------------------------------------------------------

cli = typer.Typer(add_completion=False, help="The local token issuer of the operator API (never on Azure).")

_KeyFile = Annotated[Path, typer.Option(help="The local signing key (made if missing).")]


def _refuse_on_azure() -> None:
    if on_azure():
        fail("the local issuer runs on a developer's machine only; on Azure, Entra ID issues tokens", code=2)


@cli.command()
def login(
    name: Annotated[str, typer.Option(help="Your local user name (the token's name and oid).")],
    role: Annotated[
        list[str] | None, typer.Option(help=f"An app role, repeatable: {', '.join(ROLES)}.")
    ] = None,
    lifetime_s: Annotated[int, typer.Option(help="Seconds the token is valid.")] = DEFAULT_LIFETIME_S,
    out: Annotated[Path | None, typer.Option(help="Write the token here (mode 0600) instead.")] = None,
    key_file: _KeyFile = KEY_FILE,
) -> None:
    """Print an access token for the local operator API, signed by the local key."""
    _refuse_on_azure()
    if not name.strip() or len(name) > 64 or not name.isprintable():
        fail("--name must be 1 to 64 printable characters", code=2)
    if not 0 < lifetime_s <= MAX_LIFETIME_S:
        fail(f"--lifetime-s must be 1 to {MAX_LIFETIME_S} seconds, not {lifetime_s}", code=2)
    try:
        roles = known_roles(role or [])
        issuer = LocalIssuer.from_key_file(key_file)
    except ValueError as exc:
        fail(str(exc), code=2)
    token = issuer.mint(name=name.strip(), roles=roles, lifetime_s=lifetime_s)
    if out is None:
        print(token)
        return
    out.unlink(missing_ok=True)  # a file made anew gets mode 0600, whatever the old one had
    descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        file.write(token + "\n")
    print(f"token written to {out}", file=sys.stderr)


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Loopback interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 0,
    key_file: _KeyFile = KEY_FILE,
) -> None:
    """Serve the local JWKS until Ctrl-C, SIGTERM or SIGHUP, and print the settings that trust it."""
    _refuse_on_azure()
    from devhost.serving import serve_in_thread, server_url, stop  # noqa: PLC0415 (see create_jwks_app)

    try:
        issuer = LocalIssuer.from_key_file(key_file)
        server, thread = serve_in_thread(create_jwks_app(issuer), host, port)
    except (ValueError, RuntimeError, OSError) as exc:
        fail(str(exc), code=1)
    try:
        with stop_signals_interrupt(SERVER_STOP_SIGNALS) as signals:
            for setting, value in issuer.operator_settings(server_url(server) + issuer.jwks_path).items():
                print(f"export {setting}={value}", flush=True)
            while thread.is_alive():
                thread.join(0.5)
                signals.raise_if_dropped()
    except KeyboardInterrupt:
        pass
    finally:
        stop(server, thread)


if __name__ == "__main__":
    cli()

"""Operator API tokens for tests: a local issuer, its JWKS on loopback, and what trusts it.

The tokens are real: minted by :class:`devhost.local_issuer.LocalIssuer` (RS256, Entra's claims) and
checked by :class:`orderflow.operator_auth.TokenValidator`, which fetches the keys over HTTP from a
loopback server (the standard library's, so the worker's environment, which has no web framework, runs
it too). One signing key serves the whole test session; it is generated in memory and never written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from devhost.local_issuer import KEY_BITS, LocalIssuer
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE, TokenValidator
from orderflow.settings import Settings


@cache
def signing_key() -> rsa.RSAPrivateKey:
    """The session's signing key (made once: RSA key generation takes a moment)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


@cache
def other_key() -> rsa.RSAPrivateKey:
    """A key nobody trusts: what a forger signs with."""
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def local_issuer() -> LocalIssuer:
    """The issuer of the session's key, with the local tenant, API and client ids."""
    return LocalIssuer(signing_key())


class LoopbackJwks:
    """Serves ``issuer``'s JWKS at its Entra-shaped path on a loopback port, until :meth:`close`."""

    def __init__(self, issuer: LocalIssuer) -> None:
        document = json.dumps(issuer.jwks()).encode()
        path = issuer.jwks_path

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the http.server naming
                found = self.path == path
                body = document if found else b'{"error": "not found"}'
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}{path}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@dataclass(frozen=True)
class TrustedIssuer:
    """A local issuer whose tokens the operator API trusts.

    Attributes:
        issuer: Mints tokens.
        settings: The ``OPERATOR_*`` settings that trust it (its JWKS served at ``OPERATOR_JWKS_URI``).
        validator: A validator of those settings.
    """

    issuer: LocalIssuer
    settings: dict[str, str]
    validator: TokenValidator

    def bearer(self, name: str, *roles: str, **mint: Any) -> dict[str, str]:
        """An ``Authorization`` header of a token for ``name`` with ``roles``."""
        return {"Authorization": f"Bearer {self.issuer.mint(name=name, roles=roles, **mint)}"}

    def reviewer(self, name: str = "rita") -> dict[str, str]:
        """A reviewer's ``Authorization`` header."""
        return self.bearer(name, REVIEWER_ROLE)

    def operator(self, name: str = "otto") -> dict[str, str]:
        """An operator's ``Authorization`` header."""
        return self.bearer(name, OPERATOR_ROLE)


@contextmanager
def trusted_issuer() -> Iterator[TrustedIssuer]:
    """A :class:`TrustedIssuer` whose JWKS is served on loopback while the context lasts."""
    issuer = local_issuer()
    jwks = LoopbackJwks(issuer)
    try:
        settings = issuer.operator_settings(jwks.uri)
        validator = TokenValidator.from_section(Settings.load(env={}, **settings).operator_api)
        yield TrustedIssuer(issuer, settings, validator)
    finally:
        jwks.close()

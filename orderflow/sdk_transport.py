"""The HTTP transport of the Azure SDK clients a process builds for a remote endpoint (Cosmos DB on Azure):
one ``requests`` session for the whole process, its environment read once.

azure-core's default ``RequestsTransport`` makes a session per client with ``trust_env`` on, and then
``requests`` consults the environment on every request: the proxy variables and ``NO_PROXY`` (through
``urllib``'s parsing of them), the netrc file, ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE``. Here the
session has ``trust_env`` off and reads the same settings itself: the CA bundle when it is made, and a
host's proxies (``HTTP(S)_PROXY`` / ``ALL_PROXY`` unless ``NO_PROXY`` exempts the host, as ``requests``
decides it) on the first request to that host and port, kept for the process's life. A proxy set in the
environment before the host starts is honoured; one set later is not. A netrc file is never read: the
SDKs sign their own requests, and a netrc entry for the account's host would only replace that
signature.

Clients given :func:`shared_transport` do not own it (``session_owner=False``): closing one leaves the
pool to the others. Every client of the process then shares one connection pool per host.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlsplit

import requests
from azure.core.pipeline.transport import RequestsTransport
from azure.core.pipeline.transport._bigger_block_size_http_adapters import BiggerBlockSizeHTTPAdapter
from requests.utils import get_environ_proxies
from urllib3.util.retry import Retry

CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""Where ``requests`` finds a CA bundle in the environment, in its order."""


class EnvironmentReadOnce(requests.Session):
    """A session that reads the environment's proxies once per host and its CA bundle once.

    Thread-safe as ``requests.Session`` is for concurrent requests (azure-core shares one per client).
    Mounted as azure-core mounts its own: no ``urllib3`` retries (the SDK's retry policy decides).

    Args:
        environ: Where the CA bundle variables are read (``os.environ`` by default); proxies always come
            from ``os.environ``, through ``requests``' own reading of it.
    """

    def __init__(self, environ: os._Environ[str] | dict[str, str] | None = None) -> None:
        super().__init__()
        self.trust_env = False
        source = os.environ if environ is None else environ
        self.ca_bundle = next((source[name] for name in CA_BUNDLE_VARIABLES if source.get(name)), None)
        self._proxies_by_host: dict[tuple[str, str, int | None], dict[str, str]] = {}
        self._lock = threading.Lock()
        no_retries = Retry(total=False, redirect=False, raise_on_status=False)
        adapter = BiggerBlockSizeHTTPAdapter(max_retries=no_retries)
        for scheme in ("http://", "https://"):
            self.mount(scheme, adapter)

    def proxies_for(self, url: str) -> dict[str, str]:
        """The environment's proxies for ``url``'s scheme, host and port (empty when none applies), read on
        the first request to that host and port (``NO_PROXY`` may name a host with a port)."""
        split = urlsplit(url)
        key = (split.scheme, (split.hostname or "").lower(), split.port)
        found = self._proxies_by_host.get(key)
        if found is None:
            with self._lock:
                found = self._proxies_by_host.setdefault(key, dict(get_environ_proxies(url)))
        return found

    def merge_environment_settings(
        self,
        url: str,
        proxies: Any,
        stream: Any,
        verify: Any,
        cert: Any,
    ) -> dict[str, Any]:
        """``requests``' merge with the environment as read once: the host's proxies under any the
        request names, and the CA bundle when the request asks for default verification."""
        merged = dict(self.proxies_for(url))
        merged.update(proxies or {})
        if (verify is True or verify is None) and self.ca_bundle:
            verify = self.ca_bundle
        settings: dict[str, Any] = super().merge_environment_settings(url, merged, stream, verify, cert)
        return settings


_shared: list[RequestsTransport] = []
"""The process's transport, once made."""
_shared_lock = threading.Lock()


def shared_transport() -> RequestsTransport:
    """This process's one transport for the Azure SDKs' clients of remote endpoints, over an
    :class:`EnvironmentReadOnce` session made on the first call (the environment is read then)."""
    with _shared_lock:
        if not _shared:
            _shared.append(RequestsTransport(session=EnvironmentReadOnce(), session_owner=False))
        return _shared[0]

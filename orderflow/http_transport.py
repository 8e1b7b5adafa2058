"""The HTTP transport of the Azure SDK clients: one reused ``requests`` session per client, sized for the
threads that share it, with the environment lookups off for loopback endpoints.

azure-core's default ``RequestsTransport`` asks the environment on every request (``trust_env``):
proxy variables, ``~/.netrc`` and the CA-bundle variables. A loopback endpoint (the local emulators) is
never reached through a proxy and carries no netrc credentials, so for one :func:`transport_for` turns
those lookups off. Its connection pool also holds :data:`POOL_SIZE` connections instead of requests'
10, so that the consumer threads of one process reuse their keep-alive connections instead of opening
(and discarding) new ones.

Any other endpoint (Cosmos DB, Storage on Azure) gets None: the SDK's own transport, which honours the
environment (an ``HTTPS_PROXY`` on Azure still applies).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import requests
from azure.core.pipeline.transport import RequestsTransport
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

POOL_SIZE = 64
"""Keep-alive connections one session holds per host (requests' default is 10)."""


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``127.0.0.1``, ``localhost`` or ``::1``)."""
    return (urlsplit(url).hostname or "").lower() in LOOPBACK_HOSTS


def local_session(pool_size: int = POOL_SIZE) -> requests.Session:
    """A session that never reads the environment, with ``pool_size`` connections per host and no
    retries of its own (the SDK's retry policy retries, as with its default transport)."""
    session = requests.Session()
    session.trust_env = False
    adapter = HTTPAdapter(
        pool_connections=4,
        pool_maxsize=pool_size,
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
    )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def transport_for(
    url: str,
    *,
    pool_size: int = POOL_SIZE,
    connection_timeout_s: float | None = None,
    read_timeout_s: float | None = None,
) -> RequestsTransport | None:
    """The transport for a client of ``url``: :func:`local_session`'s for a loopback endpoint, None (the
    SDK's default) for any other.

    A client given a transport no longer applies its own ``connection_timeout`` / ``read_timeout``
    options (the SDK passes them to the transport it builds): they are set here, seconds, or left at
    azure-core's defaults when None.
    """
    if not is_loopback(url):
        return None
    timeouts: dict[str, float] = {}
    if connection_timeout_s is not None:
        timeouts["connection_timeout"] = connection_timeout_s
    if read_timeout_s is not None:
        timeouts["read_timeout"] = read_timeout_s
    return RequestsTransport(session=local_session(pool_size), use_env_settings=False, **timeouts)

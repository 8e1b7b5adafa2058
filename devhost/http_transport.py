"""The HTTP transport of the Azure SDK clients for a loopback endpoint: keep-alive connections, one per
thread and emulator, under the SDKs' own pipelines.

For a loopback endpoint (the local emulators, Azurite and cosmosdb-server) :func:`transport_for` returns
a :class:`LoopbackTransport` instead of azure-core's default ``RequestsTransport``. Every policy of the
SDK's pipeline still runs above it (the shared-key signature of each Storage request, Cosmos DB's auth
header, the SDK's retries, redirects, response decoding): only the last hop, bytes to and from the
socket, is cheaper. ``requests`` and ``urllib3`` cost about 0.4 ms of CPU per request on top of
``http.client`` (preparing and merging the request, cookie jars, hooks, the connection pool's checks);
an order makes about 38 requests to the emulators (docs/benchmarks.md). ``http.client`` itself is used
only to connect: the request's bytes are written in one piece and the answer parsed here
(:mod:`devhost.http_wire`), since ``http.client`` formats each header with a call of its own and parses the
answer's headers with the ``email`` package's feed parser: together about a tenth of a devhost's CPU under
the profiler (docs/benchmarks.md).

What the lean transport leaves out is what a loopback endpoint never needs: proxies and the environment
(``HTTPS_PROXY``, netrc, CA-bundle variables), cookies, response decompression (it asks for
``identity``) and a shared pool (each thread keeps its own connection per emulator, closed when the
thread ends, and reopened when the emulator closed it while idle, which a poll of a connection idle for
over a second notices; a request that finds it closed just as it went out, with no answer, is sent once
more on a new connection before the SDK's retries see a failure). It reads every response whole, which
is what the queue and Cosmos clients do anyway.

Any other endpoint (Cosmos DB, Storage on Azure) gets None: the client's default, which honours the
environment (an ``HTTPS_PROXY`` on Azure still applies; for Cosmos DB the process's shared transport,
:mod:`orderflow.sdk_transport`).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from azure.core.exceptions import (
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseError,
    ServiceResponseTimeoutError,
)
from azure.core.pipeline import Pipeline
from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.core.utils import case_insensitive_dict

from devhost.http_wire import Answer, Wire, request_bytes

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

DEFAULT_CONNECTION_TIMEOUT_S = 300.0
DEFAULT_READ_TIMEOUT_S = 300.0
"""azure-core's defaults for a transport built without timeouts (seconds)."""

RECENTLY_USED_S = 1.0
"""A kept connection handed out this recently (seconds) is used without polling its socket first."""

_Key = tuple[str, str, int]

_CLOSED_BY_SERVER = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""What a request on a kept-alive connection meets when the server closed that connection just before:
no answer at all (``RemoteDisconnected`` is a ``ConnectionResetError``)."""


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``127.0.0.1``, ``localhost`` or ``::1``)."""
    return (urlsplit(url).hostname or "").lower() in LOOPBACK_HOSTS


class LoopbackResponse(HttpResponse):
    """A response read whole from a loopback connection.

    Args:
        request: The request it answers.
        answer: The parsed answer, its body read whole.
    """

    def __init__(self, request: HttpRequest, answer: Answer) -> None:
        super().__init__(request, answer)
        self.status_code = answer.status
        self.headers = case_insensitive_dict(answer.headers)
        self.reason = answer.reason
        self.content_type = self.headers.get("Content-Type")
        self._body = answer.body

    def body(self) -> bytes:
        """The whole body, bytes."""
        return self._body

    def stream_download(
        self, pipeline: Pipeline[HttpRequest, HttpResponse], **kwargs: Any
    ) -> Iterator[bytes]:
        """The body in chunks of :attr:`block_size` bytes (it is already in memory)."""
        for start in range(0, len(self._body), self.block_size):
            yield self._body[start : start + self.block_size]


class LoopbackTransport(HttpTransport):  # type: ignore[type-arg]
    """An azure-core transport for an emulator on this machine (``http.client`` connects,
    :mod:`devhost.http_wire` exchanges).

    Thread-safe: each thread holds its own keep-alive connection per ``(scheme, host, port)``, closed
    when the thread ends. A failed exchange closes its connection and raises what ``RequestsTransport``
    raises for the same failure (``ServiceRequestError`` when no connection could be made,
    ``ServiceResponseError`` when it broke, their ``Timeout`` subclasses on a timeout), so the SDK's
    retry policy and orderflow's error translation see no difference.

    Args:
        connection_timeout_s: Seconds to wait for a connection.
        read_timeout_s: Seconds to wait for each read of an answer on an open connection.
        Each request may override both (the SDK's ``connection_timeout`` / ``read_timeout`` keywords).
    """

    def __init__(
        self,
        *,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.connection_timeout_s = connection_timeout_s
        self.read_timeout_s = read_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._contexts: dict[object, ssl.SSLContext] = {}

    def __repr__(self) -> str:
        return f"LoopbackTransport(connections={len(self._open)})"

    def __enter__(self) -> LoopbackTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Nothing to open: connections are made on first use."""

    def close(self) -> None:
        """Close every thread's connections (a later request opens a new one)."""
        with self._lock:
            connections, self._open = list(self._open), set()
        for connection in connections:
            connection.close()

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        """Send ``request`` and read its whole answer.

        Keywords (from the SDK's pipeline): ``connection_timeout``, ``read_timeout`` (seconds),
        ``connection_verify`` (bool or CA-bundle path), ``connection_cert`` (cert file or
        ``(cert, key)``); ``stream`` and ``proxies`` are accepted and ignored (the body is always read
        whole; loopback has no proxy).

        Raises:
            ServiceRequestError / ServiceRequestTimeoutError: no connection could be made.
            ServiceResponseError / ServiceResponseTimeoutError: the exchange failed after connecting.
            ValueError: the request carries form fields or files (no SDK used here sends them).
        """
        if request.files:
            raise ValueError("LoopbackTransport does not send multipart requests")
        body = request.data
        if isinstance(body, str):
            body = body.encode("utf-8")  # as urllib3 does; the SDKs send bytes or ASCII text
        elif body is not None and not isinstance(body, bytes):
            raise ValueError(f"LoopbackTransport does not send a {type(body).__name__} body")
        url = urlsplit(request.url)
        scheme = (url.scheme or "http").lower()
        key: _Key = (scheme, url.hostname or "127.0.0.1", url.port or (443 if scheme == "https" else 80))
        read_timeout = float(kwargs.get("read_timeout") or self.read_timeout_s)
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        data = request_bytes(request.method, target, key, request.headers, body)
        kept, reused = self._connection(key, kwargs)
        try:
            return self._exchange(key, kept, request, data, timeout=read_timeout)
        except _CLOSED_BY_SERVER as exc:
            if not reused:
                raise ServiceResponseError(exc, error=exc) from exc
        # The emulator closed the kept-alive connection as the request went out (it had not answered):
        # once more on a new connection, as a browser does. The SDK's retries come after this one.
        kept, _ = self._connection(key, kwargs)
        try:
            return self._exchange(key, kept, request, data, timeout=read_timeout)
        except _CLOSED_BY_SERVER as exc:
            raise ServiceResponseError(exc, error=exc) from exc

    def _exchange(
        self, key: _Key, kept: _Kept, request: HttpRequest, data: bytes, *, timeout: float
    ) -> LoopbackResponse:
        """One request (``data``, its bytes) and its answer on ``kept``; a failed one closes it, and so
        does an answer that ends its connection.

        Raises:
            ServiceResponseError / ServiceResponseTimeoutError: the exchange failed; one of
                :data:`_CLOSED_BY_SERVER` as it is, for :meth:`send` to decide.
        """
        try:
            answer = kept.wire.exchange(data, request.method, timeout=timeout)
        except _CLOSED_BY_SERVER:
            self._drop(key, kept.connection)
            raise
        except TimeoutError as exc:
            self._drop(key, kept.connection)
            raise ServiceResponseTimeoutError(exc, error=exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            self._drop(key, kept.connection)
            raise ServiceResponseError(exc, error=exc) from exc
        except BaseException:
            # Cut short by anything else (a stop signal's exception): the answer is unread.
            self._drop(key, kept.connection)
            raise
        if answer.closes:
            self._drop(key, kept.connection)
        return LoopbackResponse(request, answer)

    def _connection(self, key: _Key, options: dict[str, Any]) -> tuple[_Kept, bool]:
        """This thread's open connection to ``key`` and whether it served a request before: kept, or new
        when there was none or the server closed it while it was idle."""
        connections: dict[_Key, _Kept] | None = getattr(self._local, "connections", None)
        if connections is None:
            connections = self._local.connections = {}
            # Threads come and go (a thread pool's idle workers end): their connections close with them.
            self._local.ends = ends = _ThreadEnd()
            weakref.finalize(ends, _close_thread_connections, weakref.ref(self), connections)
        kept = connections.get(key)
        if kept is not None and kept.reusable():
            return kept, True
        if kept is not None:
            self._drop(key, kept.connection)
        connection = self._connect(key, options)
        kept = connections[key] = _Kept(connection)
        with self._lock:
            self._open.add(connection)
        return kept, False

    def _connect(self, key: _Key, options: dict[str, Any]) -> http.client.HTTPConnection:
        scheme, host, port = key
        timeout = float(options.get("connection_timeout") or self.connection_timeout_s)
        connection: http.client.HTTPConnection
        if scheme == "https":
            context = self._context(options.get("connection_verify", True), options.get("connection_cert"))
            connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            connection.connect()
        except TimeoutError as exc:
            connection.close()
            raise ServiceRequestTimeoutError(exc, error=exc) from exc
        except OSError as exc:
            connection.close()
            raise ServiceRequestError(exc, error=exc) from exc
        if connection.sock is not None:
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _context(self, verify: object, cert: object) -> ssl.SSLContext:
        """One TLS context per verification setting (``connection_verify``, ``connection_cert``)."""
        cache_key = (str(verify), str(cert))
        with self._lock:
            context = self._contexts.get(cache_key)
            if context is not None:
                return context
            context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if isinstance(cert, str):
                context.load_cert_chain(cert)
            elif isinstance(cert, tuple) and cert and cert[0]:
                context.load_cert_chain(cert[0], cert[1] if len(cert) > 1 else None)
            self._contexts[cache_key] = context
            return context

    def _drop(self, key: _Key, connection: http.client.HTTPConnection) -> None:
        connection.close()
        connections: dict[_Key, _Kept] = getattr(self._local, "connections", {})
        kept = connections.get(key)
        if kept is not None and kept.connection is connection:
            del connections[key]
        with self._lock:
            self._open.discard(connection)


class _ThreadEnd:
    """Held by a thread's local data only: finalized when the thread ends."""


def _close_thread_connections(
    transport: weakref.ref[LoopbackTransport], connections: dict[_Key, _Kept]
) -> None:
    """Close the connections of a thread that ended (and forget them in ``transport``, if it is alive)."""
    owner = transport()
    for kept in list(connections.values()):
        kept.connection.close()
        if owner is not None:
            with owner._lock:
                owner._open.discard(kept.connection)
    connections.clear()


class _Kept:
    """A thread's kept-alive connection and a poll of its socket, registered once."""

    def __init__(
        self, connection: http.client.HTTPConnection, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.connection = connection
        if connection.sock is None:
            raise ValueError("a kept connection must be connected")
        self.wire = Wire(connection.sock)
        self._clock = clock
        self._handed_out_at = clock()
        self._poll = select.poll()
        if connection.sock is not None:
            self._poll.register(connection.sock, select.POLLIN | select.POLLERR | select.POLLHUP)

    def reusable(self) -> bool:
        """Whether the idle connection may carry the next request (which it is then handed out for):
        not when it is readable with nothing asked, which means the server closed it (or sent what no
        request asked for), nor when its last answer came with bytes past it (taken for the next answer,
        they would answer the next request with what no request asked for).

        A connection handed out less than :data:`RECENTLY_USED_S` ago is not polled: the emulators (Node's
        HTTP server) close an idle connection after 5 s, and the poll is a system call that gives up the
        interpreter lock on every request. One closed sooner is met by :meth:`LoopbackTransport.send`'s
        resend on a new connection.
        """
        if self.connection.sock is None or self.wire.pending:
            return False
        now = self._clock()
        recent, self._handed_out_at = now - self._handed_out_at < RECENTLY_USED_S, now
        return recent or not self._poll.poll(0)


def transport_for(
    url: str,
    *,
    connection_timeout_s: float | None = None,
    read_timeout_s: float | None = None,
) -> LoopbackTransport | None:
    """The transport for a client of ``url``: a :class:`LoopbackTransport` for a loopback endpoint,
    None (the SDK's default) for any other.

    A client given a transport no longer applies its own ``connection_timeout`` / ``read_timeout``
    options (the SDK passes them to the transport it builds): they are set here, seconds, or left at
    azure-core's defaults when None.
    """
    if not is_loopback(url):
        return None
    return LoopbackTransport(
        connection_timeout_s=(
            DEFAULT_CONNECTION_TIMEOUT_S if connection_timeout_s is None else connection_timeout_s
        ),
        read_timeout_s=DEFAULT_READ_TIMEOUT_S if read_timeout_s is None else read_timeout_s,
    )

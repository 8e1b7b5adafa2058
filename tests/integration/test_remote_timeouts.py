"""A hung store or queue fails a call at the configured timeout, not at the SDK's default (65 s for Cosmos).

The store is hung for real: the session's cosmosdb-server is paused (SIGSTOP) for the one call and
resumed at once, so its connections stay open and nothing answers. (A relay in front of it would not
do: the Cosmos client sends everything after its first request to the endpoint the account read names,
the server's own.) The queue is reached through a TCP relay on loopback that passes bytes both ways
until it is told to hang, then keeps every connection open and forwards no answer. The Cosmos client is
built from :class:`Settings` as the hosts build it (:mod:`orderflow.wiring`).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import ServiceResponseError
from azure.cosmos.exceptions import CosmosClientTimeoutError

from devhost.emulators import LocalEmulators, LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from devhost.wiring import connect_stores
from orderflow.errors import NotFound, TransientError
from orderflow.settings import Settings

pytestmark = pytest.mark.integration

SANITY_S = 30.0
"""A bound far below the SDK default the timeouts replace; not a speed target."""


class HangingRelay:
    """Forwards loopback TCP to ``target`` until :meth:`hang`; then answers nothing, closing nothing."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.hung = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def hang(self) -> None:
        self.hung.set()

    def close(self) -> None:
        self._closed = True
        for sock in [self._server, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.hung.is_set():
                    continue  # swallowed: the peer waits for an answer that never comes
                sink.sendall(data)


@contextlib.contextmanager
def relay_to(url: str) -> Iterator[HangingRelay]:
    parts = urlsplit(url)
    relay = HangingRelay((parts.hostname or "127.0.0.1", parts.port or 443))
    try:
        yield relay
    finally:
        relay.close()


def causes(error: BaseException) -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    current: BaseException | None = error
    while current is not None:
        found.append(type(current))
        current = current.__cause__
    return found


def test_a_hung_cosmos_store_fails_a_read_as_transient_at_the_store_timeouts(
    local_emulators: LocalEmulators, unique_name: str
) -> None:
    endpoints = local_emulators.endpoints
    settings = Settings.load(
        {},
        COSMOS_ENDPOINT=endpoints.cosmos_endpoint,
        COSMOS_KEY=endpoints.cosmos_key,
        COSMOS_VERIFY_TLS=False,
        COSMOS_DATABASE=unique_name,
        STORE_CONNECTION_TIMEOUT_S=1.0,
        STORE_READ_TIMEOUT_S=1.0,
        STORE_OPERATION_TIMEOUT_S=1.5,
    )
    with connect_stores(settings.connections) as stores:
        with pytest.raises(NotFound):
            stores.state.get("o-1")  # the store answers
        server = local_emulators.cosmos
        server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(TransientError) as timed_out:
                stores.state.get("o-1")
            elapsed = time.monotonic() - started
        finally:
            server.resume()
    chain = causes(timed_out.value)
    assert CosmosClientTimeoutError in chain or ServiceResponseError in chain, chain
    assert elapsed < SANITY_S


def test_a_hung_queue_fails_a_receive_as_transient_at_the_queue_read_timeout(
    local_endpoints: LocalEndpoints, unique_name: str
) -> None:
    connection = local_endpoints.storage_connection_string
    queue_endpoint = next(
        part.split("=", 1)[1] for part in connection.split(";") if part.startswith("QueueEndpoint=")
    )
    with relay_to(queue_endpoint) as relay:
        relayed = connection.replace(
            queue_endpoint, queue_endpoint.replace(str(urlsplit(queue_endpoint).port), str(relay.port))
        )
        # No SDK retry here: each try waits the read timeout, and the retries (about 1 s and 3 s apart by
        # default) would only add their back-off to the test's time.
        with StorageQueueFactory.from_connection_string(
            relayed, retry_total=0, connection_timeout_s=1.0, read_timeout_s=1.0
        ) as factory:
            queue = factory.queue(unique_name)
            assert queue.receive(max_messages=1) == []  # answered through the relay
            relay.hang()
            started = time.monotonic()
            with pytest.raises(TransientError) as timed_out:
                queue.receive(max_messages=1)
            elapsed = time.monotonic() - started
            relay.hung.clear()
    chain = causes(timed_out.value)
    assert any(issubclass(kind, ServiceResponseError) for kind in chain), chain
    assert elapsed < SANITY_S

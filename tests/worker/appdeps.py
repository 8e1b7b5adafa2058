"""What the app's triggers use inside the worker: in-memory stores and queues, a recording Service Bus
client for redeliveries, and a loopback stand-in for the remote services.

The triggers in the worker are the real ones; only what they would reach on Azure (Cosmos DB, Service
Bus, the remote services) is replaced, at the seams the Azure host wires (``function_host.wiring``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from azure.servicebus import ServiceBusMessage

from agents.services import HttpRemoteService
from demo.services.bindings import demo_bindings
from orderflow.bindings import NoAuth
from orderflow.clock import SystemClock
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.queues.servicebus import ServiceBusQueueFactory
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.host_deps import HostDeps

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
"""The redelivery client's clock: copies are scheduled relative to it."""


@dataclass
class RecordingSender:
    """A queue sender of the recording Service Bus client; fails every send while ``down``."""

    sent: list[ServiceBusMessage] = field(default_factory=list)
    down: bool = False

    def send_messages(self, message: ServiceBusMessage, *, timeout: float | None = None) -> None:
        if self.down:
            from azure.servicebus.exceptions import ServiceBusConnectionError  # noqa: PLC0415

            raise ServiceBusConnectionError(message="connection refused")
        self.sent.append(message)

    def close(self) -> None:
        """Nothing to close."""


@dataclass
class RecordingServiceBusClient:
    """The part of ``ServiceBusClient`` the redelivery uses: one recording sender per queue."""

    fully_qualified_namespace: str = "orderflow-test.servicebus.windows.net"
    senders: dict[str, RecordingSender] = field(default_factory=dict)

    def get_queue_sender(self, queue_name: str, **kwargs: Any) -> RecordingSender:
        return self.senders.setdefault(queue_name, RecordingSender())

    def get_queue_receiver(self, queue_name: str, **kwargs: Any) -> Any:
        raise AssertionError("the triggers never receive through the app's own client")

    def close(self) -> None:
        """Nothing to close."""


UNUSED_DURABLE_CLIENT = json.dumps(
    {
        "taskHubName": "orderflow",
        "creationUrls": {},
        "managementUrls": {},
        "baseUrl": "http://127.0.0.1:9/runtime/webhooks/durabletask",
        "requiredQueryStringParameters": "",
        "rpcBaseUrl": "http://127.0.0.1:9/durabletask/",
    }
)
"""A ``durableClient`` binding for a trigger that makes no durable call in the test (the submission with
``CLAIM_ON_SUBMIT`` off): nothing listens where it points."""


def app_dependencies(
    **settings: Any,
) -> tuple[HostDeps, ServiceBusQueueFactory, RecordingServiceBusClient]:
    """The triggers' dependencies (with ``settings`` over the tests' own), the redelivery factory, and the
    client behind it."""
    deps = HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=InMemoryQueueFactory(),
        clock=SystemClock(),
        settings=Settings.load(
            env={}, HOST_ID="", AGENT_BACKOFF_INITIAL_S=0.05, AGENT_BACKOFF_MAX_S=0.1, **settings
        ),
    )
    client = RecordingServiceBusClient()
    return deps, ServiceBusQueueFactory(client, clock=lambda: NOW), client


@dataclass
class ServiceScript:
    """What the loopback remote service answers: ``failures`` 503s first, then success."""

    failures: int = 0
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    """``time.monotonic()`` of each request, seconds."""
    traceparents: list[str | None] = field(default_factory=list)
    """The ``traceparent`` header of each request (None: not sent)."""


def remote_service(name: str, url: str) -> HttpRemoteService:
    """``name`` bound as the demo binds it, at ``url``, without a token (these fakes check none)."""
    binding = demo_bindings(url).services[name]
    anonymous = binding.model_copy(update={"auth": NoAuth(mode="none", reason="a loopback fake")})
    return HttpRemoteService(name, anonymous)


class RemoteServices:
    """The demo services' HTTP surface on a loopback port: records each POST (path, idempotency key,
    body) and answers per :class:`ServiceScript`."""

    def __init__(self) -> None:
        self.script = ServiceScript()
        services = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server naming
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                current = services.script
                current.requests.append((self.path, self.headers.get("Idempotency-Key", ""), body))
                current.arrived.append(time.monotonic())
                current.traceparents.append(self.headers.get("traceparent"))
                failed = len(current.requests) <= current.failures
                payload = {"error": "busy"} if failed else {"reservationId": "r-1", "status": "reserved"}
                data = json.dumps(payload).encode()
                self.send_response(503 if failed else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def serve() -> Iterator[RemoteServices]:
    """A :class:`RemoteServices` for the length of a fixture."""
    services = RemoteServices()
    try:
        yield services
    finally:
        services.stop()

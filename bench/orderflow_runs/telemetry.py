"""Telemetry bytes per order, from the exporter: a devhost process exports through the Azure Monitor
distro to a local ingestion endpoint, which weighs every envelope it is sent. The devhost configures
the distro with ``configure_telemetry``; on Azure the Functions worker configures it itself, for the same
``orderflow`` logger (``PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME``), and both export the same records.

An order's telemetry is what carries its trace's operation id (orderflow keeps an order's spans in one
trace, docs/operations.md): its roles' spans, the Azure SDK and HTTP calls they make, and the log
records written inside them. The devhost stands in for the Functions host and Service Bus, so part of
that has no counterpart in the worker on Azure (:func:`worker_side`): durabletask's spans (the Durable
Functions extension's work, in the host) and the consumer loops' Storage-queue receives, deletes and
visibility updates (the Service Bus trigger's, in the host). Its Storage-queue sends stand for the
worker's Service Bus sends and are kept. Idle loops, timers and start-up are in no order's trace.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from bench.load import run_orderflow_load
from bench.orderflow_runs.stored import json_bytes
from bench.orderflow_runs.throughput import connect_stores, isolation, registered_client
from bench.workload import submissions
from demo.fleet import Fleet, devhost_specs, host_env
from demo.tpch import DemoOrder
from devhost.emulators import LocalEndpoints
from orderflow.settings import Settings
from orderflow.tracing import SUBMISSION
from orderflow_client.client import OrderflowClient

TRACK_PATH: Final = "/v2.1/track"
"""Where the Azure Monitor exporter posts its envelopes, under the connection string's ingestion endpoint."""

DURABLETASK_SPANS: Final = ("create_orchestration:", "orchestration_event:", "orchestration:", "activity:")
"""Name prefixes of durabletask's own spans: its client's start and raised events, its worker's episodes
and activities. On Azure the Durable Functions extension does this work in the host, whose request
spans the cost model prices apart."""

HOST_SIDE_OPERATIONS: Final = (
    "QueueClient.receive_messages",
    "QueueClient.delete_message",
    "QueueClient.update_message",
    "QueueClient.peek_messages",
    "QueueClient.get_queue_properties",
    "QueueClient.create_queue",
)
"""Storage-queue calls of the devhost's consumer loops: on Azure the Service Bus trigger receives,
completes, abandons and renews each message in the Functions host, and the worker makes no such call."""

EXPORT_SETTINGS: Final[Mapping[str, str]] = {
    # Every trace kept: the cost model applies the deployment's sampling to the bytes measured here.
    "OTEL_TRACES_SAMPLER": "microsoft.fixed_percentage",
    "OTEL_TRACES_SAMPLER_ARG": "1.0",
    # Exported within half a second, so that the run can wait for the last order's records.
    "OTEL_BSP_SCHEDULE_DELAY": "500",
    "OTEL_BLRP_SCHEDULE_DELAY": "500",
    # No statsbeat to Microsoft's endpoint (no network here), no exporter counts; metrics once an hour,
    # outside the window.
    "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
    "APPLICATIONINSIGHTS_SDKSTATS_DISABLED": "true",
    "OTEL_METRIC_EXPORT_INTERVAL": "3600000",
}
"""Settings of the measured devhost besides its connection string."""


@dataclass(frozen=True)
class Envelope:
    """One telemetry item as the exporter sent it.

    Attributes:
        base_type: ``RequestData``, ``RemoteDependencyData``, ``MessageData``, ``EventData``,
            ``ExceptionData`` or ``MetricData``.
        name: The span's or event's name (a dependency's is its operation), or the message's first 60
            characters.
        size: Bytes of the envelope as compact UTF-8 JSON.
        value_bytes: Bytes of its values as text (:func:`value_bytes`), what Log Analytics bills it by
            before the columns ingestion adds.
        operation_id: Its trace id (``ai.operation.id``); empty for none.
        span_id: A span's id (``baseData.id``); empty for a log record or a metric.
        parent_id: The parent span's id (``ai.operation.parentId``); empty for a root.
    """

    base_type: str
    name: str
    size: int
    value_bytes: int = 0
    operation_id: str = ""
    span_id: str = ""
    parent_id: str = ""


TAGS_WITHOUT_COLUMN: Final = frozenset({"ai.internal.nodeName", "ai.device.locale", "ai.device.id"})
"""Envelope tags no Application Insights table keeps a column for (the role instance, the SDK version,
the operation's ids and the device type each have one)."""

ENVELOPE_OWN: Final = frozenset({"name", "ver", "data"})
"""Envelope fields that become no column of their own: the item's type (the ``Type`` column, which
Log Analytics does not bill) and schema versions."""


def _text(value: Any) -> int:
    """UTF-8 bytes of a value as text: a string as it is, a number or boolean as written, a nested object
    as compact JSON (a dynamic column)."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, dict | list):
        return json_bytes(value) if value else 0
    return len(str(value).encode())


def value_bytes(item: Mapping[str, Any]) -> int:
    """The bytes of an envelope's values as text: its time, instrumentation key and sample rate, each
    tag, and each field of its ``baseData`` (properties and measurements as compact JSON), names left
    out, and the tags no column keeps (:data:`TAGS_WITHOUT_COLUMN`). Azure Monitor Logs bills a record by
    "a string representation of the columns that are stored" for it
    (learn.microsoft.com/azure/azure-monitor/logs/cost-logs, "Data size calculation"); each of these
    values is one such column, a few columns are added at ingestion (priced apart) and the ``Type``
    column is not billed. A span's duration is counted as the envelope writes it
    (``0.00:00:00.012345``), some ten characters longer than the ``DurationMs`` stored."""
    top = sum(_text(value) for key, value in item.items() if key not in ENVELOPE_OWN and key != "tags")
    tags = sum(
        _text(value) for key, value in (item.get("tags") or {}).items() if key not in TAGS_WITHOUT_COLUMN
    )
    base = (item.get("data") or {}).get("baseData") or {}
    return top + tags + sum(_text(value) for key, value in base.items() if key != "ver")


def envelope_of(item: Mapping[str, Any]) -> Envelope:
    """The :class:`Envelope` of one item of the exporter's JSON array.

    Raises:
        KeyError: ``item`` has no ``data.baseType``.
    """
    data = item["data"]
    base = data.get("baseData") or {}
    tags = item.get("tags") or {}
    return Envelope(
        base_type=str(data["baseType"]),
        name=str(base.get("name") or base.get("message") or "")[:60],
        size=json_bytes(item),
        value_bytes=value_bytes(item),
        operation_id=str(tags.get("ai.operation.id") or ""),
        span_id=str(base.get("id") or ""),
        parent_id=str(tags.get("ai.operation.parentId") or ""),
    )


def _host_side_name(name: str) -> bool:
    return name.startswith(DURABLETASK_SPANS) or name.startswith(HOST_SIDE_OPERATIONS)


def worker_side(envelopes: Sequence[Envelope]) -> list[bool]:
    """For each of ``envelopes``, whether the worker on Azure exports it too: not a metric (a minute's,
    not an order's), not durabletask's (:data:`DURABLETASK_SPANS`), not a consumer loop's queue call
    (:data:`HOST_SIDE_OPERATIONS`), and not under one of those (an SDK call's HTTP span, a record logged
    inside it), whichever order they were exported in."""
    by_id = {e.span_id: e for e in envelopes if e.span_id}

    def host_side(envelope: Envelope) -> bool:
        seen: set[str] = set()
        current: Envelope | None = envelope
        while current is not None and current.span_id not in seen:
            if _host_side_name(current.name):
                return True
            seen.add(current.span_id)
            current = by_id.get(current.parent_id)
        return False

    return [e.base_type != "MetricData" and not host_side(e) for e in envelopes]


def order_traces(envelopes: Sequence[Envelope], root: str = SUBMISSION) -> set[str]:
    """The operation ids of the orders whose ``root`` span (the submission's) is among ``envelopes``."""
    return {e.operation_id for e in envelopes if e.name == root and e.operation_id}


def orders_telemetry(envelopes: Sequence[Envelope], root: str = SUBMISSION) -> list[Envelope]:
    """The envelopes of the orders whose ``root`` span (the submission's) is among ``envelopes``: every
    one carrying such an order's operation id. What a role does before its span opens (an activity's
    point read of a record its process has not cached) is in no order's trace, and not counted."""
    traces = order_traces(envelopes, root)
    return [e for e in envelopes if e.operation_id in traces]


class IngestionStub:
    """A local Application Insights ingestion endpoint on loopback: accepts the Azure Monitor exporter's
    posts to :data:`TRACK_PATH` (gzip or not), answers that every item was accepted, and keeps an
    :class:`Envelope` of each item. Use as a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._envelopes: list[Envelope] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                items = json.loads(body) if self.path == TRACK_PATH else []
                stub.received([envelope_of(item) for item in items])
                answer = json.dumps(
                    {"itemsReceived": len(items), "itemsAccepted": len(items), "errors": []}
                ).encode()
                self.send_response(200 if self.path == TRACK_PATH else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="ingestion-stub", daemon=True)

    def __enter__(self) -> IngestionStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def connection_string(self) -> str:
        """An Application Insights connection string whose ingestion endpoint is this stub."""
        port = self._server.server_address[1]
        return f"InstrumentationKey={uuid.UUID(int=1)};IngestionEndpoint=http://127.0.0.1:{port}/"

    def received(self, envelopes: Sequence[Envelope]) -> None:
        """Keep ``envelopes`` (the handler's call)."""
        with self._lock:
            self._envelopes.extend(envelopes)

    def envelopes(self) -> list[Envelope]:
        """Every envelope received so far, in order."""
        with self._lock:
            return list(self._envelopes)


def bytes_by_kind(envelopes: Sequence[Envelope], orders: int) -> dict[str, Any]:
    """Per order: the worker-side envelopes' (:func:`worker_side`) count, bytes and value bytes by base
    type, their bytes by name, their ``total_bytes``, and what the devhost exported that the worker
    would not (``host_side``; metrics, a minute's and not an order's, in neither).

    Raises:
        ValueError: ``orders`` is not positive.
    """
    if orders <= 0:
        raise ValueError(f"orders must be positive, not {orders}")
    sides = worker_side(envelopes)
    kept = [e for e, worker in zip(envelopes, sides, strict=True) if worker]
    dropped = [
        e for e, worker in zip(envelopes, sides, strict=True) if not worker and e.base_type != "MetricData"
    ]
    count, size, values = Counter(e.base_type for e in kept), Counter[str](), Counter[str]()
    by_name = Counter[str]()
    for e in kept:
        size[e.base_type] += e.size
        values[e.base_type] += e.value_bytes
        by_name[_short(e)] += e.size
    return {
        "items": {kind: round(n / orders, 2) for kind, n in sorted(count.items())},
        "bytes": {kind: round(n / orders, 1) for kind, n in sorted(size.items())},
        "value_bytes": {kind: round(n / orders, 1) for kind, n in sorted(values.items())},
        "bytes_by_name": {name: round(n / orders, 1) for name, n in by_name.most_common()},
        "total_bytes": round(sum(size.values()) / orders, 1),
        "host_side": {
            "items": round(len(dropped) / orders, 2),
            "bytes": round(sum(e.size for e in dropped) / orders, 1),
        },
    }


def _short(envelope: Envelope) -> str:
    """A name to group by: a log record's event, an HTTP span's method (its path names the run's
    queues and containers), else the span's name."""
    if envelope.base_type == "MessageData":
        return f"log: {envelope.name.split(' ', 1)[0]}"
    method = envelope.name.split(" ", 1)[0]
    if method in {"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"}:
        return f"http: {method}"
    return envelope.name


@contextmanager
def exporting_devhost(
    endpoints: LocalEndpoints,
    services_url: str,
    run_dir: Path,
    stub: IngestionStub,
    *,
    tag: str,
    overrides: Mapping[str, str] | None = None,
) -> Iterator[OrderflowClient]:
    """One devhost process with every role, the demo's settings and ``overrides``, exporting to ``stub``;
    yields the run's client."""
    env = host_env(endpoints, services_url)
    env.update(overrides or {})
    env.update(isolation(tag))
    env.update(EXPORT_SETTINGS)
    env["APPLICATIONINSIGHTS_CONNECTION_STRING"] = stub.connection_string
    settings = Settings.load(env)
    connect_stores(endpoints, settings).close()  # creates the containers before the devhost starts
    (registered,) = settings.clients.clients()
    client = registered_client(endpoints, registered)
    fleet = Fleet(devhost_specs(1), env, run_dir)
    try:
        yield client
    finally:
        fleet.stop()


def telemetry_run(
    *,
    orders: Sequence[DemoOrder],
    warmup: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    run_dir: Path,
    timeout_s: float,
    settle_s: float = 2.0,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Telemetry bytes per happy-path order, as the Azure Monitor exporter sends them.

    The warm-up orders run first; ``settle_s`` after them (four export periods) the timed orders run one
    at a time, and their telemetry is what was posted from then until ``settle_s`` after the last one
    with the operation id of a timed order (:func:`orders_telemetry`).

    Returns:
        :func:`bytes_by_kind` fields per order traced, plus ``orders``, ``outcomes``, ``orders_traced``
        (orders whose submission span was exported in the window), ``all_processed`` (every order
        processed and traced) and ``method``.
    """
    tag = f"t{uuid.uuid4().hex[:6]}"
    with (
        IngestionStub() as stub,
        exporting_devhost(endpoints, services_url, run_dir, stub, tag=tag, overrides=overrides) as client,
    ):
        if warmup:
            run_orderflow_load(
                client,
                submissions(warmup, run=f"w{tag}", reply_to=client.reply_queue),
                concurrency=1,
                timeout_s=timeout_s,
            )
        time.sleep(settle_s)
        before = len(stub.envelopes())
        result = run_orderflow_load(
            client,
            submissions(orders, run=tag, reply_to=client.reply_queue),
            concurrency=1,
            timeout_s=timeout_s,
        )
        time.sleep(settle_s)
        posted = stub.envelopes()[before:]
        window = orders_telemetry(posted)
    processed = result.outcomes.get("Processed", 0)
    traced = len(order_traces(posted))
    return {
        "method": "one devhost process with every role, its Azure Monitor distro exporting to a local "
        "ingestion endpoint; each envelope weighed as compact JSON; every trace kept",
        "orders": len(orders),
        "outcomes": dict(sorted(result.outcomes.items())),
        "all_processed": processed == len(orders) and traced == len(orders),
        "orders_traced": traced,
        **bytes_by_kind(window, max(traced, 1)),
    }

"""Counts of the HTTP requests a process makes to the emulators, by emulator and operation.

Counted at the transport, below the Azure SDKs: :func:`install_http_counter` wraps
``devhost.http_transport.LoopbackTransport.send`` (the transport of every client of a loopback
emulator) and ``requests.adapters.HTTPAdapter.send`` (azure-core's default transport, for any other
endpoint), so every request on the wire is counted once, SDK retries and idle polls included, and none
of orderflow's code knows it is counted.

:func:`classify` names a request from its method, path and the Cosmos query header alone:

- Azurite queues (``/<account>/<queue>/messages...``): ``send`` (POST), ``receive`` (GET), ``peek``
  (GET with ``peekonly=true``), ``delete`` (DELETE of a message), ``update`` (PUT of a message: a lock
  renewal or an abandon), ``create_queue``, ``queue_metadata`` (the approximate count), ``clear``;
- Azurite blobs (the supervisor's lease): ``lease``, ``blob`` (anything else);
- cosmosdb-server (``/dbs/...``): ``read``, ``replace``, ``create``, ``delete`` of a document,
  ``query`` (a POST to ``docs`` with ``x-ms-documentdb-isquery``), ``metadata`` (account, database,
  container and partition-range requests).

The emulator is named by the request's ``host:port`` (``targets``); requests to any other address
count under :data:`OTHER`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests.adapters

from bench.counting import OperationCounts
from devhost.http_transport import LoopbackTransport

OTHER = "other"
"""The emulator name of a request to an address no target names."""


def _queue_operation(method: str, parts: list[str], query: Mapping[str, list[str]]) -> str:
    """``parts`` is the path after the account: ``[queue]`` or ``[queue, "messages", (id)]``."""
    if len(parts) == 1:
        if method == "PUT":
            return "create_queue"
        return "queue_metadata" if query.get("comp") == ["metadata"] else f"queue_{method.lower()}"
    if len(parts) >= 3:
        return {"DELETE": "delete", "PUT": "update"}.get(method, f"message_{method.lower()}")
    if method == "POST":
        return "send"
    if method == "DELETE":
        return "clear"
    return "peek" if query.get("peekonly") == ["true"] else "receive"


def _cosmos_operation(method: str, parts: list[str], headers: Mapping[str, str]) -> str:
    """``parts`` is the whole path: ``dbs/<db>/colls/<coll>/docs(/<id>)`` for documents."""
    if len(parts) < 5 or parts[4] != "docs":
        return "metadata"
    if len(parts) == 5:
        if method != "POST":
            return "metadata"
        is_query = str(headers.get("x-ms-documentdb-isquery", "")).lower() == "true"
        return "query" if is_query else "create"
    return {"GET": "read", "PUT": "replace", "DELETE": "delete"}.get(method, "metadata")


def classify(method: str, url: str, headers: Mapping[str, str]) -> str:
    """The operation a request to an emulator is (see the module docstring for the names).

    Args:
        method: HTTP method, any case.
        url: The full URL.
        headers: The request's headers; only ``x-ms-documentdb-isquery`` is read (any case of name).

    Returns:
        An operation name; ``other`` for a path neither emulator serves.
    """
    method = method.upper()
    split = urlsplit(url)
    parts = [part for part in split.path.split("/") if part]
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    query = parse_qs(split.query)
    if parts and parts[0] == "dbs":
        return _cosmos_operation(method, parts, lowered)
    if not parts:
        return "metadata"  # the Cosmos account read (GET /)
    if query.get("comp") == ["lease"]:
        return "lease"
    if query.get("restype") == ["container"] or (len(parts) >= 3 and parts[2] != "messages"):
        return "blob"
    if len(parts) >= 2:
        return _queue_operation(method, parts[1:], query)
    return OTHER


def target_of(url: str, targets: Mapping[str, str]) -> str:
    """The emulator ``url`` is addressed to: ``targets["host:port"]``, or :data:`OTHER`."""
    split = urlsplit(url)
    return targets.get(f"{split.hostname}:{split.port}", OTHER)


class HttpCounter:
    """Counts requests as ``(operation, emulator)`` in :attr:`counts`.

    Args:
        targets: ``"host:port"`` -> emulator name (e.g. ``"127.0.0.1:10001": "azurite"``).
        counts: The tally (a new one by default).
    """

    def __init__(self, targets: Mapping[str, str], counts: OperationCounts | None = None) -> None:
        self.targets = dict(targets)
        self.counts = counts if counts is not None else OperationCounts()

    def __repr__(self) -> str:
        return f"HttpCounter(targets={sorted(self.targets.values())})"

    def count(self, method: str, url: str, headers: Mapping[str, str]) -> None:
        """Count one request."""
        self.counts.add(classify(method, url, headers), target_of(url, self.targets))


_install_lock = threading.Lock()


@contextmanager
def installed(counter: HttpCounter) -> Iterator[HttpCounter]:
    """Count every request this process sends through ``requests`` while the block runs."""
    uninstall = install_http_counter(counter)
    try:
        yield counter
    finally:
        uninstall()


def install_http_counter(counter: HttpCounter) -> Callable[[], None]:
    """Wrap ``LoopbackTransport.send`` and ``HTTPAdapter.send`` so that every request is counted; returns
    the function that unwraps them.

    A request is counted before it is sent, whether or not it succeeds (a refused connection is a
    request the SDK made). A request goes through one of the two, never both.
    """
    with _install_lock:
        original = requests.adapters.HTTPAdapter.send
        original_loopback = LoopbackTransport.send

        def send(self: requests.adapters.HTTPAdapter, request: Any, *args: Any, **kwargs: Any) -> Any:
            counter.count(str(request.method or "GET"), str(request.url), request.headers or {})
            return original(self, request, *args, **kwargs)

        def send_loopback(self: LoopbackTransport, request: Any, **kwargs: Any) -> Any:
            counter.count(str(request.method or "GET"), str(request.url), request.headers or {})
            return original_loopback(self, request, **kwargs)

        requests.adapters.HTTPAdapter.send = send  # type: ignore[method-assign]
        LoopbackTransport.send = send_loopback  # type: ignore[method-assign]

    def uninstall() -> None:
        with _install_lock:
            requests.adapters.HTTPAdapter.send = original  # type: ignore[method-assign]
            LoopbackTransport.send = original_loopback  # type: ignore[method-assign]

    return uninstall

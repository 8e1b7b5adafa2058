"""An azure-core transport that answers the real ``azure-cosmos`` SDK's requests from memory.

The SDK is used as it is (its pager, its retry and timeout policies, its response hooks); only the
HTTP exchange is replaced. It answers the account read the client makes when it is created, the
container read a query makes first, and every query with a page the test scripts: by default an empty
page with a new continuation token, which is what cosmosdb-server cannot produce and Cosmos DB does
(cross-partition queries over partition ranges with nothing to match).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.cosmos import CosmosClient

from orderflow.stores.cosmos import CosmosOrderStore, CosmosStateStore

ENDPOINT = "https://localhost:8081/"
"""The account endpoint the fake answers for (no socket is opened)."""

EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
"""The Cosmos DB emulator's published key (not a secret)."""

STOP_AFTER = 5000
"""Query pages after which the endless store finally answers a last page: code that pages without a
bound of its own then ends (and fails its test on the count) instead of hanging the test session."""

_ACCOUNT = {
    "id": "fake",
    "_rid": "fake",
    "writableLocations": [{"name": "local", "databaseAccountEndpoint": ENDPOINT}],
    "readableLocations": [{"name": "local", "databaseAccountEndpoint": ENDPOINT}],
    "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
    "enableMultipleWriteLocations": False,
}


class _Response(HttpResponse):
    def __init__(self, request: HttpRequest, status: int, body: Any, headers: dict[str, str]) -> None:
        super().__init__(request, None)
        self.status_code = status
        self.headers = {"Content-Type": "application/json", **headers}
        self.reason = "OK" if status < 400 else "Error"
        self.content_type = "application/json"
        self._body = json.dumps(body).encode("utf-8")

    def body(self) -> bytes:
        return self._body


Pager = Callable[[int, str | None], tuple[list[dict[str, Any]], str | None]]
"""Answers query page ``n`` (0-based) asked for with a continuation token: (documents, next token)."""


def endless_empty_pages(n: int, _token: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """An empty page with a new token, every time (until :data:`STOP_AFTER`)."""
    return [], (f"empty-{n + 1}" if n + 1 < STOP_AFTER else None)


@dataclass
class CosmosTransport(HttpTransport):  # type: ignore[type-arg]
    """The fake transport; thread-safe.

    Attributes:
        pager: Answers each query (replace it to change what the store says).
        queries: The continuation token each query request carried (None for a first page), in order.
    """

    pager: Pager = endless_empty_pages
    queries: list[str | None] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> CosmosTransport:
        return self

    def __exit__(self, *args: object) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        path = request.url.removeprefix(ENDPOINT.rstrip("/")).rstrip("/")
        if request.method == "GET" and path == "":
            return _Response(request, 200, _ACCOUNT, {})
        if request.method == "GET" and "/colls/" in path and "/docs" not in path:
            container = {
                "id": path.rsplit("/", 1)[-1],
                "_rid": "AAAAAA==",
                "_self": "dbs/AAAA==/colls/AAAAAA==/",
                "partitionKey": {"paths": ["/orderId"], "kind": "Hash", "version": 2},
            }
            return _Response(request, 200, container, {})
        if request.method == "POST" and path.endswith("/docs"):
            token = request.headers.get("x-ms-continuation")
            with self._lock:
                n = len(self.queries)
                self.queries.append(token)
            documents, next_token = self.pager(n, token)
            headers = {} if next_token is None else {"x-ms-continuation": next_token}
            return _Response(request, 200, {"Documents": documents, "_count": len(documents)}, headers)
        return _Response(request, 404, {"code": "NotFound", "message": f"{request.method} {path}"}, {})


@dataclass
class FakeCosmos:
    """Both stores over one real SDK client whose requests ``transport`` answers."""

    client: CosmosClient
    state: CosmosStateStore
    orders: CosmosOrderStore


def fake_cosmos(transport: CosmosTransport) -> FakeCosmos:
    """The stores over the real SDK client, built as the devhost builds them but with ``transport``."""
    client = CosmosClient(ENDPOINT, credential=EMULATOR_KEY, transport=transport)
    database = client.get_database_client("orderflow")
    return FakeCosmos(
        client,
        CosmosStateStore(
            database.get_container_client("orderstate"), history=database.get_container_client("orderhistory")
        ),
        CosmosOrderStore(database.get_container_client("orders")),
    )

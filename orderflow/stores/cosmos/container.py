"""One Cosmos DB container behind the stores: SDK and transport errors mapped onto orderflow's, the
cosmosdb-server 404 quirk resolved, and bounded paging of streamable queries."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos import ContainerProxy
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosClientTimeoutError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)
from azure.cosmos.http_constants import HttpHeaders

from orderflow.errors import (
    AlreadyExists,
    ConcurrencyConflict,
    InvalidContinuation,
    NotFound,
    PermanentError,
    TransientError,
)
from orderflow.stores import continuation as tokens

logger = logging.getLogger("orderflow.stores.cosmos")  # the package's one logger, as filters name it

_TRANSIENT_STATUS = frozenset({408, 429, 449, 500, 502, 503, 504})
TOKEN_PREFIX = "cos1."

Parameters = list[dict[str, Any]]


@contextmanager
def translated(kind: str, item_id: str | None) -> Iterator[None]:
    """Map SDK and transport errors of one operation onto orderflow's error hierarchy."""
    what = f"{kind} {item_id!r}" if item_id is not None else kind
    try:
        yield
    except CosmosResourceExistsError as exc:
        raise AlreadyExists(f"{what} already exists (409)") from exc
    except CosmosAccessConditionFailedError as exc:
        logger.debug("conditional replace of %s lost: ETag changed", what)
        raise ConcurrencyConflict(f"{what} changed since it was read (412)") from exc
    except CosmosResourceNotFoundError as exc:
        raise NotFound(f"{what} not found (404)") from exc
    except CosmosHttpResponseError as exc:
        status = exc.status_code
        if status in _TRANSIENT_STATUS:
            logger.warning("Cosmos DB answered %s for %s", status, what)
            raise TransientError(f"Cosmos DB answered {status} for {what}") from exc
        raise PermanentError(f"cosmos_{status}", f"Cosmos DB answered {status} for {what}") from exc
    except (CosmosClientTimeoutError, ServiceRequestError, ServiceResponseError) as exc:
        # ServiceRequestError: the request never reached the service (refused, DNS, TLS, connect timeout);
        # ServiceResponseError: the connection broke or timed out while waiting for the answer.
        logger.warning("Cosmos DB unreachable for %s: %s", what, type(exc).__name__)
        raise TransientError(f"Cosmos DB unreachable for {what}: {type(exc).__name__}") from exc


def system_free(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` without the system properties Cosmos DB adds (``_etag``, ``_ts``, ...)."""
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def check_key(item_id: str, order_id: str) -> None:
    """Check that an item's id is its order id.

    Raises:
        ValueError: they differ.
    """
    # Point reads use the order id as both id and partition key; a differing id could never be read.
    if item_id != order_id:
        raise ValueError(f"id {item_id!r} must equal orderId {order_id!r}")


MAX_COUNT_PAGES = 100
"""Most pages the SDK may fetch for one :meth:`CosmosStateStore.count` (an aggregate over every
partition range comes back as a page per range). Past it the count fails as transient instead of
paging on: a store answering endless empty pages must not hold the caller (docs/operations.md)."""


class _EmptyPage(Exception):
    """Raised by a query's response hook to stop the SDK at an empty page that carries a token."""


class _TooManyPages(Exception):
    """Raised by a count's response hook once it has seen :data:`MAX_COUNT_PAGES` pages."""


class CosmosContainer:
    """One container with error translation; the core of both stores.

    Args:
        container: The SDK's container.
        kind: What its items are, for messages (``state record``, ``order``).
        operation_timeout_s: Absolute timeout of each operation, SDK retries included (the SDK's
            ``timeout`` keyword: it then raises ``CosmosClientTimeoutError``); None: no such bound.
    """

    def __init__(
        self, container: ContainerProxy, kind: str, *, operation_timeout_s: float | None = None
    ) -> None:
        self.container = container
        self.kind = kind
        self._options: dict[str, Any] = (
            {} if operation_timeout_s is None else {"timeout": operation_timeout_s}
        )

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        with translated(self.kind, str(doc["id"])):
            return self.container.create_item(body=doc, **self._options)

    def upsert(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create ``doc`` or replace the item of its id and partition, whatever its ETag: only for
        documents no one else writes."""
        with translated(self.kind, str(doc["id"])):
            return self.container.upsert_item(body=doc, **self._options)

    def read(self, item_id: str, *, partition_key: str | None = None) -> dict[str, Any]:
        """A point read; the partition key is the id unless given (the alerts container's is its day)."""
        with translated(self.kind, item_id):
            try:
                key = item_id if partition_key is None else partition_key
                return self.container.read_item(item=item_id, partition_key=key, **self._options)
            except CosmosHttpResponseError as exc:
                # cosmosdb-server answers 500 instead of 404 for a missing item (module docstring).
                # Ask whether it exists: absent → NotFound; present → the 500 was real (transient).
                if exc.status_code == 500 and partition_key is None and not self._exists(item_id):
                    raise NotFound(f"{self.kind} {item_id!r} not found") from exc
                raise

    def _exists(self, item_id: str) -> bool:
        found: Iterable[Any] = self.container.query_items(
            query="SELECT VALUE COUNT(1) FROM c WHERE c.orderId = @pk AND c.id = @id",
            parameters=[{"name": "@pk", "value": item_id}, {"name": "@id", "value": item_id}],
            partition_key=item_id,
            **self._options,
        )
        return sum(int(n) for n in found) > 0

    def replace(self, doc: dict[str, Any], etag: str) -> dict[str, Any]:
        item_id = str(doc["id"])
        with translated(self.kind, item_id):
            return self.container.replace_item(
                item=item_id,
                body=doc,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
                **self._options,
            )

    def _fingerprint(self, sql: str, params: Parameters) -> str:
        text = json.dumps([self.container.id, sql, params], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def query_page(
        self,
        sql: str,
        params: Parameters,
        *,
        max_item_count: int,
        continuation: str | None,
        partition_key: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a streamable cross-partition query; an empty page that carries a token is
        returned as it is (``([], token)``), never skipped.

        The SDK's pager skips an empty page with a token and fetches the next one itself, with no bound:
        a store that keeps answering empty pages with fresh tokens would hold this call for ever. The
        response hook stops it at the first such page, so the caller's loop counts it against its own
        page and time bounds (:mod:`orderflow.stores.paging`).

        Raises:
            InvalidContinuation: the token is garbled, from another query, rejected, or repeated.
            TransientError: see :func:`translated`.
        """
        fingerprint = self._fingerprint(sql, params)
        server_token = (
            tokens.decode(TOKEN_PREFIX, continuation, fingerprint) if continuation is not None else None
        )
        # The continuation header is captured per response by a hook rather than read from
        # ``pager.continuation_token``: that property reads the *client's* last response headers,
        # which another thread's request may have overwritten, and falls back to the ETag header.
        headers_seen: list[str | None] = []

        def capture(headers: Mapping[str, Any], body: Any) -> None:
            token = headers.get(HttpHeaders.Continuation)
            headers_seen.append(token)
            if token is not None and isinstance(body, Mapping) and not body.get("Documents"):
                raise _EmptyPage

        scope: dict[str, Any] = (
            {"enable_cross_partition_query": True}
            if partition_key is None
            else {"partition_key": partition_key}
        )
        with translated(self.kind, None):
            pages = self.container.query_items(
                query=sql,
                parameters=params,
                **scope,
                max_item_count=max_item_count,
                response_hook=capture,
                **self._options,
            ).by_page(server_token)
            try:
                items = list(next(pages))
            except (StopIteration, _EmptyPage):
                # StopIteration: the last page was empty (its token is null).
                items = []
            except CosmosHttpResponseError as exc:
                if exc.status_code == 400 and server_token is not None:
                    raise InvalidContinuation("Cosmos DB rejected the continuation token (400)") from exc
                raise
        next_token = headers_seen[-1] if headers_seen else None
        if next_token is not None and next_token == server_token:
            raise InvalidContinuation("Cosmos DB returned the continuation token it was given")
        return items, tokens.encode(TOKEN_PREFIX, fingerprint, next_token) if next_token is not None else None

    def scalar_sum(self, sql: str, params: Parameters) -> int:
        """Run a cross-partition ``SELECT VALUE <aggregate>`` and add up what comes back."""
        pages = 0

        def bound(_headers: Mapping[str, Any], _body: Any) -> None:
            nonlocal pages
            pages += 1
            if pages >= MAX_COUNT_PAGES:
                raise _TooManyPages

        with translated(self.kind, None):
            # The SDK merges partial aggregates itself; summing is still correct if it ever returns
            # one partial count per partition range.
            values: Iterable[Any] = self.container.query_items(
                query=sql,
                parameters=params,
                enable_cross_partition_query=True,
                response_hook=bound,
                **self._options,
            )
            try:
                total = sum(int(value) for value in values)
            except _TooManyPages:
                logger.warning("Cosmos DB count took %s pages without finishing; giving up", pages)
                raise TransientError(
                    f"{self.kind} count did not finish within {MAX_COUNT_PAGES} pages"
                ) from None
        return total

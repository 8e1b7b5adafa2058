"""Cosmos DB adapters of the state and order stores, over the synchronous ``azure-cosmos`` SDK.

The same code talks to Azure Cosmos DB (Entra ID token credential, TLS verified) and to the local
``@vercel/cosmosdb-server`` emulator (account key, self-signed certificate). Both containers are
partitioned on ``/orderId`` and every item's ``id`` equals its order id, so a point read costs one
request.

HTTP outcomes map onto :mod:`orderflow.errors`: 409 → AlreadyExists, 412 → ConcurrencyConflict,
404 → NotFound, 408/429/449/5xx, client timeouts and connection failures → TransientError; any other
status → PermanentError. The SDK already retries throttling (429) and connection failures with
bounded back-off; nothing here retries again.

What cosmosdb-server 1.0.1 (with @zeit/cosmosdb-query 0.7.2) was probed to support, all of which
real Cosmos DB supports with the same meaning:

- null tests: ``c.x = null`` and ``IS_NULL(c.x)`` match an explicit null only; ``NOT IS_DEFINED(c.x)``
  matches a missing field only. The queries use ``(NOT IS_DEFINED(c.x) OR IS_NULL(c.x))`` so a record
  written before a field existed counts as null, as the models read it.
- ``c.processState IN (@s0, @s1)`` and ``ARRAY_CONTAINS(@states, c.processState)`` both work; ``IN``
  with one parameter per value is used (the form Cosmos DB serves from its index).
- string range comparisons with parameters (``c.completeBy < @completeByBefore``); a comparison with
  null is false, as in Cosmos DB. ``IS_STRING`` guards make "is set" explicit.
- ``SELECT VALUE COUNT(1)`` with a filter, cross-partition: returns one number.
- cross-partition paging with ``maxItemCount``: a token comes back only when more items match; the
  last page has no token. A token that is not JSON (garbage, truncated) is silently ignored and the
  scan restarts from the beginning; JSON of the wrong shape gives 400. This is why tokens are wrapped
  in an envelope carrying a query fingerprint (a foreign or garbled token → InvalidContinuation on
  both platforms instead of a silent restart).
- point read of a missing item answers **500** ("Cannot read properties of undefined"), not 404 (a bug
  in its read handler); replace of a missing item answers 404 correctly. :meth:`_CosmosContainer.read`
  disambiguates a 500 with a one-item count query, which is also correct on Cosmos DB.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosClientTimeoutError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)
from azure.cosmos.http_constants import HttpHeaders

from orderflow.alerts import (
    ALERT_TTL_S,
    ALERTS_CONTAINER,
    ALERTS_PARTITION_KEY_PATH,
    REPLAY_KIND,
    AlertDoc,
    ReplayDoc,
    SweepDoc,
    SweepTallyDoc,
    day_of,
    replay_filter,
    tally_id,
)
from orderflow.breaker import BreakerDoc
from orderflow.errors import (
    AlreadyExists,
    ConcurrencyConflict,
    InvalidContinuation,
    NotFound,
    PermanentError,
    TransientError,
)
from orderflow.records import OrderDocument, StateRecord, TimelineChunk, format_utc
from orderflow.stores import continuation as tokens
from orderflow.stores.base import (
    AlertQuery,
    Page,
    Redaction,
    StateQuery,
    Versioned,
    as_written,
    stored_at,
)
from orderflow.timeline import split_overflow

logger = logging.getLogger(__name__)

PARTITION_KEY_PATH = "/orderId"
"""Partition key path of every container (docs/design.md §2)."""

HISTORY_CONTAINER = "orderhistory"
"""Container of the timeline entries moved out of state records (append-only, partition key
``/orderId``; :mod:`orderflow.timeline`)."""

HISTORY_SQL = "SELECT * FROM c WHERE c.orderId = @orderId"
"""One order's timeline chunks: a single-partition query (the partition key is the order's)."""

_TRANSIENT_STATUS = frozenset({408, 429, 449, 500, 502, 503, 504})
_TOKEN_PREFIX = "cos1."

Parameters = list[dict[str, Any]]


@contextmanager
def _translated(kind: str, item_id: str | None) -> Iterator[None]:
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


def _system_free(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def _check_key(item_id: str, order_id: str) -> None:
    # Point reads use the order id as both id and partition key; a differing id could never be read.
    if item_id != order_id:
        raise ValueError(f"id {item_id!r} must equal orderId {order_id!r}")


def _flag_conditions(query: StateQuery) -> list[tuple[bool, str]]:
    return [
        (query.unlocked, "(NOT IS_DEFINED(c.lockedBy) OR IS_NULL(c.lockedBy))"),
        (query.not_suspended, "(NOT IS_DEFINED(c.suspendedAt) OR IS_NULL(c.suspendedAt))"),
        (query.reply_pending, "(IS_DEFINED(c.pendingReply) AND NOT IS_NULL(c.pendingReply))"),
    ]


def _valued_conditions(query: StateQuery) -> list[tuple[datetime | str | int | None, str, str]]:
    # (value, parameter, condition): a condition applies when its value is given.
    return [
        (query.client_id, "@clientId", "c.clientId = @clientId"),
        (query.workflow_version, "@workflowVersion", "c.workflowVersion = @workflowVersion"),
        (
            query.complete_by_before,
            "@completeByBefore",
            "(IS_STRING(c.completeBy) AND c.completeBy < @completeByBefore)",
        ),
        (
            query.complete_by_after,
            "@completeByAfter",
            "(IS_STRING(c.completeBy) AND c.completeBy >= @completeByAfter)",
        ),
        (
            query.ready_at,
            "@readyAt",
            "(NOT IS_DEFINED(c.nextAttemptAt) OR IS_NULL(c.nextAttemptAt) OR c.nextAttemptAt <= @readyAt)",
        ),
        (query.updated_before, "@updatedBefore", "(IS_STRING(c.updatedAt) AND c.updatedAt < @updatedBefore)"),
        (query.updated_after, "@updatedAfter", "(IS_STRING(c.updatedAt) AND c.updatedAt >= @updatedAfter)"),
        (
            query.purge_version_below,
            "@purgeVersionBelow",
            "(NOT IS_DEFINED(c.dataPurgeVersion) OR IS_NULL(c.dataPurgeVersion)"
            " OR c.dataPurgeVersion < @purgeVersionBelow)",
        ),
    ]


def state_query_sql(query: StateQuery, *, select: str = "*") -> tuple[str, Parameters]:
    """The parameterised Cosmos SQL for a :class:`StateQuery` (values are never formatted in).

    The query stays *streamable* (no ORDER BY, DISTINCT, TOP or aggregates on pages) so that the
    gateway serves it across partitions and its continuation token resumes it; ORDER BY would move
    execution into the SDK's client-side aggregator, which cannot resume from a token.

    Args:
        query: The filter.
        select: The projection, ``*`` for pages or ``VALUE COUNT(1)`` for :meth:`CosmosStateStore.count`.

    Returns:
        The SQL text and its parameters.
    """
    conditions: list[str] = []
    params: Parameters = []
    states = sorted({str(state) for state in query.process_states})
    if states:
        names = [f"@state{i}" for i in range(len(states))]
        conditions.append(f"c.processState IN ({', '.join(names)})")
        params += [{"name": name, "value": state} for name, state in zip(names, states, strict=True)]
    conditions += [condition for flag, condition in _flag_conditions(query) if flag]
    for value, name, condition in _valued_conditions(query):
        if value is not None:
            conditions.append(condition)
            params.append(
                {"name": name, "value": format_utc(value) if isinstance(value, datetime) else value}
            )
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT {select} FROM c{where}", params


MAX_COUNT_PAGES = 100
"""Most pages the SDK may fetch for one :meth:`CosmosStateStore.count` (an aggregate over every
partition range comes back as a page per range). Past it the count fails as transient instead of
paging on: a store answering endless empty pages must not hold the caller (docs/operations.md)."""


class _EmptyPage(Exception):
    """Raised by a query's response hook to stop the SDK at an empty page that carries a token."""


class _TooManyPages(Exception):
    """Raised by a count's response hook once it has seen :data:`MAX_COUNT_PAGES` pages."""


class _CosmosContainer:
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
        with _translated(self.kind, str(doc["id"])):
            return self.container.create_item(body=doc, **self._options)

    def upsert(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create ``doc`` or replace the item of its id and partition, whatever its ETag: only for
        documents no one else writes."""
        with _translated(self.kind, str(doc["id"])):
            return self.container.upsert_item(body=doc, **self._options)

    def read(self, item_id: str, *, partition_key: str | None = None) -> dict[str, Any]:
        """A point read; the partition key is the id unless given (the alerts container's is its day)."""
        with _translated(self.kind, item_id):
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
        with _translated(self.kind, item_id):
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
            TransientError: see :func:`_translated`.
        """
        fingerprint = self._fingerprint(sql, params)
        server_token = (
            tokens.decode(_TOKEN_PREFIX, continuation, fingerprint) if continuation is not None else None
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
        with _translated(self.kind, None):
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
        return items, tokens.encode(
            _TOKEN_PREFIX, fingerprint, next_token
        ) if next_token is not None else None

    def scalar_sum(self, sql: str, params: Parameters) -> int:
        """Run a cross-partition ``SELECT VALUE <aggregate>`` and add up what comes back."""
        pages = 0

        def bound(_headers: Mapping[str, Any], _body: Any) -> None:
            nonlocal pages
            pages += 1
            if pages >= MAX_COUNT_PAGES:
                raise _TooManyPages

        with _translated(self.kind, None):
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


class CosmosStateStore:
    """State records in a Cosmos DB container: the :class:`~orderflow.stores.base.StateStore` port.

    Thread-safe: share one instance (and its client) across threads.
    """

    def __init__(
        self,
        container: ContainerProxy,
        *,
        history: ContainerProxy | None = None,
        operation_timeout_s: float | None = None,
    ) -> None:
        self._container = _CosmosContainer(container, "state record", operation_timeout_s=operation_timeout_s)
        self._history = (
            None
            if history is None
            else _CosmosContainer(history, "timeline chunk", operation_timeout_s=operation_timeout_s)
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(container={self._container.container.id!r})"

    @staticmethod
    def _versioned(doc: dict[str, Any]) -> Versioned[StateRecord]:
        return Versioned(StateRecord.from_stored(doc), str(doc["_etag"]), stored_at(doc))

    def _moved_out(self, record: StateRecord) -> StateRecord:
        """``record`` as written: its timeline past the window appended to the history container first.

        Raises:
            PermanentError: the window overflows and the store was opened without a history container.
        """
        kept, chunk = split_overflow(record, at=record.updated_at)
        if chunk is None:
            return kept
        if self._history is None:
            raise PermanentError("no_history", f"{record.order_id}: no history container for its timeline")
        # An existing chunk holds the same entries, moved by a writer that then lost its race.
        with suppress(AlreadyExists):
            self._history.create(chunk.to_json_dict())
        return kept

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        """Insert a new record.

        Returns:
            The record as stored (``record`` itself unless part of its timeline moved to the history
            container), with its first ETag.

        Raises:
            AlreadyExists: a record with this id exists (409); the stored one is left untouched.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
            ValueError: ``record.id`` differs from ``record.order_id``.
        """
        _check_key(record.id, record.order_id)
        kept = self._moved_out(record)
        return as_written(kept, self._container.create(kept.to_json_dict()))

    def get(self, order_id: str) -> Versioned[StateRecord]:
        """Point-read a record by order id.

        Raises:
            NotFound: no such record.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
        """
        return self._versioned(self._container.read(order_id))

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        """Replace a record only if its stored ETag is still ``etag`` (If-Match).

        Returns:
            The record as written (``record`` itself unless part of its timeline moved to the history
            container), with its new ETag.

        Raises:
            ConcurrencyConflict: the stored ETag differs (412); nothing was written.
            NotFound: the record does not exist (404).
            TransientError: throttled beyond the SDK's retries, timed out or unreachable; the write
                may or may not have happened, so re-read before deciding again.
            ValueError: ``record.id`` differs from ``record.order_id``.
        """
        _check_key(record.id, record.order_id)
        kept = self._moved_out(record)
        return as_written(kept, self._container.replace(kept.to_json_dict(), etag))

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        """Read one page of records matching ``query`` (cross-partition, in the service's order).

        A page may hold fewer than ``max_item_count`` items, and a page with zero items but a
        continuation is legal: keep paging until the continuation is None.

        Args:
            query: The filter.
            max_item_count: Largest page size (at least 1).
            continuation: The token of the previous page of the same query, or None to start.

        Returns:
            The page; ``continuation`` is None when the scan is complete.

        Raises:
            InvalidContinuation: the token is malformed, from another query, rejected by the service,
                or repeated: restart the scan.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
            ValueError: ``max_item_count`` is less than 1.
        """
        if max_item_count < 1:
            raise ValueError("max_item_count must be at least 1")
        sql, params = state_query_sql(query)
        docs, token = self._container.query_page(
            sql, params, max_item_count=max_item_count, continuation=continuation
        )
        return Page([self._versioned(doc) for doc in docs], token)

    def count(self, query: StateQuery) -> int:
        """Number of records matching ``query``, counted by the service (``SELECT VALUE COUNT(1)``).

        Raises:
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
        """
        sql, params = state_query_sql(query, select="VALUE COUNT(1)")
        return self._container.scalar_sum(sql, params)

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        """One page of the order's timeline chunks (a query within its partition), oldest first.

        Chunks are sorted by ``firstSeq`` within a page; pages follow the container's order, which for
        an append-only partition is the order the chunks were written in, oldest first.

        Raises:
            InvalidContinuation: the token is malformed, from another order, or rejected.
            PermanentError: the store was opened without a history container.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
        """
        if max_item_count < 1:
            raise ValueError("max_item_count must be at least 1")
        if self._history is None:
            raise PermanentError("no_history", "the state store was opened without a history container")
        docs, token = self._history.query_page(
            HISTORY_SQL,
            [{"name": "@orderId", "value": order_id}],
            max_item_count=max_item_count,
            continuation=continuation,
            partition_key=order_id,
        )
        chunks = sorted(
            (TimelineChunk.model_validate(_system_free(d)) for d in docs), key=lambda c: c.first_seq
        )
        return Page(chunks, token)


class CosmosOrderStore:
    """Order documents in a Cosmos DB container: the ``OrderStore`` port."""

    def __init__(self, container: ContainerProxy, *, operation_timeout_s: float | None = None) -> None:
        self._container = _CosmosContainer(container, "order", operation_timeout_s=operation_timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(container={self._container.container.id!r})"

    def create(self, document: OrderDocument) -> None:
        """Insert a new order document.

        Raises:
            AlreadyExists: an order with this id exists (409); the stored one is left untouched.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
            ValueError: ``document.id`` differs from ``document.order_id``.
        """
        _check_key(document.id, document.order_id)
        self._container.create(document.to_json_dict())

    def get(self, order_id: str) -> OrderDocument:
        """Point-read an order document.

        Raises:
            NotFound: no such order.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
        """
        return OrderDocument.model_validate(_system_free(self._container.read(order_id)))

    def redact(self, order_id: str, *, at: datetime) -> Redaction:
        """Replace the document's customer and payment data with redaction markers, once (If-Match).

        Returns:
            ``redacted``, or ``already_redacted`` when nothing needed writing.

        Raises:
            NotFound: no such order.
            ConcurrencyConflict: another redaction wrote between this one's read and write (412).
            TransientError: throttled beyond the SDK's retries, timed out or unreachable; the write may
                or may not have happened (a later call finds out).
        """
        stored = self._container.read(order_id)
        document = OrderDocument.model_validate(_system_free(stored))
        if document.is_redacted():
            return Redaction.ALREADY_REDACTED
        self._container.replace(document.redacted(at).to_json_dict(), str(stored["_etag"]))
        return Redaction.REDACTED


class CosmosBreakerStore:
    """Circuit-breaker documents in a Cosmos DB container (``breakers``, partition key ``/id``): the
    :class:`~orderflow.breaker.BreakerStore` port. A container of its own, so that no query over the state
    records ever meets a breaker document."""

    def __init__(self, container: ContainerProxy, *, operation_timeout_s: float | None = None) -> None:
        self._container = _CosmosContainer(
            container, "circuit breaker", operation_timeout_s=operation_timeout_s
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(container={self._container.container.id!r})"

    def find(self, dependency: str) -> Versioned[BreakerDoc] | None:
        """The dependency's document, or None.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        try:
            doc = self._container.read(dependency)
        except NotFound:
            return None
        return Versioned(BreakerDoc.from_stored(doc), str(doc["_etag"]))

    def create(self, doc: BreakerDoc) -> Versioned[BreakerDoc]:
        """Insert a document.

        Raises:
            AlreadyExists: one exists (409).
        """
        stored = self._container.create(doc.to_json_dict())
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def replace(self, doc: BreakerDoc, *, etag: str) -> Versioned[BreakerDoc]:
        """Replace a document only if its ETag is still ``etag`` (If-Match).

        Raises:
            ConcurrencyConflict: the ETag differs (412).
        """
        stored = self._container.replace(doc.to_json_dict(), etag)
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def clock_probe(self, host_id: str) -> datetime | None:
        """Write this host's clock-probe document (``clock-probe:{host_id}``, read by no one) and return the
        store's stamp of the write (UTC, whole seconds): :data:`orderflow.store_clock.Probe`. The
        container shares the state store's account, so its stamps are the state store's clock.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        return stored_at(self._container.upsert({"id": f"clock-probe:{host_id}", "hostId": host_id}))


def alert_query_sql(query: AlertQuery, day: str) -> tuple[str, Parameters]:
    """The parameterised Cosmos SQL of one day's partition of an :class:`AlertQuery`, newest first.

    A single-partition ORDER BY is served from the index and resumes from its continuation token (a
    cross-partition one would not: :func:`state_query_sql`), which is why documents are partitioned by day.
    """
    conditions = ["c.day = @day"]
    params: Parameters = [{"name": "@day", "value": day}]
    if query.kind is not None:
        conditions.append("c.kind = @kind")
        params.append({"name": "@kind", "value": query.kind})
    for n, excluded in enumerate(query.exclude_kinds):
        conditions.append(f"c.kind != @excludeKind{n}")
        params.append({"name": f"@excludeKind{n}", "value": excluded})
    if query.since is not None:
        conditions.append("(IS_STRING(c.at) AND c.at >= @since)")
        params.append({"name": "@since", "value": format_utc(query.since)})
    return f"SELECT * FROM c WHERE {' AND '.join(conditions)} ORDER BY c.at DESC", params


def replay_query_sql(
    queue: str, *, dead_letter_id: str | None, replay_message_id: str | None
) -> tuple[str, Parameters]:
    """The parameterised Cosmos SQL of a lookup of replay records (across the day partitions).

    Raises:
        ValueError: not exactly one of ``dead_letter_id`` and ``replay_message_id``.
    """
    field, value = replay_filter(dead_letter_id=dead_letter_id, replay_message_id=replay_message_id)
    sql = f"SELECT * FROM c WHERE c.kind = @kind AND c.queue = @queue AND c.{field} = @value"
    params: Parameters = [
        {"name": "@kind", "value": REPLAY_KIND},
        {"name": "@queue", "value": queue},
        {"name": "@value", "value": value},
    ]
    return sql, params


class CosmosAlertStore:
    """Alerts and sweep documents in a Cosmos DB container (``alerts``, partition key ``/day``, a default
    time-to-live): the :class:`~orderflow.stores.base.AlertStore` port.

    A listing reads one day's partition after the other, from tomorrow (a host's clock may run ahead)
    back to ``since`` or the time-to-live's horizon; its token names the day and that day's position.
    """

    def __init__(self, container: ContainerProxy, *, operation_timeout_s: float | None = None) -> None:
        self._container = _CosmosContainer(container, "alert", operation_timeout_s=operation_timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(container={self._container.container.id!r})"

    def add(self, doc: AlertDoc | SweepDoc) -> None:
        """Insert a document.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        self._container.create(doc.to_json_dict())

    def _days(self, query: AlertQuery) -> list[str]:
        """The partitions to read, newest first."""
        today = datetime.now(UTC)
        horizon = today - timedelta(seconds=ALERT_TTL_S)
        oldest = max(horizon, query.since) if query.since is not None else horizon
        days, day = [], today + timedelta(days=1)
        while day_of(day) >= day_of(oldest):
            days.append(day_of(day))
            day -= timedelta(days=1)
        return days

    def list_documents(
        self, query: AlertQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[dict[str, Any]]:
        """One page of matching documents, newest ``at`` first, from one day's partition at most.

        Raises:
            InvalidContinuation: the token is garbled or another query's.
            ValueError: ``max_item_count`` is less than 1.
            TransientError: Cosmos DB is unavailable.
        """
        if max_item_count < 1:
            raise ValueError("max_item_count must be at least 1")
        days = self._days(query)
        fingerprint = hashlib.sha256(json.dumps(alert_query_sql(query, "")).encode()).hexdigest()[:16]
        day, inner = (days[0] if days else ""), None
        if continuation is not None:
            try:
                position = json.loads(tokens.decode(_TOKEN_PREFIX, continuation, fingerprint))
                day, inner = str(position["d"]), position["t"]
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidContinuation("malformed continuation token") from exc
        # A since after tomorrow (the newest partition read) leaves no day to read: the loop below
        # then reads nothing and the answer is the empty last page.
        for index in range(len(days)):
            if days[index] > day:
                continue
            sql, params = alert_query_sql(query, days[index])
            docs, token = self._container.query_page(
                sql, params, max_item_count=max_item_count, continuation=inner, partition_key=days[index]
            )
            inner = None
            following = token is not None or index + 1 < len(days)
            if docs or token is not None:
                after = {"d": days[index], "t": token}
                if token is None and index + 1 < len(days):
                    after["d"] = days[index + 1]
                wrapped = json.dumps(after, separators=(",", ":"))
                return Page(
                    [_system_free(doc) for doc in docs],
                    tokens.encode(_TOKEN_PREFIX, fingerprint, wrapped) if following else None,
                )
        return Page([], None)

    def get_alert(self, alert_id: str, *, day: str) -> Versioned[AlertDoc] | None:
        """The alert ``alert_id``: a point read in ``day``'s partition; None if absent.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        doc = self._read_or_none(alert_id, day)
        return None if doc is None else Versioned(AlertDoc.from_stored(doc), str(doc["_etag"]))

    def put_alert(self, doc: AlertDoc, *, etag: str | None) -> None:
        """Create the alert (``etag`` None) or replace it If-Match ``etag``.

        Raises:
            AlreadyExists: ``etag`` None and it exists (409). ConcurrencyConflict: 412.
            TransientError: Cosmos DB is unavailable.
        """
        self._create_or_replace(doc.to_json_dict(), etag)

    def get_tally(self, minute: datetime) -> Versioned[SweepTallyDoc] | None:
        """The tally of ``minute``'s minute: a point read in its day's partition; None if absent.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        doc = self._read_or_none(tally_id(minute), day_of(minute))
        return None if doc is None else Versioned(SweepTallyDoc.from_stored(doc), str(doc["_etag"]))

    def _read_or_none(self, doc_id: str, day: str) -> dict[str, Any] | None:
        try:
            return self._container.read(doc_id, partition_key=day)
        except NotFound:
            return None

    def _create_or_replace(self, body: dict[str, Any], etag: str | None) -> None:
        """Create ``body`` (``etag`` None: 409 if it exists) or replace it If-Match ``etag`` (412)."""
        if etag is None:
            self._container.create(body)
        else:
            self._container.replace(body, etag)

    def put_tally(self, doc: SweepTallyDoc, *, etag: str | None) -> None:
        """Create the tally (``etag`` None) or replace it If-Match ``etag``.

        Raises:
            AlreadyExists: ``etag`` None and it exists (409). ConcurrencyConflict: 412.
            TransientError: Cosmos DB is unavailable.
        """
        self._create_or_replace(doc.to_json_dict(), etag)

    def put_replay(self, doc: ReplayDoc) -> None:
        """Write the record of a replay (an upsert: a replay done again on the same day writes over it).

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        self._container.upsert(doc.to_json_dict())

    def find_replays(
        self, queue: str, *, dead_letter_id: str | None = None, replay_message_id: str | None = None
    ) -> list[ReplayDoc]:
        """The replay records of ``queue`` matching the one given, newest first: one query across the
        day partitions, read to its end within :data:`REPLAY_QUERY_PAGES` pages.

        Raises:
            ValueError: not exactly one of ``dead_letter_id`` and ``replay_message_id``.
            TransientError: Cosmos DB is unavailable, or the query kept paging past the bound.
        """
        sql, params = replay_query_sql(
            queue, dead_letter_id=dead_letter_id, replay_message_id=replay_message_id
        )
        found: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(REPLAY_QUERY_PAGES):
            docs, token = self._container.query_page(sql, params, max_item_count=100, continuation=token)
            found += docs
            if token is None:
                found.sort(key=lambda doc: str(doc.get("at")), reverse=True)
                return [ReplayDoc.from_stored(_system_free(doc)) for doc in found]
        raise TransientError(f"the replay records of {queue} kept paging past {REPLAY_QUERY_PAGES} pages")


REPLAY_QUERY_PAGES = 10
"""Most pages one lookup of replay records reads (a few documents match; empty pages may carry tokens)."""

BREAKER_PARTITION_KEY_PATH = "/id"
"""Partition key path of the breakers container: a document per dependency, read by its id."""


@dataclass
class CosmosStores:
    """Both Cosmos DB stores over one client; close it (or use ``with``) when done.

    Attributes:
        client: The SDK client, shared by both stores.
        database: The database holding both containers.
        state: The state store (``orderstate`` container by default).
        orders: The order store (``orders`` container by default).
        breakers: The circuit breakers' documents (``breakers`` container by default).
        alerts: The alerts and sweep documents (``alerts`` container by default).
    """

    client: CosmosClient
    database: DatabaseProxy
    state: CosmosStateStore
    orders: CosmosOrderStore
    breakers: CosmosBreakerStore
    alerts: CosmosAlertStore

    @classmethod
    def connect(
        cls,
        endpoint: str,
        *,
        key: str | None = None,
        credential: TokenCredential | None = None,
        database: str = "orderflow",
        verify_tls: bool = True,
        state_container: str = "orderstate",
        orders_container: str = "orders",
        breakers_container: str = "breakers",
        history_container: str = HISTORY_CONTAINER,
        alerts_container: str = ALERTS_CONTAINER,
        connection_timeout: float | None = None,
        read_timeout: float | None = None,
        operation_timeout: float | None = None,
        create_if_missing: bool | None = None,
        transport: HttpTransport[HttpRequest, HttpResponse] | None = None,
    ) -> CosmosStores:
        """Connect to a Cosmos DB account and open (by default with a key: create) both containers.

        Args:
            endpoint: Account endpoint, ``https://...``.
            key: Account key (local emulator). Exactly one of ``key`` and ``credential`` is required.
            credential: An Entra ID token credential (``DefaultAzureCredential`` or any
                ``TokenCredential``) for Azure.
            database: Database id.
            verify_tls: Verify the server certificate; False only for the local emulator's
                self-signed certificate.
            state_container: Container id of the state records.
            orders_container: Container id of the order documents.
            breakers_container: Container id of the circuit breakers' documents (partition key ``/id``).
            history_container: Container id of the timeline entries moved out of state records.
            alerts_container: Container id of the alerts and sweep documents (partition key ``/day``,
                default time-to-live :data:`orderflow.alerts.ALERT_TTL_S`).
            connection_timeout: Seconds to wait for a connection (SDK default when None).
            read_timeout: Seconds to wait for an answer on an open connection (SDK default, 65 s, when
                None). Without it a hung (or SIGSTOPped) server holds a point read for over a minute;
                with 2 s the SDK gives up, after its own retries, in about 10 s (measured locally).
            operation_timeout: Seconds one operation may take in all, the SDK's retries included
                (``STORE_OPERATION_TIMEOUT_S``); then it raises :class:`TransientError`. None: no bound
                beyond the two above.
            create_if_missing: Create the database and containers (partition key ``/orderId``) if
                absent. Defaults to True with a key and False with a token credential, because Cosmos
                DB's data-plane RBAC cannot create databases or containers (infrastructure does).
            transport: The HTTP transport under the SDK's pipeline (the local host passes a lean one for
                a loopback emulator, :mod:`devhost.http_transport`); None: azure-core's default.

        Returns:
            The connected stores.

        Raises:
            ValueError: not exactly one of ``key`` and ``credential`` was given.
            TransientError: the account could not be reached.
            PermanentError: the account refused (for example 401/403).
        """
        if (key is None) == (credential is None):
            raise ValueError("pass exactly one of key= and credential=")
        options: dict[str, Any] = {}
        if not verify_tls:
            options["connection_verify"] = False
        if connection_timeout is not None:
            options["connection_timeout"] = connection_timeout
        if read_timeout is not None:
            options["read_timeout"] = read_timeout
        if transport is not None:
            options["transport"] = transport
        if create_if_missing is None:
            create_if_missing = key is not None
        auth: str | TokenCredential
        if key is not None:
            auth = key
        else:
            assert credential is not None  # checked above
            auth = credential
        with _translated("Cosmos DB account", endpoint):
            client = CosmosClient(endpoint, credential=auth, **options)
            try:
                if create_if_missing:
                    db = client.create_database_if_not_exists(id=database)
                    pk = PartitionKey(path=PARTITION_KEY_PATH)
                    state = db.create_container_if_not_exists(id=state_container, partition_key=pk)
                    orders = db.create_container_if_not_exists(id=orders_container, partition_key=pk)
                    breakers = db.create_container_if_not_exists(
                        id=breakers_container, partition_key=PartitionKey(path=BREAKER_PARTITION_KEY_PATH)
                    )
                    history = db.create_container_if_not_exists(id=history_container, partition_key=pk)
                    alerts = db.create_container_if_not_exists(
                        id=alerts_container,
                        partition_key=PartitionKey(path=ALERTS_PARTITION_KEY_PATH),
                        default_ttl=ALERT_TTL_S,
                    )
                else:
                    db = client.get_database_client(database)
                    state = db.get_container_client(state_container)
                    orders = db.get_container_client(orders_container)
                    breakers = db.get_container_client(breakers_container)
                    history = db.get_container_client(history_container)
                    alerts = db.get_container_client(alerts_container)
            except BaseException:
                client.close()
                raise
        logger.info("connected to Cosmos DB database %s at %s", database, endpoint)
        return cls(
            client,
            db,
            CosmosStateStore(state, history=history, operation_timeout_s=operation_timeout),
            CosmosOrderStore(orders, operation_timeout_s=operation_timeout),
            CosmosBreakerStore(breakers, operation_timeout_s=operation_timeout),
            CosmosAlertStore(alerts, operation_timeout_s=operation_timeout),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(database={self.database.id!r})"

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    def __enter__(self) -> CosmosStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""State records in Cosmos DB (the state-store port), with the timeline entries that overflow a record's
window moved to the history container."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from azure.cosmos import ContainerProxy

from orderflow.errors import AlreadyExists, PermanentError
from orderflow.records import StateRecord, TimelineChunk
from orderflow.stores.base import Page, StateQuery, Versioned, as_written, stored_at
from orderflow.stores.cosmos.container import CosmosContainer, check_key, system_free
from orderflow.stores.cosmos.queries import state_query_sql
from orderflow.timeline import split_overflow

HISTORY_SQL = "SELECT * FROM c WHERE c.orderId = @orderId"
"""One order's timeline chunks: a single-partition query (the partition key is the order's)."""


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
        self._container = CosmosContainer(container, "state record", operation_timeout_s=operation_timeout_s)
        self._history = (
            None
            if history is None
            else CosmosContainer(history, "timeline chunk", operation_timeout_s=operation_timeout_s)
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
        check_key(record.id, record.order_id)
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
        check_key(record.id, record.order_id)
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
            (TimelineChunk.model_validate(system_free(d)) for d in docs), key=lambda c: c.first_seq
        )
        return Page(chunks, token)

"""In-memory state records (the state-store port), with the timeline entries that overflow a record's
window moved to a history container."""

from __future__ import annotations

import hashlib
from contextlib import suppress
from typing import Any

from orderflow.clock import Clock
from orderflow.errors import AlreadyExists
from orderflow.records import StateRecord, TimelineChunk
from orderflow.stores import continuation as tokens
from orderflow.stores.base import Page, StateQuery, Versioned, as_written, stored_at
from orderflow.stores.memory.container import TOKEN_PREFIX, MemoryContainer, check_key
from orderflow.stores.memory.queries import matches, query_fingerprint
from orderflow.timeline import split_overflow


class InMemoryStateStore:
    """State records in memory: the :class:`~orderflow.stores.base.StateStore` port, thread-safe.

    Args:
        clock: The store's own clock, which stamps ``_ts`` (whole seconds, as Cosmos DB does); default
            the machine's. A test gives it one of its own to play a store whose clock differs from a host's.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._container = MemoryContainer("state record", indexed_field="processState", clock=clock)
        self._history = MemoryContainer("timeline chunk", indexed_field="orderId")

    def _moved_out(self, record: StateRecord) -> StateRecord:
        """``record`` as written: its timeline past the window appended to the history first."""
        kept, chunk = split_overflow(record, at=record.updated_at)
        if chunk is not None:
            # An existing chunk holds the same entries, moved by a writer that then lost its race.
            with suppress(AlreadyExists):
                self._history.create(chunk.to_json_dict())
        return kept

    def _select(self, query: StateQuery, after_id: str | None, limit: int | None) -> list[dict[str, Any]]:
        among = [str(state) for state in query.process_states] if query.process_states else None
        return self._container.select(lambda doc: matches(query, doc), after_id, limit, among=among)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(records={len(self._container)})"

    @staticmethod
    def _versioned(doc: dict[str, Any]) -> Versioned[StateRecord]:
        return Versioned(StateRecord.from_stored(doc), str(doc["_etag"]), stored_at(doc))

    @staticmethod
    def _stored_form(kept: StateRecord) -> dict[str, Any]:
        """``kept``'s stored form, after checking that a read of it gives ``kept`` back, types included.

        The Cosmos DB store answers a write with the record it was handed, not a parse of what it
        stored (:func:`~orderflow.stores.base.as_written`): this check makes every test on this store a
        test that the shortcut equals a read.

        Raises:
            RuntimeError: the record differs from its stored form (a field set to a value of the wrong
                type, which only a read would have coerced); nothing is written.
        """
        doc = kept.to_json_dict()
        read = StateRecord.from_stored(doc)
        if repr(read.model_dump()) != repr(kept.model_dump()):
            raise RuntimeError(
                f"{kept.order_id}: the record written is not what a read returns:\n"
                f"written {kept.model_dump()!r}\nread    {read.model_dump()!r}"
            )
        return doc

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        """Insert a new record.

        Returns:
            The record as stored (``record`` itself unless part of its timeline moved to history), with
            its first ETag.

        Raises:
            AlreadyExists: a record with this id exists; the stored one is left untouched.
            ValueError: ``record.id`` differs from ``record.order_id``.
        """
        check_key(record.id, record.order_id)
        kept = self._moved_out(record)
        return as_written(kept, self._container.create(self._stored_form(kept)))

    def get(self, order_id: str) -> Versioned[StateRecord]:
        """Read a record by order id.

        Raises:
            NotFound: no such record.
        """
        return self._versioned(self._container.read(order_id))

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        """Replace a record only if its stored ETag is still ``etag``.

        Returns:
            The record as written (``record`` itself unless part of its timeline moved to history), with
            its new ETag.

        Raises:
            ConcurrencyConflict: the stored ETag differs; nothing was written.
            NotFound: the record does not exist.
            ValueError: ``record.id`` differs from ``record.order_id``.
        """
        check_key(record.id, record.order_id)
        kept = self._moved_out(record)
        return as_written(kept, self._container.replace(self._stored_form(kept), etag))

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        """Read one page of records matching ``query``, in id order.

        Records created while a scan is in progress appear in a later page if their id sorts after
        the last one returned.

        Args:
            query: The filter.
            max_item_count: Largest page size (at least 1).
            continuation: The token of the previous page of the same query, or None to start.

        Returns:
            The page; ``continuation`` is None when no further record matches.

        Raises:
            InvalidContinuation: the token is malformed or belongs to another query.
            ValueError: ``max_item_count`` is less than 1.
        """
        if max_item_count < 1:
            raise ValueError("max_item_count must be at least 1")
        fingerprint = query_fingerprint(query)
        after_id = (
            tokens.decode(TOKEN_PREFIX, continuation, fingerprint) if continuation is not None else None
        )
        found = self._select(query, after_id, max_item_count + 1)
        items = found[:max_item_count]
        token = (
            tokens.encode(TOKEN_PREFIX, fingerprint, str(items[-1]["id"]))
            if len(found) > max_item_count
            else None
        )
        return Page([self._versioned(doc) for doc in items], token)

    def count(self, query: StateQuery) -> int:
        """Number of records matching ``query``."""
        return len(self._select(query, None, None))

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        """One page of the order's timeline chunks, oldest first (ids sort by their zero-padded seqs).

        Raises:
            InvalidContinuation: the token is malformed or belongs to another order.
            ValueError: ``max_item_count`` is less than 1.
        """
        if max_item_count < 1:
            raise ValueError("max_item_count must be at least 1")
        fingerprint = hashlib.sha256(f"history:{order_id}".encode()).hexdigest()[:16]
        after_id = (
            tokens.decode(TOKEN_PREFIX, continuation, fingerprint) if continuation is not None else None
        )
        found = self._history.select(
            lambda doc: doc.get("orderId") == order_id, after_id, max_item_count + 1, among=[order_id]
        )
        items = found[:max_item_count]
        token = (
            tokens.encode(TOKEN_PREFIX, fingerprint, str(items[-1]["id"]))
            if len(found) > max_item_count
            else None
        )
        chunks = [
            TimelineChunk.model_validate({k: v for k, v in d.items() if not k.startswith("_")}) for d in items
        ]
        return Page(chunks, token)

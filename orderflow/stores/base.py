"""The state-store and order-store ports.

Both stores are separate resources with no shared transaction (docs/design.md §2). The state store offers
exactly the primitives the concurrency protocol needs (docs/design.md §3): create (409 → AlreadyExists),
point read, conditional replace on an ETag (412 → ConcurrencyConflict) and paged queries with
continuation tokens. There is no unconditional write. The order store creates and reads documents, and
redacts a finished order's once its retention period is over (docs/data.md).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from orderflow.alerts import AlertDoc, ReplayDoc, SweepDoc, SweepTallyDoc
from orderflow.errors import AlreadyExists, ConcurrencyConflict
from orderflow.records import OrderDocument, ProcessState, StateRecord, TimelineChunk

T = TypeVar("T")


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """An item with the ETag it was read or written with (opaque, compare for equality only).

    ``stored_at`` is the store's own time of the item's last write (Cosmos DB's ``_ts``: UTC, whole
    seconds, from the store's clock, not the writer's), or None when the store gives none; it takes no
    part in equality.
    """

    item: T
    etag: str
    stored_at: datetime | None = field(default=None, compare=False)


def stored_at(doc: Mapping[str, Any]) -> datetime | None:
    """The store's write time of a stored document: its ``_ts`` (epoch seconds) as a UTC datetime, or None
    when it has none."""
    ts = doc.get("_ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    return datetime.fromtimestamp(ts, UTC)


def as_written(item: T, answer: Mapping[str, Any]) -> Versioned[T]:
    """``item`` with the ETag and write time (``_etag``, ``_ts``) of ``answer``, the store's answer to
    a create or replace of ``item``'s stored form.

    A store keeps a written document as it was sent and only adds its system properties, so the answer
    is not validated into a second model (docs/benchmarks.md). The item is ``item`` itself, not a copy:
    a writer hands it over and changes only copies of it afterwards (:meth:`orderflow.records.Model.copied`).
    """
    return Versioned(item, str(answer["_etag"]), stored_at(answer))


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a query. ``continuation`` is None only when there is nothing more to read."""

    items: list[T]
    continuation: str | None


@dataclass(frozen=True)
class StateQuery:
    """A filter over state records; every condition given must hold (AND).

    Attributes:
        process_states: ``processState`` must be one of these.
        complete_by_before: ``completeBy`` is set and earlier than this (UTC).
        complete_by_after: ``completeBy`` is set and not earlier than this (UTC): bounds a sweep window.
        unlocked: ``lockedBy`` is null.
        ready_at: ``nextAttemptAt`` is null or not later than this (UTC).
        reply_pending: ``pendingReply`` is set.
        updated_before: ``updatedAt`` is earlier than this (UTC).
        purge_version_below: ``dataPurgeVersion`` is missing, null or less than this: the retention purge
            of that version has not run on the record (:data:`orderflow.records.DATA_PURGE_VERSION`).
        client_id: ``clientId`` equals this (the registered client that submitted the order).
        updated_after: ``updatedAt`` is not earlier than this (UTC).
        workflow_version: ``workflowVersion`` equals this.
        not_suspended: ``suspendedAt`` is missing or null: no operator suspended the order.
    """

    process_states: Sequence[ProcessState] = field(default_factory=tuple)
    complete_by_before: datetime | None = None
    complete_by_after: datetime | None = None
    unlocked: bool = False
    ready_at: datetime | None = None
    reply_pending: bool = False
    updated_before: datetime | None = None
    purge_version_below: int | None = None
    client_id: str | None = None
    updated_after: datetime | None = None
    workflow_version: str | None = None
    not_suspended: bool = False


class StateStore(Protocol):
    """Scheduler state records, one per order, every write conditional.

    Implementations: :class:`orderflow.stores.cosmos.CosmosStateStore`,
    :class:`orderflow.stores.memory.InMemoryStateStore`.
    """

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        """Insert a new record (its timeline past the window moves to history first, as for
        :meth:`replace`).

        Returns:
            The record as stored, with its first ETag: ``record`` itself, not a copy, unless part of its
            timeline moved to history (the caller changes only copies of it afterwards).

        Raises:
            AlreadyExists: a record with this id exists (HTTP 409).
        """
        ...

    def get(self, order_id: str) -> Versioned[StateRecord]:
        """Point-read a record by order id.

        Raises:
            NotFound: no such record.
        """
        ...

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        """Replace a record only if its current ETag is ``etag`` (If-Match).

        A record whose ``timeline`` is longer than :data:`orderflow.timeline.TIMELINE_WINDOW` is written
        with only its newest entries; the older ones are appended to the order's history first
        (:func:`orderflow.timeline.split_overflow`; an existing chunk of the same entries is kept).

        Returns:
            The record as written, with its new ETag: ``record`` itself, not a copy, unless part of its
            timeline moved to history (the caller changes only copies of it afterwards).

        Raises:
            ConcurrencyConflict: the stored ETag differs (HTTP 412): re-read and decide again.
            NotFound: the record does not exist.
        """
        ...

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        """Read one page of records matching ``query``.

        Args:
            query: The filter.
            max_item_count: Largest page size.
            continuation: The token of the previous page, or None for the first page.

        Raises:
            InvalidContinuation: the token is not (or no longer) accepted: restart the scan.
        """
        ...

    def count(self, query: StateQuery) -> int:
        """Number of records matching ``query`` (a server-side aggregate, not a client-side scan)."""
        ...

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        """One page of the timeline entries moved out of ``order_id``'s record, oldest chunk first.

        Raises:
            InvalidContinuation: the token is not (or no longer) accepted.
        """
        ...


class Redaction(StrEnum):
    """What :meth:`OrderStore.redact` did."""

    REDACTED = "redacted"
    """This call replaced the document's customer and payment data."""
    ALREADY_REDACTED = "already_redacted"
    """The document was redacted before; nothing was written."""


class OrderStore(Protocol):
    """Order documents, one per order id: immutable, except that a finished order's is redacted once.

    Caches of documents (``orderflow.dependencies.OrderCache``) stay correct: only documents of orders
    in a terminal state are redacted, and no role uses a terminal order's document for anything but its
    ``contentHash``, which redaction keeps (docs/data.md).
    """

    def create(self, document: OrderDocument) -> None:
        """Insert a new order document.

        Raises:
            AlreadyExists: an order with this id exists (HTTP 409); the caller compares content hashes.
        """
        ...

    def get(self, order_id: str) -> OrderDocument:
        """Point-read an order document.

        Raises:
            NotFound: no such order.
        """
        ...

    def redact(self, order_id: str, *, at: datetime) -> Redaction:
        """Replace the document's customer and payment data with redaction markers, once.

        Reads the document and, unless it is redacted already, replaces it with
        :meth:`orderflow.records.OrderDocument.redacted` on the ETag it read (If-Match). Only for orders
        in a terminal state whose retention period is over: the caller decides that.

        Args:
            order_id: The order.
            at: The time of the redaction (UTC), kept as ``redactedAt``.

        Returns:
            :attr:`Redaction.REDACTED`, or :attr:`Redaction.ALREADY_REDACTED` (nothing written).

        Raises:
            NotFound: no such order.
            ConcurrencyConflict: the document changed between the read and the write: only a redaction
                writes a document, so another one won and the document is redacted.
        """
        ...


@dataclass(frozen=True)
class AlertQuery:
    """A filter over the ``alerts`` container; every condition given must hold.

    Attributes:
        kind: ``kind`` equals this (an alert kind, or :data:`orderflow.alerts.SWEEP_KIND` for sweeps).
        exclude_kinds: ``kind`` is none of these (the alert list leaves the sweep documents and tallies
            out: :data:`orderflow.alerts.NOT_ALERTS`).
        since: ``at`` is not earlier than this (UTC).
    """

    kind: str | None = None
    exclude_kinds: tuple[str, ...] = ()
    since: datetime | None = None


class ReplayRecords(Protocol):
    """The records of dead-letter replays (:class:`~orderflow.alerts.ReplayDoc`, in the ``alerts``
    container): written by a replay once its message was re-sent, read by a later replay of the same dead
    letter and by the intake of the re-sent message (:mod:`orderflow.replays`)."""

    def put_replay(self, doc: ReplayDoc) -> None:
        """Write the record of a replay: a new one, or over the record of an earlier replay of the same
        dead letter on the same day (a replay whose dead letter outlived it is done again).

        Raises:
            TransientError: the store is unavailable.
        """
        ...

    def find_replays(
        self, queue: str, *, dead_letter_id: str | None = None, replay_message_id: str | None = None
    ) -> list[ReplayDoc]:
        """The live records of replays of dead letters of ``queue`` with the given dead letter id, or
        re-sent under the given message id (exactly one of the two), newest ``at`` first. One query across
        the days the records are kept; few documents match.

        Raises:
            ValueError: not exactly one of ``dead_letter_id`` and ``replay_message_id``.
            TransientError: the store is unavailable (or kept paging past its bound).
        """
        ...


class AlertStore(ReplayRecords, Protocol):
    """Operator alerts and supervisor sweep documents (the ``alerts`` container): created, listed newest
    first, expired by the store (time-to-live). Only a counted alert and a sweep tally are replaced, and
    only If-Match the ETag they were read with; a replay record is written over (:class:`ReplayRecords`).

    Implementations: :class:`orderflow.stores.cosmos.CosmosAlertStore`,
    :class:`orderflow.stores.memory.InMemoryAlertStore`.
    """

    def add(self, doc: AlertDoc | SweepDoc) -> None:
        """Insert a document (its id is fresh).

        Raises:
            TransientError: the store is unavailable.
        """
        ...

    def list_documents(
        self, query: AlertQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[dict[str, Any]]:
        """One page of the matching documents (stored JSON, camelCase, no system properties), newest
        ``at`` first. A page may hold fewer items than asked, even none, and still carry a token.

        Raises:
            InvalidContinuation: the token is not this query's (or no longer accepted).
            ValueError: ``max_item_count`` is less than 1.
            TransientError: the store is unavailable.
        """
        ...

    def get_alert(self, alert_id: str, *, day: str) -> Versioned[AlertDoc] | None:
        """The alert ``alert_id`` of ``day``'s partition (``YYYY-MM-DD``): one point read; None if absent
        (or expired).

        Raises:
            TransientError: the store is unavailable.
        """
        ...

    def put_alert(self, doc: AlertDoc, *, etag: str | None) -> None:
        """Create a counted alert (``etag`` None) or replace it if its ETag is still ``etag`` (If-Match).

        Raises:
            AlreadyExists: ``etag`` None and the alert exists (409).
            ConcurrencyConflict: the ETag differs (412).
            TransientError: the store is unavailable.
        """
        ...

    def get_tally(self, minute: datetime) -> Versioned[SweepTallyDoc] | None:
        """The sweep tally of ``minute``'s UTC minute (one point read in its day's partition), or None.

        Raises:
            TransientError: the store is unavailable.
        """
        ...

    def put_tally(self, doc: SweepTallyDoc, *, etag: str | None) -> None:
        """Create the tally (``etag`` None) or replace it if its ETag is still ``etag`` (If-Match).

        Raises:
            AlreadyExists: ``etag`` None and the tally exists (409).
            ConcurrencyConflict: the ETag differs (412).
            TransientError: the store is unavailable.
        """
        ...


def merge_conditionally(
    read: Callable[[], Versioned[T] | None],
    write: Callable[[T, str | None], None],
    merge: Callable[[T | None], T],
    *,
    attempts: int,
    pause_s: float = 0.0,
    what: str,
) -> T:
    """Read a document, merge into it, write it back conditionally (``write(doc, None)`` creates it,
    ``write(doc, etag)`` replaces it If-Match the ETag read); on a 409 or 412 read again.

    Args:
        read: The document with its ETag, or None when absent.
        write: Creates (ETag None) or replaces the merged document.
        merge: The document to write, from the one read (None when absent).
        attempts: Tries at most.
        pause_s: Seconds of jitter, times the try's number, before reading again (0: none), so writers
            that met once do not meet again in lockstep.
        what: The document, for the error.

    Returns:
        The document as written.

    Raises:
        ConcurrencyConflict: it kept changing for ``attempts`` tries.
        TransientError: the store is unavailable.
    """
    for attempt in range(1, attempts + 1):
        found = read()
        merged = merge(None if found is None else found.item)
        try:
            write(merged, None if found is None else found.etag)
        except (AlreadyExists, ConcurrencyConflict):
            if pause_s:
                time.sleep(random.uniform(0, pause_s * attempt))
            continue
        return merged
    raise ConcurrencyConflict(f"{what} kept changing: {attempts} tries")

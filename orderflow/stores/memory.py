"""In-memory state and order stores with the same semantics as the Cosmos DB adapters.

They serve fast unit tests and single-process demos. The contract suite
(``tests/integration/test_store_contract.py``) runs the same tests against these and against
:mod:`orderflow.stores.cosmos`, so anything a role relies on behaves identically in both:

- documents are kept as JSON text in their stored (camelCase) form, so a caller can never mutate the
  store through a model it passed in or got back, and what round-trips is exactly what Cosmos keeps;
- every write gets a new opaque, quoted ETag; a replace applies only if the caller's ETag is current;
- queries evaluate :class:`~orderflow.stores.base.StateQuery` on the stored JSON with Cosmos SQL's
  semantics (a missing field counts as null; times compare as fixed-width strings), return items in
  id order, and page with opaque continuation tokens bound to the query that produced them.

One lock guards each store; it is held only to copy JSON text in or out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

from orderflow.alerts import (
    ALERT_TTL_S,
    REPLAY_KIND,
    AlertDoc,
    ReplayDoc,
    SweepDoc,
    SweepTallyDoc,
    replay_filter,
    tally_id,
)
from orderflow.breaker import BreakerDoc
from orderflow.clock import Clock
from orderflow.errors import AlreadyExists, ConcurrencyConflict, InvalidContinuation, NotFound
from orderflow.records import OrderDocument, StateRecord, TimelineChunk, format_utc, parse_utc
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

_TOKEN_PREFIX = "mem1."


def query_fingerprint(query: StateQuery) -> str:
    """A short stable hash of a query's conditions; binds continuation tokens to their query.

    The order and repetition of ``process_states`` do not matter.
    """
    canonical = {
        "states": sorted({str(state) for state in query.process_states}),
        "before": format_utc(query.complete_by_before) if query.complete_by_before else None,
        "after": format_utc(query.complete_by_after) if query.complete_by_after else None,
        "unlocked": query.unlocked,
        "ready": format_utc(query.ready_at) if query.ready_at else None,
        "reply": query.reply_pending,
        "updated": format_utc(query.updated_before) if query.updated_before else None,
        "purge_below": query.purge_version_below,
        "client": query.client_id,
        "updated_after": format_utc(query.updated_after) if query.updated_after else None,
        "workflow": query.workflow_version,
        "not_suspended": query.not_suspended,
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def matches(query: StateQuery, doc: dict[str, Any]) -> bool:
    """Whether a stored state document satisfies ``query``, with Cosmos SQL semantics.

    Mirrors the SQL that :class:`orderflow.stores.cosmos.CosmosStateStore` sends: a missing field is
    treated like null, and UTC times compare as the fixed-width strings they are stored as (a
    comparison with a non-string is false, as in Cosmos SQL).

    Args:
        query: The filter.
        doc: A stored state record (camelCase JSON).
    """
    if query.process_states and doc.get("processState") not in {str(s) for s in query.process_states}:
        return False
    if query.unlocked and doc.get("lockedBy") is not None:
        return False
    if not _equalities_hold(query, doc):
        return False
    complete_by = doc.get("completeBy")
    if query.complete_by_before is not None and not (
        isinstance(complete_by, str) and complete_by < format_utc(query.complete_by_before)
    ):
        return False
    if query.complete_by_after is not None and not (
        isinstance(complete_by, str) and complete_by >= format_utc(query.complete_by_after)
    ):
        return False
    if query.ready_at is not None:
        next_attempt_at = doc.get("nextAttemptAt")
        if next_attempt_at is not None and not (
            isinstance(next_attempt_at, str) and next_attempt_at <= format_utc(query.ready_at)
        ):
            return False
    if query.reply_pending and doc.get("pendingReply") is None:
        return False
    if query.purge_version_below is not None and not _purge_version_below(
        doc.get("dataPurgeVersion"), query.purge_version_below
    ):
        return False
    updated_at = doc.get("updatedAt")
    if query.updated_after is not None and not (
        isinstance(updated_at, str) and updated_at >= format_utc(query.updated_after)
    ):
        return False
    return query.updated_before is None or (
        isinstance(updated_at, str) and updated_at < format_utc(query.updated_before)
    )


def _equalities_hold(query: StateQuery, doc: dict[str, Any]) -> bool:
    """The query's equality conditions: client, workflow version, not suspended."""
    if query.client_id is not None and doc.get("clientId") != query.client_id:
        return False
    if query.workflow_version is not None and doc.get("workflowVersion") != query.workflow_version:
        return False
    return not (query.not_suspended and doc.get("suspendedAt") is not None)


def _purge_version_below(version: Any, bound: int) -> bool:
    # Cosmos SQL: a missing or null version matches; a non-number compared with a number is false.
    if version is None:
        return True
    return isinstance(version, int | float) and not isinstance(version, bool) and version < bound


def _new_etag() -> str:
    # Quoted like Cosmos DB's; unique across stores so an ETag of one item never matches another.
    return f'"{uuid.uuid4()}"'


class _MemoryContainer:
    """JSON documents keyed by id, with ETags; the shared core of both in-memory stores.

    Args:
        kind: What the documents are, for error messages.
        indexed_field: A top-level field whose values are indexed (as Cosmos DB indexes every path):
            :meth:`select` given ``among`` values looks only at the documents holding one of them,
            so a sweep over a few live records costs the same beside 1k or 100k settled ones.
    """

    def __init__(self, kind: str, *, indexed_field: str | None = None, clock: Clock | None = None) -> None:
        self.kind = kind
        self._clock = clock
        self._lock = threading.Lock()
        self._docs: dict[str, str] = {}
        self._indexed_field = indexed_field
        self._index: dict[Any, set[str]] = {}

    def _reindex(self, item_id: str, before: str | None, after: dict[str, Any]) -> None:
        # Called under the lock with the document's previous text (None when new) and its new content.
        field = self._indexed_field
        if field is None:
            return
        if before is not None:
            old = json.loads(before).get(field)
            if old == after.get(field):
                return
            self._index.get(old, set()).discard(item_id)
        self._index.setdefault(after.get(field), set()).add(item_id)

    def _stamp(self, doc: dict[str, Any]) -> str:
        # System properties as Cosmos adds them; the models drop ``_``-prefixed keys when parsing.
        stored = {k: v for k, v in doc.items() if not k.startswith("_")}
        stored["_etag"] = _new_etag()
        now = self._clock.now().timestamp() if self._clock is not None else time.time()
        stored["_ts"] = int(now)
        return json.dumps(stored)

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        item_id = str(doc["id"])
        text = self._stamp(doc)
        with self._lock:
            if item_id in self._docs:
                raise AlreadyExists(f"{self.kind} {item_id!r} already exists")
            self._docs[item_id] = text
            self._reindex(item_id, None, doc)
        return dict(json.loads(text))

    def upsert(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create ``doc`` or replace the item of its id, whatever its ETag (Cosmos DB's upsert)."""
        item_id = str(doc["id"])
        text = self._stamp(doc)
        with self._lock:
            current = self._docs.get(item_id)
            self._docs[item_id] = text
            self._reindex(item_id, current, doc)
        return dict(json.loads(text))

    def read(self, item_id: str) -> dict[str, Any]:
        with self._lock:
            text = self._docs.get(item_id)
        if text is None:
            raise NotFound(f"{self.kind} {item_id!r} not found")
        return dict(json.loads(text))

    def replace(self, doc: dict[str, Any], etag: str) -> dict[str, Any]:
        item_id = str(doc["id"])
        text = self._stamp(doc)
        with self._lock:
            current = self._docs.get(item_id)
            if current is None:
                raise NotFound(f"{self.kind} {item_id!r} not found")
            if json.loads(current)["_etag"] != etag:
                logger.debug("conditional replace of %s %s lost: ETag changed", self.kind, item_id)
                raise ConcurrencyConflict(f"{self.kind} {item_id!r} changed since it was read (412)")
            self._docs[item_id] = text
            self._reindex(item_id, current, doc)
        return dict(json.loads(text))

    def __len__(self) -> int:
        with self._lock:
            return len(self._docs)

    def select(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        after_id: str | None,
        limit: int | None = None,
        *,
        among: Collection[Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` matching documents with an id greater than ``after_id``, in id order.

        Args:
            among: Values of the indexed field: only documents holding one of them are looked at
                (the predicate must imply it). None: every document.
        """
        with self._lock:
            if among is not None and self._indexed_field is not None:
                ids = set().union(*(self._index.get(value, ()) for value in among))
                snapshot = sorted((item_id, self._docs[item_id]) for item_id in ids)
            else:
                snapshot = sorted(self._docs.items())
        found: list[dict[str, Any]] = []
        for item_id, text in snapshot:
            if after_id is not None and item_id <= after_id:
                continue
            doc = json.loads(text)
            if predicate(doc):
                found.append(doc)
                if limit is not None and len(found) >= limit:
                    break
        return found


def _check_key(item_id: str, order_id: str) -> None:
    # The Cosmos containers are partitioned on /orderId and point reads use the order id for both id
    # and partition key; a record whose id differs could be written but never read back.
    if item_id != order_id:
        raise ValueError(f"id {item_id!r} must equal orderId {order_id!r}")


class InMemoryStateStore:
    """State records in memory: the :class:`~orderflow.stores.base.StateStore` port, thread-safe.

    Args:
        clock: The store's own clock, which stamps ``_ts`` (whole seconds, as Cosmos DB does); default
            the machine's. A test gives it one of its own to play a store whose clock differs from a host's.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._container = _MemoryContainer("state record", indexed_field="processState", clock=clock)
        self._history = _MemoryContainer("timeline chunk", indexed_field="orderId")

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
        _check_key(record.id, record.order_id)
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
        _check_key(record.id, record.order_id)
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
            tokens.decode(_TOKEN_PREFIX, continuation, fingerprint) if continuation is not None else None
        )
        found = self._select(query, after_id, max_item_count + 1)
        items = found[:max_item_count]
        token = (
            tokens.encode(_TOKEN_PREFIX, fingerprint, str(items[-1]["id"]))
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
            tokens.decode(_TOKEN_PREFIX, continuation, fingerprint) if continuation is not None else None
        )
        found = self._history.select(
            lambda doc: doc.get("orderId") == order_id, after_id, max_item_count + 1, among=[order_id]
        )
        items = found[:max_item_count]
        token = (
            tokens.encode(_TOKEN_PREFIX, fingerprint, str(items[-1]["id"]))
            if len(found) > max_item_count
            else None
        )
        chunks = [
            TimelineChunk.model_validate({k: v for k, v in d.items() if not k.startswith("_")}) for d in items
        ]
        return Page(chunks, token)


class InMemoryOrderStore:
    """Order documents in memory: the :class:`~orderflow.stores.base.OrderStore` port."""

    def __init__(self) -> None:
        self._container = _MemoryContainer("order")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(orders={len(self._container)})"

    def create(self, document: OrderDocument) -> None:
        """Insert a new order document.

        Raises:
            AlreadyExists: an order with this id exists; the stored one is left untouched.
            ValueError: ``document.id`` differs from ``document.order_id``.
        """
        _check_key(document.id, document.order_id)
        self._container.create(document.to_json_dict())

    def get(self, order_id: str) -> OrderDocument:
        """Read an order document.

        Raises:
            NotFound: no such order.
        """
        return self._document(self._container.read(order_id))

    @staticmethod
    def _document(doc: dict[str, Any]) -> OrderDocument:
        return OrderDocument.model_validate({k: v for k, v in doc.items() if not k.startswith("_")})

    def redact(self, order_id: str, *, at: datetime) -> Redaction:
        """Replace the document's customer and payment data with redaction markers, once (If-Match).

        Returns:
            ``redacted``, or ``already_redacted`` when nothing needed writing.

        Raises:
            NotFound: no such order.
            ConcurrencyConflict: another redaction wrote between this one's read and write.
        """
        stored = self._container.read(order_id)
        document = self._document(stored)
        if document.is_redacted():
            return Redaction.ALREADY_REDACTED
        self._container.replace(document.redacted(at).to_json_dict(), str(stored["_etag"]))
        return Redaction.REDACTED


class InMemoryBreakerStore:
    """Circuit-breaker documents in memory: the :class:`~orderflow.breaker.BreakerStore` port,
    thread-safe, with the state store's ETag semantics. Hosts that share one instance share breakers.

    Args:
        clock: The store's own clock, which stamps each write's ``_ts`` (default: the machine's).
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._container = _MemoryContainer("circuit breaker", clock=clock)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(breakers={len(self._container)})"

    def find(self, dependency: str) -> Versioned[BreakerDoc] | None:
        """The dependency's document, or None."""
        try:
            doc = self._container.read(dependency)
        except NotFound:
            return None
        return Versioned(BreakerDoc.from_stored(doc), str(doc["_etag"]))

    def create(self, doc: BreakerDoc) -> Versioned[BreakerDoc]:
        """Insert a document.

        Raises:
            AlreadyExists: one exists.
        """
        stored = self._container.create(doc.to_json_dict())
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def replace(self, doc: BreakerDoc, *, etag: str) -> Versioned[BreakerDoc]:
        """Replace a document only if its ETag is still ``etag``.

        Raises:
            ConcurrencyConflict: the ETag differs. NotFound: no such document.
        """
        stored = self._container.replace(doc.to_json_dict(), etag)
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def clock_probe(self, host_id: str) -> datetime | None:
        """Write this host's clock-probe document and return the store's stamp of the write (UTC, whole
        seconds), as :meth:`orderflow.stores.cosmos.CosmosBreakerStore.clock_probe` does."""
        doc = {"id": f"clock-probe:{host_id}", "hostId": host_id}
        try:
            stored = self._container.replace(doc, str(self._container.read(doc["id"])["_etag"]))
        except NotFound:
            stored = self._container.create(doc)
        return stored_at(stored)


def alert_matches(query: AlertQuery, doc: dict[str, Any]) -> bool:
    """Whether a stored alerts-container document satisfies ``query`` (Cosmos SQL semantics, as
    :func:`orderflow.stores.cosmos.alert_query_sql`)."""
    kind = doc.get("kind")
    if query.kind is not None and kind != query.kind:
        return False
    if kind in query.exclude_kinds:
        return False
    at = doc.get("at")
    return query.since is None or (isinstance(at, str) and at >= format_utc(query.since))


class InMemoryAlertStore:
    """Alerts and sweep documents in memory: the :class:`~orderflow.stores.base.AlertStore` port,
    thread-safe. A document expires after its ``ttl`` (else :data:`~orderflow.alerts.ALERT_TTL_S`)
    seconds past its ``at``, as Cosmos DB's time-to-live does; expired ones are dropped on each add.

    Args:
        clock: The store's clock, for expiry; default the machine's.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._container = _MemoryContainer("alert", clock=clock)
        self._clock = clock

    def __repr__(self) -> str:
        return f"{type(self).__name__}(documents={len(self._container)})"

    def _now(self) -> datetime:
        if self._clock is not None:
            return self._clock.now()
        return datetime.fromtimestamp(time.time(), UTC)

    def _live(self, doc: dict[str, Any], now: str) -> bool:
        ttl = doc.get("ttl", ALERT_TTL_S)
        at = doc.get("at")
        if not isinstance(at, str) or not isinstance(ttl, int):
            return True
        return format_utc(parse_utc(at) + timedelta(seconds=ttl)) > now

    def add(self, doc: AlertDoc | SweepDoc) -> None:
        """Insert a document, dropping the expired ones first.

        Raises:
            AlreadyExists: its id is taken (ids are fresh: never in practice).
        """
        self._drop_expired()
        self._container.create(doc.to_json_dict())

    def _drop_expired(self) -> None:
        now = format_utc(self._now())
        with self._container._lock:
            docs = self._container._docs
            expired = [item_id for item_id, text in docs.items() if not self._live(json.loads(text), now)]
            for item_id in expired:
                del self._container._docs[item_id]

    def list_documents(
        self, query: AlertQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[dict[str, Any]]:
        """One page of matching documents, newest ``at`` first (then by id, descending).

        Raises:
            InvalidContinuation: the token is malformed or belongs to another query.
            ValueError: ``max_item_count`` is less than 1.
        """
        if max_item_count < 1:
            raise ValueError("max_item_count must be at least 1")
        canonical = json.dumps(
            [query.kind, list(query.exclude_kinds), format_utc(query.since) if query.since else None]
        )
        fingerprint = hashlib.sha256(f"alerts:{canonical}".encode()).hexdigest()[:16]
        position = tokens.decode(_TOKEN_PREFIX, continuation, fingerprint) if continuation else "0"
        if not position.isdigit():
            raise InvalidContinuation("malformed continuation token")
        offset = int(position)
        now = format_utc(self._now())
        found = self._container.select(lambda doc: alert_matches(query, doc) and self._live(doc, now), None)
        found.sort(key=lambda doc: (str(doc.get("at")), str(doc["id"])), reverse=True)
        items = found[offset : offset + max_item_count]
        more = len(found) > offset + max_item_count
        token = tokens.encode(_TOKEN_PREFIX, fingerprint, str(offset + max_item_count)) if more else None
        return Page([{k: v for k, v in doc.items() if not k.startswith("_")} for doc in items], token)

    def get_alert(self, alert_id: str, *, day: str) -> Versioned[AlertDoc] | None:
        """The alert ``alert_id`` of ``day``, or None (also once it expired)."""
        try:
            doc = self._container.read(alert_id)
        except NotFound:
            return None
        if doc.get("day") != day or not self._live(doc, format_utc(self._now())):
            return None
        return Versioned(AlertDoc.from_stored(doc), str(doc["_etag"]))

    def put_alert(self, doc: AlertDoc, *, etag: str | None) -> None:
        """Create the alert (``etag`` None) or replace it If-Match ``etag``.

        Raises:
            AlreadyExists: ``etag`` None and it exists. ConcurrencyConflict: the ETag differs.
        """
        self._create_or_replace(doc.to_json_dict(), etag)

    def get_tally(self, minute: datetime) -> Versioned[SweepTallyDoc] | None:
        """The tally of ``minute``'s minute, or None (also once it expired)."""
        try:
            doc = self._container.read(tally_id(minute))
        except NotFound:
            return None
        if not self._live(doc, format_utc(self._now())):
            return None
        return Versioned(SweepTallyDoc.from_stored(doc), str(doc["_etag"]))

    def _create_or_replace(self, body: dict[str, Any], etag: str | None) -> None:
        """Create ``body`` (``etag`` None; the expired dropped first) or replace it If-Match ``etag``."""
        if etag is None:
            self._drop_expired()
            self._container.create(body)
        else:
            self._container.replace(body, etag)

    def put_tally(self, doc: SweepTallyDoc, *, etag: str | None) -> None:
        """Create the tally (``etag`` None) or replace it If-Match ``etag``.

        Raises:
            AlreadyExists: ``etag`` None and it exists. ConcurrencyConflict: the ETag differs.
        """
        self._create_or_replace(doc.to_json_dict(), etag)

    def put_replay(self, doc: ReplayDoc) -> None:
        """Write the record of a replay, over an earlier one of the same id (the expired dropped first)."""
        self._drop_expired()
        self._container.upsert(doc.to_json_dict())

    def find_replays(
        self, queue: str, *, dead_letter_id: str | None = None, replay_message_id: str | None = None
    ) -> list[ReplayDoc]:
        """The live replay records of ``queue`` matching the one given, newest first.

        Raises:
            ValueError: not exactly one of ``dead_letter_id`` and ``replay_message_id``.
        """
        field, value = replay_filter(dead_letter_id=dead_letter_id, replay_message_id=replay_message_id)
        now = format_utc(self._now())
        found = self._container.select(
            lambda doc: (
                (doc.get("kind"), doc.get("queue"), doc.get(field)) == (REPLAY_KIND, queue, value)
                and self._live(doc, now)
            ),
            None,
        )
        found.sort(key=lambda doc: str(doc.get("at")), reverse=True)
        return [ReplayDoc.from_stored(doc) for doc in found]

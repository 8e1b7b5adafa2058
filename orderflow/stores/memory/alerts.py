"""In-memory alerts, sweep documents and tallies, and replay records (the alert-store port), expiring
after the alerts' time-to-live."""

from __future__ import annotations

import hashlib
import json
import time
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
from orderflow.clock import Clock
from orderflow.errors import InvalidContinuation, NotFound
from orderflow.records import format_utc, parse_utc
from orderflow.stores import continuation as tokens
from orderflow.stores.base import AlertQuery, Page, Versioned
from orderflow.stores.memory.container import TOKEN_PREFIX, MemoryContainer
from orderflow.stores.memory.queries import alert_matches


class InMemoryAlertStore:
    """Alerts and sweep documents in memory: the :class:`~orderflow.stores.base.AlertStore` port,
    thread-safe. A document expires after its ``ttl`` (else :data:`~orderflow.alerts.ALERT_TTL_S`)
    seconds past its ``at``, as Cosmos DB's time-to-live does; expired ones are dropped on each add.

    Args:
        clock: The store's clock, for expiry; default the machine's.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._container = MemoryContainer("alert", clock=clock)
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
        position = tokens.decode(TOKEN_PREFIX, continuation, fingerprint) if continuation else "0"
        if not position.isdigit():
            raise InvalidContinuation("malformed continuation token")
        offset = int(position)
        now = format_utc(self._now())
        found = self._container.select(lambda doc: alert_matches(query, doc) and self._live(doc, now), None)
        found.sort(key=lambda doc: (str(doc.get("at")), str(doc["id"])), reverse=True)
        items = found[offset : offset + max_item_count]
        more = len(found) > offset + max_item_count
        token = tokens.encode(TOKEN_PREFIX, fingerprint, str(offset + max_item_count)) if more else None
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

"""Alerts, sweep documents and tallies, and replay records in Cosmos DB (the alert-store port): one
day's partition after the other, newest first."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.cosmos import ContainerProxy

from orderflow.alerts import ALERT_TTL_S, AlertDoc, ReplayDoc, SweepDoc, SweepTallyDoc, day_of, tally_id
from orderflow.errors import InvalidContinuation, NotFound, TransientError
from orderflow.stores import continuation as tokens
from orderflow.stores.base import AlertQuery, Page, Versioned
from orderflow.stores.cosmos.container import TOKEN_PREFIX, CosmosContainer, system_free
from orderflow.stores.cosmos.queries import alert_query_sql, replay_query_sql

REPLAY_QUERY_PAGES = 10
"""Most pages one lookup of replay records reads (a few documents match; empty pages may carry tokens)."""


class CosmosAlertStore:
    """Alerts and sweep documents in a Cosmos DB container (``alerts``, partition key ``/day``, a default
    time-to-live): the :class:`~orderflow.stores.base.AlertStore` port.

    A listing reads one day's partition after the other, from tomorrow (a host's clock may run ahead)
    back to ``since`` or the time-to-live's horizon; its token names the day and that day's position.
    """

    def __init__(self, container: ContainerProxy, *, operation_timeout_s: float | None = None) -> None:
        self._container = CosmosContainer(container, "alert", operation_timeout_s=operation_timeout_s)

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
                position = json.loads(tokens.decode(TOKEN_PREFIX, continuation, fingerprint))
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
                    [system_free(doc) for doc in docs],
                    tokens.encode(TOKEN_PREFIX, fingerprint, wrapped) if following else None,
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
                return [ReplayDoc.from_stored(system_free(doc)) for doc in found]
        raise TransientError(f"the replay records of {queue} kept paging past {REPLAY_QUERY_PAGES} pages")

"""``GET /api/operator/alerts`` and ``GET /api/operator/supervisor``: the stored alerts and the
supervisor's status, read from the alerts store (:mod:`orderflow.alerts`; docs/operator-api.md).

The alerts list filters on ``kind`` and ``since`` and pages newest first; the store reads one day's
partition per page, so a page may come back short: this reads on (a few store pages at most) until it has
an alert or the store has no more. The supervisor's status is its latest sweep documents; a leader is
named only while its newest sweep is fresh (:data:`STALE_AFTER_S`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from operator_api.schemas import AlertAnswer, AlertList, SupervisorStatus, SweepAnswer
from orderflow.alerts import ALERT_KINDS, NOT_ALERTS, SWEEP_KIND, AlertDoc, SweepDoc
from orderflow.errors import InvalidMessage
from orderflow.records import QUERY_TIME_FORMAT, parse_query_time
from orderflow.stores.base import AlertQuery, AlertStore
from orderflow.telemetry import STUCK_ORDERS_STALE_S

ALERT_PARAMETERS = ("kind", "since", "limit", "continuation")
"""The query parameters of the alerts list."""
DEFAULT_LIMIT = 50
MAX_LIMIT = 100
MAX_STORE_PAGES = 20
"""Most store pages one list call reads to find an alert (the store's day partitions: 16 at most)."""

STALE_AFTER_S = STUCK_ORDERS_STALE_S
"""Seconds after which the newest sweep no longer names a leader: as the stuck-orders gauge goes silent."""
SWEEPS_SHOWN = 10
"""Sweeps ``GET /supervisor`` lists by default (``limit``: up to :data:`MAX_SWEEPS`)."""
MAX_SWEEPS = 50
LEADERSHIP = {"lease": "lease", "timer": "timer (singleton)"}
"""How each sweep document's ``leadership`` is reported."""


def _invalid(name: str, detail: str) -> InvalidMessage:
    return InvalidMessage("InvalidValue", f"{name}: {detail}")


def _only(params: Mapping[str, str], names: tuple[str, ...]) -> None:
    unexpected = sorted(set(params) - set(names))
    if unexpected:
        raise InvalidMessage("UnexpectedField", f"unknown query parameter {unexpected[0]!r}")


def _limit(text: str | None, *, default: int, most: int) -> int:
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= most:
        raise _invalid("limit", f"a whole number from 1 to {most}")
    return int(text)


def alert_query(params: Mapping[str, str]) -> tuple[AlertQuery, int, str | None]:
    """The store query, page size and continuation of an alerts list request.

    Args:
        params: ``kind`` (a kind of :data:`orderflow.alerts.ALERT_KINDS`), ``since`` (ISO 8601 with a zone:
            raised at or after it), ``limit`` (1 .. :data:`MAX_LIMIT`), ``continuation``.

    Raises:
        InvalidMessage: ``UnexpectedField`` for another parameter, ``InvalidValue`` for a bad value.
    """
    _only(params, ALERT_PARAMETERS)
    kind = params.get("kind") or None
    if kind is not None and kind not in ALERT_KINDS:
        raise _invalid("kind", "one of " + ", ".join(sorted(ALERT_KINDS)))
    since: datetime | None = None
    if params.get("since"):
        try:
            since = parse_query_time(params["since"])
        except ValueError:
            raise _invalid("since", QUERY_TIME_FORMAT) from None
    limit = _limit(params.get("limit"), default=DEFAULT_LIMIT, most=MAX_LIMIT)
    query = AlertQuery(kind=kind, exclude_kinds=() if kind else NOT_ALERTS, since=since)
    return query, limit, params.get("continuation") or None


def alert_answer(doc: Mapping[str, Any]) -> AlertAnswer:
    """A stored alert as the API answers it."""
    alert = AlertDoc.from_stored(doc)
    return AlertAnswer(
        id=alert.id,
        kind=alert.kind,
        at=alert.at,
        host=alert.host,
        order_id=alert.order_id,
        instance_id=alert.instance_id,
        cause=alert.cause,
        suggested_action=alert.suggested_action,
        details=alert.details,
        count=alert.count,
        first_seen=alert.first_seen,
        last_seen=alert.at,
    )


def list_alerts(store: AlertStore, query: AlertQuery, *, limit: int, continuation: str | None) -> AlertList:
    """One page of alerts, newest first: store pages are read on while they come back empty with a token.

    Raises:
        InvalidContinuation: the token is not this query's.
        TransientError: the store is unavailable.
    """
    token = continuation
    for _ in range(MAX_STORE_PAGES):
        page = store.list_documents(query, max_item_count=limit, continuation=token)
        token = page.continuation
        if page.items or token is None:
            return AlertList(alerts=[alert_answer(doc) for doc in page.items], continuation=token)
    return AlertList(alerts=[], continuation=token)


def _sweep_answer(doc: SweepDoc) -> SweepAnswer:
    return SweepAnswer(
        at=doc.at,
        host=doc.host,
        leadership=LEADERSHIP.get(doc.leadership, doc.leadership),
        scanned=doc.scanned,
        recovered=doc.recovered,
        gave_up=doc.gave_up,
        held=doc.held,
        stuck=doc.stuck,
        duration_s=doc.duration_s,
        complete=doc.complete,
    )


def supervisor_status(store: AlertStore, params: Mapping[str, str], *, now: datetime) -> SupervisorStatus:
    """The supervisor's status from its newest sweep documents.

    Args:
        store: The alerts store.
        params: ``limit``: sweeps to list (1 .. :data:`MAX_SWEEPS`, default :data:`SWEEPS_SHOWN`).
        now: The time freshness is judged at (UTC).

    Raises:
        InvalidMessage: another parameter, or a bad ``limit``.
        TransientError: the store is unavailable.
    """
    _only(params, ("limit",))
    limit = _limit(params.get("limit"), default=SWEEPS_SHOWN, most=MAX_SWEEPS)
    docs: list[SweepDoc] = []
    token: str | None = None
    for _ in range(MAX_STORE_PAGES):
        page = store.list_documents(AlertQuery(kind=SWEEP_KIND), max_item_count=limit, continuation=token)
        docs += [SweepDoc.from_stored(doc) for doc in page.items]
        token = page.continuation
        if docs or token is None:
            break
    sweeps = [_sweep_answer(doc) for doc in docs[:limit]]
    newest = docs[0] if docs else None
    fresh = newest is not None and now - newest.at <= timedelta(seconds=STALE_AFTER_S)
    return SupervisorStatus(
        leadership=None if newest is None else LEADERSHIP.get(newest.leadership, newest.leadership),
        leader=newest.host if fresh and newest is not None else None,
        last_sweep_at=None if newest is None else newest.at,
        stuck_orders=newest.stuck if fresh and newest is not None else None,
        stale_after_s=STALE_AFTER_S,
        sweeps=sweeps,
    )

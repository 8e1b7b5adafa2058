"""What an order keeps in Cosmos DB: the bytes of its documents as the store returns them, before and
after the retention purge, measured on a run's own database (the cost model prices storage by them)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from azure.cosmos import DatabaseProxy

from orderflow.clock import Clock, OffsetClock
from orderflow.settings import Settings
from orderflow.stores.base import OrderStore, StateStore
from orderflow.stores.cosmos.connection import HISTORY_CONTAINER
from supervisor.retention import purge_expired_logs

ORDER_CONTAINERS: Final = ("orders", "orderstate", HISTORY_CONTAINER)
"""The containers that hold an order's documents: its order document, its state record and the timeline
entries moved out of the record (none for a short order)."""


def json_bytes(value: Any) -> int:
    """The UTF-8 bytes of ``value`` as compact JSON (no spaces, characters as they are)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def document_bytes(item: Mapping[str, Any]) -> int:
    """The bytes of a document as compact JSON, its system properties (``_rid``, ``_etag``, ``_ts``...)
    included: what Cosmos DB stores of it as data, its index aside."""
    return json_bytes(item)


def container_bytes(items: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(documents, bytes) of ``items``."""
    documents = total = 0
    for item in items:
        documents += 1
        total += document_bytes(item)
    return documents, total


def stored_by_container(
    database: DatabaseProxy, containers: Iterable[str] = ORDER_CONTAINERS
) -> dict[str, int]:
    """Bytes of every document in each of ``containers`` of ``database`` (read whole: a run's own)."""
    return {
        name: container_bytes(database.get_container_client(name).read_all_items())[1] for name in containers
    }


def bytes_per_order(by_container: Mapping[str, int], orders: int) -> dict[str, float]:
    """``by_container`` divided by ``orders``, with their ``total``.

    Raises:
        ValueError: ``orders`` is not positive.
    """
    if orders <= 0:
        raise ValueError(f"orders must be positive, not {orders}")
    per = {name: round(n / orders, 1) for name, n in by_container.items()}
    return {**per, "total": round(sum(by_container.values()) / orders, 1)}


def purge_all_finished(
    *, states: StateStore, orders: OrderStore, clock: Clock, settings: Settings, most: int
) -> int:
    """Run the supervisor's retention purge as it would run once every finished order's retention period
    is over: on a clock ``COMPENSATION_LOG_RETENTION_S`` (and a minute) ahead of ``clock``. Passes run
    until one purges nothing or ``most`` records are purged.

    Returns:
        The records purged.

    Raises:
        ValueError: the settings' retention period is 0 (the purge is off).
        TransientError: a store is unavailable.
    """
    retention = settings.supervisor.COMPENSATION_LOG_RETENTION_S
    if retention <= 0:
        raise ValueError("COMPENSATION_LOG_RETENTION_S is 0: the purge is off")
    later = OffsetClock(clock, float(retention + 60))
    purged = 0
    while purged < most:
        report = purge_expired_logs(
            states=states, orders=orders, clock=later, supervisor=settings.supervisor, scans=settings.scans
        )
        if report.purged == 0:
            break
        purged += report.purged
    return purged


def stored_bytes_report(
    database: DatabaseProxy,
    *,
    states: StateStore,
    orders: OrderStore,
    clock: Clock,
    settings: Settings,
    processed: int,
) -> dict[str, Any]:
    """An order's stored bytes by container, before the retention purge and after it (which it runs on
    the database's finished orders: call it once the run's orders are done).

    Returns:
        ``{"stored_bytes": {container: bytes per order, "total": ...}, "purged_bytes": {...},
        "purged_orders": n}``.

    Raises:
        ValueError: ``processed`` is not positive, or the purge is off in ``settings``.
        TransientError: a store is unavailable.
    """
    before = stored_by_container(database)
    purged = purge_all_finished(states=states, orders=orders, clock=clock, settings=settings, most=processed)
    after = stored_by_container(database)
    return {
        "stored_bytes": bytes_per_order(before, processed),
        "purged_bytes": bytes_per_order(after, processed),
        "purged_orders": purged,
    }

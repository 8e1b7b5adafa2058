"""One supervisor sweep over a state store holding many settled orders and a few expired ones.

The store grows through the sizes: at each, it holds ``size`` settled (``Processed``) records and
``expired`` ``Processing`` records whose ``completeBy`` passed a minute ago; one
:func:`supervisor.sweep.run_sweep` pass is timed (it finds and re-queues the expired ones), and a second
pass, which finds nothing, times the scan alone. Records read are the items the sweep's queries
returned, counted by :class:`bench.counting.stores.CountingStateStore`.

On cosmosdb-server the records are created through the real azure-cosmos SDK from a thread pool: the
Python SDK's only batch (``execute_item_batch``) is transactional within one partition key value, and
each record is a partition of its own. The SDK's CPU time per request in Python, not the emulator, limits
the rate. The database is dropped afterwards (the emulator keeps everything in memory). The same is done
on the in-memory store for contrast: it indexes ``processState`` (as Cosmos DB indexes every path), so
its sweep looks at the live records only.

What cosmosdb-server can say: how many records the sweep's streamable query returns and how many pages
it takes (the same on Cosmos DB: the query, its filter and its paging are the ones Cosmos DB serves). What
it cannot say: how long the query takes on Cosmos DB. The emulator has no index; it evaluates the filter
against every document of the container for every page, so its time grows with the container. Cosmos DB
indexes every path by default and serves ``processState IN (...) AND completeBy < @cutoff`` from its
range index, so its cost (request units and latency) follows the records returned, not the container.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from bench.counting.stores import CountingStateStore
from bench.stats import below, ratio
from devhost.emulators import LocalEndpoints
from devhost.http_transport import transport_for
from orderflow.clock import SystemClock
from orderflow.protocol.keys import idempotency_key, undo_key
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import (
    AttemptEntry,
    CompensationEntry,
    ProcessState,
    RetryBudget,
    StateRecord,
    StepState,
    StepStatus,
    instance_id_for,
)
from orderflow.settings import Settings
from orderflow.stores.base import StateStore
from orderflow.stores.cosmos import CosmosStores
from orderflow.stores.memory import InMemoryStateStore
from orderflow.workflows import CURRENT_WORKFLOW
from supervisor.sweep import run_sweep

EXPIRED_AGO_S = 60.0
"""How long ago the expired records' ``completeBy`` passed, seconds."""

SWEEP_READ_TIMEOUT_S = 1800.0
"""Read timeout of the sweep's Cosmos DB client, seconds. cosmosdb-server's cross-partition query time
grows faster than linearly with the container (measured on 2 cores: 0.24 s at 10,000 records, 5.3 s at
25,000, 33 s at 50,000), far past the SDK's default at 100,000."""


def settled_record(order_id: str, now: datetime) -> StateRecord:
    """A ``Processed`` record shaped like a real one: every step completed, its compensation log and
    its attempt history (so the emulator filters documents of realistic size)."""
    instance = instance_id_for(order_id, 1)
    steps = {
        step.name: StepState(
            status=StepStatus.COMPLETED,
            attempts=1,
            idempotency_key=idempotency_key(order_id, step.name),
            last_instance=instance,
            result={"id": f"{step.operation}-{order_id}"},
            started_at=now,
            completed_at=now,
        )
        for step in CURRENT_WORKFLOW.steps
    }
    log = [
        CompensationEntry(
            step=step.name,
            action=step.operation,
            undo=None if step.irreversible else step.undo,
            undo_key=undo_key(order_id, step.name),
            data={"id": f"{step.operation}-{order_id}"},
            recorded_at=now,
        )
        for step in CURRENT_WORKFLOW.steps
    ]
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="bench",
        process_state=ProcessState.PROCESSED,
        locked_by=instance,
        attempt=1,
        reply_to="client-bench",
        steps=steps,
        compensation_log=log,
        retry_budget=RetryBudget(limit=24, spent=3),
        workflow_version=CURRENT_WORKFLOW.version,
        attempt_history=[
            AttemptEntry(attempt=1, instance_id=instance, claimed_at=now, ended_at=now, outcome="Processed")
        ],
        created_at=now,
        updated_at=now,
    )


def expired_record(order_id: str, now: datetime) -> StateRecord:
    """A ``Processing`` record whose attempt died in its first step: ``completeBy`` passed
    :data:`EXPIRED_AGO_S` seconds before ``now``."""
    instance = instance_id_for(order_id, 1)
    first = CURRENT_WORKFLOW.steps[0].name
    steps = {
        step.name: StepState(idempotency_key=idempotency_key(order_id, step.name))
        for step in CURRENT_WORKFLOW.steps
    }
    steps[first] = StepState(
        status=StepStatus.RUNNING,
        attempts=1,
        idempotency_key=idempotency_key(order_id, first),
        last_instance=instance,
        reserved_calls=4,
        started_at=now,
    )
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="bench",
        process_state=ProcessState.PROCESSING,
        locked_by=instance,
        complete_by=now - timedelta(seconds=EXPIRED_AGO_S),
        attempt=1,
        reply_to="client-bench",
        steps=steps,
        retry_budget=RetryBudget(limit=24, spent=4),
        workflow_version=CURRENT_WORKFLOW.version,
        attempt_history=[AttemptEntry(attempt=1, instance_id=instance, claimed_at=now)],
        created_at=now,
        updated_at=now,
    )


def fill(store: StateStore, records: Iterable[StateRecord], *, threads: int) -> float:
    """Create ``records`` in ``store`` from ``threads`` threads; returns the seconds it took.

    Raises:
        AlreadyExists, TransientError: a create failed (the first failure is raised).
    """
    started = time.monotonic()
    if threads <= 1:
        for record in records:
            store.create(record)
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bench-fill") as pool:
            # list(): surface the first failure.
            list(pool.map(store.create, records))
    return time.monotonic() - started


def timed_sweep(store: StateStore, settings: Settings) -> dict[str, Any]:
    """One sweep pass over ``store``: seconds, records read (query items), query pages, re-queued."""
    counted = CountingStateStore(store)
    started = time.monotonic()
    report = run_sweep(
        states=counted,
        queues=InMemoryQueueFactory(),
        clock=SystemClock(),
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
    )
    elapsed = time.monotonic() - started
    return {
        "time_s": round(elapsed, 4),
        "records_read": counted.counts.total("query_item"),
        "query_pages": counted.counts.total("query_page"),
        "requeued": len(report.requeued),
    }


def measure(
    store: StateStore,
    sizes: Iterable[int],
    *,
    expired: int,
    threads: int,
    settings: Settings,
    store_name: str,
    progress: Callable[[str], None] = lambda _message: None,
) -> list[dict[str, Any]]:
    """Grow ``store`` through ``sizes`` settled records (ascending), measuring a sweep at each size.

    At each size: create the settled records still missing, create ``expired`` expired records, time the
    pass that re-queues them, then time a pass that finds nothing (the scan alone). One untimed pass
    before the first size warms the client (connections, partition key ranges). Records re-queued at a
    smaller size stay in the store as ``Pending``; the sweep's query does not match them.

    Returns:
        Per size: ``store``, ``settled``, ``expired``, ``load_s`` and ``load_per_s`` (creating the
        records added for this size), ``time_s``, ``records_read``, ``query_pages``, ``requeued``, and
        ``idle_pass`` (``time_s``, ``records_read``).
    """
    prefix = uuid.uuid4().hex[:6]
    results = []
    have = 0
    timed_sweep(store, settings)  # warm-up, on an empty store
    for size in sorted(set(sizes)):
        progress(f"supervisor sweep: {size:,} settled records in the {store_name} store")
        now = SystemClock().now()
        added = [settled_record(f"s{prefix}-{n}", now) for n in range(have, size)]
        load_s = fill(store, added, threads=threads)
        have = size
        fill(store, [expired_record(f"x{prefix}-{size}-{n}", now) for n in range(expired)], threads=threads)
        first = timed_sweep(store, settings)
        idle = timed_sweep(store, settings)
        results.append(
            {
                "store": store_name,
                "settled": size,
                "expired": expired,
                "load_s": round(load_s, 2),
                "load_per_s": round(len(added) / load_s, 1) if load_s > 0 else None,
                **first,
                "idle_pass": {"time_s": idle["time_s"], "records_read": idle["records_read"]},
            }
        )
    return results


def cosmos_sweeps(
    endpoints: LocalEndpoints,
    sizes: Iterable[int],
    *,
    expired: int,
    threads: int,
    settings: Settings,
    progress: Callable[[str], None] = lambda _message: None,
) -> list[dict[str, Any]]:
    """:func:`measure` on cosmosdb-server, in a database of its own, dropped afterwards."""
    database = f"benchsweep{uuid.uuid4().hex[:8]}"
    stores = CosmosStores.connect(
        endpoints.cosmos_endpoint,
        key=endpoints.cosmos_key,
        database=database,
        verify_tls=False,
        read_timeout=SWEEP_READ_TIMEOUT_S,
        transport=transport_for(endpoints.cosmos_endpoint, read_timeout_s=SWEEP_READ_TIMEOUT_S),
    )
    try:
        return measure(
            stores.state,
            sizes,
            expired=expired,
            threads=threads,
            settings=settings,
            store_name="cosmosdb-server",
            progress=progress,
        )
    finally:
        stores.client.delete_database(database)
        stores.close()


def memory_sweeps(
    sizes: Iterable[int],
    *,
    expired: int,
    settings: Settings,
    progress: Callable[[str], None] = lambda _message: None,
) -> list[dict[str, Any]]:
    """:func:`measure` on an in-memory store."""
    return measure(
        InMemoryStateStore(),
        sizes,
        expired=expired,
        threads=1,
        settings=settings,
        store_name="memory",
        progress=progress,
    )


def growth(results: list[dict[str, Any]], *, target: float = 2.0) -> dict[str, Any] | None:
    """How a store's sweep grows from its smallest to its largest size: the time ratio (held to
    ``target``: "< 2x") and the records-read ratio; None with fewer than two sizes."""
    if len(results) < 2:
        return None
    ordered = sorted(results, key=lambda r: int(r["settled"]))
    small, large = ordered[0], ordered[-1]
    return {
        "sizes": [small["settled"], large["settled"]],
        "time_ratio": below(ratio(large["time_s"], small["time_s"]), target),
        "idle_time_ratio": ratio(large["idle_pass"]["time_s"], small["idle_pass"]["time_s"]),
        "records_read_ratio": below(ratio(large["records_read"], small["records_read"]), target),
    }

"""Per-order operation counts: every role in this process over the real Cosmos DB and Storage-queue
adapters wrapped in the counting wrappers, each operation labelled with the function that made it."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.counting import OperationCounts, calling_function
from bench.counting.queues import CountingQueueFactory
from bench.counting.stores import CountingOrderStore, CountingStateStore
from bench.load import run_orderflow_load
from bench.orderflow_runs.stored import stored_bytes_report
from bench.orderflow_runs.throughput import (
    REMOTE_STEPS,
    WRITE_HELPERS,
    connect_stores,
    isolation,
    queue_role,
)
from bench.stats import at_most, per_order
from bench.workload import submissions
from demo.config import DEMO_SETTINGS
from demo.services.bindings import demo_bindings_json
from demo.tpch import DemoOrder
from devhost.emulators import LocalEndpoints
from devhost.host import DevHost
from devhost.queues.factory import StorageQueueFactory
from devhost.roles import ALL_ROLES
from devhost.settings import LocalSettings
from orderflow.breaker import circuit_breakers
from orderflow.clock import SystemClock
from orderflow.dependencies import Dependencies
from orderflow.settings import Settings
from orderflow.stores.cosmos import CosmosStores
from orderflow_client.client import OrderflowClient


@dataclass
class CountedSystem:
    """An in-process orderflow system whose adapters count every operation."""

    host: DevHost
    client: OrderflowClient
    stores: CosmosStores
    state_counts: OperationCounts
    order_counts: OperationCounts
    queue_counts: OperationCounts


@contextmanager
def counted_system(
    endpoints: LocalEndpoints, services_url: str, *, tag: str, overrides: Mapping[str, str] | None = None
) -> Iterator[CountedSystem]:
    """Every role in this process (one :class:`DevHost`) over counting-wrapped real adapters.

    Settings are the demo's (``DEMO_SETTINGS``) with ``overrides``, on a database and queues of the run's own.
    """
    env = {**DEMO_SETTINGS, **(overrides or {}), **isolation(tag)}
    env.update(
        {
            "SERVICE_BINDINGS": demo_bindings_json(services_url),
            "HOST_ID": f"h{tag}",
            "COSMOS_VERIFY_TLS": "false",
        }
    )
    settings, local = Settings.load(env), LocalSettings.load(env)
    stores = connect_stores(endpoints, settings)
    state_counts, order_counts, queue_counts = OperationCounts(), OperationCounts(), OperationCounts()
    label = calling_function(skip_modules=WRITE_HELPERS)
    queues = CountingQueueFactory(
        StorageQueueFactory.from_connection_string(endpoints.storage_connection_string),
        counts=queue_counts,
        role_of=queue_role(settings),
    )
    clock = SystemClock()
    deps = Dependencies(
        states=CountingStateStore(stores.state, counts=state_counts, label=label),
        orders=CountingOrderStore(stores.orders, counts=order_counts, label=label),
        queues=queues,
        clock=clock,
        breakers=circuit_breakers(stores.breakers, clock, settings.breakers, settings.queues.HOST_ID),
    )
    host = DevHost(deps, ALL_ROLES, settings=settings, local=local)
    # The client's queue operations are counted too: it shares the counting factory (the account key).
    (registered,) = settings.clients.clients()
    client = OrderflowClient(
        queues, reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
    )
    host.start()
    try:
        yield CountedSystem(host, client, stores, state_counts, order_counts, queue_counts)
    finally:
        host.stop()
        stores.close()


def count_breakdown(
    state: OperationCounts, orders: OperationCounts, queues: OperationCounts, *, processed: int
) -> dict[str, Any]:
    """Per-order operation counts of ``processed`` happy-path orders, and the targets they are held to.

    Point operations (reads, creates, replaces) and queue sends are per order by nature. Query pages and
    the items they return come from the loops (starter, supervisor, reply relay, admission control) and
    grow with the run's length as much as with its orders: they are given as totals and per order.

    Raises:
        ValueError: ``processed`` is not positive.
    """
    creates, replaces = state.total("create"), state.total("replace")
    writes = creates + replaces
    sends = queues.by_label("send")
    state_writes_by_function: Counter[str] = Counter(state.by_label("create"))
    state_writes_by_function.update(state.by_label("replace"))
    n = REMOTE_STEPS
    queue_sends = {
        role: per_order(sends.get(role, 0), processed)
        for role in ("orders", "agent_requests", "agent_responses", "replies")
    }
    return {
        "orders": processed,
        "remote_steps": n,
        "state_store": {
            "point_reads": per_order(state.total("read"), processed),
            "creates": per_order(creates, processed),
            "replaces": per_order(replaces, processed),
            "writes": per_order(writes, processed),
            "replace_conflicts": per_order(state.total("replace_conflict"), processed),
            "query_pages": per_order(state.total("query_page"), processed),
            "query_items": per_order(state.total("query_item"), processed),
            "counts": per_order(state.total("count"), processed),
        },
        "state_writes_by_function": {
            label: per_order(count, processed) for label, count in sorted(state_writes_by_function.items())
        },
        "state_reads_by_function": {
            label: per_order(count, processed) for label, count in state.by_label("read").items()
        },
        "state_queries_total": {
            "pages": state.by_label("query_page"),
            "items": state.by_label("query_item"),
            "counts": state.by_label("count"),
        },
        "order_store": {
            "writes": per_order(orders.total("create"), processed),
            "reads": per_order(orders.total("read"), processed),
        },
        "queue_sends": {**queue_sends, "total": per_order(sum(sends.values()), processed)},
        "targets": {
            "state_writes": at_most(per_order(writes, processed), n + 2),
            "point_reads": at_most(per_order(state.total("read"), processed), 1),
            "queue_messages": at_most(per_order(sum(sends.values()), processed), 2 * n + 3),
        },
    }


def counting_run(
    *,
    orders: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    concurrency: int,
    timeout_s: float,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per-order store and queue operations of happy-path orders, counted by the adapters in process.

    The roles run with the demo's settings and ``overrides``.

    Returns:
        :func:`count_breakdown` fields, plus ``method``, the load's ``outcomes``, ``all_processed``
        (the counts are per order only when every order was processed), and the stored bytes per order
        before and after the retention purge (:func:`bench.orderflow_runs.stored.stored_bytes_report`).
    """
    tag = f"c{uuid.uuid4().hex[:6]}"
    with counted_system(endpoints, services_url, tag=tag, overrides=overrides) as system:
        result = run_orderflow_load(
            system.client,
            submissions(orders, run=tag, reply_to=system.client.reply_queue),
            concurrency=concurrency,
            timeout_s=timeout_s,
        )
        processed = result.outcomes.get("Processed", 0)
        stored = stored_bytes_report(
            system.stores.database,
            states=system.stores.state,
            orders=system.stores.orders,
            clock=SystemClock(),
            settings=system.host.settings,
            processed=max(processed, 1),
        )
    breakdown = count_breakdown(
        system.state_counts, system.order_counts, system.queue_counts, processed=max(processed, 1)
    )
    return {
        "method": "in-process: every role in one DevHost over the Cosmos DB (cosmosdb-server) and Storage "
        "queue (Azurite) adapters, wrapped in bench.counting.stores / bench.counting.queues",
        "outcomes": dict(sorted(result.outcomes.items())),
        "all_processed": processed == len(orders),
        **breakdown,
        **stored,
    }

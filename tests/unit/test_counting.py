"""Counting wrappers of the store and queue ports: every call counted, labelled, and forwarded as given."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from bench.counting import UNLABELLED, OperationCounts, calling_function
from bench.counting.queues import CountingQueueFactory
from bench.counting.stores import CountingOrderStore, CountingStateStore
from orderflow.errors import AlreadyExists, ConcurrencyConflict
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import OrderDocument, ProcessState, RetryBudget, StateRecord
from orderflow.stores.base import StateQuery
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def record(order_id: str, state: ProcessState = ProcessState.PENDING) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="a",
        process_state=state,
        reply_to="client-a",
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v3",
        created_at=NOW,
        updated_at=NOW,
    )


# --- OperationCounts ------------------------------------------------------------------------------


def test_operation_counts_total_by_label_snapshot_and_reset() -> None:
    counts = OperationCounts()
    counts.add("create", "a")
    counts.add("create", "b", 2)
    counts.add("read")
    assert counts.total("create") == 3
    assert counts.total("replace") == 0
    assert counts.by_label("create") == {"a": 1, "b": 2}
    assert counts.snapshot() == {"create": {"a": 1, "b": 2}, "read": {UNLABELLED: 1}}
    counts.reset()
    assert counts.snapshot() == {}


def test_operation_counts_lose_nothing_across_threads() -> None:
    counts = OperationCounts()

    def work() -> None:
        for _ in range(1000):
            counts.add("send", "orders")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts.total("send") == 8000


# --- caller labels --------------------------------------------------------------------------------


def write_through_helper(store: CountingStateStore, new: StateRecord) -> None:
    _private_helper(store, new)


def _private_helper(store: CountingStateStore, new: StateRecord) -> None:
    store.create(new)


def test_a_call_is_labelled_with_the_public_function_that_made_it() -> None:
    store = CountingStateStore(InMemoryStateStore(), label=calling_function())
    write_through_helper(store, record("o-1"))
    # The private helper is passed over: its public caller is named.
    assert store.counts.by_label("create") == {f"{__name__}.write_through_helper": 1}


def test_skipped_modules_are_looked_through() -> None:
    store = CountingStateStore(InMemoryStateStore(), label=calling_function(skip_modules=(__name__,)))
    write_through_helper(store, record("o-1"))
    (label,) = store.counts.by_label("create")
    assert not label.startswith(__name__)
    assert label != "unknown"


# --- state and order stores -----------------------------------------------------------------------


def test_every_state_store_operation_is_counted_and_forwarded() -> None:
    inner = InMemoryStateStore()
    store = CountingStateStore(inner)
    created = store.create(record("o-1"))
    store.create(record("o-2", ProcessState.PROCESSED))
    read = store.get("o-1")
    assert read.item == created.item
    moved = read.item.model_copy(update={"process_state": ProcessState.PROCESSING})
    store.replace(moved, etag=read.etag)
    with pytest.raises(ConcurrencyConflict):
        store.replace(moved, etag=read.etag)  # stale ETag: a 412
    with pytest.raises(AlreadyExists):
        store.create(record("o-1"))
    page = store.query(StateQuery(), max_item_count=1)
    store.query(StateQuery(), max_item_count=1, continuation=page.continuation)
    assert store.count(StateQuery(process_states=(ProcessState.PROCESSING,))) == 1
    assert store.counts.snapshot() == {
        "count": {UNLABELLED: 1},
        "create": {UNLABELLED: 3},
        "query_item": {UNLABELLED: 2},
        "query_page": {UNLABELLED: 2},
        "read": {UNLABELLED: 1},
        "replace": {UNLABELLED: 2},
        "replace_conflict": {UNLABELLED: 1},
    }
    assert inner.get("o-1").item.process_state is ProcessState.PROCESSING


class KeywordRecorder:
    """A store that records the keyword arguments it is called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get(self, order_id: str, **kwargs: Any) -> Any:
        self.calls.append(("get", kwargs))
        return None

    def query(self, query: StateQuery, **kwargs: Any) -> Any:
        self.calls.append(("query", kwargs))
        return type("Page", (), {"items": [1, 2, 3], "continuation": None})()


def test_keyword_arguments_pass_through_unchanged() -> None:
    inner = KeywordRecorder()
    store = CountingStateStore(inner)  # type: ignore[arg-type]
    store.get("o-1", consistency="strong")
    store.query(StateQuery(), max_item_count=5, continuation="t", future_option=True)
    assert inner.calls == [
        ("get", {"consistency": "strong"}),
        ("query", {"max_item_count": 5, "continuation": "t", "future_option": True}),
    ]
    assert store.counts.total("query_item") == 3


def test_order_store_counts_creates_and_reads_into_a_shared_tally() -> None:
    shared = OperationCounts()
    store = CountingOrderStore(InMemoryOrderStore(), counts=shared, label=lambda: "role")
    document = OrderDocument.model_validate(
        {
            "id": "o-1",
            "orderId": "o-1",
            "customerId": "1",
            "customerName": "c",
            "currency": "USD",
            "amount": "10.00",
            "items": [{"sku": "10", "quantity": 1}],
            "carrier": "TRUCK",
            "replyTo": "client-a",
            "clientId": "a",
            "contentHash": "h",
            "receivedAt": NOW.isoformat(),
        }
    )
    store.create(document)
    assert store.get("o-1").order_id == "o-1"
    assert shared.snapshot() == {"create": {"role": 1}, "read": {"role": 1}}


# --- queues ---------------------------------------------------------------------------------------


def test_queue_operations_are_counted_under_the_queue_role() -> None:
    factory = CountingQueueFactory(
        InMemoryQueueFactory(), role_of=lambda name: "orders" if name == "orders" else "replies"
    )
    orders = factory.queue("orders")
    orders.send("a", message_id="m1")
    orders.send("b", message_id="m2")
    factory.queue("client-a").send("c", message_id="m3")
    received = orders.receive(max_messages=10, lock_s=30)
    assert [m.body for m in received] == ["a", "b"]
    orders.complete(received[0])
    orders.abandon(received[1])
    assert orders.approximate_count() == 1
    assert factory.queue("client-a").name == "client-a"
    assert factory.counts.snapshot() == {
        "abandon": {"orders": 1},
        "approximate_count": {"orders": 1},
        "complete": {"orders": 1},
        "receive": {"orders": 1},
        "received": {"orders": 2},
        "send": {"orders": 2, "replies": 1},
    }


def test_queue_roles_default_to_the_queue_name() -> None:
    factory = CountingQueueFactory(InMemoryQueueFactory())
    factory.queue("agent-payment").send("x", message_id="m1", correlation_id="o-1")
    assert factory.counts.by_label("send") == {"agent-payment": 1}

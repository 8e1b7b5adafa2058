"""The stored-bytes measurement's arithmetic: what a document weighs, per order, and a purge refused
when retention is off (the measurement itself runs against cosmosdb-server in test_bench_smoke)."""

from __future__ import annotations

import pytest

from bench.orderflow_runs.stored import bytes_per_order, container_bytes, document_bytes, purge_all_finished
from orderflow.clock import FakeClock
from orderflow.records import ProcessState, RetryBudget, StateRecord
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore

pytestmark = pytest.mark.unit


def test_a_document_weighs_its_compact_utf8_json_system_properties_included() -> None:
    # {"id":"é","_ts":1}: 18 characters, the é two bytes in UTF-8.
    assert document_bytes({"id": "é", "_ts": 1}) == 19
    assert container_bytes([{"a": 1}, {"b": "xy"}]) == (2, len('{"a":1}') + len('{"b":"xy"}'))
    assert container_bytes([]) == (0, 0)


def test_bytes_per_order_by_container_and_in_all() -> None:
    assert bytes_per_order({"orders": 1_400, "orderstate": 10_001}, 2) == {
        "orders": 700.0,
        "orderstate": 5000.5,
        "total": 5700.5,
    }
    with pytest.raises(ValueError, match="positive"):
        bytes_per_order({"orders": 1}, 0)


def test_the_purge_is_not_measured_where_retention_is_off() -> None:
    settings = Settings.load({}, COMPENSATION_LOG_RETENTION_S=0, DEAD_LETTER_RETENTION_S=0)
    with pytest.raises(ValueError, match="purge is off"):
        purge_all_finished(
            states=InMemoryStateStore(),
            orders=InMemoryOrderStore(),
            clock=FakeClock(),
            settings=settings,
            most=10,
        )


def _settled(order_id: str, clock: FakeClock) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="a",
        process_state=ProcessState.PROCESSED,
        reply_to="replies",
        retry_budget=RetryBudget(limit=10),
        workflow_version="order-v1",
        created_at=clock.now(),
        updated_at=clock.now(),
    )


def test_the_purge_runs_pass_after_pass_on_a_clock_past_the_retention_period_until_most() -> None:
    clock, states, orders = FakeClock(), InMemoryStateStore(), InMemoryOrderStore()
    settings = Settings.load({}, COMPENSATION_LOG_RETENTION_S=30 * 86_400)
    for n in range(150):
        states.create(_settled(f"a:o-{n}", clock))
    # A pass looks at 100 records at most: one pass reaches ``most``, the next takes the rest, and a
    # pass that finds nothing ends it. The records' clock has not moved: the purge's runs ahead of it.
    assert purge_all_finished(states=states, orders=orders, clock=clock, settings=settings, most=100) == 100
    assert purge_all_finished(states=states, orders=orders, clock=clock, settings=settings, most=1_000) == 50
    assert purge_all_finished(states=states, orders=orders, clock=clock, settings=settings, most=1_000) == 0
    assert all(states.get(f"a:o-{n}").item.data_purged_at is not None for n in range(150))

"""Retention of compensation logs (supervisor.retention) over the in-memory state store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orderflow.clock import FakeClock
from orderflow.records import CompensationEntry, ProcessState, RetryBudget, StateRecord
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryStateStore
from supervisor.retention import purge_expired_logs

pytestmark = pytest.mark.unit

DAY = timedelta(days=1)


def record(order_id: str, state: ProcessState, clock: FakeClock) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        process_state=state,
        reply_to="replies",
        retry_budget=RetryBudget(limit=10),
        workflow_version="order-v1",
        compensation_log=[
            CompensationEntry(
                step="charge_payment",
                action="charge",
                undo="refund",
                undo_key=f"{order_id}:charge_payment:undo",
                data={"chargeId": "ch-1", "amount": "10.00", "currency": "USD"},
                recorded_at=clock.now(),
                status="Compensated",
                undo_result={"undone": "true", "refundId": "re-1"},
            )
        ],
        created_at=clock.now(),
        updated_at=clock.now(),
    )


def test_finished_orders_lose_their_log_data_after_the_retention_period() -> None:
    clock = FakeClock()
    states = InMemoryStateStore()
    settings = Settings(COMPENSATION_LOG_RETENTION_S=30 * DAY.total_seconds())
    for order_id, state in [
        ("processed", ProcessState.PROCESSED),
        ("compensated", ProcessState.COMPENSATED),
        ("cancelled", ProcessState.CANCELLED),
        ("failed", ProcessState.COMPENSATION_FAILED),  # the operator still needs it
        ("error", ProcessState.ERROR),
    ]:
        states.create(record(order_id, state, clock))
    clock.advance((29 * DAY).total_seconds())
    assert purge_expired_logs(states=states, clock=clock, settings=settings).purged == 0

    clock.advance((2 * DAY).total_seconds())
    report = purge_expired_logs(states=states, clock=clock, settings=settings)

    assert report.purged == 3
    for order_id in ("processed", "compensated", "cancelled"):
        purged = states.get(order_id).item
        [entry] = purged.compensation_log
        assert (entry.data, entry.undo_result) == ({}, None)
        assert (entry.step, entry.undo_key, entry.status) == (
            "charge_payment",
            f"{order_id}:charge_payment:undo",
            "Compensated",
        )
        assert purged.compensation_log_purged_at == clock.now()
    for order_id in ("failed", "error"):
        assert states.get(order_id).item.compensation_log[0].data["chargeId"] == "ch-1"
    etags = {order_id: states.get(order_id).etag for order_id in ("processed", "compensated")}
    assert purge_expired_logs(states=states, clock=clock, settings=settings).purged == 0  # once only
    assert {order_id: states.get(order_id).etag for order_id in etags} == etags


def test_a_zero_retention_never_purges() -> None:
    clock = FakeClock()
    states = InMemoryStateStore()
    states.create(record("o-1", ProcessState.PROCESSED, clock))
    clock.advance((3650 * DAY).total_seconds())

    assert (
        purge_expired_logs(
            states=states, clock=clock, settings=Settings(COMPENSATION_LOG_RETENTION_S=0)
        ).purged
        == 0
    )
    assert states.get("o-1").item.compensation_log[0].data

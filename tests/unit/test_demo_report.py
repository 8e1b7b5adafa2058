"""The demo report's check that no order was driven by two attempts at once (demo.run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from demo.fleet import DevhostSpec, devhost_specs
from demo.outcome import attempt_overlaps
from orderflow.records import AttemptEntry, RetryBudget, StateRecord, format_utc

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(*tenures: tuple[float, float | None]) -> StateRecord:
    """A record of client ``demo``'s order ``o-1`` whose attempt k (1-based) held it from ``tenures[k-1]``'s
    start to end."""
    return StateRecord(
        id="demo:o-1",
        order_id="demo:o-1",
        client_id="demo",
        reply_to="replies",
        retry_budget=RetryBudget(limit=10),
        workflow_version="order-v1",
        attempt=len(tenures),
        locked_by=f"demo:o-1:{len(tenures)}",
        attempt_history=[
            AttemptEntry(
                attempt=n,
                instance_id=f"demo:o-1:{n}",
                claimed_at=at(start),
                ended_at=None if end is None else at(end),
                outcome=None if end is None else "recovered",
            )
            for n, (start, end) in enumerate(tenures, start=1)
        ],
        created_at=T0,
        updated_at=T0,
    )


def audit(*calls: tuple[str | None, float]) -> dict[str, Any]:
    """The audit's ``keys`` with one key of order ``o-1`` that received ``calls`` (instance, arrival)."""
    received = [{"instance": instance, "at": format_utc(at(s))} for instance, s in calls]
    return {"demo:o-1:reserve_inventory": {"orderId": "demo:o-1", "received": received}}


def test_tenures_that_follow_each_other_and_calls_inside_them_are_no_overlap() -> None:
    records = {"o-1": record((0, 10), (12, 20), (21, None))}
    calls = audit(("demo:o-1:1", 1), ("demo:o-1:1", 9.9), ("demo:o-1:2", 13), ("demo:o-1:3", 30), (None, 50))

    assert attempt_overlaps(records, calls) == {}


def test_a_tenure_that_never_ended_before_the_next_claim_is_an_overlap() -> None:
    assert attempt_overlaps({"o-1": record((0, None), (12, None))}, {}) == {
        "o-1": "attempt 1 still owned the record when attempt 2 was claimed"
    }
    assert set(attempt_overlaps({"o-1": record((0, 13), (12, None))}, {})) == {"o-1"}


def test_a_call_of_an_attempt_arriving_after_the_next_claim_is_an_overlap() -> None:
    overlaps = attempt_overlaps({"o-1": record((0, 10), (12, None))}, audit(("demo:o-1:1", 12.5)))

    assert overlaps == {
        "o-1": "a call of demo:o-1:1 (demo:o-1:reserve_inventory) arrived after the next attempt was claimed"
    }


def test_the_demo_runs_the_agents_in_the_last_process_and_everything_in_a_single_one() -> None:
    assert devhost_specs(1) == [DevhostSpec("devhost-1", "demo-1", "all")]
    specs = devhost_specs(3)
    # The submission beside the orchestrations it starts at once.
    assert [(s.host_id, s.roles) for s in specs] == [
        ("demo-1", "submission,starter,orchestrator,listener,supervisor"),
        ("demo-2", "submission,starter,orchestrator,listener,supervisor"),
        ("demo-agents", "agents"),
    ]
    with pytest.raises(ValueError, match="at least one"):
        devhost_specs(0)


def test_with_an_api_port_the_first_process_serves_the_operator_api_there() -> None:
    assert devhost_specs(1, api_port=8090) == [DevhostSpec("devhost-1", "demo-1", "all", 8090)]
    specs = devhost_specs(3, api_port=8090)
    assert [(s.roles, s.api_port) for s in specs] == [
        ("submission,starter,orchestrator,listener,supervisor,api", 8090),
        ("submission,starter,orchestrator,listener,supervisor", 0),
        ("agents", 0),
    ]

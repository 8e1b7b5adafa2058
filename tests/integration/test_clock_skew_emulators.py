"""Clock skew against the real parts: cosmosdb-server's own write stamps and two hosts sharing its stores.

cosmosdb-server stamps every create and replace with ``_ts`` (its clock, whole seconds), and azure-cosmos
returns it with the written document, so a host measures its clock on its own writes exactly as against
Cosmos DB (orderflow.clock_skew). The emulator runs on this machine's clock, so the system clock is a
host with no skew, and an offset from it a skewed one.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from intake.submission import handle_intake_message
from orderflow import telemetry
from orderflow.clock import FakeClock, OffsetClock, SystemClock
from orderflow.clock_skew import ClockCheckedStateStore, ClockSkewMonitor
from orderflow.dependencies import Dependencies
from orderflow.records import order_key
from orderflow.settings import Settings
from tests.unit.fakes import TEST_CLIENTS, client_for, order_body
from tests.unit.test_clock_skew import run_two_hosts

pytestmark = pytest.mark.integration


def _write(deps: Dependencies, states: ClockCheckedStateStore) -> str:
    reply_queue = f"client-{uuid.uuid4().hex[:8]}"
    client = client_for(reply_queue)
    order_id = order_key(client.client_id, f"skew-{uuid.uuid4().hex[:8]}")
    handle_intake_message(
        order_body(order_id, reply_to=reply_queue),
        client=client,
        orders=deps.orders,
        states=states,
        queues=deps.queues,
        clock=states.monitor.clock,
        settings=deps.settings,
    )
    return order_id


@pytest.mark.parametrize("deps", ["emulators"], indirect=True)
def test_cosmosdb_server_stamps_writes_and_a_host_in_step_with_it_measures_no_skew(
    deps: Dependencies,
) -> None:
    monitor = ClockSkewMonitor(SystemClock(), tolerance_s=2.0, host_id="h")
    states = ClockCheckedStateStore(deps.states, monitor)

    with telemetry.recording() as seen:
        order_id = _write(deps, states)

    assert states.get(order_id).stored_at is not None  # the SDK hands back the emulator's _ts
    last = states.monitor.last
    assert last is not None and last.low_s <= 0.0 <= last.high_s
    assert last.high_s - last.low_s < 2.0  # one second of _ts resolution plus the write's round trip
    assert seen["alert.clock_skew"] == 0


@pytest.mark.parametrize("deps", ["emulators"], indirect=True)
@pytest.mark.parametrize("offset_s", [10.0, -10.0])
def test_a_host_whose_clock_is_off_from_cosmosdb_servers_raises_clock_skew(
    deps: Dependencies, offset_s: float
) -> None:
    skewed = OffsetClock(SystemClock(), offset_s)
    states = ClockCheckedStateStore(deps.states, ClockSkewMonitor(skewed, tolerance_s=2.0, host_id="h"))

    with telemetry.recording() as seen:
        _write(deps, states)

    assert seen["alert.clock_skew"] == 1
    last = states.monitor.last
    assert last is not None and last.low_s <= offset_s <= last.high_s
    assert abs(last.low_s) > 1.0 and abs(last.high_s) > 1.0  # certainly beyond half the tolerance


@pytest.mark.parametrize("offset_s", [1.5, 1.9])
def test_two_hosts_skewed_within_the_tolerance_over_the_real_stores_make_no_overlapping_attempt(
    deps: Dependencies, offset_s: float
) -> None:
    clock = FakeClock()
    settings = Settings(CLIENTS=TEST_CLIENTS, SUPERVISOR_BACKOFF_INITIAL_S=0, SUPERVISOR_LEASE_ENABLED=False)
    shared = replace(deps, clock=clock, settings=settings)

    client = client_for(f"client-{uuid.uuid4().hex[:8]}")
    order_id = order_key(client.client_id, f"skew-{uuid.uuid4().hex[:8]}")

    run = run_two_hosts(shared, clock, offset_s, order_id=order_id, client=client)

    assert run.calls and run.claimed_2_at is not None
    assert run.overlapping_calls() == []

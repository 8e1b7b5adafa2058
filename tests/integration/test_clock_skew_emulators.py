"""Clock skew against the real parts: cosmosdb-server's own write stamps, and a host's store clock on them.

cosmosdb-server stamps every create and replace with ``_ts`` (its clock, whole seconds), and azure-cosmos
returns it with the written document, so a host measures its clock on its own writes exactly as against
Cosmos DB (orderflow.clock_skew). The emulator runs on this machine's clock, so the system clock is a
host with no skew, and an offset from it a skewed one.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from functools import partial

import pytest

from devhost.emulators import LocalEndpoints
from intake.submission import handle_intake_message
from orderflow import telemetry
from orderflow.clock import OffsetClock, SystemClock
from orderflow.clock_skew import ClockCheckedStateStore, ClockSkewMonitor
from orderflow.records import order_key
from orderflow.store_clock import StoreClock
from orderflow.stores.cosmos import CosmosStores
from tests.host_deps import HostDeps
from tests.unit.fakes import client_for, order_body

pytestmark = pytest.mark.integration


def _write(deps: HostDeps, states: ClockCheckedStateStore) -> str:
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
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )
    return order_id


@pytest.mark.parametrize("deps", ["emulators"], indirect=True)
def test_cosmosdb_server_stamps_writes_and_a_host_in_step_with_it_measures_no_skew(
    deps: HostDeps,
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
    deps: HostDeps, offset_s: float
) -> None:
    skewed = OffsetClock(SystemClock(), offset_s)
    states = ClockCheckedStateStore(deps.states, ClockSkewMonitor(skewed, tolerance_s=2.0, host_id="h"))

    with telemetry.recording() as seen:
        _write(deps, states)

    assert seen["alert.clock_skew"] == 1
    last = states.monitor.last
    assert last is not None and last.low_s <= offset_s <= last.high_s
    assert abs(last.low_s) > 1.0 and abs(last.high_s) > 1.0  # certainly beyond half the tolerance


@pytest.mark.parametrize("offset_s", [30.0, -30.0])
def test_a_host_far_off_reads_cosmosdb_servers_time_through_its_probe(
    local_endpoints: LocalEndpoints, offset_s: float
) -> None:
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint,
        key=local_endpoints.cosmos_key,
        database=f"probe{uuid.uuid4().hex[:8]}",
        verify_tls=False,
    )
    try:
        clock = StoreClock(
            OffsetClock(SystemClock(), offset_s), probe=partial(stores.breakers.clock_probe, "h")
        )
        first = clock.measure()
        time.sleep(0.35)
        clock.measure()
        time.sleep(0.35)
        clock.measure()
        bounds = clock.offset()
        true = datetime.now(UTC)
    finally:
        stores.close()

    assert first is not None and first.low_s <= offset_s <= first.high_s
    assert bounds is not None and bounds.low_s <= offset_s <= bounds.high_s
    assert bounds.high_s - bounds.low_s < first.high_s - first.low_s  # three writes narrowed it
    assert abs((clock.now() - true).total_seconds()) < 0.7
    assert clock.earliest() <= datetime.now(UTC) <= clock.latest()

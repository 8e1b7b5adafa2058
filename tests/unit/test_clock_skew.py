"""Hosts whose clocks differ: the tolerated skew built into the supervisor's deadlines, and its detection.

Two hosts share one set of stores. The *writer* claims an order, starts its first step (which sets
``completeBy`` on its clock) and runs the step's agent, which may start a call until the request's
deadline, a margin before ``completeBy``. The *supervisor* host sweeps and claims the next attempt on a
clock ``offset`` seconds ahead. Time is driven in real seconds (the writer's clock is the true one), so an
overlap is a call of attempt 1 started at or after attempt 2 was claimed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from intake.submission import handle_intake_message
from orchestrators.starter import run_starter_pass
from orderflow import telemetry
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock, OffsetClock
from orderflow.clock_skew import ClockCheckedStateStore, ClockSkewMonitor, skew_bounds
from orderflow.dependencies import Dependencies
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.step_requests import agent_deadline
from orderflow.stores.memory import InMemoryStateStore
from supervisor.sweep import run_sweep
from tests.unit.fakes import TEST_CLIENT, RecordingClient, memory_deps, order_body

pytestmark = pytest.mark.unit

ORDER = "a:o-1"
TICK_S = 0.1


@dataclass
class SkewRun:
    """What happened in real time (the writer's clock): attempt 1's agent calls and the next claim."""

    calls: list[datetime] = field(default_factory=list)
    claimed_2_at: datetime | None = None
    recovered_at: datetime | None = None

    def overlapping_calls(self) -> list[datetime]:
        """Calls of attempt 1 started once attempt 2 was claimed."""
        claimed = self.claimed_2_at
        return [] if claimed is None else [at for at in self.calls if at >= claimed]


def run_two_hosts(
    deps: Dependencies,
    clock: FakeClock,
    offset_s: float,
    *,
    order_id: str = ORDER,
    client: RegisteredClient = TEST_CLIENT,
) -> SkewRun:
    """Race a live attempt on the writer against a supervisor host ``offset_s`` ahead, tick by tick.

    Args:
        deps: The shared stores, queues and settings, on ``clock`` (the writer's, the true one).
        clock: Moved by :data:`TICK_S` per tick until attempt 2 is claimed (or a bound is hit).
        offset_s: How far the supervisor host's clock runs ahead of the writer's.
        order_id / client: The one order submitted, and its client (with its reply queue).
    """
    writer = deps
    supervisor = replace(deps, clock=OffsetClock(clock, offset_s))
    handle_intake_message(
        order_body(order_id, reply_to=client.reply_queue),
        client=client,
        orders=writer.orders,
        states=writer.states,
        queues=writer.queues,
        clock=writer.clock,
        settings=writer.settings,
    )
    orchestrations = RecordingClient()
    for host in (writer, supervisor):  # the writer claims: attempt 1 runs there
        run_starter_pass(
            states=host.states,
            client=orchestrations,
            clock=host.clock,
            settings=host.settings,
            response_queue=f"responses-{host is writer}",
            capacity=1,
        )
    claimed = writer.states.get(order_id).item
    assert claimed.locked_by == f"{order_id}:1" and claimed.complete_by is not None
    last_call = agent_deadline(claimed.complete_by, clock.now())  # the agent's own deadline, its clock
    run = SkewRun()
    end = claimed.complete_by + timedelta(seconds=deps.settings.CLOCK_SKEW_TOLERANCE_S + 5)
    while clock.now() < end and run.claimed_2_at is None:
        if clock.now() < last_call:
            run.calls.append(clock.now())  # the writer's agent may still start a call of attempt 1
        report = run_sweep(
            states=supervisor.states, queues=supervisor.queues, clock=supervisor.clock, settings=deps.settings
        )
        if report.requeued and run.recovered_at is None:
            run.recovered_at = clock.now()
        run_starter_pass(
            states=supervisor.states,
            client=orchestrations,
            clock=supervisor.clock,
            settings=deps.settings,
            response_queue="responses-supervisor",
            capacity=1,
        )
        if writer.states.get(order_id).item.attempt == 2:
            run.claimed_2_at = clock.now()
        clock.advance(TICK_S)
    return run


def skew_deps(clock: FakeClock) -> Dependencies:
    # Backoff 0: a recovered order is claimable at once, so only the deadline stands between attempts.
    return memory_deps(clock, SUPERVISOR_BACKOFF_INITIAL_S=0)


@pytest.mark.parametrize("offset_s", [1.5, 1.9, -1.9])
def test_two_hosts_with_skewed_clocks_within_the_tolerance_make_no_overlapping_attempt(
    offset_s: float,
) -> None:
    clock = FakeClock()
    deps = skew_deps(clock)
    assert offset_s < deps.settings.CLOCK_SKEW_TOLERANCE_S

    run = run_two_hosts(deps, clock, offset_s)

    assert run.calls, "attempt 1's agent made calls"
    assert run.claimed_2_at is not None, "attempt 2 was claimed in the end"
    assert run.overlapping_calls() == []
    record = deps.states.get(ORDER).item
    first, _ = record.attempt_history
    assert first.outcome == "recovered" and first.ended_at is not None
    # The supervisor acted on a deadline that had passed on the writer's clock too.
    assert run.recovered_at is not None and run.recovered_at >= first.expired_complete_by  # type: ignore[operator]


def test_a_skew_beyond_the_tolerance_overlaps_attempts_and_is_what_detection_is_for() -> None:
    # The limit of the guarantee, shown so the test above cannot pass by accident: 3.5 s ahead, with a
    # 2 s tolerance and a 1 s agent margin, the next attempt is claimed while the agent may still call.
    clock = FakeClock()
    deps = skew_deps(clock)

    run = run_two_hosts(deps, clock, 3.5)

    assert run.overlapping_calls() != []


def test_with_no_tolerance_a_supervisor_ahead_by_less_than_the_margin_plus_backoff_overlaps() -> None:
    # Today's comparison (completeBy < now on the supervisor's clock) is a tolerance of 0.
    clock = FakeClock()
    deps = memory_deps(clock, SUPERVISOR_BACKOFF_INITIAL_S=0, CLOCK_SKEW_TOLERANCE_S=0)

    run = run_two_hosts(deps, clock, 1.5)

    assert run.overlapping_calls() != []


# --- detection -----------------------------------------------------------------------------------


def checked(store_clock: FakeClock, offset_s: float, **monitor: object) -> ClockCheckedStateStore:
    """A host ``offset_s`` ahead of the store's clock, writing through the clock check."""
    host_clock = OffsetClock(store_clock, offset_s)
    return ClockCheckedStateStore(
        InMemoryStateStore(clock=store_clock),
        ClockSkewMonitor(host_clock, tolerance_s=2.0, host_id="h-1", **monitor),  # type: ignore[arg-type]
    )


def write_one(states: ClockCheckedStateStore, clock: FakeClock, order_id: str = ORDER) -> None:
    handle_intake_message(
        order_body(order_id),
        client=TEST_CLIENT,
        orders=memory_deps(clock).orders,
        states=states,
        queues=memory_deps(clock).queues,
        clock=states.monitor.clock,
        settings=Settings(),
    )


def test_the_bounds_bracket_the_offset_whatever_the_stamps_rounding() -> None:
    stamp = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    for true_offset in (-3.0, 0.0, 0.4, 2.6):
        for fraction in (0.0, 0.3, 0.99):
            store_time = stamp + timedelta(seconds=fraction)
            host = store_time + timedelta(seconds=true_offset)
            bounds = skew_bounds(host - timedelta(seconds=0.05), host + timedelta(seconds=0.05), stamp)
            assert bounds.low_s <= true_offset <= bounds.high_s
            assert bounds.high_s - bounds.low_s == pytest.approx(1.1)


@pytest.mark.parametrize("offset_s", [5.0, -5.0])
def test_a_host_whose_clock_is_far_from_the_stores_raises_clock_skew(offset_s: float) -> None:
    store_clock = FakeClock(datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC))
    states = checked(store_clock, offset_s)

    with telemetry.recording() as seen:
        write_one(states, store_clock)

    assert seen["alert.clock_skew"] == 1
    last = states.monitor.last
    assert last is not None and last.low_s <= offset_s <= last.high_s
    assert states.get(ORDER).item.process_state is ProcessState.PENDING  # the write itself went through


def test_a_host_within_half_the_tolerance_raises_nothing() -> None:
    store_clock = FakeClock(datetime(2026, 1, 1, 0, 0, 0, 900_000, tzinfo=UTC))
    states = checked(store_clock, 0.5)

    with telemetry.recording() as seen:
        write_one(states, store_clock)

    assert seen["alert.clock_skew"] == 0
    assert states.monitor.last is not None  # it did measure


def test_the_alert_is_raised_once_per_period_however_many_writes() -> None:
    now = [0.0]
    host = FakeClock()
    monitor = ClockSkewMonitor(host, tolerance_s=2.0, host_id="h-1", monotonic=lambda: now[0])
    stamp = host.now() - timedelta(seconds=5)  # the store's clock is 5 s behind the host's

    with telemetry.recording() as seen:
        for at in (0.0, 10.0, 299.0, 301.0):
            now[0] = at
            monitor.observe(host.now(), host.now(), stamp)

    assert seen["alert.clock_skew"] == 2  # at 0 s and 301 s

"""Hosts whose clocks differ: deadlines on the store's time, whatever the hosts' offsets; and detection.

Two hosts share one set of stores, whose stamps are the true time. The *writer* claims an order, starts
its first step (which sets ``completeBy``) and runs the step's agent, which may start a call until the
request's deadline, a margin before ``completeBy``. The *supervisor* host sweeps and claims the next
attempt. Each host runs on a :class:`~orderflow.store_clock.StoreClock` over its own skewed clock (as the
hosts wire it: :func:`~orderflow.store_clock.store_timed`). Time is driven in true seconds, so an overlap
is a call of attempt 1 started at or after attempt 2 was claimed, and an early recovery one made before
the attempt's ``completeBy``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from intake.submission import handle_intake_message
from orchestrators.starter import run_starter_pass
from orderflow import telemetry
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock, OffsetClock, latest
from orderflow.clock_skew import ClockCheckedStateStore, ClockSkewMonitor, skew_bounds
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.step_requests import agent_deadline
from orderflow.store_clock import store_timed
from orderflow.stores.memory import InMemoryStateStore
from supervisor.sweep import run_sweep
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, RecordingClient, memory_deps, order_body

pytestmark = pytest.mark.unit

ORDER = "a:o-1"
TICK_S = 0.1


@dataclass
class SkewRun:
    """What happened in true time: attempt 1's agent calls, its recovery and the next claim."""

    complete_by: datetime
    calls: list[datetime] = field(default_factory=list)
    claimed_2_at: datetime | None = None
    recovered_at: datetime | None = None

    def overlapping_calls(self) -> list[datetime]:
        """Calls of attempt 1 started once attempt 2 was claimed."""
        claimed = self.claimed_2_at
        return [] if claimed is None else [at for at in self.calls if at >= claimed]


def on_store_time(shared: HostDeps, true: FakeClock, offset_s: float) -> HostDeps:
    """A host whose clock is ``offset_s`` off the true one, wired as hosts are: on the store's time, with a
    probe whose stamp is the true time rounded down to the second (the store's ``_ts``)."""
    host = OffsetClock(true, offset_s)
    states, clock = store_timed(
        shared.states,
        host,
        shared.settings.alerts,
        shared.settings.queues.HOST_ID,
        probe=lambda: true.now().replace(microsecond=0),
    )
    return replace(shared, states=states, clock=clock)


def on_own_clock(shared: HostDeps, true: FakeClock, offset_s: float) -> HostDeps:
    """A host that reads its skewed clock directly (no store clock): what the control runs on."""
    return replace(shared, clock=OffsetClock(true, offset_s))


def run_two_hosts(
    writer: HostDeps,
    supervisor: HostDeps,
    clock: FakeClock,
    *,
    order_id: str = ORDER,
    client: RegisteredClient = TEST_CLIENT,
) -> SkewRun:
    """Race a live attempt on ``writer`` against the ``supervisor`` host, tick by tick of true time.

    Args:
        writer / supervisor: The two hosts, sharing stores, queues and settings.
        clock: The true clock, moved by :data:`TICK_S` per tick until attempt 2 is claimed (or a bound).
        order_id / client: The one order submitted, and its client (with its reply queue).
    """
    handle_intake_message(
        order_body(order_id, reply_to=client.reply_queue),
        client=client,
        orders=writer.orders,
        states=writer.states,
        queues=writer.queues,
        clock=writer.clock,
        steps=writer.settings.steps,
        starter=writer.settings.starter,
        queue_names=writer.settings.queues,
    )
    orchestrations = RecordingClient()
    for host in (writer, supervisor):  # the writer claims: attempt 1 runs there
        run_starter_pass(
            states=host.states,
            client=orchestrations,
            clock=host.clock,
            starter=host.settings.starter,
            steps=host.settings.steps,
            scans=host.settings.scans,
            queue_names=host.settings.queues,
            response_queue=f"responses-{host is writer}",
            capacity=1,
        )
    claimed = writer.states.get(order_id).item
    assert claimed.locked_by == f"{order_id}:1" and claimed.complete_by is not None
    request_deadline = agent_deadline(claimed.complete_by, writer.clock.now())
    run = SkewRun(complete_by=claimed.complete_by)
    end = clock.now() + timedelta(seconds=120)
    while clock.now() < end and run.claimed_2_at is None:
        if latest(writer.clock) < request_deadline:  # the agent's own check (agents.agent)
            run.calls.append(clock.now())
        report = run_sweep(
            states=supervisor.states,
            queues=supervisor.queues,
            clock=supervisor.clock,
            supervisor=supervisor.settings.supervisor,
            scans=supervisor.settings.scans,
            host_id=supervisor.settings.queues.HOST_ID,
        )
        if report.requeued and run.recovered_at is None:
            run.recovered_at = clock.now()
        run_starter_pass(
            states=supervisor.states,
            client=orchestrations,
            clock=supervisor.clock,
            starter=supervisor.settings.starter,
            steps=supervisor.settings.steps,
            scans=supervisor.settings.scans,
            queue_names=supervisor.settings.queues,
            response_queue="responses-supervisor",
            capacity=1,
        )
        if writer.states.get(order_id).item.attempt == 2:
            run.claimed_2_at = clock.now()
        clock.advance(TICK_S)
    return run


def shared_deps(clock: FakeClock) -> HostDeps:
    """Stores stamped with the true time; backoff 0: a recovered order is claimable at once, so only the
    deadline stands between attempts."""
    deps = memory_deps(clock, SUPERVISOR_BACKOFF_INITIAL_S=0)
    return replace(deps, states=InMemoryStateStore(clock=clock))


@pytest.mark.parametrize(
    ("writer_s", "supervisor_s"), [(-30.0, 30.0), (30.0, -30.0), (-30.0, -30.0), (0.0, 0.4)]
)
def test_hosts_far_off_the_stores_clock_recover_no_attempt_before_its_deadline(
    writer_s: float, supervisor_s: float
) -> None:
    clock = FakeClock(datetime(2026, 1, 1, 0, 0, 0, 300_000, tzinfo=UTC))
    shared = shared_deps(clock)
    writer = on_store_time(shared, clock, writer_s)

    run = run_two_hosts(writer, on_store_time(shared, clock, supervisor_s), clock)

    # The deadline is on the true time whatever the writer's clock: within the measurement's width of
    # the claim's true time plus CLAIM_TIMEOUT_S + START_LATENCY_S (the first step's budget).
    record = shared.states.get(ORDER).item
    first, _ = record.attempt_history
    budget = (run.complete_by - first.claimed_at).total_seconds()
    assert abs((first.claimed_at - datetime(2026, 1, 1, 0, 0, 0, 300_000, tzinfo=UTC)).total_seconds()) <= 0.5
    assert budget > 0
    assert run.calls, "attempt 1's agent made calls: its request was not born expired"
    assert run.claimed_2_at is not None, "attempt 2 was claimed in the end"
    assert run.recovered_at is not None and run.recovered_at >= run.complete_by
    # Recovered within the two hosts' measurement widths (1 s each here) past the deadline, not later.
    assert run.recovered_at <= run.complete_by + timedelta(seconds=2 + TICK_S)
    assert run.overlapping_calls() == []
    assert first.outcome == "recovered"


def test_on_their_own_clocks_the_same_hosts_recover_early_and_overlap() -> None:
    # The control, so the test above cannot pass by accident: the same two hosts reading their skewed
    # clocks directly recover attempt 1 at once, 13 s before its deadline by true time.
    clock = FakeClock(datetime(2026, 1, 1, 0, 0, 0, 300_000, tzinfo=UTC))
    shared = shared_deps(clock)

    run = run_two_hosts(on_own_clock(shared, clock, -30.0), on_own_clock(shared, clock, 30.0), clock)

    true_deadline = run.complete_by + timedelta(seconds=30)  # written on the writer's clock, 30 s behind
    assert run.recovered_at is not None and run.recovered_at < true_deadline - timedelta(seconds=10)
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
        steps=Settings.load({}).steps,
        starter=Settings.load({}).starter,
        queue_names=Settings.load({}).queues,
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

"""The store clock: a host's reading of the state store's time from the intervals its writes measure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from intake.submission import handle_intake_message
from orderflow.clock import FakeClock, OffsetClock, SteadyClock, earliest, latest
from orderflow.clock_skew import SkewBounds, skew_bounds
from orderflow.errors import PermanentError, TransientError
from orderflow.store_clock import PROBE_RETRY_S, UNMEASURED_SPAN_S, StoreClock, store_timed
from orderflow.stores.memory import InMemoryStateStore
from supervisor.recovery import is_overdue
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)


class Ticks:
    """A monotonic time source moved by hand."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> float:
        return self.at


def stamp(store: FakeClock) -> datetime:
    """The store's ``_ts`` of a write made now: its time rounded down to the second."""
    return store.now().replace(microsecond=0)


def write(host: StoreClock, store: FakeClock) -> SkewBounds:
    """One instantaneous write of ``host`` (its clock read just before and after it), measured."""
    bounds = skew_bounds(host.host.now(), host.host.now(), stamp(store))
    host.observe(bounds)
    return bounds


def test_writes_at_other_points_of_the_second_narrow_the_interval_around_the_true_offset() -> None:
    store = FakeClock(T0)
    host = StoreClock(OffsetClock(store, 30.25), monotonic=Ticks())

    first = write(host, store)
    assert (first.low_s, first.high_s) == pytest.approx((29.25, 30.25))  # 1 s wide: _ts resolution
    for _ in range(9):
        store.advance(0.37)
        write(host, store)

    bounds = host.offset()
    assert bounds is not None
    assert bounds.low_s <= 30.25 <= bounds.high_s
    assert bounds.high_s - bounds.low_s < 0.2  # ten writes at ten points of the second
    assert host.now() == store.now() + timedelta(seconds=30.25 - (bounds.low_s + bounds.high_s) / 2)
    assert abs((host.now() - store.now()).total_seconds()) < 0.1


@pytest.mark.parametrize("offset_s", [30.0, -30.0, 0.0, 4.6])
def test_earliest_and_latest_bracket_the_stores_time_whatever_the_hosts_offset(offset_s: float) -> None:
    store = FakeClock(T0 + timedelta(seconds=0.4))
    host = StoreClock(OffsetClock(store, offset_s), monotonic=Ticks())
    for _ in range(3):
        write(host, store)
        store.advance(0.45)

    assert host.earliest() <= store.now() <= host.latest()
    assert host.earliest() <= host.now() <= host.latest()
    assert (host.latest() - host.earliest()).total_seconds() <= 1.0


def test_the_supervisor_acts_once_a_deadline_certainly_passed_an_agent_stops_once_it_may_have() -> None:
    store = FakeClock(T0 + timedelta(seconds=0.5))
    ahead = StoreClock(OffsetClock(store, 30.0), monotonic=Ticks())
    behind = StoreClock(OffsetClock(store, -30.0), monotonic=Ticks())
    write(ahead, store)
    write(behind, store)
    deadline = behind.now() + timedelta(seconds=5)  # written by the host that is behind
    assert abs((deadline - (store.now() + timedelta(seconds=5))).total_seconds()) <= 0.5

    store.advance(4.9)  # 0.1 s before the deadline by the store's time, give or take the estimate
    assert not is_overdue(deadline - timedelta(seconds=0.5), ahead)  # not certainly passed: no recovery
    assert latest(behind) >= deadline - timedelta(seconds=0.5)  # may have passed: an agent starts nothing
    store.advance(2.0)  # past the deadline by more than one measurement's width
    assert is_overdue(deadline, ahead)
    assert earliest(ahead) <= store.now()


def test_a_plain_clock_is_exact_both_ways() -> None:
    clock = FakeClock(T0)

    assert earliest(clock) == latest(clock) == clock.now()


def test_a_host_with_no_measurement_reads_its_own_clock_and_acts_on_no_deadline() -> None:
    store = FakeClock(T0)
    host = StoreClock(OffsetClock(store, 30.0), monotonic=Ticks())

    assert host.offset() is None
    assert host.now() == store.now() + timedelta(seconds=30)
    # Nothing is certainly overdue, everything may have expired: the supervisor recovers nothing and an
    # agent starts nothing until the host has measured.
    assert host.earliest() == host.now() - timedelta(seconds=UNMEASURED_SPAN_S)
    assert host.latest() == host.now() + timedelta(seconds=UNMEASURED_SPAN_S)
    assert not is_overdue(store.now() - timedelta(days=30), host)


def test_a_host_with_no_recent_write_measures_with_its_probe_and_not_again_while_it_fails() -> None:
    store = FakeClock(T0 + timedelta(seconds=0.5))
    ticks = Ticks()
    calls: list[datetime] = []
    down = [True]

    def probe() -> datetime:
        calls.append(store.now())
        if down[0]:
            raise TransientError("store unavailable")
        return stamp(store)

    host = StoreClock(OffsetClock(store, -30.0), probe=probe, refresh_s=30.0, monotonic=ticks)

    assert host.offset() is None and len(calls) == 1  # the store is down: no measurement
    assert host.offset() is None and len(calls) == 1  # and it is not asked again at once
    ticks.at += PROBE_RETRY_S + 0.1
    down[0] = False
    measured = host.offset()
    assert len(calls) == 2 and measured is not None and measured.low_s <= -30.0 <= measured.high_s
    ticks.at += 10.0
    assert host.offset() == measured and len(calls) == 2  # fresh enough: no probe
    ticks.at += 25.0
    host.offset()
    assert len(calls) == 3  # older than refresh_s: measured again


def test_a_stepped_host_clock_is_measured_afresh_and_old_measurements_age_out() -> None:
    store = FakeClock(T0 + timedelta(seconds=0.5))
    moved = FakeClock(T0 + timedelta(seconds=0.5))
    ticks = Ticks()
    host = StoreClock(moved, window_s=60.0, monotonic=ticks)
    write(host, store)
    moved.advance(30.0)  # the host's clock is stepped 30 s ahead: the old interval shares no point

    write(host, store)

    stepped = host.offset()
    assert stepped is not None and stepped.low_s <= 30.0 <= stepped.high_s
    ticks.at += 61.0
    assert host.offset() == stepped  # older than the window: the last one known is kept


def test_store_timed_measures_every_write_of_the_host_into_its_clock() -> None:
    store = FakeClock(T0 + timedelta(seconds=0.5))
    deps = memory_deps(store)
    states, clock = store_timed(
        InMemoryStateStore(clock=store),
        OffsetClock(store, -30.0),
        deps.settings.alerts,
        deps.settings.queues.HOST_ID,
    )
    assert clock.offset() is None  # no probe: nothing measured yet

    handle_intake_message(
        order_body("a:o-1"),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=states,
        queues=deps.queues,
        clock=clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )

    measured = clock.offset()
    assert measured is not None and measured.low_s <= -30.0 <= measured.high_s
    assert abs((clock.now() - store.now()).total_seconds()) <= 0.5


class SteppableClock:
    """A wall clock that follows ``base`` and can be stepped (an NTP step, a ``date`` command)."""

    def __init__(self, base: FakeClock) -> None:
        self.base = base
        self.step_s = 0.0

    def now(self) -> datetime:
        return self.base.now() + timedelta(seconds=self.step_s)


@pytest.mark.parametrize("step_s", [20.0, -20.0, 0.3])
def test_a_wall_clock_stepped_after_the_host_measured_shifts_no_deadline_comparison(step_s: float) -> None:
    store = FakeClock(T0)  # the store's time, and true time
    wall = SteppableClock(store)

    def true_seconds() -> float:  # a step-free clock: it follows true time
        return (store.now() - T0).total_seconds()

    steady = SteadyClock(wall, steady=true_seconds)
    on_steady = StoreClock(steady, monotonic=Ticks())
    on_wall = StoreClock(wall, monotonic=Ticks())
    for _ in range(8):
        store.advance(0.37)
        for host in (on_steady, on_wall):
            write(host, store)

    wall.step_s = step_s
    store.advance(2.0)

    assert on_steady.earliest() <= store.now() <= on_steady.latest()
    assert abs((on_steady.now() - store.now()).total_seconds()) < 0.2
    # On the wall clock itself the step moves the interval: early recoveries or late calls.
    assert not on_wall.earliest() <= store.now() <= on_wall.latest()


def test_a_probe_that_fails_in_any_way_is_no_measurement_and_never_fails_a_reading() -> None:
    def refused() -> datetime:
        raise PermanentError("cosmos_403", "forbidden")

    host = StoreClock(FakeClock(T0), probe=refused, monotonic=Ticks())

    assert host.measure() is None
    assert host.offset() is None
    assert host.now() == T0
    assert host.earliest() == T0 - timedelta(seconds=UNMEASURED_SPAN_S)

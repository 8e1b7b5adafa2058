"""Leader election semantics on the in-memory lease, with a fake clock (devhost.lease).

The in-memory lease shares the local expiry guard and renewal schedule with the blob lease; only the
three service calls differ, and ``tests/integration/test_lease_azurite.py`` checks those on Azurite.
"""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from devhost.lease.blob import split_blob_path
from devhost.lease.election import NoLease
from devhost.lease.memory import InMemoryLease, InMemoryLeaseBlob
from devhost.settings import LocalSettings
from orderflow.errors import TransientError

pytestmark = pytest.mark.unit

PERIOD = 15
MARGIN = PERIOD / 5
RENEW_EVERY = PERIOD / 3


class FakeMonotonic:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeMonotonic:
    return FakeMonotonic()


@pytest.fixture
def blob(clock: FakeMonotonic) -> InMemoryLeaseBlob:
    return InMemoryLeaseBlob(clock)


def electors(blob: InMemoryLeaseBlob, clock: FakeMonotonic, n: int) -> list[InMemoryLease]:
    return [InMemoryLease(blob, duration_s=PERIOD, monotonic=clock, lease_id=f"e-{i}") for i in range(n)]


def leaders(candidates: list[InMemoryLease]) -> list[str]:
    return [c.lease_id for c in candidates if c.is_leader]


def test_one_leader_among_several_and_it_keeps_leading(blob: InMemoryLeaseBlob, clock: FakeMonotonic) -> None:
    candidates = electors(blob, clock, 4)
    assert [c.acquire() for c in candidates] == [True, False, False, False]
    for _ in range(120):  # two minutes of one-second ticks: renewals keep the same leader
        clock.advance(1)
        for candidate in candidates:
            candidate.maintain()
        assert leaders(candidates) == ["e-0"]
        assert blob.holder == "e-0"


def test_a_leader_that_stops_renewing_stops_leading_before_anyone_can_take_over(
    blob: InMemoryLeaseBlob, clock: FakeMonotonic
) -> None:
    a, b = electors(blob, clock, 2)
    assert a.acquire()
    started = clock.now
    a_stopped_at = b_started_at = math.nan
    while math.isnan(b_started_at):
        clock.advance(0.25)
        b.maintain()  # a is hung: it never renews again
        assert not (a.is_leader and b.is_leader)
        if math.isnan(a_stopped_at) and not a.is_leader:
            a_stopped_at = clock.now
        if b.is_leader:
            b_started_at = clock.now
    assert a_stopped_at - started == pytest.approx(PERIOD - MARGIN, abs=0.25)
    # The service keeps a's lease for the full period: b cannot have it before then.
    assert b_started_at - started == pytest.approx(PERIOD, abs=0.25)
    assert b_started_at - a_stopped_at >= MARGIN - 0.25


def test_a_stand_by_takes_over_within_one_period_of_the_last_renewal(
    blob: InMemoryLeaseBlob, clock: FakeMonotonic
) -> None:
    a, b = electors(blob, clock, 2)
    a.acquire()
    last_renewal = clock.now + RENEW_EVERY  # due 5 s after acquiring; done on that tick
    for _ in range(7):  # a renews while b stands by
        clock.advance(1)
        a.maintain()
        b.maintain()
    assert blob.holder == "e-0" and leaders([a, b]) == ["e-0"]
    # a dies. b polls once a second.
    while not b.is_leader:
        clock.advance(1)
        b.maintain()
    assert PERIOD <= clock.now - last_renewal <= PERIOD + 1  # one period, plus b's polling interval
    assert blob.holder == "e-1"
    assert not a.is_leader


def test_release_hands_leadership_over_at_once(blob: InMemoryLeaseBlob, clock: FakeMonotonic) -> None:
    a, b = electors(blob, clock, 2)
    assert a.acquire() and not b.acquire()
    a.release()
    assert not a.is_leader
    assert b.acquire()  # no waiting for the period to run out
    assert leaders([a, b]) == ["e-1"]
    a.release()  # not held any more: nothing happens, b keeps the lease
    assert blob.holder == "e-1"


def test_a_leader_whose_lease_was_taken_learns_it_on_renewal(
    blob: InMemoryLeaseBlob, clock: FakeMonotonic
) -> None:
    a, b = electors(blob, clock, 2)
    a.acquire()
    clock.advance(PERIOD + 1)  # a was paused past its lease; b took it
    assert b.acquire()
    assert not a.renew()
    assert not a.is_leader
    assert not a.maintain()  # tries to acquire again: b holds it
    assert leaders([a, b]) == ["e-1"]


def test_storage_outage_ends_leadership_locally_and_renewal_resumes_it(
    blob: InMemoryLeaseBlob, clock: FakeMonotonic
) -> None:
    (a,) = electors(blob, clock, 1)
    a.acquire()
    blob.fail = True
    with pytest.raises(TransientError):
        a.renew()
    # maintain swallows the transient failure: leader until the local term ends, then not.
    clock.advance(PERIOD - MARGIN - 0.5)
    assert a.maintain()
    clock.advance(1)
    assert not a.maintain()
    # Storage is back and nobody took the (expired) lease: renewing it restores leadership.
    blob.fail = False
    clock.advance(10)
    assert a.maintain()
    assert blob.holder == "e-0"


def test_maintain_renews_only_when_due(blob: InMemoryLeaseBlob, clock: FakeMonotonic) -> None:
    (a,) = electors(blob, clock, 1)
    a.acquire()
    blob.fail = True  # any call to the service would fail (and be logged); none is due yet
    clock.advance(RENEW_EVERY - 0.5)
    assert a.maintain()
    blob.fail = False
    clock.advance(1)
    assert a.maintain()
    # The renewal at RENEW_EVERY + 0.5 restarted the term from then.
    clock.advance(PERIOD - MARGIN - 0.5)
    assert a.is_leader


def test_duration_and_timing_are_validated(blob: InMemoryLeaseBlob) -> None:
    for duration in (14, 61, -1):
        with pytest.raises(ValueError, match="15-60"):
            InMemoryLease(blob, duration_s=duration)
    with pytest.raises(ValueError, match="shorter than the guarded term"):
        InMemoryLease(blob, duration_s=15, renew_every_s=10, safety_margin_s=5)
    with pytest.raises(ValueError, match="positive"):
        InMemoryLease(blob, duration_s=15, safety_margin_s=0)
    lease = InMemoryLease(blob, duration_s=30)
    assert (lease.renew_every_s, lease.safety_margin_s) == (10, 6)


def test_no_lease_always_leads() -> None:
    lease = NoLease()
    assert lease.acquire() and lease.renew() and lease.maintain() and lease.is_leader
    lease.release()
    assert lease.is_leader
    assert lease.renew_every_s == math.inf


def test_blob_path_is_container_slash_blob() -> None:
    assert split_blob_path("orderflow-leases/supervisor") == ("orderflow-leases", "supervisor")
    assert split_blob_path("leases/a/b") == ("leases", "a/b")
    for bad in ("leases", "/blob", "leases/"):
        with pytest.raises(ValueError, match="container/blob"):
            split_blob_path(bad)


def test_lease_settings_follow_the_storage_limits() -> None:
    local = LocalSettings.load({})
    assert local.SUPERVISOR_LEASE_ENABLED is True
    assert local.SUPERVISOR_LEASE_S == 15
    assert split_blob_path(local.SUPERVISOR_LEASE_BLOB) == ("orderflow-leases", "supervisor")
    for bad in ({"SUPERVISOR_LEASE_S": 14}, {"SUPERVISOR_LEASE_S": 61}, {"SUPERVISOR_LEASE_BLOB": "X/y"}):
        with pytest.raises(ValidationError):
            LocalSettings.load({}, **bad)

"""The submission's room for one more orchestration (devhost.capacity.InFlight): the backend is asked
before the first claim and then only while the count stands at the limit."""

from __future__ import annotations

import pytest

from devhost.capacity import InFlight

pytestmark = pytest.mark.unit


class Backend:
    """Running orchestrations, with the reads of them counted."""

    def __init__(self, running: int) -> None:
        self.running = running
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.running


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_below_the_limit_no_claim_asks_the_backend_after_the_first() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=4, read_every_s=0.25, clock=clock)
    for _ in range(3):
        assert room.take()
        clock.now += 10.0  # however long apart
    assert backend.reads == 1


def test_at_the_limit_the_backend_is_read_again_at_most_once_per_read_every_s() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=2, read_every_s=0.25, clock=clock)
    assert room.take() and room.take()
    backend.running = 2
    assert not room.take()  # read at once: the last read was at the first claim, no time has passed
    assert backend.reads == 1
    clock.now += 0.25
    assert not room.take()
    assert backend.reads == 2
    assert not room.take()  # the same instant: the count is trusted
    assert backend.reads == 2
    backend.running = 1  # one finished
    clock.now += 0.25
    assert room.take()
    assert backend.reads == 3
    assert not room.take()


def test_the_starters_read_and_claims_count_too() -> None:
    backend, clock = Backend(running=1), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    assert room.reserve(at_most=10) == 2
    room.release(2, used=2)  # the starter started two more: the process is at its limit
    assert not room.take()
    assert backend.reads == 1  # its own read stood in for the first claim's


def test_the_submission_and_a_starter_pass_together_never_claim_past_the_limit() -> None:
    backend, clock = Backend(running=1), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    capacity = room.reserve(at_most=10)  # a starter pass begins: room for two
    taken = sum(room.take() for _ in range(5))  # submissions while it claims
    clock.now += 1.0
    taken += sum(room.take() for _ in range(5))  # the submission's read at the limit keeps its room
    room.release(capacity, used=capacity)  # it claimed what it had room for
    assert backend.running + taken + capacity <= 3
    assert (capacity, taken) == (2, 0)


def test_room_a_starter_pass_did_not_use_is_the_submissions_again() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=4, read_every_s=0.25, clock=clock)
    assert room.reserve(at_most=3) == 3  # no more than a pass claims
    assert room.take()  # the fourth
    assert not room.take()
    room.release(3, used=1)
    assert room.take() and room.take()
    assert not room.take()


def test_a_pass_that_fails_part_way_counts_all_its_room_as_used() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    with pytest.raises(RuntimeError), room.reserving(at_most=2) as held:
        assert held.room == 2
        raise RuntimeError("the pass failed after some claims")
    assert room.take()  # the third
    assert not room.take()  # the two it may have started still count, until a read says otherwise
    with room.reserving(at_most=5) as held:
        assert held.room == 3  # the next pass reads the backend: none of them had started
        held.used = 0


def test_a_room_check_that_cannot_read_the_backend_leaves_the_order() -> None:
    def unreadable() -> int:
        raise ConnectionError("backend down")

    assert not InFlight(unreadable, limit=3).take_or_leave()
    assert InFlight(lambda: 0, limit=3).take_or_leave()

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


def at_the_limit() -> tuple[Backend, InFlight]:
    """A count whose limit of 2 two claims reached, both orchestrations scheduled since the one read."""
    backend = Backend(running=0)
    room = InFlight(backend, limit=2, read_every_s=0.25, clock=Clock())
    assert room.take() and room.take()
    room.started()
    room.started()
    return backend, room


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
    backend.running = 2  # both scheduled
    room.started()
    room.started()
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


def test_an_orchestration_that_ends_frees_its_room_at_once_without_a_read() -> None:
    # At the limit, a submission that came between two reads was turned away (left Pending for a starter)
    # although an orchestration had ended since: at 32 orders in flight on a limit of 32, 43% of them.
    backend, room = at_the_limit()
    assert not room.take()

    room.finished("a:o-1:1")

    assert room.take()
    assert not room.take()
    assert backend.reads == 1


def test_an_end_told_twice_frees_one_room() -> None:
    # A final episode the worker runs again (its completion was not taken) ends the same orchestration.
    _, room = at_the_limit()

    room.finished("a:o-1:1")
    room.finished("a:o-1:1")

    assert room.take()
    assert not room.take()


def test_an_end_told_again_after_a_read_that_still_listed_it_frees_its_room_again() -> None:
    # The backend lists an orchestration until it takes the final episode's completion: a read between
    # the two ends counted it again, so the second end frees the room that read took.
    backend, room = at_the_limit()
    room.finished("a:o-1:1")
    backend.running = 2  # o-1's completion not taken yet
    assert room.room() == 0

    room.finished("a:o-1:1")

    assert room.take()


def test_the_starters_read_and_claims_count_too() -> None:
    backend, clock = Backend(running=1), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    assert room.room() == 2
    assert room.take() and room.take()  # the starter started two more: the process is at its limit
    assert not room.take()
    assert backend.reads == 1  # its own read stood in for the first claim's


def test_a_starter_pass_holds_no_room_it_has_not_claimed() -> None:
    # A pass sized for all the room (STARTER_BATCH at least MAX_IN_FLIGHT_PER_HOST, as in the demo)
    # used to set it all aside while it queried: every submission meanwhile found no room, was left
    # Pending, and woke the starters, whose passes then raced the other submissions' own claims.
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=32, read_every_s=0.25, clock=clock)
    assert room.room() == 32  # a pass begins and queries for up to 32 records
    assert all(room.take() for _ in range(5))  # submissions while it queries: room is free
    assert room.room() == 27  # the next pass's read: theirs, on their way, and no more


def test_the_submission_and_a_starter_pass_together_never_claim_past_the_limit() -> None:
    backend, clock = Backend(running=1), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    capacity = room.room()  # a starter pass begins: room for two
    claims = [room.take() for _ in range(3)]  # a submission, then the pass's records, each as claimed
    backend.running += claims.count(True)  # what they claimed has started
    clock.now += 1.0
    claims += [room.take() for _ in range(3)]  # the read at the limit finds them running
    assert (capacity, claims) == (2, [True, True, False, False, False, False])
    assert backend.running == 3


def test_the_room_of_a_lost_claim_is_given_back() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=2, read_every_s=0.25, clock=clock)
    assert room.take() and room.take()
    assert not room.take()
    room.give_back()  # the pass's claim lost to the submission's: it started nothing
    assert room.take()
    assert not room.take()
    assert backend.reads == 1  # no read was needed to know


def test_a_count_that_only_gives_back_never_goes_below_nothing() -> None:
    room = InFlight(Backend(running=0), limit=1, read_every_s=0.25, clock=Clock())
    room.give_back()
    assert room.take()
    assert not room.take()


def test_a_room_check_that_cannot_read_the_backend_leaves_the_order() -> None:
    def unreadable() -> int:
        raise ConnectionError("backend down")

    assert not InFlight(unreadable, limit=3).take_or_leave()
    assert InFlight(lambda: 0, limit=3).take_or_leave()


def test_a_read_at_the_limit_still_counts_a_claim_whose_orchestration_is_not_scheduled_yet() -> None:
    # The backend lists an orchestration only once its claimant has scheduled it: a read between a take
    # and that start must not hand the same room to another claimant.
    backend, clock = Backend(running=2), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    assert room.room() == 1  # a starter pass begins
    assert room.take()  # it takes its record's room and claims it: not scheduled yet
    clock.now += 1.0
    assert not room.take()  # a submission at the limit reads the backend: that claim still counts
    assert backend.reads == 2
    assert room.room() == 0  # and so does the next pass's read


def test_a_lost_claim_read_past_gives_back_only_its_own_room() -> None:
    backend, clock = Backend(running=1), Clock()
    room = InFlight(backend, limit=3, read_every_s=0.25, clock=clock)
    assert room.room() == 2
    assert room.take()  # the pass's claim, not scheduled yet
    assert room.take()  # a submission's claim, not scheduled yet
    clock.now += 1.0
    assert not room.take()  # read at the limit: one running, two claims on their way
    room.give_back()  # the pass's claim lost: it started nothing
    assert room.take()
    assert not room.take()


def test_a_claim_once_started_is_counted_by_the_backend_alone() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=2, read_every_s=0.25, clock=clock)
    assert room.take() and room.take()
    backend.running = 2  # both scheduled
    room.started()
    room.started()
    assert not room.take()
    backend.running = 1  # one finished
    clock.now += 1.0
    assert room.take()  # no claim is still on its way: the read alone counts
    assert not room.take()


def test_a_submission_s_take_ends_with_its_block_however_the_block_ends() -> None:
    backend, clock = Backend(running=0), Clock()
    room = InFlight(backend, limit=1, read_every_s=0.25, clock=clock)
    with pytest.raises(RuntimeError), room.claiming("starts") as taken:
        assert taken == "starts"
        raise RuntimeError("the message failed after its claim")
    assert not room.take()  # its claim may have started: counted until the next read
    clock.now += 1.0
    assert room.take()  # the read finds nothing running and no take still on its way
    room.give_back()
    with room.claiming("starts") as taken:
        assert taken == "starts"
        with room.claiming("starts") as second:
            assert second is None  # full: a block without room ends no take
    clock.now += 1.0
    assert room.take()
    room.give_back()
    with room.claiming(None) as nothing:  # nothing starts in this process: no room is taken
        assert nothing is None
        assert room.take() and not room.take()

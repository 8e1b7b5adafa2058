"""Room for one more orchestration in this process: the submission's claims stop at
``MAX_IN_FLIGHT_PER_HOST`` as the starter's do, without a backend query per order."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from durabletask import client as dt_client

logger = logging.getLogger(__name__)

READ_EVERY_S = 0.25
"""Seconds between two reads of the running orchestrations while the count stands at the limit."""


class InFlight:
    """Counts this process's running orchestrations from the last read plus every claim since. Thread-safe.

    The count only overstates: an orchestration that finished since the last read is still in it. So
    ``take`` asks the backend only when the count reaches the limit (at most once per ``read_every_s``),
    or before its first claim; below the limit no claim waits for a query. The starter, which reads the
    backend on each of its passes anyway, reads it through :meth:`reserve`, which also sets aside the
    room its pass may claim: no ``take`` has that room meanwhile, and every read counts it until the pass
    ends (:meth:`release`), so the two never claim the same room.

    Args:
        running: Reads how many orchestrations run now (a backend query).
        limit: Most orchestrations the process runs at once.
        read_every_s: Seconds between two reads of ``running`` while the count stands at ``limit``.
        clock: Monotonic clock, seconds.
    """

    def __init__(
        self,
        running: Callable[[], int],
        *,
        limit: int,
        read_every_s: float = READ_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._running = running
        self._limit = limit
        self._read_every_s = read_every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._count = 0
        self._reserved = 0  # room held by starter passes (reserve), counted by every read

    def take(self) -> bool:
        """Take room for one more orchestration: False when the process runs ``limit`` already."""
        with self._lock:
            if self._read_at is None or (
                self._count >= self._limit and self._clock() >= self._read_at + self._read_every_s
            ):
                self._count = self._running() + self._reserved
                self._read_at = self._clock()
            if self._count >= self._limit:
                return False
            self._count += 1
            return True

    def take_or_leave(self) -> bool:
        """:meth:`take`, and False when the backend cannot be read: the room is unknown, so the order
        waits ``Pending`` for a starter rather than fail its message (which would dead-letter it in the
        end). The failure is logged."""
        try:
            return self.take()
        except Exception:
            logger.warning("room check failed: the order is left to the starter", exc_info=True)
            return False

    @contextmanager
    def reserving(self, at_most: int) -> Iterator[Reservation]:
        """A starter pass's :meth:`reserve` and :meth:`release` around its block. The block sets
        ``used`` to what it started; one that fails part-way counts all the room as used, since it may
        have started any of it (until the next read corrects the count)."""
        room = self.reserve(at_most)
        held = Reservation(room=room, used=room)
        try:
            yield held
        finally:
            self.release(room, used=held.used)

    def reserve(self, at_most: int) -> int:
        """Read the running orchestrations now (a backend query) and set aside up to ``at_most`` of the
        room left, for a starter pass; end it with :meth:`release`. Returns the room set aside."""
        with self._lock:
            self._count = self._running() + self._reserved
            self._read_at = self._clock()
            room = max(0, min(at_most, self._limit - self._count))
            self._reserved += room
            self._count += room
            return room

    def release(self, room: int, *, used: int) -> None:
        """End a reservation of ``room`` in which ``used`` orchestrations were started (they count from
        now as the submission's claims do); the rest is room again."""
        with self._lock:
            self._reserved -= room
            self._count -= room - used


@dataclass
class Reservation:
    """Room a starter pass set aside (:meth:`InFlight.reserving`) and how much of it the pass used."""

    room: int
    used: int


def running_orchestrations(client: dt_client.TaskHubGrpcClient) -> int:
    """Orchestrations of ``client``'s backend not yet finished (one backend query)."""
    running = client.get_all_orchestration_states(
        dt_client.OrchestrationQuery(
            runtime_status=[dt_client.OrchestrationStatus.RUNNING, dt_client.OrchestrationStatus.PENDING],
            fetch_inputs_and_outputs=False,
        )
    )
    return len(running)

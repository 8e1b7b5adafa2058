"""Room for one more orchestration in this process: the submission's claims stop at
``MAX_IN_FLIGHT_PER_HOST`` as the starter's do, without a backend query per order."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from durabletask import client as dt_client

logger = logging.getLogger(__name__)

T = TypeVar("T")

READ_EVERY_S = 0.25
"""Seconds between two reads of the running orchestrations while the count stands at the limit."""


class InFlight:
    """Counts this process's running orchestrations from the last read plus every claim since, less every
    orchestration that ended since (:meth:`finished`). Thread-safe.

    The count never understates, and overstates only by orchestrations that ended without telling it (a
    termination, a failure inside the runtime) until the next read. So ``take`` asks the backend only
    when the count reaches the limit (at most once per ``read_every_s``), or before its first claim; below
    the limit no claim waits for a query. The starter, which reads the backend on each of its passes
    anyway, reads it through :meth:`room` to size its query, then takes each record's room with
    :meth:`take` just before claiming it. Every claim, the submission's and the starter's, goes through
    the one count, so together they never claim past the limit; and a pass holds no room it has not
    claimed, so a submission arriving while a pass runs is not turned away from room that is free.

    The backend lists an orchestration only once its claimant has scheduled it, so a take stays *on its
    way* until its claimant says how the claim ended: :meth:`started` (scheduled, or perhaps: the backend
    counts it from then on) or :meth:`give_back` (it started nothing). Every read adds the takes still on
    their way, so no read hands their room to another claimant. A take must be ended exactly once.

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
        self._on_the_way = 0  # takes whose claimant has not yet said how the claim ended
        self._ended: set[str] = set()  # instances whose end was told since the last read

    def take(self) -> bool:
        """Take room for one more orchestration: False when the process runs ``limit`` already."""
        with self._lock:
            if self._read_at is None or (
                self._count >= self._limit and self._clock() >= self._read_at + self._read_every_s
            ):
                self._read()
            if self._count >= self._limit:
                return False
            self._count += 1
            self._on_the_way += 1
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
    def claiming(self, starts: T | None) -> Iterator[T | None]:
        """Room for one block, the submission's: ``starts`` when room was taken for it; None when the
        process is full, the backend cannot be read (:meth:`take_or_leave`), or ``starts`` is None
        (nothing starts here, so no room is taken). The take ends (:meth:`started`) when the block does,
        however it ends: whatever its claim started counts until the next read, then as the backend's."""
        taken = starts is not None and self.take_or_leave()
        try:
            yield starts if taken else None
        finally:
            if taken:
                self.started()

    def room(self) -> int:
        """Read the running orchestrations now (a backend query) and return the room left: how many
        records a starter pass may look for. Sets nothing aside (the pass takes each one's room with
        :meth:`take`)."""
        with self._lock:
            self._read()
            return max(0, self._limit - self._count)

    def started(self) -> None:
        """End a :meth:`take` whose claim scheduled its orchestration, or may have (it raised): the backend
        counts it from now on, and until the next read the count still holds it."""
        with self._lock:
            self._on_the_way = max(0, self._on_the_way - 1)

    def give_back(self) -> None:
        """End a :meth:`take` that started nothing (a claim lost to another claimant, or deferred): its
        room is free again."""
        with self._lock:
            self._on_the_way = max(0, self._on_the_way - 1)
            self._count = max(0, self._count - 1)

    def finished(self, instance_id: str) -> None:
        """Tell the count that orchestration ``instance_id`` of this process ended (its last episode
        returned or raised): its room is free at once, without a read.

        Every orchestration of this process was claimed through this count, and the worker runs its last
        episode before the backend takes the completion, so the count holds it whenever this is told. An
        end told again before the next read (the worker ran the last episode again) frees nothing more;
        told again after a read, which listed it while its completion was on its way, it frees the room
        that read gave it.
        """
        with self._lock:
            if instance_id in self._ended:
                return
            self._ended.add(instance_id)
            self._count = max(self._on_the_way, self._count - 1)

    def _read(self) -> None:
        """Count the backend's running orchestrations and the takes on their way (under the lock)."""
        self._count = self._running() + self._on_the_way
        self._read_at = self._clock()
        self._ended.clear()


def running_orchestrations(client: dt_client.TaskHubGrpcClient) -> int:
    """Orchestrations of ``client``'s backend not yet finished (one backend query)."""
    running = client.get_all_orchestration_states(
        dt_client.OrchestrationQuery(
            runtime_status=[dt_client.OrchestrationStatus.RUNNING, dt_client.OrchestrationStatus.PENDING],
            fetch_inputs_and_outputs=False,
        )
    )
    return len(running)

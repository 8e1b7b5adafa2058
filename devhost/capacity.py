"""Room for one more orchestration in this process: the submission's claims stop at
``MAX_IN_FLIGHT_PER_HOST`` as the starter's do, without a backend query per order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from durabletask import client as dt_client

READ_EVERY_S = 0.25
"""Seconds a count of the running orchestrations serves before it is read again from the backend (each
claim in between counts as one more)."""


class InFlight:
    """Counts this process's running orchestrations for the claims made between two reads. Thread-safe.

    Args:
        running: Reads how many orchestrations run now (a backend query).
        limit: Most orchestrations the process runs at once.
        read_every_s: Seconds between two reads of ``running``.
    """

    def __init__(self, running: Callable[[], int], *, limit: int, read_every_s: float = READ_EVERY_S) -> None:
        self._running = running
        self._limit = limit
        self._read_every_s = read_every_s
        self._lock = threading.Lock()
        self._read_at = -read_every_s
        self._count = 0

    def take(self) -> bool:
        """Take room for one more orchestration: False when the process runs ``limit`` already."""
        with self._lock:
            if time.monotonic() >= self._read_at + self._read_every_s:
                self._count = self._running()
                self._read_at = time.monotonic()
            if self._count >= self._limit:
                return False
            self._count += 1
            return True


def running_orchestrations(client: dt_client.TaskHubGrpcClient) -> int:
    """Orchestrations of ``client``'s backend not yet finished (one backend query)."""
    running = client.get_all_orchestration_states(
        dt_client.OrchestrationQuery(
            runtime_status=[dt_client.OrchestrationStatus.RUNNING, dt_client.OrchestrationStatus.PENDING],
            fetch_inputs_and_outputs=False,
        )
    )
    return len(running)

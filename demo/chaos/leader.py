"""The paused supervisor leader: every so often, the devhost process holding the supervisor lease is
SIGSTOPped for longer than the lease, then SIGCONTed (:class:`LeaderPauser`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from demo.chaos.config import HOLDER_RETRY_S
from demo.fleet import DevhostSpec
from devhost.lease.blob import current_holder
from devhost.settings import LocalSettings
from orderflow.settings import Settings

logger = logging.getLogger(__name__)

LeaseHolder = Callable[[], Mapping[str, str] | None]
"""Reads who holds the supervisor lease: the holder's metadata (``host``, ``pid``), or None."""


class PausableFleet(Protocol):
    """What :class:`LeaderPauser` needs of the devhost processes (:class:`demo.fleet.Fleet`)."""

    @property
    def specs(self) -> Mapping[str, DevhostSpec]:
        """The processes' specs by fleet name."""
        ...

    def pause(self, name: str, pid: int) -> bool:
        """SIGSTOP process ``name`` if its current pid is ``pid``; False otherwise."""
        ...

    def resume(self, name: str) -> None:
        """SIGCONT process ``name`` if it is paused."""
        ...


class LeaderPauser:
    """Every ``every_s`` seconds, SIGSTOPs the devhost process holding the supervisor lease for ``pause_s``
    seconds (longer than the lease), then SIGCONTs it; until stopped.

    The holder is the one the lease blob names (:func:`devhost.lease.blob.current_holder`): its host id and
    process id, which must be a devhost process of the fleet still running. When there is none (between
    holders, or the holder was just killed), it looks again ``retry_s`` seconds later. Pauses are
    ``every_s`` apart, start to start, and never overlap.

    Attributes:
        pauses: One entry per pause: the fleet name and pid of the paused process, when it was paused
            (epoch seconds), and the first other process seen holding the lease during the pause
            (``taken_over_by``: its fleet name; None when none was seen).
    """

    def __init__(
        self,
        fleet: PausableFleet,
        holder: LeaseHolder,
        *,
        every_s: float,
        pause_s: float,
        first_after_s: float | None = None,
        retry_s: float = HOLDER_RETRY_S,
    ) -> None:
        self._fleet = fleet
        self._first_after_s = every_s if first_after_s is None else first_after_s
        self._retry_s = retry_s
        self._holder = holder
        self._every_s = every_s
        self.pause_s = pause_s
        self._stop = threading.Event()
        self.pauses: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="chaos-pauser", daemon=True)

    def start(self) -> None:
        """Start pausing, the first pause ``first_after_s`` (default ``every_s``) seconds from now."""
        self._thread.start()

    def stop(self) -> None:
        """Stop pausing; a process paused now is resumed first."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.pause_s + 30)

    def _read_holder(self) -> tuple[str, int] | None:
        """The fleet name and pid of the lease holder, or None."""
        try:
            holder = self._holder()
        except Exception as exc:  # the pauser thread must outlive any failure to read the lease
            logger.warning("could not read the supervisor lease holder: %s", exc)
            return None
        if not holder or not holder.get("pid", "").isdigit():
            return None
        names = [name for name, spec in self._fleet.specs.items() if spec.host_id == holder.get("host")]
        return (names[0], int(holder["pid"])) if names else None

    def _run(self) -> None:
        next_pause = time.monotonic() + self._first_after_s
        while not self._stop.wait(max(0.0, next_pause - time.monotonic())):
            found = self._read_holder()
            if found is None or not self._fleet.pause(*found):
                next_pause = time.monotonic() + self._retry_s
                continue
            paused_at = time.monotonic()
            self._pause(*found)
            next_pause = max(paused_at + self._every_s, time.monotonic() + self._retry_s)

    def _pause(self, name: str, pid: int) -> None:
        """Keep ``name`` paused for :attr:`pause_s`, watching for another process to take the lease."""
        entry: dict[str, Any] = {"process": name, "pid": pid, "at": time.time(), "taken_over_by": None}
        ends = time.monotonic() + self.pause_s
        try:
            # A stop request cuts the pause short.
            while not self._stop.wait(min(self._retry_s, max(0.0, ends - time.monotonic()))):
                holder = self._read_holder()
                if entry["taken_over_by"] is None and holder is not None and holder[0] != name:
                    entry["taken_over_by"] = holder[0]
                if time.monotonic() >= ends:
                    break
        finally:
            self._fleet.resume(name)
        self.pauses.append(entry)


def lease_holder_reader(settings: Settings, local: LocalSettings) -> LeaseHolder:
    """Reads the holder of the supervisor lease blob ``local`` names, in ``settings``' storage account."""

    def read() -> Mapping[str, str] | None:
        return current_holder(settings.connections.STORAGE_CONNECTION_STRING, local.SUPERVISOR_LEASE_BLOB)

    return read
